"""Compiled simulation core (Cython extension modules; there is no pure-Python fallback).

``EXTENSION_MODULES`` is the one list of them: CMakeLists.txt reads it to know what to build.
"""
import importlib

EXTENSION_MODULES = ("timing", "rng", "stats", "table", "blocks", "radix", "rank", "vllm", "sglang",
                     "router", "replay", "live", "stream", "records")

for _name in EXTENSION_MODULES:
    importlib.import_module(f"mocker._core.{_name}")
del _name
