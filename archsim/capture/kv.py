"""A DynamicCache that records every KV write and read the model makes through it.

Transformers' attention modules call `cache.update(new_k, new_v, layer_idx)` and attend over the tensors
it returns, so the update call sees exactly what is written (the new tokens) and what the attention
kernel reads (the returned K and V). Sliding-window layers return fewer tokens, and the read range
follows the returned length. MLA models (DeepSeek-V2) cache the compressed latent c_KV as "keys" and the
decoupled RoPE key as "values" with one head; they are recorded as kinds k and v with head_count 1.

Beam search reorders the cache between forward calls (`reorder_cache`): a row that continues another beam
copies that beam's K and V, recorded as a read of the source request and a write of the destination over
the tokens cached so far, in the step that follows (`flush_pending`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

from archsim.capture.hooks import HookSet, tensor_bytes
from archsim.capture.recorder import StepRecorder
from archsim.trace.logical import KIND_K, KIND_V, OP_READ, OP_WRITE


class TracingCache(DynamicCache):
    """DynamicCache plus a record per request for each K/V write and read."""

    def __init__(self, recorder: StepRecorder, hooks: HookSet, config: Any) -> None:
        try:
            super().__init__(config=config)
        except TypeError:  # transformers < 4.56 takes no config
            super().__init__()
        self._recorder = recorder
        self._hooks = hooks
        self._seen_tokens: dict[int, int] = {}  # layer -> tokens written so far (slots in use)
        self._token_bytes: dict[int, tuple[int, dict[int, int]]] = {}  # layer -> heads, {kind: B per token}
        self._pending: list[tuple[int, int, int, int, int, int, int]] = []  # beam copies, for the next step

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        before = self._seen_tokens.get(layer_idx, 0)
        new_tokens = key_states.shape[-2]
        after = before + new_tokens
        self._seen_tokens[layer_idx] = after
        recorder = self._recorder
        operator = self._hooks.kv_operators[layer_idx]
        batch, heads = key_states.shape[0], key_states.shape[1]
        read_tokens = keys.shape[-2]
        per_token = {kind: tensor_bytes(t) // batch // max(new_tokens, 1)
                     for kind, t in ((KIND_K, key_states), (KIND_V, value_states))}
        self._token_bytes[layer_idx] = (heads, per_token)
        # the new tokens' K and V are written, then the whole cache so far is read
        accesses = ((OP_WRITE, key_states, value_states, before, new_tokens),
                    (OP_READ, keys, values, after - read_tokens, read_tokens))
        for op, k_tensor, v_tensor, token_start, token_count in accesses:
            for kind, tensor in ((KIND_K, k_tensor), (KIND_V, v_tensor)):
                per_request = tensor_bytes(tensor) // batch
                for request in range(batch):
                    recorder.add(op, kind, layer_idx, per_request, operator, head_start=0, head_count=heads,
                                 token_start=token_start, token_count=token_count, request=request)
        return keys, values

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        moved = [(dst, src) for dst, src in enumerate(beam_idx.tolist()) if dst != src]
        for layer, seen in self._seen_tokens.items():
            heads, per_token = self._token_bytes[layer]
            operator = self._hooks.kv_operators[layer]
            for dst, src in moved:
                for kind in (KIND_K, KIND_V):
                    size = per_token[kind] * seen
                    self._pending.append((OP_READ, kind, layer, size, operator, heads, seen, src))
                    self._pending.append((OP_WRITE, kind, layer, size, operator, heads, seen, dst))

    def flush_pending(self) -> None:
        """Record the beam copies made since the last step into the current one."""
        for op, kind, layer, nbytes, operator, heads, tokens, request in self._pending:
            self._recorder.add(op, kind, layer, nbytes, operator, head_start=0, head_count=heads, token_start=0,
                               token_count=tokens, request=request)
        self._pending.clear()

    def crop(self, max_length: int) -> None:
        """Backtracking and rejected drafts: drop tokens past `max_length` (a positive length), or the last
        -`max_length` tokens (0 and negative: transformers 5's only form); later writes reuse those slots."""
        super().crop(max_length)
        seen = max(self._seen_tokens.values(), default=0)
        length = max_length if max_length > 0 else seen + max_length
        self._seen_tokens = {layer: min(tokens, length) for layer, tokens in self._seen_tokens.items()}
