# One rank of the vLLM-style scheduler (docs/core-sim.md §3); `trtllm` shares it (docs/core-sim.md §3.9).
cimport cython
from libcpp.vector cimport vector
from libcpp.deque cimport deque
from mocker._core._types cimport int64_t, rid_t, slot_t, KvEvent
from mocker._core.rank cimport Rank
from mocker._core.blocks cimport BlockPool


@cython.final
cdef class VllmRank(Rank):
    cdef BlockPool pool
    cdef int64_t max_batched        # <= 0: unlimited
    cdef bint chunked               # enable_chunked_prefill
    cdef bint fifo_preempt          # preemption_mode == fifo
    cdef bint trtllm                # guaranteed-no-evict admission
    # per-pass scratch
    cdef vector[rid_t] sched
    cdef int64_t budget
    cdef int64_t b_n, b_isl, b_pre
    cdef bint preempted_any
    cdef bint capacity_bound        # attention DP: the last full pass left requests waiting
    # disaggregated roles
    cdef bint hold_source           # prefill worker: a finished request's blocks stay held
    cdef vector[vector[slot_t]] held   # per request: held source blocks (prefill worker)
    cdef bint decode_role           # disaggregated decode worker
    cdef int64_t next_order         # decode worker: next destination ordinal
    cdef vector[int64_t] worder     # decode worker: per request, its destination ordinal
    cdef deque[rid_t] mat           # decode worker: activated (materialized) waiting requests, in order
    cdef vector[rid_t] dest_held    # decode worker: reserved destinations not activated yet

    cdef void _unschedule(self, rid_t v) noexcept nogil
    cdef rid_t _preempt_one(self) except -2 nogil          # -1: nothing to preempt
    cdef int64_t _schedule(self, rid_t r, bint from_waiting, int64_t cached) except -3 nogil   # -1, -2: see vllm.pyx
    cdef int _remove_waiting(self, rid_t r) except -1 nogil
    cdef int _reject(self, rid_t r) except -1 nogil
    cdef int64_t _final_len(self, rid_t r) noexcept nogil
    cdef bint _prefill_chunk(self, rid_t r) noexcept nogil
    cdef int64_t _trt_reserved(self) noexcept nogil
    cdef int64_t _trt_tail(self, rid_t r) noexcept nogil
    cdef void _trt_clamp(self, rid_t r) noexcept nogil
    cdef int _finish(self, rid_t r, double end) except -1 nogil
    cdef int _insert_in_order(self, deque[rid_t]* q, rid_t r) except -1 nogil
    cdef int _admit_materialized(self, rid_t r, double now) except -1 nogil
    cdef int unreserve_destination(self, rid_t r) except -1 nogil
