# One scheduler rank: what the replay loop and live mode drive, whatever the backend.
from libcpp.vector cimport vector
from libcpp.deque cimport deque
from mocker._core._types cimport int8_t, int64_t, rid_t, KvEvent
from mocker._core.timing cimport TimingModel
from mocker._core.table cimport ReqTable

cdef struct PassOut:
    double start              # pass start (ms)
    double end                # pass end (ms): timestamp of every token of the pass
    int64_t prefill_n         # requests contributing prompt tokens
    int64_t decode_n          # requests in the decode batch
    int64_t committed_prefill # tokens of work items that carried prompt tokens
    int64_t preemptions       # preemptions / retractions during this pass
    bint prefill_work         # the pass computed prompt tokens (SGLang interval signal)
    bint model_work           # the pass ran a forward (prompt tokens or decoded tokens)
    bint effect               # the pass changed anything
    bint retry                # an effect-free zero-duration pass that moved state the next pass
                              # reads (SGLang: the admission ratio): it runs again at once


cdef class Rank:
    cdef ReqTable t
    cdef TimingModel tm
    cdef int64_t bs                 # block (page) size
    cdef int64_t num_blocks         # num_gpu_blocks
    cdef int64_t max_num_seqs       # <= 0: unlimited
    cdef int64_t max_model_len      # <= 0: none
    cdef deque[rid_t] waiting
    cdef vector[rid_t] running
    cdef int64_t pass_id
    cdef int64_t preemptions_total
    cdef bint stall_is_fatal        # an effect-free pass aborts the run at once (SGLang)
    cdef bint throttle              # this pass may defer prefills (attention-DP prefill_schedule_interval)
    # outputs of the last pass
    cdef PassOut out
    cdef vector[rid_t] out_emitted     # requests that emitted a token at out.end
    cdef vector[double] out_prev       # ... and the time of their previous token (-1: it is the first)
    cdef vector[rid_t] out_completed   # completed at out.end
    cdef vector[rid_t] out_rejected    # rejected at out.end
    # disaggregated decode role (set and read by the replay driver)
    cdef bint pending_dest          # a destination waits for room on this rank
    cdef int64_t cap_gen            # capacity generation (completions, preemptions / retractions)
    cdef vector[int64_t] att_gen    # per waiting destination: generation of its last attempt

    # growth paths return 0 (or a bint result) and -1 with MemoryError set
    cdef int add_request(self, rid_t r) except -1 nogil
    cdef int step(self, double now) except -1 nogil
    cdef int64_t remaining(self, rid_t r) noexcept nogil
    cdef void begin_pass(self, double now) noexcept nogil
    cdef vector[KvEvent]* kv_events(self) noexcept nogil
    cdef void restamp(self, double end) noexcept nogil
    cdef void begin_group_pass(self, double now) noexcept nogil
    cdef bint finish_group_pass(self, bint stepped, bint any_prefill, bint any_model, double end) noexcept nogil
    cdef int abort(self, rid_t r) except -1 nogil
    cdef int grow(self, int64_t n) except -1 nogil
    cdef int _unqueue(self, rid_t r) except -1 nogil
    # disaggregated handoff roles (docs/core-sim.md §6.6); the base rank has none
    cdef int reserve_destination(self, rid_t r, int64_t* missing_blocks) except -1 nogil
    cdef int activate_destination(self, rid_t r) except -1 nogil
    cdef int release_source(self, rid_t r) except -1 nogil
    cdef inline bint has_work(self) noexcept nogil:
        return self.waiting.size() > 0 or self.running.size() > 0

    cdef inline int emit_token(self, rid_t r, double end) except -1 nogil:
        """Append one generated token stamped ``end`` and record its latency sample (inline: once
        per token, and no subclass overrides it)."""
        cdef double itl
        self.t.generated[r] = self.t.generated[r] + 1
        self.out_prev.push_back(-1.0 if self.t.out_tokens[r] == 0 else self.t.last_token[r])
        if self.t.out_tokens[r] == 0:
            self.t.first_token[r] = end
        else:
            itl = end - self.t.last_token[r]
            self.t.itl_buf[r].push_back(itl if itl > 0.0 else 0.0)
            if self.t.out_tokens[r] == 1:
                self.t.second_token[r] = end
        self.t.out_tokens[r] = self.t.out_tokens[r] + 1
        self.t.last_token[r] = end
        self.out_emitted.push_back(r)
        return 0


cdef int step_group(void** ranks, int64_t n, double now, bint throttle, int8_t* stepped,
                    bint* effect, double* end) except -1 nogil
