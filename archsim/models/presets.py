"""Model presets: public config.json values kept as YAML data in archsim/models/presets/.

A preset is only data (the architecture's Hugging Face `model_type` plus the config keys that decide
shapes); building a torch model from it lives in archsim.capture.loader so that this module imports
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from archsim.errors import ConfigError
from archsim.models.shape import ModelShape, shape_from_hf_config

PRESET_DIR = Path(__file__).with_name("presets")
_REQUIRED_KEYS = {"name", "description", "source", "model_type", "config"}


@dataclass(frozen=True)
class ModelPreset:
    """One model preset: where its numbers come from and the Hugging Face config keys."""

    name: str
    description: str
    source: str
    model_type: str
    config: dict[str, Any] = field(hash=False)

    def hf_config_dict(self) -> dict[str, Any]:
        """The config as config.json would hold it (model_type included)."""
        return {"model_type": self.model_type, **self.config}

    def shape(self) -> ModelShape:
        return shape_from_hf_config(self.hf_config_dict(), name=self.name, where=f"preset {self.name}.config")

    @property
    def dtype(self) -> str:
        return str(self.config.get("torch_dtype", "bfloat16"))


def list_presets() -> list[str]:
    """Names of all shipped presets, sorted."""
    return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str) -> ModelPreset:
    """Load a preset by name; an unknown name is a ConfigError that lists the known ones."""
    path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(list_presets())
        raise ConfigError(f"unknown model preset {name!r} (known: {known})", where="model")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse preset: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("a preset must be a mapping", file=str(path))
    missing = _REQUIRED_KEYS - data.keys()
    unknown = data.keys() - _REQUIRED_KEYS
    if missing:
        raise ConfigError(f"missing keys {sorted(missing)}", file=str(path))
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}", file=str(path))
    if data["name"] != name:
        raise ConfigError(f"name {data['name']!r} does not match the file name", file=str(path), where="name")
    if not isinstance(data["config"], dict):
        raise ConfigError("config must be a mapping", file=str(path), where="config")
    return ModelPreset(
        name=data["name"],
        description=str(data["description"]),
        source=str(data["source"]),
        model_type=str(data["model_type"]),
        config=dict(data["config"]),
    )
