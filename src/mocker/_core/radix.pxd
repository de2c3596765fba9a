# SGLang-style page radix cache (docs/core-sim.md §5.1).  One node per cached page; a page's
# chained hash names the whole path from the root.  Only children of branching nodes (and
# of the root) are in the hash index: a chain is walked through `only_child` links.
cimport cython
from libcpp.vector cimport vector
from libcpp.pair cimport pair
from libc.stdint cimport uint64_t
from mocker._core._types cimport int8_t, int32_t, int64_t, hash_t, slot_t, rid_t, KvEvent, prefetch_w, pqueue

ctypedef pair[int64_t, slot_t] HeapItem     # (-stamp, -slot): the max-heap pops the oldest leaf

cdef struct Node:
    hash_t hash          # page hash (tree nodes)
    int64_t stamp        # last access (logical clock)
    int32_t children     # number of child nodes
    int32_t lock         # requests whose path runs through the node
    slot_t only_child    # the single child while the node has never branched, else BRANCHED
                         # (then every child is in the hash index)
    int8_t head          # first page of its compressed edge (the reference's radix node); pages of
                         # one edge share their access stamp (see radix.pyx)

# 32 bytes: two nodes per cache line, none straddles one.  Parents live in their own
# small array: eviction walks a chain through them while the node accesses overlap.
cdef enum:
    ROOT = -1
    OFF_TREE = -2
    BRANCHED = -2


@cython.final
cdef class RadixCache:
    # Nodes are kept as an array of structs: every tree operation touches several fields
    # of one node.
    cdef int64_t capacity            # pages
    cdef bint caching                # enable_prefix_caching (off: nothing is ever inserted)
    cdef vector[Node] nodes          # one per page slot
    cdef vector[slot_t] parent       # per page slot: parent node, ROOT or OFF_TREE (free or private)
    cdef vector[int32_t] table       # open-addressing index: node + 1 (0 = empty), keyed by node hash
    cdef uint64_t tmask              # table size - 1
    cdef int64_t n_index             # nodes in the index
    cdef int64_t n_tree              # nodes in the tree
    cdef vector[slot_t] free_slots   # unoccupied pages (capacity reserved: appends never allocate)
    cdef pqueue[HeapItem] leaves     # candidate evictable leaves (lazily validated)
    cdef int64_t evictable           # tree pages with lock 0
    cdef int64_t clock               # logical clock: one tick per match-lock / insert operation
    cdef int64_t evictions
    cdef bint record_events
    cdef vector[KvEvent] events      # KV events since the caller last drained them (in order)
    cdef rid_t ev_rid                # source of the next stored event: request (set by the caller)
    cdef int32_t ev_pos              # ... and its block index

    cdef int64_t tick(self) noexcept nogil
    cdef inline void prefetch(self, slot_t s) noexcept nogil:
        prefetch_w(&self.nodes[s])
    cdef int64_t match(self, const hash_t* hs, int64_t n) noexcept nogil
    cdef slot_t _descend(self, const hash_t* hs, int64_t n, int64_t* depth) noexcept nogil
    cdef slot_t _child(self, slot_t p, hash_t h) noexcept nogil
    cdef void _index_kids_of(self, slot_t p) noexcept nogil
    cdef bint _indexed(self, slot_t s) noexcept nogil
    cdef int64_t lock_path(self, const hash_t* hs, int64_t n, vector[slot_t]* pages) except -1 nogil
    cdef int unlock_path(self, const slot_t* pages, int64_t n, int64_t touch, int64_t skip_lo, int64_t skip_hi) except -1 nogil
    cdef bint is_edge_end(self, slot_t s) noexcept nogil
    cdef void split_after(self, slot_t s) noexcept nogil
    cdef slot_t lock_cached(self, slot_t page, slot_t s) noexcept nogil
    # 1 = allocated, 0 = impossible (nothing changed)
    cdef int alloc(self, int64_t k, vector[slot_t]* pages) except -1 nogil
    cdef void free_page(self, slot_t s) noexcept nogil
    cdef slot_t insert_page(self, slot_t page, hash_t h, slot_t parent, int64_t stamp, bint head) except -1 nogil
    cdef int _evict(self, int64_t k) except -1 nogil
    cdef inline int _push_leaf(self, slot_t s) except -1 nogil:
        self.leaves.push(HeapItem(-self.nodes[s].stamp, -s))
        return 0
    cdef uint64_t _home(self, hash_t h) noexcept nogil
    cdef slot_t _find(self, hash_t h) noexcept nogil
    cdef void _index_put(self, slot_t s) noexcept nogil
    cdef void _index_del(self, slot_t s) noexcept nogil
