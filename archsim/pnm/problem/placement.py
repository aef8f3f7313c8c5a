"""Place a decode-attention problem into a DRAM image and derive the kernel's constants.

This is the host side of the contract documented at the top of each kernel in isa/kernels/:
KV caches (quantized to the KV dtype, with per-block scales), block tables and sequence
lengths go to byte addresses; the addresses, strides and shapes become `-D` style defines.
Contiguous caches use [batch][head][token][dim] (head-major) or [batch][token][head][dim]
(token-major); paged caches use pages of [head][token][dim] or [token][head][dim] assigned to
sequences in a shuffled order through per-sequence block tables.

Without K/V data (k=None) the caches are only reserved: the run can then produce access
traces (compute=False) for caches far larger than memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from archsim.isa.table import KERNELS_DIR
from archsim.pnm.machine import dtypes
from archsim.pnm.machine.memimage import DramImage
from archsim.pnm.problem.reference import DecodeAttentionSpec, chain_lengths

REGION_ALIGN_BYTES = 4096  # DRAM regions start on page boundaries (clean row-buffer behaviour)


@dataclass
class Placement:
    """A problem laid out in DRAM, ready to run with `kernel` and `defines`."""

    spec: DecodeAttentionSpec
    kernel: Path
    defines: dict[str, object]  # shape and layout constants shared by every unit
    dram: DramImage
    queries: np.ndarray | None  # [batch, (query_tokens,) query_heads, qk_dim] fp32 (None: trace-only placement)
    k_seen: np.ndarray | None  # [batch, kv_heads, tokens, qk_dim]: K as the datapath sees it
    v_seen: np.ndarray | None  # [batch, kv_heads, tokens, v_dim]
    end_address: int  # first free byte after everything placed (split-K records go here)


@dataclass
class _Rows:
    """A [batch, head, token, width_bytes] byte array to place, or (data None) just its size."""

    width_bytes: int
    data: np.ndarray | None


def kernel_for(spec: DecodeAttentionSpec) -> Path:
    if spec.multi_token:
        return KERNELS_DIR / "tree_decode.s"
    if spec.latent:
        return KERNELS_DIR / "mla_decode.s"
    return KERNELS_DIR / ("paged_gqa_decode.s" if spec.block_tokens else "gqa_decode.s")


def random_inputs(spec: DecodeAttentionSpec,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standard-normal queries, keys and values (fp32) of the spec's shapes; MLA's V is the
    leading v_dim elements of its latent K rows. Multi-token queries are [batch, query_tokens, heads, dim]."""
    tokens = spec.max_context
    lead = (spec.batch, spec.query_tokens) if spec.multi_token else (spec.batch,)
    q = rng.standard_normal((*lead, spec.query_heads, spec.qk_dim), dtype=np.float32)
    k = rng.standard_normal((spec.batch, spec.kv_heads, tokens, spec.qk_dim), dtype=np.float32)
    v = k[..., :spec.v_dim] if spec.latent else \
        rng.standard_normal((spec.batch, spec.kv_heads, tokens, spec.v_dim), dtype=np.float32)
    return q, k, v


class _Allocator:
    def __init__(self, dram: DramImage, base: int) -> None:
        self.dram, self.next = dram, base

    def put(self, data: np.ndarray | None, size_bytes: int) -> int:
        """Place `data` (or reserve `size_bytes` when it is None) at the next aligned address."""
        if size_bytes == 0:
            return 0
        address = -(-self.next // REGION_ALIGN_BYTES) * REGION_ALIGN_BYTES
        if data is None:
            self.dram.reserve(address, size_bytes)
        else:
            self.dram.write(address, np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        self.next = address + size_bytes
        return address


def _quantize(x: np.ndarray | None, spec: DecodeAttentionSpec,
              dim: int) -> tuple[_Rows, _Rows, np.ndarray | None]:
    """Codes and scales of rows of `dim` elements (sizes only when x is None), and the
    dequantized values the datapath will see."""
    size = dtypes.ELEMENT_BYTES[spec.kv_dtype]
    scale_bytes = 4 * dtypes.scales_per_row(dim, spec.scale_group)
    if x is None:
        return _Rows(dim * size, None), _Rows(scale_bytes, None), None
    rows = x.reshape(-1, dim)
    codes, scales = dtypes.quantize(rows, spec.kv_dtype, spec.scale_group)
    seen = dtypes.dequantize(codes, scales, spec.kv_dtype, spec.scale_group, dim).reshape(x.shape)
    lead = x.shape[:-1]
    no_scales = np.zeros((*lead, 0), np.uint8)
    scale_rows = no_scales if scales is None else scales.reshape(*lead, -1).view(np.uint8)
    return _Rows(dim * size, codes.reshape(*lead, -1)), _Rows(scale_bytes, scale_rows), seen


def place_decode_attention(spec: DecodeAttentionSpec, q: np.ndarray | None = None,
                           k: np.ndarray | None = None, v: np.ndarray | None = None, *,
                           tile_tokens: int = 64, token_major: bool = False, base_address: int = 0,
                           dram_capacity_bytes: int = 16 * 2**30, seed: int = 0) -> Placement:
    """Quantize and place K/V (+ scales, lengths, block tables) into a new DRAM image.

    q, k, v as from `random_inputs` (k [batch, kv_heads, tokens >= max context, qk_dim]); with
    k None the caches are reserved, not stored (trace-only). tile_tokens is the contiguous
    kernels' tile (paged kernels use the page size); seed shuffles the physical page order.
    """
    dram = DramImage(dram_capacity_bytes)
    alloc = _Allocator(dram, base_address)
    k_rows, ks_rows, k_seen = _quantize(k, spec, spec.qk_dim)
    if spec.latent:  # V is the leading part of the latent rows: nothing more to store
        v_rows, vs_rows = _Rows(0, None), _Rows(0, None)
        v_seen = None if k_seen is None else k_seen[..., :spec.v_dim]
    else:
        v_rows, vs_rows, v_seen = _quantize(None if k is None else v, spec, spec.v_dim)
    defines: dict[str, object] = {
        "BATCH": spec.batch, "GROUP": spec.group, "KV_DTYPE": spec.kv_dtype, "SCALE_GROUP": spec.scale_group,
        "IO_DTYPE": spec.io_dtype, "SM_SCALE": float(spec.scale), "WINDOW": spec.window_tokens,
    }
    if spec.latent:
        defines.update(QK_DIM=spec.qk_dim, V_DIM=spec.v_dim)
    else:
        defines.update(KV_HEADS=spec.kv_heads, HEAD_DIM=spec.qk_dim)
    defines["LENS_ADDR"] = alloc.put(np.array(spec.context_tokens, dtype="<i4"), 4 * spec.batch)
    if spec.multi_token:  # the tree of the new tokens, shared by the batch: parents and chain lengths
        parents = spec.parents.astype("<i4")
        defines["QTOKENS"] = spec.query_tokens
        defines["PAR_ADDR"] = alloc.put(parents, parents.nbytes)
        defines["CHAIN_ADDR"] = alloc.put(chain_lengths(parents).astype("<i4"), parents.nbytes)
    tokens = spec.max_context if k is None else k.shape[2]
    tensors = {"K": k_rows, "KS": ks_rows, "V": v_rows, "VS": vs_rows}
    if spec.block_tokens:
        _place_paged(spec, alloc, defines, tensors, token_major, seed)
    else:
        defines["TILE"] = tile_tokens
        _place_contiguous(spec, alloc, defines, tensors, tokens, token_major)
    end = -(-alloc.next // REGION_ALIGN_BYTES) * REGION_ALIGN_BYTES
    defines["PART_ADDR"] = end
    queries = None if q is None else np.asarray(q, dtype=np.float32)
    return Placement(spec, kernel_for(spec), defines, dram, queries, k_seen, v_seen, end)


def _place_contiguous(spec: DecodeAttentionSpec, alloc: _Allocator, defines: dict[str, object],
                      tensors: dict[str, _Rows], tokens: int, token_major: bool) -> None:
    heads = spec.kv_heads
    for name, rows in tensors.items():
        if spec.latent and name in ("V", "VS"):
            continue
        data = rows.data.transpose(0, 2, 1, 3) if token_major and rows.data is not None else rows.data
        defines[f"{name}_ADDR"] = alloc.put(data, spec.batch * heads * tokens * rows.width_bytes)
    for prefix, width in (("", tensors["K"].width_bytes), ("S_", tensors["KS"].width_bytes)):
        if token_major:  # (token, head, batch) strides in bytes
            strides = (heads * width, width, tokens * heads * width)
        else:
            strides = (width, tokens * width, heads * tokens * width)
        defines[f"{prefix}TOKEN_STRIDE"], head, defines[f"{prefix}BATCH_STRIDE"] = strides
        if not spec.latent:
            defines[f"{prefix}HEAD_STRIDE"] = head


def _paginate(rows: _Rows, pages_of: list[np.ndarray], num_pages: int, block: int,
              token_major: bool) -> np.ndarray | None:
    """Scatter [batch, head, token, bytes] rows into a page pool [page][head][block][bytes]
    (or [page][block][head][bytes] when token_major)."""
    if rows.data is None:
        return None
    heads, width = rows.data.shape[1], rows.data.shape[3]
    pool = np.zeros((num_pages, heads, block, width), dtype=rows.data.dtype)
    for b, pages in enumerate(pages_of):
        for j, page in enumerate(pages):
            chunk = rows.data[b, :, j * block:(j + 1) * block]
            pool[page, :, :chunk.shape[1]] = chunk
    return pool.transpose(0, 2, 1, 3) if token_major else pool


def _place_paged(spec: DecodeAttentionSpec, alloc: _Allocator, defines: dict[str, object],
                 tensors: dict[str, _Rows], token_major: bool, seed: int) -> None:
    block, heads = spec.block_tokens, spec.kv_heads
    counts = [-(-n // block) for n in spec.context_tokens]
    max_blocks, num_pages = max(counts), sum(counts)
    order = np.random.default_rng(seed).permutation(num_pages)  # physical pages out of order
    pages_of, cursor = [], 0
    table = np.full((spec.batch, max_blocks), -1, dtype="<i4")  # unused entries are never read
    for b, count in enumerate(counts):
        pages_of.append(order[cursor:cursor + count])
        table[b, :count] = pages_of[-1]
        cursor += count
    defines.update(BLOCK_TOKENS=block, MAX_BLOCKS=max_blocks)
    defines["BT_ADDR"] = alloc.put(table, table.nbytes)
    for name, rows in tensors.items():
        if spec.latent and name in ("V", "VS"):
            continue
        data = _paginate(rows, pages_of, num_pages, block, token_major)
        defines[f"{name}_ADDR"] = alloc.put(data, num_pages * heads * block * rows.width_bytes)
    for prefix, width in (("", tensors["K"].width_bytes), ("S_", tensors["KS"].width_bytes)):
        if token_major:  # (page, token, head) strides in bytes
            page, token, head = block * heads * width, heads * width, width
        else:
            page, token, head = heads * block * width, width, block * width
        defines[f"{prefix}PAGE_STRIDE"], defines[f"{prefix}TOKEN_STRIDE"] = page, token
        if not spec.latent:
            defines[f"{prefix}HEAD_STRIDE"] = head
