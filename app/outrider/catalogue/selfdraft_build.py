"""The self-draft build process (``python -m outrider.catalogue.selfdraft_build``): llama.cpp writes and measures
the candidate drafts here, never in the app (a crash inside llama.cpp costs only this process).

The job comes as one JSON line on stdin, which the parent keeps open: its end closing (the parent died) ends this
process (``lifeline.die_with_parent``). Events go out as JSON lines on stdout: ``progress`` (stage, done, total,
message), then one ``result`` (the best draft's path, every candidate's measure) or one ``error`` (kind, message).
Cancel is the parent terminating this process: llama.cpp's quantiser cannot be interrupted, and everything it
writes is in the job's scratch folder, which the parent removes.
"""

from __future__ import annotations

import ctypes
import errno
import json
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from outrider.catalogue.lifeline import die_with_parent
from outrider.engine.selfdraft import DraftType, LayerPlan, SelfDraftError

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class _Events:
    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def put(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._stream.write(json.dumps(obj) + "\n")
            self._stream.flush()


def _last_errno() -> int:
    """The C library's ``errno`` of this thread: llama.cpp's writer throws on a failed write without saying why,
    and errno still holds the write's reason (a full disk) when the call returns."""
    try:
        libc = ctypes.CDLL(None)
        location = libc.__errno_location
    except (OSError, AttributeError):
        return 0
    location.restype = ctypes.POINTER(ctypes.c_int)
    return int(location().contents.value)


def _limit_file_size(limit: int) -> None:
    """Writes past ``limit`` bytes fail with EFBIG, as on a full disk (the job's ``fsize_limit``)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def run_job(job: dict[str, Any], events: _Events) -> None:
    from outrider.engine.llama.runtime import Backend
    from outrider.engine.selfdraft_calibrate import Calibration, search

    target = Path(job["target"])
    n_layer = int(job["n_layer"])
    plans = [LayerPlan(n_layer, tuple(p["keep"]), p.get("shape", "custom")) for p in job["plans"]]
    calibration = Calibration(tuple(job["prompts"]), threads=int(job.get("threads", 0)),
                              max_tokens=int(job.get("max_tokens", 48)))

    def progress(stage: str, done: int, total: int, message: str) -> None:
        events.put({"type": "progress", "stage": stage, "done": done, "total": total, "message": message})

    backend = Backend()
    try:
        measures, best = search(backend, target, Path(job["workdir"]), plans, DraftType(job["type"]), calibration,
                                progress=progress, threads=int(job.get("threads", 0)))
    except SelfDraftError as exc:
        if exc.kind == "build_failed" and _last_errno() in DISK_FULL_ERRNOS:
            raise SelfDraftError("disk_full", "the disk filled up while the draft was written") from exc
        raise
    events.put({"type": "result", "path": str(best), "measures": [m.to_json() for m in measures]})


def child_entry() -> int:
    job = json.loads(sys.stdin.readline())
    parent_pid = job.get("parent_pid")
    die_with_parent(parent_pid if isinstance(parent_pid, int) else None,
                    sys.stdin if job.get("parent_pipe") else None)
    events = _Events(sys.stdout)
    sys.stdout = sys.stderr  # nothing else may write to the event stream
    if job.get("fsize_limit"):
        _limit_file_size(int(job["fsize_limit"]))
    try:
        run_job(job, events)
    except SelfDraftError as exc:
        events.put({"type": "error", "kind": exc.kind, "message": str(exc)})
    except OSError as exc:
        kind = "disk_full" if exc.errno in DISK_FULL_ERRNOS else "store_write"
        events.put({"type": "error", "kind": kind, "message": f"cannot write the draft: {exc.strerror or exc}"})
    except Exception as exc:  # reported, not raised: the parent turns it into words
        events.put({"type": "error", "kind": "build_failed", "message": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(child_entry())
