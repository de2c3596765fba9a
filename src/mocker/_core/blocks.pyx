# cython: language_level=3
"""vLLM-style KV block pool: resident copies per hash, refcounts, LRU of inactive copies.

Duplicates are allowed: two requests computing the same block concurrently each own
a copy (both occupy capacity); the first resident copy is the primary that prefix
hits attach to.  Released cached copies go to the LRU tail; eviction pops the head.
"""
from cython.operator cimport dereference as deref
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from mocker._core._types cimport int64_t, uint64_t, hash_t, slot_t, KvEvent, INT32_MAX, check_count, push_reserved


cdef class BlockPool:
    def __cinit__(self, int64_t capacity, bint caching=True, bint record_events=False):
        cdef slot_t s
        check_count(capacity, "block pool capacity (num_gpu_blocks)", INT32_MAX)    # 32-bit slot ids
        self.capacity = capacity
        self.caching = caching
        self.record_events = record_events
        self.s_hash.resize(capacity, 0)
        self.s_refs.resize(capacity, 0)
        self.s_cached.resize(capacity, 0)
        self.s_used.resize(capacity, 0)
        self.s_dup_next.resize(capacity, -1)
        self.lru_prev.resize(capacity, -1)
        self.lru_next.resize(capacity, -1)
        self.s_in_lru.resize(capacity, 0)
        self.free_slots.reserve(capacity)
        for s in range(<slot_t>capacity - 1, -1, -1):
            self.free_slots.push_back(s)
        self.lru_head = -1
        self.lru_tail = -1
        self.lru_len = 0
        self.reserved = 0
        self.evictions = 0

    # -- LRU list -------------------------------------------------------------
    cdef void _lru_push(self, slot_t s) noexcept nogil:
        self.lru_prev[s] = self.lru_tail
        self.lru_next[s] = -1
        if self.lru_tail >= 0:
            self.lru_next[self.lru_tail] = s
        else:
            self.lru_head = s
        self.lru_tail = s
        self.s_in_lru[s] = 1
        self.lru_len += 1

    cdef void _lru_remove(self, slot_t s) noexcept nogil:
        cdef slot_t p = self.lru_prev[s], q = self.lru_next[s]
        if p >= 0:
            self.lru_next[p] = q
        else:
            self.lru_head = q
        if q >= 0:
            self.lru_prev[q] = p
        else:
            self.lru_tail = p
        self.s_in_lru[s] = 0
        self.lru_len -= 1

    # -- hash index -----------------------------------------------------------
    cdef slot_t _primary(self, hash_t h) noexcept nogil:
        cdef unordered_map[hash_t, slot_t].iterator it = self.by_hash.find(h)
        if it == self.by_hash.end():
            return -1
        return deref(it).second

    cdef int _unindex(self, slot_t s) except -1 nogil:
        cdef hash_t h = self.s_hash[s]
        cdef slot_t head = self.by_hash[h]
        cdef slot_t c
        if head == s:
            if self.s_dup_next[s] >= 0:
                self.by_hash[h] = self.s_dup_next[s]
            else:
                self.by_hash.erase(h)
                if self.record_events:
                    self.events.push_back(KvEvent(h, 0, -1, -1))
        else:
            c = head
            while self.s_dup_next[c] != s:
                c = self.s_dup_next[c]
            self.s_dup_next[c] = self.s_dup_next[s]
        self.s_dup_next[s] = -1
        self.s_cached[s] = 0
        return 0

    cdef int cache_block(self, slot_t s, hash_t h) except -1 nogil:
        """Turn private copy ``s`` into a cached copy of ``h`` (appended after existing copies)."""
        cdef slot_t head, c
        cdef unordered_map[hash_t, slot_t].iterator it
        if self.s_cached[s] and self.s_hash[s] == h:
            return 0        # already a cached copy of h (e.g. a resident prefix block a destination reused)
        self.s_hash[s] = h
        if not self.caching:
            return 0
        self.s_cached[s] = 1
        self.s_dup_next[s] = -1
        it = self.by_hash.find(h)
        if it == self.by_hash.end():
            self.by_hash.insert(pair[hash_t, slot_t](h, s))     # (operator[] is not declared except +)
            if self.record_events:
                self.events.push_back(KvEvent(h, 1, self.ev_rid, self.ev_pos))
        else:
            c = deref(it).second
            while self.s_dup_next[c] >= 0:
                c = self.s_dup_next[c]
            self.s_dup_next[c] = s
        return 0

    # -- operations -----------------------------------------------------------
    cdef void lookup(self, const hash_t* hs, int64_t nfull, int64_t* overlap, int64_t* active_overlap) noexcept nogil:
        cdef int64_t i, ov = 0, act = 0
        cdef slot_t s
        if self.caching:
            for i in range(nfull):
                s = self._primary(hs[i])
                if s < 0:
                    break
                ov += 1
                if self.s_refs[s] > 0:
                    act += 1
        overlap[0] = ov
        active_overlap[0] = act

    cdef int allocate(self, vector[slot_t]* table, int64_t tgt_blocks, const hash_t* hit_hashes, int64_t n_hits) except -1 nogil:
        """Grow ``table`` to ``tgt_blocks`` entries: ``n_hits`` prefix hits first, then fresh copies.

        Returns 0 (and changes nothing) when fresh capacity cannot be found, else 1.
        """
        cdef int64_t prev = <int64_t>table.size()
        if tgt_blocks <= prev:
            return 1
        if n_hits > tgt_blocks - prev:
            n_hits = tgt_blocks - prev
        if n_hits < 0:
            n_hits = 0
        cdef int64_t fresh = tgt_blocks - prev - n_hits
        cdef int64_t i, inactive_hits = 0
        cdef slot_t s
        for i in range(n_hits):
            s = self._primary(hit_hashes[i])
            if s >= 0 and self.s_in_lru[s]:
                inactive_hits += 1
        if fresh - <int64_t>self.free_slots.size() > self.lru_len - inactive_hits:
            return 0
        for i in range(n_hits):
            s = self._primary(hit_hashes[i])
            if self.s_in_lru[s]:
                self._lru_remove(s)
            self.s_refs[s] += 1
            table.push_back(s)
        for i in range(fresh):
            if self.free_slots.size() == 0:
                s = self.lru_head
                self._lru_remove(s)
                self._unindex(s)
                self.evictions += 1
            else:
                s = self.free_slots.back()
                self.free_slots.pop_back()
            self.s_used[s] = 1
            self.s_refs[s] = 1
            self.s_cached[s] = 0
            table.push_back(s)
        return 1

    cdef void release(self, vector[slot_t]* table) noexcept nogil:
        """Drop one holder of every block of ``table``, last block first; clears the table."""
        cdef int64_t i
        cdef slot_t s
        for i in range(<int64_t>table.size() - 1, -1, -1):
            s = table[0][i]
            if self.s_cached[s]:
                self.s_refs[s] -= 1
                if self.s_refs[s] == 0:
                    self._lru_push(s)
            else:
                self.s_refs[s] = 0
                self.s_used[s] = 0
                push_reserved(self.free_slots, s)
        table.clear()

    # -- Python-visible views (tests, metrics) ----------------------------------
    @property
    def num_active_blocks(self):
        return self.num_active()

    @property
    def num_inactive_blocks(self):
        return self.lru_len

    @property
    def num_free_blocks(self):
        return <int64_t>self.free_slots.size()

    def cached_hashes(self):
        """The set of block hashes with a cached copy (what KV events have announced)."""
        return {kv.first for kv in self.by_hash}

    def check_invariants(self):
        """Raise AssertionError if the pool's bookkeeping is inconsistent."""
        cdef int64_t used = 0, in_lru = 0, s
        for s in range(self.capacity):
            used += self.s_used[s]
            in_lru += self.s_in_lru[s]
            if self.s_in_lru[s]:
                assert self.s_cached[s] and self.s_refs[s] == 0, f"slot {s} on LRU but held"
        assert used + <int64_t>self.free_slots.size() == self.capacity, "blocks not conserved"
        assert in_lru == self.lru_len, "LRU length mismatch"
        # every cached copy sits exactly once on its hash's chain of resident copies
        cdef int64_t cached = 0, chained = 0, steps
        cdef slot_t c
        for s in range(self.capacity):
            cached += self.s_cached[s]
        for kv in self.by_hash:
            c = kv.second
            steps = 0
            while c >= 0:
                assert self.s_cached[c] and self.s_hash[c] == kv.first, f"slot {c} on a foreign chain"
                steps += 1
                assert steps <= self.capacity, f"cycle in the copies of hash {kv.first}"
                c = self.s_dup_next[c]
            chained += steps
        assert chained == cached, "cached copies off their chains"


def churn(BlockPool pool, int64_t rounds, int64_t blocks_per_seq, int64_t num_prefixes, uint64_t seed=1):
    """Allocate / publish / release sequences sharing ``num_prefixes`` prefixes (benchmark driver).

    Each round looks up a sequence's chained hashes, allocates (hits + fresh blocks, evicting
    when full), publishes the fresh blocks and releases them all.  Returns total prefix hits.
    """
    cdef vector[slot_t] table
    cdef vector[hash_t] hs
    cdef int64_t i, k, hits = 0, ov, act
    cdef uint64_t x = seed
    hs.resize(blocks_per_seq)
    with nogil:
        for i in range(rounds):
            x = x * 6364136223846793005ULL + 1442695040888963407ULL
            for k in range(blocks_per_seq):
                # first half of each sequence comes from a shared prefix, the rest is unique
                if k < blocks_per_seq // 2:
                    hs[k] = (x >> 33) % <uint64_t>num_prefixes * 1000003ULL + <uint64_t>k + 1
                else:
                    hs[k] = (<uint64_t>i << 20) ^ (<uint64_t>k + 0x9E3779B97F4A7C15ULL)
            pool.lookup(hs.data(), blocks_per_seq, &ov, &act)
            if not pool.allocate(&table, blocks_per_seq, hs.data(), ov):
                continue
            hits += ov
            for k in range(ov, blocks_per_seq):
                pool.cache_block(table[k], hs[k])
            pool.release(&table)
    return hits
