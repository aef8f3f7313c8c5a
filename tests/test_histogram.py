"""Exact integer histograms: numpy's percentiles bit for bit, from values folded chunk by chunk."""

import numpy as np
import pytest

from archsim.report.histogram import IntHistogram, exact_sum
from archsim.report.memory_stats import MemoryStatsAccumulator, RunFigures, memory_stats, stats_tree
from tests.conftest import config, run

pytestmark = pytest.mark.unit


def _folded(values: np.ndarray, rng: np.random.Generator) -> IntHistogram:
    hist = IntHistogram()
    cuts = np.sort(rng.integers(0, values.size + 1, rng.integers(0, 6)))
    for part in np.split(values, cuts):
        hist.add(part)
    return hist


@pytest.mark.parametrize("seed", range(40))
def test_percentiles_equal_numpy_bit_for_bit_whatever_the_chunks(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    spread = int(rng.choice([3, 50, 10_000, 2**40]))
    values = rng.integers(-spread // 4, spread, n)
    if seed % 3 == 0:
        values = np.sort(values)[::-1]  # later chunks below earlier ones: the range grows downwards
    hist = _folded(values, rng)
    for q in (0, 1, 25, 50, 90, 99, 99.9, 100, 33.3):
        assert hist.percentile(q) == float(np.percentile(values, q)), (q, n)
    assert hist.n == n and hist.max() == int(values.max())
    assert hist.mean() == float(values.mean())


def test_a_value_repeated_and_a_single_value():
    hist = IntHistogram()
    hist.add(np.full(7, 123))
    assert hist.percentile(50) == 123.0 and hist.percentile(99) == 123.0 and hist.max() == 123
    one = IntHistogram()
    one.add(np.array([5]))
    assert one.percentile(99) == float(np.percentile([5], 99))


def test_the_exact_sum_does_not_overflow():
    values = np.full(4, 2**62, dtype=np.int64)
    assert exact_sum(values) == 2**64
    assert exact_sum(np.array([-3, 2**40, -(2**41)])) == -3 + 2**40 - 2**41


def test_stats_of_requests_folded_in_chunks_equal_the_whole_replays():
    cfg = config("HBM3")
    rng = np.random.default_rng(4)
    n = 4000
    result = run(cfg, np.sort(rng.integers(0, 3000, n)), rng.integers(0, 2**26, n) * 32, rng.random(n) < 0.3)
    org = cfg.organization
    bank = cfg.mapping.decode(result.requests.address).bank_in_pseudo_channel(org)
    acc = MemoryStatsAccumulator(cfg)
    order = rng.permutation(n)  # requests fold in any order
    for part in np.array_split(order, 7):
        acc.add(timestamp_cycles=result.requests.timestamp_cycles[part], source=result.requests.source[part],
                is_write=result.requests.is_write[part], pseudo_channel=result.pseudo_channel[part],
                global_bank=result.pseudo_channel[part].astype(np.int64) * org.banks_per_pseudo_channel + bank[part],
                accept_cycle=result.accept_cycle[part], done_cycle=result.done_cycle[part],
                request_class=result.request_class[part], bank_conflict=result.bank_conflict[part])
    figures = RunFigures(result.total_cycles, result.command_counts, result.qos_counts, 0.0, 0.0, None)
    assert stats_tree(acc, figures, reproducible=True) == memory_stats(result, reproducible=True)
    assert memory_stats(result)["memory"]["read_latency_cycles"]["p99"] == round(
        float(np.percentile((result.done_cycle - result.accept_cycle)[result.requests.is_write == 0], 99)), 6)


def test_values_spanning_a_run_are_counted_densely_and_a_far_value_turns_them_sparse():
    rng = np.random.default_rng(9)
    values = np.sort(rng.integers(0, 300_000, 1_000_000))  # about three values per cycle, in time order
    hist = IntHistogram()
    for part in np.array_split(values, 50):
        hist.add(part)
    assert hist.dense is not None and hist.dense.dtype == np.uint8 and hist.nbytes <= 600_000
    for q in (50, 99):
        assert hist.percentile(q) == float(np.percentile(values, q))
    hist.add(np.array([2**45]))  # a far outlier: a dense range to it would be huge
    assert hist.dense is None
    both = np.concatenate([values, [2**45]])
    assert hist.percentile(99) == float(np.percentile(both, 99)) and hist.max() == 2**45
    assert hist.mean() == float(both.mean())


def test_dense_counts_widen_before_they_overflow():
    hist = IntHistogram()
    values = [np.arange(100_000)]
    hist.add(values[0])
    hist.add(np.arange(1000))  # merged: dense, one byte a count
    for _ in range(300):  # a value seen 300,000 times: past one byte, then two
        values.append(np.full(1000, 7))
        hist.add(values[-1])
    values.insert(1, np.arange(1000))
    assert hist.dense is not None and hist.dense.dtype == np.uint32
    everything = np.concatenate(values)
    for q in (0.1, 50, 99):
        assert hist.percentile(q) == float(np.percentile(everything, q))
