"""What one simulation can represent; inputs beyond these are refused before any work starts."""
from mocker._core.table import RID_LIMIT

__all__ = ["HORIZON_MS", "MAX_REQUEST_TOKENS", "MAX_BLOCKS_PER_RANK", "RID_LIMIT"]

# Simulated times are float64 milliseconds quantized to nanoseconds: past 2**53 ns (~104 days)
# a nanosecond step is lost, so arrivals and delays beyond it are refused.
HORIZON_MS = 2.0 ** 53 / 1e6
# RID_LIMIT (INT32_MAX): request ids and KV slots are int32 in the core
# (src/mocker/_core/_types.pxd); -1 means none.  The other bounds follow from that width:
MAX_REQUEST_TOKENS = RID_LIMIT          # a request's tokens: block positions are 32-bit
MAX_BLOCKS_PER_RANK = RID_LIMIT - 1     # KV block slots of one rank
