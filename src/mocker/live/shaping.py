"""Pure output shaping for the execution context and the backend example (docs/live.md §2, docs/live.md §6).

Everything here is engine-independent and deterministic given its inputs (random tokens come
from an injectable ``random.Random``):

- token choice per output signal (docs/live.md §2.3): planned token, reasoning boundaries, random filler;
- reasoning configuration and ``num_thinking_tokens`` (docs/live.md §2.6);
- the token / terminal chunks of the execution context (docs/live.md §2.3, docs/live.md §2.4);
- synthetic logprobs and the health-check payload of the backend example (docs/live.md §6).
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from mocker.config import ConfigError
from mocker.live.outputs import U32_MAX, CompletionUsage, LLMEngineOutput, TopLogprob

__all__ = [
    "RANDOM_TOKEN_LOW", "RANDOM_TOKEN_HIGH", "random_token",
    "ReasoningConfig", "num_thinking_tokens", "TokenShaper",
    "PREFILL_DISAGGREGATED_PARAMS", "token_chunk", "length_terminal",
    "MAX_LOGPROBS", "clamp_logprobs", "synthetic_logprobs", "stamp_synthetic_logprobs",
    "HEALTH_CHECK_KEY", "health_check_payload",
]

# -- token choice (docs/live.md §2.3) ------------------------------------------------------------------

RANDOM_TOKEN_LOW = 1000          # random filler tokens are uniform in [LOW, HIGH)
RANDOM_TOKEN_HIGH = 2000


def random_token(rng: random.Random) -> int:
    return rng.randrange(RANDOM_TOKEN_LOW, RANDOM_TOKEN_HIGH)


def serde_type_name(v: Any) -> str:
    """serde's description of an unexpected JSON value (as in the reference's error texts)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{str(v).lower()}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v!r}`"
    if isinstance(v, str):
        return f"string {json.dumps(v)}"
    if isinstance(v, Mapping):
        return "map"
    return "sequence"


def num_thinking_tokens(osl: int, ratio: float) -> int:
    """Thinking tokens (boundaries included) for an output of ``osl`` tokens.

    0 when ``osl < 2`` or ``floor(osl * ratio) == 0``; otherwise that floor clamped to
    ``[2, osl]``.  Computed from the uncapped ``max_output_tokens``.
    """
    if osl < 2:
        return 0
    product = float(osl) * float(ratio)
    if not product >= 1.0:               # also NaN (Rust's `as usize` turns NaN into 0)
        return 0
    raw = osl if product >= osl else math.floor(product)   # `as usize` saturates (inf too)
    return max(2, min(raw, osl))


_REASONING_FIELDS = ("start_thinking_token_id", "end_thinking_token_id", "thinking_ratio")


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    """Wrap the first part of every unplanned response in thinking boundary tokens.

    Output shape: ``[start, random..., end, random...]`` where ``end`` sits at position
    ``num_thinking_tokens(max_output_tokens) - 1``.
    """
    start_thinking_token_id: int
    end_thinking_token_id: int
    thinking_ratio: float

    def __post_init__(self) -> None:
        for name in ("start_thinking_token_id", "end_thinking_token_id"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"reasoning.{name}: invalid type: {serde_type_name(v)}, "
                                  "expected u32")
            if not 0 <= v <= U32_MAX:
                raise ConfigError(f"reasoning.{name}: invalid value: integer `{v}`, "
                                  "expected u32")
        r = self.thinking_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise ConfigError(f"reasoning.thinking_ratio: invalid type: {serde_type_name(r)}, "
                              "expected f64")
        if not 0.0 <= r <= 1.0:          # NaN fails too
            raise ConfigError(f"reasoning.thinking_ratio: must be between 0.0 and 1.0, got {r}")
        object.__setattr__(self, "thinking_ratio", float(r))

    @classmethod
    def from_dict(cls, value: Any) -> ReasoningConfig:
        """Parse the ``reasoning`` JSON object; errors name the offending field."""
        if isinstance(value, ReasoningConfig):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"reasoning: invalid type: {serde_type_name(value)}, "
                              "expected struct ReasoningConfig")
        for k in value:
            if k not in _REASONING_FIELDS:
                raise ConfigError(f"reasoning.{k}: unknown field `{k}`, expected one of "
                                  + ", ".join(f"`{f}`" for f in _REASONING_FIELDS))
        for k in _REASONING_FIELDS:
            if k not in value:
                raise ConfigError(f"reasoning: missing field `{k}`")
        return cls(value["start_thinking_token_id"], value["end_thinking_token_id"],
                   value["thinking_ratio"])

    def to_dict(self) -> dict[str, Any]:
        return {"start_thinking_token_id": self.start_thinking_token_id,
                "end_thinking_token_id": self.end_thinking_token_id,
                "thinking_ratio": self.thinking_ratio}

    def num_thinking_tokens(self, max_output_tokens: int) -> int:
        return num_thinking_tokens(max_output_tokens, self.thinking_ratio)


class TokenShaper:
    """Chooses the token id of each output signal of one request (docs/live.md §2.3).

    - a planned request (replay table hit) emits the signal's token, or a random one when the
      signal carries none;
    - otherwise, with reasoning, token 0 is the start id and token ``think_len - 1`` the end id;
    - every other token is uniform in ``[1000, 2000)``.

    With ``effective_max == 0`` (the SGLang zero-output request) every chunk is empty and
    ``token_count`` stays 0.  ``max_output_tokens`` is the uncapped budget that sizes the
    thinking block; ``effective_max`` is the budget after ``max_model_len``.
    """

    __slots__ = ("effective_max", "planned", "think_len", "token_count", "_start", "_end",
                 "_rng")

    def __init__(self, *, max_output_tokens: int, effective_max: int, planned: bool = False,
                 reasoning: ReasoningConfig | None = None,
                 rng: random.Random | None = None):
        self.effective_max = effective_max
        self.planned = planned
        self.think_len = (reasoning.num_thinking_tokens(max_output_tokens)
                          if reasoning is not None and not planned else 0)
        self._start = reasoning.start_thinking_token_id if reasoning is not None else 0
        self._end = reasoning.end_thinking_token_id if reasoning is not None else 0
        self._rng = rng if rng is not None else random.Random()
        self.token_count = 0

    def next_token_ids(self, signal_token_id: int | None = None) -> list[int]:
        """The token list of the chunk for the next output signal."""
        if self.effective_max <= 0:
            return []
        n = self.token_count
        if self.planned:
            token = signal_token_id if signal_token_id is not None else random_token(self._rng)
        elif self.think_len > 0 and n == 0:
            token = self._start
        elif self.think_len > 0 and n == self.think_len - 1:
            token = self._end
        else:
            token = random_token(self._rng)
        self.token_count = n + 1
        return [token]

    @property
    def completed_early(self) -> bool:
        """True if a completion now would be premature (``token_count < effective_max``)."""
        return self.token_count < self.effective_max


# -- execution-context chunks (docs/live.md §2.3, docs/live.md §2.4) ------------------------------------------------

PREFILL_DISAGGREGATED_PARAMS = "dummy"   # the JSON string a prefill worker stamps on tokens


def token_chunk(token_ids: list[int], *, is_prefill: bool, prompt_tokens: int,
                token_count: int, cached_tokens: int | None) -> LLMEngineOutput:
    """A token chunk.  Usage rides only on the signal that carried the admission cache hit."""
    return LLMEngineOutput(
        token_ids=token_ids,
        disaggregated_params=PREFILL_DISAGGREGATED_PARAMS if is_prefill else None,
        completion_usage=(None if cached_tokens is None
                          else CompletionUsage.of(prompt_tokens, token_count, cached_tokens)))


def length_terminal(*, prompt_tokens: int, token_count: int,
                    cached_prefix: int | None) -> LLMEngineOutput:
    """The normal terminal: ``length()`` with cumulative usage if a cache hit was ever seen."""
    out = LLMEngineOutput.length()
    if cached_prefix is not None:
        out.completion_usage = CompletionUsage.of(prompt_tokens, token_count, cached_prefix)
    return out


# -- backend example: synthetic logprobs, health check (docs/live.md §6) -------------------------------

MAX_LOGPROBS = 20


def clamp_logprobs(requested: int | None) -> int | None:
    """``output_options.logprobs`` (u32) -> the top-k actually produced (at most 20)."""
    if requested is None:
        return None
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise TypeError(f"logprobs must be an int or None, got {type(requested).__name__}")
    if requested < 0:
        raise ValueError(f"logprobs must be >= 0, got {requested}")
    return min(requested, MAX_LOGPROBS)


def synthetic_logprobs(token_id: int, top_k: int
                       ) -> tuple[list[float], list[list[TopLogprob]] | None]:
    """Deterministic logprobs of one token: ``lp = -0.1 * (token_id % 10)``.

    With ``top_k >= 1`` the top list holds the token itself (rank 1) followed by ``top_k``
    alternatives ``(token_id + r) % 32000`` with ``lp - 0.1*r`` (ranks 2..top_k+1).
    """
    lp = -0.1 * float(token_id % 10)
    if top_k <= 0:
        return [lp], None
    entries = [TopLogprob(1, token_id, f"token_id:{token_id}", lp)]
    for r in range(1, top_k + 1):
        alt = ((token_id + r) & U32_MAX) % 32000   # u32 arithmetic, as the reference
        entries.append(TopLogprob(r + 1, alt, f"token_id:{alt}", lp - 0.1 * float(r)))
    return [lp], [entries]


def stamp_synthetic_logprobs(output: LLMEngineOutput, token_id: int,
                             requested: int | None) -> LLMEngineOutput:
    """Set ``log_probs``/``top_logprobs`` for ``requested`` logprobs (None: leave both unset;
    0: ``log_probs`` only; k: k+1 ranked entries, k clamped to 20).  Returns ``output``."""
    top_k = clamp_logprobs(requested)
    if top_k is None:
        return output
    output.log_probs, top = synthetic_logprobs(token_id, top_k)
    if top is not None:
        output.top_logprobs = top
    return output


HEALTH_CHECK_KEY = "_HEALTH_CHECK"


def health_check_payload(decode_mode: bool) -> dict[str, Any]:
    """The canary request; decode mode adds an empty ``prefill_result`` (its precondition)."""
    payload: dict[str, Any] = {
        "token_ids": [1],
        "stop_conditions": {"max_tokens": 1, "ignore_eos": True},
        "sampling_options": {"temperature": 0.0},
    }
    if decode_mode:
        payload["prefill_result"] = {"disaggregated_params": {}}
    payload[HEALTH_CHECK_KEY] = True
    return payload
