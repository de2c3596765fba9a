# One rank of the vLLM-style scheduler (spec core-sim §3); `trtllm` shares it (§3.9).
from libcpp.vector cimport vector
from libcpp.deque cimport deque
from mocker._core._types cimport int64_t, rid_t
from mocker._core.timing cimport TimingModel
from mocker._core.table cimport ReqTable
from mocker._core.blocks cimport BlockPool

cdef struct PassOut:
    double start              # pass start (ms)
    double end                # pass end (ms): timestamp of every token of the pass
    int64_t prefill_n         # requests contributing prompt tokens
    int64_t decode_n          # size of the decode set D
    int64_t committed_prefill # tokens of work items that carried prompt tokens
    int64_t preemptions       # preemptions during this pass
    bint effect               # the pass changed anything


cdef class VllmRank:
    cdef ReqTable t
    cdef BlockPool pool
    cdef TimingModel tm
    cdef int64_t bs                 # block size
    cdef int64_t num_blocks         # num_gpu_blocks
    cdef int64_t max_num_seqs       # <= 0: unlimited
    cdef int64_t max_batched        # <= 0: unlimited
    cdef int64_t max_model_len      # <= 0: none
    cdef bint chunked               # enable_chunked_prefill
    cdef bint fifo_preempt          # preemption_mode == fifo
    cdef bint trtllm                # guaranteed-no-evict admission
    cdef deque[rid_t] waiting
    cdef vector[rid_t] running
    cdef int64_t pass_id
    cdef int64_t preemptions_total
    # outputs of the last pass
    cdef PassOut out
    cdef vector[rid_t] out_emitted     # requests that emitted a token at out.end
    cdef vector[rid_t] out_completed   # completed at out.end
    cdef vector[rid_t] out_rejected    # rejected at out.end
    # per-pass scratch
    cdef vector[rid_t] sched
    cdef int64_t budget
    cdef int64_t b_n, b_isl, b_pre
    cdef bint preempted_any

    cdef int64_t _remaining(self, rid_t r) noexcept nogil
    cdef void _unschedule(self, rid_t v) noexcept nogil
    cdef rid_t _preempt_one(self) noexcept nogil
    cdef int64_t _schedule(self, rid_t r, bint from_waiting, int64_t cached) noexcept nogil
    cdef void _remove_waiting(self, rid_t r) noexcept nogil
    cdef void _reject(self, rid_t r) noexcept nogil
    cdef int64_t _trt_reserved(self) noexcept nogil
    cdef void add_request(self, rid_t r) noexcept nogil
    cdef void step(self, double now) noexcept nogil
    cdef inline bint has_work(self) noexcept nogil:
        return self.waiting.size() > 0 or self.running.size() > 0
