"""Ctrl-C always ends ``runner.serve_forever`` as an interrupt (``KeyboardInterrupt``: the command exits 130), also
when the signal uvicorn re-raises after stopping is lost on the way (asyncio's runner can swallow it once the
serving task has ended: seen as exit 0 under load). Run in a child process: the signal goes to it, not to pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import http.client, os, signal, sys, threading, time
    from starlette.applications import Starlette
    from outrider.server.runner import bind, serve_forever

    if sys.argv[1] == "lost":
        signal.raise_signal = lambda sig: None  # uvicorn's re-raise after stopping goes nowhere
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]

    def interrupt_when_serving():  # the socket listens before uvicorn runs: wait for an HTTP answer
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_serving, daemon=True).start()
    try:
        serve_forever(Starlette(), sock)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0)
""")


@pytest.mark.parametrize("re_raise", ["kept", "lost"])
def test_ctrl_c_ends_serving_as_an_interrupt(re_raise: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, re_raise], capture_output=True, text=True, timeout=180,
                          check=False)
    assert done.returncode == 130, done.stderr
