# Open-addressing hash map hash_t -> slot_t for the KV caches' content index.
# Linear probing, backward-shift deletion (no tombstones); sized once for the pool's
# capacity (at most one entry per page), so it never rehashes.  Keys are already
# well-mixed 64-bit hashes; key 0 marks an empty bucket (a real 0 hash is remapped).
from libc.stdlib cimport calloc, free
from libc.stdint cimport int64_t, uint64_t
from mocker._core._types cimport hash_t, slot_t

cdef struct FlatMap:
    hash_t* keys         # 0 = empty
    slot_t* vals
    uint64_t mask        # buckets - 1 (power of two)
    int64_t size         # live entries


cdef inline hash_t fm_key(hash_t h) noexcept nogil:
    return h if h != 0 else <hash_t>0x9E3779B97F4A7C15ULL


cdef inline int fm_init(FlatMap* m, int64_t max_entries) noexcept nogil:
    cdef uint64_t n = 16
    while n < <uint64_t>(2 * max_entries + 2):
        n <<= 1
    m.keys = <hash_t*>calloc(n, sizeof(hash_t))
    m.vals = <slot_t*>calloc(n, sizeof(slot_t))
    m.mask = n - 1
    m.size = 0
    return 0 if (m.keys != NULL and m.vals != NULL) else -1


cdef inline void fm_free(FlatMap* m) noexcept nogil:
    free(m.keys)
    free(m.vals)
    m.keys = NULL
    m.vals = NULL


cdef inline slot_t fm_get(const FlatMap* m, hash_t h) noexcept nogil:
    """Value for ``h`` or -1."""
    cdef hash_t k = fm_key(h)
    cdef uint64_t i = (k ^ (k >> 29)) & m.mask
    while m.keys[i] != 0:
        if m.keys[i] == k:
            return m.vals[i]
        i = (i + 1) & m.mask
    return -1


cdef inline void fm_put(FlatMap* m, hash_t h, slot_t v) noexcept nogil:
    """Insert or overwrite."""
    cdef hash_t k = fm_key(h)
    cdef uint64_t i = (k ^ (k >> 29)) & m.mask
    while m.keys[i] != 0:
        if m.keys[i] == k:
            m.vals[i] = v
            return
        i = (i + 1) & m.mask
    m.keys[i] = k
    m.vals[i] = v
    m.size += 1


cdef inline void fm_del(FlatMap* m, hash_t h) noexcept nogil:
    cdef hash_t k = fm_key(h)
    cdef uint64_t i = (k ^ (k >> 29)) & m.mask
    cdef uint64_t j, home
    while m.keys[i] != k:
        if m.keys[i] == 0:
            return
        i = (i + 1) & m.mask
    # backward-shift the following cluster into the hole
    j = i
    while True:
        j = (j + 1) & m.mask
        if m.keys[j] == 0:
            break
        home = (m.keys[j] ^ (m.keys[j] >> 29)) & m.mask
        # move entry j into hole i if its home is not cyclically in (i, j]
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            m.keys[i] = m.keys[j]
            m.vals[i] = m.vals[j]
            i = j
    m.keys[i] = 0
    m.size -= 1
