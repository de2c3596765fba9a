# cython: language_level=3
"""Report statistics: Welford, DDSketch (A.3), exact nearest-rank percentiles (A.4)."""

from libc.stdint cimport int64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset
from libc.math cimport log, log1p, exp, ceil, floor, round, sqrt, fabs, isnan

import numpy as np

cdef double _ALPHA = 0.001
cdef double _F64_MIN_POSITIVE = 2.2250738585072014e-308


# ---------------------------------------------------------------------------------------------
# DDSketch
# ---------------------------------------------------------------------------------------------

cdef int ddsketch_init(DDSketch* sk) noexcept nogil:
    sk.gamma = 1.0 + 2.0 * _ALPHA / (1.0 - _ALPHA)
    sk.ln_gamma = log1p(2.0 * _ALPHA / (1.0 - _ALPHA))
    sk.min_indexable = _F64_MIN_POSITIVE * sk.gamma
    sk.count = 0
    sk.zero_count = 0
    sk.single = 0.0
    sk.pos_lo = DDS_BINS
    sk.pos_hi = -1
    sk.neg_lo = DDS_BINS
    sk.neg_hi = -1
    sk.pos = <int64_t*>calloc(DDS_BINS, sizeof(int64_t))
    sk.neg = <int64_t*>calloc(DDS_BINS, sizeof(int64_t))
    if sk.pos == NULL or sk.neg == NULL:
        free(sk.pos)
        free(sk.neg)
        sk.pos = NULL
        sk.neg = NULL
        return -1
    return 0


cdef void ddsketch_free(DDSketch* sk) noexcept nogil:
    free(sk.pos)
    free(sk.neg)
    sk.pos = NULL
    sk.neg = NULL


cdef inline int64_t _bin_index(const DDSketch* sk, double mag) noexcept nogil:
    cdef double key = ceil(log(mag) / sk.ln_gamma)
    cdef int64_t idx
    if key < <double>DDS_KEY_MIN:
        return 0
    if key >= <double>(DDS_KEY_MIN + DDS_BINS):
        return DDS_BINS - 1
    idx = <int64_t>key - DDS_KEY_MIN
    return idx


cdef void ddsketch_add(DDSketch* sk, double v) noexcept nogil:
    cdef int64_t idx
    if isnan(v):
        return
    if sk.count == 0:
        sk.single = v
    sk.count += 1
    if v >= sk.min_indexable:
        idx = _bin_index(sk, v)
        sk.pos[idx] += 1
        if idx < sk.pos_lo:
            sk.pos_lo = idx
        if idx > sk.pos_hi:
            sk.pos_hi = idx
    elif v <= -sk.min_indexable:
        idx = _bin_index(sk, -v)
        sk.neg[idx] += 1
        if idx < sk.neg_lo:
            sk.neg_lo = idx
        if idx > sk.neg_hi:
            sk.neg_hi = idx
    else:
        sk.zero_count += 1


cdef inline double _bin_value(const DDSketch* sk, int64_t idx) noexcept nogil:
    cdef double key = <double>(idx + DDS_KEY_MIN)
    # bucket representative; the factor is computed first (verified bit-exact against 1.6.1:
    # `exp(k*lnγ) * 2 / (1+γ)` is one ulp off in some cases)
    return exp(key * sk.ln_gamma) * (2.0 / (1.0 + sk.gamma))


cdef double ddsketch_quantile(const DDSketch* sk, double q) noexcept nogil:
    cdef int64_t rank, cum, i
    if sk.count == 0:
        return 0.0
    if sk.count == 1:
        return sk.single
    if q < 0.0:
        q = 0.0
    elif q > 1.0:
        q = 1.0
    rank = <int64_t>floor(q * <double>(sk.count - 1))
    cum = 0
    # negative values: largest magnitude first
    i = sk.neg_hi
    while i >= sk.neg_lo:
        cum += sk.neg[i]
        if cum > rank:
            return -_bin_value(sk, i)
        i -= 1
    cum += sk.zero_count
    if cum > rank:
        return 0.0
    i = sk.pos_lo
    while i <= sk.pos_hi:
        cum += sk.pos[i]
        if cum > rank:
            return _bin_value(sk, i)
        i += 1
    # unreachable for a consistent sketch; return the largest bucket
    if sk.pos_hi >= 0:
        return _bin_value(sk, sk.pos_hi)
    return 0.0


cdef double ddsketch_percentile(const DDSketch* sk, double p) noexcept nogil:
    cdef int64_t span
    cdef double r, q
    if sk.count == 0:
        return 0.0
    span = sk.count - 1
    r = round(<double>span * p / 100.0)
    if span == 0 or r >= <double>span:
        q = 1.0
    else:
        q = (r + 0.5) / <double>span
    return ddsketch_quantile(sk, q)


# ---------------------------------------------------------------------------------------------
# Exact statistics (TTFT / TTST / TPOT / E2E)
# ---------------------------------------------------------------------------------------------

cdef inline double _exact_pct(const double[::1] s, double p) noexcept nogil:
    cdef Py_ssize_t n = s.shape[0]
    cdef double idx
    cdef Py_ssize_t i
    if n == 0:
        return 0.0
    idx = round(<double>(n - 1) * p / 100.0)     # round half away from zero
    if idx < 0.0:
        idx = 0.0
    i = <Py_ssize_t>idx
    if i > n - 1:
        i = n - 1
    return s[i]


def exact_percentile(sorted_values, double p):
    """``sorted[min(n-1, round_half_away((n-1)*p/100))]`` (A.4); 0.0 for empty input."""
    cdef const double[::1] s = np.ascontiguousarray(sorted_values, dtype=np.float64)
    return _exact_pct(s, p)


_EXACT_KEYS = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")


def summarize_exact(values):
    """Report statistics of a per-request sample (docs/core-sim.md §8): mean = left-to-right Σ/n; population std
    by a second sequential pass, sqrt(Σ(x-mean)²/n); exact min/max; nearest-rank percentiles
    (A.4). All 0.0 for empty input.

    Against 1.6.1 the mean is bit-exact (values in arrival order); the std is within ~2e-14
    relative (no accumulation order/formula tried reproduced every bit; two-pass was closest,
    and unlike Welford it also matches on near-constant samples where std is ulp noise)."""
    cdef const double[::1] v = np.ascontiguousarray(values, dtype=np.float64)
    cdef Py_ssize_t n = v.shape[0], i
    cdef double total = 0.0, mean, d, sq = 0.0
    if n == 0:
        return {k: 0.0 for k in _EXACT_KEYS}
    with nogil:
        for i in range(n):
            total += v[i]
        mean = total / <double>n
        for i in range(n):
            d = v[i] - mean
            sq += d * d
    cdef const double[::1] s = np.sort(np.asarray(v), kind="stable")
    return {
        "mean": mean,
        "min": s[0],
        "max": s[n - 1],
        "median": _exact_pct(s, 50.0),
        "p75": _exact_pct(s, 75.0),
        "p90": _exact_pct(s, 90.0),
        "p95": _exact_pct(s, 95.0),
        "p99": _exact_pct(s, 99.0),
        "std": sqrt(sq / <double>n),
    }


def welford_summary(values):
    """Streaming (Welford) mean / population std / min / max of ``values`` in order (the ITL and
    per-user-throughput statistics; bit-exact vs 1.6.1 when fed in token-emission order)."""
    cdef const double[::1] v = np.ascontiguousarray(values, dtype=np.float64)
    cdef Py_ssize_t i
    cdef Welford w
    welford_init(&w)
    with nogil:
        for i in range(v.shape[0]):
            welford_add(&w, v[i])
    return {"count": w.n, "mean": welford_mean(&w), "std": welford_std(&w),
            "min": welford_min(&w), "max": welford_max(&w)}


cdef class Sketch:
    """Python wrapper of the C DDSketch (tests / diagnostics)."""
    cdef DDSketch _sk

    def __cinit__(self):
        if ddsketch_init(&self._sk) != 0:
            raise MemoryError()

    def __dealloc__(self):
        ddsketch_free(&self._sk)

    def add(self, double v):
        ddsketch_add(&self._sk, v)

    def add_many(self, values):
        cdef const double[::1] a = np.ascontiguousarray(values, dtype=np.float64)
        cdef Py_ssize_t i
        with nogil:
            for i in range(a.shape[0]):
                ddsketch_add(&self._sk, a[i])

    def quantile(self, double q):
        return ddsketch_quantile(&self._sk, q)

    def percentile(self, double p):
        return ddsketch_percentile(&self._sk, p)

    @property
    def count(self):
        return self._sk.count
