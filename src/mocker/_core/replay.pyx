# cython: language_level=3
"""Virtual-clock replay event loop (docs/core-sim.md §6.1–docs/core-sim.md §6.4).

The whole loop runs in C without the GIL.  Python hands over the workload as numpy
columns once, then calls ``advance`` (a bounded slice of simulated passes, so the
caller can draw progress) until it reports completion, then reads the per-request
columns and the streaming accumulators back once.
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport INFINITY, isnan
from libc.stdint cimport int8_t, int32_t, int64_t, uint64_t
from libcpp.vector cimport vector
from libcpp.deque cimport deque
from libcpp.pair cimport pair
from mocker._core._types cimport rid_t, KvEvent, ceil_div, pqueue
from mocker._core.table cimport (ReqTable, TokRun, RUN_GEN, ST_COMPLETED, ST_RUNNING, ST_WAITING, ST_FAILED,
                                 ST_REJECTED, ST_UNFINISHED, ST_CANCELLED)
from mocker._core.rank cimport Rank, step_group
from mocker._core.router cimport KvRouter
from mocker._core.stats cimport (Welford, welford_init, welford_add, welford_mean, welford_std,
                                 welford_min, welford_max, DDSketch, ddsketch_init, ddsketch_free,
                                 ddsketch_add, ddsketch_percentile)

cnp.import_array()

ctypedef pair[double, int64_t] Arrival      # (-time, -rid): max-heap pops the earliest, then lowest rid

# a worker whose effect-free zero-duration passes keep moving state (SGLang: the admission
# ratio decays) reruns them at the same instant; this many in a row abort the run (reference)
cdef int64_t MAX_SAME_INSTANT_RETRIES = 1024


class ReplayInvariantError(RuntimeError):
    """The simulation can make no progress (reference wording kept)."""


# transfer heap keys at or above this are timed SGLang transfers (key - XFER_TIMED: the
# destination's reservation order); below it, the handoff order (xfer_rid)
cdef int64_t XFER_TIMED = 1099511627776


cdef class ReplayCore:
    cdef ReqTable t
    cdef list _ranks                     # keeps the rank objects alive
    cdef vector[void*] ranks             # borrowed Rank pointers (nogil access)
    cdef int64_t n_workers               # logical workers (groups of dp ranks sharing a pass clock)
    cdef int64_t n_ranks                 # scheduler ranks, worker by worker
    cdef int64_t dp                      # ranks per worker (aggregated; the first pool when disaggregated)
    cdef vector[int64_t] g_first         # per worker: its first rank
    cdef vector[int64_t] g_n             # per worker: its ranks
    cdef vector[int64_t] group_of        # per rank: its worker
    # disaggregated prefill -> decode (docs/core-sim.md §6.6): prefill ranks first, then decode ranks
    cdef bint disagg
    cdef int64_t n_prefill_ranks
    cdef int64_t n_prefill_workers
    cdef KvRouter drouter                # decode router (None: round robin)
    cdef int64_t drr_next
    cdef vector[deque[rid_t]] pend_reserve     # per decode rank: destinations waiting for room (FIFO)
    cdef vector[vector[rid_t]] pend_activate   # per decode rank: transfers done while it was busy
    cdef vector[vector[rid_t]] pend_release    # per prefill rank: sources to free at its pass end
    cdef pqueue[Arrival] transfers             # (-done time, -start order)
    cdef vector[rid_t] xfer_rid                # start order -> request
    cdef double xfer_bytes                     # prefill engine: kv_transfer_bytes_per_token (0: none)
    cdef double xfer_bw                        # prefill engine: kv_transfer_bandwidth GB/s (0: none)
    cdef bint xfer_missing                     # destination_missing timing mode
    cdef bint dest_first                       # SGLang order: the destination is reserved at arrival,
                                               # then the prefill runs (vLLM/TRT-LLM: source first)
    cdef vector[int64_t] dest_missing          # dest_first, per request: blocks missing at the destination
    cdef vector[int64_t] res_seq               # dest_first, per request: order of its reservation
    cdef vector[rid_t] rid_by_res              # dest_first: reservation order -> request
    cdef vector[int64_t] g_interval      # per worker: prefill_schedule_interval of its engine
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
    cdef pqueue[Arrival] dyn
    cdef bint succ_late                  # disaggregated: successors due now go to `late`
    cdef vector[Arrival] late            # successors of requests that ended in a zero-duration pass
                                         # the batch started: held back from the next batch
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
    cdef public bint retry_livelock        # ... a worker's same-instant reruns hit the limit
    cdef bint failed                       # an exception (MemoryError) left the state half-updated
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
                 int64_t dp_size=1, int64_t prefill_schedule_interval=1, dict disagg=None):
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
        cdef int64_t j
        # the workload columns are read without bounds checks below
        if run_off.shape[0] != n + 1:
            raise ValueError(f"run_off has {run_off.shape[0]} entries for {n} requests (needs {n + 1})")
        for col, name in ((next_turn, "next_turn"), (delay, "delay_ms"), (req_out, "output_length")):
            if col.shape[0] != n:
                raise ValueError(f"{name} has {col.shape[0]} entries for {n} requests")
        if run_off[n] < 0 or min(run_kind.shape[0], run_v.shape[0], run_start.shape[0], run_n.shape[0]) < run_off[n]:
            raise ValueError(f"the run columns hold fewer than run_off[-1] = {run_off[n]} runs")
        if heads.shape[0] != head_time.shape[0]:
            raise ValueError("session_heads and head_arrival_ms differ in length")
        self.t = table
        self._ranks = ranks
        for rk in ranks:
            self.ranks.push_back(<void*>rk)
        self.n_ranks = len(ranks)
        self.dp = dp_size
        if disagg is None:
            if dp_size < 1 or self.n_ranks % dp_size != 0:
                raise ValueError("the ranks must form whole workers of dp_size ranks")
            for i in range(self.n_ranks // dp_size):
                self.g_first.push_back(i * dp_size)
                self.g_n.push_back(dp_size)
                self.g_interval.push_back(max(prefill_schedule_interval, 1))
        else:
            # {"prefill_workers", "prefill_dp", "decode_workers", "decode_dp", "decode_router",
            #  "bytes_per_token", "bandwidth_gbps", "destination_missing"}
            self.disagg = True
            self.n_prefill_workers = disagg["prefill_workers"]
            self.n_prefill_ranks = disagg["prefill_workers"] * disagg["prefill_dp"]
            if self.n_prefill_ranks + disagg["decode_workers"] * disagg["decode_dp"] != self.n_ranks:
                raise ValueError("rank count does not match the prefill and decode pools")
            for i in range(disagg["prefill_workers"]):
                self.g_first.push_back(i * disagg["prefill_dp"])
                self.g_n.push_back(disagg["prefill_dp"])
                self.g_interval.push_back(max(prefill_schedule_interval, 1))
            for i in range(disagg["decode_workers"]):
                self.g_first.push_back(self.n_prefill_ranks + i * disagg["decode_dp"])
                self.g_n.push_back(disagg["decode_dp"])
                self.g_interval.push_back(max(disagg["decode_interval"], 1))
            self.drouter = disagg["decode_router"]
            self.xfer_bytes = disagg["bytes_per_token"] or 0.0
            self.xfer_bw = disagg["bandwidth_gbps"] or 0.0
            self.xfer_missing = disagg["destination_missing"]
            self.dest_first = disagg.get("destination_first", False)
            if self.dest_first:
                self.dest_missing.resize(n, 0)
                self.res_seq.resize(n, 0)
            self.pend_reserve.resize(self.n_ranks)
            self.pend_activate.resize(self.n_ranks)
            self.pend_release.resize(self.n_ranks)
        self.n_workers = <int64_t>self.g_first.size()
        self.group_of.resize(self.n_ranks, 0)
        for i in range(self.n_workers):
            for j in range(self.g_first[i], self.g_first[i] + self.g_n[i]):
                self.group_of[j] = i
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
    cdef int _arrive(self, rid_t r, double at) except -1 nogil:
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
        if self.dest_first:
            self.arrived += 1
            self.arrival_seq.push_back(r)
            self._route_destination(r, at)
            return 0
        if self.disagg:
            self._submit_prefill(r, at)
            self.arrived += 1
            self.arrival_seq.push_back(r)
            return 0
        if self.routed:
            w = self.router.route(r, at)
            self.t.worker[r] = <int32_t>w
        else:
            # round robin over workers, and over each worker's ranks in turn
            w = self.rr_next % self.n_workers
            self.rr_next += 1
            w = self.g_first[w] + self.next_rank[w] % self.g_n[w]
            self.next_rank[self.group_of[w]] += 1
            self.t.worker[r] = <int32_t>w
        self.arrived += 1
        self.arrival_seq.push_back(r)
        self.stalled[self.group_of[w]] = 0
        (<Rank>self.ranks[w]).add_request(r)
        return 0

    cdef int _submit_prefill(self, rid_t r, double now) except -1 nogil:
        """Route ``r`` to a prefill rank and queue it there (it runs the prompt with one hidden
        output token)."""
        cdef int64_t w
        if self.routed:
            w = self.router.route(r, now)
        else:
            w = self.rr_next % self.n_prefill_ranks        # round robin over all prefill ranks
            self.rr_next += 1
        self.t.prefill_worker[r] = <int32_t>w
        self.t.max_out[r] = 1
        self.stalled[self.group_of[w]] = 0
        (<Rank>self.ranks[w]).add_request(r)
        return 0

    cdef int _on_terminal(self, rid_t r, double at) except -1 nogil:
        cdef rid_t nt = self.next_turn[r]
        cdef TokRun g
        cdef double x
        self.terminal += 1
        if not (self.disagg and self.t.status[r] != ST_FAILED and not isnan(self.t.source_held[r])
                and isnan(self.t.source_released[r])):
            self.t.release_content(r)
        # (else the prefill worker still holds the prompt's source pages: their hashes are
        # needed when they enter its prefix cache at the release, see _release)
        if self.t.status[r] == ST_COMPLETED:
            for x in self.t.itl_buf[r]:
                welford_add(&self.itl, x)
                ddsketch_add(&self.itl_sk, x)
                if x > 0.0:
                    welford_add(&self.tput, 1000.0 / x)
                    ddsketch_add(&self.tput_sk, 1000.0 / x)
        vector[double]().swap(self.t.itl_buf[r])
        if nt >= 0 and self.disagg and self.t.status[r] == ST_FAILED:
            nt = -1                 # a failed handoff ends its session (no later turns; a prefill
                                    # rejection does not)
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
            self._push_successor(at + self.delay[nt], nt, at)
        elif self.concurrency > 0 and self.session_ptr < <int64_t>self.session_heads.size():
            self._push_successor(at, self.session_heads[self.session_ptr], at)
            self.session_ptr += 1
        return 0

    cdef inline int _push_successor(self, double t, rid_t r, double now) except -1 nogil:
        if self.succ_late and t == now:
            self.late.push_back(Arrival(-t, -<int64_t>r))
        else:
            self.dyn.push(Arrival(-t, -<int64_t>r))
        return 0

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
    cdef int _advance(self, int64_t max_passes) except -1 nogil:
        """1 when the replay is finished, else 0 (the pass budget ran out)."""
        cdef double tn, now, at, x
        cdef int64_t w, budget = max_passes
        cdef rid_t r
        cdef int64_t j
        cdef vector[rid_t] batch
        while budget > 0:
            tn = self._next_arrival()
            if self.late.size() > 0:
                tn = self.now                   # held-back successors arrive at this instant
            if not self.transfers.empty() and -self.transfers.top().first < tn:
                tn = -self.transfers.top().first
            for w in range(self.n_workers):
                if self.busy[w] and self.busy_until[w] < tn:
                    tn = self.busy_until[w]
            if tn == INFINITY or tn > self.max_sim:
                if tn == INFINITY and self.arrived > self.terminal:
                    # nothing left to happen, yet requests are stuck: the run cannot finish
                    # (vLLM-style ranks: the reference reports every request still in flight)
                    self.stalled_inflight = self.arrived - self.terminal
                return 1
            now = tn
            self.now = now
            # 1. pass completions
            self._complete_passes_ending(now)
            # 1b. KV transfers that finish now: activate the destination (at the decode
            #     worker's pass end if it is busy), then release the source
            while not self.transfers.empty() and -self.transfers.top().first <= now:
                if -self.transfers.top().second >= XFER_TIMED:
                    r = self.rid_by_res[-self.transfers.top().second - XFER_TIMED]
                else:
                    r = self.xfer_rid[-self.transfers.top().second]
                self.transfers.pop()
                j = self.n_prefill_ranks + self.t.worker[r]
                if self.busy[self.group_of[j]]:
                    self.pend_activate[j].push_back(r)
                else:
                    self._activate(r, j, now)
            # 2. admissions (disaggregated: a worker with work restarts before the instant's
            #    arrivals are routed; they join its next pass)
            if self.disagg:
                # the instant's arrivals are taken as a batch: a session whose turn ends at this
                # instant in a zero-duration pass of this restart (a no-output request activated
                # on an idle decode worker) or fails at arrival (SGLang) starts its successor
                # now, but that one is routed only after the workers have started (it joins
                # their next pass)
                batch.clear()
                while True:
                    r = self._pop_arrival(now)
                    if r < 0:
                        break
                    batch.push_back(r)
                # successors of requests that ended in a zero-duration pass the previous batch
                # started (rejected, or a failed handoff) are released only after this batch,
                # with those of what ends in this restart (fuzz 2126/244, 2130/276)
                for j in range(<int64_t>self.late.size()):
                    self.dyn.push(self.late[j])
                self.late.clear()
            if self.disagg and self._start_workers(now, &budget):
                return 1
            if self.disagg:
                for r in batch:
                    self._arrive(r, now)
            else:
                while True:
                    r = self._pop_arrival(now)
                    if r < 0:
                        break
                    # a session's later turn arrives at its scheduled time, not `now`
                    self._arrive(r, now)
            # 3. idle workers with work start a pass; a pass that takes no time completes at
            #    once and the worker goes on, before anything it released can arrive
            self.succ_late = self.disagg
            if self._start_workers(now, &budget):
                return 1
            self.succ_late = False
        return 0

    cdef int _start_workers(self, double now, int64_t* budget) except -1 nogil:
        """Every idle worker with work starts a pass at ``now`` (zero-duration passes complete
        inline and the worker goes on); 1 if the run must stop (a fatal stall).

        Disaggregated: the workers start in rounds.  A zero-duration pass that did something
        completes only once every worker has started this round (decode pool first, as at a
        pass end), so its handoffs meet a decode worker that is already mid-pass; then the
        next round starts whoever is idle with work."""
        cdef int64_t w, j, retries
        cdef double x
        cdef bint zero_done, retry
        while True:
            zero_done = False
            for w in range(self.n_workers):
                retries = 0
                while not self.busy[w] and not self.stalled[w] and self._has_work(w):
                    self._start_pass(w, now, &x)
                    self.passes += 1
                    budget[0] -= 1
                    if x != now:
                        self.busy[w] = 1
                        self.busy_until[w] = x
                        break
                    if not self._effect:
                        retry = False
                        for j in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
                            retry = retry or (self.stepped[j] and (<Rank>self.ranks[j]).out.retry)
                        if self.disagg and w >= self.n_prefill_workers and self._retry_gated(w, now):
                            # a decode pass that did nothing because a destination waits for room
                            # (a preempted/retracted request is held back) still lets the rank
                            # take one waiting destination; once none waits, the held-back
                            # readmission runs at this instant (SGLang and vLLM/TRT-LLM alike)
                            retries = 0
                            continue
                        if (<Rank>self.ranks[self.g_first[w]]).stall_is_fatal:
                            self.stalled_inflight = 0
                            for j in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
                                self.stalled_inflight += <int64_t>((<Rank>self.ranks[j]).waiting.size()
                                                                   + (<Rank>self.ranks[j]).running.size())
                            return 1
                        if retry:
                            # the pass moved the SGLang admission ratio: it runs again at once,
                            # up to MAX_SAME_INSTANT_RETRIES in a row, then the reference gives
                            # up (a ratio that needs 1024 decay steps to settle, e.g. 1.0 after a
                            # retraction with conservativeness < 0.889; fuzz 2305/121)
                            retries += 1
                            if retries >= MAX_SAME_INSTANT_RETRIES:
                                self.stalled_inflight = self._worker_inflight(w)
                                self.retry_livelock = True
                                return 1
                            continue
                        self.stalled[w] = 1
                        break
                    if self.disagg:
                        self.busy[w] = 1        # ends at `now`, after this round (below)
                        self.busy_until[w] = now
                        zero_done = True
                        break
                    self._complete_worker_pass(w, now)
            if not zero_done:
                return 0
            self._complete_passes_ending(now)

    cdef int _complete_passes_ending(self, double now) except -1 nogil:
        """Complete every busy worker's pass that ends at ``now``, in worker order;
        disaggregated, the decode pool's first, so a prefill that ends at a decode pass end
        hands off to an idle decode worker."""
        cdef int64_t w
        if self.disagg:
            for w in range(self.n_prefill_workers, self.n_workers):
                if self.busy[w] and self.busy_until[w] == now:
                    self.busy[w] = 0
                    self._complete_worker_pass(w, now)
        for w in range(self.n_workers):
            if self.busy[w] and self.busy_until[w] == now:
                self.busy[w] = 0
                self._complete_worker_pass(w, now)
        return 0

    cdef int64_t _worker_inflight(self, int64_t w) noexcept nogil:
        """Requests worker ``w`` still owns (the reference's count in its livelock error): a
        decode worker, every request routed to it and not terminal (from its arrival, SGLang);
        a prefill worker, every request queued on it whose source is not released."""
        cdef int64_t n = 0, lo = self.g_first[w], hi = self.g_first[w] + self.g_n[w], k
        cdef rid_t r
        cdef int8_t st
        for r in range(self.t.n):
            st = self.t.status[r]
            if (isnan(self.t.arrival[r]) or st == ST_REJECTED or st == ST_FAILED
                    or st == ST_CANCELLED or st == ST_UNFINISHED):
                continue
            if self.disagg and w < self.n_prefill_workers:
                k = self.t.prefill_worker[r]
                if lo <= k < hi and isnan(self.t.source_released[r]):
                    n += 1
            elif st != ST_COMPLETED or (self.disagg and isnan(self.t.dest_activated[r])):
                # (a prefill that ends later in a pass already started shows as completed)
                k = self.t.worker[r] + (self.n_prefill_ranks if self.disagg else 0)
                if lo <= k < hi:
                    n += 1
        return n

    cdef int _retry_gated(self, int64_t w, double now) except -1 nogil:
        """Decode worker ``w`` ran an effect-free pass: one reservation attempt per rank with a
        destination waiting; 1 if one was reserved, else 0."""
        cdef int64_t k
        cdef size_t n
        cdef bint took = False
        for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
            self.stepped[k] = 0
            n = self.pend_reserve[k].size()
            if n > 0:
                self._try_reserve(k, now, 1)
                if self.pend_reserve[k].size() < n:
                    took = True
        return 1 if took else 0

    cdef bint _has_work(self, int64_t w) noexcept nogil:
        cdef int64_t k
        for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
            if (<Rank>self.ranks[k]).has_work():
                return True
        return False

    cdef int _start_pass(self, int64_t w, double now, double* end) except -1 nogil:
        """Every rank of worker ``w`` with work runs one pass at ``now``; the worker's pass ends
        (``end``) with its slowest rank and every rank's output is stamped with that end."""
        cdef int64_t k
        cdef bint throttle = (self.g_n[w] > 1 and self.g_interval[w] > 1
                              and self.wave[w] % self.g_interval[w] != 0)
        if self.disagg:
            self.t.pool = 1 if w < self.n_prefill_workers else 2     # admissions are booked per pool
            if w >= self.n_prefill_workers:
                for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
                    (<Rank>self.ranks[k]).pending_dest = self.pend_reserve[k].size() > 0
        step_group(self.ranks.data() + self.g_first[w], self.g_n[w], now, throttle,
                   self.stepped.data() + self.g_first[w], &self._effect, end)
        self.wave[w] += 1
        return 0

    cdef int _complete_worker_pass(self, int64_t w, double now) except -1 nogil:
        cdef int64_t k, n
        cdef rid_t r
        if self.disagg and not self.dest_first and w < self.n_prefill_workers:
            # vLLM/TRT-LLM: sources whose release waited for this pass end are released before
            # the pass's own handoffs (a failed handoff frees its blocks after them: LRU order)
            for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
                for r in self.pend_release[k]:
                    self._release(r, k, now)
                self.pend_release[k].clear()
        for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
            if self.stepped[k]:
                self._complete_pass(k, now)
        if not self._has_work(w):
            self.wave[w] = 0            # the worker drained: a new wave of passes begins
        if self.disagg:
            # handoff steps that waited for this worker's pass end
            for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
                if w < self.n_prefill_workers:
                    for r in self.pend_release[k]:
                        self._release(r, k, now)
                    self.pend_release[k].clear()
                else:
                    # the pass end, and each activation applied there, lets the decode rank
                    # take one waiting destination (a completion adds no attempt of its own)
                    # the pass end's attempt comes first, then each activation applied there
                    # gives its own (an activation's blocks are not resident yet for the pass
                    # end's attempt; SGLang: an activation that frees duplicate pages lets the
                    # head in)
                    self._try_reserve(k, now, 1)
                    for r in self.pend_activate[k]:
                        (<Rank>self.ranks[k]).activate_destination(r)
                        self._activated(r, k, now)
                        self._try_reserve(k, now, 1)
                    self.pend_activate[k].clear()

        for k in range(self.g_first[w], self.g_first[w] + self.g_n[w]):
            self.stepped[k] = 0
        return 0

    # -- disaggregated handoff -------------------------------------------------------------
    cdef int _source_held(self, rid_t r, double now) except -1 nogil:
        """``r``'s prefill ended: its KV is held; pick a decode rank and reserve room there
        (destination first: the room is reserved already, the transfer starts)."""
        cdef int64_t d
        cdef int64_t dbs = (<Rank>self.ranks[self.n_prefill_ranks]).bs
        self.t.source_held[r] = now
        self.t.forget_tokens(r)             # the prefill pool's token is not visible
        if self.dest_first:
            self.t.status[r] = ST_RUNNING
            self._start_transfer(r, now, self.dest_missing[r] * dbs)
            return 0
        if (self.t.prompt_len[r] + dbs - 1) // dbs > (<Rank>self.ranks[self.n_prefill_ranks]).num_blocks:
            # no decode worker could ever hold the prompt: the handoff fails once the decode
            # router has picked a worker (it takes a round-robin turn and stays in the routing
            # history; `worker` keeps it, the record shows no decode worker)
            if self.drouter is not None:
                d = self.drouter.route(r, now)
                self.drouter.on_terminal(r)
            else:
                d = self.drr_next % (self.n_ranks - self.n_prefill_ranks)
                self.drr_next += 1
            self.t.worker[r] = <int32_t>d
            self.t.status[r] = ST_FAILED
            self.t.terminal_time[r] = now
            (<Rank>self.ranks[self.t.prefill_worker[r]]).release_source(r)
            if self.routed:
                self.router.on_terminal(r)
            self._on_terminal(r, now)
            return 0
        self.t.status[r] = ST_RUNNING
        self._route_destination(r, now)
        return 0

    cdef int _route_destination(self, rid_t r, double now) except -1 nogil:
        """Pick ``r``'s decode rank and queue its reservation there."""
        cdef int64_t d
        if self.drouter is not None:
            d = self.drouter.route(r, now)
        else:
            d = self.drr_next % (self.n_ranks - self.n_prefill_ranks)
            self.drr_next += 1
        self.t.worker[r] = <int32_t>d
        d += self.n_prefill_ranks
        if self.dest_first and (ceil_div(self.t.prompt_len[r], (<Rank>self.ranks[d]).bs)
                                > (<Rank>self.ranks[d]).num_blocks
                                or (<Rank>self.ranks[d]).max_model_len > 0
                                and self.t.prompt_len[r] >= (<Rank>self.ranks[d]).max_model_len):
            # no decode worker could ever hold the prompt (or take it under max_model_len): the
            # handoff fails before any prefill
            self.t.status[r] = ST_FAILED
            self.t.terminal_time[r] = now
            self.t.worker[r] = -1
            if self.drouter is not None:
                self.drouter.on_terminal(r)
            self._on_terminal(r, now)
            return 0
        self.pend_reserve[d].push_back(r)
        # a waiting destination changes what the decode rank admits (only transferred requests
        # while one waits): a stalled decode worker tries again
        self.stalled[self.group_of[d]] = 0
        if not self.busy[self.group_of[d]]:
            self._try_reserve(d, now, 1)      # an idle decode worker takes it at once
        return 0

    cdef int _start_transfer(self, rid_t r, double now, int64_t missing_tokens) except -1 nogil:
        cdef double tokens, delay = 0.0
        if self.xfer_bytes > 0.0 and self.xfer_bw > 0.0:
            tokens = <double>(missing_tokens if self.xfer_missing else self.t.prompt_len[r])
            delay = (tokens * self.xfer_bytes) / (self.xfer_bw * 1e9) * 1000.0
        if self.dest_first and delay > 0.0:
            # SGLang: timed transfers that finish at the same instant complete in the order their
            # destinations were reserved (after untimed handoffs, which keep the handoff order)
            self.transfers.push(Arrival(-(now + delay), -(XFER_TIMED + self.res_seq[r])))
            return 0
        # transfers that finish at the same instant complete in the order they started
        self.transfers.push(Arrival(-(now + delay), -<int64_t>self.xfer_rid.size()))
        self.xfer_rid.push_back(r)
        return 0

    cdef int _try_reserve(self, int64_t k, double now, int64_t attempts) except -1 nogil:
        """Reserve up to ``attempts`` destinations waiting on decode rank ``k``, in order (the
        head of the line waits for room)."""
        cdef rid_t r
        cdef int64_t missing = 0
        while self.pend_reserve[k].size() > 0 and attempts > 0:
            attempts -= 1
            r = self.pend_reserve[k].front()
            # the head is retried only once capacity changed (a completion or preemption) since
            # its last attempt
            if (<Rank>self.ranks[k]).att_gen[r] == (<Rank>self.ranks[k]).cap_gen:
                break
            (<Rank>self.ranks[k]).att_gen[r] = (<Rank>self.ranks[k]).cap_gen
            if (not self.dest_first and (<Rank>self.ranks[k]).max_num_seqs > 0
                    and <int64_t>(<Rank>self.ranks[k]).running.size() >= (<Rank>self.ranks[k]).max_num_seqs):
                break                       # no free sequence slot: the destination waits
            if not (<Rank>self.ranks[k]).reserve_destination(r, &missing):
                break                       # head of line waits for room
            self.pend_reserve[k].pop_front()
            self.t.dest_reserved[r] = now
            if self.dest_first:
                self.res_seq[r] = <int64_t>self.rid_by_res.size()
                self.rid_by_res.push_back(r)
                # SGLang: with room reserved on the decode rank the prefill is routed and runs;
                # the transfer starts when its source is held
                self.dest_missing[r] = missing
                self._submit_prefill(r, now)
            else:
                self._start_transfer(r, now, missing * (<Rank>self.ranks[k]).bs)
        return 0

    cdef int _activate(self, rid_t r, int64_t k, double now) except -1 nogil:
        """A transfer finished while decode rank ``k`` is idle."""
        (<Rank>self.ranks[k]).activate_destination(r)
        self._activated(r, k, now)
        self._try_reserve(k, now, 1)
        return 0

    cdef int _activated(self, rid_t r, int64_t k, double now) except -1 nogil:
        cdef int64_t p = self.t.prefill_worker[r]
        self.t.dest_activated[r] = now
        self.stalled[self.group_of[k]] = 0
        if self.busy[self.group_of[p]]:
            self.pend_release[p].push_back(r)
        else:
            self._release(r, p, now)
        return 0

    cdef int _release(self, rid_t r, int64_t p, double now) except -1 nogil:
        (<Rank>self.ranks[p]).release_source(r)
        self.t.source_released[r] = now
        if self.t.status[r] != ST_RUNNING and self.t.status[r] != ST_WAITING:
            self.t.release_content(r)       # it ended on the decode side before the release
        if self.dest_first and self.routed:
            # SGLang: the released prompt pages enter the prefill rank's prefix cache now
            self.router.on_events(<int32_t>p, (<Rank>self.ranks[p]).kv_events(), now)
        self.stalled[self.group_of[p]] = 0
        if self.routed:
            self.router.on_terminal(r)      # the prefill router's books: the handoff is complete
        return 0

    cdef int _complete_pass(self, int64_t w, double now) except -1 nogil:
        cdef rid_t r
        cdef vector[KvEvent]* evs = (<Rank>self.ranks[w]).kv_events()
        if self.routed and (not self.disagg or w < self.n_prefill_ranks):
            # the pass's KV events and first tokens become visible at its end
            self.router.on_events(<int32_t>w, evs, now)
            for r in (<Rank>self.ranks[w]).out_emitted:
                self.router.on_token(r)
        elif evs != NULL:
            evs.clear()
        self.committed_prefill += (<Rank>self.ranks[w]).out.committed_prefill
        if self.disagg and w < self.n_prefill_ranks:
            # hand off in the order the requests finish on the engine: those that will sample
            # nothing first
            for r in (<Rank>self.ranks[w]).out_completed:
                if self.t.req_out[r] == 0:
                    self._source_held(r, now)
            for r in (<Rank>self.ranks[w]).out_completed:
                if self.t.req_out[r] != 0:
                    self._source_held(r, now)
            for r in (<Rank>self.ranks[w]).out_rejected:
                if self.routed:
                    self.router.on_terminal(r)
                self._on_terminal(r, now)
            return 0
        for r in (<Rank>self.ranks[w]).out_completed:
            self._terminal_routed(r, now)
        for r in (<Rank>self.ranks[w]).out_rejected:
            self._terminal_routed(r, now)
        return 0

    cdef int _terminal_routed(self, rid_t r, double now) except -1 nogil:
        if self.disagg:
            if self.drouter is not None:
                self.drouter.on_terminal(r)
        elif self.routed:
            self.router.on_terminal(r)
        self._on_terminal(r, now)
        return 0

    def advance(self, int64_t max_passes=1 << 62):
        """Run up to ``max_passes`` passes; returns True when the replay is finished.

        A MemoryError raised inside leaves the state half-updated: later calls raise RuntimeError."""
        cdef bint fin
        if self.failed:
            raise RuntimeError("this replay failed earlier (MemoryError) and cannot continue")
        try:
            with nogil:
                fin = self._advance(max_passes)
        except BaseException:
            self.failed = True
            raise
        if fin:
            self.done = True
            if self.stalled_inflight > 0:
                # (disaggregated: e.g. a decode worker whose preempted head cannot fit beside the
                # transferred prompts queued behind it)
                raise ReplayInvariantError(
                    "replay invariant violated: offline "
                    + ("disagg replay encountered" if self.disagg and not self.retry_livelock
                       else "replay detected")
                    + f" an effect-free zero-duration pass with {self.stalled_inflight} in-flight "
                    "requests remaining")
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
