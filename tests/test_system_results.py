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


@pytest.mark.slow     # about 100 s: the serving table's runs (5 scenarios x their systems) and the fabric's
def test_results_doc_serving_tables_match_fresh_runs():
    from archsim.serving.results_doc import fabric_rows, rows

    doc = DOC.read_text()
    for line in rows() + fabric_rows():
        assert line in doc, f"docs/results.md is stale at {line[:80]!r}: run `python -m archsim.system.results_doc`"


def test_a_ttft_rows_mechanism_names_a_ttft_term_not_decode():
    from archsim.serving.results_doc import _explain
    from archsim.serving.run import SystemRun

    def run(queueing: float, prefill: float, decode: float) -> SystemRun:
        breakdown = {"queueing": queueing, "kv_load": 0.0, "prefill": prefill, "decode": decode}
        return SystemRun(None, "ok", metrics={"breakdown_ms": breakdown, "prefix_hit_rate_by_tier": {}})

    # decode differs most (50 ms), but TTFT is queueing + KV load + prefill: prefill (2 ms) is what differs there
    runs = {"a": run(6.9, 15.5, 3002.6), "b": run(6.7, 17.5, 2952.6)}
    assert _explain(runs, "ttft_ms").endswith("the largest difference is prefill")
    assert _explain(runs, "e2e_ms").endswith("the largest difference is decode")
    assert _explain(runs, "tpot_ms").endswith("the largest difference is decode")
