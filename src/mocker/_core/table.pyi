from typing import Iterable
import numpy as np

class ReqTable:
    n: int
    def __init__(self, n: int = ..., block_size: int = ...) -> None: ...
    def set_prompt(self, r: int, token_ids: Iterable[int], max_output_tokens: int) -> None: ...
    def columns(self, names: Iterable[str] | None = ...) -> dict[str, np.ndarray]: ...
    def request_state(self, r: int) -> dict[str, int]: ...

STATUS_CODES: dict[str, int]
STATUS_NAMES: dict[int, str]
RUN_CONST_KIND: int
RUN_RANGE_KIND: int
RID_LIMIT: int
