# KV-aware router of the replay (docs/core-sim.md §6.5): a per-worker view of cached block
# hashes fed by the workers' KV events, active-sequence tracking, the cost function.
cimport cython
from libcpp.vector cimport vector
from libcpp.deque cimport deque
from libcpp.unordered_map cimport unordered_map
from mocker._core._types cimport int8_t, int32_t, int64_t, uint64_t, hash_t, rid_t, KvEvent
from mocker._core.table cimport ReqTable


cdef struct LaggedEvent:
    double at            # when the event becomes visible to the router
    int32_t worker
    KvEvent ev


@cython.final
cdef class KvRouter:
    cdef ReqTable t
    cdef int64_t nw                    # workers
    cdef int64_t words                 # 64-bit mask words per hash
    cdef int64_t bs                    # block size the hashes are taken at
    # cost function
    cdef double credit                 # overlap_score_credit
    cdef double prefill_scale          # prefill_load_scale
    cdef double decode_weight          # decode_active_request_weight
    cdef double temperature            # router_temperature (0: argmin)
    cdef bint track_active_blocks
    cdef bint track_prefill_tokens
    cdef bint assume_kv_reuse          # False: every request's blocks count as distinct
    cdef double lag_ms                 # kv_event_lag_ms
    cdef uint64_t rng                  # tie-breaking / sampling state (splitmix64)
    # indexer: hash -> offset of its worker bit mask in `cached`
    cdef unordered_map[hash_t, int64_t] cached_at
    cdef vector[uint64_t] cached
    cdef vector[int64_t] cached_free
    # active sequences: hash -> offset of per-worker refcounts in `active_cnt`
    cdef unordered_map[hash_t, int64_t] active_at
    cdef vector[int32_t] active_cnt
    cdef vector[int64_t] active_free
    cdef vector[int64_t] active_blocks   # per worker: distinct prompt blocks of routed, unfinished requests
    cdef vector[int64_t] active_prefill  # per worker: prefill tokens of requests before their first token
    cdef vector[int64_t] active_reqs     # per worker: routed, unfinished requests
    # per request
    cdef vector[int32_t] req_w           # target the request was routed to (-1: none)
    cdef vector[int64_t] req_prefill     # tokens counted in active_prefill (-1: none)
    cdef vector[int32_t] req_blocks      # prompt blocks counted in the active set
    cdef vector[double] req_cost         # cost of the chosen worker (the reference logs it as `logit`)
    cdef vector[int64_t] req_overlap     # cached blocks on the chosen worker at routing
    cdef deque[LaggedEvent] lagged
    # scratch (per worker)
    cdef vector[int64_t] overlap
    cdef vector[int64_t] newblk
    cdef vector[double] logit
    cdef vector[double] weight
    cdef vector[int32_t] ties
    cdef vector[uint64_t] alive          # per mask word: workers still matching the prefix
    cdef public int64_t decisions

    cdef int32_t route(self, rid_t r, double now) except -1 nogil
    cdef int on_events(self, int32_t w, vector[KvEvent]* evs, double at) except -1 nogil
    cdef int apply_due(self, double now) except -1 nogil
    cdef void on_token(self, rid_t r) noexcept nogil
    cdef int on_terminal(self, rid_t r) except -1 nogil
    cdef int _apply(self, int32_t w, KvEvent e) except -1 nogil
    cdef void _overlaps(self, const hash_t* hs, int64_t n) noexcept nogil
    cdef void _new_blocks(self, const hash_t* hs, int64_t n) noexcept nogil
    cdef int _activate(self, int32_t w, const hash_t* hs, int64_t n) except -1 nogil
    cdef uint64_t _rand(self) noexcept nogil
