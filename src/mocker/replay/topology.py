"""The simulated cluster: engine configs, worker pools, their scheduler ranks and routers.

``build_ranks`` is the one constructor of scheduler ranks, used by replay and by the live engine.
``Topology.from_options`` validates the pools of a replay (aggregated or disaggregated) and
refuses, before anything is allocated, pools that cannot fit in this machine's memory.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mocker._core.router import KvRouter
from mocker._core.sglang import SglangRank
from mocker._core.table import ReqTable
from mocker._core.vllm import VllmRank
from mocker.config import load_config, normalize_router_config
from mocker.errors import ConfigError, ReplayError

__all__ = ["build_ranks", "Topology", "pool_bytes"]

# Resident bytes per KV block (vLLM/TRT-LLM block pool) or page (SGLang radix cache) of one
# rank, allocated when the rank is built (measured on 10**7-block pools).
BYTES_PER_BLOCK = {"vllm": 32, "trtllm": 32, "sglang": 58}


def build_ranks(config: dict, table: ReqTable, num_workers: int, kv_events: bool = False,
                role: str = "aggregated") -> list:
    """The scheduler ranks of ``num_workers`` workers (``dp_size`` each) over ``table``.

    ``config`` is a normalized engine config (``mocker.config.normalize_config``); ``role`` the
    pool's worker type, which the config must declare; ``kv_events`` turns the ranks' KV events
    on (a KV router consumes them).
    """
    engine = config["engine"]
    if kv_events and not engine["emit_kv_events"]:
        engine = dict(engine, emit_kv_events=True)
    if engine["prefill_schedule_interval"] != 1 and engine["backend"] != "vllm":
        raise ConfigError("prefill_schedule_interval is supported only for backend=vllm; "
                          "use prefill_decode_interval for backend=sglang")
    if engine["worker_type"] != role:
        got = engine["worker_type"].capitalize()
        if role == "aggregated":
            raise ConfigError(f"offline replay only supports aggregated workers, got {got}")
        raise ConfigError(f"offline disaggregated replay requires {role}_engine_args.worker_type={role}, got {got}")
    if engine["aic_nextn"] is not None:
        raise ConfigError("engine.aic_nextn (speculative decoding) is not supported by mocker yet")
    _check_pools([(config, num_workers)])
    dp = config["dp_size"]
    if engine["backend"] == "sglang":
        if dp > 1 and engine["sglang"]["chunked_prefill_size"] // dp == 0:
            raise ConfigError(f"engine error: constructing attention-DP rank 0: SGLang attention DP size {dp} "
                              f"reduces chunked_prefill_size={engine['sglang']['chunked_prefill_size']} to zero")
        return [SglangRank(table, engine, dp) for _ in range(num_workers * dp)]
    return [VllmRank(table, engine) for _ in range(num_workers * dp)]


def pool_bytes(config: dict, num_workers: int) -> int:
    """Bytes the KV pools of ``num_workers`` workers of ``config`` take when built."""
    e = config["engine"]
    return num_workers * config["dp_size"] * e["num_gpu_blocks"] * BYTES_PER_BLOCK[e["backend"]]


def _available_memory() -> int:
    """Memory this process can still use: MemAvailable (else physical memory), and no more than
    its address-space limit (``ulimit -v``) leaves."""
    have = 1 << 62
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    have = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        try:
            have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/status", encoding="ascii") as fh:
                used = next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:")), 0)
            have = min(have, max(soft - used, 0))
    except (ImportError, OSError, ValueError):
        pass
    return have


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:.1f} GiB"


def _check_pools(pools: list) -> None:
    """ConfigError when the KV pools of ``[(config, workers), ...]`` exceed the memory available."""
    need = sum(pool_bytes(c, n) for c, n in pools)
    have = _available_memory()
    if need > have:
        parts = " + ".join(
            f"{n} workers x {c['dp_size']} dp ranks x {c['engine']['num_gpu_blocks']} blocks x "
            f"{BYTES_PER_BLOCK[c['engine']['backend']]} B" for c, n in pools)
        raise ConfigError(f"the KV pools need about {_gib(need)} ({parts}), more than the "
                          f"{_gib(have)} of memory available; lower num_gpu_blocks or the worker count")


@dataclass
class Topology:
    """The pools of one replay: aggregated (``decode_config`` None) or disaggregated."""
    config: dict                       # aggregated pool, or the prefill pool when disaggregated
    num_workers: int                   # workers of ``config``'s pool
    decode_config: dict | None = None
    num_decode_workers: int = 0
    router: dict | None = None         # normalized KV-router config; None = round robin
    kv_event_lag_ms: float = 0.0

    @property
    def disaggregated(self) -> bool:
        return self.decode_config is not None

    @classmethod
    def from_options(cls, extra_engine_args: Any, prefill_engine_args: Any, decode_engine_args: Any,
                     num_workers: int, num_prefill_workers: int, num_decode_workers: int,
                     router_mode: str, router_config: Any, kv_event_lag_ms: float | None) -> "Topology":
        lag = float(kv_event_lag_ms or 0.0)
        if prefill_engine_args is None and decode_engine_args is None:
            topo = cls(load_config(extra_engine_args), num_workers, kv_event_lag_ms=lag)
        else:
            topo = cls._disaggregated(extra_engine_args, prefill_engine_args, decode_engine_args,
                                      num_workers, num_prefill_workers, num_decode_workers, lag)
        if router_mode == "kv_router":
            topo.router = normalize_router_config(router_config)
        topo.check_memory()
        return topo

    @classmethod
    def _disaggregated(cls, extra_engine_args, prefill_engine_args, decode_engine_args, num_workers,
                       npw, ndw, lag) -> "Topology":
        if prefill_engine_args is None or decode_engine_args is None:
            raise ReplayError("prefill_engine_args and decode_engine_args must be provided together",
                              "prefill_engine_args" if prefill_engine_args is None else "decode_engine_args")
        if extra_engine_args is not None:
            raise ReplayError("extra_engine_args cannot be combined with prefill_engine_args/decode_engine_args",
                              "extra_engine_args")
        if num_workers != 1:
            raise ReplayError("num_workers is only used for aggregated replay; use num_prefill_workers "
                              "and num_decode_workers for disagg replay", "num_workers")
        pcfg = load_config(prefill_engine_args)
        dcfg = load_config(decode_engine_args)
        for role, cfg in (("prefill", pcfg), ("decode", dcfg)):
            if cfg["engine"]["worker_type"] != role:
                raise ReplayError(f"offline disaggregated replay requires {role}_engine_args.worker_type={role}, "
                                  f"got {cfg['engine']['worker_type'].capitalize()}", f"{role}_engine_args")
        if npw == 0:
            raise ReplayError("invalid replay spec: prefill pool must start with at least one worker",
                              "num_prefill_workers")
        if ndw == 0:
            raise ReplayError("invalid replay spec: decode pool must start with at least one worker",
                              "num_decode_workers")
        pe, de = pcfg["engine"], dcfg["engine"]
        if pe["block_size"] != de["block_size"]:
            raise ReplayError("offline disaggregated replay requires matching prefill/decode block_size, "
                              f"got {pe['block_size']} and {de['block_size']}", "decode_engine_args")
        if pe["backend"] != de["backend"]:
            raise ReplayError("replay invariant violated: offline disaggregated replay requires matching "
                              "backend engine types", "decode_engine_args")
        return cls(pcfg, npw, dcfg, ndw, None, lag)

    def check_memory(self) -> None:
        """Refuse pools that cannot be allocated here, with the numbers that make them up."""
        pools = [(self.config, self.num_workers)]
        if self.decode_config is not None:
            pools.append((self.decode_config, self.num_decode_workers))
        _check_pools(pools)

    @property
    def block_size(self) -> int:
        return int(self.config["engine"]["block_size"])

    def build(self, table: ReqTable) -> tuple[list, KvRouter | None, dict | None]:
        """(ranks, KV router or None, disaggregation settings or None) over ``table``."""
        engine = self.config["engine"]
        lag = self.kv_event_lag_ms
        if self.decode_config is None:
            ranks = build_ranks(self.config, table, self.num_workers, kv_events=self.router is not None)
            kv_router = None
            if self.router is not None:
                # every (worker, dp rank) is a routing target with its own cache and load
                kv_router = KvRouter(table, len(ranks), engine["block_size"], self.router, lag)
            return ranks, kv_router, None
        prefill = build_ranks(self.config, table, self.num_workers, kv_events=self.router is not None,
                              role="prefill")
        decode = build_ranks(self.decode_config, table, self.num_decode_workers, role="decode")
        kv_router = decode_router = None
        if self.router is not None:
            # prefill router: load and overlap, no decode term; decode router: active blocks
            # (never shared) and requests, no overlap, no prefill load
            kv_router = KvRouter(table, len(prefill), engine["block_size"],
                                 dict(self.router, router_track_active_blocks=False), lag)
            decode_router = KvRouter(table, len(decode), engine["block_size"],
                                     dict(self.router, overlap_score_credit=0.0, router_assume_kv_reuse=False,
                                          router_track_prefill_tokens=False, router_track_active_blocks=True,
                                          router_seed=(self.router["router_seed"] + 1) % 2 ** 64), lag)
        dcfg = self.decode_config
        disagg = {"prefill_workers": self.num_workers, "prefill_dp": self.config["dp_size"],
                  "decode_workers": self.num_decode_workers, "decode_dp": dcfg["dp_size"],
                  "decode_interval": dcfg["engine"]["prefill_schedule_interval"],
                  "decode_router": decode_router,
                  "bytes_per_token": float(engine["kv_transfer_bytes_per_token"] or 0),
                  "bandwidth_gbps": float(engine["kv_transfer_bandwidth"] or 0.0),
                  "destination_missing": engine["kv_transfer_timing_mode"] == "destination_missing",
                  # SGLang hands off destination first: the decode rank reserves at arrival
                  "destination_first": engine["backend"] == "sglang"}
        return prefill + decode, kv_router, disagg

    def describe(self) -> str:
        """One line naming what is simulated (for the report's header)."""
        def pool(cfg: dict, n: int) -> str:
            e = cfg["engine"]
            dp = f" x dp {cfg['dp_size']}" if cfg["dp_size"] > 1 else ""
            return (f"{n} x {e['backend']}{dp} ({e['num_gpu_blocks']} blocks of {e['block_size']} tokens, "
                    f"max_num_seqs {e['max_num_seqs']})")
        if self.decode_config is None:
            where = pool(self.config, self.num_workers)
        else:
            where = (f"prefill {pool(self.config, self.num_workers)}, "
                     f"decode {pool(self.decode_config, self.num_decode_workers)}")
        if self.router is None:
            return f"{where}, round robin"
        return f"{where}, kv_router (seed {self.router['router_seed']})"
