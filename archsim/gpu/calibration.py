"""The measured kernel and all-reduce times a GPU preset is fitted to, and the model's errors against them.

The files are Vidur's profiling CSVs (configs/gpus/data/, MIT licence): times in ms, one `median` column per
kernel. A measured figure is the median column; rows repeated for the same (tokens, tp) are averaged.
All-reduce rows are grouped into power-of-two size bins ([2^k, 2^(k+1)) elements) per GPU count, and a bin's
measured and predicted figures are the medians over its rows (the small sizes are bimodal run to run).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from archsim.errors import ConfigError
from archsim.gpu.model import KERNELS, allreduce_ns, layer_time_ns
from archsim.gpu.preset import GpuPreset
from archsim.gpu.shape import LayerShape

NS_PER_MS = 1e6


@dataclass(frozen=True)
class LayerMeasurements:
    name: str  # the file's stem, e.g. Llama-2-7b-hf.mlp
    shape: LayerShape
    tokens: np.ndarray  # one entry per distinct (tokens, tp)
    tp: np.ndarray
    kernel_ns: np.ndarray  # (rows, 9) in KERNELS order

    @property
    def layer_ns(self) -> np.ndarray:
        return self.kernel_ns.sum(axis=1)


@dataclass(frozen=True)
class AllReduceMeasurements:
    gpus: np.ndarray
    elements: np.ndarray
    ns: np.ndarray


@dataclass(frozen=True)
class BinError:
    gpus: int
    bin_elements: int  # the bin's lower edge (a power of two)
    rows: int
    measured_ns: float
    predicted_ns: float

    @property
    def error(self) -> float:
        return self.predicted_ns / self.measured_ns - 1


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError as exc:
        raise ConfigError(f"cannot read calibration data: {exc.strerror}", file=str(path)) from None


def read_layer_file(path: Path) -> LayerMeasurements:
    rows = _rows(path)
    if not rows:
        raise ConfigError("no measurements", file=str(path))
    first = rows[0]
    shape = LayerShape(hidden=int(first["n_embd"]), heads=int(first["n_head"]), kv_heads=int(first["n_kv_head"]),
                       ffn=int(first["n_expanded_embd"]), vocab=int(first["vocab_size"]),
                       gated=first["use_gated_mlp"] == "True")
    groups: dict[tuple[int, int], list[list[float]]] = defaultdict(list)
    for row in rows:
        key = (int(row["num_tokens"]), int(row["num_tensor_parallel_workers"]))
        groups[key].append([float(row[f"time_stats.{k}.median"]) * NS_PER_MS for k in KERNELS])
    keys = sorted(groups)
    return LayerMeasurements(path.name.removesuffix(".csv"), shape, np.array([k[0] for k in keys]),
                             np.array([k[1] for k in keys]), np.array([np.mean(groups[k], axis=0) for k in keys]))


def read_allreduce_file(path: Path) -> AllReduceMeasurements:
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row in _rows(path):
        groups[(int(row["num_workers"]), int(row["size"]))].append(
            float(row["time_stats.all_reduce.median"]) * NS_PER_MS)
    keys = sorted(groups)
    return AllReduceMeasurements(np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
                                 np.array([np.mean(groups[k]) for k in keys]))


def predicted_layer_ns(gpu: GpuPreset, m: LayerMeasurements) -> np.ndarray:
    """The model's layer_ns at every measured (tokens, tp) row."""
    out = np.empty(len(m.tokens))
    for tp in np.unique(m.tp):
        rows = m.tp == tp
        out[rows] = layer_time_ns(m.shape, m.tokens[rows], int(tp), gpu).layer_ns
    return out


def layer_errors(gpu: GpuPreset, m: LayerMeasurements) -> np.ndarray:
    """Relative error predicted / measured - 1 of layer_ns per row."""
    return predicted_layer_ns(gpu, m) / m.layer_ns - 1


def predicted_allreduce_ns(gpu: GpuPreset, m: AllReduceMeasurements) -> np.ndarray:
    out = np.empty(len(m.elements))
    for n in np.unique(m.gpus):
        rows = m.gpus == n
        out[rows] = allreduce_ns(m.elements[rows], int(n), gpu)
    return out


def allreduce_bin_errors(gpu: GpuPreset, m: AllReduceMeasurements) -> list[BinError]:
    predicted = predicted_allreduce_ns(gpu, m)
    edges = np.floor(np.log2(m.elements)).astype(int)
    out = []
    for n in np.unique(m.gpus):
        for edge in np.unique(edges[m.gpus == n]):
            rows = (m.gpus == n) & (edges == edge)
            out.append(BinError(int(n), int(2**edge), int(rows.sum()), float(np.median(m.ns[rows])),
                                float(np.median(predicted[rows]))))
    return out


def load_calibration(gpu: GpuPreset) -> tuple[list[LayerMeasurements], AllReduceMeasurements]:
    """The preset's shipped measurements."""
    return ([read_layer_file(p) for p in gpu.calibration.layer_files],
            read_allreduce_file(gpu.calibration.allreduce_file))
