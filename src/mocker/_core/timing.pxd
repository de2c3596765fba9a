# Per-pass timing model (docs/core-sim.md §2): polynomial / fixed formulas and the
# nanosecond quantization the reference applies through Rust's Duration.
from libc.math cimport floor, fma
from libc.stdint cimport int64_t

cdef enum TimingKind:
    TIMING_POLYNOMIAL = 0
    TIMING_FIXED = 1

cdef struct TimingModel:
    int kind                 # TimingKind
    double fixed_prefill_ms  # fixed model: cost of any non-empty prefill batch
    double fixed_decode_ms   # fixed model: cost of any non-empty decode batch
    double prefill_ratio     # speedup_ratio (0 = unscaled)
    double decode_ratio      # speedup_ratio * decode_speedup_ratio (0 = unscaled)
    double capacity_tokens   # num_gpu_blocks * block_size (decode load denominator)


cdef inline int64_t dur_ns(double secs) noexcept nogil:
    # round_half_even(exact(secs) * 1e9); exact product via fma error term
    cdef double p = secs * 1e9
    cdef double err = fma(secs, 1e9, -p)
    cdef double n = floor(p)
    cdef double frac = (p - n) + err
    while frac < 0.0:
        n -= 1.0
        frac += 1.0
    while frac >= 1.0:
        n += 1.0
        frac -= 1.0
    if frac > 0.5 or (frac == 0.5 and (<int64_t>n) % 2 != 0):
        n += 1.0
    if n < 0.0:
        return 0
    return <int64_t>n


cdef inline double ns_secs(int64_t ns) noexcept nogil:
    return <double>(ns // 1000000000) + <double>(ns % 1000000000) / 1e9


cdef inline double modeled_ms(double raw_ms, double ratio) noexcept nogil:
    cdef int64_t d = dur_ns(raw_ms / 1000.0)
    if ratio > 0.0 and d > 0:
        d = dur_ns(ns_secs(d) / ratio)
    cdef double ms = ns_secs(d) * 1000.0
    return ns_secs(dur_ns(ms / 1000.0)) * 1000.0


cdef inline double poly_prefill_ms(int64_t n, int64_t isl_sum, int64_t pre_sum) noexcept nogil:
    if n <= 0:
        return 0.0
    cdef int64_t new_per_req = isl_sum // n - pre_sum // n
    if new_per_req <= 0:
        return 0.0
    cdef double t = <double>(n * new_per_req)
    return 4.209989e-07 * (t * t) + 1.518344e-02 * t + 1.650142e+01


cdef inline double poly_decode_ms(double active_tokens, double capacity) noexcept nogil:
    cdef double p = 1.0
    if capacity > 0.0:
        p = active_tokens / capacity
        if p > 1.0:
            p = 1.0
    cdef double v = -25.74 * (p * p) + 54.01 * p + 5.74
    return v if v > 1.0 else 1.0


cdef inline double prefill_phase_ms(TimingModel* tm, int64_t n, int64_t isl_sum, int64_t pre_sum) noexcept nogil:
    cdef double raw
    if n <= 0 or isl_sum // n - pre_sum // n <= 0:
        return 0.0              # nothing new to compute (e.g. fully cached zero-output requests)
    if tm.kind == TIMING_FIXED:
        raw = tm.fixed_prefill_ms
    else:
        raw = poly_prefill_ms(n, isl_sum, pre_sum)
    if raw == 0.0:
        return 0.0
    return modeled_ms(raw, tm.prefill_ratio)


cdef inline double decode_phase_ms(TimingModel* tm, int64_t n_decode, double active_tokens) noexcept nogil:
    cdef double raw
    if n_decode <= 0:
        return 0.0
    if tm.kind == TIMING_FIXED:
        raw = tm.fixed_decode_ms
    else:
        raw = poly_decode_ms(active_tokens, tm.capacity_tokens)
    if raw == 0.0:
        return 0.0
    return modeled_ms(raw, tm.decode_ratio)
