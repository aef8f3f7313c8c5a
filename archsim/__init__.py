"""archsim: a cycle-approximate model of near-memory-processing KV-cache pools for LLM inference."""

__version__ = "0.1.0"
