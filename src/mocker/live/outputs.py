"""Stream chunk values the live layer returns to its callers (docs/live.md §0).

``LLMEngineOutput`` is one chunk of a generate stream; ``CompletionUsage`` its OpenAI-shaped
token accounting.  Both are plain values: nothing here knows about the engine or asyncio.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["U32_MAX", "FinishReason", "CompletionUsage", "TopLogprob", "LLMEngineOutput"]

U32_MAX = 2 ** 32 - 1


def _sat_u32(value: int) -> int:
    """Clamp a non-negative count to u32 (the reference saturates rather than failing)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"token count must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"token count must be >= 0, got {value}")
    return value if value <= U32_MAX else U32_MAX


class FinishReason(str, enum.Enum):
    """Why a stream ended.  The values are the reference's serialized names."""
    LENGTH = "length"
    STOP = "stop"
    EOS = "eos"
    CANCELLED = "cancelled"
    ERROR = "error"
    CONTENT_FILTER = "content_filter"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class CompletionUsage:
    """Token accounting of one response.

    Build it with :meth:`of`, which saturates every count at u32::MAX and derives
    ``total_tokens``.  ``cached_tokens`` is the admission prefix-cache hit; ``None`` means
    "not reported" and serializes ``prompt_tokens_details`` as ``None``.
    """
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int | None = None

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int,
           cached_tokens: int | None = None) -> CompletionUsage:
        p = _sat_u32(prompt_tokens)
        c = _sat_u32(completion_tokens)
        # total saturates on the unclamped sum, as `to_u32(prompt.saturating_add(completion))`
        total = min(prompt_tokens + completion_tokens, U32_MAX)
        cached = None if cached_tokens is None else _sat_u32(cached_tokens)
        return cls(p, c, total, cached)

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI ``usage`` object."""
        details = (None if self.cached_tokens is None
                   else {"audio_tokens": None, "cached_tokens": self.cached_tokens})
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": details,
            "completion_tokens_details": None,
        }


@dataclass(frozen=True, slots=True)
class TopLogprob:
    """One ranked alternative of one generated token."""
    rank: int
    token_id: int
    token: str | None
    logprob: float
    bytes: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rank": self.rank, "token_id": self.token_id,
                             "token": self.token, "logprob": self.logprob}
        if self.bytes is not None:            # the reference skips `bytes` when absent
            d["bytes"] = list(self.bytes)
        return d


@dataclass(slots=True)
class LLMEngineOutput:
    """One chunk of a generate stream.

    ``finish_reason`` is None on non-terminal chunks.  ``error_message`` is set exactly
    when ``finish_reason`` is ``FinishReason.ERROR``.  ``disaggregated_params`` and
    ``engine_data`` hold JSON-compatible values; ``top_logprobs`` is one list of ranked
    alternatives per token in ``token_ids``.
    """
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    error_message: str | None = None
    completion_usage: CompletionUsage | None = None
    disaggregated_params: Any = None
    log_probs: list[float] | None = None
    top_logprobs: list[list[TopLogprob]] | None = None
    engine_data: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.finish_reason is not None and not isinstance(self.finish_reason, FinishReason):
            self.finish_reason = FinishReason(self.finish_reason)
        if (self.finish_reason is FinishReason.ERROR) != (self.error_message is not None):
            raise ValueError("error_message must be set exactly when finish_reason is ERROR")

    # -- terminal constructors (no tokens) ------------------------------------------------
    @classmethod
    def length(cls) -> LLMEngineOutput:
        return cls(finish_reason=FinishReason.LENGTH)

    @classmethod
    def stop(cls) -> LLMEngineOutput:
        return cls(finish_reason=FinishReason.STOP)

    @classmethod
    def cancelled(cls) -> LLMEngineOutput:
        return cls(finish_reason=FinishReason.CANCELLED)

    @classmethod
    def error(cls, message: str) -> LLMEngineOutput:
        return cls(finish_reason=FinishReason.ERROR, error_message=str(message))

    @property
    def is_terminal(self) -> bool:
        return self.finish_reason is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form; every key is always present.

        ``finish_reason`` uses the reference's encoding: the variant name, or
        ``{"error": message}`` for an error.
        """
        if self.finish_reason is None:
            finish: Any = None
        elif self.finish_reason is FinishReason.ERROR:
            finish = {"error": self.error_message}
        else:
            finish = self.finish_reason.value
        return {
            "token_ids": list(self.token_ids),
            "finish_reason": finish,
            "completion_usage": (None if self.completion_usage is None
                                 else self.completion_usage.to_dict()),
            "disaggregated_params": self.disaggregated_params,
            "log_probs": None if self.log_probs is None else list(self.log_probs),
            "top_logprobs": (None if self.top_logprobs is None
                             else [[e.to_dict() for e in per_token]
                                   for per_token in self.top_logprobs]),
            "engine_data": self.engine_data,
        }
