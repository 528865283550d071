"""Run a long set-up command and show what it is doing: a line per stage, compile progress, elapsed time.

``make run`` and ``make test`` install Outrider's dependencies first; the first time, pip compiles
llama-cpp-python (llama.cpp) from source: 10-20 minutes on two cores. With ``pip --quiet`` that printed nothing
for all that time, and a newcomer could not tell a build from a hang. This wrapper runs the command with pip's
output on (``-v`` streams CMake's build lines) and condenses it to what a person wants to see:

* the stage lines pip prints (``Collecting …``, ``Building wheel for …``, ``Successfully installed …``);
* the compile's progress (CMake's ``[ 45%]`` / ninja's ``[120/310]`` counters), at most one line per ``--every``
  seconds, with the file being compiled;
* a heartbeat with the elapsed time when the command has printed nothing new for ``--every`` seconds;
* on failure, the last 60 lines of the full output (the error), and the command's exit status.

Usage: ``python3 packaging/progress.py --label "installing Outrider" -- pip install -v …``. Standard library only:
it runs before the virtual environment exists.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

STAGE = re.compile(r"^\s*(Collecting|Building wheel for|Building editable for|Created wheel for|Installing "
                   r"collected packages|Successfully installed|Successfully built|Using cached|Processing|"
                   r"Requirement already satisfied: llama)")
COMPILE = re.compile(r"\[\s*(\d+)%\]|\[(\d+)/(\d+)\]")
TAIL_LINES = 60


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _compile_fraction(line: str) -> str | None:
    """``45%`` from CMake's ``[ 45%] Building CXX object …``, ``39%`` from ninja's ``[120/310] …``; else None."""
    m = COMPILE.search(line)
    if m is None:
        return None
    if m.group(1) is not None:
        return f"{int(m.group(1))}%"
    done, total = int(m.group(2)), int(m.group(3))
    return f"{100 * done // max(1, total)}%"


def _what(line: str) -> str:
    """The file a compile line works on (its last path component), or the line itself, short."""
    words = [w for w in line.split() if "/" in w or w.endswith((".c", ".cpp", ".cu", ".o"))]
    return words[-1].rsplit("/", 1)[-1] if words else line.strip()[:60]


def condense(lines: Iterable[str], label: str, every: float, clock: Callable[[], float] = time.monotonic,
             ) -> Iterator[str]:
    """The lines worth showing of a set-up command's output (``lines``: its output, line by line).

    Stages are shown at once, compile progress at most every ``every`` seconds; each shown line starts with the
    elapsed time. (Heartbeats while nothing is printed come from ``run``, which owns the clock's silence.)
    """
    start = clock()
    last_progress = -every
    for raw in lines:
        line = raw.rstrip("\n")
        now = clock()
        if STAGE.search(line):
            yield f"  [{_elapsed(now - start)}] {line.strip()[:140]}"
            continue
        fraction = _compile_fraction(line)
        if fraction is not None and now - last_progress >= every:
            last_progress = now
            yield f"  [{_elapsed(now - start)}] {label}: compiling llama.cpp {fraction} ({_what(line)})"


def run(command: list[str], label: str, every: float, out: TextIO = sys.stdout) -> int:
    """Run ``command``, print its condensed output and a heartbeat on silence; the full tail on failure."""
    start = time.monotonic()
    print(f"==> {label} (the first time this compiles llama.cpp: 10-20 minutes on two cores; progress below)",
          file=out, flush=True)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace")
    assert proc.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    shown = {"at": time.monotonic()}
    lock = threading.Lock()
    finished = threading.Event()

    def heartbeat() -> None:
        while not finished.wait(1.0):
            with lock:
                if time.monotonic() - shown["at"] >= every:
                    print(f"  [{_elapsed(time.monotonic() - start)}] {label}: still working…", file=out, flush=True)
                    shown["at"] = time.monotonic()

    def source() -> Iterator[str]:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            yield line

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        for shown_line in condense(source(), label, every):
            with lock:
                print(shown_line, file=out, flush=True)
                shown["at"] = time.monotonic()
        code = proc.wait()
    finally:
        finished.set()
        beat.join()
    if code:
        print(f"==> {label} FAILED (exit {code}) after {_elapsed(time.monotonic() - start)}; its last lines:",
              file=out, flush=True)
        for line in tail:
            print(f"    {line}", file=out)
        return code
    print(f"==> {label}: done in {_elapsed(time.monotonic() - start)}", file=out, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="what the command does, in words")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between progress lines (default 10)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    return run(command, args.label, args.every)


if __name__ == "__main__":
    raise SystemExit(main())
