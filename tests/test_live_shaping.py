"""Pure live-layer pieces: stream chunks, usage, the response replay table, token shaping,
reasoning, synthetic logprobs, the health-check payload and native-SGLang passthrough
(docs/live.md §0, docs/live.md §2.3-2.6, docs/live.md §2.9, docs/live.md §6; checklist 20, 24, 26, 27, 57-59)."""
from __future__ import annotations

import json
import logging
import math
import random

import pytest

from mocker.config import ConfigError
from mocker.live.outputs import U32_MAX, CompletionUsage, FinishReason, LLMEngineOutput
from mocker.live.replay_table import (ReplayTableError, ResponseReplayTable,
                                      effective_replay_key, replay_key,
                                      resolve_planned_tokens)
from mocker.live.shaping import (HEALTH_CHECK_KEY, ReasoningConfig, TokenShaper, clamp_logprobs,
                                 health_check_payload, length_terminal, num_thinking_tokens,
                                 stamp_synthetic_logprobs, token_chunk)


def write_lines(tmp_path, lines, name="trace.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return p


# -- outputs ------------------------------------------------------------------------------

class TestOutputs:
    def test_terminal_constructors(self):
        for out, reason in ((LLMEngineOutput.length(), FinishReason.LENGTH),
                            (LLMEngineOutput.cancelled(), FinishReason.CANCELLED),
                            (LLMEngineOutput.stop(), FinishReason.STOP)):
            assert out.token_ids == [] and out.finish_reason is reason
            assert out.error_message is None and out.completion_usage is None
            assert out.is_terminal
        err = LLMEngineOutput.error("boom")
        assert err.token_ids == [] and err.finish_reason is FinishReason.ERROR
        assert err.error_message == "boom"
        assert not LLMEngineOutput(token_ids=[5]).is_terminal

    def test_finish_reason_values(self):
        assert [r.value for r in FinishReason] == ["length", "stop", "eos", "cancelled",
                                                   "error", "content_filter"]
        assert LLMEngineOutput(finish_reason="eos").finish_reason is FinishReason.EOS

    def test_error_message_only_with_error(self):
        with pytest.raises(ValueError):
            LLMEngineOutput(finish_reason=FinishReason.ERROR)
        with pytest.raises(ValueError):
            LLMEngineOutput(finish_reason=FinishReason.LENGTH, error_message="x")

    def test_to_dict(self):
        assert LLMEngineOutput.length().to_dict() == {
            "token_ids": [], "finish_reason": "length", "completion_usage": None,
            "disaggregated_params": None, "log_probs": None, "top_logprobs": None,
            "engine_data": None}
        assert LLMEngineOutput.error("bad").to_dict()["finish_reason"] == {"error": "bad"}
        assert LLMEngineOutput(token_ids=[7]).to_dict()["finish_reason"] is None
        d = LLMEngineOutput(token_ids=[1], completion_usage=CompletionUsage.of(3, 1, 0)).to_dict()
        assert d["completion_usage"]["total_tokens"] == 4
        json.dumps(d)

    def test_usage_dict_shape(self):
        assert CompletionUsage.of(3, 1, 0).to_dict() == {
            "prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
            "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0},
            "completion_tokens_details": None}
        # the backend example's usage carries no details
        assert CompletionUsage.of(3, 0).to_dict() == {
            "prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3,
            "prompt_tokens_details": None, "completion_tokens_details": None}

    def test_usage_saturates_at_u32(self):
        u = CompletionUsage.of(2 ** 40, 5, 2 ** 33)
        assert (u.prompt_tokens, u.completion_tokens, u.total_tokens, u.cached_tokens) == (
            U32_MAX, 5, U32_MAX, U32_MAX)
        u = CompletionUsage.of(U32_MAX - 1, 1)
        assert u.total_tokens == U32_MAX
        u = CompletionUsage.of(U32_MAX, 1)          # sum overflows u32 -> saturates
        assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (U32_MAX, 1, U32_MAX)
        with pytest.raises(ValueError):
            CompletionUsage.of(-1, 0)


# -- checklist 20: usage with the admission cache truth -----------------------------------

def test_checklist_20_usage_under_max_model_len():
    max_model_len, prompt, max_tokens = 4, 3, 4
    effective_max = min(max_tokens, max(0, max_model_len - prompt))
    shaper = TokenShaper(max_output_tokens=max_tokens, effective_max=effective_max,
                         rng=random.Random(0))
    # the core sends one completed signal carrying cached_tokens=0
    ids = shaper.next_token_ids(None)
    assert len(ids) == 1 and 1000 <= ids[0] < 2000
    assert not shaper.completed_early
    chunk = token_chunk(ids, is_prefill=False, prompt_tokens=prompt,
                        token_count=shaper.token_count, cached_tokens=0)
    terminal = length_terminal(prompt_tokens=prompt, token_count=shaper.token_count,
                               cached_prefix=0)
    expected = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
                "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0},
                "completion_tokens_details": None}
    assert chunk.finish_reason is None and chunk.disaggregated_params is None
    assert chunk.completion_usage.to_dict() == expected
    assert terminal.token_ids == [] and terminal.finish_reason is FinishReason.LENGTH
    assert terminal.completion_usage.to_dict() == expected


def test_chunks_without_cache_truth_and_prefill_marker():
    c = token_chunk([9], is_prefill=True, prompt_tokens=4, token_count=2, cached_tokens=None)
    assert c.completion_usage is None and c.disaggregated_params == "dummy"
    t = length_terminal(prompt_tokens=4, token_count=2, cached_prefix=None)
    assert t.completion_usage is None and t.finish_reason is FinishReason.LENGTH


# -- response replay table (docs/live.md §2.5, checklist 24, 26) ---------------------------------------

class TestReplayTable:
    def test_checklist_24_key_derivation(self, tmp_path):
        p = write_lines(tmp_path, [
            {"request_id": "explicit", "session_id": "s", "output_length": 2,
             "output_token_ids": [1, 2]},
            {"session_id": "s", "output_length": 1, "output_token_ids": [3]},
            {"output_length": 3, "output_token_ids": [4, 5, 6]},
        ])
        table = ResponseReplayTable.load(p)
        assert sorted(table.keys()) == ["explicit", "line:2", "s:1"]
        assert table.lookup("explicit") == [1, 2]
        assert table.lookup("s:1") == [3]
        assert table.lookup("line:2") == [4, 5, 6]
        assert table.lookup("s:0") is None and len(table) == 3 and "s:1" in table

    def test_checklist_24_length_mismatch(self, tmp_path):
        p = write_lines(tmp_path, [{"request_id": "a", "output_length": 2,
                                    "output_token_ids": [1]}])
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(p)
        assert isinstance(ei.value, ValueError)
        assert str(ei.value) == ("response replay trace line 1 output_length 2 does not match "
                                 "output_token_ids length 1")
        assert ei.value.line == 1 and ei.value.path == str(p)

    def test_blank_lines_consume_an_index(self, tmp_path):
        p = tmp_path / "t.jsonl"
        p.write_text('\n   \n{"output_tokens": 1, "output_token_ids": [9]}\r\n'
                     '\t\n{"output_length": 0, "output_token_ids": []}')   # no final newline
        table = ResponseReplayTable.load(p)
        assert table.lookup("line:2") == [9]          # alias output_tokens; CRLF tolerated
        assert table.lookup("line:4") == []

    def test_session_turns_count_rows_without_tokens(self, tmp_path):
        p = write_lines(tmp_path, [
            {"session_id": "s", "output_length": 5},               # turn 0, no tokens
            {"session_id": "s", "output_length": 1, "output_token_ids": [1],
             "extra": {"nested": [1, 2]}, "timestamp": 1.5},       # turn 1, unknown fields
            {"session_id": "  s  ", "output_length": 1, "output_token_ids": [2]},
            {"request_id": "   ", "session_id": "", "output_length": 1,
             "output_token_ids": [3]},                             # blank ids -> line key
            {"request_id": " r ", "output_length": 1, "output_token_ids": [4]},
            {"request_id": None, "session_id": None, "output_length": 1,
             "output_token_ids": [5]},
        ])
        table = ResponseReplayTable.load(p)
        # the turn counter is keyed by the untrimmed id: "  s  " starts its own count
        assert table.lookup("s:1") == [1] and table.lookup("s:0") == [2]
        assert table.lookup("line:3") == [3]
        assert table.lookup("r") == [4]
        assert table.lookup("line:5") == [5]

    def test_effective_replay_key(self):
        assert effective_replay_key(" a ", "s", 3, 9) == "a"
        assert effective_replay_key("", " s ", 3, 9) == "s:3"
        assert effective_replay_key(None, "\u3000", 3, 9) == "line:9"
        # U+001C is whitespace to Python's str.strip() but not to Rust's trim
        assert effective_replay_key("\x1c", None, 0, 1) == "\x1c"

    def test_open_error(self, tmp_path):
        p = tmp_path / "missing.jsonl"
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(p)
        assert ei.value.message == f"failed to open response replay trace {p}"
        assert str(ei.value).startswith(f"failed to open response replay trace {p}: ")
        assert ei.value.line is None

    def test_read_error_invalid_utf8(self, tmp_path):
        p = tmp_path / "bad.jsonl"
        p.write_bytes(b'{"output_length": 1, "output_token_ids": [1]}\n\n{"x": "\xff"}\n')
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(p)
        assert ei.value.message == f"failed to read line 3 from response replay trace {p}"
        assert ei.value.line == 3

    def test_directory_fails_on_first_read(self, tmp_path):
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(tmp_path)
        assert ei.value.message == f"failed to read line 1 from response replay trace {tmp_path}"

    @pytest.mark.parametrize("bad", [
        "{not json",
        '{"output_length": 1, "output_token_ids": [1]} trailing',
        "[1, 2]",
        '"just a string"',
        '{"output_length": 1.0, "output_token_ids": [1]}',
        '{"output_length": -1}',
        '{"output_length": 1, "output_token_ids": [true]}',
        '{"output_length": 1, "output_token_ids": [4294967296]}',
        '{"output_length": 1, "output_token_ids": [null]}',
        '{"output_length": 1, "output_token_ids": {"a": 1}}',
        '{"request_id": 5}',
        '{"session_id": ["s"]}',
        '{"output_length": NaN}',
        '{"x": Infinity}',
        '{"request_id": "a", "request_id": "b"}',
        '{"output_length": 1, "output_tokens": 1}',
        '{"request_id": "\\ud800"}',
    ])
    def test_parse_errors(self, tmp_path, bad):
        p = tmp_path / "t.jsonl"
        p.write_text('{"output_length": 1, "output_token_ids": [1]}\n\n' + bad + "\n")
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(p)
        assert ei.value.message == f"failed to parse line 3 from response replay trace {p}"
        assert str(ei.value).startswith(ei.value.message + ": ")
        assert ei.value.line == 3

    def test_duplicate_unknown_fields_are_fine(self, tmp_path):
        p = tmp_path / "t.jsonl"
        p.write_text('{"x": 1, "x": 2, "output_length": 1, "output_token_ids": [7]}\n')
        assert ResponseReplayTable.load(p).lookup("line:0") == [7]

    def test_missing_output_length(self, tmp_path):
        p = write_lines(tmp_path, ["", {"request_id": "a", "output_token_ids": [1]}])
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(p)
        assert str(ei.value) == ("response replay trace line 2 has output_token_ids but no "
                                 "output_length")

    def test_duplicate_key(self, tmp_path):
        p = write_lines(tmp_path, [
            {"request_id": "k", "output_length": 1, "output_token_ids": [1]},
            {"session_id": "x", "output_length": 1, "output_token_ids": [1]},
            {"request_id": " k", "output_length": 1, "output_token_ids": [2]},
        ])
        with pytest.raises(ReplayTableError) as ei:
            ResponseReplayTable.load(p)
        assert str(ei.value) == "response replay trace line 3 duplicates output_replay_id key k"

    def test_duplicate_derived_key(self, tmp_path):
        # an explicit request_id may collide with a derived one
        p = write_lines(tmp_path, [
            {"session_id": "s", "output_length": 1, "output_token_ids": [1]},
            {"request_id": "s:0", "output_length": 1, "output_token_ids": [2]},
        ])
        with pytest.raises(ReplayTableError, match="line 2 duplicates output_replay_id key s:0"):
            ResponseReplayTable.load(p)

    def test_errors_stop_at_first_bad_line(self, tmp_path):
        p = write_lines(tmp_path, [
            {"request_id": "a", "output_token_ids": [1]},           # line 1: no length
            "{broken",                                              # line 2
        ])
        with pytest.raises(ReplayTableError, match="line 1 has output_token_ids"):
            ResponseReplayTable.load(p)

    def test_replay_key_annotation(self):
        assert replay_key(None) is None
        assert replay_key([]) is None
        assert replay_key(["foo:bar", "output_replay_id"]) is None
        assert replay_key(["x", "output_replay_id:planned", "output_replay_id:other"]) == "planned"
        assert replay_key(["output_replay_id:s:1"]) == "s:1"
        assert replay_key(["output_replay_id:"]) == ""

    def test_checklist_26_resolve_plan(self, caplog):
        table = ResponseReplayTable({"planned": [7, 8]})
        assert resolve_planned_tokens(table, "planned", is_prefill=False) == [7, 8]
        assert resolve_planned_tokens(table, "planned", is_prefill=True) == [7]
        assert resolve_planned_tokens(table, None, is_prefill=False) is None
        with caplog.at_level(logging.WARNING, logger="mocker.live.replay_table"):
            assert resolve_planned_tokens(None, "planned", is_prefill=False) is None
            assert resolve_planned_tokens(table, "nope", is_prefill=False) is None
        msgs = [r.getMessage() for r in caplog.records]
        assert len(msgs) == 2
        assert "no response replay trace" in msgs[0] and "planned" in msgs[0]
        assert "key was not found" in msgs[1] and "nope" in msgs[1]
        # lookups hand out copies
        table.lookup("planned").append(99)
        assert table.lookup("planned") == [7, 8]


# -- reasoning and token choice (docs/live.md §2.3, docs/live.md §2.6, checklist 27) --------------------------------

class TestReasoning:
    @pytest.mark.parametrize("osl,ratio,expected", [
        (0, 0.5, 0), (1, 1.0, 0), (2, 0.49, 0), (2, 0.5, 2), (2, 1.0, 2),
        (3, 0.4, 2),                 # floor 1 -> clamped up to 2
        (10, 0.5, 5), (10, 1.0, 10), (10, 0.0, 0), (10, 0.09, 0), (10, 0.1, 2),
        (7, 0.99, 6), (1000, 0.333, 333),
    ])
    def test_num_thinking_tokens(self, osl, ratio, expected):
        assert num_thinking_tokens(osl, ratio) == expected
        assert ReasoningConfig(1, 2, ratio).num_thinking_tokens(osl) == expected

    def test_num_thinking_tokens_odd_ratios(self):
        assert num_thinking_tokens(10, math.nan) == 0
        assert num_thinking_tokens(10, math.inf) == 10
        assert num_thinking_tokens(10, -1.0) == 0

    def test_checklist_27_boundaries(self):
        cfg = ReasoningConfig(start_thinking_token_id=151, end_thinking_token_id=152,
                              thinking_ratio=0.5)
        shaper = TokenShaper(max_output_tokens=10, effective_max=10, reasoning=cfg,
                             rng=random.Random(1))
        assert shaper.think_len == 5
        tokens = [shaper.next_token_ids(None)[0] for _ in range(10)]
        assert tokens[0] == 151 and tokens[4] == 152
        assert all(1000 <= t < 2000 for i, t in enumerate(tokens) if i not in (0, 4))
        assert shaper.token_count == 10 and not shaper.completed_early

    def test_two_token_thinking_block(self):
        shaper = TokenShaper(max_output_tokens=4, effective_max=4,
                             reasoning=ReasoningConfig(5, 6, 0.5), rng=random.Random(2))
        assert [shaper.next_token_ids()[0] for _ in range(2)] == [5, 6]

    def test_think_len_uses_uncapped_budget(self):
        # max_model_len caps the response at 3 tokens, the block is sized for 10
        shaper = TokenShaper(max_output_tokens=10, effective_max=3,
                             reasoning=ReasoningConfig(5, 6, 0.5), rng=random.Random(3))
        assert shaper.think_len == 5
        toks = [shaper.next_token_ids()[0] for _ in range(3)]
        assert toks[0] == 5 and 6 not in toks

    def test_plan_wins_over_reasoning(self):
        shaper = TokenShaper(max_output_tokens=3, effective_max=3, planned=True,
                             reasoning=ReasoningConfig(5, 6, 1.0), rng=random.Random(4))
        assert shaper.think_len == 0
        assert shaper.next_token_ids(41) == [41]
        t = shaper.next_token_ids(None)[0]            # plan without a token -> random
        assert 1000 <= t < 2000
        assert shaper.next_token_ids(0) == [0]

    def test_random_tokens_without_reasoning(self):
        a = TokenShaper(max_output_tokens=50, effective_max=50, rng=random.Random(9))
        b = TokenShaper(max_output_tokens=50, effective_max=50, rng=random.Random(9))
        ta = [a.next_token_ids(7)[0] for _ in range(50)]   # unplanned: signal token ignored
        assert ta == [b.next_token_ids()[0] for _ in range(50)]
        assert all(1000 <= t < 2000 for t in ta)

    def test_zero_output_chunks_are_empty(self):
        shaper = TokenShaper(max_output_tokens=0, effective_max=0,
                             reasoning=ReasoningConfig(5, 6, 1.0))
        assert shaper.next_token_ids(None) == []
        assert shaper.token_count == 0 and not shaper.completed_early

    def test_completed_early(self):
        shaper = TokenShaper(max_output_tokens=3, effective_max=3)
        shaper.next_token_ids()
        assert shaper.completed_early

    def test_config_from_dict(self):
        cfg = ReasoningConfig.from_dict({"start_thinking_token_id": 1,
                                         "end_thinking_token_id": 2, "thinking_ratio": 1})
        assert cfg == ReasoningConfig(1, 2, 1.0) and isinstance(cfg.thinking_ratio, float)
        assert ReasoningConfig.from_dict(cfg.to_dict()) == cfg

    @pytest.mark.parametrize("value,field", [
        ({"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 1.5},
         "thinking_ratio"),
        ({"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": -0.1},
         "thinking_ratio"),
        ({"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": math.nan},
         "thinking_ratio"),
        ({"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": "0.5"},
         "thinking_ratio"),
        ({"start_thinking_token_id": -1, "end_thinking_token_id": 2, "thinking_ratio": 0.5},
         "start_thinking_token_id"),
        ({"start_thinking_token_id": 1, "end_thinking_token_id": 2 ** 32, "thinking_ratio": 0.5},
         "end_thinking_token_id"),
        ({"start_thinking_token_id": True, "end_thinking_token_id": 2, "thinking_ratio": 0.5},
         "start_thinking_token_id"),
        ({"start_thinking_token_id": 1.0, "end_thinking_token_id": 2, "thinking_ratio": 0.5},
         "start_thinking_token_id"),
        ({"end_thinking_token_id": 2, "thinking_ratio": 0.5}, "start_thinking_token_id"),
        ({"start_thinking_token_id": 1, "end_thinking_token_id": 2, "thinking_ratio": 0.5,
          "thinking_ration": 1}, "thinking_ration"),
    ])
    def test_config_errors_name_the_field(self, value, field):
        with pytest.raises(ConfigError, match=field):
            ReasoningConfig.from_dict(value)

    def test_config_not_an_object(self):
        with pytest.raises(ConfigError, match="expected struct ReasoningConfig"):
            ReasoningConfig.from_dict([1, 2, 0.5])


# -- backend example: logprobs and health check (docs/live.md §6, checklist 57-59) ---------------------

class TestBackendExample:
    def test_checklist_59_none(self):
        out = stamp_synthetic_logprobs(LLMEngineOutput(token_ids=[1234]), 1234, None)
        assert out.log_probs is None and out.top_logprobs is None

    def test_checklist_59_zero(self):
        out = stamp_synthetic_logprobs(LLMEngineOutput(token_ids=[1234]), 1234, 0)
        assert out.log_probs == [-0.1 * 4] and out.top_logprobs is None

    def test_checklist_59_three(self):
        out = stamp_synthetic_logprobs(LLMEngineOutput(token_ids=[1237]), 1237, 3)
        lp = -0.1 * 7
        assert out.log_probs == [lp]
        (entries,) = out.top_logprobs
        assert [e.rank for e in entries] == [1, 2, 3, 4]
        assert [e.token_id for e in entries] == [1237, 1238, 1239, 1240]
        assert [e.token for e in entries] == ["token_id:1237", "token_id:1238",
                                              "token_id:1239", "token_id:1240"]
        assert [e.logprob for e in entries] == [lp, lp - 0.1, lp - 0.2, lp - 0.1 * 3]
        assert all(e.bytes is None for e in entries)
        assert entries[0].to_dict() == {"rank": 1, "token_id": 1237, "token": "token_id:1237",
                                        "logprob": lp}
        json.dumps(out.to_dict())

    def test_checklist_59_huge_k_clamped(self):
        assert clamp_logprobs(U32_MAX) == 20 and clamp_logprobs(20) == 20
        assert clamp_logprobs(None) is None and clamp_logprobs(0) == 0
        out = stamp_synthetic_logprobs(LLMEngineOutput(token_ids=[31990]), 31990, U32_MAX)
        (entries,) = out.top_logprobs
        assert len(entries) == 21 and [e.rank for e in entries] == list(range(1, 22))
        assert entries[10].token_id == 0 and entries[20].token_id == 10   # wraps at 32000

    def test_logprobs_reject_negative(self):
        with pytest.raises(ValueError):
            clamp_logprobs(-1)

    def test_checklist_57_zero_max_tokens_chunks(self):
        # the max_tokens == 0 fast path: one terminal carrying usage (prompt, 0)
        length = LLMEngineOutput.length()
        length.completion_usage = CompletionUsage.of(3, 0)
        assert length.to_dict()["completion_usage"] == {
            "prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3,
            "prompt_tokens_details": None, "completion_tokens_details": None}

    def test_health_check_payload(self):
        agg = health_check_payload(False)
        assert agg == {"token_ids": [1], "stop_conditions": {"max_tokens": 1, "ignore_eos": True},
                       "sampling_options": {"temperature": 0.0}, "_HEALTH_CHECK": True}
        dec = health_check_payload(True)
        assert dec == {**agg, "prefill_result": {"disaggregated_params": {}}}
        assert HEALTH_CHECK_KEY == "_HEALTH_CHECK"
        dec["token_ids"].append(2)                      # every call builds a fresh payload
        assert health_check_payload(True)["token_ids"] == [1]
