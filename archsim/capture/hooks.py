"""Forward hooks that turn a real PyTorch forward pass into logical records.

What is recorded (the rules traces/FORMAT.md documents, and the generators reproduce):
* weight: every module that owns parameters reads them once per call. An embedding reads only the rows
  it gathers (one per token). A routed-experts module reads only the experts the router picked in
  this call (counted from the routing indices it receives).
* activation: the floating-point tensors entering (R) and leaving (W) a parameter-owning module, and the
  attention core's query (R) and output (W) per request. Integer inputs (token ids, expert indices) are
  kind "other". Elementwise glue between modules (residual adds, RoPE, the SwiGLU product) is not
  recorded: every serving engine fuses it into the neighbouring kernels.
* k / v: recorded by the tracing KV cache (archsim.capture.kv), not here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from archsim.capture.recorder import StepRecorder, operator_template
from archsim.errors import ConfigError
from archsim.trace.logical import KIND_ACTIVATION, KIND_OTHER, KIND_WEIGHT, OP_READ, OP_WRITE

ATTENTION_FUNCTION_NAME = "archsim_capture"


def _tensors(values: Iterable[Any]) -> Iterator[torch.Tensor]:
    """Tensors among hook arguments, one level into tuples/lists (how HF passes them)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, tuple | list):
            yield from (item for item in value if isinstance(item, torch.Tensor))


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _is_experts(module: nn.Module) -> bool:
    """HF routed-experts containers hold all experts in 3-D parameters and take routing indices."""
    return hasattr(module, "num_experts") and any(
        p.dim() == 3 for p in module._parameters.values() if p is not None
    )


@dataclass
class _Operator:
    name: str
    layer: int
    index: int
    param_bytes: int


@dataclass
class HookSet:
    """Installed hooks; `remove()` restores the model."""

    handles: list[Any] = field(default_factory=list)
    attention_operators: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(module) -> (op, layer)
    kv_operators: dict[int, int] = field(default_factory=dict)  # layer -> operator index

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def install_hooks(model: nn.Module, recorder: StepRecorder) -> HookSet:
    """Hook every parameter-owning module of `model` and name the attention modules."""
    hooks = HookSet()
    for name, module in model.named_modules():
        params = [p for p in module._parameters.values() if p is not None]
        if hasattr(module, "layer_idx") and name.endswith(("self_attn", "attention", "attn")):
            template, layer = operator_template(name)
            hooks.attention_operators[id(module)] = (recorder.operator(f"{template}.attention"), layer)
            hooks.kv_operators[int(module.layer_idx)] = recorder.operator(f"{template}.kv_cache")
        if not params:
            continue
        template, layer = operator_template(name)
        param_bytes = sum(tensor_bytes(p) for p in params)
        operator = _Operator(template, layer, recorder.operator(template, param_bytes), param_bytes)
        hooks.handles.append(
            module.register_forward_pre_hook(_pre_hook(recorder, operator, module), with_kwargs=True)
        )
        hooks.handles.append(module.register_forward_hook(_post_hook(recorder, operator), with_kwargs=True))
    if not hooks.kv_operators:
        raise ConfigError(
            "found no attention modules with a layer_idx: not a supported decoder model", where="model"
        )
    return hooks


def _weight_bytes(module: nn.Module, operator: _Operator, inputs: list[torch.Tensor]) -> int:
    if isinstance(module, nn.Embedding):
        ids = next((t for t in inputs if not t.is_floating_point()), None)
        rows = ids.numel() if ids is not None else 0
        return rows * module.embedding_dim * module.weight.element_size()
    if _is_experts(module):
        indices = next((t for t in inputs if not t.is_floating_point()), None)
        if indices is None:
            return operator.param_bytes
        if indices.device.type == "meta":
            raise ConfigError(
                "routed experts pick weights from data: capture MoE layers on --device cpu "
                "(cut depth with --layers)",
                where="device",
            )
        picked = int(torch.unique(indices[(indices >= 0) & (indices < module.num_experts)]).numel())
        return operator.param_bytes * picked // int(module.num_experts)
    return operator.param_bytes


def _pre_hook(recorder: StepRecorder, operator: _Operator, module: nn.Module):  # noqa: ANN202 - torch hook
    def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inputs = list(_tensors([*args, *kwargs.values()]))
        recorder.add(
            OP_READ, KIND_WEIGHT, operator.layer, _weight_bytes(module, operator, inputs), operator.index
        )
        for tensor in inputs:
            kind = KIND_ACTIVATION if tensor.is_floating_point() else KIND_OTHER
            recorder.add(OP_READ, kind, operator.layer, tensor_bytes(tensor), operator.index)

    return hook


def _post_hook(recorder: StepRecorder, operator: _Operator):  # noqa: ANN202 - torch hook
    def hook(_module: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], output: Any) -> None:
        for tensor in _tensors([output]):
            kind = KIND_ACTIVATION if tensor.is_floating_point() else KIND_OTHER
            recorder.add(OP_WRITE, kind, operator.layer, tensor_bytes(tensor), operator.index)

    return hook


class AttentionCoreTap:
    """Wraps the model's attention kernel to record the query read and output written per request.

    Registered once under ATTENTION_FUNCTION_NAME in transformers' AttentionInterface; the model's
    config selects it. K and V are not recorded here: the tracing cache already recorded what the
    kernel reads from the cache.
    """

    def __init__(self, base: str) -> None:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        self.recorder: StepRecorder | None = None
        self.hooks: HookSet | None = None
        if base == "sdpa":
            self._base = sdpa_attention_forward
        else:
            self._base = None  # resolved per call: the model module's own eager_attention_forward
        AttentionInterface.register(ATTENTION_FUNCTION_NAME, self)

    def __call__(
        self,
        module: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Any]:
        base = self._base or _module_eager_attention(module)
        output, weights = base(module, query, key, value, attention_mask, **kwargs)
        recorder, hooks = self.recorder, self.hooks
        if recorder is not None and hooks is not None:
            operator, layer = hooks.attention_operators.get(id(module), (None, -1))
            if operator is None:
                raise ConfigError("attention kernel called from an unhooked module", where="model")
            batch, heads, tokens = query.shape[0], query.shape[1], query.shape[2]
            q_bytes = tensor_bytes(query) // batch
            o_bytes = tensor_bytes(output) // batch
            for request in range(batch):
                common = {
                    "head_start": 0,
                    "head_count": heads,
                    "token_start": recorder.token_start,
                    "token_count": tokens,
                    "request": request,
                }
                recorder.add(OP_READ, KIND_ACTIVATION, layer, q_bytes, operator, **common)
                recorder.add(OP_WRITE, KIND_ACTIVATION, layer, o_bytes, operator, **common)
        return output, weights


def _module_eager_attention(module: nn.Module):  # noqa: ANN202 - returns the model's own kernel
    import sys

    function = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if function is None:
        raise ConfigError(f"{type(module).__name__} has no eager attention kernel", where="attention_backend")
    return function
