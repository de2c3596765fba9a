"""Synthetic workload of ``run_mocker_synthetic_trace_replay`` (spec §7.4), as numpy columns.

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
  ratio .5 -> 2 blocks) when ``num_prefix_groups > 0 and shared_prefix_ratio > 0``; shared ids are
  ``0xD00D_0000_0000_0000 | group << 32 | block_idx``; the remaining blocks get globally unique
  increasing ids starting at 1, assigned here in request (session-major) order. (Only id
  *equality* is observable through timing; the unique-id order is not observable.)
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
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from mocker._core.rng import poisson_arrivals, prefix_groups

__all__ = ["SyntheticWorkload", "build_synthetic_workload", "SHARED_PREFIX_TAG"]

SHARED_PREFIX_TAG = 0xD00D_0000_0000_0000
_U64_MASK = (1 << 64) - 1


def _fmt_f64(x: float) -> str:
    """Format like Rust's ``Display`` for f64 (shortest round-trip, never exponent)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return np.format_float_positional(x, trim="-")


def _as_unsigned(value) -> int:
    """Mimic pyo3's conversion of a Python int to a Rust unsigned integer."""
    v = operator.index(value)
    if v < 0:
        raise OverflowError("can't convert negative int to unsigned")
    if v > _U64_MASK:
        raise OverflowError("int too big to convert")
    return v


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
    hash_offsets: np.ndarray        # int64: CSR offsets (len = num_requests + 1) into hash_ids
    hash_ids: np.ndarray            # uint64: prompt block hash ids, one per engine block
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

    def request_hash_ids(self, i: int) -> np.ndarray:
        return self.hash_ids[self.hash_offsets[i]:self.hash_offsets[i + 1]]


def _interval_gap(interval_ms: float) -> float:
    """The reference turns a constant interval into a rate and back: ``1000/(1000/d)``."""
    with np.errstate(divide="ignore", over="ignore"):
        qps = 1000.0 / interval_ms
    if not (math.isfinite(qps) and qps > 0.0):
        raise ValueError(f"qps must be a finite positive number, got {_fmt_f64(qps)}")
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
    materialize_ids: bool = True,
) -> SyntheticWorkload:
    """Build the §7.4 synthetic workload; validation order and messages follow 1.6.1."""
    # pyo3 argument conversion happens before any validation
    input_tokens = _as_unsigned(input_tokens)
    output_tokens = _as_unsigned(output_tokens)
    request_count = _as_unsigned(request_count)
    turns_per_session = _as_unsigned(turns_per_session)
    num_prefix_groups = _as_unsigned(num_prefix_groups)
    arrival_seed = _as_unsigned(arrival_seed)
    shared_prefix_ratio = float(shared_prefix_ratio)
    inter_turn_delay_ms = float(inter_turn_delay_ms)
    arrival_speedup_ratio = float(arrival_speedup_ratio)

    # 1. arrival mode
    given = sum(x is not None for x in (replay_concurrency, request_rate, arrival_interval_ms))
    if given != 1:
        raise ValueError(
            "synthetic replay requires exactly one of replay_concurrency, request_rate, "
            "or arrival_interval_ms")
    if request_rate is not None:
        request_rate = float(request_rate)
        if not (math.isfinite(request_rate) and request_rate > 0.0):
            raise ValueError(
                f"request_rate must be a finite positive number, got {_fmt_f64(request_rate)}")
    elif arrival_interval_ms is not None:
        arrival_interval_ms = float(arrival_interval_ms)
        if not (math.isfinite(arrival_interval_ms) and arrival_interval_ms >= 0.0):
            raise ValueError(
                "arrival_interval_ms must be a finite non-negative number, "
                f"got {_fmt_f64(arrival_interval_ms)}")
    else:
        replay_concurrency = int(replay_concurrency)
        if replay_concurrency < 1:
            raise ValueError("replay_concurrency must be at least 1")

    # 2. engine block size (the reference validates the engine config at this point)
    block_size = int(block_size)
    if block_size <= 0:
        raise ValueError("block_size must be positive")

    def check_sizes():
        if input_tokens < 1:
            raise ValueError("input_tokens must be at least 1")
        if output_tokens < 1:
            raise ValueError("output_tokens must be at least 1")
        if request_count < 1:
            raise ValueError("request_count must be at least 1")

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
            raise ValueError("turns_per_session must be at least 1")
        if not (math.isfinite(inter_turn_delay_ms) and inter_turn_delay_ms >= 0.0):
            raise ValueError("inter_turn_delay_ms must be a finite non-negative number")
        if not (0.0 <= shared_prefix_ratio <= 1.0):
            raise ValueError(
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
            raise ValueError(
                "arrival_speedup_ratio must be a finite positive number, "
                f"got {_fmt_f64(arrival_speedup_ratio)}")

    n_sess = request_count
    n_req = n_sess * turns

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
            raise ValueError(
                f"{what} has invalid first_arrival_timestamp_ms {_fmt_f64(float(first[bad]))}")
        arrival_ms[::turns] = first

    # --- prompt block hash ids -------------------------------------------------------------
    nb = (input_tokens + block_size - 1) // block_size
    if num_prefix_groups > 0 and shared_prefix_ratio > 0.0:
        shared = min(nb, _saturating_usize(_rust_round(float(nb) * shared_prefix_ratio)))
        groups = prefix_groups(n_sess, num_prefix_groups)
    else:
        shared = 0
        groups = np.full(n_sess, -1, dtype=np.int64)
    n_unique = nb - shared

    if not materialize_ids:
        hash_ids = np.empty(0, dtype=np.uint64)
        hash_offsets = np.zeros(n_req + 1, dtype=np.int64)
        return SyntheticWorkload(
            session_id=session_id, turn_index=turn_index, arrival_ms=arrival_ms,
            input_len=input_len, output_len=output_len, hash_offsets=hash_offsets,
            hash_ids=hash_ids, inter_turn_delay_ms=float(delay), block_size=block_size,
            turns_per_session=turns, replay_concurrency=replay_concurrency,
            session_mode=session_mode, prefix_group=groups, shared_blocks=shared)

    ids = np.empty((n_req, nb), dtype=np.uint64)
    if shared:
        g = groups.astype(np.uint64)
        base = (np.uint64(SHARED_PREFIX_TAG) | (g << np.uint64(32)))          # per session
        ids[:, :shared] = (np.repeat(base, turns)[:, None]
                           | np.arange(shared, dtype=np.uint64)[None, :])
    if n_unique:
        ids[:, shared:] = np.arange(1, n_req * n_unique + 1,
                                    dtype=np.uint64).reshape(n_req, n_unique)
    hash_ids = ids.reshape(-1)
    hash_offsets = np.arange(n_req + 1, dtype=np.int64) * np.int64(nb)

    return SyntheticWorkload(
        session_id=session_id,
        turn_index=turn_index,
        arrival_ms=arrival_ms,
        input_len=input_len,
        output_len=output_len,
        hash_offsets=hash_offsets,
        hash_ids=hash_ids,
        inter_turn_delay_ms=float(delay),
        block_size=block_size,
        turns_per_session=turns,
        replay_concurrency=replay_concurrency,
        session_mode=session_mode,
        prefix_group=groups,
        shared_blocks=shared,
    )
