"""What a capture run does: the model source and the request scenario (no torch import here)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from archsim.errors import ConfigError

DEVICES = ("cpu", "meta")
DECODINGS = ("greedy", "beam", "assisted")
ATTENTION_BACKENDS = ("sdpa", "eager")


@dataclass(frozen=True)
class CaptureOptions:
    """A capture scenario.

    model: a preset name (see `archsim.models.list_presets`) or a checkpoint directory with config.json.
    Every request of the batch runs the same scenario: turn 0 prefills `prompt_tokens` and decodes
    `decode_steps` tokens; each later turn prefills `turn_tokens` new tokens on top of the kept KV cache
    (prefix reuse) and decodes `decode_steps` again. `shared_prefix_tokens` makes the first prompt tokens
    identical across the batch, recorded in the header so the mapping can share those KV blocks.
    device "meta" runs the real modules on shape-only tensors: exact byte counts for huge models at no
    memory cost, but no numerics (next tokens are drawn at random instead of argmax).
    decoding "beam" (`num_beams` beams) and "assisted" (speculative decoding: the `assistant` model drafts
    `draft_tokens` tokens, the model verifies them) run transformers' `generate` for `decode_steps` new tokens
    instead of the runner's own greedy loop; one forward call of the model is still one step.
    """

    model: str
    batch: int = 1
    prompt_tokens: int = 32
    decode_steps: int = 8
    turns: int = 1
    turn_tokens: int = 16
    shared_prefix_tokens: int = 0
    layers: int | None = None
    dtype: str | None = None  # None: the preset's / checkpoint's torch_dtype
    device: str = "cpu"
    attention_backend: str = "sdpa"
    seed: int = 0
    decoding: str = "greedy"
    num_beams: int = 4
    assistant: str | None = None
    draft_tokens: int = 4

    def validate(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("batch", self.batch >= 1, "must be >= 1"),
            ("prompt_tokens", self.prompt_tokens >= 1, "must be >= 1"),
            ("decode_steps", self.decode_steps >= 0, "must be >= 0"),
            ("turns", self.turns >= 1, "must be >= 1"),
            ("turn_tokens", self.turns == 1 or self.turn_tokens >= 1, "must be >= 1 when turns > 1"),
            (
                "shared_prefix_tokens",
                0 <= self.shared_prefix_tokens <= self.prompt_tokens,
                f"must lie in [0, prompt_tokens={self.prompt_tokens}]",
            ),
            ("layers", self.layers is None or self.layers >= 1, "must be >= 1"),
            ("device", self.device in DEVICES, f"must be one of {DEVICES}"),
            (
                "attention_backend",
                self.attention_backend in ATTENTION_BACKENDS,
                f"must be one of {ATTENTION_BACKENDS}",
            ),
        ]
        generated = self.decoding != "greedy"
        checks += [
            ("decoding", self.decoding in DECODINGS, f"must be one of {DECODINGS}"),
            ("num_beams", self.decoding != "beam" or self.num_beams >= 2, "must be >= 2 for beam search"),
            ("draft_tokens", self.draft_tokens >= 1, "must be >= 1"),
            ("assistant", self.decoding != "assisted" or bool(self.assistant), "assisted decoding needs a draft model"),
            ("turns", not generated or self.turns == 1, f"must be 1 with decoding {self.decoding}"),
            ("decode_steps", not generated or self.decode_steps >= 1, f"must be >= 1 with decoding {self.decoding}"),
            ("device", not generated or self.device == "cpu", f"must be cpu with decoding {self.decoding} (it "
             "selects tokens from the logits)"),
        ]
        for name, ok, message in checks:
            if not ok:
                raise ConfigError(f"{message}, got {getattr(self, name)!r}", where=name)

    def as_header(self) -> dict[str, Any]:
        return asdict(self)
