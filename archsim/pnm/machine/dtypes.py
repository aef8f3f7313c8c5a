"""Element types of the PNM datapath: bit-exact conversions and block-scaled quantization.

Names match the ISA enums: fp32, fp16, bf16, fp8e4m3 (OCP FP8 E4M3FN: bias 7, max 448, no
infinities, NaN = S.1111.111), int8 (symmetric, -127..127). Everything is vectorized numpy;
rounding is round-to-nearest-even, conversions to fp8 saturate to +-448.
"""

from __future__ import annotations

import numpy as np

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8e4m3": 1, "int8": 1}
# Largest code magnitude a per-group scale maps the group's absolute maximum onto.
QUANT_MAX = {"fp8e4m3": 448.0, "int8": 127.0}


def _check(dtype: str) -> None:
    if dtype not in ELEMENT_BYTES:
        raise ValueError(f"unknown element type {dtype!r} (one of {', '.join(ELEMENT_BYTES)})")


def bf16_to_fp32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def fp32_to_bf16(values: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) of fp32 values, round to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    nan = np.isnan(values)
    return np.where(nan, (bits >> 16) | np.uint32(0x40), rounded).astype(np.uint16)


def _fp8_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent.astype(np.float64) - 7.0)
    subnormal = mantissa / 8.0 * 2.0**-6
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values.astype(np.float32)


FP8E4M3_VALUES = _fp8_table()
_FP8_POSITIVE = FP8E4M3_VALUES[:0x7F]  # codes 0..126: 0 .. 448, strictly increasing


def fp8e4m3_to_fp32(codes: np.ndarray) -> np.ndarray:
    return FP8E4M3_VALUES[np.asarray(codes, dtype=np.uint8)]


def fp32_to_fp8e4m3(values: np.ndarray) -> np.ndarray:
    """E4M3FN codes (uint8), round to nearest even, saturating to +-448; NaN -> 0x7F."""
    x = np.asarray(values, dtype=np.float32)
    magnitude = np.minimum(np.abs(x), np.float32(448.0))
    upper = np.clip(np.searchsorted(_FP8_POSITIVE, magnitude, side="left"), 0, 0x7E)
    lower = np.maximum(upper - 1, 0)
    gap_low = magnitude - _FP8_POSITIVE[lower]
    gap_high = _FP8_POSITIVE[upper] - magnitude
    take_upper = (gap_high < gap_low) | ((gap_high == gap_low) & (upper % 2 == 0))
    code = np.where(take_upper, upper, lower).astype(np.uint8)
    code = np.where(np.signbit(x) & (code != 0), code | 0x80, code).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 values of little-endian raw bytes (uint8) holding `dtype` elements."""
    _check(dtype)
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if dtype == "fp32":
        return raw.view("<f4").astype(np.float32)
    if dtype == "fp16":
        return raw.view("<f2").astype(np.float32)
    if dtype == "bf16":
        return bf16_to_fp32(raw.view("<u2"))
    if dtype == "fp8e4m3":
        return FP8E4M3_VALUES[raw]
    return raw.view(np.int8).astype(np.float32)


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Raw little-endian bytes (uint8, flattened) of fp32 `values` converted to `dtype`.
    int8 rounds to nearest even and saturates to -127..127."""
    _check(dtype)
    x = np.asarray(values, dtype=np.float32).ravel()
    if dtype == "fp32":
        return x.astype("<f4").view(np.uint8)
    if dtype == "fp16":
        return x.astype("<f2").view(np.uint8)
    if dtype == "bf16":
        return fp32_to_bf16(x).astype("<u2").view(np.uint8)
    if dtype == "fp8e4m3":
        return fp32_to_fp8e4m3(x)
    return np.clip(np.rint(x), -127, 127).astype(np.int8).view(np.uint8)


def round_trip(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` as they come back after conversion to `dtype` (for references)."""
    x = np.asarray(values, dtype=np.float32)
    return decode(encode(x, dtype), dtype).reshape(x.shape)


def scales_per_row(pitch_elems: int, scale_group: int) -> int:
    """Number of fp32 scales stored for one row of `pitch_elems` elements (0 without scales)."""
    return -(-pitch_elems // scale_group) if scale_group > 0 else 0


def expand_scales(scales: np.ndarray, scale_group: int, cols: int) -> np.ndarray:
    """[rows, groups] scales broadcast to [rows, cols] (group g covers cols g*sg .. g*sg+sg-1)."""
    return np.repeat(scales, scale_group, axis=1)[:, :cols]


def quantize(values: np.ndarray, dtype: str, scale_group: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Quantize rows of `values` [rows, cols] for the KV datapath.

    Returns (codes as raw bytes [rows, cols * element_bytes], scales [rows, groups] fp32 or None).
    With scale_group > 0 each group's scale is absmax / QUANT_MAX (1 for fp16/bf16 and all-zero
    groups), so dequantize(quantize(x)) is the value the datapath sees.
    """
    _check(dtype)
    x = np.asarray(values, dtype=np.float32)
    rows, cols = x.shape
    if scale_group <= 0:
        if dtype == "int8":
            raise ValueError("int8 KV needs per-block scales (scale_group > 0)")
        return encode(x, dtype).reshape(rows, -1), None
    groups = scales_per_row(cols, scale_group)
    padded = np.zeros((rows, groups * scale_group), dtype=np.float32)
    padded[:, :cols] = x
    absmax = np.abs(padded.reshape(rows, groups, scale_group)).max(axis=2)
    limit = QUANT_MAX.get(dtype)
    scales = np.ones_like(absmax) if limit is None else np.where(absmax > 0, absmax / limit, 1.0)
    scales = scales.astype(np.float32)
    scaled = x / expand_scales(scales, scale_group, cols)
    return encode(scaled, dtype).reshape(rows, -1), scales


def dequantize(raw: np.ndarray, scales: np.ndarray | None, dtype: str, scale_group: int,
               cols: int) -> np.ndarray:
    """fp32 [rows, cols] values of raw rows [rows, cols * element_bytes] and their scales."""
    rows = raw.shape[0]
    values = decode(raw.reshape(-1), dtype).reshape(rows, cols)
    if scale_group > 0 and scales is not None:
        values = values * expand_scales(scales, scale_group, cols)
    return values
