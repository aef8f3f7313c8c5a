"""Click commands for traces: `capture`, and the `trace` group (info, convert, generate, from-scenario).

archsim.cli registers them. Bad input raises ConfigError / TraceError, which the top-level group turns
into one line and exit code 2. Heavy imports (torch, transformers) happen inside the commands.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np

from archsim.errors import EMPTY_TRACE, ConfigError, TraceError

_CONVERT_TARGETS = ("dramsim3", "ramulator", "native")


_DTYPE_ALIASES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


@click.command()
@click.option("--model", required=True, help="Preset name (see docs/models.md) or a checkpoint directory.")
@click.option(
    "-o", "--out", "--output", "output", required=True, type=click.Path(dir_okay=False),
    help="Logical trace to write."
)
@click.option(
    "--layers", type=int, help="Keep only this many decoder layers (identical layers, same per-layer bytes)."
)
@click.option("--batch", type=int, default=1, show_default=True, help="Requests run together.")
@click.option("--prompt-len", "--prompt-tokens", "prompt_tokens", type=int, default=32, show_default=True,
              help="Prompt length of turn 0, in tokens.")
@click.option(
    "--decode-steps", type=int, default=8, show_default=True, help="Decode steps after each prefill."
)
@click.option("--turns", type=int, default=1, show_default=True, help="Chat turns on the kept KV cache.")
@click.option(
    "--turn-tokens", type=int, default=16, show_default=True, help="New tokens fed by turns after the first."
)
@click.option(
    "--shared-prefix",
    "shared_prefix_tokens",
    type=int,
    default=0,
    show_default=True,
    help="First prompt tokens identical across the batch (enables prefix sharing in the mapping).",
)
@click.option(
    "--dtype",
    type=click.Choice(["fp16", "bf16", "fp32", "bfloat16", "float16", "float32"]),
    callback=lambda _ctx, _param, value: _DTYPE_ALIASES.get(value, value),
    help="Model dtype (default: the preset's / checkpoint's).",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "meta"]),
    default="cpu",
    show_default=True,
    help="meta: run on shape-only tensors (exact bytes for huge models, no numerics).",
)
@click.option(
    "--attention",
    "attention_backend",
    type=click.Choice(["sdpa", "eager"]),
    default="sdpa",
    show_default=True,
    help="Attention kernel the model runs.",
)
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=0, show_default=True)
@click.option(
    "--decoding",
    type=click.Choice(["greedy", "beam", "assisted"]),
    default="greedy",
    show_default=True,
    help="beam / assisted (speculative): transformers' generate picks the tokens; each forward call is a step.",
)
@click.option("--beams", "num_beams", type=int, default=4, show_default=True, help="Beams of --decoding beam.")
@click.option("--assistant", help="Draft model of --decoding assisted (preset or checkpoint directory).")
@click.option(
    "--draft-tokens", type=int, default=4, show_default=True, help="Tokens the assistant drafts per verification."
)
def capture(output: str, **kwargs: Any) -> None:
    """Run a model on a request scenario and write its logical (tensor-level) trace."""
    from archsim.capture import CaptureOptions, capture_trace
    from archsim.outputs import OutputPlan

    outputs = OutputPlan(inputs=[kwargs["model"]] if Path(kwargs["model"]).exists() else [])
    outputs.add(output, "--out", kind="npz")
    options = CaptureOptions(**kwargs)
    captured = []  # the capture runs as the output's writer: its records stream into the temp file
    outputs.write(output, lambda tmp: captured.append(capture_trace(options, tmp)))
    try:
        options.validate()
        outputs.commit()
    except ConfigError as exc:  # CaptureOptions names its fields: name the options typed
        raise ConfigError(exc.detail, file=exc.file, where=CAPTURE_OPTIONS.get(exc.where or "", exc.where)) from None
    result = captured[0]
    size = Path(output).stat().st_size
    click.echo(f"wrote {output}: {result.steps} steps, {result.records:,} records, {size / 2**10:.1f} KiB")


# CaptureOptions' fields as the options of `capture`
CAPTURE_OPTIONS = {"model": "--model", "batch": "--batch", "prompt_tokens": "--prompt-tokens",
                   "decode_steps": "--decode-steps", "turns": "--turns", "turn_tokens": "--turn-tokens",
                   "shared_prefix_tokens": "--shared-prefix", "layers": "--layers", "dtype": "--dtype",
                   "device": "--device", "attention_backend": "--attention", "seed": "--seed",
                   "decoding": "--decoding", "num_beams": "--beams", "assistant": "--assistant",
                   "draft_tokens": "--draft-tokens"}


@click.group()
def trace() -> None:
    """Inspect, convert and generate traces."""


@trace.command("info")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (stable keys).")
def trace_info(path: str, as_json: bool) -> None:
    """Summarize a logical or physical trace (verifies its integrity)."""
    from archsim.trace.info import format_summary, summarize

    summary = summarize(path)
    click.echo(json.dumps(summary, indent=2, sort_keys=True) if as_json else format_summary(summary))


def placement_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The PoolPlacement fields as command-line options."""
    options = [
        click.option("--devices", type=int, default=1, show_default=True, help="Pool devices."),
        click.option(
            "--channels",
            "channels_per_device",
            type=int,
            default=32,
            show_default=True,
            help="Channels (PNM units) per device.",
        ),
        click.option(
            "--capacity",
            "capacity_per_device",
            default="16GiB",
            show_default=True,
            help="Capacity per device, e.g. 16GiB.",
        ),
        click.option(
            "--granularity",
            "access_granularity",
            default="32B",
            show_default=True,
            help="Bytes per access, e.g. 32B (HBM3 pseudo-channel BL8) or 64B.",
        ),
        click.option(
            "--block-tokens",
            "kv_block_tokens",
            type=int,
            default=16,
            show_default=True,
            help="Tokens per paged KV block.",
        ),
        click.option(
            "--layout",
            type=click.Choice(["head_major", "token_major", "range"]),
            default="head_major",
            show_default=True,
            help="KV layout: a head's blocks on one channel, blocks round-robin, or the decode-step model's "
            "ranges of head contexts over every channel (archsim/kvlayout.py).",
        ),
        click.option(
            "--tp",
            "tensor_parallel",
            type=int,
            default=1,
            show_default=True,
            help="Tensor-parallel degree (KV heads split into this many shards).",
        ),
        click.option(
            "--weights",
            "weights_in",
            type=click.Choice(["gpu", "pool"]),
            default="gpu",
            show_default=True,
            help="Where the weights live (pool: their reads hit the pool).",
        ),
        click.option(
            "--prefix-sharing/--no-prefix-sharing",
            default=False,
            show_default=True,
            help="Share the KV blocks of the trace's shared prompt prefix across requests.",
        ),
        click.option(
            "--attention-on",
            type=click.Choice(["pnm", "host"]),
            default="pnm",
            show_default=True,
            help="Who reads the KV cache: the PNM units, or the host (no-PNM baseline).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


# the mapping's parameters (PoolPlacement's fields, `trace convert`'s own) as the options that set them: an error
# names the option typed
MAPPING_OPTIONS = {"devices": "--devices", "channels_per_device": "--channels", "capacity_per_device": "--capacity",
                   "capacity_per_device_bytes": "--capacity", "access_granularity": "--granularity",
                   "access_granularity_bytes": "--granularity", "kv_block_tokens": "--block-tokens",
                   "layout": "--layout", "tensor_parallel": "--tp", "weights_in": "--weights",
                   "prefix_sharing": "--prefix-sharing", "attention_on": "--attention-on", "device_choice": "--device",
                   "issue_interval_cycles": "--issue-interval"}


@contextlib.contextmanager
def _placement_options() -> Iterator[None]:
    """A placement's ConfigError (`placement.<field>`) as one naming the option."""
    try:
        yield
    except ConfigError as exc:
        field = (exc.where or "").removeprefix("placement.")
        raise ConfigError(exc.detail, file=exc.file, where=MAPPING_OPTIONS.get(field, exc.where)) from None


def build_placement(values: dict[str, Any]) -> Any:
    from archsim.trace.mapping import PoolPlacement

    data = dict(values)
    data["capacity_per_device_bytes"] = data.pop("capacity_per_device")
    data["access_granularity_bytes"] = data.pop("access_granularity")
    with _placement_options():
        return PoolPlacement.from_dict(data, where="placement")


def _given(names: list[str]) -> list[str]:
    """Which of these parameters the command line set (not left at their defaults)."""
    ctx = click.get_current_context()
    return [n for n in names if ctx.get_parameter_source(n) not in (None, click.core.ParameterSource.DEFAULT)]


def _convert_physical(path: str, target: str, output: str, outputs: Any, sort: bool) -> None:
    """A physical trace in another format (placement options do not apply: the addresses stay), batch by batch;
    with `sort` the trace is read whole and sorted first."""
    from archsim.progress import progress_bar
    from archsim.resources import display_path
    from archsim.trace.stream import open_source, sorted_source, write_batches
    from archsim.trace.text_formats import detect_format

    fmt = detect_format(path)
    moved = 0
    if sort:
        source, moved = sorted_source(path, fmt)
    else:
        source, fmt = open_source(path, fmt)  # an .npz is checked whole here, a text trace as it is read
    header = {"converted_from": display_path(path), "from_format": fmt, "sorted_requests": moved}
    written: list[tuple[int, int]] = []

    def batches() -> Iterator[tuple[np.ndarray, ...]]:
        seen = 0
        with progress_bar(source.requests, "req", "convert") as bar:
            for batch in source.open():
                bar.update(len(batch))
                seen += len(batch)
                yield batch.timestamp_cycles, batch.address, batch.is_write, batch.source
        if not seen and fmt != "npz":  # a text trace of comments only; an archsim .npz may hold no requests
            raise TraceError(EMPTY_TRACE, file=path)

    outputs.write(output, lambda tmp: written.append(write_batches(tmp, target, batches(), header, source.sources)))
    outputs.commit()
    n, writes = written[0]
    note = f", sorted by timestamp ({moved:,} requests moved)" if sort else ""
    click.echo(f"wrote {output}: {n:,} requests ({writes:,} writes) from a {fmt} trace{note}")


def _mapped_batches(logical: Any, mapper: Any, placement: Any, device_choice: str,
                    issue_interval_cycles: int) -> Iterator[tuple[np.ndarray, ...]]:
    """The logical trace's accesses mapped batch by batch (flat pool addresses, or one device's own)."""
    from archsim.progress import progress_bar
    from archsim.trace.text_formats import MAX_CYCLE

    offset = 0
    with progress_bar(logical.records, "record", "convert") as bar:
        for chunk in logical.chunks():
            for part in mapper.iter_chunk(chunk, offset):
                last_request = mapper.accesses_emitted - 1
                if issue_interval_cycles * last_request > MAX_CYCLE:
                    raise ConfigError(f"{issue_interval_cycles:,} cycles x {last_request:,} requests pass the largest "
                                      f"timestamp the simulator can hold ({MAX_CYCLE:,})", where="--issue-interval")
                if device_choice == "all":
                    address = part["address"] + part["device"].astype(np.uint64) * np.uint64(
                        placement.capacity_per_device_bytes)
                    yield part["timestamp_cycles"], address, part["is_write"], part["source"]
                else:
                    mine = part["device"] == int(device_choice)
                    yield (part["timestamp_cycles"][mine], part["address"][mine], part["is_write"][mine],
                           part["source"][mine])
            offset += len(chunk["step"])
            bar.update(len(chunk["step"]))


@trace.command("convert")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--to", "target", required=True, type=click.Choice(_CONVERT_TARGETS), help="Output format.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="File to write.")
@click.option(
    "--device",
    "device_choice",
    default="all",
    show_default=True,
    help="Pool device to export (device-local addresses), or 'all' (one flat pool address space).",
)
@click.option(
    "--issue-interval",
    "issue_interval_cycles",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Cycles between consecutive requests' timestamps.",
)
@click.option("--sort", is_flag=True,
              help="Physical input: sort requests stably by timestamp instead of refusing a decreasing one (reads "
                   "the whole trace first: about 18 bytes a request in memory).")
@placement_options
def trace_convert(
    path: str,
    target: str,
    output: str,
    device_choice: str,
    issue_interval_cycles: int,
    sort: bool,
    **placement_values: Any,
) -> None:
    """Map a logical trace onto a pool placement and write the physical request stream; or turn a physical
    trace (archsim .npz, DRAMSim3 or Ramulator 2 text) into another format."""
    from archsim.outputs import OutputPlan
    from archsim.resources import display_path
    from archsim.trace.logical import LogicalTrace, is_logical_trace
    from archsim.trace.mapping import mapper_for
    from archsim.trace.stream import write_batches

    outputs = OutputPlan(inputs=[path])
    outputs.add(output, "--output", kind="npz" if target == "native" else "file")
    placement = build_placement(placement_values)
    if not is_logical_trace(path):
        mapping_only = _given(["device_choice", "issue_interval_cycles", *placement_values])
        if mapping_only:
            raise ConfigError(f"maps a logical trace onto a pool; {path} is a physical trace, whose addresses stay",
                              where=MAPPING_OPTIONS[mapping_only[0]])
        _convert_physical(path, target, output, outputs, sort)
        return
    if device_choice != "all" and (not device_choice.isdigit() or int(device_choice) >= placement.devices):
        raise ConfigError(
            f"must be 'all' or a device index below {placement.devices}, got {device_choice!r}",
            where="--device",
        )
    header = {
        "from_logical_trace": display_path(path),
        "placement": placement.as_dict(),
        "device": device_choice,
        "issue_interval_cycles": issue_interval_cycles,
        "address_space": "flat pool" if device_choice == "all" else "device-local",
    }
    written: list[tuple[int, int]] = []
    with LogicalTrace(path) as logical:  # mapped and written batch by batch as the output is written
        with _placement_options():
            mapper = mapper_for(logical, placement, issue_interval_cycles=issue_interval_cycles)
        batches = _mapped_batches(logical, mapper, placement, device_choice, issue_interval_cycles)
        outputs.write(output, lambda tmp: written.append(write_batches(tmp, target, batches, header)))
        outputs.commit()
    n, writes = written[0]
    click.echo(f"wrote {output}: {n:,} requests ({writes:,} writes) from {len(mapper.regions().address):,} regions "
               f"on {placement.devices} device(s)")


@trace.command("merge")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The merged trace (archsim .npz: its header names the ports).")
@click.option("--names", help="The hosts' port names, in the inputs' order (default host0,host1,...).")
def trace_merge(paths: tuple[str, ...], output: str, names: str | None) -> None:
    """Merge several hosts' physical traces into one trace of the memory they share: each input's host requests on
    its own port (host0, host1, ...), its PNM requests on the shared pnm port, in timestamp order."""
    from archsim.outputs import OutputPlan
    from archsim.resources import display_path
    from archsim.trace.merge import host_names, merge_batches, merged_sources
    from archsim.trace.stream import open_source, write_batches

    if len(paths) < 2:
        raise TraceError("merge takes at least two traces", where="PATHS")
    outputs = OutputPlan(inputs=list(paths))
    outputs.add(output, "--output")
    if not output.endswith(".npz"):
        raise TraceError("the merged trace is an archsim .npz (only it names the ports)", file=output,
                         where="--output")
    hosts = host_names(len(paths), names)
    inputs = [open_source(path)[0] for path in paths]
    sources = merged_sources(inputs, hosts, paths)
    header = {"merged_from": [display_path(p) for p in paths]}
    written: list[tuple[int, int]] = []
    outputs.write(output, lambda tmp: written.append(write_batches(tmp, "native", merge_batches(inputs, sources),
                                                                   header, sources)))
    outputs.commit()
    n, writes = written[0]
    click.echo(f"wrote {output}: {n:,} requests ({writes:,} writes) on ports {', '.join(sources)}")


@trace.command("generate")
@click.option("--model", required=True, help="Preset name (see docs/models.md).")
@click.option("--workload", required=True, type=click.Choice(["prefill", "decode", "chat", "reasoning"]))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--layers", type=int, help="Keep only this many decoder layers.")
@click.option(
    "--dtype", type=click.Choice(["bfloat16", "float16", "float32"]), default="bfloat16", show_default=True
)
@click.option("--batch", type=int, default=1, show_default=True)
@click.option(
    "--context", "context_tokens", type=int, default=1024, show_default=True, help="decode: cached tokens."
)
@click.option("--steps", type=int, default=1, show_default=True, help="decode: steps.")
@click.option(
    "--prompt-tokens", type=int, default=32, show_default=True, help="prefill/chat/reasoning prompt."
)
@click.option("--reply-tokens", type=int, default=8, show_default=True, help="chat: decode steps per turn.")
@click.option("--turns", type=int, default=1, show_default=True, help="chat: turns.")
@click.option(
    "--turn-tokens", type=int, default=16, show_default=True, help="chat: new tokens per later turn."
)
@click.option(
    "--reuse-prefix/--no-reuse-prefix",
    default=True,
    show_default=True,
    help="chat: keep the KV cache between turns.",
)
@click.option(
    "--shared-prefix",
    "shared_prefix_tokens",
    type=int,
    default=0,
    show_default=True,
    help="chat: prompt tokens shared by every request.",
)
@click.option("--depth", type=int, default=3, show_default=True, help="reasoning: tree depth.")
@click.option("--fanout", type=int, default=2, show_default=True, help="reasoning: branches per node.")
@click.option("--segment-tokens", type=int, default=16, show_default=True, help="reasoning: tokens per node.")
def trace_generate(model: str, workload: str, output: str, layers: int | None, dtype: str, **p: Any) -> None:
    """Write an analytic logical trace (same schema as capture) from a model preset."""
    from archsim.models import load_preset
    from archsim.outputs import OutputPlan

    outputs = OutputPlan()
    outputs.add(output, "--output", kind="npz")
    shape = load_preset(model).shape()
    if layers is not None:
        try:
            shape = shape.with_layers(layers)
        except ConfigError as exc:
            raise ConfigError(exc.detail, where="--layers") from None
    try:
        generated = _generated(shape, workload, dtype, p)
    except ConfigError as exc:  # the generators name their parameters: name the options typed
        option = GENERATOR_OPTIONS.get(exc.where or "", exc.where)
        raise ConfigError(exc.detail, where=option) from None
    outputs.write(output, generated.write)
    outputs.commit()
    click.echo(f"wrote {output}: {len(generated.steps)} steps of {workload} on {shape.name}")


# the generators' parameters as the options of `trace generate`
GENERATOR_OPTIONS = {"batch": "--batch", "context_tokens": "--context", "steps": "--steps",
                     "prompt_tokens": "--prompt-tokens", "reply_tokens": "--reply-tokens", "turns": "--turns",
                     "turn_tokens": "--turn-tokens", "shared_prefix_tokens": "--shared-prefix", "depth": "--depth",
                     "fanout": "--fanout", "segment_tokens": "--segment-tokens"}


def _generated(shape: Any, workload: str, dtype: str, p: dict[str, Any]) -> Any:
    from archsim.workloads import chat_trace, decode_trace, prefill_trace, reasoning_trace

    if workload == "prefill":
        generated = prefill_trace(shape, batch=p["batch"], prompt_tokens=p["prompt_tokens"], dtype=dtype)
    elif workload == "decode":
        generated = decode_trace(
            shape, batch=p["batch"], context_tokens=p["context_tokens"], steps=p["steps"], dtype=dtype
        )
    elif workload == "chat":
        generated = chat_trace(
            shape,
            batch=p["batch"],
            prompt_tokens=p["prompt_tokens"],
            reply_tokens=p["reply_tokens"],
            turns=p["turns"],
            turn_tokens=p["turn_tokens"],
            reuse_prefix=p["reuse_prefix"],
            shared_prefix_tokens=p["shared_prefix_tokens"],
            dtype=dtype,
        )
    else:
        generated = reasoning_trace(
            shape,
            batch=p["batch"],
            prompt_tokens=p["prompt_tokens"],
            depth=p["depth"],
            fanout=p["fanout"],
            segment_tokens=p["segment_tokens"],
            dtype=dtype,
        )
    return generated


@trace.command("from-scenario")
@click.argument("scenario")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Mooncake JSONL to write.")
@click.option("--requests", "n_requests", type=click.IntRange(min=1), help="Requests to draw.")
@click.option("--duration", help="Or every session arriving within this time (e.g. 60s).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--hash-block-tokens", type=click.IntRange(min=1), default=512, show_default=True,
              help="Tokens per hash_ids block.")
@click.option("--set", "overrides", multiple=True, metavar="scenario.DOTTED.KEY=VALUE",
              help="Override a scenario value (repeatable).")
def trace_from_scenario(scenario: str, output: str, n_requests: int | None, duration: str | None, seed: int,
                        hash_block_tokens: int, overrides: tuple[str, ...]) -> None:
    """Write the requests a scenario draws as a Mooncake-style JSONL trace (archsim/serving/mooncake.py)."""
    from archsim.outputs import OutputPlan
    from archsim.serving.mooncake import mooncake_jsonl
    from archsim.serving.scenario import load_scenario, resolve_scenario_path
    from archsim.units import parse_time_option_ns

    outputs = OutputPlan(inputs=[resolve_scenario_path(scenario)])
    outputs.add(output, "--output", kind="jsonl")
    bad = [o for o in overrides if not o.strip().startswith("scenario.")]
    if bad:
        raise ConfigError(f"{bad[0]!r}: only scenario.* values can be set here", where="--set")
    if (n_requests is None) == (duration is None):
        raise ConfigError("give exactly one of --requests or --duration", where="--requests")
    duration_ns = None if duration is None else parse_time_option_ns(duration, "--duration")
    loaded = load_scenario(scenario, overrides)
    outputs.add_inputs(loaded.input_files())  # its trace and length tables too
    table = loaded.requests(n_requests=n_requests, duration_ns=duration_ns, seed=seed, block_tokens=hash_block_tokens)
    data = mooncake_jsonl(table)
    outputs.write(output, lambda tmp: tmp.write_bytes(data))
    outputs.commit()
    click.echo(f"wrote {output}: {len(table)} requests, {len(table.block_keys)} blocks of {hash_block_tokens} tokens")
