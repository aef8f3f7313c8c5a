"""Drive a model through a request scenario and write its logical trace.

The runner owns the generation loop (not `model.generate`) so that one step is exactly one forward call
and the scenario - prefill, decode, later chat turns on the kept cache - is explicit and reproducible. Beam
search and assisted (speculative) decoding need transformers' own selection logic: with those decodings
`model.generate` runs over the tracing cache, and hooks on the model's forward make each call one step
(the prefill, then one token per beam, or a verification chunk of the draft's tokens after any rejected
ones were cropped). The assistant's own forward calls and cache are not recorded: the trace is the model's.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from archsim.capture.hooks import AttentionCoreTap, install_hooks
from archsim.capture.kv import TracingCache
from archsim.capture.loader import LoadedModel, load_model, model_header
from archsim.capture.options import CaptureOptions
from archsim.capture.recorder import StepRecorder
from archsim.errors import ConfigError, TraceError
from archsim.limits import check_fits_memory
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
    return len(_scenario(options)), records, forward_seconds


def _prompt(options: CaptureOptions, vocab: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(options.seed)
    ids = torch.randint(0, vocab, (options.batch, options.prompt_tokens), generator=generator)
    if options.shared_prefix_tokens:
        ids[:, : options.shared_prefix_tokens] = ids[0, : options.shared_prefix_tokens]
    return ids


def _run_generate(
    loaded: LoadedModel, options: CaptureOptions, recorder: StepRecorder | None, cache: Any
) -> tuple[int, int, float]:
    """transformers' generate (beam search or assisted decoding) with every forward call of the model a step."""
    model = loaded.model
    state = {"step": 0, "records": 0, "seconds": 0.0, "start": 0.0}

    def before(_module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if recorder is not None:
            phase = PHASE_PREFILL if state["step"] == 0 else PHASE_DECODE
            recorder.begin_step(state["step"], phase, int(cache.get_seq_length()), int(ids.shape[1]))
            if hasattr(cache, "flush_pending"):
                cache.flush_pending()
        state["start"] = time.perf_counter()

    def after(_module: Any, _args: tuple, _kwargs: dict, _output: Any) -> None:
        state["seconds"] += time.perf_counter() - state["start"]
        if recorder is not None:
            state["records"] += recorder.end_step()
        state["step"] += 1

    kwargs: dict[str, Any] = {"max_new_tokens": options.decode_steps, "min_new_tokens": options.decode_steps,
                              "do_sample": False, "pad_token_id": 0, _cache_keyword(model): cache}
    if options.decoding == "beam":
        kwargs.update(num_beams=options.num_beams, early_stopping=False)
    else:
        assert options.assistant is not None
        assistant = load_model(replace(options, model=options.assistant, layers=None), traced=False).model
        assistant.generation_config.num_assistant_tokens = options.draft_tokens
        assistant.generation_config.num_assistant_tokens_schedule = "constant"  # k stays the drafted length
        assistant.generation_config.assistant_confidence_threshold = 0.0  # ... however unsure the draft is
        kwargs["assistant_model"] = assistant
    handles = [model.register_forward_pre_hook(before, with_kwargs=True),
               model.register_forward_hook(after, with_kwargs=True)]
    try:
        with torch.inference_mode():
            model.generate(_prompt(options, loaded.shape.vocab_size), **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return state["step"], state["records"], state["seconds"]


def _check_sizes(options: CaptureOptions, loaded: LoadedModel) -> None:
    """A request no longer than the model's context window, and (on the CPU) a KV cache this machine holds."""
    tokens = options.prompt_tokens + (options.turns - 1) * options.turn_tokens + options.turns * options.decode_steps
    limit = getattr(getattr(loaded.model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and tokens > limit:
        raise ConfigError(f"a request's {tokens:,} tokens (prompt, later turns and decode steps) exceed "
                          f"{loaded.shape.name or options.model}'s context window of {limit:,}", where="prompt_tokens")
    check_fits_memory(options.batch, tokens * 8, "sequences' token ids", where="batch")
    if options.device == "cpu":
        shape = loaded.shape
        per_token = shape.num_layers * shape.kv_elements_per_token_per_layer() * dtype_bytes(loaded.dtype)
        check_fits_memory(options.batch * tokens, per_token, "tokens of KV cache", where="batch")


def capture_trace(
    options: CaptureOptions, out: str | Path, *, chunk_records: int | None = None
) -> CaptureResult:
    """Run the scenario with recording hooks and write the logical trace to `out` (atomically)."""
    options.validate()
    if not Path(out).parent.is_dir():  # fail before spending time on the model
        raise TraceError("the output directory does not exist", file=str(out))
    tap = _tap(options.attention_backend)
    loaded = load_model(options)
    _check_sizes(options, loaded)
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
            run = _run_generate if options.decoding != "greedy" else _run
            steps, records, seconds = run(loaded, options, recorder, cache)
        finally:
            hooks.remove()
            tap.recorder = tap.hooks = None
    return CaptureResult(path=Path(out), steps=steps, records=records, forward_seconds=seconds)


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
    run = _run_generate if options.decoding != "greedy" else _run
    steps, _, seconds = run(loaded, options, None, cache)
    return CaptureResult(path=None, steps=steps, records=0, forward_seconds=seconds)
