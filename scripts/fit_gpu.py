"""Fit a GPU preset's kernel and all-reduce parameters to its shipped measurements (numpy only).

    python scripts/fit_gpu.py                 # fit configs/gpus/h100.yaml's files, print values and error tables
    python scripts/fit_gpu.py --write         # also write the fitted values into configs/gpus/h100.yaml
    python scripts/fit_gpu.py --plot docs/gpu_fit.png

The fit is a deterministic Nelder-Mead search over the logarithms of the parameters, started from the
preset's current values. Layer parameters minimise, over both layer files, the mean squared log error of
layer_ns plus a penalty (weight 100) on rows beyond 15 % and a small per-kernel term (keeps each kernel's parameters
physical rather than trading one kernel against another). All-reduce parameters minimise the squared log
error of the power-of-two size bins plus a penalty beyond 15 %. Leave-one-model-out refits the layer
parameters on one file and predicts the other.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from archsim.gpu.calibration import (  # noqa: E402
    AllReduceMeasurements,
    LayerMeasurements,
    allreduce_bin_errors,
    layer_errors,
    load_calibration,
    predicted_layer_ns,
)
from archsim.gpu.model import KERNELS, layer_time_ns  # noqa: E402
from archsim.gpu.preset import GpuPreset, load_gpu_preset  # noqa: E402

# (section, field, YAML key, unit written) of every fitted layer parameter
LAYER_PARAMS = (("gemm", "launch_ns", "launch", "ns"), ("gemm", "hbm_efficiency", "hbm_efficiency", ""),
                ("gemm", "flops_efficiency", "flops_efficiency", ""), ("gemm", "tile_overhead", "tile_overhead", ""),
                ("gemm", "overlap_exponent", "overlap_exponent", ""), ("gemm", "k_step_ns", "k_step", "ns"),
                ("elementwise", "launch_ns", "launch", "ns"),
                ("elementwise", "row_elements_per_ns", "row_elements_per_ns", ""),
                ("elementwise", "norm_efficiency", "norm_efficiency", ""),
                ("elementwise", "rope_efficiency", "rope_efficiency", ""),
                ("elementwise", "act_efficiency", "act_efficiency", ""),
                ("elementwise", "add_efficiency", "add_efficiency", ""))
LAYER_TOLERANCE = 0.15
LAYER_PENALTY = 100
BIN_TOLERANCE = 0.15


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.3, iters: int = 1500) -> np.ndarray:
    """Deterministic downhill simplex (no scipy): the best vertex after `iters` steps."""
    pts = [np.array(x0, float)] + [np.array(x0, float) + step * np.eye(len(x0))[i] for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-12:
            break
        centre = np.mean(pts[:-1], axis=0)
        reflected = centre + (centre - pts[-1])
        f_r = f(reflected)
        if f_r < vals[0]:
            expanded = centre + 2 * (centre - pts[-1])
            f_e = f(expanded)
            pts[-1], vals[-1] = (expanded, f_e) if f_e < f_r else (reflected, f_r)
        elif f_r < vals[-2]:
            pts[-1], vals[-1] = reflected, f_r
        else:
            contracted = centre + 0.5 * (pts[-1] - centre)
            f_c = f(contracted)
            if f_c < vals[-1]:
                pts[-1], vals[-1] = contracted, f_c
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [f(p) for p in pts]
    return pts[int(np.argmin(vals))]


def _minimise(f: Callable[[np.ndarray], float], x0: np.ndarray, rounds: int) -> np.ndarray:
    x = x0
    for _ in range(rounds):  # restarts shake the simplex out of a collapsed shape
        x = nelder_mead(f, x)
    return x


# ---- layer kernels ----

def layer_vector(gpu: GpuPreset) -> np.ndarray:
    return np.array([getattr(getattr(gpu, sec), field) for sec, field, _, _ in LAYER_PARAMS])


def with_layer_vector(gpu: GpuPreset, values: np.ndarray) -> GpuPreset:
    changes: dict[str, dict[str, float]] = {"gemm": {}, "elementwise": {}}
    for (sec, field, _, _), value in zip(LAYER_PARAMS, values, strict=True):
        changes[sec][field] = float(value)
    return dataclasses.replace(gpu, gemm=dataclasses.replace(gpu.gemm, **changes["gemm"]),
                               elementwise=dataclasses.replace(gpu.elementwise, **changes["elementwise"]))


def layer_objective(gpu: GpuPreset, files: list[LayerMeasurements]) -> float:
    total = 0.0
    for m in files:
        per_kernel = np.empty_like(m.kernel_ns)
        for tp in np.unique(m.tp):
            rows = m.tp == tp
            times = layer_time_ns(m.shape, m.tokens[rows], int(tp), gpu).as_dict()
            per_kernel[rows] = np.stack([times[k] for k in KERNELS], axis=1)
        log_err = np.log(per_kernel.sum(axis=1) / m.layer_ns)
        total += np.mean(log_err**2) + LAYER_PENALTY * np.mean(np.maximum(0, np.abs(log_err) - LAYER_TOLERANCE) ** 2)
        total += 0.1 * np.mean(np.log(per_kernel / m.kernel_ns) ** 2) * len(KERNELS)
    return float(total)


def fit_layers(gpu: GpuPreset, files: list[LayerMeasurements], rounds: int = 3) -> GpuPreset:
    def f(x: np.ndarray) -> float:
        return layer_objective(with_layer_vector(gpu, np.exp(x)), files)

    return with_layer_vector(gpu, np.exp(_minimise(f, np.log(layer_vector(gpu)), rounds)))


# ---- all-reduce ----

def allreduce_vector(gpu: GpuPreset) -> np.ndarray:
    a = gpu.allreduce
    return np.array([f for _, f in a.floor_ns] + [a.latency_ns, a.bus_bandwidth_GBps, a.small_latency_ns,
                                                  a.small_max_bytes])


def with_allreduce_vector(gpu: GpuPreset, values: np.ndarray) -> GpuPreset:
    a = gpu.allreduce
    n = len(a.floor_ns)
    floors = tuple((count, float(v)) for (count, _), v in zip(a.floor_ns, values[:n], strict=True))
    latency, bandwidth, small, small_bytes = values[n:]
    return dataclasses.replace(gpu, allreduce=dataclasses.replace(
        a, floor_ns=floors, latency_ns=float(latency), bus_bandwidth_GBps=float(bandwidth),
        small_latency_ns=float(small), small_max_bytes=int(round(small_bytes))))


def allreduce_objective(gpu: GpuPreset, m: AllReduceMeasurements) -> float:
    log_err = np.log([1 + b.error for b in allreduce_bin_errors(gpu, m)])
    return float(np.mean(log_err**2) + 10 * np.mean(np.maximum(0, np.abs(log_err) - BIN_TOLERANCE) ** 2))


def fit_allreduce(gpu: GpuPreset, m: AllReduceMeasurements, rounds: int = 3) -> GpuPreset:
    def f(x: np.ndarray) -> float:
        return allreduce_objective(with_allreduce_vector(gpu, np.exp(x)), m)

    return with_allreduce_vector(gpu, np.exp(_minimise(f, np.log(allreduce_vector(gpu)), rounds)))


# ---- reports ----

def layer_summary(errors: np.ndarray) -> str:
    a = np.abs(errors)
    return (f"rows {len(a)}, median {100 * np.median(a):.1f} %, max {100 * a.max():.1f} %, within 15 % "
            f"{100 * np.mean(a <= 0.15):.1f} %, within 20 % {100 * np.mean(a <= 0.20):.1f} %, within 25 % "
            f"{100 * np.mean(a <= 0.25):.1f} %")


def _value_text(value: float, unit: str) -> str:
    if unit == "ns":
        return f"{value:.0f}ns" if value >= 100 else f"{value:.4g}ns"
    return f"{value:.4g}"


def write_preset(gpu: GpuPreset, path: Path) -> None:
    """Replace the fitted values in the preset file in place (comments and layout kept)."""
    text = path.read_text()
    sections = {"gemm": gpu.gemm, "elementwise": gpu.elementwise}
    for sec, field, key, unit in LAYER_PARAMS:
        text = _replace_in_section(text, sec, key, _value_text(getattr(sections[sec], field), unit))
    a = gpu.allreduce
    for count, floor in a.floor_ns:
        text = _replace_in_section(text, "allreduce", str(count), f"{floor:.0f}ns")
    for key, value in (("latency", f"{a.latency_ns:.0f}ns"), ("bus_bandwidth", f"{a.bus_bandwidth_GBps:.1f}GB/s"),
                       ("small_latency", f"{a.small_latency_ns:.0f}ns"), ("small_max_bytes", f"{a.small_max_bytes}B")):
        text = _replace_in_section(text, "allreduce", key, value)
    path.write_text(text)


def _replace_in_section(text: str, section: str, key: str, value: str) -> str:
    start = re.search(rf"^  {section}:\s*$", text, re.M)
    if start is None:
        raise SystemExit(f"{section}: not found in the preset")
    end = re.search(r"^  \S", text[start.end():], re.M)
    stop = start.end() + (end.start() if end else len(text) - start.end())
    pattern = rf"^(\s+{re.escape(key)}:\s*)(\S+)(\s*(#.*)?)$"
    body, count = re.subn(pattern, lambda m: (m[1] + value).ljust(len(m[1] + m[2])) + m[3],
                          text[start.end():stop], count=1, flags=re.M)
    if not count:
        raise SystemExit(f"{section}.{key}: not found in the preset")
    return text[:start.end()] + body + text[stop:]


def plot(gpu: GpuPreset, files: list[LayerMeasurements], m: AllReduceMeasurements, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(files) + 1, figsize=(5 * (len(files) + 1), 4.2))
    colours = {1: "tab:blue", 2: "tab:orange", 4: "tab:green", 8: "tab:red"}
    for ax, f in zip(axes, files, strict=False):
        predicted = predicted_layer_ns(gpu, f)
        for tp in np.unique(f.tp):
            rows = f.tp == tp
            ax.plot(f.tokens[rows], f.layer_ns[rows] / 1e3, ".", ms=3, color=colours.get(int(tp)),
                    label=f"measured TP {tp}")
            ax.plot(f.tokens[rows], predicted[rows] / 1e3, "-", lw=1, color=colours.get(int(tp)))
        ax.set(xscale="log", yscale="log", xlabel="tokens in the batch", ylabel="layer_ns (us)",
               title=f"{f.name}: measured (dots), model (lines)")
        ax.legend(fontsize=7)
    ax = axes[-1]
    bins = allreduce_bin_errors(gpu, m)
    for n in sorted({b.gpus for b in bins}):
        sel = [b for b in bins if b.gpus == n]
        rows = m.gpus == n
        ax.plot(m.elements[rows], m.ns[rows] / 1e3, ".", ms=2, alpha=0.3, color=colours.get(n))
        ax.plot([b.bin_elements for b in sel], [b.measured_ns / 1e3 for b in sel], "o", color=colours.get(n),
                label=f"{n} GPUs: bin median")
        ax.plot([b.bin_elements for b in sel], [b.predicted_ns / 1e3 for b in sel], "-", color=colours.get(n))
    ax.set(xscale="log", yscale="log", xlabel="fp16 elements", ylabel="all-reduce (us)",
           title="all-reduce: rows, bin medians (dots), model (lines)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def error_tables(gpu: GpuPreset, files: list[LayerMeasurements], lomo: dict[str, np.ndarray],
                 m: AllReduceMeasurements) -> str:
    lines = ["| fit | predicted file | rows | median | max | within 15 % | within 20 % | within 25 % |",
             "|---|---|---|---|---|---|---|---|"]

    def row(fit: str, name: str, e: np.ndarray) -> str:
        a = np.abs(e)
        shares = " | ".join(f"{100 * np.mean(a <= tol):.1f} %" for tol in (0.15, 0.2, 0.25))
        return f"| {fit} | {name} | {len(a)} | {100 * np.median(a):.1f} % | {100 * a.max():.1f} % | {shares} |"

    for f in files:
        lines.append(row("both files (shipped)", f.name, layer_errors(gpu, f)))
    for name, e in lomo.items():
        lines.append(row("the other file only", name, e))
    lines += ["", "| GPUs | bin (elements) | rows | measured median (us) | predicted median (us) | error |",
              "|---|---|---|---|---|---|"]
    for b in allreduce_bin_errors(gpu, m):
        lines.append(f"| {b.gpus} | {b.bin_elements:,} | {b.rows} | {b.measured_ns / 1e3:.1f} | "
                     f"{b.predicted_ns / 1e3:.1f} | {100 * b.error:+.1f} % |")
    return "\n".join(lines)


def leave_one_model_out(gpu: GpuPreset, files: list[LayerMeasurements]) -> dict[str, np.ndarray]:
    """Refit on each file alone (from the shipped values) and predict the other file."""
    out = {}
    for i, held_out in enumerate(files):
        others = [f for j, f in enumerate(files) if j != i]
        out[held_out.name] = layer_errors(fit_layers(gpu, others, rounds=2), held_out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="h100", help="GPU preset name or path (default h100)")
    parser.add_argument("--write", action="store_true", help="write the fitted values into the preset file")
    parser.add_argument("--plot", type=Path, help="write the predicted-vs-measured plot here (PNG)")
    parser.add_argument("--no-fit", action="store_true", help="evaluate the preset's values as they are")
    args = parser.parse_args()
    gpu = load_gpu_preset(args.gpu)
    files, allreduce = load_calibration(gpu)
    if not args.no_fit:
        gpu = fit_allreduce(fit_layers(gpu, files), allreduce)
        for sec, field, key, _ in LAYER_PARAMS:
            print(f"{sec}.{key}: {getattr(getattr(gpu, sec), field):.4g}")
        print(f"allreduce: {gpu.allreduce}")
    for f in files:
        print(f"in sample, {f.name}: {layer_summary(layer_errors(gpu, f))}")
    lomo = leave_one_model_out(gpu, files)
    for name, e in lomo.items():
        print(f"leave one model out, predicting {name}: {layer_summary(e)}")
    print(error_tables(gpu, files, lomo, allreduce))
    if args.write:
        write_preset(gpu, Path(gpu.source_file))
        print(f"wrote {gpu.source_file}")
    if args.plot:
        plot(gpu, files, allreduce, args.plot)


if __name__ == "__main__":
    main()
