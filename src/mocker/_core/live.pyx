# cython: language_level=3
"""The compiled core as the live (wall-clock) engine drives it: one worker of ``dp_size``
ranks sharing a pass barrier, fed request by request instead of from a workload table.

The asyncio layer (``mocker.live.engine``) calls ``submit`` / ``cancel`` between passes, then
``step(now)`` once per pass and ``drain()`` once per pass boundary; each call crosses into
Python once and hands back numpy arrays.  The pass itself is the same code the replay loop
runs (``rank.step_group``), so a live run and an offline replay of the same arrivals produce
the same modeled times.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t, uint64_t
from libcpp.vector cimport vector
from mocker._core._types cimport rid_t, hash_t, KvEvent, INT32_MAX
from mocker._core.table cimport (ReqTable, TokRun, RUN_CONST, gen_token, ST_PENDING, ST_WAITING,
                                 ST_RUNNING, ST_COMPLETED, ST_REJECTED, ST_CANCELLED)
from mocker._core.rank cimport Rank, step_group
from mocker._core.vllm cimport VllmRank
from mocker._core.sglang cimport SglangRank

cnp.import_array()


cdef class LiveCore:
    cdef ReqTable t
    cdef list _ranks
    cdef vector[void*] ranks
    cdef int64_t dp
    cdef int64_t interval              # prefill_schedule_interval (attention-DP throttle)
    cdef int64_t wave                  # passes since the worker last drained
    cdef vector[int8_t] stepped
    cdef vector[rid_t] free_rids       # retired slots, reused by later requests
    cdef int64_t used                  # rows handed out so far
    cdef bint _effect
    cdef bint failed                   # a MemoryError left the state half-updated
    cdef public int64_t passes
    cdef public double last_start
    cdef public double last_end

    def __init__(self, ReqTable table, list ranks, int64_t prefill_schedule_interval=1):
        if not ranks:
            raise ValueError("a live worker needs at least one rank")
        self.t = table
        self._ranks = ranks
        for rk in ranks:
            self.ranks.push_back(<void*>rk)
        self.dp = len(ranks)
        self.interval = max(prefill_schedule_interval, 1)
        self.stepped.resize(self.dp, 0)
        self.used = table.n

    cdef int _usable(self) except -1:
        if self.failed:
            raise RuntimeError("this live core failed earlier (MemoryError) and cannot continue")
        return 0

    cdef int _row(self, int64_t r) except -1:
        """IndexError unless ``r`` is a row handed out by ``submit``."""
        if r < 0 or r >= self.used:
            raise IndexError(f"request row {r} out of range [0, {self.used})")
        return 0

    cdef int _rank(self, int64_t rank) except -1:
        if rank < 0 or rank >= self.dp:
            raise IndexError(f"rank {rank} out of range [0, {self.dp})")
        return 0

    # -- requests ------------------------------------------------------------------
    def submit(self, tokens, int64_t max_output_tokens, int64_t rank, double arrival_ms=0.0):
        """Queue a request on ``rank``; returns its row id (the scheduler id)."""
        if rank < 0 or rank >= self.dp:
            raise ValueError(f"dp_rank {rank} is out of bounds for dp_size {self.dp}")
        self._usable()
        cdef cnp.int64_t[::1] tok = np.ascontiguousarray(tokens, dtype=np.int64)
        cdef rid_t r
        cdef int64_t i, n = tok.shape[0], grow_to
        cdef vector[TokRun] runs
        cdef TokRun tr
        cdef Rank rk
        if self.free_rids.size() > 0:
            r = self.free_rids.back()
            self.free_rids.pop_back()
            self.t.reset(r)
        else:
            if self.used >= self.t.n:
                if self.used >= INT32_MAX:
                    raise ValueError(f"live request rows must stay below {INT32_MAX} (32-bit ids)")
                grow_to = min(max(64, 2 * self.t.n), <int64_t>INT32_MAX)
                try:
                    self.t.resize(grow_to)
                    for rk in self._ranks:
                        (<Rank>rk).grow(grow_to)
                except BaseException:
                    self.failed = True
                    raise
            r = <rid_t>self.used
            self.used += 1
        # run-length encode the prompt (the hashes depend on token values only)
        tr.kind = RUN_CONST
        tr.start = 0
        tr.n = 0
        for i in range(n):
            if tr.n > 0 and tr.v == <uint64_t>tok[i]:
                tr.n += 1
            else:
                if tr.n > 0:
                    runs.push_back(tr)
                tr.v = <uint64_t>tok[i]
                tr.n = 1
        if tr.n > 0:
            runs.push_back(tr)
        try:
            self.t.set_prompt_runs(r, runs.data(), <int64_t>runs.size())
        except BaseException:
            self.failed = True
            raise
        self.t.req_out[r] = max_output_tokens
        self.t.max_out[r] = max_output_tokens
        self.t.arrival[r] = arrival_ms
        self.t.worker[r] = <int32_t>rank
        rk = <Rank>self.ranks[rank]
        if isinstance(rk, SglangRank) and (self.t.prompt_len[r] + rk.bs - 1) // rk.bs > rk.num_blocks:
            # the prompt can never fit the page pool: the offline replay stops on this (as the
            # reference does); a live engine refuses the request instead
            self.t.status[r] = ST_REJECTED
            return r
        try:
            rk.add_request(r)
        except BaseException:
            self.failed = True
            raise
        return r

    def rejected(self, rid_t r):
        """True if ``r`` was refused at submission (it never entered a rank)."""
        self._row(r)
        return self.t.status[r] == ST_REJECTED

    def cancel(self, rid_t r):
        """Drop a queued or running request and free its KV; False if it is not in the core
        (already terminal).  Between passes only."""
        if r < 0 or r >= self.used or self.t.worker[r] < 0:
            return False
        if self.t.status[r] != ST_WAITING and self.t.status[r] != ST_RUNNING:
            return False
        self._usable()
        try:
            return bool((<Rank>self.ranks[self.t.worker[r]]).abort(r))
        except BaseException:
            self.failed = True
            raise

    def retire(self, rid_t r):
        """The live layer is done with row ``r`` (terminal and delivered): recycle it."""
        if r < 0 or r >= self.used:
            return
        if self.t.status[r] == ST_WAITING or self.t.status[r] == ST_RUNNING:
            raise RuntimeError(f"request row {r} retired while still scheduled")
        self.t.release_content(r)
        self.t.worker[r] = -1
        self.t.status[r] = ST_PENDING
        self.free_rids.push_back(r)

    def has_work(self):
        cdef int64_t k
        for k in range(self.dp):
            if (<Rank>self.ranks[k]).has_work():
                return True
        return False

    # -- passes --------------------------------------------------------------------
    def step(self, double now):
        """Run one pass of every rank with work at ``now``; returns the pass end (ms).
        ``effect`` tells afterwards whether the pass changed anything."""
        cdef bint throttle = self.dp > 1 and self.interval > 1 and self.wave % self.interval != 0
        cdef double end
        self._usable()
        try:
            with nogil:
                step_group(self.ranks.data(), self.dp, now, throttle, self.stepped.data(),
                           &self._effect, &end)
        except BaseException:
            self.failed = True
            raise
        self.wave += 1
        self.passes += 1
        self.last_start = now
        self.last_end = end
        return end

    @property
    def effect(self):
        return self._effect

    def drain(self):
        """Everything the last pass produced, once per boundary, as numpy arrays:
        ``(emitted, completed, rejected, adm_rid, adm_reused)``.  ``emitted`` lists the rows that
        emitted one token at the pass end (rank by rank); its token index is ``generated-1``."""
        cdef int64_t k, n_emit = 0, n_comp = 0, n_rej = 0, i
        cdef Rank rk
        for k in range(self.dp):
            if self.stepped[k]:
                rk = <Rank>self.ranks[k]
                n_emit += rk.out_emitted.size()
                n_comp += rk.out_completed.size()
                n_rej += rk.out_rejected.size()
        emitted = np.empty(n_emit, dtype=np.int32)
        completed = np.empty(n_comp, dtype=np.int32)
        rejected = np.empty(n_rej, dtype=np.int32)
        cdef cnp.int32_t[::1] e = emitted, c = completed, j = rejected
        cdef int64_t ie = 0, ic = 0, ij = 0
        cdef rid_t r
        for k in range(self.dp):
            if not self.stepped[k]:
                continue
            rk = <Rank>self.ranks[k]
            for r in rk.out_emitted:
                e[ie] = r
                ie += 1
            for r in rk.out_completed:
                c[ic] = r
                ic += 1
            for r in rk.out_rejected:
                j[ij] = r
                ij += 1
        adm_rid = np.array(self.t.adm_rid, dtype=np.int32)
        adm_reused = np.array(self.t.adm_reused, dtype=np.int64)
        self.t.adm_rid.clear()
        self.t.adm_at.clear()
        self.t.adm_reused.clear()
        self.t.adm_pool.clear()
        # the live layer keeps no per-request latency buffers
        for i in range(n_emit):
            self.t.itl_buf[e[i]].clear()
        return emitted, completed, rejected, adm_rid, adm_reused

    def kv_events(self, int64_t rank):
        """KV events rank ``rank`` recorded since the last call, in order, drained:
        ``(hash uint64, stored int8, row int32, block int32, parent uint64, has_parent int8)``.
        Stored events name the row and block that became cached and the hash of the block
        before it (the chain parent)."""
        self._rank(rank)
        cdef vector[KvEvent]* evs = (<Rank>self.ranks[rank]).kv_events()
        cdef int64_t n = 0 if evs == NULL else <int64_t>evs.size(), i
        h = np.empty(n, dtype=np.uint64)
        st = np.empty(n, dtype=np.int8)
        rr = np.empty(n, dtype=np.int32)
        kk = np.empty(n, dtype=np.int32)
        par = np.zeros(n, dtype=np.uint64)
        hp = np.zeros(n, dtype=np.int8)
        cdef cnp.uint64_t[::1] vh = h, vp = par
        cdef cnp.int8_t[::1] vs = st, vhp = hp
        cdef cnp.int32_t[::1] vr = rr, vk = kk
        cdef KvEvent ev
        for i in range(n):
            ev = evs[0][i]
            vh[i] = ev.h
            vs[i] = ev.stored
            vr[i] = ev.r
            vk[i] = ev.k
            if ev.stored and ev.r >= 0 and ev.k > 0 and ev.k - 1 < <int64_t>self.t.hashes[ev.r].size():
                vp[i] = self.t.hashes[ev.r][ev.k - 1]
                vhp[i] = 1
        if evs != NULL:
            evs.clear()
        return h, st, rr, kk, par, hp

    # -- per-request views ---------------------------------------------------------
    def generated(self, rid_t r):
        self._row(r)
        return self.t.generated[r]

    def max_output(self, rid_t r):
        self._row(r)
        return self.t.max_out[r]

    def reused_first(self, rid_t r):
        self._row(r)
        return self.t.reused_first[r]

    def status(self, rid_t r):
        self._row(r)
        return self.t.status[r]

    def prompt_len(self, rid_t r):
        self._row(r)
        return self.t.prompt_len[r]

    def generated_token_ids(self, rid_t r, int64_t g0, int64_t n):
        """32-bit ids standing for generated tokens ``g0..g0+n`` of row ``r`` (the core hashes
        its own tagged 64-bit ids; KV events carry these low bits)."""
        out = np.empty(n, dtype=np.int64)
        cdef cnp.int64_t[::1] o = out
        cdef int64_t i
        for i in range(n):
            o[i] = <int64_t>(gen_token(<uint64_t>r, g0 + i) & 0x7FFFFFFFULL)
        return out

    def cached_hashes(self, int64_t rank):
        """The set of block hashes rank ``rank`` holds in its prefix cache."""
        self._rank(rank)
        rk = self._ranks[rank]
        if isinstance(rk, VllmRank):
            return (<VllmRank>rk).pool.cached_hashes()
        return (<SglangRank>rk).cache.cached_hashes()

    # -- metrics -------------------------------------------------------------------
    def rank_metrics(self, int64_t rank):
        """``(active_blocks, total_blocks, running, waiting, preemptions_total)``."""
        self._rank(rank)
        cdef Rank rk = <Rank>self.ranks[rank]
        cdef int64_t active = 0
        if isinstance(rk, VllmRank):
            active = (<VllmRank>rk).pool.num_active()
        elif isinstance(rk, SglangRank):
            active = (rk.num_blocks - <int64_t>(<SglangRank>rk).cache.free_slots.size()
                      - (<SglangRank>rk).cache.evictable)
        return (active, rk.num_blocks, <int64_t>rk.running.size(), <int64_t>rk.waiting.size(),
                rk.preemptions_total)

    def pass_fpm(self, int64_t rank):
        """Forward-pass metrics of rank ``rank``'s last pass (docs/live.md §5.2), in the field
        order of ``ForwardPassSnapshot`` without the wall time: scheduled prefill (count, Σ new
        prompt tokens, variance of those, Σ tokens already in KV), decode (count, Σ context
        tokens, variance), then the queue left behind (prefill count, Σ tokens, variance;
        decode count, Σ, variance)."""
        self._rank(rank)
        cdef Rank rk = <Rank>self.ranks[rank]
        cdef int64_t pid = rk.pass_id
        cdef rid_t r
        cdef size_t i
        cdef double pn = 0, ps = 0, pss = 0, pkv = 0, dn = 0, ds = 0, dss = 0, x
        cdef double qn = 0, qs = 0, qss = 0
        if self.stepped[rank]:
            for i in range(rk.running.size() + rk.out_completed.size() + rk.waiting.size()):
                if i < rk.running.size():
                    r = rk.running[i]
                elif i < rk.running.size() + rk.out_completed.size():
                    r = rk.out_completed[i - rk.running.size()]
                else:
                    r = rk.waiting[i - rk.running.size() - rk.out_completed.size()]
                if self.t.sched_pass[r] == pid and self.t.sched_prompt[r] > 0:
                    x = <double>self.t.sched_prompt[r]
                    pn += 1
                    ps += x
                    pss += x * x
                    pkv += <double>self.t.sched_before[r]
            for r in rk.out_emitted:
                if self.t.sched_pass[r] == pid and self.t.sched_prompt[r] > 0:
                    continue                    # its first token: a prefill
                x = <double>(self.t.prompt_len[r] + self.t.generated[r] - 1)
                dn += 1
                ds += x
                dss += x * x
        for r in rk.waiting:
            x = <double>(self.t.prompt_len[r] + self.t.generated[r] - self.t.computed[r])
            qn += 1
            qs += x
            qss += x * x
        return (int(pn), int(ps), _var(pn, ps, pss), int(pkv), int(dn), int(ds), _var(dn, ds, dss),
                int(qn), int(qs), _var(qn, qs, qss), 0, 0, 0.0)

    def pass_stats(self, int64_t rank):
        """What rank ``rank`` did in the last pass: ``(stepped, prefill_n, decode_n,
        committed_prefill_tokens, start, end)``."""
        self._rank(rank)
        cdef Rank rk = <Rank>self.ranks[rank]
        return (bool(self.stepped[rank]), rk.out.prefill_n, rk.out.decode_n,
                rk.out.committed_prefill, rk.out.start, rk.out.end)


cdef double _var(double n, double s, double ss):
    """Population variance from a count, a sum and a sum of squares."""
    if n <= 0:
        return 0.0
    cdef double m = s / n
    cdef double v = ss / n - m * m
    return v if v > 0.0 else 0.0
