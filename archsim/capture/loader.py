"""Build the torch model to capture: from a shipped preset (random weights) or a local checkpoint dir.

No hub access is assumed: a preset is a config dict in archsim/models/presets, and a checkpoint is read
with local_files_only. `layers` cuts the depth (decoder layers are identical, so a 2-layer run has the
per-layer traffic of the full model), and device "meta" builds the modules without allocating weights.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from archsim.capture.hooks import ATTENTION_FUNCTION_NAME
from archsim.capture.options import CaptureOptions
from archsim.errors import ConfigError
from archsim.models import ModelShape, dtype_bytes, load_preset, shape_from_hf_config

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    model: nn.Module
    shape: ModelShape
    dtype: str
    origin: dict[str, Any]  # where the model came from, for the trace header


def _dtype_name(value: Any) -> str:
    name = str(value).removeprefix("torch.") if value is not None else "bfloat16"
    return name


def _is_checkpoint_path(model: str) -> bool:
    return "/" in model or model.startswith(".") or Path(model).is_dir()


def _with_dtype(factory: Any, first: Any, torch_dtype: torch.dtype, **kwargs: Any) -> nn.Module:
    """transformers >= 4.56 names the argument `dtype`, older releases `torch_dtype`."""
    try:
        return factory(first, dtype=torch_dtype, **kwargs)
    except TypeError:
        return factory(first, torch_dtype=torch_dtype, **kwargs)


def load_model(options: CaptureOptions, *, traced: bool = True) -> LoadedModel:
    """Instantiate the model named by `options.model` on `options.device` (random weights for presets); its
    attention runs through the capture's tap, or (`traced` False: an assisted decoding's draft) the plain
    `options.attention_backend`."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    # progress bars and load reports (e.g. the unused weights of layers cut by --layers) would bury the
    # CLI's one-line output; errors still raise
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if _is_checkpoint_path(options.model):
        directory = Path(options.model)
        config_file = directory / "config.json"
        if not directory.is_dir():
            raise ConfigError("checkpoint directory does not exist", file=str(directory), where="model")
        if not config_file.is_file():
            raise ConfigError("checkpoint directory has no config.json", file=str(directory), where="model")
        try:
            config_dict = json.loads(config_file.read_text())
        except ValueError as exc:
            raise ConfigError(f"config.json is not JSON: {exc}", file=str(config_file)) from None
        shape_from_hf_config(config_dict, where="config.json")  # unsupported architectures fail here
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        origin = {"kind": "checkpoint", "path": str(directory.resolve()), "weights": "checkpoint"}
        default_dtype = _dtype_name(config_dict.get("torch_dtype") or config_dict.get("dtype"))
    else:
        preset = load_preset(options.model)
        preset.shape()  # validate before building anything
        config = AutoConfig.for_model(preset.model_type, **preset.config)
        origin = {"kind": "preset", "preset": preset.name, "source": preset.source, "weights": "random"}
        default_dtype = preset.dtype
    dtype = options.dtype or default_dtype
    dtype_bytes(dtype)
    if options.layers is not None:
        if options.layers > config.num_hidden_layers:
            raise ConfigError(f"must lie in [1, {config.num_hidden_layers}] (the model's decoder layers), got "
                              f"{options.layers}", where="layers")
        config.num_hidden_layers = options.layers
        if getattr(config, "layer_types", None) is not None:  # per-layer lists follow the depth
            config.layer_types = list(config.layer_types)[: options.layers]
    attention = ATTENTION_FUNCTION_NAME if traced else options.attention_backend
    config._attn_implementation = attention
    config_dict = config.to_dict()
    config_dict["model_type"] = config.model_type
    shape = shape_from_hf_config(config_dict, name=str(origin.get("preset") or origin.get("path")))
    torch.manual_seed(options.seed)
    torch_dtype = _TORCH_DTYPES[dtype]
    try:
        if origin["kind"] == "checkpoint" and options.device != "meta":
            model = _with_dtype(
                AutoModelForCausalLM.from_pretrained,
                origin["path"],
                torch_dtype,
                config=config,
                local_files_only=True,
                attn_implementation=attention,
            )
        else:
            if origin["kind"] == "checkpoint":
                origin["weights"] = "none (meta device)"
            with torch.device(options.device):
                model = _with_dtype(
                    AutoModelForCausalLM.from_config,
                    config,
                    torch_dtype,
                    attn_implementation=attention,
                )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot build the model: {exc}", where="model") from None
    model.eval()
    origin["layers"] = shape.num_layers
    return LoadedModel(model=model, shape=shape, dtype=dtype, origin=origin)


def model_header(loaded: LoadedModel) -> dict[str, Any]:
    """The `model` block of the trace header: origin plus every shape number the generators use."""
    return {"name": loaded.shape.name, **loaded.origin, "shape": asdict(loaded.shape)}
