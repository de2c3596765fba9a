# cython: language_level=3
"""One rank of the SGLang-style scheduler (docs/core-sim.md §5).

A pass is either a prefill batch (new requests and chunk continuations; running
requests stall) or a decode batch over the running requests.  Admission reserves
output room (``new_token_ratio``), memory pressure retracts the running request with
the fewest generated tokens, and pages are cached in a radix tree as soon as they are
materialized.
"""
from libcpp.vector cimport vector
from libcpp.unordered_set cimport unordered_set
from libcpp.algorithm cimport stable_sort
from mocker._core._types cimport int32_t, int64_t, rid_t, slot_t, hash_t, ceil_div, KvEvent
from mocker._core.timing cimport prefill_phase_ms, decode_phase_ms
from mocker._core.table cimport ReqTable, ST_WAITING, ST_RUNNING, ST_COMPLETED, ST_REJECTED, ST_CANCELLED
from mocker._core.rank cimport Rank
from mocker._core.radix cimport RadixCache

cdef int64_t LPM_MAX_WAITING = 128          # lpm falls back to fifo above this queue length
cdef int64_t IN_BATCH_PREFIX_THRESHOLD = 32  # tokens


cdef struct LpmKey:
    int64_t dep          # 1 = deprioritized (in-batch duplicate prefix)
    int64_t prefix_len   # cached prefix tokens (sorted descending)
    int64_t pos          # original queue position (stability)
    rid_t r


cdef bint lpm_less(const LpmKey& a, const LpmKey& b) noexcept nogil:
    if a.dep != b.dep:
        return a.dep < b.dep
    if a.prefix_len != b.prefix_len:
        return a.prefix_len > b.prefix_len
    return a.pos < b.pos


cdef class SglangRank(Rank):
    def __cinit__(self, ReqTable table, dict engine, int64_t dp_size=1):
        cdef dict sg = engine["sglang"]
        if dp_size < 1:
            raise ValueError(f"dp_size must be at least 1, got {dp_size}")
        self.caching = engine["enable_prefix_caching"]
        self.cache = RadixCache(self.num_blocks, self.caching, engine.get("emit_kv_events", False))
        self.lpm = sg["schedule_policy"] == "lpm"
        self.max_prefill_tokens = sg["max_prefill_tokens"]
        # attention DP splits the chunk budget over the worker's ranks (whole pages per rank);
        # max_prefill_tokens stays per rank
        self.chunked_prefill_size = (sg["chunked_prefill_size"] // dp_size) // self.bs * self.bs
        self.clip_max_new_tokens = sg["clip_max_new_tokens"]
        # attention DP also scales schedule_conservativeness by 0.3 (as SGLang's server args do
        # for dp attention): the admission ratio starts, decays and bottoms out 0.3x as high
        cdef double conservativeness = sg["schedule_conservativeness"]
        if dp_size > 1:
            conservativeness = conservativeness * 0.3
        self.init_ratio = 0.7 * conservativeness
        self.min_ratio = 0.14 * self.init_ratio
        self.decay_step = (self.init_ratio - self.min_ratio) / 600.0
        self.new_token_ratio = self.init_ratio
        self.prefill_decode_interval = engine["prefill_decode_interval"]
        self.prefill_rounds_remaining = 0
        self.last_end = 0.0
        self.grouped = dp_size > 1
        self.stall_is_fatal = True
        self.ins.resize(table.n, 0)
        self.touch.resize(table.n, 0)
        self.skip_lo.resize(table.n, 0)
        self.skip_hi.resize(table.n, 0)
        # disaggregated roles: a held source or a waiting destination is freed by the driver,
        # so an effect-free pass only waits for it (not fatal)
        self.hold_source = engine.get("worker_type") == "prefill"
        self.decode_role = engine.get("worker_type") == "decode"
        if self.hold_source:
            self.held.resize(table.n)
            self.stall_is_fatal = False
        if self.decode_role:
            self.dest.resize(table.n)
            self.att_gen.resize(table.n, -1)
            self.stall_is_fatal = False

    @property
    def cache_view(self):
        return self.cache

    cdef vector[KvEvent]* kv_events(self) noexcept nogil:
        return &self.cache.events

    @property
    def readmission_conflicts(self):
        """Admissions refused because only the request's own cached path could be evicted."""
        return self.own_path_conflicts

    @property
    def token_ratio(self):
        return self.new_token_ratio

    # -- cache bookkeeping --------------------------------------------------------
    cdef int _cache_materialized(self, rid_t r) except -1 nogil:
        """Insert the request's full materialized pages beyond those already inserted."""
        return self._insert_pages(r, &self.t.blocks[r], self.t.computed[r] // self.bs)

    cdef int _insert_pages(self, rid_t r, vector[slot_t]* pages, int64_t upto) except -1 nogil:
        """Insert ``r``'s pages ``ins[r]:upto`` of ``pages`` in the tree (locked by ``r``).

        As in the reference's compressed tree: the insert refreshes the request's whole path
        and every cached edge it runs through completely (lazily, see ``_drop_pages``), new
        pages extend the parent's edge when that is a leaf edge held by nobody else, and
        already cached pages that end (or leave) an edge in its middle split it; that
        split-off prefix keeps its old stamp.
        """
        cdef int64_t i, lo, seg, skip_lo = 0, skip_hi = 0
        cdef slot_t parent, s
        cdef hash_t h
        cdef bint dup = False, head
        if not self.caching:
            return 0
        if upto > <int64_t>pages.size():
            upto = <int64_t>pages.size()
        lo = self.ins[r]
        if upto <= lo:
            return 0            # nothing new: the path keeps the stamp of its last operation
        cdef int64_t stamp = self.cache.tick()
        self.touch[r] = stamp
        seg = lo
        for i in range(lo, upto):
            if i + 8 < upto:
                self.cache.prefetch(pages[0][i + 8])
            parent = pages[0][i - 1] if i > 0 else -1
            h = self.t.block_hash(r, i)
            s = self.cache._child(parent, h)
            if s >= 0:
                if self.cache.nodes[s].head:
                    seg = i
                pages[0][i] = self.cache.lock_cached(pages[0][i], s)
                # the private duplicate goes back to the pool: a destination waiting for room on
                # this (decode) rank is retried (an activation that dedupes frees pages)
                self.cap_gen += 1
                dup = True
                continue
            if dup and not self.cache.is_edge_end(parent):
                self.cache.split_after(parent)          # leaves a cached edge in its middle
                skip_lo = seg
                skip_hi = i
            head = (parent < 0 or self.cache.nodes[parent].children > 0
                    or self.cache.nodes[parent].lock != 1)
            self.cache.ev_rid = r
            self.cache.ev_pos = <int32_t>i
            pages[0][i] = self.cache.insert_page(pages[0][i], h, parent, stamp, head)
            dup = False
        if dup and not self.cache.is_edge_end(pages[0][upto - 1]):
            self.cache.split_after(pages[0][upto - 1])      # ends inside a cached edge
            skip_lo = seg
            skip_hi = upto
        self.skip_lo[r] = skip_lo
        self.skip_hi[r] = skip_hi
        self.ins[r] = upto
        return 0

    cdef int _release(self, rid_t r) except -1 nogil:
        """Cache the materialized pages, then drop the request's lease."""
        self._cache_materialized(r)
        return self._drop(r)

    cdef int _drop(self, rid_t r) except -1 nogil:
        """Unlock the request's cached path and free every page beyond it (nothing new is cached)."""
        self._drop_pages(r, &self.t.blocks[r])
        self.t.allocated[r] = 0
        return 0

    cdef int _drop_pages(self, rid_t r, vector[slot_t]* pages) except -1 nogil:
        """Give back ``pages``, ``r``'s lease on this rank: its first ``ins[r]`` are locked tree
        nodes, the rest private."""
        cdef int64_t i, n = self.ins[r]
        self.cache.unlock_path(pages.data(), n, self.touch[r], self.skip_lo[r], self.skip_hi[r])
        for i in range(n, <int64_t>pages.size()):
            self.cache.free_page(pages[0][i])
        pages.clear()
        self.ins[r] = 0
        self.skip_lo[r] = 0
        self.skip_hi[r] = 0
        return 0

    cdef int abort(self, rid_t r) except -1 nogil:
        if not self._unqueue(r):
            return 0
        if self.t.blocks[r].size() > 0 or self.ins[r] > 0:
            self._release(r)                         # materialized pages stay cached
        self.t.status[r] = ST_CANCELLED
        return 1

    cdef int grow(self, int64_t n) except -1 nogil:
        self.ins.resize(n, 0)
        self.touch.resize(n, 0)
        self.skip_lo.resize(n, 0)
        self.skip_hi.resize(n, 0)
        if self.hold_source:
            self.held.resize(n)
        if self.decode_role:
            self.dest.resize(n)
            self.att_gen.resize(n, -1)
        return 0

    cdef int _finish(self, rid_t r, double end) except -1 nogil:
        cdef int64_t i, n
        if self.hold_source:
            # disaggregated prefill: the prompt's pages stay held (allocated, and not in the
            # prefix cache yet) until the destination has them; the router hears of them now
            if self.caching and self.cache.record_events:
                n = self.t.computed[r] // self.bs
                if n > <int64_t>self.t.blocks[r].size():
                    n = <int64_t>self.t.blocks[r].size()
                for i in range(self.ins[r], n):
                    self.cache.events.push_back(KvEvent(self.t.block_hash(r, i), 1, r, <int32_t>i))
            self.held[r].swap(self.t.blocks[r])
            self.t.blocks[r].clear()
        else:
            self._release(r)
            self.cap_gen += 1
        self.t.status[r] = ST_COMPLETED
        self.t.terminal_time[r] = end
        self.out_completed.push_back(r)
        return 0

    cdef int _retract(self, rid_t r) except -1 nogil:
        self._drop(r)
        self.cap_gen += 1
        self.t.computed[r] = 0
        self.t.status[r] = ST_WAITING
        self.waiting.push_back(r)
        self.preemptions_total += 1
        self.out.preemptions += 1
        return 0

    cdef int64_t _match_len(self, rid_t r) except -1 nogil:
        """Pages a (re)admission may take from the cache: all but the token to sample from."""
        cdef int64_t seq = self.t.prompt_len[r] + self.t.generated[r]
        # (a disaggregated prefill samples one hidden token, yet a request asking for no output
        # may take its whole prompt from the cache)
        cdef bint samples = self.t.max_out[r] > 0 and not (self.hold_source and self.t.req_out[r] == 0)
        cdef int64_t n = (seq - 1 if samples else seq) // self.bs
        self.t.ensure_hashed(r)
        if n > <int64_t>self.t.hashes[r].size():
            n = <int64_t>self.t.hashes[r].size()
        return n

    # -- scheduling policy --------------------------------------------------------
    cdef int _apply_lpm(self) except -1 nogil:
        cdef vector[LpmKey] keys
        cdef LpmKey k
        cdef unordered_set[hash_t] seen
        cdef int64_t tpages = ceil_div(IN_BATCH_PREFIX_THRESHOLD, self.bs)
        cdef vector[size_t] slots
        cdef int64_t pos = 0, n
        cdef size_t i
        cdef rid_t r
        cdef hash_t key
        for i in range(self.waiting.size()):
            # a decode worker's transferred requests wait in a queue of their own (activation
            # order, promoted first): the policy neither moves nor counts them (fuzz 2305/61)
            if not self.t.activated[self.waiting[i]]:
                slots.push_back(i)
        if <int64_t>slots.size() > LPM_MAX_WAITING:
            return 0
        for i in slots:
            r = self.waiting[i]
            k.r = r
            k.pos = pos
            pos += 1
            # the sort key matches every full page of the sequence, without the admission's
            # "keep one token to sample from" cap: a fully cached prompt outranks one cached up
            # to its last page (fuzz 2253/44).  (A page this request has not hashed yet holds
            # tokens it sampled but never computed, so it cannot be cached.)
            self.t.ensure_hashed(r)
            n = (self.t.prompt_len[r] + self.t.generated[r]) // self.bs
            if n > <int64_t>self.t.hashes[r].size():
                n = <int64_t>self.t.hashes[r].size()
            k.prefix_len = self.cache.match(self.t.hashes[r].data(), n) * self.bs
            k.dep = 0
            if (k.prefix_len <= IN_BATCH_PREFIX_THRESHOLD
                    and self.t.prompt_len[r] + self.t.generated[r] >= tpages * self.bs
                    and tpages <= <int64_t>self.t.hashes[r].size()):
                key = self.t.hashes[r][tpages - 1]
                if seen.count(key):
                    k.dep = 1
                else:
                    seen.insert(key)
            keys.push_back(k)
        stable_sort(keys.begin(), keys.end(), lpm_less)
        for i in range(keys.size()):
            self.waiting[slots[i]] = keys[i].r
        return 0

    # -- prefill batch --------------------------------------------------------------
    cdef int _prefill_batch(self, double now) except -1 nogil:
        cdef double reserved = 0.0, rem_total
        cdef int64_t rem_input = self.max_prefill_tokens
        cdef int64_t rem_chunk = self.chunked_prefill_size
        cdef int64_t bs = self.bs
        cdef int64_t seq, cached_pages, cached, start, extend, chunk, charged, reserve, need, prefix_len
        cdef int64_t rem, stamp, isl = 0, pre = 0
        cdef rid_t r
        cdef bint first_adm, fits
        cdef int ok
        for r in self.running:
            rem = self.remaining(r)
            reserved += <double>(rem if rem < self.clip_max_new_tokens else self.clip_max_new_tokens) * self.new_token_ratio
        rem_total = <double>((<int64_t>self.cache.free_slots.size() + self.cache.evictable) * bs) - reserved
        while self.waiting.size() > 0 and (
                self.max_num_seqs <= 0
                or <int64_t>self.batch.size() < self.max_num_seqs - <int64_t>self.running.size()):
            r = self.waiting.front()
            self.waiting.pop_front()
            seq = self.t.prompt_len[r] + self.t.generated[r]
            first_adm = self.t.computed[r] == 0
            cached_pages = 0
            if first_adm and self.caching:
                need = self._match_len(r)       # hashes the request first
                cached_pages = self.cache.match(self.t.hashes[r].data(), need)
            cached = cached_pages * bs
            start = self.t.computed[r] if self.t.computed[r] > cached else cached
            extend = seq - start
            if extend == 0 and not first_adm:
                self.waiting.push_front(r)
                break
            if extend <= rem_chunk:
                chunk = extend
            else:
                chunk = (rem_chunk // bs) * bs
                if chunk > extend:
                    chunk = extend
                if chunk == 0:
                    self.waiting.push_front(r)
                    break
            charged = ceil_div(chunk, bs) * bs
            rem = self.remaining(r)
            reserve = 0 if chunk < extend else (rem if rem < self.clip_max_new_tokens else self.clip_max_new_tokens)
            if <double>(charged + reserve) >= rem_total:
                self.waiting.push_front(r)
                break
            if charged > rem_input or charged > rem_chunk:
                self.waiting.push_front(r)
                break
            fits = True
            if first_adm:
                fits = (<int64_t>self.cache.free_slots.size() + self.cache.evictable
                        >= ceil_div(start + chunk, bs) - cached_pages)
                # the reference matches and locks (refreshing, splitting) before it finds that
                # the request does not fit
                self.touch[r] = self.cache.tick()
                self.skip_lo[r] = self.cache.lock_path(self.t.hashes[r].data(), cached_pages, &self.t.blocks[r])
                self.skip_hi[r] = cached_pages
                self.ins[r] = cached_pages
                need = ceil_div(start + chunk, bs) - cached_pages
            else:
                need = ceil_div(start + chunk, bs) - <int64_t>self.t.blocks[r].size()
            ok = fits and self.cache.alloc(need, &self.t.blocks[r])
            if fits and not ok and first_adm and cached_pages > 0:
                self.own_path_conflicts += 1
            if not ok:
                if first_adm:
                    self._drop(r)           # give the matched path back
                self.waiting.push_front(r)
                break
            prefix_len = cached if first_adm else self.t.computed[r]
            if first_adm:
                self.t.record_admission(r, now, prefix_len)
            self.t.computed[r] = start + chunk
            self.t.allocated[r] = <int64_t>self.t.blocks[r].size() * bs
            self.t.status[r] = ST_RUNNING
            isl += start + chunk
            pre += prefix_len
            self.t.sched_pass[r] = self.pass_id     # per-pass record (forward-pass metrics)
            self.t.sched_prompt[r] = chunk
            self.t.sched_before[r] = prefix_len
            self.out.committed_prefill += chunk
            rem_total -= <double>(charged + reserve)
            rem_input -= charged
            rem_chunk -= charged
            self.batch.push_back(r)
            if rem_chunk <= 0:
                break
        self.out.prefill_n = <int64_t>self.batch.size()
        self._isl = isl
        self._pre = pre
        return 0

    # -- one pass -------------------------------------------------------------------
    cdef int step(self, double now) except -1 nogil:
        cdef bint defer, idle_round = False, effect = False, retracted = False, slots
        cdef size_t i, keep
        cdef rid_t r, victim
        cdef int64_t rem, seq, need, avail, best, prev_rounds
        cdef double end = now, active, estimate = 0.0
        cdef double ratio_before = self.new_token_ratio
        cdef vector[rid_t] newly, done, zero
        cdef int64_t nb
        cdef vector[int64_t] rems
        if self.decode_role:
            self._admit_activated(now)
        if self.grouped:
            # attention DP: the interval countdown belongs to the worker (finish_group_pass)
            # and holds back the prefills of every rank
            defer = self.prefill_rounds_remaining > 0
        else:
            if self.running.size() == 0 and now > self.last_end and self.prefill_rounds_remaining > 0:
                # the rank idled since its last pass: it ran its remaining interval rounds (idle
                # rounds, see below) at that pass's end, with nothing waiting
                self.prefill_rounds_remaining = 0
                self.new_token_ratio = self.init_ratio
            # decode-only rounds after a prefill hold back prefills (and chunk continuations);
            # with nothing to decode each such round is an idle pass that takes no time: it turns
            # away over-long prompts (stamped with its start), resets the admission ratio and
            # counts down the interval
            defer = self.prefill_rounds_remaining > 0 and self.running.size() > 0
            idle_round = self.prefill_rounds_remaining > 0 and self.running.size() == 0
        self.begin_pass(now)
        self.idle_round = False
        self.batch.clear()
        self._isl = 0
        self._pre = 0
        # prompts that can never fit under max_model_len are rejected wherever they wait at
        # the start of a pass, stamped with its end
        if self.max_model_len > 0:
            keep = 0
            for i in range(self.waiting.size()):
                r = self.waiting[i]
                if self.t.prompt_len[r] >= self.max_model_len:
                    self.t.status[r] = ST_REJECTED
                    self.out_rejected.push_back(r)
                else:
                    self.waiting[keep] = r
                    keep += 1
            while self.waiting.size() > keep:
                self.waiting.pop_back()
        if idle_round:
            self.prefill_rounds_remaining -= 1
            self.new_token_ratio = self.init_ratio
            self._end_pass(now, True)
            return 0
        if self.lpm and self.caching and (self.decode_role
                                          or <int64_t>self.waiting.size() <= LPM_MAX_WAITING):
            self._apply_lpm()
        if not defer and not (self.decode_role and self.pending_dest):
            # (a decode worker readmits retracted requests only while no destination waits for
            # room on it)
            self._prefill_batch(now)

        if self.batch.size() > 0:
            # prefill pass: running requests stall.  A decode worker recomputes a retracted
            # request's KV without prefill time (a pass of zero duration)
            end = now
            if not self.decode_role:
                end = now + prefill_phase_ms(&self.tm, self.out.prefill_n, self._isl, self._pre)
            for r in self.batch:
                if self.t.computed[r] < self.t.prompt_len[r] + self.t.generated[r]:
                    self._cache_materialized(r)
                    self.waiting.push_front(r)          # chunk continuation
                else:
                    self.running.push_back(r)
                    newly.push_back(r)
            # KV slots for the first token of the requests that keep running are reserved
            # together, before any finishing request releases its pages: after evicting what
            # it can, either every one gets its slot or none emits this pass (they sample
            # their first token in the next decode pass instead)
            need = 0
            for r in newly:
                rems.push_back(self.remaining(r))
                if rems.back() >= 2 and self.t.computed[r] + 1 > self.t.allocated[r]:
                    need += 1
            slots = self._make_room(need)
            # the requests that keep running sample their first token (and cache their pages)
            # before the finished ones release theirs: those that sample nothing first, then
            # those whose first token is their last
            for i in range(newly.size()):
                r = newly[i]
                if rems[i] >= 2 and slots:
                    if self.t.computed[r] + 1 > self.t.allocated[r]:
                        self.cache.alloc(1, &self.t.blocks[r])
                        self.t.allocated[r] = self.t.allocated[r] + self.bs
                    self.emit_token(r, end)
                    self.t.computed[r] = self.t.computed[r] + 1
                    self._cache_materialized(r)
            for i in range(newly.size()):
                if rems[i] == 0:
                    self._remove_running(newly[i])
                    self._finish(newly[i], end)
            for i in range(newly.size()):
                if rems[i] == 1:
                    self.emit_token(newly[i], end)
                    self._remove_running(newly[i])
                    self._finish(newly[i], end)
            if self.out.committed_prefill > 0 and not self.decode_role:
                # a batch with nothing to compute (fully cached zero-output requests) does not
                # count as a prefill round; one that computes prompt tokens does even when it
                # takes no time (the batch-mean prompt and prefix floor to the same value, so the
                # timing model sees no new tokens): the decode rounds follow (fuzz 922049/78)
                self.out.prefill_work = True
                self.out.model_work = True
                if not self.grouped:
                    self.prefill_rounds_remaining = self.prefill_decode_interval
            elif self.decode_role and self.out.committed_prefill > 0 and not self.grouped:
                # a decode worker's recompute pass takes no time but is a prefill round all the
                # same: with prefill_decode_interval the next chunk waits for the decode rounds
                # (fuzz 2117/29: a 2-chunk readmission's second chunk runs one decode pass later)
                self.prefill_rounds_remaining = self.prefill_decode_interval
            effect = True
        else:
            # decode pass over the running requests
            keep = 0
            for i in range(self.running.size()):
                r = self.running[i]
                if self.remaining(r) == 0 and self.decode_role and self.t.generated[r] == 0:
                    # a transferred request that samples nothing completes at this pass's end
                    zero.push_back(r)
                elif self.remaining(r) == 0:
                    self._finish(r, now)
                    effect = True
                else:
                    self.running[keep] = r
                    keep += 1
            self.running.resize(keep)
            # memory check: retract the request with the fewest generated tokens until it fits
            while self.running.size() > 1:
                need = 0
                for r in self.running:
                    seq = self.t.prompt_len[r] + self.t.generated[r]
                    rem = ceil_div(seq + 1, self.bs) * self.bs - self.t.allocated[r]
                    if rem > 0:
                        need += rem
                avail = (<int64_t>self.cache.free_slots.size() + self.cache.evictable) * self.bs
                if avail >= need:
                    break
                best = 0
                for i in range(1, self.running.size()):
                    if self.t.generated[self.running[i]] < self.t.generated[self.running[best]]:
                        best = i
                victim = self.running[best]
                self.running.erase(self.running.begin() + best)
                self._retract(victim)
                retracted = True
                effect = True
            if retracted:
                estimate = self._estimate_ratio()   # from the survivors before this pass's tokens
            if self.running.size() > 0 or zero.size() > 0:
                active = 0.0
                for r in self.running:
                    active += <double>(self.t.prompt_len[r] + self.t.generated[r])
                # (transferred requests that sample nothing ride along untimed: alone, they
                # complete at once)
                nb = <int64_t>self.running.size()
                self.out.decode_n = nb
                if nb > 0:
                    end = now + decode_phase_ms(&self.tm, nb, active)
                # this pass's KV slots are reserved together (evicting up front) before any
                # request finishes and releases its pages; without room nobody decodes
                need = 0
                for r in self.running:
                    if self.t.prompt_len[r] + self.t.generated[r] + 1 > self.t.allocated[r]:
                        need += 1
                slots = self._make_room(need)
                if slots:
                    for r in self.running:
                        if self.t.prompt_len[r] + self.t.generated[r] + 1 > self.t.allocated[r]:
                            self.cache.alloc(1, &self.t.blocks[r])
                            self.t.allocated[r] = self.t.allocated[r] + self.bs
                    # the requests that keep running cache their new pages before the finished
                    # ones release theirs
                    keep = 0
                    for i in range(self.running.size()):
                        r = self.running[i]
                        self.emit_token(r, end)
                        self.t.computed[r] = self.t.computed[r] + 1
                        if self.remaining(r) == 0:
                            done.push_back(r)
                        else:
                            self._cache_materialized(r)
                            self.running[keep] = r
                            keep += 1
                    self.running.resize(keep)
                    for r in done:
                        self._finish(r, end)
                if self.out_emitted.size() == 0 and zero.size() == 0:
                    # nobody could get a KV slot: the pass did nothing (the run cannot progress)
                    end = now
                for r in zero:
                    self._finish(r, end)
            self.out.model_work = self.out_emitted.size() > 0
            if retracted:
                self.new_token_ratio = estimate
            elif self.running.size() > 0 or self.out_emitted.size() > 0:
                self.new_token_ratio -= self.decay_step
                if self.new_token_ratio < self.min_ratio:
                    self.new_token_ratio = self.min_ratio
            elif defer:
                if self.grouped:
                    self.idle_round = True              # resolved when the worker pass ends
                else:
                    self.new_token_ratio = self.init_ratio      # an idle interval round
            else:
                # a decode pass with nothing to decode (disaggregated: nothing admissible now)
                # decays the ratio all the same; the driver reruns such a pass at once while
                # the ratio moves (fuzz 2305/121)
                self.new_token_ratio -= self.decay_step
                if self.new_token_ratio < self.min_ratio:
                    self.new_token_ratio = self.min_ratio
            self.out.retry = not defer and self.new_token_ratio != ratio_before
            prev_rounds = self.prefill_rounds_remaining
            if self.prefill_rounds_remaining > 0 and not self.grouped:
                self.prefill_rounds_remaining -= 1      # grouped: the worker pass end counts down
            if prev_rounds != self.prefill_rounds_remaining:
                effect = True
        self._end_pass(end, effect)
        return 0

    cdef void _end_pass(self, double end, bint effect) noexcept nogil:
        cdef rid_t r
        self.last_end = end
        for r in self.out_rejected:
            self.t.terminal_time[r] = end
        self.out.end = end
        self.out.effect = (effect or self.out_emitted.size() > 0 or self.out_completed.size() > 0
                           or self.out_rejected.size() > 0)

    cdef void begin_group_pass(self, double now) noexcept nogil:
        """Attention DP: a worker that idled since its last pass end (no rank had work) ran its
        remaining interval rounds there as idle rounds, as a single rank does (see ``step``):
        the next pass meets no interval and a reset admission ratio (fuzz 2252/11)."""
        if self.prefill_rounds_remaining > 0 and now > self.last_end and self.running.size() == 0:
            self.prefill_rounds_remaining = 0
            self.new_token_ratio = self.init_ratio

    cdef bint finish_group_pass(self, bint stepped, bint any_prefill, bint any_model, double end) noexcept nogil:
        """Attention DP: every rank of the worker sees the same prefill signal at the pass end,
        so the interval countdown stays in step across ranks (idle ones included)."""
        cdef int64_t prev = self.prefill_rounds_remaining
        self.last_end = end                             # grouped: the worker's latest pass end
        if stepped and self.idle_round and not any_model:
            self.new_token_ratio = self.init_ratio      # no rank ran a forward: an idle round
        self.idle_round = False
        if any_prefill:
            self.prefill_rounds_remaining = self.prefill_decode_interval
        elif self.prefill_rounds_remaining > 0:
            self.prefill_rounds_remaining -= 1
        return self.prefill_rounds_remaining != prev

    cdef int _make_room(self, int64_t pages) except -1 nogil:
        """Evict cached pages until ``pages`` are free (as far as possible); 1 if they are."""
        if <int64_t>self.cache.free_slots.size() < pages:
            self.cache._evict(pages - <int64_t>self.cache.free_slots.size())
        return 1 if <int64_t>self.cache.free_slots.size() >= pages else 0

    cdef int _remove_running(self, rid_t r) except -1 nogil:
        cdef size_t i
        for i in range(self.running.size() - 1, -1, -1):
            if self.running[i] == r:
                self.running.erase(self.running.begin() + i)
                return 0
        return 0

    cdef double _estimate_ratio(self) noexcept nogil:
        cdef int64_t gen = 0, cap = 0
        cdef rid_t r
        for r in self.running:
            gen += self.t.generated[r]
            cap += self.t.max_out[r]
        cdef double v = (<double>gen + 20.0 * <double>self.running.size()) / (<double>cap + 1.0)
        return v if v < 1.0 else 1.0


    # -- disaggregated handoff, destination first (docs/core-sim.md §6.6; REFERENCE_NOTES) ----
    cdef int _admit_activated(self, double now) except -1 nogil:
        """Decode worker: requests whose prompt KV arrived enter the running batch at the pass
        start, in activation order, while sequence slots are free (nothing to compute)."""
        cdef size_t i, keep = 0
        cdef rid_t r
        for i in range(self.waiting.size()):
            r = self.waiting[i]
            if self.t.activated[r] and (self.max_num_seqs <= 0
                                        or <int64_t>self.running.size() < self.max_num_seqs):
                self.t.activated[r] = 0
                self.t.status[r] = ST_RUNNING
                self.running.push_back(r)
                self.t.record_decode_admission(r, now)
            else:
                self.waiting[keep] = r
                keep += 1
        while self.waiting.size() > keep:
            self.waiting.pop_back()
        return 0

    cdef int reserve_destination(self, rid_t r, int64_t* missing_blocks) except -1 nogil:
        """Lock the prompt's resident prefix pages and allocate the rest (evicting as needed);
        False if the pool cannot hold them now (nothing held; the prefix was refreshed)."""
        cdef int64_t bs = self.bs, plen = self.t.prompt_len[r]
        cdef int64_t total = ceil_div(plen, bs), nfull = plen // bs, matched = 0, stamp
        self.t.ensure_hashed(r)
        if nfull > <int64_t>self.t.hashes[r].size():
            nfull = <int64_t>self.t.hashes[r].size()
        if self.caching:
            matched = self.cache.match(self.t.hashes[r].data(), nfull)
        # the reference matches and locks the prefix (refreshing its stamp, splitting its edge)
        # before it checks the room, which leaves the locked prefix out of the evictable pages;
        # an attempt that fails unlocks it again, refreshed (fuzz 2305/172)
        self.dest[r].clear()
        self.touch[r] = self.cache.tick()
        self.skip_lo[r] = self.cache.lock_path(self.t.hashes[r].data(), matched, &self.dest[r])
        self.skip_hi[r] = matched
        self.ins[r] = matched
        if not self.cache.alloc(total - matched, &self.dest[r]):
            self._drop_pages(r, &self.dest[r])
            return 0
        missing_blocks[0] = total - matched
        return 1

    cdef int activate_destination(self, rid_t r) except -1 nogil:
        """The transferred prompt KV is in place: cache its pages, queue the request for decode."""
        self.t.blocks[r].swap(self.dest[r])
        vector[slot_t]().swap(self.dest[r])
        self.t.computed[r] = self.t.prompt_len[r]
        self.t.allocated[r] = <int64_t>self.t.blocks[r].size() * self.bs
        self._cache_materialized(r)
        self.t.activated[r] = 1
        self.t.status[r] = ST_WAITING
        self.waiting.push_back(r)
        return 0

    cdef int release_source(self, rid_t r) except -1 nogil:
        """The destination has the KV: the held prompt pages enter the prefix cache and are
        released (evictable)."""
        self._insert_pages(r, &self.held[r], self.t.prompt_len[r] // self.bs)
        self._drop_pages(r, &self.held[r])
        vector[slot_t]().swap(self.held[r])
        return 0
