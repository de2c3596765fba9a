"""Timing model constants and quantization (docs/core-sim.md §2) against reference values."""
import pytest

from mocker._core import timing


def test_single_request_ttft_and_ttst():
    # R1: TTFT = pf(1000) quantized, TTST = dc(1001) quantized (reference values)
    assert timing.quantize_ms(timing.polynomial_prefill_ms(1, 1000, 0)) == 32.105859
    ttft = timing.quantize_ms(timing.polynomial_prefill_ms(1, 1000, 0))
    dc = timing.quantize_ms(timing.polynomial_decode_ms(1001, 16384 * 64))
    assert dc == 5.791536
    assert (ttft + dc) - ttft == 5.791536000000001   # TTST as the reference reports it


def test_floor_divisions_of_mean_isl():
    # 9 chunks totalling 8192 tokens: T = 9 * (8192 // 9) = 8190
    assert timing.polynomial_prefill_ms(9, 8192, 0) == timing.polynomial_prefill_ms(1, 8190, 0)
    assert timing.polynomial_prefill_ms(0, 0, 0) == 0.0
    assert timing.polynomial_prefill_ms(2, 100, 100) == 0.0


def test_decode_floor_and_saturation():
    assert timing.polynomial_decode_ms(10 ** 9, 1000) == pytest.approx(-25.74 + 54.01 + 5.74)
    assert timing.polynomial_decode_ms(0, 1000) == 5.74


def test_speedup_ratio_zero_means_unscaled():
    raw = timing.polynomial_prefill_ms(1, 1000, 0)
    assert timing.quantize_ms(raw, 0.0) == timing.quantize_ms(raw, 1.0)
    assert timing.quantize_ms(raw, 2.0) == pytest.approx(32.105859 / 2, abs=1e-6)


def test_nanosecond_round_half_even():
    assert timing.duration_ns(1.5e-9) == 2
    assert timing.duration_ns(2.5e-9) == 2
    assert timing.duration_ns(0.0321058589) == 32105859
