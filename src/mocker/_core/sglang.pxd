# One rank of the SGLang-style scheduler (docs/core-sim.md §5): prefill and decode passes
# alternate, admission reserves output room with a decaying new-token ratio, memory
# pressure retracts decodes, the prefix cache is a page radix tree.
cimport cython
from libcpp.vector cimport vector
from mocker._core._types cimport int64_t, rid_t, slot_t
from mocker._core.rank cimport Rank
from mocker._core.radix cimport RadixCache


@cython.final
cdef class SglangRank(Rank):
    cdef RadixCache cache
    cdef bint caching                 # enable_prefix_caching
    cdef bint lpm                     # schedule_policy == lpm
    cdef int64_t max_prefill_tokens
    cdef int64_t chunked_prefill_size
    cdef int64_t clip_max_new_tokens
    cdef double init_ratio            # 0.7 * schedule_conservativeness
    cdef double min_ratio             # 0.14 * init_ratio
    cdef double decay_step            # (init - min) / 600
    cdef double new_token_ratio
    cdef int64_t prefill_decode_interval
    cdef int64_t prefill_rounds_remaining
    cdef double last_end              # end of this rank's latest pass
    cdef bint grouped                 # dp_size > 1: the interval countdown is shared by the worker's ranks
    cdef bint idle_round              # grouped: the last pass was a deferred round with nothing to decode
    cdef int64_t own_path_conflicts    # admissions refused because the matched path had to be evicted
    # disaggregated roles (destination first: the decode rank reserves before the prefill runs)
    cdef bint hold_source             # prefill worker: a finished request's pages stay held
    cdef vector[vector[slot_t]] held  # prefill worker, per request: held pages (its first ins[r] locked in the tree)
    cdef bint decode_role             # decode worker
    cdef vector[vector[slot_t]] dest  # decode worker, per request: reserved pages until activation
    # per request (indexed by rid)
    cdef vector[int64_t] ins          # leading pages inserted in (and locked from) the tree
    cdef vector[int64_t] touch        # clock of the request's latest match-lock / insert
    cdef vector[int64_t] skip_lo      # path pages [skip_lo, skip_hi) that this latest operation
    cdef vector[int64_t] skip_hi      # split off an edge without refreshing them
    # per-pass scratch
    cdef vector[rid_t] batch
    cdef int64_t _isl                 # prefill batch: Σ chunk ends
    cdef int64_t _pre                 # prefill batch: Σ prefix lengths

    cdef int _cache_materialized(self, rid_t r) except -1 nogil
    cdef int _insert_pages(self, rid_t r, vector[slot_t]* pages, int64_t upto) except -1 nogil
    cdef int _release(self, rid_t r) except -1 nogil
    cdef int _finish(self, rid_t r, double end) except -1 nogil
    cdef int _retract(self, rid_t r) except -1 nogil
    cdef int _drop(self, rid_t r) except -1 nogil
    cdef int _drop_pages(self, rid_t r, vector[slot_t]* pages) except -1 nogil
    cdef int _admit_activated(self, double now) except -1 nogil
    cdef int _apply_lpm(self) except -1 nogil
    cdef int64_t _match_len(self, rid_t r) except -1 nogil
    cdef int _prefill_batch(self, double now) except -1 nogil
    cdef void _end_pass(self, double end, bint effect) noexcept nogil
    cdef int _remove_running(self, rid_t r) except -1 nogil
    cdef int _make_room(self, int64_t pages) except -1 nogil      # 1 if the pages are free
    cdef double _estimate_ratio(self) noexcept nogil
