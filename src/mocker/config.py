"""Engine configuration: canonical ``{"engine": {...}, "dp_size": ...}`` and flat JSON forms.

``normalize_config`` returns the canonical dict with every default filled in, exactly
as the reference's ``_normalize_mocker_config`` does, and raises ``ConfigError`` (a
``ValueError``) with the reference's wording on invalid input.  Unlike the reference,
the flat form (engine fields at the top level, e.g. ``{"block_size": 64}``) is accepted.
"""
from __future__ import annotations

import copy
import difflib
import json
import math
import os
from typing import Any

from mocker.errors import ConfigError
from mocker.limits import MAX_BLOCKS_PER_RANK

__all__ = ["ConfigError", "normalize_config", "load_config", "normalize_router_config",
           "DEFAULT_BLOCK_SIZE", "MAX_BLOCKS_PER_RANK", "MAX_STARTUP_TIME_S"]

PREFIX = "invalid engine launch config: "
_USIZE_MAX = 2 ** 64 - 1
# a modeled start-up delay longer than a day is a mistake, not a model
MAX_STARTUP_TIME_S = 86400.0


DEFAULT_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}

# field -> default (block_size resolved per backend)
ENGINE_DEFAULTS: dict[str, Any] = {
    "backend": "vllm",
    "num_gpu_blocks": 16384,
    "block_size": None,
    "max_model_len": None,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "prefill_schedule_interval": 1,
    "prefill_decode_interval": 0,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "speedup_ratio": 1.0,
    "decode_speedup_ratio": 1.0,
    "aic_nextn": None,
    "aic_nextn_accept_rates": None,
    "aic_mtp_seed": 42,
    "worker_type": "aggregated",
    "preemption_mode": "lifo",
    "emit_kv_events": False,
    "emit_kv_token_ids": False,
    "kv_transfer_bytes_per_token": None,
    "kv_transfer_bandwidth": None,
    "kv_transfer_timing_mode": "full_prompt",
    "timing_model": {"type": "polynomial"},
    "sglang": None,
    "trtllm": None,
}
# accepted by the reference's schema but modelling features this package does not have
ENGINE_UNSUPPORTED = ("kv_bytes_per_token", "kv_cache_bytes_per_token", "kv_cache_groups",
                      "kv_cache_capacity_bytes", "native_host_offload", "state_cache",
                      "prefix_match_unit", "g3_offload")
ENGINE_FIELD_ORDER = ("backend", "num_gpu_blocks", "block_size", "max_model_len", "max_num_seqs",
                      "max_num_batched_tokens", "prefill_schedule_interval",
                      "prefill_decode_interval", "enable_prefix_caching", "enable_chunked_prefill",
                      "speedup_ratio", "decode_speedup_ratio", "aic_nextn",
                      "aic_nextn_accept_rates", "aic_mtp_seed", "worker_type", "preemption_mode",
                      "emit_kv_events", "emit_kv_token_ids", "kv_bytes_per_token",
                      "kv_transfer_bytes_per_token", "kv_cache_bytes_per_token", "kv_cache_groups",
                      "kv_cache_capacity_bytes", "native_host_offload", "state_cache",
                      "prefix_match_unit", "g3_offload", "kv_transfer_bandwidth",
                      "kv_transfer_timing_mode", "timing_model", "sglang", "trtllm")
SGLANG_DEFAULTS = {"schedule_policy": "fifo", "max_prefill_tokens": 16384,
                   "chunked_prefill_size": 8192, "clip_max_new_tokens": 4096,
                   "schedule_conservativeness": 1.0}
TRTLLM_DEFAULTS = {"capacity_scheduler_policy": "guaranteed_no_evict"}
DYNAMO_DEFAULTS = {"enable_local_indexer": False, "bootstrap_port": None,
                   "handoff_session_timeout_ms": 300000, "reasoning": None,
                   "response_replay_trace_path": None, "zmq_kv_events_port": None,
                   "zmq_replay_port": None, "router_queue_policy": None}
TOP_DEFAULTS: dict[str, Any] = {
    "engine": None,
    "dp_size": 1,
    "tensor_parallel_size": 1,
    "startup_time": None,
    "num_gpu_blocks_is_explicit": False,
    "gpu_memory_utilization": None,
    "mem_fraction_static": None,
    "free_gpu_memory_fraction": None,
    "cuda_graph_reserved_bytes": None,
}
TOP_FIELD_ORDER = tuple(TOP_DEFAULTS)


def _expected(names) -> str:
    names = list(names)
    if len(names) == 2:
        return f"expected `{names[0]}` or `{names[1]}`"
    return "expected one of " + ", ".join(f"`{n}`" for n in names)


def _type_name(v: Any) -> str:
    if isinstance(v, bool):
        return f"boolean `{str(v).lower()}`"
    if isinstance(v, str):
        return f'string "{v}"'
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "sequence"
    return "map"


def _bad_type(path: str, v: Any, expected: str) -> ConfigError:
    return ConfigError(f"{PREFIX}{path}: invalid type: {_type_name(v)}, expected {expected}")


def _uint(path: str, v: Any, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad_type(path, v, "usize" if not optional else "usize or null")
    if not 0 <= v <= _USIZE_MAX:
        raise ConfigError(f"{PREFIX}{path}: invalid value: integer `{v}`, expected usize")
    return v


def _u16(path: str, v: Any, optional: bool = True) -> int | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad_type(path, v, "u16")
    if not 0 <= v < 2 ** 16:
        raise ConfigError(f"{PREFIX}{path}: invalid value: integer `{v}`, expected u16")
    return v


def _u32(path: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad_type(path, v, "u32")
    if not 0 <= v < 2 ** 32:
        raise ConfigError(f"{PREFIX}{path}: invalid value: integer `{v}`, expected u32")
    return v


def _float(path: str, v: Any, optional: bool = False) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad_type(path, v, "f64")
    try:
        return float(v)
    except OverflowError:
        raise ConfigError(f"{PREFIX}{path}: invalid value: integer `{v}`, expected f64") from None


def _bool(path: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _bad_type(path, v, "a boolean")
    return v


def _enum(path: str, v: Any, variants: tuple[str, ...]) -> str:
    if not isinstance(v, str):
        raise _bad_type(path, v, "string")
    if v not in variants:
        raise ConfigError(f"{PREFIX}{path}: unknown variant `{v}`, {_expected(variants)}")
    return v


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _check_known(path_prefix: str, d: dict, known) -> None:
    for k in d:
        if k not in known:
            raise ConfigError(f"{PREFIX}{path_prefix}{k}: unknown field `{k}`, {_expected(known)}"
                              f"{_did_you_mean(k, known)}")


def _timing_model(v: Any) -> dict:
    path = "engine.timing_model"
    if not isinstance(v, dict):
        raise _bad_type(path, v, "internally tagged enum TimingModelConfig")
    kind = v.get("type")
    if kind is None:
        raise ConfigError(f"{PREFIX}{path}: missing field `type`")
    if kind == "polynomial":
        _check_known(path + ".", v, ("type",))
        return {"type": "polynomial"}
    if kind == "fixed":
        _check_known(path + ".", v, ("type", "prefill_ms", "decode_ms"))
        for f in ("prefill_ms", "decode_ms"):
            if f not in v:
                raise ConfigError(f"{PREFIX}{path}: missing field `{f}`")
        # (the values are range-checked last, in _normalize_engine, as the reference does)
        return {"type": "fixed", "prefill_ms": _float(path + ".prefill_ms", v["prefill_ms"]),
                "decode_ms": _float(path + ".decode_ms", v["decode_ms"])}
    if kind == "external":
        raise ConfigError(f"{PREFIX}{path}: external timing models are not supported by mocker")
    raise ConfigError(f"{PREFIX}{path}: unknown variant `{kind}`, {_expected(('polynomial', 'fixed', 'external'))}")


def _normalize_engine(e: dict) -> dict:
    _check_known("engine.", e, ENGINE_FIELD_ORDER)
    for f in ENGINE_UNSUPPORTED:
        if e.get(f) is not None:
            raise ConfigError(f"{PREFIX}engine.{f}: not supported by mocker")
    out: dict[str, Any] = {}
    out["backend"] = _enum("engine.backend", e.get("backend", "vllm"), ("vllm", "sglang", "trtllm"))
    for f in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
              "prefill_schedule_interval", "prefill_decode_interval"):
        if f in e:
            out[f] = _uint(f"engine.{f}", e[f], optional=f in ("block_size", "max_num_seqs", "max_num_batched_tokens"))
        else:
            out[f] = ENGINE_DEFAULTS[f]
    out["max_model_len"] = _uint("engine.max_model_len", e.get("max_model_len"), optional=True)
    if out["block_size"] is None:
        out["block_size"] = DEFAULT_BLOCK_SIZE[out["backend"]]
    for f in ("enable_prefix_caching", "enable_chunked_prefill", "emit_kv_events", "emit_kv_token_ids"):
        out[f] = _bool(f"engine.{f}", e.get(f, ENGINE_DEFAULTS[f]))
    for f in ("speedup_ratio", "decode_speedup_ratio"):
        out[f] = _float(f"engine.{f}", e.get(f, 1.0))
    out["aic_nextn"] = _uint("engine.aic_nextn", e.get("aic_nextn"), optional=True)
    rates = e.get("aic_nextn_accept_rates")
    if rates is not None and (not isinstance(rates, list)
                              or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in rates)):
        raise _bad_type("engine.aic_nextn_accept_rates", rates, "a sequence of f64")
    out["aic_nextn_accept_rates"] = None if rates is None else [float(x) for x in rates]
    out["aic_mtp_seed"] = _uint("engine.aic_mtp_seed", e.get("aic_mtp_seed", 42))
    out["worker_type"] = _enum("engine.worker_type", e.get("worker_type", "aggregated"),
                               ("aggregated", "prefill", "decode"))
    out["preemption_mode"] = _enum("engine.preemption_mode", e.get("preemption_mode", "lifo"), ("lifo", "fifo"))
    out["kv_transfer_bytes_per_token"] = _uint("engine.kv_transfer_bytes_per_token",
                                               e.get("kv_transfer_bytes_per_token"), optional=True)
    out["kv_transfer_bandwidth"] = _float("engine.kv_transfer_bandwidth", e.get("kv_transfer_bandwidth"), optional=True)
    out["kv_transfer_timing_mode"] = _enum("engine.kv_transfer_timing_mode",
                                           e.get("kv_transfer_timing_mode", "full_prompt"),
                                           ("full_prompt", "destination_missing"))
    out["timing_model"] = _timing_model(e.get("timing_model", {"type": "polynomial"}))
    sg = e.get("sglang") or {}
    if not isinstance(sg, dict):
        raise _bad_type("engine.sglang", sg, "struct SglangArgs")
    _check_known("engine.sglang.", sg, tuple(SGLANG_DEFAULTS))
    sgo = dict(SGLANG_DEFAULTS)
    if "schedule_policy" in sg:
        sgo["schedule_policy"] = _enum("engine.sglang.schedule_policy", sg["schedule_policy"], ("fifo", "lpm"))
    for f in ("max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens"):
        if f in sg:
            sgo[f] = _uint(f"engine.sglang.{f}", sg[f])
    if "schedule_conservativeness" in sg:
        sgo["schedule_conservativeness"] = _float("engine.sglang.schedule_conservativeness",
                                                  sg["schedule_conservativeness"])
    out["sglang"] = sgo
    tr = e.get("trtllm") or {}
    if not isinstance(tr, dict):
        raise _bad_type("engine.trtllm", tr, "struct TrtllmArgs")
    _check_known("engine.trtllm.", tr, tuple(TRTLLM_DEFAULTS))
    out["trtllm"] = {"capacity_scheduler_policy": _enum(
        "engine.trtllm.capacity_scheduler_policy",
        tr.get("capacity_scheduler_policy", "guaranteed_no_evict"), ("guaranteed_no_evict",))}
    # semantic validation (reference wording, reference order)
    if out["block_size"] == 0:
        raise ConfigError("block_size must be positive")
    if out["num_gpu_blocks"] == 0:
        raise ConfigError("num_gpu_blocks must be positive")
    if out["num_gpu_blocks"] > MAX_BLOCKS_PER_RANK:
        raise ConfigError(f"{PREFIX}engine.num_gpu_blocks: {out['num_gpu_blocks']} blocks per rank is more "
                          f"than mocker's limit of {MAX_BLOCKS_PER_RANK} (block slots are 32-bit)")
    if out["max_model_len"] == 0:
        raise ConfigError("max_model_len must be positive")
    if out["block_size"] < 2 and out["backend"] != "sglang":
        # vLLM/TRT-LLM blocks hold at least two tokens (SGLang pages may hold one)
        raise ConfigError("vLLM/TRT-LLM block_size must be at least two")
    if out["max_num_seqs"] == 0:
        raise ConfigError("max_num_seqs must be positive")
    if out["max_num_batched_tokens"] == 0:
        raise ConfigError("max_num_batched_tokens must be positive")
    if out["prefill_schedule_interval"] == 0:
        raise ConfigError("prefill_schedule_interval must be positive")
    for f in ("speedup_ratio", "decode_speedup_ratio"):
        if not math.isfinite(out[f]) or out[f] < 0:
            raise ConfigError(f"{f} must be finite and non-negative")
    if out["prefill_decode_interval"] and out["backend"] != "sglang":
        raise ConfigError("prefill_decode_interval is supported only for backend=sglang")
    if out["backend"] == "sglang":
        sgo = out["sglang"]
        if sgo["max_prefill_tokens"] == 0:
            raise ConfigError("sglang.max_prefill_tokens must be positive")
        if sgo["chunked_prefill_size"] == 0:
            raise ConfigError("sglang.chunked_prefill_size must be positive")
        if sgo["chunked_prefill_size"] % out["block_size"]:
            raise ConfigError("sglang.chunked_prefill_size must be divisible by block_size")
        c = sgo["schedule_conservativeness"]
        if not math.isfinite(c) or c < 0:
            raise ConfigError("sglang.schedule_conservativeness must be finite and non-negative")
        if not out["enable_chunked_prefill"]:
            raise ConfigError("enable_chunked_prefill=false is not supported for backend=sglang")
    # KV transfer settings and the fixed timing model are checked last, for any worker type
    if out["kv_transfer_bytes_per_token"] == 0:
        raise ConfigError("kv_transfer_bytes_per_token must be positive")
    bw = out["kv_transfer_bandwidth"]
    if bw is not None and (not math.isfinite(bw) or bw < 0):
        raise ConfigError("kv_transfer_bandwidth must be finite and non-negative")
    tm = out["timing_model"]
    if tm["type"] == "fixed":
        for f, what in (("prefill_ms", "prefill"), ("decode_ms", "decode")):
            if not math.isfinite(tm[f]) or tm[f] < 0:
                raise ConfigError(f"fixed {what} latency must be finite and non-negative")
    return {k: out[k] for k in ENGINE_DEFAULTS}


def normalize_config(config: Any = None) -> dict:
    """Canonical engine config with all defaults.  Accepts a dict, a JSON string or None."""
    if config is None:
        config = {}
    if isinstance(config, (str, bytes)):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{PREFIX}not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{PREFIX}not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{PREFIX}invalid type: {_type_name(config)}, expected struct MockEngineArgs "
                          "(engine args must be a JSON object)")
    config = copy.deepcopy(config)
    engine = config.pop("engine", None)
    flat = {k: config.pop(k) for k in list(config) if k in ENGINE_FIELD_ORDER and k not in TOP_DEFAULTS}
    if engine is None:
        engine = {}
    elif not isinstance(engine, dict):
        raise _bad_type("engine", engine, "struct EngineArgs")
    elif flat:
        dup = next((k for k in flat if k in engine), None)
        if dup:
            raise ConfigError(f"{PREFIX}{dup}: given both at the top level and under `engine`")
    engine = {**engine, **flat}
    known_top = TOP_FIELD_ORDER + ("dynamo",)
    for k in config:
        if k not in known_top:
            raise ConfigError(f"{PREFIX}{k}: unknown field `{k}`, {_expected(TOP_FIELD_ORDER)}")
    out: dict[str, Any] = {"engine": _normalize_engine(engine)}
    out["dp_size"] = _u32("dp_size", config.get("dp_size", 1))
    if out["dp_size"] == 0:
        raise ConfigError("dp_size must be positive")
    out["tensor_parallel_size"] = _uint("tensor_parallel_size", config.get("tensor_parallel_size", 1))
    if out["tensor_parallel_size"] == 0:
        raise ConfigError("tensor_parallel_size must be positive")
    out["startup_time"] = _float("startup_time", config.get("startup_time"), optional=True)
    st = out["startup_time"]
    if st is not None and (not math.isfinite(st) or st < 0):
        raise ConfigError("startup_time must be finite and non-negative")
    if st is not None and st > MAX_STARTUP_TIME_S:
        raise ConfigError(f"{PREFIX}startup_time: {st:g} s is more than a day ({MAX_STARTUP_TIME_S:g} s); "
                          "it is the modeled start-up delay in seconds")
    out["num_gpu_blocks_is_explicit"] = (_bool("num_gpu_blocks_is_explicit",
                                               config.get("num_gpu_blocks_is_explicit", False))
                                         or "num_gpu_blocks" in engine)
    for f in ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction"):
        out[f] = _float(f, config.get(f), optional=True)
    out["cuda_graph_reserved_bytes"] = _uint("cuda_graph_reserved_bytes",
                                             config.get("cuda_graph_reserved_bytes"), optional=True)
    out["dynamo"] = _normalize_dynamo(config.get("dynamo"))
    return out


def _normalize_dynamo(dyn: Any) -> dict:
    """The ``dynamo`` section (ports, handoff timeout, reasoning, replay trace): typed and ranged."""
    if dyn is None:
        dyn = {}
    if not isinstance(dyn, dict):
        raise _bad_type("dynamo", dyn, "struct DynamoArgs")
    _check_known("dynamo.", dyn, tuple(DYNAMO_DEFAULTS))
    out = {**DYNAMO_DEFAULTS, **dyn}
    for f in ("bootstrap_port", "zmq_kv_events_port", "zmq_replay_port"):
        out[f] = _u16(f"dynamo.{f}", out[f])
    out["enable_local_indexer"] = _bool("dynamo.enable_local_indexer", out["enable_local_indexer"])
    t = out["handoff_session_timeout_ms"]
    if isinstance(t, bool) or not isinstance(t, int):
        raise _bad_type("dynamo.handoff_session_timeout_ms", t, "u64")
    if not 0 <= t < 2 ** 64:
        raise ConfigError(f"{PREFIX}dynamo.handoff_session_timeout_ms: invalid value: integer `{t}`, expected u64")
    if t == 0:
        raise ConfigError("handoff_session_timeout_ms must be positive")
    r = out["reasoning"]
    if r is not None and not isinstance(r, dict):
        raise _bad_type("dynamo.reasoning", r, "struct ReasoningConfig")
    p = out["response_replay_trace_path"]
    if p is not None and not isinstance(p, str):
        raise _bad_type("dynamo.response_replay_trace_path", p, "path string")
    if out["router_queue_policy"] is not None:
        _enum("dynamo.router_queue_policy", out["router_queue_policy"], ("fcfs", "lcfs", "wspt"))
    return out


def _is_file_arg(value: Any) -> bool:
    """A path to a JSON file rather than inline JSON (CLI convenience).

    A string is inline JSON when it starts with ``{`` or, not naming an existing file, parses
    as JSON (``[1, 2]``, ``null``, ``3``), so that such input is refused for what it is.
    """
    if isinstance(value, os.PathLike):
        return True
    if not isinstance(value, str):
        return False
    text = value.strip()
    if text.startswith("{"):
        return False
    if os.path.exists(value):
        return True
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


def _read_file_arg(value: Any, what: str) -> str:
    path = os.fspath(value)
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {what} file {path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None


def load_config(value: Any) -> dict:
    """``value`` may be a dict, a JSON string, or a path to a JSON file (CLI convenience)."""
    if _is_file_arg(value):
        path = os.fspath(value)
        text = _read_file_arg(value, "engine args")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: engine args must be a JSON object, got {_type_name(value)}")
    return normalize_config(value)


# -- KV router (docs/core-sim.md §6.5) ------------------------------------------------------
# Every key the reference's KvRouterConfig accepts, with its default.  The ones that change
# nothing in an offline replay (indexer threads, TTLs, replica sync, remote indexers, ...)
# are accepted and ignored, as the reference does.
ROUTER_DEFAULTS: dict[str, Any] = {
    "overlap_score_credit": 1.0,
    "overlap_score_credit_decay": 0.0,
    "prefill_load_scale": 1.0,
    "decode_active_request_weight": 0.0,
    "overlap_score_weight": None,             # deprecated alias of prefill_load_scale
    "host_cache_hit_weight": 0.75,
    "disk_cache_hit_weight": 0.25,
    "router_temperature": 0.0,
    "use_kv_events": True,
    "durable_kv_events": False,
    "router_replica_sync": False,
    "router_track_active_blocks": True,
    "router_track_output_blocks": False,
    "router_assume_kv_reuse": True,
    "router_track_prefill_tokens": True,
    "router_tracking_hash": "public-xxh3-v1",
    "router_tracking_key_file": None,
    "router_tracking_key_id": None,
    "router_prefill_load_model": "none",
    "router_snapshot_threshold": None,
    "router_reset_states": False,
    "router_ttl_secs": 120.0,
    "router_approximate_cache_policy": "ttl",
    "router_queue_threshold": None,
    "router_policy_config": None,
    "router_event_threads": 4,
    "skip_initial_worker_wait": False,
    "router_queue_policy": "fcfs",
    "use_remote_indexer": False,
    "serve_indexer": False,
    "enable_session_prefix_index": False,
    "shared_cache_multiplier": None,
    "shared_cache_type": "none",
    "router_predicted_ttl_secs": None,
    "conditional_disagg_enabled": False,
    "conditional_disagg_policy": None,
    "conditional_disagg_eff_isl_threshold": None,
    "conditional_disagg_eff_isl_ratio_threshold": None,
    "conditional_disagg_prefill_busy_threshold": None,
    "conditional_disagg_decode_busy_threshold": None,
    # mocker's own: seed of the tie-breaking generator (the reference breaks ties unseeded)
    "router_seed": 0,
}
_ROUTER_BOOLS = ("use_kv_events", "durable_kv_events", "router_replica_sync", "router_track_active_blocks",
                 "router_track_output_blocks", "router_assume_kv_reuse", "router_track_prefill_tokens",
                 "router_reset_states", "skip_initial_worker_wait", "use_remote_indexer", "serve_indexer",
                 "enable_session_prefix_index", "conditional_disagg_enabled")
# key -> (serde type, null allowed); floats with a range of their own are in _ROUTER_RANGES
_ROUTER_TYPES: dict[str, tuple[str, bool]] = {
    "host_cache_hit_weight": ("f64", False), "disk_cache_hit_weight": ("f64", False),
    "router_ttl_secs": ("f64", False), "router_predicted_ttl_secs": ("f64", True),
    "shared_cache_multiplier": ("f64", True),
    "conditional_disagg_eff_isl_threshold": ("f64", True),
    "conditional_disagg_eff_isl_ratio_threshold": ("f64", True),
    "conditional_disagg_prefill_busy_threshold": ("f64", True),
    "conditional_disagg_decode_busy_threshold": ("f64", True),
    "router_snapshot_threshold": ("u32", True), "router_event_threads": ("u32", False),
    "router_tracking_hash": ("str", False), "router_tracking_key_file": ("path", True),
    "router_tracking_key_id": ("str", True), "router_prefill_load_model": ("str", False),
    "router_approximate_cache_policy": ("str", False), "router_queue_policy": ("str", False),
    "router_policy_config": ("str", True), "shared_cache_type": ("str", False),
    "conditional_disagg_policy": ("str", True),
}
_ROUTER_RANGES = {
    "overlap_score_credit": "overlap_score_credit must be a finite, non-negative number",
    "overlap_score_credit_decay": "overlap_score_credit_decay must be finite and non-negative",
    "prefill_load_scale": "prefill_load_scale must be finite and non-negative",
    "decode_active_request_weight": "decode_active_request_weight must be finite and non-negative",
    "router_temperature": "router_temperature must be finite and non-negative",
}


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:          # an integer beyond the float range
        return False


def _router_error(msg: str) -> ConfigError:
    return ConfigError(f"invalid router config: {msg}")


def normalize_router_config(value: Any = None) -> dict:
    """Router settings (dict, JSON string or JSON file path) with defaults filled in.

    Keys and error texts follow the reference's ``KvRouterConfig``; settings that would
    change placement in ways mocker does not model are refused, never ignored.
    """
    if value is None:
        raw: dict = {}
    else:
        if _is_file_arg(value):
            value = _read_file_arg(value, "router config")
        if isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise _router_error(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
            except (ValueError, RecursionError) as exc:
                raise _router_error(f"not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise _router_error(f"expected a JSON object, got {_type_name(value)}")
        raw = dict(value)
    unknown = [k for k in raw if k not in ROUTER_DEFAULTS]
    if unknown:
        hint = _did_you_mean(unknown[0], ROUTER_DEFAULTS)
        raise _router_error(f"unknown field `{unknown[0]}`" + (hint or ", " + _expected(ROUTER_DEFAULTS)))
    out = dict(ROUTER_DEFAULTS)
    out.update({k: v for k, v in raw.items()})
    for key in _ROUTER_BOOLS:
        if not isinstance(out[key], bool):
            raise _router_error(f"{key}: invalid type: {_type_name(out[key])}, expected a boolean")
    for key, (kind, optional) in _ROUTER_TYPES.items():
        v = out[key]
        if v is None and optional:
            continue
        if kind == "f64":
            ok = not isinstance(v, bool) and isinstance(v, (int, float))
        elif kind in ("u32", "u64"):
            ok = not isinstance(v, bool) and isinstance(v, int)
        else:
            ok = isinstance(v, str)
        if not ok:
            want = {"str": "a string", "path": "path string"}.get(kind, kind)
            raise _router_error(f"{key}: invalid type: {_type_name(v)}, expected {want}"
                                + (" or null" if optional else ""))
        if kind in ("u32", "u64") and not 0 <= v < 2 ** int(kind[1:]):
            raise _router_error(f"{key}: invalid value: integer `{v}`, expected {kind}")
        if kind == "f64" and not _finite(v):
            raise _router_error(f"{key} must be finite, got {v}")
    for key in ("host_cache_hit_weight", "disk_cache_hit_weight", "shared_cache_multiplier"):
        if out[key] is not None and not 0 <= out[key] <= 1:
            raise _router_error(f"{key} must be between 0 and 1")
    if out["shared_cache_type"] not in ("none", "hicache"):
        raise _router_error(f"shared_cache_type: unknown variant `{out['shared_cache_type']}`, "
                            "expected `none` or `hicache`")
    if out["conditional_disagg_policy"] not in (None, "isl_bounding", "prefill_load", "isl_or_load"):
        raise _router_error(f"conditional_disagg_policy: unknown variant `{out['conditional_disagg_policy']}`, "
                            "expected one of `isl_bounding`, `prefill_load`, `isl_or_load`")
    for key, msg in _ROUTER_RANGES.items():
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _router_error(f"{key}: invalid type: {_type_name(v)}, expected f64")
        if not _finite(v) or v < 0:
            raise _router_error(msg)
        out[key] = float(v)
    osw = out.pop("overlap_score_weight")
    if osw is not None:
        if isinstance(osw, bool) or not isinstance(osw, (int, float)):
            raise _router_error(f"overlap_score_weight: invalid type: {_type_name(osw)}, expected f64")
        if not _finite(osw) or osw < 0:
            raise _router_error(_ROUTER_RANGES["prefill_load_scale"])
        out["prefill_load_scale"] = float(osw)        # the alias wins; a zero weight drops the credit too
        if osw == 0:
            out["overlap_score_credit"] = 0.0
    if out["router_tracking_hash"] not in ("public-xxh3-v1", "keyed-xxh3-v1"):
        raise _router_error(f"router_tracking_hash must be public-xxh3-v1 or keyed-xxh3-v1, "
                            f"got {json.dumps(out['router_tracking_hash'])}")
    if out["router_prefill_load_model"] not in ("none", "ais"):
        raise _router_error(f"unknown prefill load model: {json.dumps(out['router_prefill_load_model'])}, "
                            "expected 'none' or 'ais'")
    if out["router_approximate_cache_policy"] not in ("ttl", "lru"):
        raise _router_error(f"unknown approximate cache policy {json.dumps(out['router_approximate_cache_policy'])}, "
                            "expected 'ttl' or 'lru'")
    if out["router_approximate_cache_policy"] == "lru" and out["use_kv_events"]:
        raise _router_error("router_approximate_cache_policy=lru requires use_kv_events=false; "
                            "the local side indexer is TTL-only")
    if out["router_queue_policy"] not in ("fcfs", "lcfs", "wspt"):
        raise _router_error(f"unknown queue policy: {json.dumps(out['router_queue_policy'])}, "
                            "expected 'fcfs', 'lcfs', or 'wspt'")
    ev = out["router_event_threads"]
    if isinstance(ev, bool) or not isinstance(ev, int) or ev < 1:
        raise _router_error("router_event_threads must be at least 1")
    qt = out["router_queue_threshold"]
    if qt is not None:
        if isinstance(qt, bool) or not isinstance(qt, (int, float)) or not qt >= 0:
            raise _router_error("router_queue_threshold must be greater than or equal to 0")
        raise _router_error("router_queue_threshold (the router's request queue) is not supported by mocker yet")
    if out["router_prefill_load_model"] == "ais":
        raise _router_error("router_prefill_load_model='ais' is not supported by mocker yet")
    if out["overlap_score_credit_decay"] > 0:
        raise _router_error("overlap_score_credit_decay > 0 is not supported by mocker yet")
    if out["router_track_output_blocks"]:
        raise _router_error("router_track_output_blocks=true is not supported by mocker yet")
    if out["conditional_disagg_enabled"]:
        raise _router_error("conditional_disagg_enabled=true (the router choosing whether to disaggregate) "
                            "is not supported by mocker yet")
    if out["shared_cache_type"] != "none":
        raise _router_error(f"shared_cache_type={out['shared_cache_type']!r} (a shared cache tier) is not "
                            "supported by mocker yet")
    seed = out["router_seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
        raise _router_error(f"router_seed: expected an integer in [0, 2^64), got {seed!r}")
    return out
