"""Functional executor: kernels vs the numpy reference, partitioning, access traces, bad programs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from archsim.errors import ProgramError
from archsim.isa import KERNELS_DIR, assemble_file, assemble_text, load_table
from archsim.pnm import (
    DecodeAttentionSpec,
    DramImage,
    Executor,
    UnitConfig,
    decode_attention,
    partition_kv_heads,
    place_decode_attention,
    random_inputs,
    run_decode_attention,
    run_program,
    trace_program,
)
from archsim.pnm.machine import dtypes
from archsim.pnm.machine.semantics import HANDLERS

pytestmark = pytest.mark.component

TABLE = load_table()
# Max abs error vs the float64 reference on the dequantized cache (isa/README.md, "Accuracy").
DATAPATH_TOLERANCE = {"fp16": 2e-3, "bf16": 2e-3, "fp8e4m3": 1e-4, "int8": 1e-4}
# ... and vs the reference on the unquantized fp32 cache (standard-normal data).
END_TO_END_TOLERANCE = {"fp16": 2e-3, "bf16": 2e-2, "fp8e4m3": 2.5e-1, "int8": 5e-2}


def solve(spec: DecodeAttentionSpec, *, units: int = 1, splits: int = 1, tile: int = 64,
          token_major: bool = False, seed: int = 0):
    q, k, v = random_inputs(spec, np.random.default_rng(seed))
    placement = place_decode_attention(spec, q, k, v, tile_tokens=tile, token_major=token_major, seed=seed)
    run = run_decode_attention(placement, units=units, splits=splits)
    q_seen = dtypes.round_trip(q, spec.io_dtype)
    kwargs = {"softmax_scale": spec.scale, "window_tokens": spec.window_tokens}
    seen = decode_attention(q_seen, placement.k_seen, placement.v_seen, spec.context_tokens, **kwargs)
    original = decode_attention(q, k, v, spec.context_tokens, **kwargs)
    return run, seen, original, placement


def spec(**overrides: object) -> DecodeAttentionSpec:
    base = {"batch": 1, "kv_heads": 1, "group": 1, "qk_dim": 64, "v_dim": 64, "context_tokens": (100,)}
    base.update(overrides)
    if "v_dim" not in overrides and "qk_dim" in overrides and not overrides.get("latent"):
        base["v_dim"] = base["qk_dim"]
    return DecodeAttentionSpec(**base)


# id -> (spec, run options). Covers head_dim 64..256, group 1..8 (MHA, GQA, MQA), contexts 1..8K
# including non-multiples of the tile / page, batch 1..8, every KV dtype, both layouts, windows.
GRID = {
    "mha-d64-b3": (spec(batch=3, kv_heads=4, context_tokens=(1, 77, 300)), {}),
    "gqa-d128-bf16-token-major": (spec(batch=2, kv_heads=2, group=4, qk_dim=128, context_tokens=(1000, 513),
                                       kv_dtype="bf16"), {"token_major": True}),
    "mqa-d256-ctx8k": (spec(kv_heads=1, group=8, qk_dim=256, context_tokens=(8192,)), {"tile": 128}),
    "gqa-d128-b8": (spec(batch=8, kv_heads=2, group=8, qk_dim=128,
                         context_tokens=(1, 2, 63, 64, 65, 500, 1023, 2000)), {"tile": 128}),
    "gqa-int8-g32": (spec(batch=2, kv_heads=2, group=4, qk_dim=128, context_tokens=(700, 129),
                          kv_dtype="int8", scale_group=32), {}),
    "gqa-fp8-per-token": (spec(batch=2, kv_heads=2, group=2, context_tokens=(333, 64),
                               kv_dtype="fp8e4m3", scale_group=64), {}),
    "gqa-fp8-unscaled-d192": (spec(group=3, qk_dim=192, context_tokens=(250,), kv_dtype="fp8e4m3"), {}),
    "swa-gqa": (spec(batch=2, kv_heads=2, group=4, qk_dim=128, context_tokens=(1000, 50),
                     window_tokens=256), {}),
    "paged-d128-b4": (spec(batch=4, kv_heads=2, group=4, qk_dim=128, context_tokens=(1, 15, 16, 333),
                           block_tokens=16), {}),
    "paged-bf16-token-major": (spec(batch=2, kv_heads=2, group=2, context_tokens=(4097, 100), kv_dtype="bf16",
                                    block_tokens=64), {"token_major": True}),
    "paged-int8-swa": (spec(batch=2, kv_heads=2, group=4, qk_dim=128, context_tokens=(900, 31),
                            kv_dtype="int8", scale_group=64, window_tokens=100, block_tokens=32), {}),
    "paged-mqa-ctx8k": (spec(group=8, qk_dim=128, context_tokens=(8000,), block_tokens=256), {}),
    "mla-b2": (spec(batch=2, group=16, qk_dim=576, v_dim=512, latent=True, context_tokens=(1000, 3),
                    softmax_scale=1 / math.sqrt(192)), {"tile": 32}),
    "mla-paged-bf16": (spec(group=16, qk_dim=576, v_dim=512, latent=True, context_tokens=(2000,),
                            kv_dtype="bf16", block_tokens=64), {}),
    "mla-int8": (spec(batch=2, group=8, qk_dim=576, v_dim=512, latent=True, context_tokens=(300, 257),
                      kv_dtype="int8", scale_group=64), {"tile": 32}),
    "io-fp16": (spec(batch=2, kv_heads=2, group=2, context_tokens=(200, 90), io_dtype="fp16"), {}),
}


@pytest.mark.parametrize("case", GRID)
def test_kernel_matches_reference(case: str) -> None:
    problem, options = GRID[case]
    run, seen, original, _ = solve(problem, **options)
    assert run.output.shape == (problem.batch, problem.query_heads, problem.v_dim)
    assert np.abs(run.output - seen).max() <= DATAPATH_TOLERANCE[problem.kv_dtype]
    assert np.abs(run.output - original).max() <= END_TO_END_TOLERANCE[problem.kv_dtype]
    if problem.io_dtype != "fp32":  # outputs crossed the host port as io_dtype
        assert np.array_equal(run.output, dtypes.round_trip(run.output, problem.io_dtype))


@pytest.mark.parametrize(("problem", "units", "splits"), [
    (spec(batch=2, kv_heads=5, group=2, context_tokens=(130, 7)), 3, 1),
    (spec(batch=2, kv_heads=2, group=4, context_tokens=(1000, 70), window_tokens=300), 4, 2),
    (spec(batch=3, kv_heads=1, group=4, context_tokens=(10, 600, 64), kv_dtype="int8", scale_group=32,
          block_tokens=32), 3, 3),
    (spec(batch=2, group=16, qk_dim=576, v_dim=512, latent=True, context_tokens=(700, 40)), 3, 3),
])
def test_partitioned_runs_match_reference(problem: DecodeAttentionSpec, units: int, splits: int) -> None:
    run, seen, _, _ = solve(problem, units=units, splits=splits, tile=32)
    assert np.abs(run.output - seen).max() <= 1e-4
    assert len(run.traces) == units
    if splits > 1:  # the splits together read the cache exactly once, plus the partial records
        single, _, _, placement = solve(problem, units=units // splits, tile=32)

        def kv_bytes(traces: list) -> int:
            lo, hi = placement.defines["K_ADDR"], placement.defines["PART_ADDR"]
            return sum(int(t.access_bytes[(t.access_address >= lo) & (t.access_address < hi)].sum())
                       for t in traces)

        assert kv_bytes(run.traces) == kv_bytes(single.traces)
        records = problem.batch * problem.kv_heads * splits * run.programs[0].symbols["REC_BYTES"]
        assert sum(t.totals()["dram_write_bytes"] for t in run.traces) == records


def test_partition_by_kv_head() -> None:
    assignments = partition_kv_heads(kv_heads=7, units=6, splits=2)
    assert [(a.head0, a.nheads, a.split) for a in assignments] == [
        (0, 3, 0), (0, 3, 1), (3, 2, 0), (3, 2, 1), (5, 2, 0), (5, 2, 1)]
    with pytest.raises(ValueError, match="some units would be idle"):
        partition_kv_heads(kv_heads=2, units=3)
    with pytest.raises(ValueError, match="multiple of splits"):
        partition_kv_heads(kv_heads=4, units=3, splits=2)


# ------------------------------------------------------------------ access traces and op counts
def test_trace_accesses_and_op_counts() -> None:
    problem = spec(batch=2, kv_heads=2, group=4, qk_dim=64, context_tokens=(100, 37))
    run, _, _, placement = solve(problem, tile=32)
    trace = run.traces[0]
    d = placement.defines
    row = problem.qk_dim * 2
    accesses = list(trace.dram_accesses())
    assert [(a.address, a.size_bytes, a.is_write) for a in accesses[:5]] == [
        (d["LENS_ADDR"], 8, False),           # sequence lengths
        (d["K_ADDR"], 32 * row, False),        # first K tile of (sequence 0, head 0), contiguous
        (d["V_ADDR"], 32 * row, False),
        (d["K_ADDR"] + 32 * row, 32 * row, False),  # the prefetched second tile
        (d["V_ADDR"] + 32 * row, 32 * row, False),
    ]
    tokens = sum(problem.context_tokens) * problem.kv_heads
    totals = trace.totals()
    assert totals["dram_read_bytes"] == 8 + 2 * tokens * row
    assert totals["dram_write_bytes"] == 0
    assert totals["macs"] == tokens * problem.group * (problem.qk_dim + problem.v_dim)
    assert totals["host_in_bytes"] == problem.batch * problem.query_heads * problem.qk_dim * 4
    assert totals["host_out_bytes"] == problem.batch * problem.query_heads * problem.v_dim * 4
    per_op = trace.by_mnemonic(TABLE)
    assert per_op["VEXP"]["exp_ops"] == tokens * problem.group
    assert per_op["QK"]["macs"] == tokens * problem.group * problem.qk_dim
    # every DRAM access belongs to a DMA instruction and accesses are in program order
    units = trace.units(TABLE)
    assert set(units[trace.access_instr]) == {"dma"}
    assert np.all(np.diff(trace.access_instr) >= 0)
    assert trace.counter("dram_read_bytes").sum() == trace.access_bytes.sum()


def test_trace_mode_matches_computing_run_and_needs_no_kv_data() -> None:
    problem = spec(batch=2, kv_heads=2, group=2, context_tokens=(300, 45), block_tokens=16,
                   kv_dtype="int8", scale_group=32)
    q, k, v = random_inputs(problem, np.random.default_rng(3))
    placement = place_decode_attention(problem, q, k, v)
    program = assemble_file(placement.kernel, defines=placement.defines)
    _, full = run_program(program, dram=placement.dram, host_input=q.ravel())
    fast = trace_program(program, dram=placement.dram)
    assert np.array_equal(full.counts, fast.counts) and np.array_equal(full.pc, fast.pc)
    assert np.array_equal(full.access_address, fast.access_address)

    # A 128K-token cache that is never materialized: reserve it, place only the lengths.
    big = 131072
    dram = DramImage(2**34)
    dram.write(0, np.array([big], dtype="<i4"))
    row = 128 * 2
    dram.reserve(4096, 2 * big * row)
    defines = {"HEAD_DIM": 128, "GROUP": 8, "TILE": 512, "CTX_CAP": big, "K_ADDR": 4096,
               "V_ADDR": 4096 + big * row}
    trace = trace_program(assemble_file(KERNELS_DIR / "gqa_decode.s", defines=defines), dram=dram,
                          config=UnitConfig(sram_size_bytes=2**20))
    assert trace.totals()["dram_read_bytes"] == 4 + 2 * big * row
    assert trace.totals()["macs"] == big * 8 * 256


def test_every_opcode_has_semantics() -> None:
    assert set(HANDLERS) == set(TABLE.by_mnemonic)


# ------------------------------------------------------------------ datatypes
def test_fp8_e4m3_conversion_is_exact_rne_and_saturating() -> None:
    finite = dtypes.FP8E4M3_VALUES[~np.isnan(dtypes.FP8E4M3_VALUES)]
    assert np.array_equal(dtypes.fp8e4m3_to_fp32(dtypes.fp32_to_fp8e4m3(finite)), finite)
    assert dtypes.FP8E4M3_VALUES[0x7E] == 448 and dtypes.FP8E4M3_VALUES[0x01] == 2.0**-9
    positive = dtypes.FP8E4M3_VALUES[:0x7F]
    ties = (positive[:-1] + positive[1:]) / 2
    assert np.all(dtypes.fp32_to_fp8e4m3(ties) % 2 == 0)  # ties go to the even code
    samples = np.array([1e6, -500, 1.0625, 1.07], np.float32)
    assert list(dtypes.fp8e4m3_to_fp32(dtypes.fp32_to_fp8e4m3(samples))) == [448, -448, 1.0, 1.125]


def test_bf16_and_int8_quantization() -> None:
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5], dtype=np.float32)
    assert list(dtypes.round_trip(x, "bf16")) == [1.0, 1.0, 1 + 2**-6, -2.5]
    rows = np.array([[0.5, -1.27, 0.0, 0.01], [0, 0, 0, 0]], dtype=np.float32)
    codes, scales = dtypes.quantize(rows, "int8", 2)
    np.testing.assert_allclose(scales, [[1.27 / 127, 0.01 / 127], [1.0, 1.0]], rtol=1e-6)
    assert codes.view(np.int8).tolist() == [[50, -127, 0, 127], [0, 0, 0, 0]]
    back = dtypes.dequantize(codes, scales, "int8", 2, 4)
    assert np.abs(back - rows).max() <= 1.27 / 127 / 2 + 1e-7


# ------------------------------------------------------------------ bad programs
def run_text(text: str, *, config: UnitConfig | None = None, dram: DramImage | None = None,
             host: np.ndarray | None = None) -> None:
    program = assemble_text(text, filename="bad.s")
    run_program(program, dram=dram or DramImage(2**20), host_input=host, config=config)


@pytest.mark.parametrize(("text", "message"), [
    ("LI r1, 64\nLI r2, 4\nSEND r1, r2\nHALT\n",
     "bad.s: line 3: SEND r1, r2: reads SRAM [0x40, 0x50) but byte 0x40 was never written"),
    ("LI r1, 1\nLI r2, 16\nLI r3, 4096\nLD r0, r3, r1, r2, r2\nLI r4, 4\nSEND r0, r4\nHALT\n",
     "bad.s: line 6: SEND r0, r4: reads SRAM [0x0, 0x10) while a load into [0x0, 0x10) is outstanding "
     "(missing WAIT)"),
    ("LI r1, 1\nLI r2, 16\nLI r3, 8192\nLD r0, r3, r1, r2, r2\nHALT\n",
     "bad.s: line 4: LD r0, r3, r1, r2, r2: reads DRAM [0x2000, 0x2010) that was never written"),
    ("LI r1, 1\nLI r2, 16\nLI r3, 1048570\nLD r0, r3, r1, r2, r2\nHALT\n",
     "bad.s: line 4: LD r0, r3, r1, r2, r2: DRAM [0xffffa, 0x10000a) is beyond the configured "
     "1048576-byte DRAM"),
    ("LI r1, 8\nRECV r0, r1\nHALT\n",
     "bad.s: line 2: RECV r0, r1: host port underflow: needs 8 elements, 4 left"),
    ("LI r1, 1\nVFILL r0, r1, 0.0\nVNORM r0, r0, r0\nHALT\n",
     "bad.s: line 3: VNORM r0, r0, r0: compute instruction before CFG.SHAPE"),
    ("LI r1, -3\nLI r2, 4\nRECV r1, r2\nHALT\n",
     "bad.s: line 3: RECV r1, r2: sram_dst (r1) is -3, must be >= 0"),
    ("LI r1, 64\nLDR r2, r1, 2\nHALT\n",
     "bad.s: line 2: LDR r2, r1, 2: int32 at SRAM 0x42 is not 4-byte aligned"),
    ("NOP\n", "bad.s: pc 1: ran past the last instruction without HALT"),
    ("CFG.KV int8, 0\nHALT\n", "bad.s: line 1: CFG.KV int8, 0: int8 KV needs scale_group > 0"),
    ("CFG.SHAPE 8, 16, 8, 1\nHALT\n", "bad.s: line 1: CFG.SHAPE 8, 16, 8, 1: v_dim 16 exceeds v_pitch 8"),
])
def test_runtime_errors_name_the_instruction(text: str, message: str) -> None:
    dram = DramImage(2**20)
    dram.write(4096, np.arange(16, dtype=np.uint8))
    with pytest.raises(ProgramError) as info:
        run_text(text, dram=dram, host=np.zeros(4, np.float32), config=UnitConfig(dram_capacity_bytes=2**20))
    assert str(info.value) == message


def test_sram_overflow_is_caught_before_simulation_naming_the_instruction() -> None:
    kernel, setup = KERNELS_DIR / "gqa_decode.s", KERNELS_DIR / "contiguous.inc"
    program = assemble_file(kernel, defines={"TILE": 512, "HEAD_DIM": 256})
    line = next(i for i, text in enumerate(setup.read_text().splitlines(), 1) if text.strip() == "LI ka, KA")
    expanded = next(i for i, text in enumerate(kernel.read_text().splitlines(), 1)
                    if text.strip() == "CONTIGUOUS_SETUP")
    with pytest.raises(ProgramError) as info:
        Executor(program, dram=DramImage(2**20), config=UnitConfig(sram_size_bytes=256 * 1024))
    assert re.fullmatch(
        rf"{re.escape(str(setup))}: line {line}: LI r18, \d+: SRAM region KA \[0x[0-9a-f]+, 0x[0-9a-f]+\) "
        rf"\(declared at {re.escape(str(KERNELS_DIR / 'common.inc'))}:\d+\) does not fit the 262144-byte "
        rf"scratchpad; the program needs \d+ bytes \(in macro CONTIGUOUS_SETUP expanded at "
        rf"{re.escape(str(kernel))}:{expanded}\)", str(info.value)), str(info.value)


def test_missing_wait_in_a_kernel_is_caught(tmp_path: Path) -> None:
    """Double buffering with one WAIT too permissive: compute reads a tile still in flight."""
    for name in ("gqa_decode.s", "common.inc", "contiguous.inc"):
        text = (KERNELS_DIR / name).read_text()
        (tmp_path / name).write_text(text.replace("WAIT  TRANSFERS_PER_TILE", "WAIT  2 * TRANSFERS_PER_TILE"))
    problem = spec(context_tokens=(200,))
    q, k, v = random_inputs(problem, np.random.default_rng(0))
    placement = place_decode_attention(problem, q, k, v)
    placement.kernel = tmp_path / "gqa_decode.s"
    with pytest.raises(ProgramError) as info:
        run_decode_attention(placement)
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'common.inc'))}: line \d+: QK r27, r26, r18, r22, r10: "
                        r"reads SRAM \[0x[0-9a-f]+, 0x[0-9a-f]+\) while a load into "
                        r"\[0x[0-9a-f]+, 0x[0-9a-f]+\) "
                        r"is outstanding \(missing WAIT\) \(in macro ATTEND expanded at .*common.inc:\d+\) "
                        rf"\(in macro STEP expanded at {re.escape(str(tmp_path / 'gqa_decode.s'))}:\d+\)",
                        str(info.value)), str(info.value)


def test_trace_only_placement_of_long_contexts() -> None:
    """Caches reserved, not stored: the timing model's way to get traces of big problems."""
    problem = spec(batch=2, kv_heads=4, group=4, qk_dim=128, context_tokens=(65536, 30001), block_tokens=256,
                   kv_dtype="fp8e4m3", scale_group=128)
    placement = place_decode_attention(problem)
    assert placement.queries is None and placement.k_seen is None
    run = run_decode_attention(placement, units=2, compute=False)
    row_bytes = 128 * 1 + 4  # fp8 codes and one fp32 scale per row
    kv_bytes = sum(problem.context_tokens) * problem.kv_heads * 2 * row_bytes
    table_bytes = problem.batch * placement.defines["MAX_BLOCKS"] * 4 + problem.batch * 4
    assert sum(t.totals()["dram_read_bytes"] for t in run.traces) == kv_bytes + 2 * table_bytes
    assert sum(t.totals()["macs"] for t in run.traces) == sum(problem.context_tokens) * 16 * 256
    assert all(stored is False for _, _, stored in placement.dram.segments()[2:])


def test_reference_matches_explicit_softmax() -> None:
    """The reference itself, against a per-head loop (GQA head mapping h // group, window)."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 4, 8))
    k = rng.standard_normal((1, 2, 10, 8))
    v = rng.standard_normal((1, 2, 10, 3))
    out = decode_attention(q, k, v, (9,), softmax_scale=0.5, window_tokens=4)
    for head in range(4):
        keys = range(9 - 4, 9)  # query at position 8 sees positions 5..8
        scores = np.array([0.5 * q[0, head] @ k[0, head // 2, t] for t in keys])
        weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        expected = sum(w * v[0, head // 2, t] for w, t in zip(weights, keys, strict=True))
        np.testing.assert_allclose(out[0, head], expected, rtol=1e-12)
