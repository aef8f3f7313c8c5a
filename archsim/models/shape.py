"""The handful of numbers that decide a decoder-only model's memory traffic.

`ModelShape` is read from a Hugging Face style config dict (a preset's `config:` block or a checkpoint's
config.json) without importing torch, so the analytic generators work on machines without the capture
extra. Only the architectures whose module structure the generators know are accepted; anything else is a
ConfigError rather than a silently wrong byte count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from archsim.errors import ConfigError

# model_type -> attention family. "gqa" covers MHA (kv == q heads) and MQA too.
SUPPORTED_MODEL_TYPES: dict[str, str] = {
    "llama": "gqa",
    "mistral": "gqa",
    "qwen2": "gqa",
    "qwen3": "gqa",
    "deepseek_v2": "mla",
}

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}


def dtype_bytes(dtype: str, where: str = "dtype") -> int:
    """Bytes per element of a floating-point dtype name ("bfloat16", "float16", "float32")."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise ConfigError(f"unknown dtype {dtype!r} (use one of {known})", where=where) from None


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a decoder-only transformer; all sizes are element counts, not bytes."""

    name: str
    model_type: str
    attention: str  # "gqa" or "mla"
    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k
    # MLA (DeepSeek-V2); zero for GQA models
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0 = no query compression (q_proj instead of q_a_proj/q_b_proj)
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE; n_routed_experts == 0 means every layer is dense
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0

    @property
    def q_head_dim(self) -> int:
        """Width of one query head (MLA: nope + rope part)."""
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def out_head_dim(self) -> int:
        """Width of one attention-output head (MLA: v_head_dim)."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    @property
    def kv_cache_heads(self) -> int:
        """Heads stored in the KV cache: the KV heads for GQA, one latent "head" for MLA."""
        return 1 if self.attention == "mla" else self.num_kv_heads

    @property
    def k_cache_dim(self) -> int:
        """Elements per token per cached head of the first cache tensor (MLA: the latent c_KV)."""
        return self.kv_lora_rank if self.attention == "mla" else self.head_dim

    @property
    def v_cache_dim(self) -> int:
        """Elements per token per cached head of the second cache tensor (MLA: the decoupled RoPE key)."""
        return self.qk_rope_head_dim if self.attention == "mla" else self.head_dim

    def kv_elements_per_token_per_layer(self) -> int:
        """K plus V cache elements one token adds to one layer."""
        return self.kv_cache_heads * (self.k_cache_dim + self.v_cache_dim)

    def is_moe_layer(self, layer: int) -> bool:
        return self.n_routed_experts > 0 and layer >= self.first_k_dense_replace

    def with_layers(self, num_layers: int) -> ModelShape:
        """The same model cut to `num_layers` decoder layers (what `capture --layers` does)."""
        if not 1 <= num_layers <= self.num_layers:
            raise ConfigError(f"must lie in [1, {self.num_layers}] ({self.name or 'the model'} has "
                              f"{self.num_layers} decoder layers), got {num_layers}", where="layers")
        fields = dict(self.__dict__)
        fields["num_layers"] = num_layers
        return ModelShape(**fields)


def shape_from_dict(values: object, where: str) -> ModelShape:
    """A ModelShape from its own fields (a logical trace header's `model.shape`), each of its type."""
    if not isinstance(values, dict):
        raise ConfigError(f"expected an object of ModelShape fields, got {values!r}", where=where)
    fields = {f.name: f for f in dataclasses.fields(ModelShape)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"unknown field {key!r}", where=f"{where}.{key}")
        kind = {"int": int, "bool": bool, "str": str}[str(fields[key].type)]
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
            raise ConfigError(f"expected a {'non-negative integer' if kind is int else kind.__name__}, got {value!r}",
                              where=f"{where}.{key}")
    missing = [k for k, f in fields.items() if k not in values and f.default is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"missing field {missing[0]!r}", where=f"{where}.{missing[0]}")
    return ModelShape(**values)


def _int(config: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"missing required key {key!r}", where=f"{where}.{key}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"expected a non-negative integer, got {value!r}", where=f"{where}.{key}")
    return value


def shape_from_hf_config(config: Mapping[str, Any], *, name: str = "", where: str = "config") -> ModelShape:
    """Read a ModelShape from a Hugging Face config dict (the keys of config.json)."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        known = ", ".join(sorted(SUPPORTED_MODEL_TYPES))
        raise ConfigError(
            f"unsupported model_type {model_type!r} (supported: {known})", where=f"{where}.model_type"
        )
    attention = SUPPORTED_MODEL_TYPES[model_type]
    heads = _int(config, "num_attention_heads", where)
    hidden = _int(config, "hidden_size", where)
    kv_heads = _int(config, "num_key_value_heads", where, default=heads)
    if heads == 0 or kv_heads == 0 or heads % kv_heads:
        raise ConfigError(
            f"num_attention_heads ({heads}) must be a positive multiple of num_key_value_heads ({kv_heads})",
            where=f"{where}.num_key_value_heads",
        )
    common: dict[str, Any] = {
        "name": name or str(config.get("_name_or_path") or model_type),
        "model_type": model_type,
        "attention": attention,
        "num_layers": _int(config, "num_hidden_layers", where),
        "hidden_size": hidden,
        "intermediate_size": _int(config, "intermediate_size", where),
        "vocab_size": _int(config, "vocab_size", where),
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "mlp_bias": bool(config.get("mlp_bias", False)),
    }
    if attention == "mla":
        q_lora = config.get("q_lora_rank")
        routed = config.get("n_routed_experts") or 0
        return ModelShape(
            **common,
            head_dim=_int(config, "qk_rope_head_dim", where),
            qkv_bias=bool(config.get("attention_bias", False)),
            o_bias=bool(config.get("attention_bias", False)),
            kv_lora_rank=_int(config, "kv_lora_rank", where),
            q_lora_rank=0 if q_lora is None else _int(config, "q_lora_rank", where),
            qk_nope_head_dim=_int(config, "qk_nope_head_dim", where),
            qk_rope_head_dim=_int(config, "qk_rope_head_dim", where),
            v_head_dim=_int(config, "v_head_dim", where),
            n_routed_experts=routed,
            n_shared_experts=(config.get("n_shared_experts") or 0) if routed else 0,
            num_experts_per_tok=(config.get("num_experts_per_tok") or 0) if routed else 0,
            moe_intermediate_size=_int(config, "moe_intermediate_size", where, default=0) if routed else 0,
            first_k_dense_replace=_int(config, "first_k_dense_replace", where, default=0),
        )
    head_dim = config.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}); give head_dim",
                where=f"{where}.head_dim",
            )
        head_dim = hidden // heads
    # Qwen2 hard-codes bias on q/k/v (not on o); the others follow attention_bias.
    qkv_bias = True if model_type == "qwen2" else bool(config.get("attention_bias", False))
    o_bias = False if model_type == "qwen2" else bool(config.get("attention_bias", False))
    return ModelShape(
        **common,
        head_dim=_int({"head_dim": head_dim}, "head_dim", where),
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        qk_norm=model_type == "qwen3",
    )
