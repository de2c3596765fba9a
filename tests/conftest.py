import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = ROOT / "examples"

# The suite must exercise the installed, compiled package, never the source tree.
assert str(ROOT / "src") not in sys.path
