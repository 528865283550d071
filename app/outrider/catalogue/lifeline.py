"""A child process that ends itself when the process that started it is gone (the download process uses it).

Without this, a download child whose parent was killed (SIGKILL, a crash) would keep the network, the disk and
the file's lock busy until it finished on its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any

EXIT_ORPHANED = 75  # the exit status of a process that ended because its parent was gone
PR_SET_PDEATHSIG = 1


def _parent_gone(parent_pid: int | None) -> bool:
    return parent_pid is not None and os.getppid() != parent_pid


def die_with_parent(parent_pid: int | None, parent_pipe: Any) -> None:
    """End this process (``EXIT_ORPHANED``) as soon as the process that started it is gone, even by SIGKILL.

    Three ways, whichever fires first: Linux ``PR_SET_PDEATHSIG`` (a signal at the parent's death; it is also sent
    when only the parent *thread* that started us ends, so the handler exits only when the parent process changed);
    EOF on ``parent_pipe`` (stdin, which the parent keeps open until we end; the OS closes it when the parent
    dies, on every platform); and a watch of ``os.getppid()`` twice a second.
    """
    import signal

    if sys.platform.startswith("linux"):
        def on_signal(signum: int, frame: Any) -> None:
            if _parent_gone(parent_pid):
                os._exit(EXIT_ORPHANED)

        try:
            import ctypes

            signal.signal(signal.SIGUSR1, on_signal)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGUSR1), 0, 0, 0)
        except (OSError, AttributeError, ValueError):
            pass
    if _parent_gone(parent_pid):  # it died before the signal was armed
        os._exit(EXIT_ORPHANED)

    def watch_pipe() -> None:
        with contextlib.suppress(OSError, ValueError):
            while parent_pipe.read(4096):
                pass
        os._exit(EXIT_ORPHANED)  # EOF: the parent closed its end or died

    def watch_ppid() -> None:
        while not _parent_gone(parent_pid):
            time.sleep(0.5)
        os._exit(EXIT_ORPHANED)

    if parent_pipe is not None:
        threading.Thread(target=watch_pipe, name="parent-pipe", daemon=True).start()
    if parent_pid is not None:
        threading.Thread(target=watch_ppid, name="parent-pid", daemon=True).start()
