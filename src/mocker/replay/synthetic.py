"""Synthetic workload of ``run_mocker_synthetic_trace_replay`` (docs/core-sim.md §7.4), as numpy columns.

Facts established against ``ai-dynamo-runtime==1.6.1`` (black box):

* Requests are laid out session-major: ``(s0,t0), (s0,t1), ..., (s1,t0), ...``. Every turn has
  exactly ``input_tokens`` / ``output_tokens``.
* First-turn arrivals:
  - ``request_rate``: Poisson, ``arrival[0] = 0``, then ``t += -(1000/rate)*ln(clamp(1-U))`` with
    ``U`` from ``StdRng::seed_from_u64(arrival_seed)`` (bit-exact, see ``rng.poisson_arrivals``);
  - ``arrival_interval_ms = d``: ``0`` puts everything at 0; otherwise the reference converts to a
    rate and back: ``qps = 1000/d`` (must be finite, else "qps must be a finite positive number,
    got inf"), ``gap = 1000/qps`` and ``t += gap`` sequentially (bit-exact; ``gap`` can differ
    from ``d`` by an ulp, and ``t_k != k*gap``);
  - ``replay_concurrency``: closed loop, no timestamps (``arrival_ms`` all NaN).
  Later turns have NaN (they arrive ``inter_turn_delay_ms`` after the previous turn completes).
  ``arrival_speedup_ratio`` is applied by the replay as ``arrival_ms / ratio`` per request (and
  to the inter-turn delay); it is *not* applied here, only validated.
* Prefix groups: a separate ``StdRng::seed_from_u64(42)`` draws ``random_range(0..G)`` once per
  session, in session order, independent of ``arrival_seed`` and of the arrival mode. All turns
  of a session share the group prefix.
* Prompt blocks (block = engine ``block_size``): ``nb = ceil(isl/bs)``,
  ``shared = min(nb, round_half_away(nb*ratio))`` (block-based, not token-based: isl=10, bs=4,
  ratio .5 -> 2 blocks) when ``num_prefix_groups > 0 and shared_prefix_ratio > 0``; the shared
  blocks are the same for every session of a group; the remaining blocks get globally unique
  ids, in request (session-major) order. (Only block *equality* is observable through timing,
  so ``synthetic_workload`` encodes both as runs, see there.)
* The reference has two internal paths. The *session* path is taken iff
  ``turns_per_session > 1 or shared_prefix_ratio > 0 or num_prefix_groups > 0 or
  inter_turn_delay_ms > 0``; only then are turns / delay / ratio validated (so e.g.
  ``turns_per_session=0`` alone is accepted and means one turn). In the session path the
  reference's request UUIDs are random and per-request records carry ``session_id =
  "session_<i>"`` / ``turn_index``; in the simple path UUIDs are sequential and both are None.
* Validation order (1.6.1): negative/oversized ints -> OverflowError (pyo3 conversion);
  "exactly one of" -> rate / interval / concurrency value checks -> engine config
  (``block_size must be positive``) -> simple path: interval->qps, sizes, speedup ratio;
  session path: sizes, turns, inter-turn delay, ratio, interval->qps, speedup ratio.
  (The reference raises plain ``Exception`` for these; we raise ``ValueError``.)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from mocker._core.rng import poisson_arrivals, prefix_groups
from mocker.errors import ReplayError
from mocker.limits import HORIZON_MS, MAX_REQUEST_TOKENS, RID_LIMIT
from mocker.replay.workload import RUN_RANGE, Workload

__all__ = ["SyntheticWorkload", "build_synthetic_workload", "synthetic_workload"]

_U64_MASK = (1 << 64) - 1
# prompts of a prefix group start with run values (1 << 62) | group << 32 (fresh ids count up
# from 1 and stay below them), so there are at most 2**30 groups
_SHARED_TAG = 1 << 62
MAX_PREFIX_GROUPS = 1 << 30


def _fmt_f64(x: float) -> str:
    """Format like Rust's ``Display`` for f64 (shortest round-trip, never exponent)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return np.format_float_positional(x, trim="-")


def _as_unsigned(name: str, value, limit: int = _U64_MASK) -> int:
    """A non-negative integer argument no larger than ``limit`` (the message names it)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ReplayError(f"{name} must be an integer, got {value!r}", name) from None
    if v < 0:
        raise ReplayError(f"{name} must be a non-negative integer, got {v}", name)
    if v > limit:
        raise ReplayError(f"{name} {v} is too large (at most {limit})", name)
    return v


def _as_f64(name: str, value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ReplayError(f"{name} must be a number, got {value!r}", name) from None


def _rust_round(x: float) -> float:
    """``f64::round``: half away from zero."""
    if not math.isfinite(x):
        return x
    ax = abs(x)
    fl = math.floor(ax)
    r = fl + 1.0 if ax - fl >= 0.5 else fl
    return math.copysign(r, x)


def _saturating_usize(x: float) -> int:
    """Rust ``f64 as usize``: NaN -> 0, negative -> 0, saturating at the top."""
    if math.isnan(x) or x <= 0.0:
        return 0
    if x >= 18446744073709551615.0:
        return _U64_MASK
    return int(x)


@dataclass
class SyntheticWorkload:
    """Column-oriented synthetic workload; one row per request (session-major order)."""

    session_id: np.ndarray          # int64: session index of each request
    turn_index: np.ndarray          # int64: turn index within its session
    arrival_ms: np.ndarray          # float64: first-turn arrival (ms); NaN for later turns and
    #                                 for every request in closed-loop (replay_concurrency) mode
    input_len: np.ndarray           # int64: prompt length
    output_len: np.ndarray          # int64: requested output length
    inter_turn_delay_ms: float      # delay between a turn's completion and the next turn
    block_size: int                 # engine block size the hash ids are cut with
    turns_per_session: int          # effective number of turns (>= 1)
    replay_concurrency: Optional[int] = None   # closed-loop limit, None in timestamp mode
    session_mode: bool = False      # reference's session path (see module docstring)
    prefix_group: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    #                                 int64 per session: prefix group, -1 without sharing
    shared_blocks: int = 0          # number of leading shared-prefix blocks per request

    @property
    def num_requests(self) -> int:
        return int(self.session_id.shape[0])

    @property
    def num_sessions(self) -> int:
        return int(self.prefix_group.shape[0])


def _interval_gap(interval_ms: float) -> float:
    """The reference turns a constant interval into a rate and back: ``1000/(1000/d)``."""
    with np.errstate(divide="ignore", over="ignore"):
        qps = 1000.0 / interval_ms
    if not (math.isfinite(qps) and qps > 0.0):
        raise ReplayError(f"qps must be a finite positive number, got {_fmt_f64(qps)}")
    return 1000.0 / qps


def _constant_arrivals(interval_ms: float, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float64)
    if interval_ms == 0.0:
        return out
    gap = _interval_gap(interval_ms)
    if n <= 1:
        return out
    out[1:] = gap
    # np.add.accumulate is a sequential left-to-right sum (same rounding as `t += gap`)
    return np.add.accumulate(out)


def build_synthetic_workload(
    input_tokens: int,
    output_tokens: int,
    request_count: int,
    block_size: int,
    *,
    replay_concurrency: Optional[int] = None,
    request_rate: Optional[float] = None,
    arrival_interval_ms: Optional[float] = None,
    arrival_seed: int = 42,
    turns_per_session: int = 1,
    shared_prefix_ratio: float = 0.0,
    num_prefix_groups: int = 0,
    inter_turn_delay_ms: float = 0.0,
    arrival_speedup_ratio: float = 1.0,
) -> SyntheticWorkload:
    """Build the synthetic workload's rows; validation order and messages follow 1.6.1."""
    # argument conversion happens before any validation (as pyo3's in the reference)
    input_tokens = _as_unsigned("input_tokens", input_tokens, MAX_REQUEST_TOKENS)
    output_tokens = _as_unsigned("output_tokens", output_tokens, MAX_REQUEST_TOKENS)
    request_count = _as_unsigned("request_count", request_count, RID_LIMIT - 1)
    turns_per_session = _as_unsigned("turns_per_session", turns_per_session, RID_LIMIT - 1)
    num_prefix_groups = _as_unsigned("num_prefix_groups", num_prefix_groups, MAX_PREFIX_GROUPS)
    arrival_seed = _as_unsigned("arrival_seed", arrival_seed)
    shared_prefix_ratio = _as_f64("shared_prefix_ratio", shared_prefix_ratio)
    inter_turn_delay_ms = _as_f64("inter_turn_delay_ms", inter_turn_delay_ms)
    arrival_speedup_ratio = _as_f64("arrival_speedup_ratio", arrival_speedup_ratio)
    if request_rate is not None:
        request_rate = _as_f64("request_rate", request_rate)
    if arrival_interval_ms is not None:
        arrival_interval_ms = _as_f64("arrival_interval_ms", arrival_interval_ms)

    # 1. arrival mode
    given = sum(x is not None for x in (replay_concurrency, request_rate, arrival_interval_ms))
    if given != 1:
        raise ReplayError(
            "synthetic replay requires exactly one of replay_concurrency, request_rate, "
            "or arrival_interval_ms", "request_rate")
    if request_rate is not None:
        request_rate = float(request_rate)
        if not (math.isfinite(request_rate) and request_rate > 0.0):
            raise ReplayError(
                f"request_rate must be a finite positive number, got {_fmt_f64(request_rate)}")
    elif arrival_interval_ms is not None:
        arrival_interval_ms = float(arrival_interval_ms)
        if not (math.isfinite(arrival_interval_ms) and arrival_interval_ms >= 0.0):
            raise ReplayError(
                "arrival_interval_ms must be a finite non-negative number, "
                f"got {_fmt_f64(arrival_interval_ms)}")
    else:
        assert replay_concurrency is not None          # exactly one of the three is given
        replay_concurrency = int(replay_concurrency)
        if replay_concurrency < 1:
            raise ReplayError("replay_concurrency must be at least 1")

    # 2. engine block size (the reference validates the engine config at this point)
    block_size = int(block_size)
    if block_size <= 0:
        raise ReplayError("block_size must be positive")

    def check_sizes():
        if input_tokens < 1:
            raise ReplayError("input_tokens must be at least 1")
        if output_tokens < 1:
            raise ReplayError("output_tokens must be at least 1")
        if request_count < 1:
            raise ReplayError("request_count must be at least 1")

    def check_interval():
        if arrival_interval_ms is not None and arrival_interval_ms != 0.0:
            _interval_gap(arrival_interval_ms)

    # The reference has two internal paths with different validation orders (module docstring).
    session_mode = (turns_per_session > 1 or shared_prefix_ratio > 0.0
                    or num_prefix_groups > 0 or inter_turn_delay_ms > 0.0)
    if session_mode:
        # 3s. sizes, session options, then the interval->rate conversion
        check_sizes()
        if turns_per_session < 1:
            raise ReplayError("turns_per_session must be at least 1")
        if not (math.isfinite(inter_turn_delay_ms) and inter_turn_delay_ms >= 0.0):
            raise ReplayError("inter_turn_delay_ms must be a finite non-negative number")
        if not (0.0 <= shared_prefix_ratio <= 1.0):
            raise ReplayError(
                "shared_prefix_ratio must be between 0.0 and 1.0, "
                f"got {_fmt_f64(shared_prefix_ratio)}")
        check_interval()
        turns = turns_per_session
        delay = inter_turn_delay_ms
    else:
        # 3. interval->rate conversion, then sizes
        check_interval()
        check_sizes()
        turns = 1
        delay = 0.0

    # 4. arrival speedup (timestamp modes only)
    if replay_concurrency is None:
        if not (math.isfinite(arrival_speedup_ratio) and arrival_speedup_ratio > 0.0):
            raise ReplayError(
                "arrival_speedup_ratio must be a finite positive number, "
                f"got {_fmt_f64(arrival_speedup_ratio)}")

    n_sess = request_count
    n_req = n_sess * turns
    if n_req >= RID_LIMIT:
        raise ReplayError(f"request_count {request_count} x turns_per_session {turns} = {n_req} requests, "
                          f"more than one replay can hold ({RID_LIMIT - 1})", "request_count")
    scale = 1.0 if replay_concurrency is not None else arrival_speedup_ratio
    if delay / scale > HORIZON_MS:
        raise ReplayError(f"inter_turn_delay_ms {_fmt_f64(delay)} is beyond the simulation horizon "
                          f"({HORIZON_MS:.6g} ms, about 104 days)", "inter_turn_delay_ms")

    # --- rows ------------------------------------------------------------------------------
    session_id = np.repeat(np.arange(n_sess, dtype=np.int64), turns)
    turn_index = np.tile(np.arange(turns, dtype=np.int64), n_sess)
    input_len = np.full(n_req, input_tokens, dtype=np.int64)
    output_len = np.full(n_req, output_tokens, dtype=np.int64)

    # --- arrivals ----------------------------------------------------------------------------
    arrival_ms = np.full(n_req, np.nan, dtype=np.float64)
    if request_rate is not None:
        first = poisson_arrivals(arrival_seed, request_rate, n_sess)
    elif arrival_interval_ms is not None:
        first = _constant_arrivals(arrival_interval_ms, n_sess)
    else:
        first = None
    if first is not None:
        if not np.all(np.isfinite(first)):
            # (the reference fails later, in the replay, with path-specific messages)
            bad = int(np.argmax(~np.isfinite(first)))
            what = f"session session_{bad}" if session_mode else f"request {bad}"
            raise ReplayError(
                f"{what} has invalid first_arrival_timestamp_ms {_fmt_f64(float(first[bad]))}")
        last = float(first[-1]) / scale if first.size else 0.0
        if not last <= HORIZON_MS:
            name = "request_rate" if request_rate is not None else "arrival_interval_ms"
            value = request_rate if request_rate is not None else arrival_interval_ms
            raise ReplayError(f"{name} {value!r} puts the last of {n_sess} arrivals at "
                              f"{last:.6g} ms, beyond the simulation horizon ({HORIZON_MS:.6g} ms, "
                              "about 104 days)", name)
        arrival_ms[::turns] = first

    # --- prompt block hash ids -------------------------------------------------------------
    nb = (input_tokens + block_size - 1) // block_size
    if num_prefix_groups > 0 and shared_prefix_ratio > 0.0:
        shared = min(nb, _saturating_usize(_rust_round(float(nb) * shared_prefix_ratio)))
        groups = prefix_groups(n_sess, num_prefix_groups)
    else:
        shared = 0
        groups = np.full(n_sess, -1, dtype=np.int64)

    return SyntheticWorkload(
        session_id=session_id, turn_index=turn_index, arrival_ms=arrival_ms,
        input_len=input_len, output_len=output_len, inter_turn_delay_ms=float(delay),
        block_size=block_size, turns_per_session=turns, replay_concurrency=replay_concurrency,
        session_mode=session_mode, prefix_group=groups, shared_blocks=shared)


def synthetic_workload(input_tokens: int, output_tokens: int, request_count: int, block_size: int,
                       **kwargs) -> Workload:
    """The synthetic workload as replay columns, prompts as range runs (no per-block ids).

    A prompt is the session's shared-prefix blocks (values ``1 << 62 | group << 32``, one
    block's worth each) followed by fresh ids counting up from 1 in request order, one id per
    engine block: at most two runs per request whatever the prompt length.  Only the equality
    of blocks is observable, so this matches the reference's per-block id lists.
    """
    syn = build_synthetic_workload(input_tokens, output_tokens, request_count, block_size, **kwargs)
    ratio = 1.0 if syn.replay_concurrency is not None else float(kwargs.get("arrival_speedup_ratio", 1.0))
    bs = block_size
    n = syn.num_requests
    in_len = syn.input_len
    nb = (in_len + bs - 1) // bs
    shared = int(syn.shared_blocks)
    n_unique = nb - shared
    sess = syn.session_id
    turn = syn.turn_index
    shared_tok = np.minimum(in_len, shared * bs)
    uniq_tok = in_len - shared_tok
    first_unique = 1 + np.concatenate(([0], np.cumsum(n_unique)[:-1])).astype(np.uint64)
    has_shared = shared_tok > 0
    has_unique = uniq_tok > 0
    counts = has_shared.astype(np.int64) + has_unique.astype(np.int64)
    run_off = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    m = int(run_off[-1])
    run_v = np.empty(m, dtype=np.uint64)
    run_n = np.empty(m, dtype=np.int64)
    pos = run_off[:-1]
    if shared:
        g = syn.prefix_group[sess].astype(np.uint64)
        run_v[pos[has_shared]] = np.uint64(_SHARED_TAG) | (g[has_shared] << np.uint64(32))
        run_n[pos[has_shared]] = shared_tok[has_shared]
    upos = pos + has_shared.astype(np.int64)
    run_v[upos[has_unique]] = first_unique[has_unique]
    run_n[upos[has_unique]] = uniq_tok[has_unique]
    next_turn = np.full(n, -1, dtype=np.int32)
    same = (sess[1:] == sess[:-1]) & (turn[1:] == turn[:-1] + 1)
    next_turn[:-1][same] = np.arange(1, n, dtype=np.int32)[same]
    delay = np.where(turn > 0, syn.inter_turn_delay_ms / ratio, 0.0).astype(np.float64)
    heads = np.nonzero(turn == 0)[0].astype(np.int32)
    head_arr = syn.arrival_ms[heads]
    head_arr = np.where(np.isnan(head_arr), 0.0, head_arr) / ratio
    if syn.session_mode:
        # the reference names sessions "session_<i>" in its records (session path only)
        session_index = sess.astype(np.int32)
        turn_index = turn.astype(np.int64)
        session_names = _SessionNames(syn.num_sessions)
    else:
        session_index = np.full(n, -1, dtype=np.int32)
        turn_index = np.full(n, -1, dtype=np.int64)
        session_names = _SessionNames(0)
    return Workload(
        n=n, input_length=in_len, output_length=syn.output_len,
        run_off=run_off, run_kind=np.full(m, RUN_RANGE, dtype=np.int8), run_v=run_v,
        run_start=np.full(m, bs, dtype=np.int64), run_n=run_n,
        next_turn=next_turn, delay_ms=delay, session_heads=heads, head_arrival_ms=head_arr,
        session_index=session_index, turn_index=turn_index, session_names=session_names,
        delta=False)


class _SessionNames(Sequence):
    """``session_<i>`` for i < n, made on demand (a million sessions need no million strings)."""

    def __init__(self, n: int):
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [f"session_{k}" for k in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return f"session_{i % self._n}"

    def __iter__(self):
        return (f"session_{k}" for k in range(self._n))
