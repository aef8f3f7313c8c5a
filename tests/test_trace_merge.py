"""Physical traces with a source table (version 2) and `archsim trace merge`: several hosts' traces into one
trace of the memory they share, in timestamp order, streamed."""

import json
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.errors import TraceError
from archsim.trace.merge import host_names, merge_batches, merged_sources
from archsim.trace.native import load_physical_trace, save_physical_trace
from archsim.trace.stream import ArraySource, NpzSource
from archsim.trace.text_formats import write_dramsim3

pytestmark = pytest.mark.unit


def _host(seed, n, with_pnm=False, span=5_000):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, span, n)).astype(np.int64)  # many equal timestamps across and within inputs
    address = (rng.integers(0, 1 << 20, n) * 64).astype(np.uint64)
    source = (rng.random(n) < 0.3).astype(np.uint8) if with_pnm else np.zeros(n, np.uint8)
    return ts, address, (rng.random(n) < 0.25).astype(np.uint8), source


def _reference(hosts, sources):
    """The merge by one whole sort: timestamp, then input, then the input's own order."""
    parts = []
    for k, (ts, address, is_write, source) in enumerate(hosts):
        port = np.where(source == 1, sources.index("pnm") if "pnm" in sources else k, k)
        parts.append((ts, np.full(ts.size, k), np.arange(ts.size), address, is_write, port))
    ts, which, pos, address, is_write, port = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.lexsort((pos, which, ts))
    return ts[order], address[order], is_write[order], port[order]


@pytest.mark.parametrize("batch", [1, 7, 64, 100_000])
def test_the_streamed_merge_equals_one_whole_sort_whatever_the_batches(batch):
    hosts = [_host(1, 900, with_pnm=True), _host(2, 500), _host(3, 1300, with_pnm=True)]
    inputs = [ArraySource(*h, batch_requests=batch) for h in hosts]
    sources = merged_sources(inputs, ("host0", "host1", "host2"), ["a", "b", "c"])
    assert sources == ("host0", "host1", "host2", "pnm")
    got = [np.concatenate(c) for c in zip(*merge_batches(inputs, sources), strict=True)]
    for mine, want in zip(got, _reference(hosts, sources), strict=True):
        assert np.array_equal(mine, want)


def test_merge_writes_a_version_2_trace_naming_the_ports(tmp_path):
    a, b = tmp_path / "a.trace", tmp_path / "b.npz"
    ta = _host(4, 300)
    write_dramsim3(a, ta[0], ta[1], ta[2])
    tb = _host(5, 200, with_pnm=True)
    save_physical_trace(b, *tb)
    out = tmp_path / "m.npz"
    result = CliRunner().invoke(main, ["trace", "merge", str(a), str(b), "-o", str(out), "--names", "host3,host7"])
    assert result.exit_code == 0, result.output
    merged = load_physical_trace(out)
    assert merged.sources == ("host3", "host7", "pnm")
    counts = np.bincount(merged.source, minlength=3)
    assert counts.tolist() == [300, int((tb[3] == 0).sum()), int((tb[3] == 1).sum())]
    assert (np.diff(merged.timestamp_cycles) >= 0).all()
    for port, (ts, address) in ((0, ta[:2]), (1, (tb[0][tb[3] == 0], tb[1][tb[3] == 0]))):
        assert np.array_equal(merged.address[merged.source == port], address)  # each host's own order kept
        assert np.array_equal(merged.timestamp_cycles[merged.source == port], ts)
    with zipfile.ZipFile(out) as archive, archive.open("header.npy") as handle:
        header = json.loads(bytes(np.lib.format.read_array(handle)).decode())
    assert header["version"] == 2 and header["sources"] == ["host3", "host7", "pnm"]


def test_a_version_1_trace_reads_as_host_and_pnm(tmp_path):
    path = tmp_path / "v1.npz"
    save_physical_trace(path, *_host(6, 50, with_pnm=True))
    _set_header(path, lambda meta: {**{k: v for k, v in meta.items() if k != "sources"}, "version": 1})
    assert load_physical_trace(path).sources == ("host", "pnm")
    assert NpzSource(str(path)).sources == ("host", "pnm")


def _set_header(path, change):
    """Rewrite the .npz's header through `change` (the columns and their digest stay)."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "r") as archive, archive.open("header.npy") as handle:
        meta = json.loads(bytes(np.lib.format.read_array(handle)).decode())
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.frombuffer(json.dumps(change(meta)).encode(), dtype=np.uint8))
    members["header.npy"] = buffer.getvalue()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.mark.parametrize(("sources", "says"), [
    (["host0", "gpu"], "'gpu' is not a port name"),
    (["host0", "host0"], "named twice"),
    ([], "a list of port names"),
    ("host0", "a list of port names"),
    ([f"host{k}" for k in range(70)], "more than the 65"),
    (["host0"], "source 1 is not a port of the trace"),
])
def test_a_bad_source_table_is_one_error_naming_the_header(tmp_path, sources, says):
    path = tmp_path / "t.npz"
    save_physical_trace(path, *_host(7, 40, with_pnm=True))
    _set_header(path, lambda meta: {**meta, "sources": sources})
    for read in (load_physical_trace, NpzSource):
        with pytest.raises(TraceError) as info:
            read(str(path))
        assert says in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize(("names", "says"), [
    ("host0,pnm", "'pnm' is not a host"), ("host0,host0", "named twice"), ("host0", "1 names for 2 input"),
    ("host0,cpu", "'cpu' is not a host"),
])
def test_bad_host_names_are_refused(names, says):
    with pytest.raises(TraceError) as info:
        host_names(2, names)
    assert says in str(info.value) and info.value.where == "--names"


def test_merge_refuses_a_trace_of_several_hosts_and_a_text_output(tmp_path):
    multi = tmp_path / "multi.npz"
    ts, address, is_write, _ = _host(8, 60)
    save_physical_trace(multi, ts, address, is_write, (np.arange(60) % 2).astype(np.uint8), sources=("host0", "host1"))
    single = tmp_path / "one.trace"
    write_dramsim3(single, ts, address, is_write)
    runner = CliRunner()
    result = runner.invoke(main, ["trace", "merge", str(multi), str(single), "-o", str(tmp_path / "m.npz")])
    assert result.exit_code == 2 and "2 hosts" in result.output and "multi.npz" in result.output
    result = runner.invoke(main, ["trace", "merge", str(single), str(single), "-o", str(tmp_path / "m.trace")])
    assert result.exit_code == 2 and "--output" in result.output
    assert not (tmp_path / "m.npz").exists() and not (tmp_path / "m.trace").exists()
