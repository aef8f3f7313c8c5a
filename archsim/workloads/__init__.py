"""Analytic workload generators: logical traces in the capture's schema from a model shape."""

from archsim.workloads.generators import (
    GeneratedTrace,
    StepSpec,
    chat_trace,
    decode_step_bytes,
    decode_trace,
    expected_distinct_experts,
    prefill_trace,
    reasoning_trace,
)

__all__ = [
    "GeneratedTrace",
    "StepSpec",
    "chat_trace",
    "decode_step_bytes",
    "decode_trace",
    "expected_distinct_experts",
    "prefill_trace",
    "reasoning_trace",
]
