"""The target split across two llama.cpp RPC workers on loopback (CPU devices), the draft local.

Greedy output over RPC equals local decoding; both workers hold layers and really compute; a worker killed
mid-reply ends the request within seconds (exit 3, partial reply kept); an unreachable worker fails fast at load.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rpc_helpers import Worker, free_port, listening_socket, outrider_command, two_workers

from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.llama.rpc import has_rpc
from outrider.engine.params import ContextSettings, DraftParams, ModelSettings, PairSpec, TextRequest
from outrider.worker.client import EngineClient
from support.tiny_gguf import Family

PROMPTS = ["the", "hello world", "def return class", "the model is fast", "for i in range", "x = y + z * 2"]
N_TOKENS = 24
FAULT_DEADLINE_S = 30.0  # generous: a loaded 2-core CI machine takes seconds to start the CLI and engine


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Worker, Worker]]:
    if not has_rpc():
        pytest.fail("llama-cpp-python has no libggml-rpc.so: run `make setup` (it builds with GGML_RPC=on)")
    with two_workers(tmp_path_factory.mktemp("rpc-logs")) as pair:
        yield pair


def _spec(family: Family, rpc: tuple[str, ...] = ()) -> PairSpec:
    return PairSpec(target=str(family.target), draft=str(family.draft),
                    target_settings=ModelSettings(rpc=rpc), context=ContextSettings(n_ctx=512, threads=1))


def _replies(client: EngineClient, *, k: int) -> list[list[int]]:
    out = []
    for prompt in PROMPTS:
        tokens: list[int] = []
        request = TextRequest(prompt=prompt, max_tokens=N_TOKENS, draft=DraftParams(k=k), plain=k == 0)
        with client.generate(request) as gen:
            for event in gen:
                if isinstance(event, StepBatch):
                    tokens.extend(t for step in event.steps for t in step.tokens)
                elif isinstance(event, DoneEvent):
                    break
        out.append(tokens)
    return out


def test_greedy_over_rpc_equals_local_and_both_workers_compute(workers: tuple[Worker, Worker],
                                                               tiny_family: Family) -> None:
    with EngineClient() as local:
        local_info = local.load(_spec(tiny_family))
        local_plain, local_spec = _replies(local, k=0), _replies(local, k=3)
    assert not any(name.startswith("RPC") for name, _ in local_info.target.buffers)

    endpoints = tuple(w.endpoint for w in workers)
    with EngineClient() as remote:
        info = remote.load(_spec(tiny_family, endpoints))
        cpu_before = [w.cpu_seconds() for w in workers]
        rpc_plain, rpc_spec = _replies(remote, k=0), _replies(remote, k=3)
        cpu_used = [w.cpu_seconds() - before for w, before in zip(workers, cpu_before, strict=True)]

    assert rpc_plain == local_plain
    assert rpc_spec == local_spec == local_plain
    assert all(len(t) == N_TOKENS for t in local_plain)
    # Where the target's weights went: a model buffer on each worker; the draft stays local.
    rpc_buffers = {name: size for name, size in info.target.buffers if name.startswith("RPC")}
    for w in workers:
        assert any(w.endpoint in name and size > 0 for name, size in rpc_buffers.items()), info.target.buffers
    assert info.draft is not None
    assert info.draft.buffers and not any(name.startswith("RPC") for name, _ in info.draft.buffers)
    assert {endpoint for _, endpoint, _, _ in info.target.remote_devices} == set(endpoints)
    assert all(total > 0 for *_, total in info.target.remote_devices)
    # Both workers really computed the replies (CPU time of each worker process): ~0.05 s each; a worker that
    # holds weights but computes nothing runs ~0 (blocked on its socket), so a tenth of that is a safe line.
    assert all(used > 0.005 for used in cpu_used), cpu_used


def test_unreachable_worker_fails_fast_at_load(tiny_family: Family) -> None:
    port = free_port()
    start = time.monotonic()
    r = subprocess.run(outrider_command("generate", "--target", str(tiny_family.target), "--prompt", "the",
                                        "--rpc", f"127.0.0.1:{port}", "--ctx", "256"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert time.monotonic() - start < FAULT_DEADLINE_S
    assert r.returncode == 3, r.stderr
    assert f"RPC worker 127.0.0.1:{port} is unreachable" in r.stderr
    assert r.stdout == ""


def test_silent_listener_is_refused_not_waited_for(tiny_family: Family) -> None:
    """A port that accepts but never answers (a worker busy with another client) fails at load, not hangs."""
    with listening_socket() as port:
        start = time.monotonic()
        r = subprocess.run(outrider_command("generate", "--target", str(tiny_family.target), "--prompt", "the",
                                            "--rpc", f"127.0.0.1:{port}", "--ctx", "256"),
                           capture_output=True, text=True, timeout=60, check=False)
    assert time.monotonic() - start < FAULT_DEADLINE_S + 5
    assert r.returncode == 3, r.stderr
    assert "did not answer" in r.stderr


def test_worker_killed_mid_reply_ends_the_request(tiny_family: Family, tmp_path: Path) -> None:
    with two_workers(tmp_path) as (w1, w2):
        proc = subprocess.Popen(
            outrider_command("generate", "--target", str(tiny_family.target), "--prompt", "the", "--json",
                             "--k", "0", "--max-tokens", "3500", "--ctx", "4096", "--threads", "1",
                             "--rpc", f"{w1.endpoint},{w2.endpoint}"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stderr is not None
        steps = []
        for line in proc.stdout:  # the reply is under way
            steps.append(json.loads(line))
            if len(steps) >= 5:
                break
        w2.proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        rest, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - killed_at
    steps += [json.loads(line) for line in rest.splitlines()]
    assert elapsed < FAULT_DEADLINE_S
    assert proc.returncode == 3, err
    assert "an RPC worker stopped answering" in err
    assert all(s["event"] == "step" for s in steps)  # no done event: the reply was cut short
    assert 5 <= sum(len(s["tokens"]) for s in steps) < 3500  # what streamed before the fault is kept


def test_rpc_option_refuses_bad_addresses(tiny_family: Family) -> None:
    for bad, words in (("localhost", "HOST:PORT"), ("localhost:0", "port"), ("a:1,a:1", "twice"),
                       ("[::1]:5", "IPv6")):
        r = subprocess.run(outrider_command("generate", "--target", str(tiny_family.target), "--prompt", "x",
                                            "--rpc", bad), capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 2, (bad, r.stderr)
        assert words in r.stderr, (bad, r.stderr)


def test_rpc_worker_refuses_a_port_in_use_and_warns_beyond_loopback() -> None:
    with listening_socket() as port:
        r = subprocess.run(outrider_command("rpc-worker", "--port", str(port)), capture_output=True, text=True,
                           timeout=60, check=False)
    assert r.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    port = free_port()
    proc = subprocess.Popen(outrider_command("rpc-worker", "--host", "0.0.0.0", "--port", str(port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "no authentication" in first
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_models_check_shows_placement_and_worker_memory(workers: tuple[Worker, Worker], tiny_family: Family) -> None:
    endpoints = ",".join(w.endpoint for w in workers)
    r = subprocess.run(outrider_command("models", "check", str(tiny_family.target), str(tiny_family.draft),
                                        "--rpc", endpoints, "--json"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rpc"]
    assert [row["endpoint"] for row in rows] == [w.endpoint for w in workers]
    assert all(0 < row["free"] <= row["total"] for row in rows)
    r = subprocess.run(outrider_command("models", "check", str(tiny_family.target), str(tiny_family.draft),
                                        "--rpc", endpoints), capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert "draft: on this machine" in r.stdout
    assert f"at {workers[1].endpoint}:" in r.stdout and "fit in the workers' free memory" in r.stdout


def test_rpc_worker_refuses_bad_options(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    for args, code, words in ((["--cache", str(a_file)], 1, "cannot use"), (["--threads", "0"], 2, "threads"),
                              (["--port", "70000"], 2, "port"), (["--host", "::1"], 2, "IPv6")):
        r = subprocess.run(outrider_command("rpc-worker", *args), capture_output=True, text=True, timeout=60,
                           check=False)
        assert r.returncode == code, (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)


def test_ask_keeps_the_partial_reply_when_a_worker_dies(tiny_family: Family, tmp_path: Path) -> None:
    import os

    from outrider.history import HistoryStore, MessageStatus
    from outrider.history.turns import whole_text

    home = tmp_path / "home"
    with two_workers(tmp_path) as (w1, w2):
        proc = subprocess.Popen(
            outrider_command("ask", "tell me more", "--target", str(tiny_family.target), "--json", "--k", "0",
                             "--max-tokens", "3500", "--ctx", "4096", "--threads", "1",
                             "--rpc", f"{w1.endpoint},{w2.endpoint}"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OUTRIDER_HOME=str(home)))
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(json.loads(line))
            if len(lines) >= 5:
                break
        w1.proc.send_signal(signal.SIGKILL)
        # The rest through the same file object: the line iterator above may already hold later lines in its
        # buffer, which communicate() (reading the pipe itself) would never see (a reply then looked shorter
        # than the one stored).
        rest = proc.stdout.read()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.wait(timeout=60)
    lines += [json.loads(line) for line in rest.splitlines()]
    assert proc.returncode == 3, err
    streamed = "".join(line.get("text", "") for line in lines)
    with HistoryStore.open(home) as store:
        (summary,) = store.list_conversations()
        messages = store.get_conversation(summary.id).messages  # type: ignore[union-attr]
    reply = messages[-1]
    assert reply.status == MessageStatus.INTERRUPTED
    # all that was streamed, but a broken last character (a U+FFFD the cut left) is never stored (turns.whole_text)
    assert reply.text and reply.text == whole_text(streamed)


def test_split_longer_than_the_devices_is_refused(workers: tuple[Worker, Worker], tiny_family: Family) -> None:
    r = subprocess.run(outrider_command("generate", "--target", str(tiny_family.target), "--prompt", "the",
                                        "--rpc", workers[0].endpoint, "--split", "1,1,1", "--ctx", "256"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert "a split of 3 parts for 1 devices" in r.stderr
    r = subprocess.run(outrider_command("generate", "--target", str(tiny_family.target), "--prompt", "the",
                                        "--max-tokens", "4", "--rpc", ",".join(w.endpoint for w in workers),
                                        "--split", "0,1", "--ctx", "256"),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    placement = next(line for line in r.stderr.splitlines() if line.startswith("note: target:"))
    assert workers[1].endpoint in placement and workers[0].endpoint + "]" not in placement  # all on the second
