# cython: language_level=3
"""Per-request JSONL records written straight from the request table's columns.

``write_records`` produces the same bytes as ``json.dumps(rec, separators=(",", ":")) + "\\n"``
over ``mocker.replay.report.build_records``'s records, without building them: each chunk of
records is formatted in C (GIL released) into one buffer and handed to ``fh.write``.
"""
import json

import numpy as np

cimport numpy as cnp
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, strlen
from libcpp.vector cimport vector
from mocker._core._types cimport int8_t, int32_t, int64_t

cdef extern from *:
    """
    #include <charconv>
    #include <cmath>
    #include <cstring>

    /* A double as Python's float.__repr__ lays it out (json.dumps for NaN/inf): the shortest
       round-trip digits; exponent form when the decimal point is before the 4th digit after
       it or more than 16 digits in. */
    static inline char *mocker_rec_double(char *p, double x) {
        if (x != x) { std::memcpy(p, "NaN", 3); return p + 3; }
        if (std::signbit(x)) { *p++ = '-'; x = -x; }
        if (std::isinf(x)) { std::memcpy(p, "Infinity", 8); return p + 8; }
        if (x == 0.0) { std::memcpy(p, "0.0", 3); return p + 3; }
        char tmp[40];
        char *end = std::to_chars(tmp, tmp + sizeof tmp, x, std::chars_format::scientific).ptr;
        /* tmp: d[.ddd]e(+|-)dd[d] */
        char dig[24];
        int nd = 0;
        const char *q = tmp;
        dig[nd++] = *q++;
        if (*q == '.') {
            ++q;
            while (*q != 'e') dig[nd++] = *q++;
        }
        ++q;
        int neg = (*q == '-');
        ++q;
        int e = 0;
        while (q < end) e = e * 10 + (*q++ - '0');
        if (neg) e = -e;
        int decpt = e + 1;              /* value = 0.d1d2... * 10**decpt */
        if (decpt <= -4 || decpt > 16) {
            *p++ = dig[0];
            if (nd > 1) {
                *p++ = '.';
                std::memcpy(p, dig + 1, nd - 1);
                p += nd - 1;
            }
            *p++ = 'e';
            *p++ = e < 0 ? '-' : '+';
            int a = e < 0 ? -e : e;
            if (a >= 100) *p++ = (char)('0' + a / 100);
            *p++ = (char)('0' + (a / 10) % 10);
            *p++ = (char)('0' + a % 10);
        } else if (decpt <= 0) {
            *p++ = '0';
            *p++ = '.';
            for (int i = 0; i < -decpt; ++i) *p++ = '0';
            std::memcpy(p, dig, nd);
            p += nd;
        } else if (decpt >= nd) {
            std::memcpy(p, dig, nd);
            p += nd;
            for (int i = nd; i < decpt; ++i) *p++ = '0';
            *p++ = '.';
            *p++ = '0';
        } else {
            std::memcpy(p, dig, decpt);
            p += decpt;
            *p++ = '.';
            std::memcpy(p, dig + decpt, nd - decpt);
            p += nd - decpt;
        }
        return p;
    }

    static inline char *mocker_rec_int(char *p, long long v) {
        return std::to_chars(p, p + 24, v).ptr;
    }

    static const char *const mocker_rec_handoff_keys[6] = {
        ",\\"prefill_admit_ms\\":", ",\\"source_held_ms\\":", ",\\"destination_reserved_ms\\":",
        ",\\"destination_activated_ms\\":", ",\\"decode_admit_ms\\":", ",\\"source_released_ms\\":"};
    static const char *const mocker_rec_pools[3] = {"\\"agg\\"", "\\"prefill\\"", "\\"decode\\""};
    """
    char* put_double "mocker_rec_double"(char* p, double x) noexcept nogil
    char* put_int "mocker_rec_int"(char* p, long long v) noexcept nogil
    const char** HANDOFF_KEYS "mocker_rec_handoff_keys"
    const char** POOL_NAMES "mocker_rec_pools"

cnp.import_array()

__all__ = ["write_records", "format_float"]

cdef enum:
    # terminal statuses reported (ReqStatus values)
    ST_COMPLETED = 3
    ST_REJECTED = 4
    ST_FAILED = 6
    # bounds of one record without its admissions and session name, and of one
    # admission_history entry (widest values: 1,814 and 166 bytes)
    REC_FIXED_MAX = 4096
    ADM_MAX = 320

cdef struct Src:
    const double* arrival
    const int64_t* in_len
    const int64_t* req_out
    const int8_t* status
    const int32_t* worker
    const double* first_admit
    const double* first_token
    const double* second_token
    const double* last_token
    const double* terminal
    const int64_t* out_len
    const int64_t* reused_max
    const int64_t* reused_dec
    const int32_t* prefill_worker
    const double* handoff[6]
    const double* adm_at
    const int64_t* adm_reused
    const int8_t* adm_pool          # NULL: every admission in the "agg" pool
    const int64_t* adm_start        # admissions of rid r: adm_idx[adm_start[r]:adm_start[r + 1]]
    const int64_t* adm_idx
    const int64_t* overlap          # NULL: no KV router (0)
    const int32_t* sess
    const int64_t* turn
    const char* names               # pre-encoded JSON strings, concatenated
    const int64_t* name_off
    double cap
    int64_t dp
    int64_t prefill_dp
    bint disagg



cdef inline char* lit(char* p, const char* s) noexcept nogil:
    cdef size_t n = strlen(s)
    memcpy(p, s, n)
    return p + n


cdef inline char* opt_double(char* p, double x) noexcept nogil:
    if x != x:
        return lit(p, b"null")
    return put_double(p, x)


cdef inline double py_max0(double x) noexcept nogil:
    # Python's max(x, 0.0): x unless 0.0 > x (so -0.0 and NaN are kept)
    return 0.0 if 0.0 > x else x


cdef inline int64_t floordiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline bint reported(const Src* s, int64_t r) noexcept nogil:
    cdef int8_t st = s.status[r]
    return (st == ST_COMPLETED or st == ST_REJECTED or st == ST_FAILED) and s.terminal[r] <= s.cap


cdef inline int64_t record_bound(const Src* s, int64_t r) noexcept nogil:
    cdef int64_t b = REC_FIXED_MAX + ADM_MAX * (s.adm_start[r + 1] - s.adm_start[r])
    if s.sess[r] >= 0:
        b += s.name_off[s.sess[r] + 1] - s.name_off[s.sess[r]]
    return b


cdef char* put_route(char* p, const char* pool, int64_t sid, int64_t dp, int64_t overlap) noexcept nogil:
    p = lit(p, b'{"pool":')
    p = lit(p, pool)
    p = lit(p, b',"outcome":"immediate","queue_entered_at_ms":null,"released_at_ms":null,'
               b'"queue_wait_ms":0.0,"logical_worker_id":')
    p = put_int(p, floordiv(sid, dp))
    p = lit(p, b',"scheduler_id":')
    p = put_int(p, sid)
    p = lit(p, b',"dp_rank":')
    p = put_int(p, sid - floordiv(sid, dp) * dp)
    p = lit(p, b',"reported_overlap_tokens":')
    p = put_int(p, overlap)
    return lit(p, b',"selected_overlap_blocks":null,"best_available_overlap_blocks":null,'
                  b'"overlap_regret_blocks":null,"placement_replica_id":null}')


cdef char* put_record(char* p, const Src* s, int64_t r) noexcept nogil:
    """One record of a reported request ``r`` and its newline (build_records' key order)."""
    cdef int8_t st = s.status[r]
    cdef bint failed = st == ST_FAILED
    cdef double arr = s.arrival[r]
    cdef double t1 = s.first_token[r]
    cdef double t2 = s.second_token[r]
    cdef double tm = s.last_token[r]
    cdef int64_t n_out = s.out_len[r]
    cdef int64_t w = s.worker[r]
    cdef int64_t pw = s.prefill_worker[r] if s.disagg else -1
    cdef int64_t overlap = 0 if s.overlap == NULL else s.overlap[r]
    cdef int64_t in_len = s.in_len[r]
    cdef int64_t pre_overlap = overlap if overlap < in_len else in_len
    cdef int64_t a0 = s.adm_start[r], a1 = s.adm_start[r + 1], j, a
    cdef int64_t k, readmit = 0
    cdef int64_t per_pool[3]
    cdef int pool
    cdef int32_t si = s.sess[r]
    per_pool[0] = per_pool[1] = per_pool[2] = 0

    p = lit(p, b'{"session_id":')
    if si < 0:
        p = lit(p, b"null")
    else:
        memcpy(p, s.names + s.name_off[si], s.name_off[si + 1] - s.name_off[si])
        p += s.name_off[si + 1] - s.name_off[si]
    p = lit(p, b',"turn_index":')
    if s.turn[r] < 0:
        p = lit(p, b"null")
    else:
        p = put_int(p, s.turn[r])
    p = lit(p, b',"arrival_time_ms":')
    p = put_double(p, arr)
    p = lit(p, b',"dispatched_at_ms":null,"first_admit_ms":')
    p = opt_double(p, s.first_admit[r])
    p = lit(p, b',"terminal_time_ms":')
    p = put_double(p, s.terminal[r])
    p = lit(p, b',"first_token_ms":')
    p = opt_double(p, t1)
    p = lit(p, b',"last_token_ms":')
    p = opt_double(p, tm)
    p = lit(p, b',"ttft_ms":')
    p = lit(p, b"null") if t1 != t1 else put_double(p, py_max0(t1 - arr))
    p = lit(p, b',"ttst_ms":')
    p = lit(p, b"null") if t2 != t2 else put_double(p, py_max0(t2 - t1))
    p = lit(p, b',"e2e_latency_ms":')
    p = lit(p, b"null") if tm != tm else put_double(p, py_max0(tm - arr))
    p = lit(p, b',"itl_ms":')
    p = put_double(p, py_max0((tm - t1) / <double>(n_out - 1))) if n_out >= 2 else lit(p, b"null")
    p = lit(p, b',"input_length":')
    p = put_int(p, in_len)
    p = lit(p, b',"requested_output_length":')
    p = put_int(p, s.req_out[r])
    p = lit(p, b',"output_length":')
    p = put_int(p, n_out)
    p = lit(p, b',"reused_input_tokens":')
    p = put_int(p, s.reused_max[r])
    p = lit(p, b',"prefill_worker_idx":')
    p = put_int(p, pw) if s.disagg and pw >= 0 else lit(p, b"null")
    p = lit(p, b',"decode_worker_idx":')
    p = put_int(p, w) if w >= 0 and not (s.disagg and failed) else lit(p, b"null")
    for j in range(6):
        p = lit(p, HANDOFF_KEYS[j])
        p = opt_double(p, s.handoff[j][r]) if s.disagg else lit(p, b"null")
    p = lit(p, b',"decode_reused_input_tokens":')
    p = put_int(p, s.reused_dec[r]) if s.disagg and w >= 0 and not failed else lit(p, b"null")
    p = lit(p, b',"prefill_route_overlap_tokens":')
    p = put_int(p, pre_overlap) if s.disagg and pw >= 0 else lit(p, b"null")
    p = lit(p, b',"decode_route_overlap_tokens":')
    p = lit(p, b"0") if s.disagg and (w >= 0 or pw < 0) else lit(p, b"null")
    p = lit(p, b',"routing_history":[')
    if s.disagg:
        if pw >= 0:
            p = put_route(p, b'"prefill"', pw, s.prefill_dp, pre_overlap)
        if w >= 0:
            if pw >= 0:
                p = lit(p, b",")
            p = put_route(p, b'"decode"', w, s.dp, 0)
    else:
        p = put_route(p, b'"agg"', w, s.dp, overlap)
    p = lit(p, b'],"admission_history":[')
    for j in range(a1 - a0):
        a = s.adm_idx[a0 + j]
        pool = s.adm_pool[a] if s.adm_pool != NULL else 0
        k = per_pool[pool]
        per_pool[pool] = k + 1
        if j:
            p = lit(p, b",")
        p = lit(p, b'{"admission_ordinal":')
        p = put_int(p, j)
        p = lit(p, b',"pool_admission_ordinal":')
        p = put_int(p, k)
        p = lit(p, b',"pool":')
        p = lit(p, POOL_NAMES[pool])
        p = lit(p, b',"at_ms":')
        p = put_double(p, s.adm_at[a])
        p = lit(p, b',"reused_input_tokens":')
        p = put_int(p, s.adm_reused[a])
        if k > 0:
            p = lit(p, b',"is_readmission":true}')
        else:
            p = lit(p, b',"is_readmission":false}')
    for pool in range(3):
        if per_pool[pool] > 1:
            readmit += per_pool[pool] - 1
    p = lit(p, b'],"admission_count":')
    p = put_int(p, a1 - a0)
    p = lit(p, b',"readmission_count":')
    p = put_int(p, readmit)
    p = lit(p, b',"pressure_record_ordinals":[],"terminal_status":')
    if st == ST_COMPLETED:
        p = lit(p, b'"completed"}\n')
    elif st == ST_REJECTED:
        p = lit(p, b'"rejected"}\n')
    else:
        p = lit(p, b'"failed"}\n')
    return p


cdef struct Buf:
    char* data
    int64_t len
    int64_t cap


cdef bint buf_reserve(Buf* b, int64_t extra) noexcept nogil:
    cdef int64_t want = b.len + extra
    cdef char* d
    if want <= b.cap:
        return True
    if want < 2 * b.cap:
        want = 2 * b.cap
    d = <char*>realloc(b.data, want)
    if d == NULL:
        return False
    b.data = d
    b.cap = want
    return True


cdef int64_t fill_chunk(const Src* s, const int64_t* order, int64_t n_order, int64_t* pos,
                        Buf* b, int64_t chunk_bytes) noexcept nogil:
    """Format the reported records from ``order[pos:]`` until ``chunk_bytes`` are buffered.

    Returns the number of records formatted, or -1 if the buffer could not grow.
    """
    cdef int64_t i = pos[0], r, count = 0
    b.len = 0
    while i < n_order and b.len < chunk_bytes:
        r = order[i]
        if reported(s, r):
            if not buf_reserve(b, record_bound(s, r)):
                pos[0] = i
                return -1
            b.len = put_record(b.data + b.len, s, r) - b.data
            count += 1
        i += 1
    pos[0] = i
    return count


def format_float(double x):
    """``x`` as json.dumps renders a float (float.__repr__; NaN, Infinity, -Infinity)."""
    cdef char buf[48]
    cdef char* end = put_double(buf, x)
    return buf[:end - buf].decode("ascii")


cdef object _col(dict cols, str name, object dtype, int64_t n):
    a = np.ascontiguousarray(cols[name], dtype=dtype)
    if a.ndim != 1 or (n >= 0 and a.shape[0] != n):
        raise ValueError(f"column {name!r}: expected {n} values, got shape {a.shape}")
    return a


cdef int _write_all(object fh, bytes data) except -1:
    # a raw (unbuffered) file may write part of the data: write the rest
    cdef Py_ssize_t total = len(data), done = 0
    cdef object n = fh.write(data)
    while n is not None:
        if n <= 0:
            raise OSError(f"{fh!r}.write wrote nothing")
        done += n
        if done >= total:
            break
        n = fh.write(memoryview(data)[done:])
    return 0


def write_records(fh, dict cols, order, session_index, list session_names, turn_index,
                  double max_sim_time_ms, int64_t dp_size, route_overlap_tokens=None,
                  prefill_dp_size=None, int64_t chunk_bytes=1 << 20, progress=None):
    """Write the per-request JSONL records of a run to ``fh``; returns how many were written.

    ``cols``: ``ReqTable.columns()``; ``order``: rids in arrival order; ``session_index``: per
    rid, an index into ``session_names`` or -1 (null); ``turn_index``: per rid, -1 for null.
    The other arguments are ``build_records``'s.  Records are formatted in chunks of about
    ``chunk_bytes`` and each is passed to ``fh.write`` (bytes), then to ``progress(count so
    far)`` if given; an exception from either propagates and ends the writing.
    """
    cdef int64_t n, m, i, r, n_order, pos = 0, count, written = 0
    cdef Src s
    cdef Buf b
    cdef vector[int64_t] adm_start, adm_idx
    cdef const int32_t[::1] adm_rid_v
    cdef const int64_t* order_p
    if dp_size < 1:
        raise ValueError(f"dp_size must be >= 1, got {dp_size}")
    if prefill_dp_size is not None and prefill_dp_size < 1:
        raise ValueError(f"prefill_dp_size must be >= 1, got {prefill_dp_size}")
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")

    arrival = _col(cols, "arrival_time_ms", np.float64, -1)
    n = arrival.shape[0]
    in_len = _col(cols, "input_length", np.int64, n)
    req_out = _col(cols, "requested_output_length", np.int64, n)
    status = _col(cols, "status", np.int8, n)
    worker = _col(cols, "worker", np.int32, n)
    first_admit = _col(cols, "first_admit_ms", np.float64, n)
    first_token = _col(cols, "first_token_ms", np.float64, n)
    second_token = _col(cols, "second_token_ms", np.float64, n)
    last_token = _col(cols, "last_token_ms", np.float64, n)
    terminal = _col(cols, "terminal_time_ms", np.float64, n)
    out_len = _col(cols, "output_length", np.int64, n)
    reused_max = _col(cols, "reused_max", np.int64, n)
    reused_dec = _col(cols, "reused_dec", np.int64, n)
    adm_rid = _col(cols, "adm_rid", np.int32, -1)
    m = adm_rid.shape[0]
    adm_at = _col(cols, "adm_at", np.float64, m)
    adm_reused = _col(cols, "adm_reused", np.int64, m)
    adm_pool = _col(cols, "adm_pool", np.int8, m) if cols.get("adm_pool") is not None else None
    disagg = prefill_dp_size is not None
    if disagg:
        prefill_worker = _col(cols, "prefill_worker", np.int32, n)
        handoff = [_col(cols, k, np.float64, n) for k in (
            "prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
            "destination_activated_ms", "decode_admit_ms", "source_released_ms")]
    order_a = np.ascontiguousarray(order, dtype=np.int64)
    if order_a.ndim != 1:
        raise ValueError("order must be one-dimensional")
    n_order = order_a.shape[0]
    sess = np.ascontiguousarray(session_index, dtype=np.int32)
    turn = np.ascontiguousarray(turn_index, dtype=np.int64)
    if sess.shape != (n,) or turn.shape != (n,):
        raise ValueError(f"session_index and turn_index need one value per request ({n})")
    overlap = None
    if route_overlap_tokens is not None:
        overlap = np.ascontiguousarray(route_overlap_tokens, dtype=np.int64)
        if overlap.shape != (n,):
            raise ValueError(f"route_overlap_tokens needs one value per request ({n})")
    # indices the C loop follows without checks
    if n_order and (order_a.min() < 0 or order_a.max() >= n):
        raise ValueError("order holds a request id out of range")
    if m and (adm_rid.min() < 0 or adm_rid.max() >= n):
        raise ValueError("adm_rid holds a request id out of range")
    if m and adm_pool is not None and (adm_pool.min() < 0 or adm_pool.max() > 2):
        raise ValueError("adm_pool holds an unknown pool")
    if n and (sess.min() < -1 or sess.max() >= len(session_names)):
        raise ValueError("session_index out of range of session_names")

    # session names as JSON strings (ensure_ascii), once each
    enc = [json.dumps(name).encode("ascii") for name in session_names]
    names = b"".join(enc)
    name_off = np.zeros(len(enc) + 1, dtype=np.int64)
    if enc:
        np.cumsum([len(e) for e in enc], out=name_off[1:])

    # admissions grouped by request, in recorded order (a stable counting sort)
    adm_rid_v = adm_rid
    adm_start.assign(n + 1, 0)
    adm_idx.resize(m)
    with nogil:
        for i in range(m):
            adm_start[adm_rid_v[i] + 1] += 1
        for i in range(n):
            adm_start[i + 1] += adm_start[i]
        # adm_start[r] serves as r's cursor, ending at r + 1's start; shifted back after
        for i in range(m):
            r = adm_rid_v[i]
            adm_idx[adm_start[r]] = i
            adm_start[r] += 1
        for i in range(n, 0, -1):
            adm_start[i] = adm_start[i - 1]
        adm_start[0] = 0

    s.arrival = <const double*>_ptr(arrival)
    s.in_len = <const int64_t*>_ptr(in_len)
    s.req_out = <const int64_t*>_ptr(req_out)
    s.status = <const int8_t*>_ptr(status)
    s.worker = <const int32_t*>_ptr(worker)
    s.first_admit = <const double*>_ptr(first_admit)
    s.first_token = <const double*>_ptr(first_token)
    s.second_token = <const double*>_ptr(second_token)
    s.last_token = <const double*>_ptr(last_token)
    s.terminal = <const double*>_ptr(terminal)
    s.out_len = <const int64_t*>_ptr(out_len)
    s.reused_max = <const int64_t*>_ptr(reused_max)
    s.reused_dec = <const int64_t*>_ptr(reused_dec)
    s.prefill_worker = <const int32_t*>_ptr(prefill_worker) if disagg else NULL
    for i in range(6):
        s.handoff[i] = <const double*>_ptr(handoff[i]) if disagg else NULL
    s.adm_at = <const double*>_ptr(adm_at)
    s.adm_reused = <const int64_t*>_ptr(adm_reused)
    s.adm_pool = <const int8_t*>_ptr(adm_pool) if adm_pool is not None else NULL
    s.adm_start = adm_start.data()
    s.adm_idx = adm_idx.data()
    s.overlap = <const int64_t*>_ptr(overlap) if overlap is not None else NULL
    s.sess = <const int32_t*>_ptr(sess)
    s.turn = <const int64_t*>_ptr(turn)
    s.names = names
    s.name_off = <const int64_t*>_ptr(name_off)
    s.cap = max_sim_time_ms
    s.dp = dp_size
    s.prefill_dp = prefill_dp_size if disagg else 1
    s.disagg = disagg
    order_p = <const int64_t*>_ptr(order_a)

    b.len = 0
    b.cap = chunk_bytes + REC_FIXED_MAX
    b.data = <char*>malloc(b.cap)
    if b.data == NULL:
        raise MemoryError()
    try:
        while pos < n_order:
            with nogil:
                count = fill_chunk(&s, order_p, n_order, &pos, &b, chunk_bytes)
            if count < 0:
                raise MemoryError()
            if b.len:
                _write_all(fh, PyBytes_FromStringAndSize(b.data, b.len))
                written += count
                if progress is not None:
                    progress(written)
    finally:
        free(b.data)
    return written


cdef inline const void* _ptr(cnp.ndarray a):
    # a C-contiguous array's data (kept alive by the caller)
    return cnp.PyArray_DATA(a)
