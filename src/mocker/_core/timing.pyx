# cython: language_level=3
"""Python-visible wrappers over the inline timing formulas (tests, live mode)."""


def quantize_ms(double raw_ms, double ratio=1.0):
    """Quantize a raw duration to ns as the reference does, dividing by ``ratio`` (0 = unscaled)."""
    return modeled_ms(raw_ms, ratio)


def polynomial_prefill_ms(long long n, long long isl_sum, long long prefix_sum):
    return poly_prefill_ms(n, isl_sum, prefix_sum)


def polynomial_decode_ms(double active_tokens, double capacity_tokens):
    return poly_decode_ms(active_tokens, capacity_tokens)


def duration_ns(double secs):
    return dur_ns(secs)
