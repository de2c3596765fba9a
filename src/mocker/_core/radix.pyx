# cython: language_level=3
"""SGLang-style page radix cache.

Nodes are pages: a cached page is a tree node named by its chained hash, its parent is
the node of the previous page.  A request locks every node of its path (its matched
and inserted pages); unlocked nodes are evictable, least-recently-accessed leaf first
(``last_access`` is a logical clock that ticks once per lock / insert operation).
Private pages (allocated, not yet inserted) belong to one request.

Most of a tree is chains (one child per node), so lookups walk it: a node that has never
had two children at once points at its only child; the children of the root and of
branching nodes are found through an open-addressing hash index.  Inserting and
evicting a chain page therefore touches no index at all.

Stamps of locked nodes are kept lazily: a request records the tick of its latest
match-lock / insert and writes it into its path when it unlocks (a locked node is never
evicted, so its stamp only matters from then on).

The reference's tree is compressed: a node is an edge of several pages with one access
stamp, and an operation refreshes only the edges it covers *completely*.  A match or an
insert that stops (or diverges) inside an edge splits it, and the split-off prefix keeps
the edge's old stamp.  Pages carry a ``head`` flag (first page of such an edge) so the
same splits happen here; the caller leaves the pages of a split-off prefix out of its
lazy touch (``skip_lo``/``skip_hi`` of ``unlock_path``).  Every page of an edge thus has the
edge's stamp, and page-wise LRU eviction (tail first) equals the reference's partial
eviction of the oldest leaf edge.
"""
from libcpp.vector cimport vector
from mocker._core._types cimport int64_t, hash_t, slot_t, KvEvent, INT32_MAX, check_count, push_reserved
from libc.stdint cimport uint64_t


cdef class RadixCache:
    def __cinit__(self, int64_t capacity, bint caching=True, bint record_events=False):
        cdef slot_t s
        cdef Node blank
        cdef uint64_t n = 16
        check_count(capacity, "radix cache capacity (num_gpu_blocks)", INT32_MAX)    # 32-bit page ids
        self.capacity = capacity
        self.caching = caching
        self.record_events = record_events
        blank.hash = 0
        blank.stamp = 0
        blank.children = 0
        blank.lock = 0
        blank.only_child = BRANCHED
        blank.head = 0
        # (resize, not assign: libcpp declares assign(n, x) without except +)
        self.nodes.resize(capacity, blank)
        self.parent.resize(capacity, OFF_TREE)
        while n < <uint64_t>(2 * capacity + 2):
            n <<= 1
        self.table.resize(n, 0)
        self.tmask = n - 1
        self.n_index = 0
        self.n_tree = 0
        self.free_slots.reserve(capacity)
        for s in range(<slot_t>capacity - 1, -1, -1):
            self.free_slots.push_back(s)
        self.evictable = 0
        self.clock = 0
        self.evictions = 0

    # -- content index (linear probing over node ids, backward-shift deletion) ----------
    cdef uint64_t _home(self, hash_t h) noexcept nogil:
        return (h ^ (h >> 29)) & self.tmask

    cdef slot_t _find(self, hash_t h) noexcept nogil:
        cdef uint64_t i = self._home(h)
        cdef int32_t e
        while True:
            e = self.table[i]
            if e == 0:
                return -1
            if self.nodes[e - 1].hash == h:
                return e - 1
            i = (i + 1) & self.tmask

    cdef void _index_put(self, slot_t s) noexcept nogil:
        cdef uint64_t i = self._home(self.nodes[s].hash)
        while self.table[i] != 0:
            i = (i + 1) & self.tmask
        self.table[i] = s + 1
        self.n_index += 1

    cdef void _index_del(self, slot_t s) noexcept nogil:
        cdef uint64_t i = self._home(self.nodes[s].hash)
        cdef uint64_t j, home
        while self.table[i] != s + 1:
            i = (i + 1) & self.tmask
        j = i
        while True:
            j = (j + 1) & self.tmask
            if self.table[j] == 0:
                break
            home = self._home(self.nodes[self.table[j] - 1].hash)
            if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
                self.table[i] = self.table[j]
                i = j
        self.table[i] = 0
        self.n_index -= 1

    cdef int64_t tick(self) noexcept nogil:
        self.clock += 1
        return self.clock

    cdef slot_t _child(self, slot_t p, hash_t h) noexcept nogil:
        """The child of ``p`` (-1 = the root) holding content ``h``, or -1."""
        cdef slot_t c
        if p >= 0:
            if self.nodes[p].children == 0:
                return -1
            if self.nodes[p].only_child != BRANCHED:
                c = self.nodes[p].only_child
                return c if self.nodes[c].hash == h else -1
        # a hash names its whole path, so a hit is a child of `p`
        return self._find(h)

    cdef slot_t _descend(self, const hash_t* hs, int64_t n, int64_t* depth) noexcept nogil:
        """Walk the leading pages of ``hs[:n]``; their count goes to ``depth``, the last node is returned."""
        cdef int64_t i
        cdef slot_t cur = -1, c
        for i in range(n):
            c = self._child(cur, hs[i])
            if c < 0:
                depth[0] = i
                return cur
            cur = c
        depth[0] = n
        return cur

    cdef int64_t match(self, const hash_t* hs, int64_t n) noexcept nogil:
        """Number of leading pages of ``hs[:n]`` present in the tree."""
        cdef int64_t depth = 0
        if not self.caching:
            return 0
        self._descend(hs, n, &depth)
        return depth

    cdef int64_t lock_path(self, const hash_t* hs, int64_t n, vector[slot_t]* pages) except -1 nogil:
        """Lock the first ``n`` (matched) pages and append them to ``pages``.

        Stamps are left to the caller's lazy touch.  If the match ends inside an edge, the edge
        is split there; returns the path index where that split-off prefix starts (its pages
        are not refreshed by this match), or ``n``.
        """
        cdef int64_t depth = 0, base = <int64_t>pages.size(), i, lo = n
        cdef slot_t s = self._descend(hs, n, &depth)
        cdef slot_t last = s
        pages.resize(base + n)
        for i in range(n - 1, -1, -1):
            if self.nodes[s].lock == 0:
                self.evictable -= 1
            self.nodes[s].lock += 1
            pages[0][base + i] = s
            s = self.parent[s]
        if n > 0 and not self.is_edge_end(last):
            self.split_after(last)
            lo = n - 1
            s = last
            while not self.nodes[s].head:
                s = self.parent[s]
                lo -= 1
        return lo

    cdef bint is_edge_end(self, slot_t s) noexcept nogil:
        """Whether tree page ``s`` is the last page of its edge."""
        if self.nodes[s].children == 0 or self.nodes[s].only_child == BRANCHED:
            return True             # a leaf, or a branching node (all its children start edges)
        return self.nodes[self.nodes[s].only_child].head != 0

    cdef void split_after(self, slot_t s) noexcept nogil:
        """Split the edge running through ``s`` after it."""
        if self.nodes[s].children > 0 and self.nodes[s].only_child != BRANCHED:
            self.nodes[self.nodes[s].only_child].head = 1

    cdef int unlock_path(self, const slot_t* pages, int64_t n, int64_t touch, int64_t skip_lo, int64_t skip_hi) except -1 nogil:
        """Release one holder of each tree page of a path; freed leaves become evictable.

        The pages get the holder's latest access ``touch``, except ``pages[skip_lo:skip_hi]`` (an
        edge prefix that the holder's latest operation split off without refreshing it).
        """
        cdef int64_t i
        cdef slot_t s
        for i in range(n - 1, -1, -1):
            s = pages[i]
            if i >= 8:
                self.prefetch(pages[i - 8])
            if touch > self.nodes[s].stamp and (i < skip_lo or i >= skip_hi):
                self.nodes[s].stamp = touch
            self.nodes[s].lock -= 1
            if self.nodes[s].lock == 0:
                self.evictable += 1
                if self.nodes[s].children == 0:
                    self._push_leaf(s)
        return 0

    cdef int _evict(self, int64_t k) except -1 nogil:
        cdef slot_t s = -1, p
        cdef int64_t stamp
        cdef HeapItem item
        while k > 0:
            if s < 0:
                if self.leaves.empty():
                    return 0
                stamp = -self.leaves.top().first
                s = -self.leaves.top().second
                self.leaves.pop()
                if (self.parent[s] == OFF_TREE or self.nodes[s].lock != 0 or self.nodes[s].children != 0
                        or self.nodes[s].stamp != stamp):
                    s = -1
                    continue            # stale entry
            if self._indexed(s):
                self._index_del(s)
            if self.record_events:
                self.events.push_back(KvEvent(self.nodes[s].hash, 0, -1, -1))
            p = self.parent[s]
            self.parent[s] = OFF_TREE
            self.n_tree -= 1
            self.evictable -= 1
            self.evictions += 1
            push_reserved(self.free_slots, s)
            k -= 1
            s = -1
            if p >= 0:
                if self.parent[p] >= 0:
                    self.prefetch(self.parent[p])       # the chain's next node, two steps ahead
                self.nodes[p].children -= 1
                if self.nodes[p].children == 0:
                    self.nodes[p].only_child = BRANCHED     # (unused while childless)
                if self.nodes[p].children == 0 and self.nodes[p].lock == 0:
                    item = HeapItem(-self.nodes[p].stamp, -p)
                    if self.leaves.empty() or item > self.leaves.top():
                        s = p               # the parent is next anyway: skip the heap
                    else:
                        self.leaves.push(item)
        if s >= 0:
            self._push_leaf(s)
        return 0

    cdef int alloc(self, int64_t k, vector[slot_t]* pages) except -1 nogil:
        """Append ``k`` private pages to ``pages``, evicting as needed; 0 (no change) if impossible."""
        cdef int64_t i
        cdef slot_t s
        if k <= 0:
            return 1
        if <int64_t>self.free_slots.size() + self.evictable < k:
            return 0
        if <int64_t>self.free_slots.size() < k:
            self._evict(k - <int64_t>self.free_slots.size())
            if <int64_t>self.free_slots.size() < k:
                return 0
        for i in range(k):
            s = self.free_slots.back()
            self.free_slots.pop_back()
            pages.push_back(s)
        return 1

    cdef void free_page(self, slot_t s) noexcept nogil:
        push_reserved(self.free_slots, s)

    cdef void _index_kids_of(self, slot_t p) noexcept nogil:
        """``p`` gets a second child: its existing only child joins the hash index."""
        self._index_put(self.nodes[p].only_child)
        self.nodes[p].only_child = BRANCHED

    cdef bint _indexed(self, slot_t s) noexcept nogil:
        cdef slot_t p = self.parent[s]
        return p == ROOT or self.nodes[p].only_child == BRANCHED

    cdef slot_t lock_cached(self, slot_t page, slot_t s) noexcept nogil:
        """A request's private ``page`` duplicates tree page ``s``: free it, lock ``s`` instead
        (its stamp is left to the caller's lazy touch)."""
        push_reserved(self.free_slots, page)
        if self.nodes[s].lock == 0:
            self.evictable -= 1
        self.nodes[s].lock += 1
        return s

    cdef slot_t insert_page(self, slot_t page, hash_t h, slot_t parent, int64_t stamp, bint head) except -1 nogil:
        """Insert private ``page`` holding content ``h`` under ``parent``, locked by its owner.

        ``head``: the page starts a new edge (else it extends its parent's edge).  If ``h`` is
        already cached the private duplicate is freed and the existing node is locked instead.
        Returns the node now holding the content.
        """
        cdef slot_t s = self._child(parent, h)
        if s >= 0:
            return self.lock_cached(page, s)
        self.nodes[page].hash = h
        self.parent[page] = parent
        self.nodes[page].children = 0
        self.nodes[page].lock = 1
        self.nodes[page].stamp = stamp
        self.nodes[page].only_child = BRANCHED
        self.nodes[page].head = 1 if (head or parent < 0 or self.nodes[parent].children > 0) else 0
        self.n_tree += 1
        if parent < 0:
            self._index_put(page)
        else:
            if self.nodes[parent].children == 0:
                self.nodes[parent].only_child = page
            else:
                if self.nodes[parent].only_child != BRANCHED:
                    self.nodes[self.nodes[parent].only_child].head = 1      # a branch ends the edge
                    self._index_kids_of(parent)
                self._index_put(page)
            self.nodes[parent].children += 1
        if self.record_events:
            self.events.push_back(KvEvent(h, 1, self.ev_rid, self.ev_pos))
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
        return self.n_tree

    @property
    def num_indexed_pages(self):
        return self.n_index

    def cached_hashes(self):
        """The set of page hashes in the tree (what KV events have announced)."""
        return {self.nodes[s].hash for s in range(self.capacity) if self.parent[s] != OFF_TREE}

    def check_invariants(self):
        """Raise AssertionError if the cache's bookkeeping is inconsistent."""
        cdef int64_t s, in_tree = 0, unlocked = 0, indexed = 0
        cdef dict children = {}
        for s in range(<int64_t>self.table.size()):
            if self.table[s] != 0:
                indexed += 1
                assert self.parent[self.table[s] - 1] != OFF_TREE, "index holds an evicted page"
        for s in range(self.capacity):
            if self.parent[s] != OFF_TREE:
                in_tree += 1
                assert self.nodes[s].lock >= 0, f"negative lock on page {s}"
                if self.nodes[s].lock == 0:
                    unlocked += 1
                p = self.parent[s]
                if self._indexed(s):
                    assert self._find(self.nodes[s].hash) == s, f"page {s} not found through the index"
                else:
                    assert self.nodes[p].children == 1 and self.nodes[p].only_child == s, \
                        f"page {s} is not its unbranched parent's only child"
                if p == ROOT or self.nodes[p].only_child == BRANCHED:
                    assert self.nodes[s].head, f"page {s} below the root or a branch does not start an edge"
                if p >= 0:
                    assert self.parent[p] != OFF_TREE, f"page {s} has an evicted parent"
                    assert self.nodes[p].lock >= self.nodes[s].lock, f"parent of page {s} less locked than child"
                    children[p] = children.get(p, 0) + 1
        for s in range(self.capacity):
            if self.parent[s] != OFF_TREE:
                assert children.get(s, 0) == self.nodes[s].children, f"child count of page {s}"
        assert in_tree == self.n_tree, "tree size"
        assert indexed == self.n_index, "index size"
        assert unlocked == self.evictable, "evictable count"
        assert <int64_t>self.free_slots.size() <= self.capacity - in_tree, "pages double-counted"
