"""`--shape heads=32,kv_heads=8,head_dim=128,context=8192,batch=1`: the decode-attention problem of a run.

The kernel decides which keys apply: contiguous GQA kernels (gqa_decode.s and anything else following its
contract), paged kernels (`paged` in the file name: KV pages of `block` tokens), MLA kernels (`mla` in
the name: one latent KV head of kv_lora_rank + rope_dim elements, all `heads` query heads share it) and
multi-token kernels (`tree` in the name: `queries` new tokens per sequence, the last of its `context`
tokens, attending at once under the tree `parents=-1:0:0:1` -- colon-separated, -1 for the prefix --
or, without `parents`, a causal chain).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from archsim.errors import ConfigError
from archsim.pnm.problem.reference import IO_DTYPES, KV_DTYPES, DecodeAttentionSpec, tree_error

_INT_KEYS = ("heads", "kv_heads", "head_dim", "v_dim", "context", "batch", "scale_group", "window", "block",
             "tile", "kv_lora_rank", "rope_dim", "queries")
_WORD_KEYS = {"kv_dtype": KV_DTYPES, "io_dtype": IO_DTYPES}
_TREE_KEYS = ("queries", "parents")
SHAPE_KEYS: tuple[str, ...] = _INT_KEYS + tuple(_WORD_KEYS) + ("parents",)
# the kernels receive lengths and sizes as int32 words in DRAM (placement's LENS_ADDR table)
SHAPE_INT_MAX = 2**31 - 1


class ShapeError(ConfigError):
    """A `--shape` string names an unknown key or an impossible shape."""


@dataclass(frozen=True)
class Shape:
    spec: DecodeAttentionSpec
    tile_tokens: int  # contiguous kernels' tile (paged kernels use the page)
    text: str

    @property
    def query_heads(self) -> int:
        return self.spec.query_heads

    @property
    def context(self) -> int:
        return self.spec.max_context


def kernel_kind(kernel: Path) -> str:
    name = kernel.name.lower()
    if "mla" in name:
        return "mla"
    if "tree" in name:
        return "tree"
    return "paged" if "paged" in name else "contiguous"


def _fail(message: str, key: str | None = None) -> ShapeError:
    return ShapeError(message, where="--shape" + (f" {key}" if key else ""))


def _parse_pairs(text: str) -> dict[str, int | str]:
    values: dict[str, int | str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise _fail(f"expected key=value, got {part!r}")
        if key not in SHAPE_KEYS:
            raise _fail(f"unknown shape key {key!r} (known: {', '.join(SHAPE_KEYS)})", key)
        if key in values:
            raise _fail(f"{key} is given twice", key)
        if key == "parents":
            values[key] = value
            continue
        if key in _WORD_KEYS:
            if value not in _WORD_KEYS[key]:
                raise _fail(f"{key} must be one of {', '.join(_WORD_KEYS[key])}, got {value!r}", key)
            values[key] = value
            continue
        try:
            number = int(value, 0)
        except ValueError:
            raise _fail(f"{key} must be an integer, got {value!r}", key) from None
        if number < 0 or (number == 0 and key not in ("scale_group", "window", "block")):
            raise _fail(f"{key} must be positive, got {number}", key)
        if number > SHAPE_INT_MAX:
            raise _fail(f"{key} {number:,} exceeds {SHAPE_INT_MAX:,}, the largest the kernels' int32 words hold", key)
        values[key] = number
    return values


def _tree(values: dict[str, int | str], kernel: Path) -> dict[str, object]:
    """query_tokens and tree_parents of a multi-token kernel's shape (a chain without `parents`)."""
    if "window" in values:
        raise _fail(f"window does not apply to {kernel.name}: the tree decides what a new token sees", "window")
    if "parents" not in values:
        return {"query_tokens": int(values.get("queries", 1)), "tree_parents": (-1,) if "queries" not in values
                else tuple(range(-1, int(values["queries"]) - 1))}
    try:
        parents = tuple(int(p, 0) for p in str(values["parents"]).split(":"))
    except ValueError:
        raise _fail(f"parents must be colon-separated integers, got {values['parents']!r}", "parents") from None
    queries = int(values.get("queries", len(parents)))
    try:
        tree_error(parents, queries)
    except ValueError as exc:
        raise _fail(str(exc), "parents") from None
    return {"query_tokens": queries, "tree_parents": parents}


def _check_kv_bytes(batch: int, kv_heads: int, context: int, qk_dim: int, v_dim: int, kv_dtype: str,
                    capacity_bytes: int | None) -> None:
    """The KV cache a shape describes must fit the memory it runs on (checked before anything per sequence is
    built, so that a batch of 2^31 sequences is one error, not an exhausted machine). An MLA kernel's V is a
    view of its latent K (v_dim 0 here)."""
    if capacity_bytes is None:
        return
    element = 1 if kv_dtype in ("fp8e4m3", "int8") else 2
    kv_bytes = batch * kv_heads * context * (qk_dim + v_dim) * element
    if kv_bytes > capacity_bytes:
        raise _fail(f"its KV cache takes {kv_bytes:,} bytes (batch x kv_heads x context x (K + V) x {element} B); "
                    f"the memory holds {capacity_bytes:,}")


def parse_shape(text: str, kernel: Path, capacity_bytes: int | None = None) -> Shape:
    """The decode-attention problem `text` describes for `kernel` (see the module docstring); with
    `capacity_bytes`, one whose KV cache exceeds the memory is refused."""
    values = _parse_pairs(text)
    kind = kernel_kind(kernel)
    if "context" not in values:
        raise _fail("context (tokens per sequence) is required", "context")
    if "heads" not in values:
        raise _fail("heads (query heads) is required", "heads")
    heads, context, batch = int(values["heads"]), int(values["context"]), int(values.get("batch", 1))
    for key in _TREE_KEYS:
        if key in values and kind != "tree":
            raise _fail(f"{key} applies only to multi-token kernels (tree_decode.s), not {kernel.name}", key)
    if kind == "mla":
        for key in ("head_dim", "v_dim"):
            if key in values:
                raise _fail(f"{key} does not apply to an MLA kernel (use kv_lora_rank and rope_dim)", key)
        if values.get("kv_heads", 1) != 1:
            raise _fail("an MLA kernel has one latent KV head", "kv_heads")
        lora, rope = int(values.get("kv_lora_rank", 512)), int(values.get("rope_dim", 64))
        kv_heads, qk_dim, v_dim, group = 1, lora + rope, lora, heads
    else:
        for key in ("kv_lora_rank", "rope_dim"):
            if key in values:
                raise _fail(f"{key} applies only to MLA kernels", key)
        kv_heads = int(values.get("kv_heads", heads))
        if heads % kv_heads:
            raise _fail(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})", "kv_heads")
        qk_dim = int(values.get("head_dim", 128))
        v_dim = int(values.get("v_dim", qk_dim))
        if v_dim != qk_dim:
            raise _fail("GQA kernels need v_dim == head_dim", "v_dim")
        group = heads // kv_heads
    tree = _tree(values, kernel) if kind == "tree" else {}
    block = int(values.get("block", 16 if kind == "paged" else 0))
    if kind == "paged" and block == 0:
        raise _fail("a paged kernel needs block > 0 (tokens per KV page)", "block")
    if kind in ("contiguous", "tree") and block:
        raise _fail(f"block applies to paged kernels, not {kernel.name}", "block")
    tile = int(values.get("tile", 32 if kind == "mla" else 64))
    if block and "tile" in values and tile != block:
        raise _fail("a paged kernel's tile is its page: drop tile or make it equal to block", "tile")
    _check_kv_bytes(batch, kv_heads, context, qk_dim, 0 if kind == "mla" else v_dim,
                    str(values.get("kv_dtype", "fp16")), capacity_bytes)
    try:
        spec = DecodeAttentionSpec(
            batch=batch, kv_heads=kv_heads, group=group, qk_dim=qk_dim, v_dim=v_dim,
            context_tokens=(context,) * batch, kv_dtype=str(values.get("kv_dtype", "fp16")),
            scale_group=int(values.get("scale_group", 0)), window_tokens=int(values.get("window", 0)),
            block_tokens=block, latent=kind == "mla", io_dtype=str(values.get("io_dtype", "fp32")), **tree)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    return Shape(spec, block or tile, text)


def with_kv_heads(shape: Shape, kv_heads: int) -> Shape:
    """The same problem restricted to `kv_heads` KV heads (one unit group's shard)."""
    return replace(shape, spec=replace(shape.spec, kv_heads=kv_heads))
