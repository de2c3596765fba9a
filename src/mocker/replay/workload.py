"""What a replay runs: the requests of a trace or synthetic workload as numpy columns.

``traces.load_mooncake`` and ``synthetic.synthetic_workload`` build a :class:`Workload`; the
compiled replay core reads its columns, the report reads its session names.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mocker._core.table import RUN_CONST_KIND as RUN_CONST, RUN_RANGE_KIND as RUN_RANGE

__all__ = ["Workload", "RUN_CONST", "RUN_RANGE"]


@dataclass
class Workload:
    """Columns handed to the compiled replay core (one entry per request unless noted)."""
    n: int
    input_length: np.ndarray           # int64; for delta traces: this row's delta length
    output_length: np.ndarray          # int64
    run_off: np.ndarray                # int64[n+1], CSR offsets into the run columns
    run_kind: np.ndarray               # int8: RUN_CONST (run_n tokens of value run_v) or RUN_RANGE
    #                                    (values run_v, run_v+1, ... each run_start times)
    run_v: np.ndarray                  # uint64
    run_start: np.ndarray              # int64
    run_n: np.ndarray                  # int64
    next_turn: np.ndarray              # int32, rid of the session's next turn (-1 = last)
    delay_ms: np.ndarray               # float64, delay before this turn (turns > 0)
    session_heads: np.ndarray          # int32, first turns in file order
    head_arrival_ms: np.ndarray        # float64, arrival of each head (timestamp mode)
    session_index: np.ndarray          # int32 per request: index into session_names, -1 = none
    turn_index: np.ndarray             # int64 per request: turn within its session, -1 = none
    session_names: Sequence[str] = field(default_factory=list)
    delta: bool = False
    released: bool = False             # release_columns() was called: columns() is no longer valid

    def columns(self) -> dict:
        if self.released:
            raise ValueError("the workload's columns were released after a replay; build it again")
        return {"run_off": self.run_off, "run_kind": self.run_kind, "run_v": self.run_v,
                "run_start": self.run_start, "run_n": self.run_n, "next_turn": self.next_turn,
                "delay_ms": self.delay_ms, "output_length": self.output_length,
                "session_heads": self.session_heads, "head_arrival_ms": self.head_arrival_ms}

    def release_columns(self) -> None:
        """Drop the columns the replay core has copied (prompt runs, sessions, arrivals); the
        request sizes and session names stay for the report."""
        empty_i64 = np.empty(0, dtype=np.int64)
        self.run_off = self.run_start = self.run_n = empty_i64
        self.run_kind = np.empty(0, dtype=np.int8)
        self.run_v = np.empty(0, dtype=np.uint64)
        self.next_turn = self.session_heads = np.empty(0, dtype=np.int32)
        self.delay_ms = self.head_arrival_ms = np.empty(0, dtype=np.float64)
        self.released = True

    def session_id(self, rid: int):
        """The session name a record of request ``rid`` carries (None when unnamed)."""
        i = int(self.session_index[rid])
        return None if i < 0 else self.session_names[i]
