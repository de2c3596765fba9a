"""Per-request records and output files: checked before the run, written in bounded chunks."""
from __future__ import annotations

import io
import json
import os
import tempfile

import numpy as np

from mocker._core.records import write_records as _compiled_write
from mocker.errors import OutputError

__all__ = ["OutputFile", "write_records", "capture_records"]


class OutputFile:
    """An output path, checked when made and written through a temporary file beside it.

    The temporary file is created at once, so a path that cannot be written fails before any
    simulation work; ``commit`` renames it over the target (an existing file is replaced only
    then, so a run that fails loses nothing); ``discard`` removes it.  A path that exists and is
    not a regular file (``/dev/stdout``, a FIFO) is written directly.  ``write`` errors name the
    path.
    """

    def __init__(self, path, what: str):
        self.path = os.fspath(path)
        self.what = what
        if not self.path:
            raise OutputError(f"{what}: empty path")
        target = os.path.realpath(self.path)           # a symlink stays a symlink
        if os.path.isdir(target):
            raise OutputError(f"{what} {self.path}: Is a directory")
        self.tmp: str | None = None
        try:
            if os.path.exists(self.path) and not os.path.isfile(self.path):
                target = self.path
                self.fh = open(self.path, "wb")        # a device or a pipe: no rename
            else:
                fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                                dir=os.path.dirname(target))
                os.fchmod(fd, 0o666 & ~_umask())       # as open() would create it (mkstemp: 0600)
                self.fh = os.fdopen(fd, "wb")
        except OSError as exc:
            raise OutputError(f"{what} {self.path}: {exc.strerror or exc}") from None
        self.target = target

    def write(self, data: bytes) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            raise OutputError(f"{self.what} {self.path}: {exc.strerror or exc}") from None

    def commit(self) -> None:
        try:
            self.fh.close()
            if self.tmp is not None:
                os.replace(self.tmp, self.target)
                self.tmp = None
        except OSError as exc:
            self.discard()
            raise OutputError(f"{self.what} {self.path}: {exc.strerror or exc}") from None

    def discard(self) -> None:
        try:
            self.fh.close()
        except OSError:
            pass
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else the common 022."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _record_args(sim) -> dict:
    topo = sim.topology
    overlap = None if sim.router is None else sim.router.overlap_tokens()
    if topo.decode_config is None:
        return dict(dp_size=topo.config["dp_size"], route_overlap_tokens=overlap)
    return dict(dp_size=topo.decode_config["dp_size"], route_overlap_tokens=overlap,
                prefill_dp_size=topo.config["dp_size"])


def write_records(sim, fh, cap: float, progress=None) -> int:
    """Write the records of ``sim`` (arrival order) to the binary file ``fh``; the count written.

    Records are formatted by the compiled writer about a megabyte at a time (never all in
    memory); ``progress(records_written)`` is called after each chunk.
    """
    cols = sim.table.columns()
    order = np.asarray(sim.core.arrival_order(), dtype=np.int64)
    w = sim.workload
    names = w.session_names if isinstance(w.session_names, list) else list(w.session_names)
    return _compiled_write(fh, cols, order, w.session_index, names, w.turn_index, cap,
                           progress=progress, **_record_args(sim))


def capture_records(sim, cap: float) -> list[dict]:
    """The records of ``sim`` as dicts (what ``capture_per_request=True`` returns)."""
    buf = io.BytesIO()
    write_records(sim, buf, cap)
    return [json.loads(line) for line in buf.getvalue().splitlines()]
