"""Numpy reference for decode attention, and the operator description the kernels implement.

The reference works in float64 on whatever K/V values it is given: pass it the dequantized
cache to measure the datapath's arithmetic error, or the original values to measure the
quantization error as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from archsim.pnm.machine.dtypes import ELEMENT_BYTES

KV_DTYPES = ("fp16", "bf16", "fp8e4m3", "int8")
IO_DTYPES = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class DecodeAttentionSpec:
    """One decode step of attention for a batch: what the PNM kernels compute.

    MHA is group 1, MQA is kv_heads 1; `latent` is MLA (DeepSeek-V2): one shared latent cache
    row of qk_dim = kv_lora_rank + rope_dim elements per token, V is its first v_dim elements.
    block_tokens > 0 selects a paged KV cache with pages of that many tokens.
    """

    batch: int
    kv_heads: int
    group: int
    qk_dim: int
    v_dim: int
    context_tokens: tuple[int, ...]
    kv_dtype: str = "fp16"
    scale_group: int = 0  # elements per fp32 scale along a row; 0 = unscaled
    window_tokens: int = 0  # sliding window; 0 = full causal context
    block_tokens: int = 0
    latent: bool = False
    io_dtype: str = "fp32"
    softmax_scale: float | None = None  # default 1/sqrt(qk_dim)
    # Multi-token attention (isa/kernels/tree_decode.s): the last query_tokens keys of every sequence are new
    # tokens that attend at once (speculative verification, tree or beam steps). tree_parents[i] is new
    # token i's parent among them (-1: the committed prefix), parents before children; token i sees the
    # prefix and its ancestors and itself. None with query_tokens > 1 is a chain (a causal mask).
    query_tokens: int = 1
    tree_parents: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if min(self.batch, self.kv_heads, self.group, self.qk_dim, self.v_dim) < 1:
            raise ValueError("batch, kv_heads, group, qk_dim and v_dim must be positive")
        if len(self.context_tokens) != self.batch or min(self.context_tokens) < 1:
            raise ValueError("context_tokens needs one positive length per sequence")
        if self.kv_dtype not in KV_DTYPES or self.io_dtype not in IO_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, io_dtype one of {IO_DTYPES}")
        if self.kv_dtype == "int8" and self.scale_group <= 0:
            raise ValueError("int8 KV needs scale_group > 0")
        if self.latent and (self.kv_heads != 1 or self.v_dim > self.qk_dim):
            raise ValueError("latent (MLA) attention has one KV head and v_dim <= qk_dim")
        if min(self.scale_group, self.window_tokens, self.block_tokens) < 0:
            raise ValueError("scale_group, window_tokens and block_tokens must be >= 0")
        if self.query_tokens < 1:
            raise ValueError(f"query_tokens must be positive, got {self.query_tokens}")
        if self.multi_token:
            self._check_tree()

    def _check_tree(self) -> None:
        if self.latent or self.block_tokens or self.window_tokens:
            raise ValueError("multi-token attention runs over a contiguous GQA cache without a window")
        if self.query_tokens > min(self.context_tokens):
            raise ValueError(f"{self.query_tokens} query tokens exceed the shortest context "
                             f"({min(self.context_tokens)} tokens, which include them)")
        if self.tree_parents is not None:
            tree_error(self.tree_parents, self.query_tokens)

    @property
    def multi_token(self) -> bool:
        """Runs on the multi-token kernel (several query tokens, or a tree given even for one)."""
        return self.query_tokens > 1 or self.tree_parents is not None

    @property
    def parents(self) -> np.ndarray:
        """int32 [query_tokens]: each new token's parent (-1: the prefix); a chain unless a tree is given."""
        if self.tree_parents is not None:
            return np.array(self.tree_parents, dtype=np.int32)
        return np.arange(-1, self.query_tokens - 1, dtype=np.int32)

    @property
    def query_heads(self) -> int:
        return self.kv_heads * self.group

    @property
    def max_context(self) -> int:
        return max(self.context_tokens)

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(self.qk_dim)

    @property
    def kv_element_bytes(self) -> int:
        return ELEMENT_BYTES[self.kv_dtype]


def tree_error(parents: tuple[int, ...] | list[int], query_tokens: int | None = None) -> None:
    """Raise ValueError unless `parents` is a tree over its tokens listed parents first (parent[i] in [-1, i))."""
    if query_tokens is not None and len(parents) != query_tokens:
        raise ValueError(f"the tree has {len(parents)} parents for {query_tokens} query tokens")
    if not parents:
        raise ValueError("a tree needs at least one token")
    for i, parent in enumerate(parents):
        if not -1 <= int(parent) < i:
            raise ValueError(f"not a tree: token {i}'s parent is {parent}; it must be -1 (the prefix) or an "
                             f"earlier token (0..{i - 1})" if i else
                             f"not a tree: token 0's parent is {parent}; the first token's parent is -1 (the prefix)")


def ancestors_or_self(parents: np.ndarray) -> np.ndarray:
    """bool [q, q]: [i, j] when new token j is token i or one of its ancestors (the tree mask)."""
    q = len(parents)
    seen = np.eye(q, dtype=bool)
    for i in range(q):
        if parents[i] >= 0:
            seen[i] |= seen[parents[i]]
    return seen


def chain_lengths(parents: np.ndarray) -> np.ndarray:
    """int32 [q]: keys each new token sees among the new ones (its depth + 1)."""
    return ancestors_or_self(parents).sum(axis=1).astype(np.int32)


def visible_keys(context_tokens: int, window_tokens: int) -> np.ndarray:
    """Boolean mask over key positions 0..context-1 seen by the query at position context-1."""
    positions = np.arange(context_tokens)
    query = context_tokens - 1
    keep = positions <= query
    if window_tokens > 0:
        keep &= positions > query - window_tokens
    return keep


def decode_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                     context_tokens: tuple[int, ...] | np.ndarray, *, softmax_scale: float,
                     window_tokens: int = 0) -> np.ndarray:
    """softmax(scale * q k^T) v for one new token per sequence, in float64.

    q [batch, kv_heads * group, qk_dim]; k [batch, kv_heads, tokens, qk_dim];
    v [batch, kv_heads, tokens, v_dim]; returns [batch, kv_heads * group, v_dim].
    Query head h uses KV head h // group (the GQA convention).
    """
    batch, query_heads, _ = q.shape
    kv_heads = k.shape[1]
    group = query_heads // kv_heads
    out = np.zeros((batch, query_heads, v.shape[-1]))
    for b in range(batch):
        length = int(context_tokens[b])
        keep = visible_keys(length, window_tokens)
        kb = k[b, :, :length][:, keep].astype(np.float64)
        vb = v[b, :, :length][:, keep].astype(np.float64)
        qb = q[b].astype(np.float64).reshape(kv_heads, group, -1)
        scores = (qb @ kb.transpose(0, 2, 1)) * softmax_scale  # [kv_heads, group, tokens]
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        out[b] = (weights @ vb).reshape(query_heads, -1)
    return out


def tree_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, context_tokens: tuple[int, ...] | np.ndarray,
                   parents: np.ndarray, *, softmax_scale: float) -> np.ndarray:
    """Multi-token attention in float64: the last len(parents) keys of each sequence are new tokens.

    q [batch, query_tokens, kv_heads * group, qk_dim]; returns [batch, query_tokens, kv_heads * group, v_dim].
    New token i sees every earlier (committed) key and, among the new ones, itself and its ancestors.
    """
    batch, tokens, query_heads, _ = q.shape
    seen = ancestors_or_self(np.asarray(parents))
    out = np.zeros((batch, tokens, query_heads, v.shape[-1]))
    for b in range(batch):
        length = int(context_tokens[b])
        prefix = length - tokens
        for i in range(tokens):
            keep = np.concatenate([np.ones(prefix, dtype=bool), seen[i]])
            kb = k[b, :, :length][:, keep][None]  # [1, kv_heads, keys, dim] against decode_attention's batch
            vb = v[b, :, :length][:, keep][None]
            out[b, i] = decode_attention(q[b, i][None], kb, vb, (int(keep.sum()),), softmax_scale=softmax_scale)[0]
    return out
