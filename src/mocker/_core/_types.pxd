# Fixed dtypes of the compiled core: int32 ids, int64 counters, float64 times (ms).
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t, uint64_t, INT32_MAX
from libcpp.vector cimport vector

ctypedef int32_t rid_t      # request index in the run's request table
ctypedef int32_t slot_t     # physical KV block slot
ctypedef int64_t count_t    # token / block counters
ctypedef uint64_t hash_t    # chained block hash
ctypedef double ms_t        # simulated time, milliseconds

# Error handling: cdef functions that can allocate (directly or through callees) return an
# int status declared `except -1 nogil` (or another impossible value), so a std::bad_alloc
# becomes MemoryError at the Python entry point; pure functions stay `noexcept`.

# a KV cache event: a block (page) hash became cached on a worker, or its last copy left
cdef struct KvEvent:
    hash_t h
    int8_t stored        # 1 = stored, 0 = removed
    rid_t r              # stored: the request whose block became cached (-1 = unknown / removed)
    int32_t k            # stored: its block (page) index in that request's sequence


cdef inline int64_t ceil_div(int64_t a, int64_t b) noexcept nogil:
    return (a + b - 1) // b


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define MOCKER_PREFETCH(p) __builtin_prefetch((p), 1)
    #else
    #define MOCKER_PREFETCH(p) ((void)0)
    #endif
    """
    # hint that *p is about to be written (no-op where unsupported)
    void prefetch_w "MOCKER_PREFETCH" (const void* p) noexcept nogil


cdef extern from *:
    """
    #include <vector>
    #include <cstdint>
    // append to a vector whose capacity is known to suffice (reserved up front): no allocation,
    // hence no exception to translate; a broken invariant terminates (noexcept)
    static inline void mocker_push_reserved(std::vector<int32_t>& v, int32_t x) noexcept {
        v.push_back(x);
    }
    """
    void push_reserved "mocker_push_reserved" (vector[slot_t]& v, slot_t x) noexcept nogil


cdef extern from "<queue>" namespace "std" nogil:
    # std::priority_queue with `push` declared `except +` (libcpp.queue's is not: a bad_alloc
    # there would terminate the process)
    cdef cppclass pqueue "std::priority_queue"[T]:
        pqueue() except +
        bint empty()
        void pop()
        void push(const T&) except +
        size_t size()
        T& top()


cdef inline int check_count(object n, str what, int64_t limit) except -1:
    """ValueError unless 0 <= ``n`` <= ``limit`` (a count that becomes 32-bit ids)."""
    if n < 0 or n > limit:
        raise ValueError(f"{what} must be between 0 and {limit}, got {n}")
    return 0
