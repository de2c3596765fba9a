# cython: language_level=3
"""One rank of the vLLM-style continuous-batching scheduler (docs/core-sim.md §3).

``step(now)`` runs one forward pass: schedules running requests then admits waiting
ones under the token budget, allocates blocks (preempting on failure), times the
pass and emits one token per ready request, all stamped with the pass end.
"""
from libcpp.vector cimport vector
from mocker._core._types cimport int32_t, int64_t, rid_t, slot_t, hash_t, ceil_div, KvEvent
from mocker._core.timing cimport prefill_phase_ms, decode_phase_ms
from mocker._core.table cimport ReqTable, ST_WAITING, ST_RUNNING, ST_COMPLETED, ST_REJECTED, ST_CANCELLED
from mocker._core.blocks cimport BlockPool
from mocker._core.rank cimport Rank

cdef enum:
    BLOCKED = -1
    SELF_PREEMPTED = -2     # (-3: MemoryError, the exception value of _schedule)

cdef int64_t UNLIMITED = 1 << 62


cdef class VllmRank(Rank):
    def __cinit__(self, ReqTable table, dict engine):
        self.max_batched = engine["max_num_batched_tokens"] or 0
        self.chunked = engine["enable_chunked_prefill"]
        self.fifo_preempt = engine["preemption_mode"] == "fifo"
        self.trtllm = engine["backend"] == "trtllm"
        self.pool = BlockPool(self.num_blocks, engine["enable_prefix_caching"],
                              engine.get("emit_kv_events", False))
        self.hold_source = engine.get("worker_type") == "prefill"
        if self.hold_source:
            self.held.resize(table.n)
        self.decode_role = engine.get("worker_type") == "decode"
        if self.decode_role:
            self.worder.resize(table.n, 0)
            self.att_gen.resize(table.n, -1)

    @property
    def pool_view(self):
        return self.pool

    cdef vector[KvEvent]* kv_events(self) noexcept nogil:
        return &self.pool.events

    cdef int abort(self, rid_t r) except -1 nogil:
        if not self._unqueue(r):
            return 0
        if self.t.blocks[r].size() > 0:
            self.pool.release(&self.t.blocks[r])     # full blocks stay cached, like a completion
            self.cap_gen += 1
        self.t.allocated[r] = 0
        self.t.status[r] = ST_CANCELLED
        return 1

    cdef int grow(self, int64_t n) except -1 nogil:
        if self.hold_source:
            self.held.resize(n)
        if self.decode_role:
            self.worder.resize(n, 0)
            self.att_gen.resize(n, -1)
        return 0

    cdef int add_request(self, rid_t r) except -1 nogil:
        if self.trtllm:
            self._trt_clamp(r)
        return Rank.add_request(self, r)

    cdef void _trt_clamp(self, rid_t r) noexcept nogil:
        """Guaranteed-no-evict: outputs are clamped to what the whole pool can hold."""
        cdef int64_t cap = self.num_blocks * self.bs - self.t.prompt_len[r]
        if cap < 0:
            cap = 0
        if self.t.max_out[r] > cap:
            self.t.max_out[r] = cap

    # -- helpers ----------------------------------------------------------------
    cdef void _unschedule(self, rid_t v) noexcept nogil:
        if self.t.sched_pass[v] != self.pass_id:
            return
        self.budget += self.t.sched_used[v]
        if self.t.sched_prompt[v] > 0 and not self.decode_role:
            self.b_n -= 1
            self.b_isl -= self.t.sched_before[v] + self.t.sched_prompt[v]
            self.b_pre -= self.t.sched_before[v]
        self.t.sched_pass[v] = -1

    cdef rid_t _preempt_one(self) except -2 nogil:
        """Preempt the policy's victim; returns it, or -1 if nothing can be preempted."""
        cdef rid_t v
        cdef size_t i
        if self.running.size() == 0 or self.trtllm:
            return -1
        if self.fifo_preempt:
            v = self.running[0]
            self.running.erase(self.running.begin())
        else:
            v = self.running.back()
            self.running.pop_back()
        self.preempted_any = True
        self.cap_gen += 1
        self._unschedule(v)
        self.pool.release(&self.t.blocks[v])
        self.t.computed[v] = 0
        self.t.allocated[v] = 0
        self.t.status[v] = ST_WAITING
        self.waiting.push_front(v)
        self.preemptions_total += 1
        self.out.preemptions += 1
        return v

    cdef int64_t _schedule(self, rid_t r, bint from_waiting, int64_t cached) except -3 nogil:
        cdef int64_t bs = self.bs
        cdef int64_t plen = self.t.prompt_len[r]
        cdef int64_t seq_len = plen + self.t.generated[r]
        cdef int64_t cached_prefix = cached if self.t.computed[r] == 0 else 0
        cdef int64_t before = self.t.computed[r] + cached_prefix
        cdef int64_t prompt_before = before if before < plen else plen
        cdef int64_t remaining_known = seq_len - before
        cdef int64_t prompt_remaining = plen - prompt_before
        cdef int64_t desired, after, used, prompt_tokens, prev, n_hits, k
        cdef rid_t v
        cdef int ok
        if prompt_remaining > 0 and not self.chunked and prompt_remaining > self.budget:
            return BLOCKED
        desired = remaining_known if remaining_known < self.budget else self.budget
        if desired == 0 and remaining_known > 0:
            return BLOCKED
        after = before + desired
        while True:
            if after > self.t.allocated[r]:
                prev = <int64_t>self.t.blocks[r].size()
                n_hits = cached_prefix // bs - prev
                if n_hits < 0:
                    n_hits = 0
                ok = self.pool.allocate(&self.t.blocks[r], ceil_div(after, bs),
                                        self.t.hashes[r].data() + prev, n_hits)
                if ok:
                    self.t.allocated[r] = after
            else:
                ok = 1
            if ok:
                self.t.computed[r] = after
                break
            v = self._preempt_one()
            if v < 0:
                after = before
                break
            if v == r:
                return SELF_PREEMPTED
        used = after - before
        if used == 0 and after < seq_len:
            return BLOCKED
        # blocks that just became full are published to the prefix cache now
        for k in range(before // bs, after // bs):
            self.pool.ev_rid = r
            self.pool.ev_pos = <int32_t>k
            self.pool.cache_block(self.t.blocks[r][k], self.t.block_hash(r, k))
        prompt_tokens = (after if after < plen else plen) - prompt_before
        self.t.sched_pass[r] = self.pass_id
        self.t.sched_used[r] = used
        self.t.sched_prompt[r] = prompt_tokens
        self.t.sched_before[r] = prompt_before
        self.sched.push_back(r)
        if prompt_tokens > 0:
            # committed when scheduled: a later preemption in this pass does not take it back
            self.out.committed_prefill += used
            if not self.decode_role:
                # a decode worker's recompute after preemption is not timed as a prefill
                self.b_n += 1
                self.b_isl += prompt_before + prompt_tokens
                self.b_pre += prompt_before
        if from_waiting:
            self._remove_waiting(r)
            self.running.push_back(r)
            self.t.status[r] = ST_RUNNING
            self.t.record_admission(r, self.out.start, cached_prefix)
        self.budget -= used
        return used

    cdef int _remove_waiting(self, rid_t r) except -1 nogil:
        cdef size_t i
        for i in range(self.waiting.size()):
            if self.waiting[i] == r:
                self.waiting.erase(self.waiting.begin() + i)
                return 0
        return 0

    cdef int _finish(self, rid_t r, double end) except -1 nogil:
        if self.hold_source:
            # disaggregated prefill: the KV stays allocated until the destination has it
            self.held[r].swap(self.t.blocks[r])
            self.t.blocks[r].clear()
        else:
            self.pool.release(&self.t.blocks[r])
            self.cap_gen += 1
        self.t.status[r] = ST_COMPLETED
        self.t.terminal_time[r] = end
        self.out_completed.push_back(r)
        return 0

    cdef int _insert_in_order(self, deque[rid_t]* q, rid_t r) except -1 nogil:
        """Insert ``r`` before the first queued request with a later destination ordinal."""
        cdef size_t i
        for i in range(q.size()):
            if self.worder[q[0][i]] > self.worder[r]:
                q.insert(q.begin() + i, r)
                return 0
        q.push_back(r)
        return 0

    cdef int _admit_materialized(self, rid_t r, double now) except -1 nogil:
        cdef size_t i
        self._remove_waiting(r)
        for i in range(self.mat.size()):
            if self.mat[i] == r:
                self.mat.erase(self.mat.begin() + i)
                break
        self.t.activated[r] = 0
        self.t.status[r] = ST_RUNNING
        self.t.sched_pass[r] = self.pass_id
        self.t.sched_used[r] = 0
        self.t.sched_prompt[r] = 0
        self.running.push_back(r)
        return self.t.record_decode_admission(r, now)

    cdef int _reject(self, rid_t r) except -1 nogil:
        self.t.status[r] = ST_REJECTED
        self.out_rejected.push_back(r)
        return 0

    cdef int64_t _final_len(self, rid_t r) noexcept nogil:
        """Sequence length at completion (output cap and max_model_len applied)."""
        return self.t.prompt_len[r] + self.t.generated[r] + self.remaining(r)

    cdef int64_t _trt_reserved(self) noexcept nogil:
        cdef int64_t total = 0
        cdef rid_t r
        for r in self.running:
            total += self._trt_tail(r)
        return total

    cdef int64_t _trt_tail(self, rid_t r) noexcept nogil:
        """Blocks ``r`` still needs to reach completion beyond the ones it holds."""
        cdef int64_t need = ceil_div(self._final_len(r), self.bs) - <int64_t>self.t.blocks[r].size()
        return need if need > 0 else 0

    cdef bint _prefill_chunk(self, rid_t r) noexcept nogil:
        """A running request still in prefill (throttling, docs/core-sim.md §3.8): more than the last
        sampled token left to compute, or a prompt not yet sampled from -- a chunk leaving a
        single prompt token (budget not a multiple of the chunk) is a prefill continuation
        too, not a decode."""
        if self.t.computed[r] < self.t.prompt_len[r] + self.t.generated[r] - 1:
            return True
        return self.t.generated[r] == 0 and self.t.computed[r] < self.t.prompt_len[r]

    # -- one pass -----------------------------------------------------------------
    cdef int step(self, double now) except -1 nogil:
        cdef int64_t bs = self.bs
        cdef size_t i
        cdef rid_t r
        cdef int64_t res, seq_len, overlap, active_overlap, cached, active_cached, needed, available, nfull
        cdef double prefill_ms, decode_ms, end, active
        cdef int64_t n_decode, rem
        cdef bint effect = False, defer = False

        self.begin_pass(now)
        self.sched.clear()
        self.budget = self.max_batched if self.max_batched > 0 else UNLIMITED
        self.b_n = 0
        self.b_isl = 0
        self.b_pre = 0
        self.preempted_any = False
        if self.throttle and not self.capacity_bound:
            # attention-DP prefill throttling (docs/core-sim.md §3.8): a rank that is decoding holds its
            # prefills back on passes off the prefill_schedule_interval
            for r in self.running:
                if not self._prefill_chunk(r):
                    defer = True        # decoding: at most the last sampled token to compute
                    break

        # (A) running requests, in running order
        i = 0
        while i < self.running.size() and self.budget > 0:
            r = self.running[i]
            if defer and self._prefill_chunk(r):
                i += 1                  # a prefill chunk continuation waits for an aligned pass
                continue
            res = self._schedule(r, False, 0)
            if res == BLOCKED:
                break
            if res == SELF_PREEMPTED:
                continue
            i += 1

        # (B) waiting admission, strictly FIFO head-of-line
        while (not self.preempted_any and self.waiting.size() > 0 and
               (self.max_num_seqs <= 0 or <int64_t>self.running.size() < self.max_num_seqs)):
            if self.decode_role:
                # disaggregated decode: a request whose prompt KV arrived by transfer needs no
                # blocks and computes nothing. While a destination waits for room, only such
                # requests enter (in destination order); otherwise the queue is plain FIFO
                if self.pending_dest:
                    if self.mat.size() == 0:
                        break
                    r = self.mat.front()
                else:
                    r = self.waiting.front()
                if self.t.activated[r]:
                    self._admit_materialized(r, now)
                    if self.budget == 0:
                        break
                    continue
            r = self.waiting.front()
            seq_len = self.t.prompt_len[r] + self.t.generated[r]
            if self.max_model_len > 0 and self.t.prompt_len[r] >= self.max_model_len:
                self.waiting.pop_front()
                self._reject(r)
                continue
            if self.t.admissions[r] == 0 and ceil_div(seq_len, bs) > self.num_blocks:
                self.waiting.pop_front()
                self._reject(r)
                continue
            if (self.trtllm and self.t.req_out[r] > 0
                    and self.t.prompt_len[r] >= self.num_blocks * bs):
                # no room for a single output token in the whole pool
                self.waiting.pop_front()
                self._reject(r)
                continue
            self.t.ensure_hashed(r)
            nfull = seq_len // bs
            if nfull > <int64_t>self.t.hashes[r].size():
                nfull = <int64_t>self.t.hashes[r].size()
            self.pool.lookup(self.t.hashes[r].data(), nfull, &overlap, &active_overlap)
            cached = overlap * bs
            if cached > seq_len:
                cached = seq_len
            active_cached = active_overlap * bs
            if active_cached > seq_len:
                active_cached = seq_len
            if (cached >= seq_len and not self.trtllm and self.remaining(r) > 0
                    and not (self.hold_source and self.t.req_out[r] == 0)):
                # vLLM must compute at least the last token to sample from it; TRT-LLM and
                # requests that sample nothing (zero output) take a full hit -- in a prefill pool
                # too, although it samples one hidden token there
                cached = ((seq_len - 1) // bs) * bs
            if defer and seq_len - cached > 1:
                break                   # needs local prefill: not on a throttled pass
            if self.trtllm:
                needed = ceil_div(self._final_len(r), bs) - (active_cached if active_cached < cached else cached) // bs
                available = self.num_blocks - self.pool.num_active() - self._trt_reserved()
            else:
                needed = ceil_div(seq_len, bs) - (active_cached if active_cached < cached else cached) // bs
                available = self.num_blocks - self.pool.num_active()
            if needed > available:
                break
            res = self._schedule(r, True, cached)
            if res == BLOCKED or res == SELF_PREEMPTED:
                break
            if res == 0 and self.budget == 0:
                break

        # timing: prefill batch, then the decode set D
        prefill_ms = prefill_phase_ms(&self.tm, self.b_n, self.b_isl, self.b_pre)
        n_decode = 0
        active = 0.0
        for r in self.running:
            seq_len = self.t.prompt_len[r] + self.t.generated[r]
            if self.t.computed[r] != seq_len or self.remaining(r) == 0:
                continue
            if self.t.generated[r] == 0 and self.t.sched_pass[r] == self.pass_id and self.t.sched_prompt[r] > 0:
                continue          # first token sampled from this pass's prefill
            if self.hold_source:
                continue          # a prefill pool's full prefix hit: its hidden token is free
            n_decode += 1
            active += <double>seq_len
        decode_ms = decode_phase_ms(&self.tm, n_decode, active)
        end = (now + prefill_ms) + decode_ms

        for r in self.sched:
            if self.t.sched_pass[r] == self.pass_id and self.t.sched_used[r] > 0:
                effect = True

        # requests that sample nothing (zero output) finish first, then the others emit
        cdef size_t keep = 0
        for i in range(self.running.size()):
            r = self.running[i]
            if (self.t.computed[r] == self.t.prompt_len[r] + self.t.generated[r]
                    and self.remaining(r) == 0):
                self._finish(r, end)
            else:
                self.running[keep] = r
                keep += 1
        self.running.resize(keep)
        keep = 0
        for i in range(self.running.size()):
            r = self.running[i]
            seq_len = self.t.prompt_len[r] + self.t.generated[r]
            if self.t.computed[r] < seq_len:
                self.running[keep] = r
                keep += 1
                continue
            rem = self.remaining(r)
            if rem > 0:
                self.emit_token(r, end)
                rem -= 1
            if rem == 0:
                self._finish(r, end)
            else:
                self.running[keep] = r
                keep += 1
        self.running.resize(keep)
        for r in self.out_rejected:
            self.t.terminal_time[r] = end

        if not defer and not self.preempted_any:
            self.capacity_bound = self.waiting.size() > 0
        self.out.end = end
        self.out.prefill_n = self.b_n
        self.out.decode_n = n_decode
        self.out.effect = (effect or self.out_emitted.size() > 0 or self.out_completed.size() > 0
                           or self.out_rejected.size() > 0 or self.out.preemptions > 0)
        return 0

    # -- disaggregated handoff (docs/core-sim.md §6.6) --------------------------------------
    cdef int reserve_destination(self, rid_t r, int64_t* missing_blocks) except -1 nogil:
        """Allocate the prompt's blocks here, reusing resident prefix blocks; 0 if no room, else 1."""
        cdef int64_t bs = self.bs, plen = self.t.prompt_len[r]
        cdef int64_t total = ceil_div(plen, bs), nfull, overlap = 0, active_overlap = 0, avail
        cdef rid_t h
        self.t.ensure_hashed(r)
        if self.trtllm:
            # guaranteed-no-evict: room for the whole to-completion footprint beside what running
            # requests, reserved and activated destinations are promised; fresh blocks only
            self._trt_clamp(r)
            avail = self.num_blocks - self.pool.num_active() - self._trt_reserved()
            for h in self.dest_held:
                avail -= self._trt_tail(h)
            for h in self.mat:
                avail -= self._trt_tail(h)
            if ceil_div(self._final_len(r), bs) > avail:
                return 0
            self.t.blocks[r].clear()
            if not self.pool.allocate(&self.t.blocks[r], total, self.t.hashes[r].data(), 0):
                return 0
            missing_blocks[0] = total
            self.t.allocated[r] = total * bs
            self.worder[r] = self.next_order
            self.next_order += 1
            self.dest_held.push_back(r)
            return 1
        nfull = plen // bs
        if nfull > <int64_t>self.t.hashes[r].size():
            nfull = <int64_t>self.t.hashes[r].size()
        self.pool.lookup(self.t.hashes[r].data(), nfull, &overlap, &active_overlap)
        if total - active_overlap > self.num_blocks - self.pool.num_active():
            return 0
        self.t.blocks[r].clear()
        if not self.pool.allocate(&self.t.blocks[r], total, self.t.hashes[r].data(), overlap):
            return 0
        missing_blocks[0] = total - overlap
        self.t.allocated[r] = total * bs
        self.worder[r] = self.next_order
        self.next_order += 1
        self.dest_held.push_back(r)
        return 1

    cdef int unreserve_destination(self, rid_t r) except -1 nogil:
        self.pool.release(&self.t.blocks[r])
        self.t.blocks[r].clear()
        self.t.allocated[r] = 0
        return 0

    cdef int activate_destination(self, rid_t r) except -1 nogil:
        """The transferred prompt KV is in place: publish its blocks, queue the request for decode."""
        cdef int64_t k, nfull = self.t.prompt_len[r] // self.bs
        cdef slot_t s
        cdef size_t i
        for i in range(self.dest_held.size()):
            if self.dest_held[i] == r:
                self.dest_held.erase(self.dest_held.begin() + i)
                break
        for k in range(nfull):
            s = self.t.blocks[r][k]
            if not self.pool.s_cached[s]:       # resident prefix hits are cached already
                self.pool.ev_rid = r
                self.pool.ev_pos = <int32_t>k
                self.pool.cache_block(s, self.t.hashes[r][k])
        self.t.computed[r] = self.t.prompt_len[r]
        self.t.activated[r] = 1
        self.t.status[r] = ST_WAITING
        # back into the queue at its destination ordinal (preempted requests stay ahead of later ones)
        self._insert_in_order(&self.waiting, r)
        self._insert_in_order(&self.mat, r)
        return 0

    cdef int release_source(self, rid_t r) except -1 nogil:
        self.pool.release(&self.held[r])
        vector[slot_t]().swap(self.held[r])
        return 0

