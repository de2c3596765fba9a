import numpy as np
from mocker._core.router import KvRouter
from mocker._core.table import ReqTable

class ReplayInvariantError(RuntimeError): ...

class ReplayCore:
    arrived: int
    terminal: int
    passes: int
    committed_prefill: int
    done: bool
    stalled_inflight: int
    retry_livelock: bool
    def __init__(self, table: ReqTable, ranks: list, w: dict, concurrency: int = ...,
                 max_sim_time_ms: float = ..., delta: bool = ..., router: KvRouter | None = ...,
                 dp_size: int = ..., prefill_schedule_interval: int = ...,
                 disagg: dict | None = ...) -> None: ...
    def advance(self, max_passes: int = ...) -> bool: ...
    def arrival_order(self) -> np.ndarray: ...
    @property
    def now_ms(self) -> float: ...
    def itl_summary(self) -> dict[str, float]: ...
    def throughput_summary(self) -> dict[str, float]: ...
