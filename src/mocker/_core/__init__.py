"""Compiled simulation core (Cython extension modules; there is no pure-Python fallback)."""
from mocker._core import (blocks, live, radix, rank, records, replay, rng, router, sglang,  # noqa: F401
                          stats, stream, table, timing, vllm)

EXTENSION_MODULES = ("timing", "rng", "stats", "table", "blocks", "radix", "rank", "vllm", "sglang",
                     "router", "replay", "live", "stream", "records")
