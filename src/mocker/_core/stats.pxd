# cython: language_level=3
"""Streaming statistics used by the replay report (docs/core-sim.md §8, Appendix A.3/A.4).

* ``Welford``: streaming mean / population variance with exact min/max (ITL statistics).
* ``DDSketch``: ``ddsketchy``-compatible relative-error sketch (alpha = 0.001, 32768 bins per
  sign, dense arrays) used for ITL and per-user output-throughput percentiles.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.math cimport sqrt, INFINITY


cdef struct Welford:
    int64_t n            # number of samples added
    double mean          # running mean (Welford update)
    double m2            # running sum of squared deviations from the mean
    double min           # exact minimum (+inf when empty)
    double max           # exact maximum (-inf when empty)


cdef inline void welford_init(Welford* w) noexcept nogil:
    w.n = 0
    w.mean = 0.0
    w.m2 = 0.0
    w.min = INFINITY
    w.max = -INFINITY


cdef inline void welford_add(Welford* w, double x) noexcept nogil:
    cdef double delta
    w.n += 1
    delta = x - w.mean
    w.mean += delta / <double>w.n
    w.m2 += delta * (x - w.mean)
    if x < w.min:
        w.min = x
    if x > w.max:
        w.max = x


cdef inline double welford_mean(const Welford* w) noexcept nogil:
    return w.mean if w.n > 0 else 0.0


cdef inline double welford_std(const Welford* w) noexcept nogil:
    """Population standard deviation (divide by n); 0.0 when empty."""
    if w.n <= 0:
        return 0.0
    return sqrt(w.m2 / <double>w.n)


cdef inline double welford_min(const Welford* w) noexcept nogil:
    return w.min if w.n > 0 else 0.0


cdef inline double welford_max(const Welford* w) noexcept nogil:
    return w.max if w.n > 0 else 0.0


cdef enum:
    DDS_BINS = 32768     # bins per sign (dense key window [DDS_KEY_MIN, DDS_KEY_MIN + DDS_BINS))
    DDS_KEY_MIN = -16384 # smallest key held in its own bin (smaller keys collapse into it)


cdef struct DDSketch:
    double gamma         # 1 + 2*alpha/(1-alpha)
    double ln_gamma      # log1p(2*alpha/(1-alpha))
    double min_indexable # smallest |v| with its own key (f64::MIN_POSITIVE * gamma)
    int64_t count        # total number of added values (all buckets)
    int64_t zero_count   # values with |v| < min_indexable
    double single        # the first value added (returned by quantile when count == 1)
    int64_t* pos         # DDS_BINS counters for positive values, index = key - DDS_KEY_MIN
    int64_t* neg         # DDS_BINS counters for negative values (key of |v|)
    int64_t pos_lo       # smallest occupied index in pos (DDS_BINS when empty)
    int64_t pos_hi       # largest occupied index in pos (-1 when empty)
    int64_t neg_lo       # smallest occupied index in neg (DDS_BINS when empty)
    int64_t neg_hi       # largest occupied index in neg (-1 when empty)


# Allocate the bins (returns -1 on allocation failure, 0 otherwise).
cdef int ddsketch_init(DDSketch* sk) noexcept nogil
cdef void ddsketch_free(DDSketch* sk) noexcept nogil
cdef void ddsketch_add(DDSketch* sk, double v) noexcept nogil
# Quantile q in [0, 1] (ddsketchy rule, A.3); 0.0 when empty.
cdef double ddsketch_quantile(const DDSketch* sk, double q) noexcept nogil
# Report percentile p in [0, 100] (report rule of A.3); 0.0 when empty.
cdef double ddsketch_percentile(const DDSketch* sk, double p) noexcept nogil
