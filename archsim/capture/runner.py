"""Drive a model through a request scenario and write its logical trace.

The runner owns the generation loop (not `model.generate`) so that one step is exactly one forward call
and the scenario - prefill, decode, later chat turns on the kept cache - is explicit and reproducible.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from archsim.capture.hooks import AttentionCoreTap, install_hooks
from archsim.capture.kv import TracingCache
from archsim.capture.loader import LoadedModel, load_model, model_header
from archsim.capture.options import CaptureOptions
from archsim.capture.recorder import StepRecorder
from archsim.errors import TraceError
from archsim.models import dtype_bytes
from archsim.trace.logical import PHASE_DECODE, PHASE_PREFILL, LogicalTraceWriter

# How the capture treats artefacts of running a reference implementation; copied into every header.
ARTEFACTS = {
    "lm_head": "logits for the last position only (logits_to_keep=1), as serving engines compute them",
    "activations": "operands of parameter-owning modules and the attention core (Q read, O written per "
    "request); fused elementwise glue (residual add, RoPE, SwiGLU product) not recorded",
    "embedding": "weight reads count the gathered rows only",
    "moe": "routed-expert weight reads count the experts the router picked in that call",
    "mla": "transformers' reference MLA caches the latent (k = c_KV, v = RoPE key, one head) and "
    "re-expands it through kv_b_proj every step; that expansion is recorded as activation traffic",
    "padding": "none: every request of the batch has the same length",
    "warmup": "none: the first forward call is step 0",
    "next_token": "greedy argmax on cpu; random on the meta device (no numerics there)",
}

_TAPS: dict[str, AttentionCoreTap] = {}


@dataclass(frozen=True)
class CaptureResult:
    path: Path | None
    steps: int
    records: int
    forward_seconds: float  # wall time inside model forward calls (hooks included when tracing)


def _tap(backend: str) -> AttentionCoreTap:
    # AttentionInterface is global: register once per backend and point it at the current recorder.
    if backend not in _TAPS:
        _TAPS[backend] = AttentionCoreTap(backend)
    return _TAPS[backend]


def _cache_keyword(model: torch.nn.Module) -> str:
    """transformers >= 5 names the cache argument `cache`; older releases `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _scenario(options: CaptureOptions) -> list[tuple[int, int]]:
    """(phase, new tokens per request) for every forward call of the scenario."""
    calls: list[tuple[int, int]] = []
    for turn in range(options.turns):
        calls.append((PHASE_PREFILL, options.prompt_tokens if turn == 0 else options.turn_tokens))
        calls.extend((PHASE_DECODE, 1) for _ in range(options.decode_steps))
    return calls


def _run(
    loaded: LoadedModel, options: CaptureOptions, recorder: StepRecorder | None, cache: Any
) -> tuple[int, float]:
    model = loaded.model
    device = options.device
    generator = torch.Generator().manual_seed(options.seed)
    vocab = loaded.shape.vocab_size
    cache_kw = _cache_keyword(model)
    position = 0
    records = 0
    forward_seconds = 0.0
    next_ids: torch.Tensor | None = None
    with torch.inference_mode():
        for step, (phase, new_tokens) in enumerate(_scenario(options)):
            if phase == PHASE_PREFILL:
                ids = torch.randint(0, vocab, (options.batch, new_tokens), generator=generator)
                if step == 0 and options.shared_prefix_tokens:
                    ids[:, : options.shared_prefix_tokens] = ids[0, : options.shared_prefix_tokens]
            else:
                assert next_ids is not None
                ids = next_ids
            if recorder is not None:
                recorder.begin_step(step, phase, position, new_tokens)
            started = time.perf_counter()
            output = model(input_ids=ids.to(device), use_cache=True, logits_to_keep=1, **{cache_kw: cache})
            forward_seconds += time.perf_counter() - started
            if recorder is not None:
                records += recorder.end_step()
            position += new_tokens
            if device == "meta":
                next_ids = torch.randint(0, vocab, (options.batch, 1), generator=generator)
            else:
                next_ids = output.logits[:, -1, :].argmax(dim=-1, keepdim=True).cpu()
    return records, forward_seconds


def capture_trace(
    options: CaptureOptions, out: str | Path, *, chunk_records: int | None = None
) -> CaptureResult:
    """Run the scenario with recording hooks and write the logical trace to `out` (atomically)."""
    options.validate()
    if not Path(out).parent.is_dir():  # fail before spending time on the model
        raise TraceError("the output directory does not exist", file=str(out))
    tap = _tap(options.attention_backend)
    loaded = load_model(options)
    import transformers

    header = {
        "source": "capture",
        "model": model_header(loaded),
        "dtype": loaded.dtype,
        "dtype_bytes": dtype_bytes(loaded.dtype),
        "shapes": {
            "batch": options.batch,
            "prompt_tokens": options.prompt_tokens,
            "decode_steps": options.decode_steps,
            "turns": options.turns,
            "turn_tokens": options.turn_tokens if options.turns > 1 else 0,
        },
        "shared_prefix_tokens": options.shared_prefix_tokens,
        "options": options.as_header(),
        "artefacts": ARTEFACTS,
    }
    tools = {"torch": torch.__version__, "transformers": transformers.__version__}
    writer_kwargs = {"chunk_records": chunk_records} if chunk_records else {}
    with LogicalTraceWriter(out, header, extra_tools=tools, **writer_kwargs) as writer:
        recorder = StepRecorder(writer)
        hooks = install_hooks(loaded.model, recorder)
        tap.recorder, tap.hooks = recorder, hooks
        try:
            cache = TracingCache(recorder, hooks, loaded.model.config)
            records, seconds = _run(loaded, options, recorder, cache)
        finally:
            hooks.remove()
            tap.recorder = tap.hooks = None
    return CaptureResult(
        path=Path(out), steps=len(_scenario(options)), records=records, forward_seconds=seconds
    )


def run_uncaptured(options: CaptureOptions) -> CaptureResult:
    """The same scenario without hooks or tracing cache: the baseline for capture overhead."""
    from transformers import DynamicCache

    options.validate()
    _tap(options.attention_backend)  # the model config names the tap; with no recorder it only forwards
    loaded = load_model(options)
    try:
        cache = DynamicCache(config=loaded.model.config)
    except TypeError:
        cache = DynamicCache()
    _, seconds = _run(loaded, options, None, cache)
    return CaptureResult(path=None, steps=len(_scenario(options)), records=0, forward_seconds=seconds)
