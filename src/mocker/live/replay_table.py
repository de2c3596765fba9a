"""Response replay table: planned output tokens keyed by replay id (docs/live.md §2.5).

A JSONL file, one row per line::

    {"request_id": "r1", "session_id": "s", "output_length": 2, "output_token_ids": [7, 8]}

Key of a row: its trimmed, non-empty ``request_id``; else ``"{session_id}:{turn}"`` for a
trimmed, non-empty ``session_id`` (``turn`` counts that session's rows, from 0); else
``"line:{i}"`` with ``i`` the 0-based raw line number.  Blank lines are skipped but consume
a line number.  Rows without ``output_token_ids`` still advance their session's turn counter.
A request selects its row with the annotation ``output_replay_id:<key>``.

Reading follows the reference's ``BufRead::lines`` + ``serde_json`` row parsing exactly:
lines split on ``\\n`` only (a trailing ``\\r`` is dropped), each line must be UTF-8, field
types are strict (no floats for counts, no booleans for ids, ``null`` means absent), a known
field given twice is an error, unknown fields are ignored.  One deliberate divergence: a
JSON array row (which serde would read positionally) is rejected as a parse error.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Iterable, Mapping, Sequence

from mocker.live.shaping import serde_type_name

__all__ = ["ReplayTableError", "ResponseReplayTable", "REPLAY_ANNOTATION_PREFIX",
           "replay_key", "effective_replay_key", "resolve_planned_tokens"]

log = logging.getLogger(__name__)

REPLAY_ANNOTATION_PREFIX = "output_replay_id:"

_U32_MAX = 2 ** 32 - 1
_U64_MAX = 2 ** 64 - 1
# Rust's `str::trim` strips Unicode White_Space; Python's str.strip() also strips U+001C..U+001F.
_RUST_WS = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
            "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_FIELDS = ("request_id", "session_id", "output_length", "output_token_ids")
_ALIASES = {"output_tokens": "output_length"}


class ReplayTableError(ValueError):
    """A response replay trace that cannot be loaded.

    ``str(err)`` is the reference's message, followed by ``": <cause>"`` when a lower-level
    error caused it (anyhow's ``{:#}`` chain).  ``path`` is the file; ``line`` the 1-based
    line number, or None for an open failure.
    """

    def __init__(self, message: str, *, path: str, line: int | None = None,
                 cause: str | None = None):
        super().__init__(message if cause is None else f"{message}: {cause}")
        self.message = message
        self.path = path
        self.line = line
        self.cause = cause


def replay_key(annotations: Iterable[str] | None) -> str | None:
    """The value of the first ``output_replay_id:<key>`` annotation, or None."""
    if not annotations:
        return None
    for a in annotations:
        if isinstance(a, str) and a.startswith(REPLAY_ANNOTATION_PREFIX):
            return a[len(REPLAY_ANNOTATION_PREFIX):]
    return None


def effective_replay_key(request_id: str | None, session_id: str | None,
                         turn_index: int, line_index: int) -> str:
    """The table key of one row (shared with the replay load generator's annotations)."""
    if request_id is not None:
        rid = request_id.strip(_RUST_WS)
        if rid:
            return rid
    if session_id is not None:
        sid = session_id.strip(_RUST_WS)
        if sid:
            return f"{sid}:{turn_index}"
    return f"line:{line_index}"


# -- strict row decoding ------------------------------------------------------------------

class _Obj(list):
    """A JSON object as its ordered (key, value) pairs, so duplicate keys stay visible."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid number `{name}`")


def _serde_type(v: Any) -> str:
    # rows are parsed with an object-pairs hook: a JSON object arrives as ``_Obj`` (a list)
    return "map" if isinstance(v, _Obj) else serde_type_name(v)


def _has_lone_surrogate(v: Any) -> bool:
    if isinstance(v, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in v)
    if isinstance(v, list):                       # also _Obj pairs (tuples below)
        return any(_has_lone_surrogate(x) for x in v)
    if isinstance(v, tuple):
        return any(_has_lone_surrogate(x) for x in v)
    return False


def _opt_str(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise ValueError(f"invalid type: {_serde_type(v)}, expected a string")


def _opt_uint(v: Any, limit: int, expected: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"invalid type: {_serde_type(v)}, expected {expected}")
    if not 0 <= v <= limit:
        raise ValueError(f"invalid value: integer `{v}`, expected {expected}")
    return v


def _parse_row(line: str) -> dict[str, Any]:
    """Decode one row like ``serde_json::from_str::<ResponseReplayTraceRow>``."""
    value = json.loads(line, object_pairs_hook=_Obj, parse_constant=_no_constant)
    if "\\u" in line and _has_lone_surrogate(value):
        raise ValueError("lone surrogate in hex escape")
    if not isinstance(value, _Obj):
        raise ValueError(f"invalid type: {_serde_type(value)}, expected struct "
                         "ResponseReplayTraceRow")
    row: dict[str, Any] = {}
    for key, v in value:
        name = _ALIASES.get(key, key)
        if name not in _FIELDS:
            continue                                # unknown fields are ignored
        if name in row:
            raise ValueError(f"duplicate field `{name}`")
        row[name] = v
    out: dict[str, Any] = {
        "request_id": _opt_str(row.get("request_id")),
        "session_id": _opt_str(row.get("session_id")),
        "output_length": _opt_uint(row.get("output_length"), _U64_MAX, "usize"),
        "output_token_ids": None,
    }
    ids = row.get("output_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or isinstance(ids, _Obj):
            raise ValueError(f"invalid type: {_serde_type(ids)}, expected a sequence")
        out["output_token_ids"] = [_token_id(t) for t in ids]
    return out


def _token_id(v: Any) -> int:
    if v is None:
        raise ValueError("invalid type: null, expected u32")
    return _opt_uint(v, _U32_MAX, "u32")  # type: ignore[return-value]


# -- the table ----------------------------------------------------------------------------

class ResponseReplayTable:
    """Replay key -> planned output token ids.  Immutable after loading."""

    __slots__ = ("_rows",)

    def __init__(self, rows: Mapping[str, Sequence[int]] | None = None):
        self._rows: dict[str, tuple[int, ...]] = {
            str(k): tuple(v) for k, v in (rows or {}).items()}

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ResponseReplayTable:
        """Load a JSONL trace; any problem raises :class:`ReplayTableError`."""
        shown = os.fspath(path)
        if isinstance(shown, bytes):
            shown = os.fsdecode(shown)
        try:
            fh = open(path, "rb")
        except IsADirectoryError as exc:
            # Rust opens a directory fine and fails on its first read.
            raise ReplayTableError(f"failed to read line 1 from response replay trace {shown}",
                                   path=shown, line=1, cause=_os_cause(exc)) from exc
        except OSError as exc:
            raise ReplayTableError(f"failed to open response replay trace {shown}",
                                   path=shown, cause=_os_cause(exc)) from exc
        rows: dict[str, tuple[int, ...]] = {}
        session_turns: dict[str, int] = {}
        with fh:
            line_index = -1
            while True:
                line_index += 1
                n = line_index + 1
                try:
                    raw = fh.readline()
                except OSError as exc:
                    raise ReplayTableError(
                        f"failed to read line {n} from response replay trace {shown}",
                        path=shown, line=n, cause=_os_cause(exc)) from exc
                if not raw:
                    break
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                    if raw.endswith(b"\r"):
                        raw = raw[:-1]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ReplayTableError(
                        f"failed to read line {n} from response replay trace {shown}",
                        path=shown, line=n,
                        cause="stream did not contain valid UTF-8") from exc
                if not line.strip(_RUST_WS):
                    continue
                try:
                    row = _parse_row(line)
                except ValueError as exc:          # json.JSONDecodeError is a ValueError
                    raise ReplayTableError(
                        f"failed to parse line {n} from response replay trace {shown}",
                        path=shown, line=n, cause=str(exc)) from exc

                session_id = row["session_id"]
                turn_index = 0
                if session_id is not None:         # counted on the untrimmed id, as the reference
                    turn_index = session_turns.get(session_id, 0)
                    session_turns[session_id] = turn_index + 1

                token_ids = row["output_token_ids"]
                if token_ids is None:
                    continue
                output_length = row["output_length"]
                if output_length is None:
                    raise ReplayTableError(
                        f"response replay trace line {n} has output_token_ids but no "
                        "output_length", path=shown, line=n)
                if output_length != len(token_ids):
                    raise ReplayTableError(
                        f"response replay trace line {n} output_length {output_length} does "
                        f"not match output_token_ids length {len(token_ids)}",
                        path=shown, line=n)
                key = effective_replay_key(row["request_id"], session_id, turn_index,
                                           line_index)
                if key in rows:
                    raise ReplayTableError(
                        f"response replay trace line {n} duplicates output_replay_id key {key}",
                        path=shown, line=n)
                rows[key] = tuple(token_ids)
        table = cls()
        table._rows = rows
        return table

    def lookup(self, key: str) -> list[int] | None:
        """The planned tokens for ``key`` (a fresh list), or None when absent."""
        tokens = self._rows.get(key)
        return None if tokens is None else list(tokens)

    def keys(self) -> list[str]:
        return list(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __repr__(self) -> str:
        return f"ResponseReplayTable({len(self._rows)} rows)"


def resolve_planned_tokens(table: ResponseReplayTable | None, key: str | None, *,
                           is_prefill: bool) -> list[int] | None:
    """Spec docs/live.md §2.2 step 5: the plan for a request, or None (no key, no table, unknown key).

    A prefill worker plans only the first token.  A key without a table, or a key the table
    lacks, logs a warning and falls back to no plan; it is never an error.
    """
    if key is None:
        return None
    if table is None:
        log.warning("request asked for output token replay but mocker has no response "
                    "replay trace (replay_key=%s)", key)
        return None
    tokens = table.lookup(key)
    if tokens is None:
        log.warning("request asked for output token replay but key was not found "
                    "(replay_key=%s)", key)
        return None
    return tokens[:1] if is_prefill else tokens


def _os_cause(exc: OSError) -> str:
    if exc.errno is not None and exc.strerror:
        return f"{exc.strerror} (os error {exc.errno})"
    return str(exc)
