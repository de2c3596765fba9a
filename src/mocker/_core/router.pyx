# cython: language_level=3
"""KV-aware router of the replay (docs/core-sim.md §6.5).

For every worker the router knows which block hashes it holds (from the worker's own
KV events, visible at the end of the pass that produced them, plus ``kv_event_lag_ms``)
and which requests it was given and has not finished (their prompt blocks and, until
their first token, their prefill tokens).  A request goes to the worker of lowest cost

    prefill = prefill_load_scale * max(0, (active_prefill_tokens + isl) / bs
                                          - overlap_score_credit * overlap_blocks)
    decode  = active_blocks + prompt blocks not yet active there
    cost    = prefill + decode + decode_active_request_weight * active_requests

with exact ties broken by a seeded generator, so a run is reproducible.
"""
import numpy as np
from cython.operator cimport dereference as deref
from libc.math cimport exp, INFINITY
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from mocker._core._types cimport int32_t, int64_t, uint64_t, hash_t, rid_t, KvEvent, INT32_MAX, check_count
from mocker._core.table cimport ReqTable, mix64

cdef extern from *:
    int __builtin_ctzll(unsigned long long) noexcept nogil


cdef class KvRouter:
    def __cinit__(self, ReqTable table, int64_t num_workers, int64_t block_size, dict cfg,
                  double kv_event_lag_ms=0.0):
        check_count(num_workers, "router workers", INT32_MAX)      # 32-bit worker ids
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.t = table
        self.nw = num_workers
        self.words = (num_workers + 63) // 64
        self.bs = block_size
        self.credit = cfg["overlap_score_credit"]
        self.prefill_scale = cfg["prefill_load_scale"]
        self.decode_weight = cfg["decode_active_request_weight"]
        self.temperature = cfg["router_temperature"]
        self.track_active_blocks = cfg["router_track_active_blocks"]
        self.track_prefill_tokens = cfg["router_track_prefill_tokens"]
        self.assume_kv_reuse = cfg["router_assume_kv_reuse"]
        self.lag_ms = kv_event_lag_ms
        self.rng = <uint64_t>cfg["router_seed"]
        # (resize, not assign: libcpp declares assign(n, x) without except +)
        self.active_blocks.resize(num_workers, 0)
        self.active_prefill.resize(num_workers, 0)
        self.active_reqs.resize(num_workers, 0)
        self.req_w.resize(table.n, -1)
        self.req_prefill.resize(table.n, -1)
        self.req_blocks.resize(table.n, 0)
        self.req_cost.resize(table.n, 0.0)
        self.req_overlap.resize(table.n, 0)
        self.overlap.resize(num_workers, 0)
        self.newblk.resize(num_workers, 0)
        self.logit.resize(num_workers, 0.0)
        self.weight.resize(num_workers, 0.0)
        self.alive.resize(self.words, 0)
        self.decisions = 0

    cdef uint64_t _rand(self) noexcept nogil:
        self.rng += <uint64_t>0x9E3779B97F4A7C15ULL
        return mix64(self.rng)

    # -- what the workers hold (KV events) ----------------------------------------
    cdef int on_events(self, int32_t w, vector[KvEvent]* evs, double at) except -1 nogil:
        """Take a pass's events of worker ``w``, visible from ``at`` (then clears them)."""
        cdef size_t i
        cdef LaggedEvent le
        if evs == NULL:
            return 0
        if self.lag_ms > 0.0:
            le.at = at + self.lag_ms
            le.worker = w
            for i in range(evs.size()):
                le.ev = deref(evs)[i]
                self.lagged.push_back(le)
        else:
            for i in range(evs.size()):
                self._apply(w, deref(evs)[i])
        evs.clear()
        return 0

    cdef int apply_due(self, double now) except -1 nogil:
        while self.lagged.size() > 0 and self.lagged.front().at <= now:
            self._apply(self.lagged.front().worker, self.lagged.front().ev)
            self.lagged.pop_front()
        return 0

    cdef int _apply(self, int32_t w, KvEvent e) except -1 nogil:
        cdef unordered_map[hash_t, int64_t].iterator it = self.cached_at.find(e.h)
        cdef int64_t off, k
        cdef uint64_t bit = (<uint64_t>1) << (w & 63)
        cdef bint empty
        if e.stored:
            if it == self.cached_at.end():
                if self.cached_free.size() > 0:
                    off = self.cached_free.back()
                    self.cached_free.pop_back()
                else:
                    off = <int64_t>self.cached.size()
                    self.cached.resize(off + self.words)
                for k in range(self.words):
                    self.cached[off + k] = 0
                self.cached_at.insert(pair[hash_t, int64_t](e.h, off))     # (operator[] is not except +)
            else:
                off = deref(it).second
            self.cached[off + (w >> 6)] |= bit
        elif it != self.cached_at.end():
            off = deref(it).second
            self.cached[off + (w >> 6)] &= ~bit
            empty = True
            for k in range(self.words):
                if self.cached[off + k] != 0:
                    empty = False
            if empty:
                self.cached_at.erase(it)
                self.cached_free.push_back(off)
        return 0

    cdef void _overlaps(self, const hash_t* hs, int64_t n) noexcept nogil:
        """overlap[w] = leading blocks of ``hs[:n]`` that worker w holds."""
        cdef unordered_map[hash_t, int64_t].iterator it
        cdef int64_t i, k, w, off, matched = 0
        cdef uint64_t m, gone
        cdef bint any_alive
        for w in range(self.nw):
            self.overlap[w] = 0
        if n == 0:
            return
        cdef vector[uint64_t]* alive = &self.alive       # scratch, sized at construction
        for k in range(self.words):
            alive[0][k] = ~(<uint64_t>0)
        if self.nw & 63:
            alive[0][self.words - 1] = ((<uint64_t>1) << (self.nw & 63)) - 1
        for i in range(n):
            it = self.cached_at.find(hs[i])
            if it == self.cached_at.end():
                break
            off = deref(it).second
            any_alive = False
            for k in range(self.words):
                m = alive[0][k] & self.cached[off + k]
                gone = alive[0][k] & ~m
                while gone:
                    w = k * 64 + __builtin_ctzll(gone)
                    self.overlap[w] = i
                    gone &= gone - 1
                alive[0][k] = m
                if m:
                    any_alive = True
            if not any_alive:
                return
            matched = i + 1
        for k in range(self.words):
            m = alive[0][k]
            while m:
                w = k * 64 + __builtin_ctzll(m)
                self.overlap[w] = matched
                m &= m - 1

    # -- what the workers were given (active sequences) -----------------------------
    cdef void _new_blocks(self, const hash_t* hs, int64_t n) noexcept nogil:
        cdef unordered_map[hash_t, int64_t].iterator it
        cdef int64_t i, w, off
        for w in range(self.nw):
            self.newblk[w] = n
        for i in range(n):
            it = self.active_at.find(hs[i])
            if it == self.active_at.end():
                continue
            off = deref(it).second
            for w in range(self.nw):
                if self.active_cnt[off + w] > 0:
                    self.newblk[w] -= 1

    cdef int _activate(self, int32_t w, const hash_t* hs, int64_t n) except -1 nogil:
        cdef unordered_map[hash_t, int64_t].iterator it
        cdef int64_t i, k, off
        for i in range(n):
            it = self.active_at.find(hs[i])
            if it == self.active_at.end():
                if self.active_free.size() > 0:
                    off = self.active_free.back()
                    self.active_free.pop_back()
                else:
                    off = <int64_t>self.active_cnt.size()
                    self.active_cnt.resize(off + self.nw + 1)
                for k in range(self.nw + 1):
                    self.active_cnt[off + k] = 0
                self.active_at.insert(pair[hash_t, int64_t](hs[i], off))
            else:
                off = deref(it).second
            self.active_cnt[off + w] += 1
            self.active_cnt[off + self.nw] += 1      # holders over all workers
            if self.active_cnt[off + w] == 1:
                self.active_blocks[w] += 1
        return 0

    cdef void on_token(self, rid_t r) noexcept nogil:
        """A token of ``r`` became visible: its prefill no longer loads its worker."""
        if self.req_prefill[r] >= 0:
            self.active_prefill[self.req_w[r]] -= self.req_prefill[r]
            self.req_prefill[r] = -1

    cdef int on_terminal(self, rid_t r) except -1 nogil:
        """``r`` finished (or was rejected): free what it held in the router's books."""
        cdef int32_t w = self.req_w[r]
        cdef int64_t i, off
        cdef unordered_map[hash_t, int64_t].iterator it
        if w < 0:
            return 0
        self.on_token(r)
        if not self.assume_kv_reuse:
            self.active_blocks[w] -= self.req_blocks[r]
            self.req_blocks[r] = 0
        for i in range(self.req_blocks[r]):
            if i >= <int64_t>self.t.hashes[r].size():
                break                           # (defensive: the request's content is gone)
            it = self.active_at.find(self.t.hashes[r][i])
            if it == self.active_at.end():
                continue
            off = deref(it).second
            self.active_cnt[off + w] -= 1
            self.active_cnt[off + self.nw] -= 1
            if self.active_cnt[off + w] == 0:
                self.active_blocks[w] -= 1
            if self.active_cnt[off + self.nw] == 0:
                self.active_at.erase(it)
                self.active_free.push_back(off)
        self.req_blocks[r] = 0
        self.active_reqs[w] -= 1
        self.req_w[r] = -1
        return 0

    # -- the decision -----------------------------------------------------------------
    cdef int32_t route(self, rid_t r, double now) except -1 nogil:
        cdef int64_t n, isl = self.t.prompt_len[r], w
        cdef double raw, pc, dc, best = INFINITY, worst = -INFINITY, total, u, span
        cdef const hash_t* hs
        cdef int32_t pick
        self.apply_due(now)
        self.t.ensure_hashed(r)
        n = isl // self.bs
        if n > <int64_t>self.t.hashes[r].size():
            n = <int64_t>self.t.hashes[r].size()
        hs = self.t.hashes[r].data()
        self._overlaps(hs, n)
        if self.track_active_blocks:
            if self.assume_kv_reuse:
                self._new_blocks(hs, n)
            else:
                for w in range(self.nw):
                    self.newblk[w] = n
        for w in range(self.nw):
            # prefill term: blocks still to prefill there, less the credit for cached ones
            raw = <double>(self.active_prefill[w] + isl) / <double>self.bs if self.track_prefill_tokens else 0.0
            pc = raw - self.credit * <double>self.overlap[w]
            if pc < 0.0:
                pc = 0.0
            pc = self.prefill_scale * pc
            dc = <double>(self.active_blocks[w] + self.newblk[w]) if self.track_active_blocks else 0.0
            self.logit[w] = (pc + dc) + self.decode_weight * <double>self.active_reqs[w]
            if self.logit[w] < best:
                best = self.logit[w]
            if self.logit[w] > worst:
                worst = self.logit[w]
        if self.temperature > 0.0 and worst > best:
            # softmax over costs normalised to [0, 1]: p ~ exp(-(c - min) / ((max - min) T))
            span = (worst - best) * self.temperature
            total = 0.0
            for w in range(self.nw):
                self.weight[w] = exp(-(self.logit[w] - best) / span)
                total += self.weight[w]
            u = <double>(self._rand() >> 11) * (1.0 / 9007199254740992.0)
            pick = <int32_t>(self.nw - 1)
            for w in range(self.nw):
                u -= self.weight[w] / total
                if u <= 0.0:
                    pick = <int32_t>w
                    break
        else:
            self.ties.clear()
            for w in range(self.nw):
                if self.logit[w] == best:
                    self.ties.push_back(<int32_t>w)
            pick = self.ties[0] if self.ties.size() == 1 else \
                self.ties[<size_t>(self._rand() % <uint64_t>self.ties.size())]
        # book the request on its worker
        self.req_w[r] = pick
        self.req_cost[r] = self.logit[pick]
        self.req_overlap[r] = self.overlap[pick]
        self.active_reqs[pick] += 1
        if self.track_prefill_tokens:
            self.req_prefill[r] = isl - self.overlap[pick] * self.bs
            self.active_prefill[pick] += self.req_prefill[r]
        if self.track_active_blocks:
            if self.assume_kv_reuse:
                self._activate(pick, hs, n)
                self.req_blocks[r] = <int32_t>n
            else:
                self.active_blocks[pick] += n
                self.req_blocks[r] = <int32_t>n
        self.decisions += 1
        return pick

    # -- views (tests) -------------------------------------------------------------------
    def worker_loads(self):
        """Per worker: (active_blocks, active_prefill_tokens, active_requests)."""
        return [(self.active_blocks[w], self.active_prefill[w], self.active_reqs[w]) for w in range(self.nw)]

    def overlap_tokens(self):
        """Per request: cached tokens on the chosen target when it was routed."""
        return np.asarray(self.req_overlap, dtype=np.int64) * self.bs

    def decisions_of(self, rids):
        """(worker, cost, cached blocks) of each routed request in ``rids``."""
        for r in rids:
            if r < 0 or r >= <int64_t>self.req_w.size():
                raise IndexError(f"request row {r} out of range [0, {self.req_w.size()})")
        return [(self.req_w[r] if self.req_w[r] >= 0 else self.t.worker[r], self.req_cost[r],
                 self.req_overlap[r]) for r in rids]

    def cached_hashes(self, int64_t w):
        """The block hashes the router believes worker ``w`` holds."""
        if w < 0 or w >= self.nw:
            raise IndexError(f"worker {w} out of range [0, {self.nw})")
        return {kv.first for kv in self.cached_at
                if self.cached[kv.second + (w >> 6)] & ((<uint64_t>1) << (w & 63))}

    @property
    def num_active_hashes(self):
        return self.active_at.size()
