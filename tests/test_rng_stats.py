"""RNG (rand 0.9 StdRng / ChaCha12), report statistics and synthetic-workload tests.

Every golden number below was measured on the reference ``ai-dynamo-runtime==1.6.1``
(``run_mocker_synthetic_trace_replay`` with ``capture_per_request=True``); the reference is NOT
needed to run these tests.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mocker._core import rng, stats


# -------------------------------------------------------------------------------------------
# Golden data from the reference
# -------------------------------------------------------------------------------------------

# per-request `arrival_time_ms` (request order) of synthetic Poisson runs: seed_rate -> (first 10,
# value of request 299)
GOLDEN_ARRIVALS = {
    (42, 10.0): ([0.0, 74.77246176406965, 153.01953951913882, 254.207536844964,
                  306.2785951560703, 309.7732343327897, 363.38020105943315, 497.1018354595163,
                  686.3161441140516, 700.3894577514478], 28008.580875678654),
    (42, 20.0): ([0.0, 37.38623088203482, 76.50976975956941, 127.103768422482,
                  153.13929757803515, 154.88661716639484, 181.69010052971657,
                  248.55091772975814, 343.1580720570258, 350.1947288757239], 14004.290437839327),
    (7, 10.0): ([0.0, 3.0786437168091014, 39.76362317455055, 55.153612583970286,
                 133.35520869913557, 165.16896241890325, 467.03078507699377, 486.3239451834497,
                 515.9983714803664, 529.376724010812], 28838.74676826006),
    (7, 20.0): ([0.0, 1.5393218584045507, 19.881811587275276, 27.576806291985143,
                 66.67760434956779, 82.58448120945162, 233.51539253849688, 243.16197259172486,
                 257.9991857401832, 264.688362005406], 14419.37338413003),
    (12345, 0.37): ([0.0, 986.9885454380033, 6788.529341569818, 8926.26640780532,
                     9822.111937286485, 11410.54000892919, 16825.626183527773,
                     19630.034594710894, 22056.35117806134, 22780.47767559256],
                    831637.3266340953),
    (2**63 + 5, 1e6): ([0.0, 4.755438684414878e-05, 0.0008193413671256082,
                        0.0011501452671638427, 0.0027684425996842856, 0.004699887655620372,
                        0.005289305661701609, 0.007472818479761821, 0.007684598696699741,
                        0.00897575854910318], 0.28502865655908405),
}

# Prefix groups (G=50, 400 sessions, sequential arrivals): indices of the sessions whose
# shared prefix was NOT reused, i.e. first appearance of their group (reference
# `reused_input_tokens == 0`); all other sessions reused the whole shared prefix.
GOLDEN_E1_FIRST_APPEARANCES = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 18, 19, 20, 21, 22, 23, 25, 26, 27, 28,
    31, 34, 37, 38, 39, 40, 43, 48, 50, 51, 53, 61, 63, 71, 73, 74, 77, 98, 101, 124, 129, 131,
    134, 137, 206,
]

# 60 requests, ISL 700, OSL 2, request_rate 50, arrival_seed 3, default engine: each request has
# exactly one ITL sample (listed in token-emission order) and the summary's ITL statistics are
# computed from exactly these samples.
GOLDEN_ITL = [
    68.091779, 80.68494099999998, 80.68494099999998, 80.68494099999998,
    80.68494099999998, 44.503641999999985, 44.503641999999985, 44.503641999999985,
    44.503641999999985, 44.503641999999985, 33.148285000000016, 33.148285000000016,
    33.11221299999997, 33.112213, 44.359489999999994, 44.395561999999984,
    44.395561999999984, 33.14828499999999, 33.14828499999999, 44.359489999999994,
    56.055417000000034, 56.055417000000034, 33.18433499999992, 33.18433499999992,
    33.18433499999992, 33.112213, 68.09177900000009, 33.220361000000025,
    33.220361000000025, 33.220361000000025, 33.220361000000025, 44.35949000000005,
    33.14828499999999, 33.14828499999999, 44.35949000000005, 56.055417000000034,
    56.055417000000034, 44.43161199999997, 44.43161199999997, 44.43161199999997,
    33.1482850000001, 33.1482850000001, 33.112213, 5.776096000000052,
    33.11221300000011, 5.776096000000052, 33.11221300000011, 44.35949000000005,
    33.14828499999999, 33.14828499999999, 5.776096000000052, 5.776096000000052,
    44.35949000000005, 33.14828499999999, 33.14828499999999, 44.35949000000005,
    44.39556199999993, 44.39556199999993, 5.812167999999929, 5.812167999999929,
]

GOLDEN_TTFT = [
    27.336117, 93.42686564624199, 84.73451712843368, 80.67149183181289,
    69.551788206194, 144.73383054178993, 134.3709014950776, 125.59289667483344,
    105.01975916254874, 91.92228058747068, 70.87974324996384, 56.12270327746734,
    73.51124791890828, 51.60156546667821, 34.70493602765663, 75.6520488414464,
    56.690775610716685, 73.08853709577471, 49.07370229978483, 35.47456364626595,
    72.07156441444482, 54.81770082742679, 65.99680845159088, 61.857121907621945,
    56.11742107420173, 54.69636258039952, 59.13967747617096, 99.64517748046285,
    81.43576844883603, 81.07277432952958, 69.58664214484816, 56.563105973423944,
    68.63074313755021, 54.93073849967243, 63.21258956683266, 72.26598660568982,
    68.96075965570503, 88.43539569670804, 71.17618269019613, 66.86078679205957,
    85.03413874271416, 82.02178896234363, 70.5665200927042, 52.59952409218715,
    27.336116999999945, 44.98525931443919, 28.546186003075718, 50.53056498357091,
    77.39140140849781, 54.73234027610374, 35.37256934899733, 29.07387354138791,
    27.33611700000006, 58.57476331791554, 52.61273537954048, 43.3817171255007,
    65.81804263590561, 54.05559225505726, 69.51031765181028, 61.62073112743337,
]

GOLDEN_SUMMARY = {
    'mean_itl_ms': 39.84454301666666,
    'std_itl_ms': 17.220914873355714,
    'min_itl_ms': 5.776096000000052,
    'max_itl_ms': 80.68494099999998,
    'median_itl_ms': 33.2149696597692,
    'p75_itl_ms': 44.3894027582256,
    'p90_itl_ms': 56.09242868303639,
    'p95_itl_ms': 80.72117752143167,
    'p99_itl_ms': 80.72117752143167,
    'mean_ttft_ms': 66.21223132869372,
    'std_ttft_ms': 23.977069432657423,
    'min_ttft_ms': 27.336116999999945,
    'max_ttft_ms': 144.73383054178993,
    'median_ttft_ms': 65.99680845159088,
    'p75_ttft_ms': 75.6520488414464,
    'p90_ttft_ms': 91.92228058747068,
    'p95_ttft_ms': 105.01975916254874,
    'p99_ttft_ms': 134.3709014950776,
    'mean_output_token_throughput_per_user': 39.47858389032429,
    'std_output_token_throughput_per_user': 44.77256426165339,
    'min_output_token_throughput_per_user': 12.393886487442561,
    'max_output_token_throughput_per_user': 173.12731644349245,
    'median_output_token_throughput_per_user': 30.114314846514603,
    'p75_output_token_throughput_per_user': 30.17460376512624,
    'p90_output_token_throughput_per_user': 30.17460376512624,
    'p95_output_token_throughput_per_user': 173.29601789120693,
    'p99_output_token_throughput_per_user': 173.29601789120693,
}

# -------------------------------------------------------------------------------------------
# StdRng
# -------------------------------------------------------------------------------------------

def test_std_rng_raw_outputs_seed_42():
    # derived from A.1 (consistent with every measured arrival time below)
    r = rng.StdRng(42)
    assert [r.next_u32() for _ in range(6)] == [
        0x222724A2, 0x86CC7763, 0x3FAD517D, 0x8AF00A13, 0xDE5134D1, 0xA2EF6071]
    r = rng.StdRng(42)
    assert [r.next_u64() for _ in range(3)] == [
        0x86CC7763222724A2, 0x8AF00A133FAD517D, 0xA2EF6071DE5134D1]
    r = rng.StdRng(0)
    assert [r.next_u32() for _ in range(4)] == [0xCD2C6F7F, 0xBB2A3FB2, 0x8E27697B, 0xC6017C94]


def test_std_rng_u64_straddles_buffer_refill():
    a = rng.StdRng(42)
    words = [a.next_u32() for _ in range(130)]
    b = rng.StdRng(42)
    for _ in range(63):
        b.next_u32()
    # one word left: it is the low half, the first word of the next 4-block buffer the high half
    assert b.next_u64() == words[63] | (words[64] << 32)
    assert b.next_u32() == words[65]
    c = rng.StdRng(42)
    vals = [c.next_u64() for _ in range(64)]      # 128 words, aligned
    assert vals == [words[2 * i] | (words[2 * i + 1] << 32) for i in range(64)]


def test_std_rng_f64():
    a = rng.StdRng(7)
    b = rng.StdRng(7)
    for _ in range(200):
        f = a.next_f64()
        assert f == (b.next_u64() >> 11) * 2.0 ** -53
        assert 0.0 <= f < 1.0


def _range_model(words, n):
    """A.2 on a list of u32 words (consumed from the front)."""
    x = words.pop(0)
    m = x * n
    hi, lo = m >> 32, m & 0xFFFFFFFF
    if lo > (1 << 32) - n:
        x2 = words.pop(0)
        hi += (lo + ((x2 * n) >> 32)) >= (1 << 32)
    return hi


@pytest.mark.parametrize("n", [1, 2, 3, 7, 50, 1000, 3000, 2**31 + 11, 2**32 - 1])
def test_std_rng_range_u32_path(n):
    r = rng.StdRng(1234)
    words_src = rng.StdRng(1234)
    words = [words_src.next_u32() for _ in range(3000)]
    for _ in range(1000):
        v = r.range(n)
        assert 0 <= v < n
        assert v == _range_model(words, n)


def test_std_rng_range_large():
    r = rng.StdRng(42)
    assert [r.range(2**40 + 3) for _ in range(3)] == [578955993891, 596732678977, 699800777184]
    assert [r.range(2**32) for _ in range(2)] == [4252381362, 1743334776]
    with pytest.raises(ValueError):
        r.range(0)


@pytest.mark.parametrize("key", list(GOLDEN_ARRIVALS))
def test_poisson_arrivals_golden(key):
    seed, rate = key
    head, at299 = GOLDEN_ARRIVALS[key]
    a = rng.poisson_arrivals(seed, rate, 300)
    assert a.dtype == np.float64 and a.shape == (300,)
    assert a[:10].tolist() == head             # bit-exact
    assert a[299] == at299


def test_poisson_arrivals_spec_values():
    a = rng.poisson_arrivals(42, 10.0, 6)
    assert np.round(a, 6).tolist() == [0.0, 74.772462, 153.01954, 254.207537, 306.278595,
                                       309.773234]


def test_poisson_arrivals_edge_cases():
    assert rng.poisson_arrivals(42, 10.0, 0).shape == (0,)
    assert rng.poisson_arrivals(42, 10.0, 1).tolist() == [0.0]
    with pytest.raises(ValueError):
        rng.poisson_arrivals(42, 0.0, 3)


def test_prefix_groups_golden():
    g = rng.prefix_groups(400, 50)
    assert g.dtype == np.int64
    assert g[:20].tolist() == [6, 26, 12, 27, 43, 31, 49, 20, 48, 1, 30, 20, 17, 36, 9, 42, 31,
                               6, 23, 0]
    seen, first = set(), []
    for i, x in enumerate(g.tolist()):
        if x not in seen:
            first.append(i)
        seen.add(x)
    assert first == GOLDEN_E1_FIRST_APPEARANCES
    assert rng.prefix_groups(10, 3).tolist() == [0, 1, 0, 1, 2, 1, 2, 1, 2, 0]
    assert set(rng.prefix_groups(1000, 1).tolist()) == {0}


# -------------------------------------------------------------------------------------------
# Exact percentiles and summaries
# -------------------------------------------------------------------------------------------

def test_exact_percentile_rule():
    s = np.arange(6, dtype=np.float64) * 10.0      # n=6: (n-1)*0.5 = 2.5 -> 3 (half away)
    assert stats.exact_percentile(s, 50) == 30.0
    assert stats.exact_percentile(s, 0) == 0.0
    assert stats.exact_percentile(s, 100) == 50.0
    assert stats.exact_percentile(s, 90) == 50.0   # 4.5 -> 5
    assert stats.exact_percentile(s, 89.9) == 40.0  # 4.495 -> 4
    s4 = np.array([1.0, 2.0, 3.0, 4.0])            # 1.5 -> 2 (no interpolation)
    assert stats.exact_percentile(s4, 50) == 3.0
    assert stats.exact_percentile(np.array([7.5]), 99) == 7.5
    assert stats.exact_percentile(np.array([], dtype=np.float64), 50) == 0.0


def test_summarize_exact_golden():
    e = stats.summarize_exact(np.array(GOLDEN_TTFT))
    for k in ("mean", "min", "max", "median", "p75", "p90", "p95", "p99"):
        assert e[k] == GOLDEN_SUMMARY[f"{k}_ttft_ms"], k
    # std: reference accumulation not reproduced bit for bit (~1e-14 relative)
    assert e["std"] == pytest.approx(GOLDEN_SUMMARY["std_ttft_ms"], rel=1e-12, abs=0)


def test_summarize_exact_empty_and_single():
    assert stats.summarize_exact(np.array([], dtype=np.float64)) == {
        k: 0.0 for k in ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")}
    one = stats.summarize_exact(np.array([3.25]))
    assert one["mean"] == one["median"] == one["p99"] == 3.25 and one["std"] == 0.0


def test_summarize_exact_near_constant_sample():
    # reference: std of [19.554948, 19.554947999999968] is ulp noise 1.6085595323533783e-14
    e = stats.summarize_exact(np.array([19.554948, 19.554947999999968]))
    assert e["std"] == 1.6085595323533783e-14


# -------------------------------------------------------------------------------------------
# Welford + DDSketch (ITL statistics)
# -------------------------------------------------------------------------------------------

def test_itl_statistics_golden():
    w = stats.welford_summary(np.array(GOLDEN_ITL))
    for k in ("mean", "std", "min", "max"):
        assert w[k] == GOLDEN_SUMMARY[f"{k}_itl_ms"], k          # bit-exact
    sk = stats.Sketch()
    for v in GOLDEN_ITL:
        sk.add(v)
    assert sk.count == len(GOLDEN_ITL)
    for name, p in (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert sk.percentile(p) == GOLDEN_SUMMARY[f"{name}_itl_ms"], name


def test_throughput_per_user_golden():
    tp = [1000.0 / v for v in GOLDEN_ITL if v > 0]
    w = stats.welford_summary(np.array(tp))
    for k in ("mean", "std", "min", "max"):
        assert w[k] == GOLDEN_SUMMARY[f"{k}_output_token_throughput_per_user"], k
    sk = stats.Sketch()
    sk.add_many(np.array(tp))
    for name, p in (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert sk.percentile(p) == GOLDEN_SUMMARY[f"{name}_output_token_throughput_per_user"]


def test_sketch_r1_median_bucket():
    # spec A.3: median ITL of R1 = 5.79502670849248 (bucket key 879)
    sk = stats.Sketch()
    sk.add_many(np.array([5.7950, 5.7951, 5.7952, 5.7953]))
    assert sk.percentile(50) == 5.79502670849248
    # the representative is exp(k*lnγ) * (2/(1+γ)); `* 2 / (1+γ)` is one ulp off for key 1109
    g = 1.0 + 0.002 / 0.999
    lg = math.log1p(0.002 / 0.999)
    sk2 = stats.Sketch()
    sk2.add_many(np.array([math.exp(1108.5 * lg)] * 3))
    assert sk2.percentile(50) == math.exp(1109 * lg) * (2.0 / (1.0 + g))


def test_sketch_percentile_rules():
    sk = stats.Sketch()
    assert sk.count == 0 and sk.percentile(50) == 0.0
    sk.add(3.14159)
    assert sk.percentile(50) == 3.14159            # single value returned as is
    assert sk.percentile(0) == 3.14159
    sk.add(100.0)
    lo, hi = sk.percentile(0), sk.percentile(50)
    # span=1: p=50 -> round(0.5)=1 >= span -> q=1 -> top bucket
    assert hi == sk.percentile(100)
    assert abs(hi - 100.0) <= 1e-3 * 100.0 and abs(lo - 3.14159) <= 1e-3 * 3.14159
    z = stats.Sketch()
    z.add_many(np.array([0.0, 0.0, 0.0, 5.0]))     # zero bucket first
    assert z.percentile(50) == 0.0
    assert z.percentile(100) == pytest.approx(5.0, rel=1e-3)


# -------------------------------------------------------------------------------------------
# Property tests
# -------------------------------------------------------------------------------------------

_floats = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(_floats, min_size=1, max_size=300))
def test_welford_matches_numpy(xs):
    a = np.array(xs)
    w = stats.welford_summary(a)
    scale = float(np.max(np.abs(a)))
    assert w["count"] == len(xs)
    assert w["mean"] == pytest.approx(float(np.mean(a)), rel=1e-12, abs=1e-12 * scale)
    assert w["std"] == pytest.approx(float(np.std(a)), rel=1e-12, abs=1e-12 * scale)
    assert w["min"] == float(np.min(a)) and w["max"] == float(np.max(a))


@settings(max_examples=200, deadline=None)
@given(st.lists(_floats, min_size=1, max_size=300))
def test_summarize_exact_matches_numpy(xs):
    a = np.array(xs)
    e = stats.summarize_exact(a)
    s = np.sort(a)
    scale = float(np.max(np.abs(a)))
    assert e["mean"] == pytest.approx(float(np.mean(a)), rel=1e-12, abs=1e-12 * scale)
    assert e["std"] == pytest.approx(float(np.std(a)), rel=1e-12, abs=1e-12 * scale)
    n = len(xs)
    for k, p in (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99)):
        x = (n - 1) * p / 100.0
        idx = min(n - 1, int(math.floor(x + 0.5)))
        assert e[k] == s[idx]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-6, max_value=1e9), min_size=1, max_size=400),
       st.sampled_from([0.0, 1.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0]))
def test_sketch_percentiles_close_to_exact(xs, p):
    sk = stats.Sketch()
    sk.add_many(np.array(xs))
    exact = stats.exact_percentile(np.sort(np.array(xs)), p)
    assert sk.percentile(p) == pytest.approx(exact, rel=1e-3 + 1e-12)


# -------------------------------------------------------------------------------------------
# Synthetic workload
# -------------------------------------------------------------------------------------------

def _syn():
    from mocker.replay import synthetic
    return synthetic


def _block_ids(w, i, bs):
    """Request ``i``'s prompt of a synthetic Workload as one id per engine block."""
    from mocker.replay.workload import RUN_RANGE
    ids = []
    for k in range(int(w.run_off[i]), int(w.run_off[i + 1])):
        assert w.run_kind[k] == RUN_RANGE and w.run_start[k] == bs
        ids += [int(w.run_v[k]) + j for j in range(-(-int(w.run_n[k]) // bs))]
    return ids


def test_synthetic_poisson_and_layout():
    syn = _syn()
    w = syn.build_synthetic_workload(1000, 100, 300, 64, request_rate=10.0)
    assert w.arrival_ms[:10].tolist() == GOLDEN_ARRIVALS[(42, 10.0)][0]
    assert w.session_id.tolist() == list(range(300)) and not w.session_mode
    assert (w.input_len == 1000).all() and (w.output_len == 100).all()
    wl = syn.synthetic_workload(1000, 100, 300, 64, request_rate=10.0)
    assert wl.n == 300 and (wl.input_length == 1000).all()
    assert wl.head_arrival_ms[:10].tolist() == GOLDEN_ARRIVALS[(42, 10.0)][0]
    assert (wl.session_index == -1).all() and (wl.turn_index == -1).all()
    assert _block_ids(wl, 0, 64) == list(range(1, 17))      # 16 blocks, one run
    assert wl.run_off.tolist()[:3] == [0, 1, 2]
    every = [b for i in range(300) for b in _block_ids(wl, i, 64)]
    assert len(every) == 300 * 16 and len(set(every)) == 300 * 16


def test_synthetic_constant_interval_goes_through_a_rate():
    syn = _syn()
    # reference arrivals: 1000/(1000/d) accumulated sequentially
    w = syn.build_synthetic_workload(4, 1, 3, 4, arrival_interval_ms=12345678.5)
    assert w.arrival_ms.tolist() == [0.0, 12345678.5, 24691357.0]
    w = syn.build_synthetic_workload(4, 1, 4, 4, arrival_interval_ms=0.1)
    assert w.arrival_ms.tolist() == [0.0, 0.1, 0.2, 0.30000000000000004]
    assert syn.build_synthetic_workload(4, 1, 3, 4, arrival_interval_ms=0.0).arrival_ms.tolist() \
        == [0.0, 0.0, 0.0]
    c = syn.build_synthetic_workload(4, 1, 3, 4, replay_concurrency=2)
    assert np.isnan(c.arrival_ms).all() and c.replay_concurrency == 2


def test_synthetic_arrivals_beyond_the_horizon_are_refused():
    from mocker.errors import ReplayError
    syn = _syn()
    with pytest.raises(ReplayError, match="arrival_interval_ms 123456789012.5 puts the last of 3 arrivals"):
        syn.build_synthetic_workload(4, 1, 3, 4, arrival_interval_ms=123456789012.5)
    with pytest.raises(ReplayError, match="request_rate 1e-300 .*beyond the simulation horizon"):
        syn.build_synthetic_workload(4, 1, 3, 4, request_rate=1e-300)


@pytest.mark.parametrize("isl,bs,ratio,expected_shared", [
    (20, 4, 0.5, 3),      # 2.5 -> 3 (half away from zero)
    (10, 4, 0.5, 2),      # nb=3: 1.5 -> 2 blocks (block-based, not token-based)
    (40, 4, 0.25, 3),     # 2.5 -> 3
    (40, 4, 0.05, 1),     # 0.5 -> 1
    (40, 4, 1.0, 10),
    (40, 4, 5e-324, 0),
])
def test_synthetic_shared_prefix_rounding(isl, bs, ratio, expected_shared):
    syn = _syn()
    w = syn.build_synthetic_workload(isl, 1, 5, bs, arrival_interval_ms=1000.0,
                                     shared_prefix_ratio=ratio, num_prefix_groups=1)
    assert w.shared_blocks == expected_shared
    wl = syn.synthetic_workload(isl, 1, 5, bs, arrival_interval_ms=1000.0,
                                shared_prefix_ratio=ratio, num_prefix_groups=1)
    blocks = [_block_ids(wl, i, bs) for i in range(5)]
    # one group: every session shares exactly its first `expected_shared` blocks
    for b in blocks[1:]:
        assert b[:expected_shared] == blocks[0][:expected_shared]
    rest = [x for b in blocks for x in b[expected_shared:]]
    assert len(rest) == len(set(rest)) and not set(rest) & set(blocks[0][:expected_shared])


def test_synthetic_groups_sessions_and_turns():
    syn = _syn()
    w = syn.build_synthetic_workload(40, 1, 100, 4, arrival_interval_ms=1000.0,
                                     shared_prefix_ratio=0.5, num_prefix_groups=30,
                                     turns_per_session=3, inter_turn_delay_ms=5.0)
    assert w.session_mode and w.num_requests == 300 and w.turns_per_session == 3
    assert w.turn_index[:6].tolist() == [0, 1, 2, 0, 1, 2]
    assert w.arrival_ms[0] == 0.0 and np.isnan(w.arrival_ms[1]) and w.arrival_ms[3] == 1000.0
    assert w.prefix_group.tolist() == rng.prefix_groups(100, 30).tolist()
    wl = syn.synthetic_workload(40, 1, 100, 4, arrival_interval_ms=1000.0,
                                shared_prefix_ratio=0.5, num_prefix_groups=30,
                                turns_per_session=3, inter_turn_delay_ms=5.0)
    assert wl.session_id(0) == "session_0" and wl.session_id(4) == "session_1"
    assert wl.turn_index[:6].tolist() == [0, 1, 2, 0, 1, 2]
    assert wl.next_turn[:4].tolist() == [1, 2, -1, 4] and wl.delay_ms[1] == 5.0
    blocks = [_block_ids(wl, i, 4) for i in range(300)]
    groups = w.prefix_group
    for i in range(300):
        for j in range(300):
            same_group = groups[i // 3] == groups[j // 3]
            assert (blocks[i][:5] == blocks[j][:5]) == bool(same_group)
    # the unique part: fresh for every turn of every session
    rest = [x for b in blocks for x in b[5:]]
    assert len(rest) == len(set(rest)) == 300 * 5
    # independent of arrival seed / mode
    w7 = syn.build_synthetic_workload(40, 1, 100, 4, request_rate=3.0, arrival_seed=7,
                                      shared_prefix_ratio=0.5, num_prefix_groups=30)
    assert (w7.prefix_group == w.prefix_group).all()


def test_synthetic_no_sharing_without_groups():
    syn = _syn()
    w = syn.build_synthetic_workload(40, 1, 5, 4, arrival_interval_ms=1.0,
                                     shared_prefix_ratio=0.5, num_prefix_groups=0)
    assert w.shared_blocks == 0
    wl = syn.synthetic_workload(40, 1, 5, 4, arrival_interval_ms=1.0,
                                shared_prefix_ratio=0.5, num_prefix_groups=0)
    every = [x for i in range(5) for x in _block_ids(wl, i, 4)]
    assert len(set(every)) == 50


ONE = "synthetic replay requires exactly one of replay_concurrency, request_rate, or " \
      "arrival_interval_ms"


@pytest.mark.parametrize("args,kw,exc,msg", [
    ((8, 2, 4), {}, ValueError, ONE),
    ((8, 2, 4), dict(request_rate=1.0, arrival_interval_ms=1.0), ValueError, ONE),
    ((8, 2, 4), dict(replay_concurrency=2, request_rate=1.0), ValueError, ONE),
    ((8, 2, 4), dict(request_rate=0.0), ValueError,
     "request_rate must be a finite positive number, got 0"),
    ((8, 2, 4), dict(request_rate=-1.5), ValueError,
     "request_rate must be a finite positive number, got -1.5"),
    ((8, 2, 4), dict(request_rate=float("nan")), ValueError,
     "request_rate must be a finite positive number, got NaN"),
    ((8, 2, 4), dict(arrival_interval_ms=-1.0), ValueError,
     "arrival_interval_ms must be a finite non-negative number, got -1"),
    ((8, 2, 4), dict(arrival_interval_ms=float("inf")), ValueError,
     "arrival_interval_ms must be a finite non-negative number, got inf"),
    ((8, 2, 4), dict(arrival_interval_ms=1e-320), ValueError,
     "qps must be a finite positive number, got inf"),
    ((8, 2, 4), dict(replay_concurrency=0), ValueError, "replay_concurrency must be at least 1"),
    ((0, 2, 4), dict(request_rate=1.0), ValueError, "input_tokens must be at least 1"),
    ((8, 0, 4), dict(request_rate=1.0), ValueError, "output_tokens must be at least 1"),
    ((8, 2, 0), dict(request_rate=1.0), ValueError, "request_count must be at least 1"),
    ((-1, 2, 4), dict(request_rate=1.0), ValueError, "input_tokens must be a non-negative integer, got -1"),
    ((10 ** 20, 2, 4), dict(request_rate=1.0), ValueError, "input_tokens 100000000000000000000 is too large"),
    ((8, 2, 2 ** 31), dict(request_rate=1.0), ValueError, "request_count 2147483648 is too large"),
    ((8, 2, 4), dict(arrival_interval_ms=1.0, turns_per_session=0, inter_turn_delay_ms=2.0),
     ValueError, "turns_per_session must be at least 1"),
    ((8, 2, 4), dict(arrival_interval_ms=1.0, turns_per_session=2, inter_turn_delay_ms=-1.0),
     ValueError, "inter_turn_delay_ms must be a finite non-negative number"),
    ((8, 2, 4), dict(arrival_interval_ms=1.0, shared_prefix_ratio=1.5), ValueError,
     "shared_prefix_ratio must be between 0.0 and 1.0, got 1.5"),
    ((8, 2, 4), dict(arrival_interval_ms=1.0, arrival_speedup_ratio=0.0), ValueError,
     "arrival_speedup_ratio must be a finite positive number, got 0"),
    # validation order of the reference's two paths
    ((0, 2, 4), dict(arrival_interval_ms=1e-320), ValueError,
     "qps must be a finite positive number, got inf"),
    ((0, 2, 4), dict(arrival_interval_ms=1e-320, num_prefix_groups=1), ValueError,
     "input_tokens must be at least 1"),
    ((8, 2, 4), dict(arrival_interval_ms=1e-320, num_prefix_groups=1, turns_per_session=0),
     ValueError, "turns_per_session must be at least 1"),
])
def test_synthetic_validation_messages(args, kw, exc, msg):
    syn = _syn()
    with pytest.raises(exc) as ei:
        syn.build_synthetic_workload(*args, 4, **kw)
    assert str(ei.value).startswith(msg)


def test_synthetic_simple_path_accepts_unused_options():
    syn = _syn()
    # the reference only validates turns/delay/ratio on its session path
    for kw in (dict(turns_per_session=0), dict(shared_prefix_ratio=-0.1),
               dict(inter_turn_delay_ms=-1.0), dict(shared_prefix_ratio=float("nan"))):
        w = syn.build_synthetic_workload(8, 2, 3, 4, arrival_interval_ms=100.0, **kw)
        assert not w.session_mode and w.num_requests == 3
    w = syn.build_synthetic_workload(8, 2, 3, 4, replay_concurrency=1, arrival_speedup_ratio=0.0)
    assert w.num_requests == 3
