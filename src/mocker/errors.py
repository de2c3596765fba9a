"""The errors a user can cause, one family: each message is one line naming what to fix.

``MockerError`` is a ``ValueError`` so callers that caught ``ValueError`` keep working.  The
command line prints ``str(exc)`` of any of them as one line and exits with status 2.
"""
from __future__ import annotations

__all__ = ["MockerError", "ConfigError", "TraceError", "ReplayError", "OutputError"]


class MockerError(ValueError):
    """Invalid input to mocker: the message names the field, option, file or line."""


class ConfigError(MockerError):
    """An engine or router configuration that the simulator cannot run."""


class TraceError(MockerError):
    """A trace that cannot be replayed; the message names the file and line."""


class ReplayError(MockerError):
    """Invalid replay arguments; the message names the argument (``option`` holds its name)."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


class OutputError(MockerError):
    """An output path that cannot be written (checked before the run starts)."""
