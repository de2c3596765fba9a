# cython: language_level=3
"""Rust ``rand 0.9`` ``StdRng`` (ChaCha12) re-implementation, bit-exact.

Spec Appendix A.1 (seeding, block function, buffering, next_u32/next_u64/f64) and
A.2 (``random_range(0..n)``), plus the two workload helpers built on it:
Poisson arrival times (docs/core-sim.md §7.4) and prefix-group draws (docs/core-sim.md §7.4).
"""

from libc.stdint cimport uint32_t, uint64_t, int64_t
from libc.math cimport log, isfinite

import numpy as np

cdef double _F64_MIN_POSITIVE = 2.2250738585072014e-308
cdef double _TWO_POW_M53 = 1.0 / 9007199254740992.0     # 2^-53, exact


# ---------------------------------------------------------------------------------------------
# ChaCha12 core
# ---------------------------------------------------------------------------------------------

cdef inline uint32_t _rotl(uint32_t x, int n) noexcept nogil:
    return (x << n) | (x >> (32 - n))


cdef inline void _qr(uint32_t* s, int a, int b, int c, int d) noexcept nogil:
    s[a] = s[a] + s[b]
    s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = s[c] + s[d]
    s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = s[a] + s[b]
    s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = s[c] + s[d]
    s[b] = _rotl(s[b] ^ s[c], 7)


cdef void _chacha12_block(const uint32_t* key, uint64_t counter, uint32_t* out) noexcept nogil:
    """One ChaCha12 block: constants, key, 64-bit counter (words 12-13), stream 0 (14-15)."""
    cdef uint32_t inp[16]
    cdef uint32_t s[16]
    cdef int i
    inp[0] = 0x61707865u
    inp[1] = 0x3320646eu
    inp[2] = 0x79622d32u
    inp[3] = 0x6b206574u
    for i in range(8):
        inp[4 + i] = key[i]
    inp[12] = <uint32_t>(counter & 0xFFFFFFFFu)
    inp[13] = <uint32_t>(counter >> 32)
    inp[14] = 0
    inp[15] = 0
    for i in range(16):
        s[i] = inp[i]
    for i in range(6):                      # 6 double rounds = 12 rounds
        _qr(s, 0, 4, 8, 12)
        _qr(s, 1, 5, 9, 13)
        _qr(s, 2, 6, 10, 14)
        _qr(s, 3, 7, 11, 15)
        _qr(s, 0, 5, 10, 15)
        _qr(s, 1, 6, 11, 12)
        _qr(s, 2, 7, 8, 13)
        _qr(s, 3, 4, 9, 14)
    for i in range(16):
        out[i] = s[i] + inp[i]


cdef inline void _refill(StdRngState* r) noexcept nogil:
    cdef int b
    for b in range(4):
        _chacha12_block(r.key, r.counter + <uint64_t>b, &r.buf[16 * b])
    r.counter += 4
    r.index = 0


# ---------------------------------------------------------------------------------------------
# Public C API (declared in rng.pxd)
# ---------------------------------------------------------------------------------------------

cdef void rng_seed(StdRngState* r, uint64_t seed) noexcept nogil:
    # rand_core 0.9 `seed_from_u64`: PCG32 output words fill the 32-byte seed (little endian).
    cdef uint64_t state = seed
    cdef uint32_t xorshifted, rot
    cdef int i
    for i in range(8):
        state = state * 6364136223846793005ULL + 11634580027462260723ULL
        xorshifted = <uint32_t>(((state >> 18) ^ state) >> 27)
        rot = <uint32_t>(state >> 59)
        r.key[i] = (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31))
    r.counter = 0
    r.index = 64
    for i in range(64):
        r.buf[i] = 0


cdef uint32_t rng_next_u32(StdRngState* r) noexcept nogil:
    if r.index >= 64:
        _refill(r)
    cdef uint32_t v = r.buf[r.index]
    r.index += 1
    return v


cdef uint64_t rng_next_u64(StdRngState* r) noexcept nogil:
    cdef uint32_t i = r.index
    cdef uint64_t lo
    if i < 63:
        r.index = i + 2
        return <uint64_t>r.buf[i] | (<uint64_t>r.buf[i + 1] << 32)
    if i >= 64:
        _refill(r)
        r.index = 2
        return <uint64_t>r.buf[0] | (<uint64_t>r.buf[1] << 32)
    # exactly one word left: it becomes the low half, the high half is the first new word
    lo = r.buf[63]
    _refill(r)
    r.index = 1
    return lo | (<uint64_t>r.buf[0] << 32)


cdef double rng_next_f64(StdRngState* r) noexcept nogil:
    return <double>(rng_next_u64(r) >> 11) * _TWO_POW_M53


cdef inline void _wmul64(uint64_t a, uint64_t b, uint64_t* hi, uint64_t* lo) noexcept nogil:
    """Full 64x64 -> 128 bit product."""
    cdef uint64_t a_lo = a & 0xFFFFFFFFu
    cdef uint64_t a_hi = a >> 32
    cdef uint64_t b_lo = b & 0xFFFFFFFFu
    cdef uint64_t b_hi = b >> 32
    cdef uint64_t ll = a_lo * b_lo
    cdef uint64_t lh = a_lo * b_hi
    cdef uint64_t hl = a_hi * b_lo
    cdef uint64_t hh = a_hi * b_hi
    cdef uint64_t mid = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu)
    lo[0] = (ll & 0xFFFFFFFFu) | (mid << 32)
    hi[0] = hh + (lh >> 32) + (hl >> 32) + (mid >> 32)


cdef uint64_t rng_range(StdRngState* r, uint64_t n) noexcept nogil:
    cdef uint32_t range32, x32, lo32
    cdef uint64_t m, hi, lo, hi2, lo2
    if n == 0:
        return 0
    if n - 1 <= 0xFFFFFFFFu:
        # usize range that fits in u32 -> UniformInt<u32>::sample_single_inclusive(0, n-1)
        range32 = <uint32_t>n                 # n == 2^32 wraps to 0: full range
        if range32 == 0:
            return rng_next_u32(r)
        x32 = rng_next_u32(r)
        m = <uint64_t>x32 * <uint64_t>range32
        hi = m >> 32
        lo32 = <uint32_t>m
        if lo32 > <uint32_t>(0u - range32):
            m = <uint64_t>rng_next_u32(r) * <uint64_t>range32
            if <uint64_t>lo32 + (m >> 32) > 0xFFFFFFFFu:
                hi += 1
        return hi
    # u64 path (n > 2^32)
    _wmul64(rng_next_u64(r), n, &hi, &lo)
    if lo > <uint64_t>(0 - n):
        _wmul64(rng_next_u64(r), n, &hi2, &lo2)
        if lo + hi2 < lo:                     # overflow of lo + new_hi
            hi += 1
    return hi


# ---------------------------------------------------------------------------------------------
# Python-level helpers
# ---------------------------------------------------------------------------------------------

def poisson_arrivals(uint64_t seed, double rate, int64_t n):
    """First-turn arrival times (ms) of the synthetic Poisson workload (docs/core-sim.md §7.4).

    ``arrivals[0] = 0``; then ``t += -(1000/rate) * ln(clamp(1 - U, f64::MIN_POSITIVE, 1))``
    with ``U`` the next f64 of ``StdRng::seed_from_u64(seed)`` (one draw per later arrival).
    """
    if n < 0:
        raise ValueError("n must be non-negative")
    if not (isfinite(rate) and rate > 0.0):
        raise ValueError(f"request_rate must be a finite positive number, got {rate!r}")
    out = np.empty(n, dtype=np.float64)
    if n == 0:
        return out
    cdef double[::1] o = out
    cdef StdRngState r
    cdef double mean = 1000.0 / rate
    cdef double t = 0.0, u
    cdef int64_t i
    with nogil:
        rng_seed(&r, seed)
        o[0] = 0.0
        for i in range(1, n):
            u = 1.0 - rng_next_f64(&r)
            if u < _F64_MIN_POSITIVE:
                u = _F64_MIN_POSITIVE
            elif u > 1.0:
                u = 1.0
            t += -mean * log(u)
            o[i] = t
    return out


def prefix_groups(int64_t n, int64_t num_groups):
    """Prefix group of each of ``n`` sessions: ``random_range(0..num_groups)`` per session
    from a fixed ``StdRng::seed_from_u64(42)`` (docs/core-sim.md §7.4)."""
    if n < 0:
        raise ValueError("n must be non-negative")
    if num_groups <= 0:
        raise ValueError("num_groups must be positive")
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef StdRngState r
    cdef int64_t i
    with nogil:
        rng_seed(&r, 42)
        for i in range(n):
            o[i] = <int64_t>rng_range(&r, <uint64_t>num_groups)
    return out


cdef class StdRng:
    """Python handle on one ``StdRngState`` (for tests and diagnostics)."""
    cdef StdRngState _r

    def __init__(self, uint64_t seed):
        rng_seed(&self._r, seed)

    def next_u32(self):
        return rng_next_u32(&self._r)

    def next_u64(self):
        return rng_next_u64(&self._r)

    def next_f64(self):
        return rng_next_f64(&self._r)

    def range(self, uint64_t n):
        if n == 0:
            raise ValueError("cannot sample empty range")
        return rng_range(&self._r, n)
