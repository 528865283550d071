"""``outrider serve`` as a command: loopback by default, a warning for another host, the address printed, Ctrl-C
stops it (exit 130, no engine left behind), bad options and a busy port are one line with exit 2."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from outrider.server.runner import host_warning, is_loopback
from support.tiny_gguf import Family

pytestmark = pytest.mark.slow


def outrider(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-m", "outrider.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


class Serving:
    """``outrider serve …`` in a child process; ``url`` from its 'serving … at URL/v1' line."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ, PYTHONIOENCODING="utf-8")
        self.proc = subprocess.Popen([sys.executable, "-m", "outrider.cli", "serve", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = ""
        deadline = time.monotonic() + 120
        while not self.url:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if " at http" in line:
                self.url = line.split(" at ", 1)[1].split()[0].removesuffix("/v1")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(180)  # an event wait: a generous limit costs nothing when it works
        self._reader.join(10)  # every line it wrote is in self.stderr
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("example.com")
    assert host_warning("127.0.0.1", 8080, None) is None
    warning = host_warning("0.0.0.0", 8080, None)
    assert warning is not None and "every network interface" in warning and "no --api-key" in warning
    assert "API key" in (host_warning("192.168.1.10", 8080, "k") or "")


def test_serve_binds_loopback_by_default_and_stops_on_ctrl_c(tiny_family: Family) -> None:
    serving = Serving("--target", str(tiny_family.target), "--draft", str(tiny_family.draft), "--port", "0",
                      "--ctx", "256", "--threads", "2")
    try:
        assert serving.url.startswith("http://127.0.0.1:")
        assert not any("warning" in line for line in serving.stderr)
        api = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0)
        assert [m.id for m in api.models.list().data] == [tiny_family.target.name]
        reply = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "the of"}],
                                            max_tokens=5, temperature=0)
        assert reply.usage is not None and reply.usage.completion_tokens == 5
        with pytest.raises(openai.BadRequestError) as caught:  # no reply can outgrow the 256-token context
            api.completions.create(model="x", prompt="the", max_tokens=257)
        assert "between 1 and 256" in caught.value.message
        assert serving.interrupt() == 130
        logged = [line for line in serving.stderr if line.startswith("outrider: reply 1: 5 tokens, length")]
        assert len(logged) == 1 and "tok/s" in logged[0], serving.stderr
    finally:
        serving.kill()


def test_another_host_only_when_asked_and_with_a_warning(tiny_family: Family) -> None:
    serving = Serving("--target", str(tiny_family.target), "--lookup", "--host", "0.0.0.0", "--port", "0",
                      "--ctx", "256", "--threads", "2", "--api-key", "k1")
    try:
        warnings = [line for line in serving.stderr if "warning" in line]
        host = [line for line in warnings if "every network interface" in line]
        assert len(host) == 1 and "API key" in host[0]
        # and the key given in argv is warned about too (it shows in the process list): two warnings in all
        assert len(warnings) == 2 and any("process list" in line for line in warnings)
        port = int(serving.url.rsplit(":", 1)[1])
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k1", max_retries=0)
        assert len(api.models.list().data) == 1
    finally:
        serving.kill()


def test_serve_a_catalogue_pair_by_id(smollm_path: Path) -> None:
    serving = Serving("--pair", "smollm2-135m-lookup", "--port", "0", "--ctx", "512", "--threads", "2")
    try:
        api = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0)
        assert [m.id for m in api.models.list().data] == ["smollm2-135m-lookup"]
        reply = api.chat.completions.create(model="smollm2-135m-lookup", max_tokens=8,
                                            messages=[{"role": "user", "content": "Hello"}])
        assert reply.model_extra is not None and reply.model_extra["timings"]["draft_mode"] == "lookup"
    finally:
        serving.kill()


def test_a_busy_port_is_one_line_and_exit_2(tiny_family: Family) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = outrider("serve", "--target", str(tiny_family.target), "--port", str(port), "--ctx", "256")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in r.stderr


def test_a_key_on_the_command_line_warns_and_a_key_file_does_not(tiny_family: Family, tmp_path: Path) -> None:
    """The key in argv is readable by every user (``ps``): a warning; from a file, none (a busy port ends both
    runs before any model loads)."""
    key_file = tmp_path / "key"
    key_file.write_text("s3cret\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        argv = outrider("serve", "--target", str(tiny_family.target), "--port", port, "--api-key", "s3cret")
        from_file = outrider("serve", "--target", str(tiny_family.target), "--port", port, "--api-key-file",
                             str(key_file))
    assert "visible to every user of this machine in the process list" in argv.stderr
    assert "--api-key-file" in argv.stderr and "s3cret" not in argv.stderr
    assert "process list" not in from_file.stderr and from_file.returncode == 2


@pytest.mark.parametrize(("args", "message"), [
    ((), "serve needs --pair ID or --target T"),
    (("--pair", "no-such-pair"), "no pair 'no-such-pair' in the catalogue"),
    (("--pair", "smollm2-135m-lookup", "--target", "x.gguf"), "--pair names the models itself"),
    (("--target", "missing.gguf"), "file not found: missing.gguf"),
    (("--target", "TARGET", "--api-key", "two words"), "the API key must be printable text without spaces"),
    (("--target", "TARGET", "--port", "70000"), "port must be between 0 and 65535"),
    (("--target", "TARGET", "--temperature", "-1"), "temperature must be >= 0"),
    (("--target", "TARGET", "--stream-interval-ms", "-5"), "--stream-interval-ms must be between 0 and 1000"),
    (("--target", "TARGET", "--api-key-file", "/nonexistent/key"), "cannot read the API key file /nonexistent/key"),
    (("--target", "TARGET", "--api-key", "k", "--api-key-file", "f"), "give --api-key or --api-key-file, not both"),
])
def test_bad_options_are_one_line_and_exit_2(tiny_family: Family, args: tuple[str, ...], message: str) -> None:
    r = outrider("serve", *(str(tiny_family.target) if a == "TARGET" else a for a in args))
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def test_after_an_engine_crash_the_next_request_loads_the_pair_again(tiny_family: Family) -> None:
    serving = Serving("--target", str(tiny_family.target), "--draft", str(tiny_family.draft), "--port", "0",
                      "--ctx", "256", "--threads", "2")
    try:
        api = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0, timeout=120)
        first = api.completions.create(model="x", prompt="the of", max_tokens=6, temperature=0)
        (engine_pid,) = _children(serving.proc.pid)
        os.kill(engine_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while engine_pid in _children(serving.proc.pid):  # reaped by the client once it sees the pipe close
            assert time.monotonic() < deadline
            time.sleep(0.05)
        again = api.completions.create(model="x", prompt="the of", max_tokens=6, temperature=0)
        assert again.choices[0].text == first.choices[0].text
        assert _children(serving.proc.pid) != [engine_pid]
        assert any("loading the pair again" in line for line in serving.stderr)
    finally:
        serving.kill()
