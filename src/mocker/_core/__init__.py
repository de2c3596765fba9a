"""Compiled simulation core (Cython extension modules; there is no pure-Python fallback)."""
from mocker._core import blocks, radix, rank, replay, rng, sglang, stats, table, timing, vllm  # noqa: F401

EXTENSION_MODULES = ("timing", "rng", "stats", "table", "blocks", "radix", "rank", "vllm", "sglang", "replay")
