# cython: language_level=3
"""Virtual-clock replay event loop (spec core-sim §6.1–§6.4).

The whole loop runs in C without the GIL.  Python hands over the workload as numpy
columns once, then calls ``advance`` (a bounded slice of simulated passes, so the
caller can draw progress) until it reports completion, then reads the per-request
columns and the streaming accumulators back once.
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport INFINITY
from libc.stdint cimport int8_t, int32_t, int64_t, uint64_t
from libcpp.vector cimport vector
from libcpp.queue cimport priority_queue
from libcpp.pair cimport pair
from mocker._core._types cimport rid_t, KvEvent
from mocker._core.table cimport ReqTable, TokRun, RUN_GEN, ST_COMPLETED
from mocker._core.rank cimport Rank
from mocker._core.router cimport KvRouter
from mocker._core.stats cimport (Welford, welford_init, welford_add, welford_mean, welford_std,
                                 welford_min, welford_max, DDSketch, ddsketch_init, ddsketch_free,
                                 ddsketch_add, ddsketch_percentile)

cnp.import_array()

ctypedef pair[double, int64_t] Arrival      # (-time, -rid): max-heap pops the earliest, then lowest rid


class ReplayInvariantError(RuntimeError):
    """The simulation can make no progress (reference wording kept)."""


cdef class ReplayCore:
    cdef ReqTable t
    cdef list _ranks                     # keeps the rank objects alive
    cdef vector[void*] ranks             # borrowed Rank pointers (nogil access)
    cdef int64_t n_workers               # logical workers (groups of `dp` ranks sharing a pass clock)
    cdef int64_t n_ranks                 # scheduler ranks: rank k is worker k // dp, dp rank k % dp
    cdef int64_t dp
    cdef int64_t interval                # prefill_schedule_interval (attention DP)
    cdef vector[int8_t] stepped          # per rank: ran in its worker's current pass
    cdef vector[int64_t] next_rank       # per worker: round-robin rank counter
    cdef vector[int64_t] wave            # per worker: passes since the worker last drained
    cdef bint _effect
    cdef KvRouter router                 # None: round robin
    cdef bint routed
    # workload
    cdef vector[int64_t] run_off
    cdef vector[TokRun] runs
    cdef vector[int32_t] next_turn
    cdef vector[double] delay
    cdef vector[rid_t] static_rid        # first turns sorted by (arrival, rid) (timestamp mode)
    cdef vector[double] static_time
    cdef vector[rid_t] session_heads     # first turns in file order (concurrency mode)
    cdef int64_t static_ptr, session_ptr
    cdef int64_t concurrency
    cdef bint delta
    cdef vector[vector[TokRun]] full_runs  # delta mode: cumulative prompt runs until the next turn is built
    cdef priority_queue[Arrival] dyn
    cdef vector[rid_t] arrival_seq       # rids in arrival (routing) order
    # state
    cdef double now
    cdef double max_sim
    cdef vector[int8_t] busy
    cdef vector[int8_t] stalled          # made an effect-free zero-duration pass; waits for an arrival
    cdef vector[double] busy_until
    cdef int64_t rr_next
    cdef public int64_t arrived
    cdef public int64_t terminal
    cdef public int64_t passes
    cdef public int64_t committed_prefill
    cdef public bint done
    cdef public int64_t stalled_inflight   # > 0: an effect-free zero-duration pass happened
    # accumulators
    cdef Welford itl
    cdef DDSketch itl_sk
    cdef DDSketch tput_sk
    cdef Welford tput

    def __cinit__(self):
        welford_init(&self.itl)
        welford_init(&self.tput)
        if ddsketch_init(&self.itl_sk) != 0 or ddsketch_init(&self.tput_sk) != 0:
            raise MemoryError()

    def __dealloc__(self):
        ddsketch_free(&self.itl_sk)
        ddsketch_free(&self.tput_sk)

    def __init__(self, ReqTable table, list ranks, dict w, int64_t concurrency=0,
                 double max_sim_time_ms=INFINITY, bint delta=False, KvRouter router=None,
                 int64_t dp_size=1, int64_t prefill_schedule_interval=1):
        """``w``: numpy columns of the workload (see ``mocker.replay.run``)."""
        cdef int64_t n = table.n, i
        cdef cnp.int64_t[::1] run_off = w["run_off"]
        cdef cnp.int8_t[::1] run_kind = w["run_kind"]
        cdef cnp.uint64_t[::1] run_v = w["run_v"]
        cdef cnp.int64_t[::1] run_start = w["run_start"]
        cdef cnp.int64_t[::1] run_n = w["run_n"]
        cdef cnp.int32_t[::1] next_turn = w["next_turn"]
        cdef cnp.float64_t[::1] delay = w["delay_ms"]
        cdef cnp.int64_t[::1] req_out = w["output_length"]
        cdef cnp.int32_t[::1] heads = w["session_heads"]
        cdef cnp.float64_t[::1] head_time = w["head_arrival_ms"]
        cdef TokRun tr
        self.t = table
        self._ranks = ranks
        for rk in ranks:
            self.ranks.push_back(<void*>rk)
        if dp_size < 1 or len(ranks) % dp_size != 0:
            raise ValueError("the ranks must form whole workers of dp_size ranks")
        self.n_ranks = len(ranks)
        self.dp = dp_size
        self.n_workers = self.n_ranks // dp_size
        self.interval = prefill_schedule_interval if prefill_schedule_interval > 0 else 1
        self.stepped.resize(self.n_ranks, 0)
        self.next_rank.resize(self.n_workers, 0)
        self.wave.resize(self.n_workers, 0)
        self.router = router
        self.routed = router is not None
        self.concurrency = concurrency
        self.max_sim = max_sim_time_ms
        self.delta = delta
        self.run_off.assign(&run_off[0], &run_off[0] + n + 1)
        for i in range(run_off[n]):
            tr.kind = run_kind[i]
            tr.v = run_v[i]
            tr.start = run_start[i]
            tr.n = run_n[i]
            self.runs.push_back(tr)
        self.next_turn.assign(&next_turn[0], &next_turn[0] + n)
        self.delay.assign(&delay[0], &delay[0] + n)
        for i in range(n):
            table.req_out[i] = req_out[i]
            table.max_out[i] = req_out[i]
        if delta:
            self.full_runs.resize(n)
        # first turns: timestamp mode sorts by (time, rid); concurrency uses file order
        order = np.lexsort((np.asarray(heads), np.asarray(head_time)))
        for i in range(heads.shape[0]):
            self.session_heads.push_back(heads[i])
        if concurrency <= 0:
            for i in order:
                self.static_rid.push_back(heads[i])
                self.static_time.push_back(head_time[i])
        else:
            for i in range(min(concurrency, heads.shape[0])):
                self.dyn.push(Arrival(-0.0, -<int64_t>heads[i]))
            self.session_ptr = min(concurrency, heads.shape[0])
        self.busy.resize(self.n_workers, 0)
        self.stalled.resize(self.n_workers, 0)
        self.busy_until.resize(self.n_workers, 0.0)
        self.now = 0.0

    # -- arrivals ----------------------------------------------------------------
    cdef void _arrive(self, rid_t r, double at) noexcept nogil:
        cdef int64_t w
        self.t.arrival[r] = at
        if self.delta:
            self.full_runs[r].insert(self.full_runs[r].end(),
                                     self.runs.begin() + self.run_off[r],
                                     self.runs.begin() + self.run_off[r + 1])
            self.t.set_prompt_runs(r, self.full_runs[r].data(), <int64_t>self.full_runs[r].size())
            if self.next_turn[r] < 0:
                vector[TokRun]().swap(self.full_runs[r])
        else:
            self.t.set_prompt_runs(r, self.runs.data() + self.run_off[r], self.run_off[r + 1] - self.run_off[r])
        if self.routed:
            w = self.router.route(r, at)
        else:
            # round robin over workers, and over each worker's ranks in turn
            w = self.rr_next % self.n_workers
            self.rr_next += 1
            w = w * self.dp + self.next_rank[w] % self.dp
            self.next_rank[w // self.dp] += 1
        self.t.worker[r] = <int32_t>w
        self.arrived += 1
        self.arrival_seq.push_back(r)
        self.stalled[w // self.dp] = 0
        (<Rank>self.ranks[w]).add_request(r)

    cdef void _on_terminal(self, rid_t r, double at) noexcept nogil:
        cdef rid_t nt = self.next_turn[r]
        cdef TokRun g
        cdef double x
        if self.routed:
            self.router.on_terminal(r)
        self.terminal += 1
        self.t.release_content(r)
        if self.t.status[r] == ST_COMPLETED:
            for x in self.t.itl_buf[r]:
                welford_add(&self.itl, x)
                ddsketch_add(&self.itl_sk, x)
                if x > 0.0:
                    welford_add(&self.tput, 1000.0 / x)
                    ddsketch_add(&self.tput_sk, 1000.0 / x)
        vector[double]().swap(self.t.itl_buf[r])
        if nt >= 0:
            if self.delta:
                # next prompt = this prompt + this turn's output + the next row's delta
                self.full_runs[nt].swap(self.full_runs[r])
                if self.t.out_tokens[r] > 0:
                    g.kind = RUN_GEN
                    g.v = <uint64_t>r
                    g.start = 0
                    g.n = self.t.out_tokens[r]
                    self.full_runs[nt].push_back(g)
            self.dyn.push(Arrival(-(at + self.delay[nt]), -<int64_t>nt))
        elif self.concurrency > 0 and self.session_ptr < <int64_t>self.session_heads.size():
            self.dyn.push(Arrival(-at, -<int64_t>self.session_heads[self.session_ptr]))
            self.session_ptr += 1

    cdef inline double _next_arrival(self) noexcept nogil:
        cdef double ta = INFINITY
        if self.static_ptr < <int64_t>self.static_rid.size():
            ta = self.static_time[self.static_ptr]
        if not self.dyn.empty() and -self.dyn.top().first < ta:
            ta = -self.dyn.top().first
        return ta

    cdef inline rid_t _pop_arrival(self, double now) noexcept nogil:
        """Pop the earliest arrival at or before ``now`` (ties: lowest rid); -1 if none."""
        cdef rid_t rs = -1, rd = -1
        cdef double ts = INFINITY, td = INFINITY
        if self.static_ptr < <int64_t>self.static_rid.size():
            ts = self.static_time[self.static_ptr]
            rs = self.static_rid[self.static_ptr]
        if not self.dyn.empty():
            td = -self.dyn.top().first
            rd = <rid_t>(-self.dyn.top().second)
        if ts <= now and (ts < td or (ts == td and rs < rd)):
            self.static_ptr += 1
            return rs
        if td <= now:
            self.dyn.pop()
            return rd
        return -1

    # -- the loop -----------------------------------------------------------------
    cdef bint _advance(self, int64_t max_passes) noexcept nogil:
        cdef double tn, now, at, x
        cdef int64_t w, budget = max_passes
        cdef rid_t r
        cdef int64_t j
        while budget > 0:
            tn = self._next_arrival()
            for w in range(self.n_workers):
                if self.busy[w] and self.busy_until[w] < tn:
                    tn = self.busy_until[w]
            if tn == INFINITY or tn > self.max_sim:
                if tn == INFINITY and self.arrived > self.terminal:
                    # nothing left to happen, yet requests are stuck: the run cannot finish
                    # (vLLM-style ranks: the reference reports every request still in flight)
                    self.stalled_inflight = self.arrived - self.terminal
                return True
            now = tn
            self.now = now
            # 1. pass completions (worker order)
            for w in range(self.n_workers):
                if self.busy[w] and self.busy_until[w] == now:
                    self.busy[w] = 0
                    self._complete_worker_pass(w, now)
            # 2. admissions
            while True:
                r = self._pop_arrival(now)
                if r < 0:
                    break
                # a session's later turn arrives at its scheduled time, not `now`
                self._arrive(r, now)
            # 3. idle workers with work start a pass; a pass that takes no time completes at
            #    once and the worker goes on, before anything it released can arrive
            for w in range(self.n_workers):
                while not self.busy[w] and not self.stalled[w] and self._has_work(w):
                    x = self._start_pass(w, now)
                    self.passes += 1
                    budget -= 1
                    if x != now:
                        self.busy[w] = 1
                        self.busy_until[w] = x
                        break
                    if not self._effect:
                        if (<Rank>self.ranks[w * self.dp]).stall_is_fatal:
                            self.stalled_inflight = 0
                            for j in range(w * self.dp, (w + 1) * self.dp):
                                self.stalled_inflight += <int64_t>((<Rank>self.ranks[j]).waiting.size()
                                                                   + (<Rank>self.ranks[j]).running.size())
                            return True
                        self.stalled[w] = 1
                        break
                    self._complete_worker_pass(w, now)
        return False

    cdef bint _has_work(self, int64_t w) noexcept nogil:
        cdef int64_t k
        for k in range(w * self.dp, (w + 1) * self.dp):
            if (<Rank>self.ranks[k]).has_work():
                return True
        return False

    cdef double _start_pass(self, int64_t w, double now) noexcept nogil:
        """Every rank of worker ``w`` with work runs one pass at ``now``; the worker's pass ends
        with its slowest rank and every rank's output is stamped with that end."""
        cdef int64_t k
        cdef double end = now
        cdef bint throttle = self.dp > 1 and self.interval > 1 and self.wave[w] % self.interval != 0
        self._effect = False
        for k in range(w * self.dp, (w + 1) * self.dp):
            if not (<Rank>self.ranks[k]).has_work():
                self.stepped[k] = 0
                continue
            self.stepped[k] = 1
            (<Rank>self.ranks[k]).throttle = throttle
            (<Rank>self.ranks[k]).step(now)
            if (<Rank>self.ranks[k]).out.end > end:
                end = (<Rank>self.ranks[k]).out.end
            if (<Rank>self.ranks[k]).out.effect:
                self._effect = True
        self.wave[w] += 1
        if self.dp > 1:
            for k in range(w * self.dp, (w + 1) * self.dp):
                if self.stepped[k] and (<Rank>self.ranks[k]).out.end != end:
                    (<Rank>self.ranks[k]).restamp(end)
        return end

    cdef void _complete_worker_pass(self, int64_t w, double now) noexcept nogil:
        cdef int64_t k
        for k in range(w * self.dp, (w + 1) * self.dp):
            if self.stepped[k]:
                self.stepped[k] = 0
                self._complete_pass(k, now)
        if not self._has_work(w):
            self.wave[w] = 0            # the worker drained: a new wave of passes begins

    cdef void _complete_pass(self, int64_t w, double now) noexcept nogil:
        cdef rid_t r
        cdef vector[KvEvent]* evs = (<Rank>self.ranks[w]).kv_events()
        if self.routed:
            # the pass's KV events and first tokens become visible at its end
            self.router.on_events(<int32_t>w, evs, now)
            for r in (<Rank>self.ranks[w]).out_emitted:
                self.router.on_token(r)
        elif evs != NULL:
            evs.clear()
        self.committed_prefill += (<Rank>self.ranks[w]).out.committed_prefill
        for r in (<Rank>self.ranks[w]).out_completed:
            self._on_terminal(r, now)
        for r in (<Rank>self.ranks[w]).out_rejected:
            self._on_terminal(r, now)

    def advance(self, int64_t max_passes=1 << 62):
        """Run up to ``max_passes`` passes; returns True when the replay is finished."""
        cdef bint fin
        with nogil:
            fin = self._advance(max_passes)
        if fin:
            self.done = True
            if self.stalled_inflight > 0:
                raise ReplayInvariantError(
                    "replay invariant violated: offline replay detected an effect-free "
                    f"zero-duration pass with {self.stalled_inflight} in-flight requests remaining")
        return fin

    def arrival_order(self):
        return np.array(self.arrival_seq, dtype=np.int64)

    @property
    def now_ms(self):
        return self.now

    def itl_summary(self):
        return _sketch_summary(&self.itl, &self.itl_sk)

    def throughput_summary(self):
        return _sketch_summary(&self.tput, &self.tput_sk)


cdef dict _sketch_summary(Welford* wf, DDSketch* sk):
    return {
        "count": wf.n,
        "mean": welford_mean(wf), "min": welford_min(wf), "max": welford_max(wf),
        "std": welford_std(wf),
        "median": ddsketch_percentile(sk, 50.0), "p75": ddsketch_percentile(sk, 75.0),
        "p90": ddsketch_percentile(sk, 90.0), "p95": ddsketch_percentile(sk, 95.0),
        "p99": ddsketch_percentile(sk, 99.0),
    }
