"""docs/results.md carries the tool's own numbers: its comparison table equals a fresh run's."""

from __future__ import annotations

import pytest

from archsim.system import load_system_config, load_workload
from archsim.system.report import run_comparison
from archsim.system.results_doc import DOC, SYSTEMS, WORKLOAD, comparison_table

pytestmark = pytest.mark.system


def test_results_doc_table_matches_the_simulator():
    results = run_comparison([load_system_config(s) for s in SYSTEMS], load_workload(WORKLOAD))
    table = comparison_table(results)
    assert table in DOC.read_text(), "docs/results.md is stale: run `python -m archsim.system.results_doc`"
