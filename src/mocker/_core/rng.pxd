# cython: language_level=3
"""C-level API of the Rust ``rand 0.9`` ``StdRng`` (ChaCha12) re-implementation.

Bit-exact with ``StdRng::seed_from_u64`` as used by the reference simulator
(spec Appendix A.1/A.2). All functions are ``noexcept nogil`` and operate on a
caller-owned struct (no allocation).
"""

from libc.stdint cimport uint32_t, uint64_t


cdef struct StdRngState:
    uint32_t key[8]      # ChaCha key: 8 words produced by the PCG32 seed expansion
    uint64_t counter     # 64-bit block counter of the next block to generate (words 12-13)
    uint32_t buf[64]     # 4 buffered ChaCha12 output blocks (16 words each), in block order
    uint32_t index       # next unread word in buf; 64 means "buffer exhausted"


# Seed like Rust's `StdRng::seed_from_u64(seed)`; the buffer starts empty.
cdef void rng_seed(StdRngState* r, uint64_t seed) noexcept nogil
# Next 32-bit word (`RngCore::next_u32`).
cdef uint32_t rng_next_u32(StdRngState* r) noexcept nogil
# Next 64-bit value (`RngCore::next_u64`: lo word | hi word << 32, straddling refills).
cdef uint64_t rng_next_u64(StdRngState* r) noexcept nogil
# Uniform f64 in [0, 1): `(next_u64 >> 11) * 2^-53` (rand 0.9 StandardUniform).
cdef double rng_next_f64(StdRngState* r) noexcept nogil
# `random_range(0..n)` for usize (rand 0.9 UniformUsize, Canon's widening-multiply method).
# n == 0 (an empty range, a panic in Rust) returns 0.
cdef uint64_t rng_range(StdRngState* r, uint64_t n) noexcept nogil
