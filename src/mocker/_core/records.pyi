from typing import Any, Callable
import numpy as np

def write_records(fh: Any, cols: dict[str, np.ndarray], order: np.ndarray, session_index: np.ndarray,
                  session_names: list, turn_index: np.ndarray, max_sim_time_ms: float, dp_size: int,
                  route_overlap_tokens: np.ndarray | None = ..., prefill_dp_size: int | None = ...,
                  chunk_bytes: int = ..., progress: Callable[[int], Any] | None = ...) -> int: ...
def format_float(x: float) -> str: ...
