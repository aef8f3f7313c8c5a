"""The shape of one dense decoder layer as the GPU model sees it, and its split over tensor parallelism.

`LayerShape` is what `archsim gpu predict --shape` describes (hidden, heads, kv_heads, ffn, vocab, gated,
dtype); `LayerShape.from_model` reads it from an `archsim.models.ModelShape`. `split(tp)` checks the tensor
parallelism (it must divide the heads, and divide the KV heads or be a multiple of them: KV heads are then
replicated, as vLLM and Megatron do) and gives the per-GPU widths of the layer's matrix products.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.errors import ConfigError
from archsim.limits import INT64_MAX
from archsim.models import ModelShape

# the tensor-core dtypes the calibration covers (fp16 measured; bf16 has the same width and H100 rate)
DTYPES: dict[str, int] = {"fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}
SHAPE_FIELDS = ("hidden", "heads", "kv_heads", "ffn", "vocab", "gated", "dtype", "head_dim")
REQUIRED_FIELDS = ("hidden", "heads", "kv_heads", "ffn")


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    heads: int
    kv_heads: int
    ffn: int  # intermediate size of the MLP (per expert for MoE)
    vocab: int = 0  # 0: no lm_head estimate
    gated: bool = True  # SwiGLU: the up projection is a fused gate+up of 2 x ffn outputs
    dtype: str = "fp16"
    head_dim: int = 0  # 0: hidden / heads

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "kv_heads", "ffn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"must be a positive integer, got {value!r}", where=f"shape.{name}")
        for name in ("vocab", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"must be a positive integer, got {value!r}", where=f"shape.{name}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {self.dtype!r} (calibrated: {', '.join(DTYPES)})", where="shape.dtype")
        if self.heads % self.kv_heads:
            raise ConfigError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})",
                              where="shape.kv_heads")
        if not self.head_dim and self.hidden % self.heads:
            raise ConfigError(f"hidden ({self.hidden}) is not a multiple of heads ({self.heads}); give head_dim",
                              where="shape.head_dim")

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @classmethod
    def from_model(cls, shape: ModelShape, dtype: str = "fp16") -> LayerShape:
        """A dense GQA/MHA layer of `shape` (Llama, Mistral, Qwen: gated SwiGLU MLPs)."""
        if shape.attention != "gqa":
            raise ConfigError(f"{shape.name}: the layer model covers GQA/MHA layers; cost MLA's latent projections "
                              "with archsim.gpu.gemm_ns", where="model.attention")
        return cls(hidden=shape.hidden_size, heads=shape.num_attention_heads, kv_heads=shape.num_kv_heads,
                   ffn=shape.intermediate_size, vocab=shape.vocab_size, gated=True, dtype=dtype,
                   head_dim=shape.head_dim)

    def split(self, tp: int) -> LayerSplit:
        """Per-GPU widths at tensor parallelism `tp` (ConfigError naming `tp` when it does not fit)."""
        if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
            raise ConfigError(f"must be a positive integer, got {tp!r}", where="tp")
        if self.heads % tp:
            raise ConfigError(f"tp {tp} does not divide heads ({self.heads})", where="tp")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ConfigError(f"tp {tp} neither divides kv_heads ({self.kv_heads}) nor is a multiple of it",
                              where="tp")
        kv_per_gpu = max(1, self.kv_heads // tp)  # tp beyond kv_heads: each GPU keeps one replicated KV head
        return LayerSplit(self, tp, self.heads // tp, kv_per_gpu, -(-self.ffn // tp))


@dataclass(frozen=True)
class LayerSplit:
    shape: LayerShape
    tp: int
    q_heads: int  # per GPU
    kv_heads: int  # per GPU
    ffn: int  # per GPU (rounded up)

    @property
    def qkv_width(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.shape.head_width

    @property
    def attn_out_width(self) -> int:
        return self.q_heads * self.shape.head_width

    @property
    def up_width(self) -> int:
        return (2 if self.shape.gated else 1) * self.ffn

    @property
    def rope_width(self) -> int:
        """Elements RoPE rotates per token: the GPU's query and key heads."""
        return (self.q_heads + self.kv_heads) * self.shape.head_width


def parse_shape_spec(text: str) -> LayerShape:
    """`hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,gated=true` -> LayerShape (ConfigError per field)."""
    values: dict[str, object] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not raw:
            raise ConfigError(f"expected KEY=VALUE, got {item.strip()!r}", where="--shape")
        if key not in SHAPE_FIELDS:
            raise ConfigError(f"unknown field {key!r} (fields: {', '.join(SHAPE_FIELDS)})", where=f"--shape {key}")
        if key in values:
            raise ConfigError("given twice", where=f"--shape {key}")
        values[key] = _field(key, raw)
    missing = [k for k in REQUIRED_FIELDS if k not in values]
    if missing:
        raise ConfigError(f"missing field {missing[0]!r} (required: {', '.join(REQUIRED_FIELDS)})",
                          where=f"--shape {missing[0]}")
    try:
        return LayerShape(**values)  # type: ignore[arg-type]
    except ConfigError as exc:
        field = (exc.where or "").removeprefix("shape.")
        raise ConfigError(exc.detail, where=f"--shape {field}") from None


def _field(key: str, raw: str) -> object:
    if key == "gated":
        if raw.lower() not in ("true", "false"):
            raise ConfigError(f"expected true or false, got {raw!r}", where=f"--shape {key}")
        return raw.lower() == "true"
    if key == "dtype":
        return raw
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"expected a positive integer, got {raw!r}", where=f"--shape {key}") from None
    if value <= 0:
        raise ConfigError(f"must be a positive integer, got {value}", where=f"--shape {key}")
    if value > INT64_MAX:
        raise ConfigError(f"must be at most {INT64_MAX:,}, got {value:,}", where=f"--shape {key}")
    return value
