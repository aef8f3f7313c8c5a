"""GPU presets (`configs/gpus/<name>.yaml`): datasheet figures, the fitted kernel-model parameters, calibration files.

File layout (top-level key `gpu`; docs/gpu.md gives every value's source):

    gpu:
      name: h100
      description: one line
      datasheet: {sm_count: 132, peak_TFLOPS: 989.4, hbm_bandwidth: 3.35TB/s}
      gemm: {launch: 5us, hbm_efficiency: 1.1, flops_efficiency: 0.98, tile_overhead: 22, overlap_exponent: 2,
             split_k_min_depth: 256, k_step: 0.76ns}
      elementwise: {launch: 1.5us, row_elements_per_ns: 3.0, norm_efficiency: 0.39, rope_efficiency: 0.5,
                    act_efficiency: 0.56, add_efficiency: 1.17}
      allreduce: {floor: {2: 33us, 4: 39us, 8: 29us}, latency: 15us, bus_bandwidth: 640GB/s,
                  small_latency: 7.5us, small_max_bytes: 56KB, small_max_gpus: 2}
      calibration: {source: ..., layers: [data/h100/...csv, ...], allreduce: data/h100/dgx.all_reduce.csv}

A preset without `calibration` files is an error: the model's parameters mean nothing without the
measurements they were fitted to. Calibration paths are relative to the preset's directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from archsim.config.yaml_files import read_yaml, resolve_preset
from archsim.errors import ConfigError
from archsim.resources import data_path
from archsim.section import Section
from archsim.units import parse_bandwidth_GBps, parse_size_bytes, parse_time_ns

GPUS_DIR = data_path("configs", "gpus")


@dataclass(frozen=True)
class GemmParams:
    launch_ns: float  # fixed cost of one GEMM kernel: launch, prologue, epilogue
    hbm_efficiency: float  # achieved share of the datasheet HBM bandwidth when streaming operands
    flops_efficiency: float  # achieved share of peak tensor FLOPs before the tile overhead
    tile_overhead: float  # elements: a Mt x Nt tile runs at flops_efficiency / (1 + overhead (1/Mt + 1/Nt))
    overlap_exponent: float  # time = (compute^p + memory^p)^(1/p): p large = perfect overlap, 1 = none
    split_k_min_depth: int  # split-K never cuts K below this many elements per slice
    k_step_ns: float  # per element of a CTA's K slice: the serial load-wait-multiply walk


@dataclass(frozen=True)
class ElementwiseParams:
    launch_ns: float
    row_elements_per_ns: float  # one thread block walks one token's row at this rate (one block per token)
    norm_efficiency: float  # achieved shares of HBM bandwidth per kernel class
    rope_efficiency: float
    act_efficiency: float
    add_efficiency: float  # above 1: the residual operands partly hit in L2


@dataclass(frozen=True)
class AllReduceParams:
    floor_ns: tuple[tuple[int, float], ...]  # (GPUs, ns): the time no all-reduce on that many GPUs goes below
    latency_ns: float  # alpha of the bandwidth regime
    bus_bandwidth_GBps: float  # per GPU; a ring moves 2 (n-1)/n of the buffer through it
    small_latency_ns: float  # small buffers between few GPUs finish in one direct exchange
    small_max_bytes: int
    small_max_gpus: int

    def floor_for(self, gpus: int) -> float:
        for count, floor in self.floor_ns:
            if count == gpus:
                return floor
        known = ", ".join(str(c) for c, _ in self.floor_ns)
        raise ConfigError(f"no all-reduce calibration for {gpus} GPUs (calibrated: {known})", where="tp")


@dataclass(frozen=True)
class Calibration:
    source: str
    layer_files: tuple[Path, ...]
    allreduce_file: Path


@dataclass(frozen=True)
class GpuPreset:
    name: str
    description: str
    sm_count: int
    peak_TFLOPS: float  # dense fp16/bf16 tensor throughput
    hbm_bandwidth_GBps: float
    gemm: GemmParams
    elementwise: ElementwiseParams
    allreduce: AllReduceParams
    calibration: Calibration
    source_file: str
    l2_capacity_bytes: int = 0  # the on-chip L2 (0: not given); its replacement policy is not published: LRU

    @property
    def allreduce_gpu_counts(self) -> tuple[int, ...]:
        return tuple(count for count, _ in self.allreduce.floor_ns)


def load_gpu_preset(name_or_path: str | Path = "h100") -> GpuPreset:
    """A GPU preset by name (`h100` -> configs/gpus/h100.yaml) or path."""
    path = Path(name_or_path)
    if not path.exists() and not path.suffix and not (GPUS_DIR / f"{name_or_path}.yaml").exists():
        known = ", ".join(sorted(p.stem for p in GPUS_DIR.glob("*.yaml")))
        raise ConfigError(f"GPU {str(name_or_path)!r} has no calibration data (no preset configs/gpus/"
                          f"{name_or_path}.yaml; calibrated GPUs: {known})", where="gpu")
    path = resolve_preset(name_or_path, GPUS_DIR, "GPU")
    tree = read_yaml(path)
    file = str(path)
    if not isinstance(tree, dict) or "gpu" not in tree:
        raise ConfigError("expected a top-level 'gpu' mapping", file=file)
    root = Section(tree["gpu"], "gpu", file)
    preset = GpuPreset(
        name=root.name("name"),
        description=root.str("description", ""),
        **_datasheet(root.sub("datasheet")),
        gemm=_gemm(root.sub("gemm")),
        elementwise=_elementwise(root.sub("elementwise")),
        allreduce=_allreduce(root.sub("allreduce")),
        calibration=_calibration(root, path.parent),
        source_file=file,
    )
    root.done()
    return preset


def _positive(section: Section, key: str) -> float:
    value = section.float(key)
    if value <= 0:
        raise section.error(key, f"must be > 0, got {value:g}")
    return value


def _time(section: Section, key: str) -> float:
    value = section.parsed(key, parse_time_ns)
    if value < 0:
        raise section.error(key, "must be >= 0")
    return value


def _datasheet(s: Section) -> dict[str, object]:
    out = {"sm_count": s.int("sm_count", minimum=1), "peak_TFLOPS": _positive(s, "peak_TFLOPS"),
           "hbm_bandwidth_GBps": s.parsed("hbm_bandwidth", parse_bandwidth_GBps)}
    if s.has("l2_capacity"):
        out["l2_capacity_bytes"] = s.parsed("l2_capacity", parse_size_bytes)
        if not out["l2_capacity_bytes"] > 0:
            raise s.error("l2_capacity", "must be a positive size")
    s.done()
    return out


def _gemm(s: Section) -> GemmParams:
    out = GemmParams(_time(s, "launch"), _positive(s, "hbm_efficiency"), _positive(s, "flops_efficiency"),
                     s.float("tile_overhead"), _positive(s, "overlap_exponent"), s.int("split_k_min_depth", minimum=1),
                     _time(s, "k_step"))
    s.done()
    return out


def _elementwise(s: Section) -> ElementwiseParams:
    out = ElementwiseParams(_time(s, "launch"), _positive(s, "row_elements_per_ns"), _positive(s, "norm_efficiency"),
                            _positive(s, "rope_efficiency"), _positive(s, "act_efficiency"),
                            _positive(s, "add_efficiency"))
    s.done()
    return out


def _allreduce(s: Section) -> AllReduceParams:
    floors = s.sub("floor")
    pairs = []
    for key in sorted(floors.data, key=lambda k: int(k) if str(k).isdigit() else 0):
        if isinstance(key, bool) or not isinstance(key, int) or key < 2:
            raise floors.error(str(key), "keys are GPU counts >= 2")
        pairs.append((key, _time(floors, key)))  # type: ignore[arg-type]
    if not pairs:
        raise s.error("floor", "needs at least one GPU count")
    out = AllReduceParams(tuple(pairs), _time(s, "latency"), s.parsed("bus_bandwidth", parse_bandwidth_GBps),
                          _time(s, "small_latency"), s.parsed("small_max_bytes", parse_size_bytes),
                          s.int("small_max_gpus", minimum=2))
    s.done()
    return out


def _calibration(root: Section, base: Path) -> Calibration:
    if not root.has("calibration"):
        raise root.error("calibration", f"GPU {root.data.get('name')!r} has no calibration data (measured kernel "
                                        "times the model was fitted to); it cannot be predicted")
    s = root.sub("calibration")
    layers = s.raw("layers")
    if not isinstance(layers, list) or not layers or not all(isinstance(x, str) for x in layers):
        raise s.error("layers", "expected a non-empty list of CSV paths")
    files = tuple(base / x for x in layers)
    allreduce = base / s.str("allreduce")
    for where, path in [(f"layers[{i}]", p) for i, p in enumerate(files)] + [("allreduce", allreduce)]:
        if not path.is_file():
            raise s.error(where, f"calibration file {path} does not exist")
    out = Calibration(s.str("source"), files, allreduce)
    s.done()
    return out
