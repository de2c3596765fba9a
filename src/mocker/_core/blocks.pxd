# vLLM-style paged KV block pool with prefix caching (docs/core-sim.md §4.2).
cimport cython
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from mocker._core._types cimport int8_t, int32_t, int64_t, hash_t, slot_t, rid_t, KvEvent

@cython.final
cdef class BlockPool:
    cdef int64_t capacity            # physical blocks (num_gpu_blocks)
    cdef bint caching                # enable_prefix_caching
    # per physical slot (structure of arrays)
    cdef vector[hash_t] s_hash       # block hash (valid when s_cached)
    cdef vector[int32_t] s_refs      # holders (private copies: 1 owner)
    cdef vector[int8_t] s_cached     # 1 = cached copy (in by_hash), 0 = private / free
    cdef vector[int8_t] s_used       # 1 = occupied
    cdef vector[slot_t] s_dup_next   # next resident copy with the same hash (-1 = none)
    cdef vector[slot_t] lru_prev     # inactive LRU links (-1 = none)
    cdef vector[slot_t] lru_next
    cdef vector[int8_t] s_in_lru     # 1 = on the inactive LRU
    cdef unordered_map[hash_t, slot_t] by_hash   # hash -> primary resident copy
    cdef vector[slot_t] free_slots   # stack of unoccupied slots (capacity reserved: appends never allocate)
    cdef slot_t lru_head             # oldest inactive (evicted first)
    cdef slot_t lru_tail
    cdef int64_t lru_len             # number of inactive cached copies
    cdef int64_t reserved            # blocks held outside any request table (disagg)
    cdef int64_t evictions           # total evicted copies
    # KV events of the current pass (hashes), drained by the caller
    cdef bint record_events
    cdef vector[KvEvent] events      # KV events since the caller last drained them (in order)
    cdef rid_t ev_rid                # source of the next stored event: request (set by the caller)
    cdef int32_t ev_pos              # ... and its block index

    cdef inline int64_t num_active(self) noexcept nogil:
        return (self.capacity - <int64_t>self.free_slots.size()) - self.lru_len + self.reserved

    cdef void _lru_push(self, slot_t s) noexcept nogil
    cdef void _lru_remove(self, slot_t s) noexcept nogil
    cdef slot_t _primary(self, hash_t h) noexcept nogil
    cdef int _unindex(self, slot_t s) except -1 nogil
    cdef void lookup(self, const hash_t* hs, int64_t nfull, int64_t* overlap, int64_t* active_overlap) noexcept nogil
    # 1 = allocated, 0 = no room (nothing changed)
    cdef int allocate(self, vector[slot_t]* table, int64_t tgt_blocks, const hash_t* hit_hashes, int64_t n_hits) except -1 nogil
    cdef int cache_block(self, slot_t s, hash_t h) except -1 nogil
    cdef void release(self, vector[slot_t]* table) noexcept nogil
