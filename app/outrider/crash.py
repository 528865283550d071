"""Crash reports for the app itself (the GUI process; the engine process has its own log, see docs/process.md).

Two kinds of crash are caught:

* an uncaught Python exception (``sys.excepthook``, ``threading.excepthook``; PySide6 reports exceptions raised in
  slots through ``sys.excepthook`` too): a report ``crash-<time>-<pid>.txt`` is written at once, with a marker;
* a fatal signal or abort in native code (Qt, a driver): ``faulthandler`` writes the Python tracebacks of every
  thread to ``faulthandler-<pid>.log``. Nothing can run safely at that moment, so the next start turns a non-empty
  file left by another process into a report (and the marker). A clean exit deletes its own file.

The marker (``crash-pending.json``) names the newest report; ``pending_crash_report()`` returns it so the next start
can show a dialog with the path, and ``acknowledge_crash_report()`` removes it once the user has seen it. Everything
lives in ``outrider.paths.log_dir()`` unless a directory is given (tests). Nothing here imports Qt.

Typical use, first thing in the app's entry point::

    install_crash_handler()
    report = pending_crash_report()
    if report is not None:
        ...  # show a dialog naming ``report``, then
        acknowledge_crash_report()
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import faulthandler
import json
import os
import platform
import re
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import outrider
from outrider import paths
from outrider.fileio import atomic_write_json

MARKER_NAME = "crash-pending.json"
REPORT_PREFIX = "crash-"
NATIVE_PREFIX = "faulthandler-"
REPORTS_KEPT = 10
APP_LOG_NAME = "outrider-app.log"

ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
ReportCallback = Callable[[Path], None]

_NATIVE_RE = re.compile(rf"^{NATIVE_PREFIX}(\d+)\.log$")


class _State:
    """What ``install_crash_handler`` changed, so that ``uninstall_crash_handler`` can restore it."""

    def __init__(self, directory: Path, on_report: ReportCallback | None) -> None:
        self.directory = directory
        self.on_report = on_report
        self.previous_excepthook: ExceptHook = sys.excepthook
        self.previous_threading_hook: Callable[[threading.ExceptHookArgs], Any] = threading.excepthook
        self.faulthandler_was_enabled = faulthandler.is_enabled()
        self.native_path = directory / f"{NATIVE_PREFIX}{os.getpid()}.log"
        self.native_file: IO[str] | None = None
        self.lock = threading.Lock()


_state: _State | None = None


def install_crash_handler(directory: Path | None = None, *, on_report: ReportCallback | None = None) -> Path:
    """Install the hooks (idempotent) and return the directory reports go to.

    Args:
        directory: where reports, the marker and the faulthandler file go; default ``paths.log_dir()``.
        on_report: called with the report's path after an uncaught exception was written down (e.g. to show a
            dialog at once). It runs in the thread that raised; exceptions from it are ignored.
    """
    global _state
    if _state is not None:
        return _state.directory
    directory = Path(directory) if directory is not None else paths.log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    _harvest_native_crashes(directory)
    state = _State(directory, on_report)
    with contextlib.suppress(OSError):
        # Line-buffered text file; faulthandler writes to its descriptor directly.
        state.native_file = open(state.native_path, "w", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(file=state.native_file, all_threads=True)
    sys.excepthook = _excepthook
    threading.excepthook = _threading_excepthook
    _state = state
    atexit.register(_clean_exit)
    return directory


def uninstall_crash_handler() -> None:
    """Restore the previous hooks and remove this process's (empty) faulthandler file. For tests and clean exits."""
    global _state
    state = _state
    if state is None:
        return
    _state = None
    with contextlib.suppress(Exception):
        atexit.unregister(_clean_exit)
    if sys.excepthook is _excepthook:
        sys.excepthook = state.previous_excepthook
    if threading.excepthook is _threading_excepthook:
        threading.excepthook = state.previous_threading_hook
    if state.native_file is not None:
        if state.faulthandler_was_enabled:
            faulthandler.enable(file=sys.__stderr__ or sys.stderr, all_threads=True)
        else:
            faulthandler.disable()
        with contextlib.suppress(OSError):
            state.native_file.close()
        with contextlib.suppress(OSError):
            if state.native_path.stat().st_size == 0:
                state.native_path.unlink()


def pending_crash_report(directory: Path | None = None) -> Path | None:
    """The report of a crash not yet shown to the user, or None.

    Native crashes of earlier processes (non-empty faulthandler files) are turned into reports first.
    """
    directory = _directory(directory)
    _harvest_native_crashes(directory)
    marker = directory / MARKER_NAME
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        report = Path(data["report"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not report.is_absolute():
        report = directory / report
    return report if report.is_file() else None


def acknowledge_crash_report(directory: Path | None = None) -> None:
    """The user has seen the report: forget the marker (the report file itself is kept)."""
    with contextlib.suppress(FileNotFoundError):
        (_directory(directory) / MARKER_NAME).unlink()


def write_crash_report(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None, *,
                       thread: str | None = None, directory: Path | None = None) -> Path:
    """Write a report for one exception, mark it pending, and return its path."""
    directory = _directory(directory)
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    where = f"thread {thread!r}" if thread else "the main thread"
    return _write_report(directory, f"Uncaught {exc_type.__name__} in {where}", text)


def ensure_std_streams(directory: Path | None = None) -> Path | None:
    """A windowed app (pythonw, PyInstaller ``console=False``) has ``sys.stdout``/``sys.stderr`` set to None.

    Point the missing ones at ``outrider-app.log`` in the log directory, so prints and warnings are kept rather than
    raising; returns the log's path, or None when both streams exist.
    """
    if sys.stdout is not None and sys.stderr is not None:
        return None
    path = _directory(directory) / APP_LOG_NAME
    try:
        stream: IO[str] = open(path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError:
        stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    if sys.stdout is None:
        sys.stdout = stream
    if sys.stderr is None:
        sys.stderr = stream
    return path


# --- internals --------------------------------------------------------------------------------------------------


def _directory(directory: Path | None) -> Path:
    if directory is not None:
        return Path(directory)
    if _state is not None:
        return _state.directory
    return paths.log_dir()


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    state = _state
    if state is None or issubclass(exc_type, KeyboardInterrupt):
        (state.previous_excepthook if state else sys.__excepthook__)(exc_type, exc, tb)
        return
    _report_and_forward(state, exc_type, exc, tb, None)
    state.previous_excepthook(exc_type, exc, tb)


def _threading_excepthook(args: threading.ExceptHookArgs) -> None:
    state = _state
    if state is None or args.exc_value is None or issubclass(args.exc_type, SystemExit):
        (state.previous_threading_hook if state else threading.__excepthook__)(args)
        return
    name = args.thread.name if args.thread is not None else "?"
    _report_and_forward(state, args.exc_type, args.exc_value, args.exc_traceback, name)
    state.previous_threading_hook(args)


def _report_and_forward(state: _State, exc_type: type[BaseException], exc: BaseException,
                        tb: TracebackType | None, thread: str | None) -> None:
    try:
        with state.lock:
            report = write_crash_report(exc_type, exc, tb, thread=thread, directory=state.directory)
    except Exception:  # the crash handler must never hide the original error
        return
    if state.on_report is not None:
        with contextlib.suppress(Exception):
            state.on_report(report)


def _header(title: str, pid: int | None = None) -> str:
    lines = [
        f"Outrider crash report: {title}",
        f"time: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"outrider: {outrider.__version__}",
        f"python: {sys.version.split()[0]} ({platform.python_implementation()})",
        f"platform: {platform.platform()}",
        f"frozen: {bool(getattr(sys, 'frozen', False))}",
        f"pid: {pid if pid is not None else os.getpid()}",
        f"argv: {sys.argv!r}",
    ]
    return "\n".join(lines) + "\n\n"


def _write_report(directory: Path, title: str, body: str, *, pid: int | None = None,
                  stamp: datetime.datetime | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = stamp or datetime.datetime.now()
    base = f"{REPORT_PREFIX}{stamp.strftime('%Y%m%d-%H%M%S')}-{pid if pid is not None else os.getpid()}"
    path = directory / f"{base}.txt"
    n = 1
    while path.exists():
        n += 1
        path = directory / f"{base}-{n}.txt"
    path.write_text(_header(title, pid) + body, encoding="utf-8")
    _write_marker(directory, path)
    _prune_reports(directory)
    return path


def _write_marker(directory: Path, report: Path) -> None:
    atomic_write_json(directory / MARKER_NAME, {"report": str(report), "time": datetime.datetime.now().isoformat()},
                      indent=None)


def _prune_reports(directory: Path) -> None:
    with contextlib.suppress(OSError):
        reports = sorted(directory.glob(f"{REPORT_PREFIX}*.txt"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in reports[REPORTS_KEPT:]:
            with contextlib.suppress(OSError):
                old.unlink()


def _pid_running(pid: int) -> bool:
    """Whether ``pid`` may still be running (POSIX only; elsewhere assume it may)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _harvest_native_crashes(directory: Path) -> None:
    """Turn faulthandler files left non-empty by other processes into reports; delete empty ones of dead processes."""
    try:
        candidates = sorted(directory.glob(f"{NATIVE_PREFIX}*.log"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for path in candidates:
        match = _NATIVE_RE.match(path.name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid():
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            mtime = datetime.datetime.fromtimestamp(path.stat().st_mtime)
        except OSError:
            continue
        if not text.strip():
            if not _pid_running(pid):
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        first = next((line for line in text.splitlines() if line.startswith("Fatal Python error")), "fatal error")
        with contextlib.suppress(OSError):
            _write_report(directory, f"native crash ({first.strip()})", text, pid=pid, stamp=mtime)
            path.unlink()


def _clean_exit() -> None:
    uninstall_crash_handler()
