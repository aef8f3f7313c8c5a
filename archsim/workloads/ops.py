"""The operator inventory of a model: what each module reads and writes per call, in call order.

This is the analytic mirror of archsim.capture.hooks: same operator names (the transformers module paths
with the layer index replaced by `*`), same rules (weights once per call, embedding rows per token,
float operands as activations, integer operands as "other"). A test checks it against real captures.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.models import ModelShape

# Token bases an operand can scale with.
NEW = "new"  # the tokens fed in this step, over the whole batch (B * T)
LAST = "last"  # one position per request (lm_head computes logits for the last position only)
CACHED = "cached"  # every token the step reads from the KV cache (MLA's kv_b_proj re-expands them)

ATTENTION = "attention"  # marker: the attention core (Q read, O written per request)
KV_CACHE = "kv_cache"  # marker: the cache write of the new tokens and read of the cached ones


@dataclass(frozen=True)
class Operand:
    width: int  # elements per token
    basis: str = NEW
    element_bytes: int | None = None  # None: the model dtype
    integer: bool = False  # integer operands (ids, indices) are kind "other"


@dataclass(frozen=True)
class Op:
    """One module call. `special` marks the attention core and the KV cache, which have no weights."""

    name: str
    weight_elements: int = 0
    reads: tuple[Operand, ...] = ()
    writes: tuple[Operand, ...] = ()
    weight_element_bytes: int | None = None
    row_elements: int = 0  # > 0: an embedding table; each token reads one row of this many elements
    routed_experts: int = 0  # > 0: weights are this many experts, of which only the picked ones are read
    special: str = ""


def _linear(name: str, n_in: int, n_out: int, bias: bool, basis: str = NEW) -> Op:
    return Op(name, n_in * n_out + (n_out if bias else 0), (Operand(n_in, basis),), (Operand(n_out, basis),))


def _norm(name: str, width: int) -> Op:
    return Op(name, width, (Operand(width),), (Operand(width),))


def model_prologue(shape: ModelShape) -> list[Op]:
    h = shape.hidden_size
    return [
        Op(
            "model.embed_tokens",
            shape.vocab_size * h,
            (Operand(1, element_bytes=8, integer=True),),
            (Operand(h),),
            row_elements=h,
        )
    ]


def model_epilogue(shape: ModelShape) -> list[Op]:
    h = shape.hidden_size
    return [
        _norm("model.norm", h),
        _linear("lm_head", h, shape.vocab_size, False, basis=LAST),
    ]


def _attention_ops(shape: ModelShape) -> list[Op]:
    p = "model.layers.*.self_attn"
    h, nh = shape.hidden_size, shape.num_attention_heads
    if shape.attention == "mla":
        ops: list[Op] = []
        q_width = nh * shape.q_head_dim
        if shape.q_lora_rank:
            ops += [
                _linear(f"{p}.q_a_proj", h, shape.q_lora_rank, shape.qkv_bias),
                _norm(f"{p}.q_a_layernorm", shape.q_lora_rank),
                _linear(f"{p}.q_b_proj", shape.q_lora_rank, q_width, False),
            ]
        else:
            ops.append(_linear(f"{p}.q_proj", h, q_width, False))
        ops += [
            _linear(
                f"{p}.kv_a_proj_with_mqa", h, shape.kv_lora_rank + shape.qk_rope_head_dim, shape.qkv_bias
            ),
            _norm(f"{p}.kv_a_layernorm", shape.kv_lora_rank),
            Op(f"{p}.kv_cache", special=KV_CACHE),
            _linear(
                f"{p}.kv_b_proj",
                shape.kv_lora_rank,
                nh * (shape.qk_nope_head_dim + shape.v_head_dim),
                False,
                basis=CACHED,
            ),
            Op(f"{p}.attention", special=ATTENTION),
            _linear(f"{p}.o_proj", nh * shape.v_head_dim, h, shape.o_bias),
        ]
        return ops
    hd, nkv = shape.head_dim, shape.num_kv_heads
    ops = [_linear(f"{p}.q_proj", h, nh * hd, shape.qkv_bias)]
    if shape.qk_norm:
        ops.append(Op(f"{p}.q_norm", hd, (Operand(nh * hd),), (Operand(nh * hd),)))
    ops.append(_linear(f"{p}.k_proj", h, nkv * hd, shape.qkv_bias))
    if shape.qk_norm:
        ops.append(Op(f"{p}.k_norm", hd, (Operand(nkv * hd),), (Operand(nkv * hd),)))
    ops += [
        _linear(f"{p}.v_proj", h, nkv * hd, shape.qkv_bias),
        Op(f"{p}.kv_cache", special=KV_CACHE),
        Op(f"{p}.attention", special=ATTENTION),
        _linear(f"{p}.o_proj", nh * hd, h, shape.o_bias),
    ]
    return ops


def _mlp_ops(prefix: str, h: int, inter: int, bias: bool) -> list[Op]:
    return [
        _linear(f"{prefix}.gate_proj", h, inter, bias),
        _linear(f"{prefix}.up_proj", h, inter, bias),
        _linear(f"{prefix}.down_proj", inter, h, bias),
    ]


def _moe_ops(shape: ModelShape) -> list[Op]:
    """DeepSeek-V2 MoE block: fp32 router, routed experts (3-D weights), shared experts MLP."""
    h, e, k = shape.hidden_size, shape.n_routed_experts, shape.num_experts_per_tok
    expert_elements = 3 * shape.moe_intermediate_size * h  # gate+up (2I x H) and down (H x I)
    return [
        Op(
            "model.layers.*.mlp.gate",
            e * h,
            (Operand(h),),
            (
                Operand(e, element_bytes=4),
                Operand(k, element_bytes=4),
                Operand(k, element_bytes=8, integer=True),
            ),
            weight_element_bytes=4,
        ),
        Op(
            "model.layers.*.mlp.experts",
            e * expert_elements,
            (Operand(h), Operand(k, element_bytes=8, integer=True), Operand(k, element_bytes=4)),
            (Operand(h),),
            routed_experts=e,
        ),
        *_mlp_ops(
            "model.layers.*.mlp.shared_experts",
            h,
            shape.moe_intermediate_size * shape.n_shared_experts,
            False,
        ),
    ]


def layer_ops(shape: ModelShape, layer: int) -> list[Op]:
    """Module calls of decoder layer `layer`, in execution order."""
    h = shape.hidden_size
    ops = [
        _norm("model.layers.*.input_layernorm", h),
        *_attention_ops(shape),
        _norm("model.layers.*.post_attention_layernorm", h),
    ]
    if shape.is_moe_layer(layer):
        ops += _moe_ops(shape)
    else:
        ops += _mlp_ops("model.layers.*.mlp", h, shape.intermediate_size, shape.mlp_bias)
    return ops
