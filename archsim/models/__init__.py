"""Model shapes and presets (public config.json values), usable without torch."""

from archsim.models.presets import ModelPreset, list_presets, load_preset
from archsim.models.shape import ModelShape, dtype_bytes, shape_from_hf_config

__all__ = ["ModelPreset", "ModelShape", "dtype_bytes", "list_presets", "load_preset", "shape_from_hf_config"]
