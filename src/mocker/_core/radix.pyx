# cython: language_level=3
"""SGLang-style page radix cache.

Nodes are pages: a cached page is a tree node keyed by its chained hash, its parent is
the node of the previous page.  A request locks every node of its path (its matched
and inserted pages); unlocked nodes are evictable, least-recently-accessed leaf first
(``last_access`` is a logical clock that ticks once per lock / insert operation).
Private pages (allocated, not yet inserted) belong to one request.

Stamps of locked nodes are kept lazily: a request records the tick of its latest
insert and writes it into its path when it unlocks (a locked node is never evicted, so
its stamp only matters from then on).
"""
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from cython.operator cimport dereference as deref
from mocker._core._types cimport int64_t, hash_t, slot_t
from mocker._core.flatmap cimport fm_init, fm_free, fm_get, fm_put, fm_del


cdef class RadixCache:
    def __cinit__(self, int64_t capacity, bint caching=True, bint record_events=False):
        cdef slot_t s
        self.capacity = capacity
        self.caching = caching
        self.record_events = record_events
        self.s_hash.resize(capacity, 0)
        self.s_parent.resize(capacity, -1)
        self.s_children.resize(capacity, 0)
        self.s_lock.resize(capacity, 0)
        self.s_stamp.resize(capacity, 0)
        self.s_in_tree.resize(capacity, 0)
        self.free_slots.reserve(capacity)
        for s in range(<slot_t>capacity - 1, -1, -1):
            self.free_slots.push_back(s)
        self.evictable = 0
        self.clock = 0
        self.evictions = 0
        if fm_init(&self.index, capacity) != 0:
            raise MemoryError()

    def __dealloc__(self):
        fm_free(&self.index)

    cdef int64_t tick(self) noexcept nogil:
        self.clock += 1
        return self.clock

    cdef int64_t match(self, const hash_t* hs, int64_t n) noexcept nogil:
        """Number of leading pages of ``hs[:n]`` present in the tree."""
        cdef int64_t i
        if not self.caching:
            return 0
        for i in range(n):
            if fm_get(&self.index, hs[i]) < 0:
                return i
        return n

    cdef void lock_path(self, const hash_t* hs, int64_t n, int64_t stamp, vector[slot_t]* pages) noexcept nogil:
        """Lock the first ``n`` (matched) pages, refresh their access stamp, append them to ``pages``."""
        cdef int64_t i
        cdef slot_t s
        for i in range(n):
            s = fm_get(&self.index, hs[i])
            if self.s_lock[s] == 0:
                self.evictable -= 1
            self.s_lock[s] += 1
            self.s_stamp[s] = stamp
            pages.push_back(s)

    cdef void unlock_path(self, const slot_t* pages, int64_t n, int64_t touch) noexcept nogil:
        """Release one holder of each tree page of a path; freed leaves become evictable."""
        cdef int64_t i
        cdef slot_t s
        for i in range(n - 1, -1, -1):
            s = pages[i]
            if touch > self.s_stamp[s]:
                self.s_stamp[s] = touch
            self.s_lock[s] -= 1
            if self.s_lock[s] == 0:
                self.evictable += 1
                if self.s_children[s] == 0:
                    self._push_leaf(s)

    cdef void _push_leaf(self, slot_t s) noexcept nogil:
        self.leaves.push(HeapItem(-self.s_stamp[s], -s))

    cdef void _evict(self, int64_t k) noexcept nogil:
        cdef slot_t s, p
        cdef int64_t stamp
        while k > 0 and not self.leaves.empty():
            stamp = -self.leaves.top().first
            s = -self.leaves.top().second
            self.leaves.pop()
            if (not self.s_in_tree[s] or self.s_lock[s] != 0 or self.s_children[s] != 0
                    or self.s_stamp[s] != stamp):
                continue            # stale entry
            fm_del(&self.index, self.s_hash[s])
            if self.record_events:
                self.ev_removed.push_back(self.s_hash[s])
            self.s_in_tree[s] = 0
            self.evictable -= 1
            self.evictions += 1
            p = self.s_parent[s]
            if p >= 0:
                self.s_children[p] -= 1
                if self.s_children[p] == 0 and self.s_lock[p] == 0:
                    self._push_leaf(p)
            self.free_slots.push_back(s)
            k -= 1

    cdef bint alloc(self, int64_t k, vector[slot_t]* pages) noexcept nogil:
        """Append ``k`` private pages to ``pages``, evicting as needed; False (no change) if impossible."""
        cdef int64_t i
        cdef slot_t s
        if k <= 0:
            return True
        if <int64_t>self.free_slots.size() + self.evictable < k:
            return False
        if <int64_t>self.free_slots.size() < k:
            self._evict(k - <int64_t>self.free_slots.size())
            if <int64_t>self.free_slots.size() < k:
                return False
        for i in range(k):
            s = self.free_slots.back()
            self.free_slots.pop_back()
            pages.push_back(s)
        return True

    cdef void free_page(self, slot_t s) noexcept nogil:
        self.free_slots.push_back(s)

    cdef slot_t insert_page(self, slot_t page, hash_t h, slot_t parent, int64_t stamp) noexcept nogil:
        """Insert private ``page`` holding content ``h`` under ``parent``, locked by its owner.

        If ``h`` is already cached the private duplicate is freed and the existing node is
        locked instead.  Returns the node now holding the content.
        """
        cdef slot_t s = fm_get(&self.index, h)
        if s >= 0:
            self.free_slots.push_back(page)
            if self.s_lock[s] == 0:
                self.evictable -= 1
            self.s_lock[s] += 1
            self.s_stamp[s] = stamp
            return s
        fm_put(&self.index, h, page)
        self.s_hash[page] = h
        self.s_parent[page] = parent
        self.s_children[page] = 0
        self.s_lock[page] = 1
        self.s_stamp[page] = stamp
        self.s_in_tree[page] = 1
        if parent >= 0:
            self.s_children[parent] += 1
        if self.record_events:
            self.ev_stored.push_back(h)
        return page

    # -- Python-visible views (tests, metrics) ----------------------------------
    @property
    def num_free_pages(self):
        return <int64_t>self.free_slots.size()

    @property
    def num_evictable_pages(self):
        return self.evictable

    @property
    def num_cached_pages(self):
        return self.index.size

    def check_invariants(self):
        """Raise AssertionError if the cache's bookkeeping is inconsistent."""
        cdef int64_t s, in_tree = 0, unlocked = 0
        cdef dict children = {}
        for s in range(self.capacity):
            if self.s_in_tree[s]:
                in_tree += 1
                assert self.s_lock[s] >= 0, f"negative lock on page {s}"
                if self.s_lock[s] == 0:
                    unlocked += 1
                p = self.s_parent[s]
                if p >= 0:
                    assert self.s_in_tree[p], f"page {s} has an evicted parent"
                    assert self.s_lock[p] >= self.s_lock[s], f"parent of page {s} less locked than child"
                    children[p] = children.get(p, 0) + 1
        for s in range(self.capacity):
            if self.s_in_tree[s]:
                assert children.get(s, 0) == self.s_children[s], f"child count of page {s}"
        assert in_tree == self.index.size, "index size"
        assert unlocked == self.evictable, "evictable count"
        assert <int64_t>self.free_slots.size() <= self.capacity - in_tree, "pages double-counted"
