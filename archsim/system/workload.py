"""Decode workloads (`configs/workloads/*.yaml`), or one read back from a logical trace.

    workload:
      name: llama3-70b-b16
      description: one line
      model: llama-3.1-70b          # a preset of archsim/models/presets
      layers: 80                    # optional: cut the model (tests)
      dtype: bfloat16               # optional: the preset's dtype
      batch: 16                     # sequences per model instance
      tensor_parallel: 8            # GPUs per model instance (KV heads split across them)
      instances: 1                  # optional: model instances sharing the pool (default: GPUs / tensor_parallel)
      contexts: [4K, 32K, 128K]     # cached tokens per sequence before the step (K = 1024); a context beyond
                                    # the model's max_position_embeddings is an infeasible point
      decode_steps: 64
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from archsim.config.overrides import apply_overrides
from archsim.config.yaml_files import read_yaml, resolve_preset
from archsim.errors import ConfigError, TraceError
from archsim.limits import MAX_TOKENS
from archsim.models import ModelShape, dtype_bytes, load_preset
from archsim.models.shape import shape_from_dict
from archsim.resources import data_path
from archsim.section import Section

WORKLOADS_DIR = data_path("configs", "workloads")
_TOKENS = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    shape: ModelShape
    dtype: str
    batch: int
    tensor_parallel: int
    instances: int | None  # None: as many as the system's GPUs allow
    contexts: tuple[int, ...]
    decode_steps: int
    source: str  # the YAML file or the trace it came from
    max_context: int | None = None  # the model's max_position_embeddings (None: unknown, e.g. from a trace)

    @property
    def element_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    def instances_on(self, gpus: int, file: str | None) -> int:
        """Model instances a system with `gpus` GPUs runs (checked against the GPU count)."""
        if self.tensor_parallel > gpus:
            raise ConfigError(f"tensor_parallel {self.tensor_parallel} needs more GPUs than the system's {gpus}",
                              file=self.source, where="workload.tensor_parallel")
        n = self.instances if self.instances is not None else gpus // self.tensor_parallel
        if n * self.tensor_parallel > gpus:
            raise ConfigError(f"{n} instances x tensor_parallel {self.tensor_parallel} need more GPUs than the "
                              f"system's {gpus} (in {file})", file=self.source, where="workload.instances")
        return n


def parse_tokens(value: object, where: str) -> int:
    """A token count: 4096, "4K" (x1024) or "1M" (x1024^2)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        tokens = value
    else:
        m = _TOKENS.match(str(value)) if isinstance(value, str) else None
        if not m or int(m.group(1)) <= 0:
            raise ConfigError(f"expected a positive token count like 4096 or 32K, got {value!r}", where=where)
        tokens = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    if tokens > MAX_TOKENS:
        raise ConfigError(f"{tokens:,} tokens is beyond the longest context archsim holds ({MAX_TOKENS:,})",
                          where=where)
    return tokens


def resolve_workload_path(name_or_path: str | Path) -> Path:
    return resolve_preset(name_or_path, WORKLOADS_DIR, "workload")


def load_workload(name_or_path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> Workload:
    """Read, override (`workload.dotted.key=value`) and validate a workload file."""
    path = resolve_workload_path(name_or_path)
    tree = read_yaml(path)
    if isinstance(tree, dict):
        apply_overrides(tree, list(overrides), str(path))
    return workload_from_mapping(tree, file=str(path))


def workload_from_mapping(tree: Any, *, file: str | None = None) -> Workload:
    top = Section(tree, "", file)
    s = top.sub("workload")
    top.done()
    name = s.name("name")
    description = s.str("description", "")
    model = s.str("model")
    try:
        preset = load_preset(model)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=file, where=s.where("model")) from None
    shape = preset.shape()
    if s.has("layers"):
        layers = s.int("layers", minimum=1)
        try:
            shape = shape.with_layers(layers)
        except ConfigError as exc:
            raise s.error("layers", exc.detail) from None
    dtype = s.str("dtype", preset.dtype)
    try:
        dtype_bytes(dtype)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=file, where=s.where("dtype")) from None
    batch = s.int("batch", minimum=1)
    tp = s.int("tensor_parallel", 1, minimum=1)
    instances = s.int("instances", minimum=1) if s.has("instances") else None
    raw = s.raw("contexts")
    if not isinstance(raw, list) or not raw:
        raise s.error("contexts", f"expected a non-empty list of token counts, got {raw!r}")
    try:
        contexts = tuple(parse_tokens(v, f"{s.where('contexts')}[{i}]") for i, v in enumerate(raw))
    except ConfigError as exc:
        raise exc.located(file) from None
    steps = s.int("decode_steps", 1, minimum=1)
    s.done()
    if shape.kv_cache_heads % tp and shape.attention != "mla":
        raise ConfigError(f"{shape.kv_cache_heads} KV heads do not split over tensor_parallel {tp}", file=file,
                          where=s.where("tensor_parallel"))
    limit = preset.hf_config_dict().get("max_position_embeddings")
    return Workload(name, description, shape, dtype, batch, tp, instances, contexts, steps, file or "<mapping>",
                    int(limit) if limit else None)


def workload_from_trace(path: str | Path) -> Workload:
    """The decode workload a logical trace records: model shape and dtype from its header, batch from its
    requests, the context from the first decode step's K reads, the number of decode steps."""
    from archsim.trace.logical import KIND_K, OP_READ, PHASE_DECODE, LogicalTrace

    with LogicalTrace(path) as trace:
        header = trace.header
        columns = trace.read(["step", "phase", "op", "kind", "layer", "token_count", "request"])
    model = header.get("model", {})
    if "shape" not in model:
        raise TraceError("the trace header has no model shape", file=str(path), where="header.model.shape")
    try:
        shape = shape_from_dict(model["shape"], "header.model.shape")
    except ConfigError as exc:
        raise TraceError(exc.detail, file=str(path), where=exc.where) from None
    decode = columns["phase"] == PHASE_DECODE
    if not decode.any():
        raise TraceError("the trace holds no decode step", file=str(path), where="phase")
    steps = np.unique(columns["step"][decode])
    first = decode & (columns["step"] == steps[0])
    k_reads = first & (columns["kind"] == KIND_K) & (columns["op"] == OP_READ) & (columns["layer"] == 0)
    if not k_reads.any():
        raise TraceError("the first decode step reads no K cache in layer 0", file=str(path), where="kind")
    context = int(columns["token_count"][k_reads].max()) - 1  # the read covers the cache after the append
    requests = columns["request"][first]
    batch = int(len(np.unique(requests[requests >= 0]))) or 1
    name = f"trace:{Path(path).name}"
    return Workload(name, f"decode steps of {path}", shape, str(header.get("dtype", "bfloat16")), batch, 1, 1,
                    (max(1, context),), int(len(steps)), str(path))
