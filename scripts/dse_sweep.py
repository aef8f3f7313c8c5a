"""Design-space sweep: PNM lanes, PNM SRAM and link bandwidth, for both pool placements (G2.5, G1.5).

One parameter at a time around the shipped presets (configs/systems/g25.yaml, g15.yaml and their -nopnm
variants for the link sweep), at the workload's contexts or --contexts. Every point runs the full system
model (archsim.system.simulate_step). A point the hardware cannot run (an SRAM too small for one tile, a KV
that does not fit) is kept with its reason in `status`, as Timeloop does, instead of stopping the sweep.

    python scripts/dse_sweep.py --out dse.csv --plot dse.png [--workload llama3-70b-b16] [--contexts 32K]
"""

from __future__ import annotations

import copy
import csv
import io
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from archsim.errors import ConfigError  # noqa: E402 - after the path tweak so a checkout runs without install
from archsim.system import load_workload, simulate_step, system_config_from_mapping  # noqa: E402
from archsim.system.workload import parse_tokens  # noqa: E402
from archsim.trace.native import atomic_write_bytes  # noqa: E402

LANES = (32, 64, 128, 256, 512, 1024, 2048)  # pnm.macs_per_cycle
SRAM = ("16KiB", "48KiB", "80KiB", "96KiB", "128KiB", "512KiB", "1MiB")
LINK_SCALE = (0.25, 0.5, 1.0, 2.0, 4.0)  # every link's bandwidth x this
PLACEMENTS = ("g25", "g15")
COLUMNS = ("sweep", "value", "system", "tier", "attention", "context", "status", "decode_step_ns", "attention_ns",
           "tokens_per_s", "energy_pJ_per_token", "gpu_link_bytes", "sram_hit_rate", "pnm_model", "link_GBps")


def _tree(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / "systems" / f"{name}.yaml").read_text())


def _scaled_links(tree: dict[str, Any], scale: float) -> tuple[dict[str, Any], float]:
    """The system with every link of its interconnect preset `scale` times as fast; returns the GPU link's
    raw bandwidth in GB/s after scaling."""
    inter = tree["system"]["interconnect"]
    preset = yaml.safe_load((REPO / "configs" / "interconnect" / f"{inter['preset']}.yaml").read_text())
    sets = dict(inter.get("set", {}))
    gpu_link = 0.0
    for name, link in preset["interconnect"]["links"].items():
        raw = float(str(link["bandwidth"]).removesuffix("GB/s"))
        sets[f"links.{name}.bandwidth"] = f"{raw * scale:g}GB/s"
        if link["from"] == tree["system"]["gpus"]["endpoint"]:
            gpu_link = raw * scale
    out = copy.deepcopy(tree)
    out["system"]["interconnect"] = {"preset": inter["preset"], "set": sets}
    return out, gpu_link


def points() -> Iterator[tuple[str, float | str, dict[str, Any], float | None]]:
    for placement in PLACEMENTS:
        for lanes in LANES:
            tree = _tree(placement)
            tree["system"]["pool"]["pnm"]["macs_per_cycle"] = lanes
            yield "pnm_lanes", lanes, tree, None
        for sram in SRAM:
            tree = _tree(placement)
            tree["system"]["pool"]["pnm"]["sram"] = sram
            yield "sram", sram, tree, None
        for variant in (placement, f"{placement}-nopnm"):
            for scale in LINK_SCALE:
                tree, gbps = _scaled_links(_tree(variant), scale)
                yield "link_scale", scale, tree, gbps


def run(workload_name: str, contexts: tuple[int, ...] | None) -> list[dict[str, Any]]:
    workload = load_workload(workload_name)
    ctxs = contexts or workload.contexts
    rows: list[dict[str, Any]] = []
    for sweep, value, tree, gbps in points():
        s = tree["system"]
        base = {"sweep": sweep, "value": value, "system": s["name"], "tier": s["tier"], "attention": s["attention"],
                "link_GBps": gbps}
        try:
            system = system_config_from_mapping(tree, file=f"configs/systems/{s['name']}.yaml")
        except ConfigError as exc:  # infeasible hardware: keep the point and say why
            rows += [{**base, "context": c, "status": f"infeasible: {exc}"} for c in ctxs]
            continue
        for c in ctxs:
            try:
                r = simulate_step(system, workload, c).as_dict()
            except ConfigError as exc:
                rows.append({**base, "context": c, "status": f"infeasible: {exc}"})
                continue
            rows.append({**base, "context": c, **{k: r.get(k) for k in COLUMNS if k in r}})
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in COLUMNS})
    data = buf.getvalue().encode()
    atomic_write_bytes(path, lambda handle: handle.write(data), suffix=".csv")


def plot(rows: list[dict[str, Any]], path: Path, context: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = (("pnm_lanes", "PNM MACs per cycle (lanes)"), ("sram", "PNM SRAM"), ("link_scale", "link bandwidth x"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (sweep, label) in zip(axes, sweeps, strict=True):
        sel = [r for r in rows if r["sweep"] == sweep and r["context"] == context]
        for system in dict.fromkeys(r["system"] for r in sel):
            pts = [r for r in sel if r["system"] == system and r.get("decode_step_ns")]
            xs = list(range(len(pts))) if sweep == "sram" else [float(r["value"]) for r in pts]
            ax.plot(xs, [r["decode_step_ns"] / 1e6 for r in pts], marker="o", label=system)
            if sweep == "sram":
                ax.set_xticks(xs, [str(r["value"]) for r in pts])
        if sweep != "sram":
            ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("decode step (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"DSE around the shipped G2.5 / G1.5 presets, context {context} tokens")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=110, metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)


@click.command()
@click.option("--workload", default="llama3-70b-b16", show_default=True, help="Workload YAML or preset name.")
@click.option("--contexts", default="32K", show_default=True, help="Comma-separated contexts.")
@click.option("--out", default="dse.csv", show_default=True, type=click.Path(dir_okay=False))
@click.option("--plot", "plot_path", default="dse.png", show_default=True, type=click.Path(dir_okay=False))
def main(workload: str, contexts: str, out: str, plot_path: str) -> None:
    start = time.perf_counter()
    ctxs = tuple(parse_tokens(c.strip(), "--contexts") for c in contexts.split(",") if c.strip())
    rows = run(workload, ctxs)
    write_csv(rows, Path(out))
    plot(rows, Path(plot_path), ctxs[0])
    ok = sum(1 for r in rows if r.get("status") == "ok")
    click.echo(f"{len(rows)} points ({ok} feasible) -> {out}, {plot_path} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
