"""A stopped engine, heartbeats, outside kills while loading, log rotation, template limits across the pipe."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_helpers import CTX, family_spec, generate_text, good_spec

from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.params import ChatMessage, ContextSettings, PairSpec, TextRequest
from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineCrashed, EngineRequestError, EngineUnresponsive
from outrider.worker.launch import LOGS_KEPT
from support import bad_models
from support.tiny_gguf import Family

LONG = TextRequest(prompt="the of and", max_tokens=2000)
BIG_CTX = ContextSettings(n_ctx=2048, n_batch=256, threads=2)
LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.fixture()
def quick_client(outrider_home: Path) -> Iterator[EngineClient]:
    """A client that declares the engine unresponsive after 1.5 s of silence."""
    c = EngineClient(heartbeat_timeout=1.5)
    yield c
    pid = c.pid
    c.stop(timeout=2.0)
    if pid is not None:  # never leave a stopped process behind on a shared machine
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


def test_sigstop_mid_generation_raises_within_the_bound(quick_client: EngineClient, tiny_family: Family) -> None:
    quick_client.load(PairSpec(str(tiny_family.target), context=BIG_CTX))
    pid = quick_client.pid
    assert pid is not None
    gen = quick_client.generate(LONG)
    first = next(gen)
    assert isinstance(first, StepBatch)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(EngineCrashed) as info:
        for _ in gen:
            pass
    elapsed = time.monotonic() - t0
    assert 1.0 < elapsed < 5.0, elapsed
    assert isinstance(info.value, EngineUnresponsive)
    assert str(info.value) == ("engine stopped responding (the engine process was stopped; no heartbeat for 1.5 s) "
                               "while generating")
    assert first.text and gen.text == "" and gen.interrupted  # the text so far is the consumer's
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    quick_client.load(good_spec(tiny_family.target))  # a fresh engine at once
    assert quick_client.pid != pid
    generate_text(quick_client)


def test_a_busy_engine_with_fast_heartbeats_is_not_unresponsive(outrider_home: Path, tiny_family: Family) -> None:
    """Heartbeats every 100 ms from their own thread never corrupt a frame, an engine that works is alive, and
    heartbeats go on while it is idle. The timeout (10 s, 100 beats) leaves room for a loaded 2-core CI machine
    (0.2 s and then 0.8 s each failed a CI run on a scheduling gap); the beats are as frequent as before or more."""
    with EngineClient(heartbeat_timeout=10.0, heartbeat_interval=0.1) as c:
        c.load(family_spec(tiny_family))
        for _ in range(3):
            with c.generate(TextRequest(prompt="the of and", max_tokens=400)) as gen:
                events = list(gen)
            assert isinstance(events[-1], DoneEvent)
        with c.bench(200_000, 1) as gen:  # ~200,000 steps packed into big frames while heartbeats fly
            done = [e for e in gen if isinstance(e, DoneEvent)]
        assert done and done[0].stats.generated == 200_000
        idle_from = time.monotonic()
        deadline = idle_from + 60
        while c.last_heard < idle_from + 0.5:  # idle: heartbeats still come (an event, not a sleep)
            assert time.monotonic() < deadline, "no heartbeat while idle"
            time.sleep(0.05)
        assert c.running
        generate_text(c)


def test_kill_9_from_outside_while_loading_does_not_mark_the_model_unsafe(
    client: EngineClient, tmp_path: Path, good_model: Path
) -> None:
    fifo = tmp_path / "slow.gguf"  # the load blocks on open(): a model that takes long to load
    os.mkfifo(fifo)
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _load_catching(client, fifo, errors))
    if not client.running:
        client.start()
    pid = client.pid
    assert pid is not None
    t.start()
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    t.join(10)
    assert errors and isinstance(errors[0], EngineCrashed)
    assert str(errors[0]) == "engine crashed (SIGKILL) while loading slow.gguf"
    assert not client.unsafe_models.is_unsafe(fifo), "a kill from outside is not the model's fault"
    client.load(good_spec(good_model))


def _load_catching(client: EngineClient, path: Path, errors: list[BaseException]) -> None:
    try:
        client.load(good_spec(path), timeout=30)
    except BaseException as exc:
        errors.append(exc)


def test_engine_logs_are_rotated_failed_runs_included(tmp_path: Path, good_model: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    now = time.time()
    for i in range(LOGS_KEPT + 10):  # recent logs of crashed or failed runs
        path = logs / f"engine-old{i:02d}.log"
        path.write_text("crash\n")
        os.utime(path, (now - 3600 + i, now - 3600 + i))
    c = EngineClient(log_dir=logs)
    try:
        with pytest.raises(EngineRequestError):
            c.load(good_spec(tmp_path / "missing.gguf"))
        remaining = sorted(p.name for p in logs.glob("engine-*.log"))
        assert len(remaining) <= LOGS_KEPT + 1, remaining  # the newest N and the running engine's own
        assert "engine-old00.log" not in remaining and f"engine-old{LOGS_KEPT + 9:02d}.log" in remaining
    finally:
        c.stop()


def test_template_that_hangs_on_a_message_falls_back_with_a_note(
    client: EngineClient, tmp_path: Path
) -> None:
    template = ("{% for m in messages %}{% if 'boom' in m.content %}" + LOOP + "{% endif %}"
                "[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]")
    model = bad_models.small_model(tmp_path / "boom.gguf", chat_template=template)
    info = client.load(PairSpec(str(model), context=CTX))
    assert info.chat_template == "model" and not info.notes
    result: list[object] = []

    def chat() -> None:
        with client.generate(TextRequest(messages=(ChatMessage("user", "boom"),), max_tokens=4)) as gen:
            result.extend([list(gen), gen.notes])

    t = threading.Thread(target=chat, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(30)
    assert not t.is_alive(), "the reply never came: the template hangs the engine"
    assert time.monotonic() - t0 < 15
    events, notes = result
    assert isinstance(events, list) and isinstance(events[-1], DoneEvent)
    assert isinstance(notes, list) and len(notes) == 1
    assert "took longer than 2 s to render" in notes[0] and notes[0].endswith("— using the built-in template")


def test_thread_count_is_bounded_by_the_engine(client: EngineClient, good_model: Path) -> None:
    with pytest.raises(EngineRequestError) as info:
        client.load(PairSpec(str(good_model), context=ContextSettings(n_ctx=256, threads=100_000)))
    assert info.value.kind == "bad_request" and "threads must be between 0 and 1024" in str(info.value)
    client.load(good_spec(good_model))
