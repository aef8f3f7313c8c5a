"""`archsim gpu predict`: the calibrated GPU model's time of one decoder layer and of its all-reduce.

Errors are ConfigErrors naming the option and the field (`--shape heads`, `--tokens`, `--tp`); the top-level
CLI prints them as one line and exits with code 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from archsim.errors import ConfigError
from archsim.limits import INT64_MAX

SCHEMA = "archsim.gpu/1"


def _positive_list(text: str, option: str) -> list[int]:
    values = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            raise ConfigError(f"expected a comma-separated list of positive integers, got {item.strip()!r}",
                              where=option) from None
        if value <= 0:
            raise ConfigError(f"must be positive, got {value}", where=option)
        if value > INT64_MAX:
            raise ConfigError(f"must be at most {INT64_MAX:,}, got {value:,}", where=option)
        values.append(value)
    return values


def _shown_path(path: Path) -> str:
    """Shipped files by their path in the repository (also from a wheel), so the JSON does not depend on
    where the checkout or install lies."""
    from archsim.resources import display_path

    return display_path(path)


@click.group("gpu")
def gpu() -> None:
    """The calibrated GPU kernel model (see docs/gpu.md)."""


@gpu.command("predict")
@click.option("--shape", "shape_spec", required=True, metavar="KEY=VALUE,...",
              help="Layer shape: hidden=H,heads=A,kv_heads=K,ffn=F[,vocab=V][,gated=true|false][,dtype=fp16]"
                   "[,head_dim=D].")
@click.option("--tokens", "tokens_spec", required=True, metavar="N,...", help="Tokens in the batch, e.g. 1,16,256.")
@click.option("--tp", "tp_spec", required=True, metavar="N,...", help="Tensor parallelism, e.g. 1,2,4,8.")
@click.option("--gpu", "gpu_name", default="h100", show_default=True, help="GPU preset name or path (configs/gpus/).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the results here.")
def predict(shape_spec: str, tokens_spec: str, tp_spec: str, gpu_name: str, json_path: str | None) -> None:
    """Predict layer_ns (the nine non-attention kernels) and allreduce_ns (one of the layer's two) per (tokens, tp)."""
    from archsim.gpu.model import KERNELS, layer_allreduce_ns, layer_time_ns, lm_head_ns
    from archsim.gpu.preset import load_gpu_preset
    from archsim.gpu.shape import parse_shape_spec
    from archsim.outputs import OutputPlan
    from archsim.report.output import write_json

    outputs = OutputPlan(inputs=[gpu_name if Path(gpu_name).suffix in (".yaml", ".yml") else None])
    outputs.add(json_path, "--json", kind="json")  # refused before anything runs: an input, an unwritable place
    shape = parse_shape_spec(shape_spec)
    tokens_list = _positive_list(tokens_spec, "--tokens")
    tp_list = _positive_list(tp_spec, "--tp")
    try:
        preset = load_gpu_preset(gpu_name)
    except ConfigError as exc:
        if exc.file:
            raise
        raise ConfigError(exc.detail, where="--gpu") from None
    results = []
    for tp in tp_list:
        try:
            shape.split(tp)
            if tp > 1:
                preset.allreduce.floor_for(tp)
        except ConfigError as exc:
            raise ConfigError(exc.detail, where="--tp") from None
        for tokens in tokens_list:
            kernels = layer_time_ns(shape, tokens, tp, preset)
            entry = {"tokens": tokens, "tp": tp, "layer_ns": round(kernels.layer_ns, 1),
                     "allreduce_ns": round(float(layer_allreduce_ns(shape, tokens, tp, preset)), 1),
                     "kernels_ns": {k: round(float(v), 1) for k, v in kernels.as_dict().items()}}
            if shape.vocab:
                entry["lm_head_ns"] = round(float(lm_head_ns(shape, tokens, tp, preset)), 1)
            results.append(entry)
    tree = {
        "schema": SCHEMA,
        "gpu": preset.name,
        "shape": {"hidden": shape.hidden, "heads": shape.heads, "kv_heads": shape.kv_heads, "ffn": shape.ffn,
                  "vocab": shape.vocab, "gated": shape.gated, "dtype": shape.dtype, "head_dim": shape.head_width},
        "calibration": {"file": [_shown_path(p) for p in (*preset.calibration.layer_files,
                                                           preset.calibration.allreduce_file)],
                        "preset": _shown_path(Path(preset.source_file)), "source": preset.calibration.source},
        "kernels": list(KERNELS),
        "results": results,
    }
    outputs.write(json_path, lambda tmp: write_json(tmp, tree))
    outputs.commit()
    click.echo(_table(preset.name, shape_spec, results))


def _table(gpu_name: str, shape_spec: str, results: list[dict]) -> str:
    lines = [f"archsim gpu predict: {gpu_name}, {shape_spec}",
             f"  {'tokens':>7} {'tp':>3} {'layer_ns':>12} {'allreduce_ns':>13} {'gemm_ns':>12} {'elementwise_ns':>15}"]
    gemms = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    for r in results:
        gemm = sum(r["kernels_ns"][k] for k in gemms)
        lines.append(f"  {r['tokens']:>7} {r['tp']:>3} {r['layer_ns']:>12,.0f} {r['allreduce_ns']:>13,.0f} "
                     f"{gemm:>12,.0f} {r['layer_ns'] - gemm:>15,.0f}")
    lines.append("  per GPU; a layer has two all-reduces; attention is not included (docs/gpu.md)")
    return "\n".join(lines)
