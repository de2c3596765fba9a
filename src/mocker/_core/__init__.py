"""Compiled simulation core (Cython extension modules; there is no pure-Python fallback)."""
from mocker._core import (blocks, live, radix, rank, replay, rng, router, sglang, stats,  # noqa: F401
                          stream, table, timing, vllm)

EXTENSION_MODULES = ("timing", "rng", "stats", "table", "blocks", "radix", "rank", "vllm", "sglang",
                     "router", "replay", "live", "stream")
