"""KV-cache event values as the live engine emits them (spec live §4.1).

One ``KvEventBatch`` per rank per pass boundary; sinks receive whole batches.  The field
names follow vLLM's ``vllm/distributed/kv_events.py`` so the ZMQ encoder maps them 1:1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Consecutive blocks of one sequence became cache-visible."""
    block_hashes: tuple[int, ...]      # u64 sequence (chained) hashes, in sequence order
    parent_block_hash: int | None      # hash of the block before the first one (None: sequence start)
    token_ids: tuple[int, ...]         # flattened token ids, len == len(block_hashes) * block_size
    block_size: int
    medium: str | None = None          # storage tier; None = device (GPU)


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the cache (their last copy was evicted)."""
    block_hashes: tuple[int, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole cache was dropped (never produced by the live engine; sinks must accept it)."""


KvEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    """Every event one rank produced at one pass boundary, in order."""
    ts: float                          # unix seconds (wall clock at publication)
    events: tuple[KvEvent, ...]
    dp_rank: int = 0


class KvEventSink(Protocol):
    """Receives batches from the engine's pass loop.  ``publish`` must never block."""

    def publish(self, batch: KvEventBatch) -> None: ...

    def close(self) -> None: ...
