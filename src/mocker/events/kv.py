"""KV-cache event values as the live engine emits them (docs/live.md §4.1).

One ``KvEventBatch`` per rank per pass boundary; sinks receive whole batches.  The field
names follow vLLM's ``vllm/distributed/kv_events.py`` so the ZMQ encoder maps them 1:1.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol, Union


class StorageTier(Enum):
    """Where a cached block lives.  The value is the vLLM ``medium`` string (None = device)."""
    DEVICE = None
    HOST_PINNED = "CPU_PINNED"
    DISK = "DISK"
    EXTERNAL = "EXTERNAL"


# Accepted spellings (case-insensitive), as Dynamo's decoder accepts them (docs/live.md §4.1).
_TIER_ALIASES: dict[str, StorageTier] = {
    **dict.fromkeys(("GPU", "DEVICE"), StorageTier.DEVICE),
    **dict.fromkeys(("CPU", "CPU_PINNED", "CPU_TIER1"), StorageTier.HOST_PINNED),
    **dict.fromkeys(("CPU_TIER2", "DISK", "NVME", "STORAGE"), StorageTier.DISK),
    **dict.fromkeys(("EXTERNAL", "NETWORK", "REMOTE", "SHARED"), StorageTier.EXTERNAL),
}


def parse_storage_tier(medium: "str | StorageTier | None") -> StorageTier:
    """Map a ``medium`` value (None, a tier, or any accepted alias) to its tier.

    Raises ``ValueError`` naming the value for an unknown spelling.
    """
    if medium is None:
        return StorageTier.DEVICE
    if isinstance(medium, StorageTier):
        return medium
    tier = _TIER_ALIASES.get(medium.strip().upper())
    if tier is None:
        raise ValueError(f"unknown KV storage tier {medium!r} (expected one of {sorted(_TIER_ALIASES)})")
    return tier


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Consecutive blocks of one sequence became cache-visible."""
    block_hashes: tuple[int, ...]      # u64 sequence (chained) hashes, in sequence order
    parent_block_hash: int | None      # hash of the block before the first one (None: sequence start)
    token_ids: tuple[int, ...]         # flattened token ids, len == len(block_hashes) * block_size
    block_size: int
    medium: str | None = None          # storage tier (see StorageTier / parse_storage_tier); None = device (GPU)


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the cache (their last copy was evicted)."""
    block_hashes: tuple[int, ...]
    medium: str | None = None          # as BlockStored.medium


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
