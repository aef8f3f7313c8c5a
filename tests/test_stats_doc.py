"""Every stat carries a unit and a description, and docs/stats.md is generated from that table."""

import numpy as np
import pytest

from archsim.report.memory_stats import STAT_DOCS, doc_key, flatten, memory_stats
from scripts.gen_stats_doc import render
from tests.conftest import REPO, config, run

pytestmark = pytest.mark.component


def test_docs_are_current():
    assert (REPO / "docs" / "stats.md").read_text() == render(), "run scripts/gen_stats_doc.py"


def test_every_emitted_key_is_documented():
    cfg = config("HBM3")
    rng = np.random.default_rng(1)
    result = run(cfg, np.arange(500), rng.integers(0, 2**20, 500) * 32, rng.random(500) < 0.3)
    keys = {doc_key(k) for k in flatten(memory_stats(result))}
    assert keys <= set(STAT_DOCS), sorted(keys - set(STAT_DOCS))
    for unit, description in STAT_DOCS.values():
        assert unit and len(description) > 10
