"""Compiled simulation core (Cython extension modules; there is no pure-Python fallback)."""
from mocker._core import blocks, rank, replay, rng, stats, table, timing, vllm  # noqa: F401

EXTENSION_MODULES = ("timing", "rng", "stats", "table", "blocks", "rank", "vllm", "replay")
