"""Compiled simulation core (Cython extension modules; there is no pure-Python fallback)."""
from mocker._core import blocks, replay, rng, stats, table, timing, vllm  # noqa: F401

EXTENSION_MODULES = ("timing", "rng", "stats", "table", "blocks", "vllm", "replay")
