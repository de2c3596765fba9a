# cython: language_level=3
"""Backend-independent part of a scheduler rank: queues, timing model, pass outputs."""
from libcpp.vector cimport vector
from mocker._core._types cimport int8_t, int64_t, rid_t, KvEvent
from mocker._core.timing cimport TIMING_FIXED, TIMING_POLYNOMIAL
from mocker._core.table cimport ReqTable, ST_WAITING, ST_CANCELLED


cdef class Rank:
    def __cinit__(self, ReqTable table, dict engine, *args, **kwargs):
        cdef dict tmodel = engine["timing_model"]
        self.t = table
        self.bs = engine["block_size"]
        self.num_blocks = engine["num_gpu_blocks"]
        self.max_num_seqs = engine["max_num_seqs"] or 0
        self.max_model_len = engine["max_model_len"] or 0
        if tmodel["type"] == "fixed":
            self.tm.kind = TIMING_FIXED
            self.tm.fixed_prefill_ms = tmodel["prefill_ms"]
            self.tm.fixed_decode_ms = tmodel["decode_ms"]
        else:
            self.tm.kind = TIMING_POLYNOMIAL
        sr = engine["speedup_ratio"]
        self.tm.prefill_ratio = sr
        self.tm.decode_ratio = sr * engine["decode_speedup_ratio"]
        if self.bs < 1:
            raise ValueError(f"block_size must be at least 1, got {self.bs}")
        if self.num_blocks < 0:
            raise ValueError(f"num_gpu_blocks must not be negative, got {self.num_blocks}")
        self.tm.capacity_tokens = <double>(self.num_blocks * self.bs)
        self.pass_id = 0
        self.preemptions_total = 0

    cdef int add_request(self, rid_t r) except -1 nogil:
        self.t.status[r] = ST_WAITING
        self.waiting.push_back(r)
        return 0

    cdef int step(self, double now) except -1 nogil:
        self.begin_pass(now)
        self.out.end = now
        return 0

    cdef int64_t remaining(self, rid_t r) noexcept nogil:
        """Tokens still to generate: the output cap, and room left under max_model_len."""
        cdef int64_t rem = self.t.max_out[r] - self.t.generated[r]
        cdef int64_t lim
        if self.max_model_len > 0:
            lim = self.max_model_len - (self.t.prompt_len[r] + self.t.generated[r])
            if lim < rem:
                rem = lim
        return rem if rem > 0 else 0

    cdef void begin_pass(self, double now) noexcept nogil:
        self.pass_id += 1
        self.out.start = now
        self.out.end = now
        self.out.prefill_n = 0
        self.out.decode_n = 0
        self.out.preemptions = 0
        self.out.committed_prefill = 0
        self.out.prefill_work = False
        self.out.model_work = False
        self.out.effect = False
        self.out.retry = False
        self.out_emitted.clear()
        self.out_prev.clear()
        self.out_completed.clear()
        self.out_rejected.clear()

    cdef void restamp(self, double end) noexcept nogil:
        """Move everything this pass produced to ``end`` (a shared data-parallel pass ends later)."""
        cdef size_t i
        cdef rid_t r
        cdef double prev, itl
        for i in range(self.out_emitted.size()):
            r = self.out_emitted[i]
            prev = self.out_prev[i]
            if prev < 0.0:
                self.t.first_token[r] = end
            else:
                itl = end - prev
                self.t.itl_buf[r][self.t.itl_buf[r].size() - 1] = itl if itl > 0.0 else 0.0
                if self.t.out_tokens[r] == 2:
                    self.t.second_token[r] = end
            self.t.last_token[r] = end
        for r in self.out_completed:
            self.t.terminal_time[r] = end
        for r in self.out_rejected:
            self.t.terminal_time[r] = end
        self.out.end = end

    cdef void begin_group_pass(self, double now) noexcept nogil:
        """A data-parallel worker pass starts at ``now`` (called for every rank, before any steps)."""
        pass

    cdef bint finish_group_pass(self, bint stepped, bint any_prefill, bint any_model, double end) noexcept nogil:
        """A data-parallel worker pass ended at ``end`` (``stepped``: this rank ran in it;
        ``any_*``: what any rank of the worker did).  Returns True if the rank's state changed."""
        return False

    cdef int abort(self, rid_t r) except -1 nogil:
        """Drop ``r`` (queued or running) and free what it holds; 0 if it is not here, else 1.
        Called between passes only (live mode cancellation)."""
        if not self._unqueue(r):
            return 0
        self.t.status[r] = ST_CANCELLED
        return 1

    cdef int _unqueue(self, rid_t r) except -1 nogil:
        """Remove ``r`` from the queues: 1 if it was there, else 0."""
        cdef size_t i
        for i in range(self.waiting.size()):
            if self.waiting[i] == r:
                self.waiting.erase(self.waiting.begin() + i)
                return 1
        for i in range(self.running.size()):
            if self.running[i] == r:
                self.running.erase(self.running.begin() + i)
                return 1
        return 0

    cdef int grow(self, int64_t n) except -1 nogil:
        """The request table grew to ``n`` rows (live mode): size per-request state."""
        return 0

    cdef int reserve_destination(self, rid_t r, int64_t* missing_blocks) except -1 nogil:
        """Decode role: reserve room for ``r``'s transferred prompt (0: no room now, 1: done)."""
        return 0

    cdef int activate_destination(self, rid_t r) except -1 nogil:
        """Decode role: ``r``'s prompt KV arrived; queue it for decode."""
        return 0

    cdef int release_source(self, rid_t r) except -1 nogil:
        """Prefill role: free the KV held for ``r`` since its prefill ended."""
        return 0

    cdef vector[KvEvent]* kv_events(self) noexcept nogil:
        """KV events recorded since they were last drained (NULL: the rank has no cache)."""
        return NULL

    # -- Python-level driving (benchmarks, tests, live mode) -------------------------
    @property
    def num_running(self):
        return self.running.size()

    @property
    def num_waiting(self):
        return self.waiting.size()

    @property
    def num_preemptions(self):
        return self.preemptions_total

    def submit(self, rid_t r):
        """Queue request ``r`` (its prompt must be set in the table)."""
        self.t.check_row(r)
        self.add_request(r)

    def run_pass(self, double now):
        """Run one pass at ``now``; returns (end_ms, tokens_emitted, completed, rejected)."""
        with nogil:
            self.step(now)
        return (self.out.end, <int64_t>self.out_emitted.size(),
                <int64_t>self.out_completed.size(), <int64_t>self.out_rejected.size())


cdef int step_group(void** ranks, int64_t n, double now, bint throttle, int8_t* stepped,
                    bint* effect, double* pass_end) except -1 nogil:
    """One pass of a worker's ``n`` ranks sharing a pass barrier (attention data parallel):
    every rank with work steps at ``now``; the pass ends with the slowest rank and every
    rank's output is stamped with that end.  The end goes to ``pass_end``; ``effect`` tells
    whether anything changed.  Shared by the replay loop and the live engine."""
    cdef int64_t k
    cdef double end = now
    cdef bint any_prefill = False, any_model = False
    effect[0] = False
    if n > 1:
        for k in range(n):
            (<Rank>ranks[k]).begin_group_pass(now)
    for k in range(n):
        if not (<Rank>ranks[k]).has_work():
            stepped[k] = 0
            continue
        stepped[k] = 1
        (<Rank>ranks[k]).throttle = throttle
        (<Rank>ranks[k]).step(now)
        if (<Rank>ranks[k]).out.end > end:
            end = (<Rank>ranks[k]).out.end
        if (<Rank>ranks[k]).out.effect:
            effect[0] = True
    if n > 1:
        for k in range(n):
            if stepped[k]:
                any_prefill = any_prefill or (<Rank>ranks[k]).out.prefill_work
                any_model = any_model or (<Rank>ranks[k]).out.model_work
        for k in range(n):
            if stepped[k] and (<Rank>ranks[k]).out.end != end:
                (<Rank>ranks[k]).restamp(end)
            if (<Rank>ranks[k]).finish_group_pass(stepped[k], any_prefill, any_model, end):
                effect[0] = True
    pass_end[0] = end
    return 0
