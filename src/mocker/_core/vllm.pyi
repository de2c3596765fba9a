from mocker._core.blocks import BlockPool
from mocker._core.rank import Rank
from mocker._core.table import ReqTable

class VllmRank(Rank):
    def __init__(self, table: ReqTable, engine: dict) -> None: ...
    @property
    def pool_view(self) -> BlockPool: ...
