"""Optional dependencies: which extra provides them and how to install it."""
from __future__ import annotations

__all__ = ["DISTRIBUTION", "LIVE_MODULES", "missing_extra"]

# the name pip knows this project by (the import name is ``mocker``; PyPI's ``mocker`` is another project)
DISTRIBUTION = "llm-mocker"
LIVE_MODULES = ("zmq", "msgpack", "prometheus_client")


def missing_extra(what: str, exc: ModuleNotFoundError, extra: str = "live") -> ImportError:
    """The error for ``what`` when a module of ``extra`` is not installed."""
    return ImportError(f"{what} needs the {extra} extra of {DISTRIBUTION} (pyzmq, msgpack, prometheus_client; "
                       f"missing: {exc.name}): from the mocker source tree, python -m pip install '.[{extra}]'")
