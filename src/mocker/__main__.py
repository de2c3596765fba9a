"""``python -m mocker``: the command line."""
import sys

from mocker.cli import main

sys.exit(main())
