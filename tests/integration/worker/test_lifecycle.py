"""Crash, kill -9, cancel, pair switching, shutdown, parent death, isolation from llama_cpp."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from worker_helpers import CTX, N_CTX, family_spec, generate_text, good_spec

from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.params import PairSpec, TextRequest
from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineCrashed, EngineNotRunning
from outrider.worker.generation import Generation
from support.tiny_gguf import Family

LONG = TextRequest(prompt="the of and", max_tokens=N_CTX - 16)


def _pid_gone(pid: int, within: float, *, zombie_ok: bool = False) -> bool:
    """The process has exited; a zombie counts only with ``zombie_ok`` (an orphan waits for init to reap it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie still answers kill(0): check its state
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return zombie_ok
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_generate_streams_steps_then_done(client: EngineClient, tiny_family: Family) -> None:
    info = client.load(family_spec(tiny_family))
    assert info.draft_mode == "model" and info.n_ctx == N_CTX
    assert info.target.n_layer == 4 and info.draft is not None and info.draft.n_layer == 1
    assert info.target.architecture == "llama" and info.backend
    events = list(client.generate(TextRequest(prompt="the of and", max_tokens=32)))
    assert all(isinstance(e, StepBatch) for e in events[:-1])
    steps = [s for e in events if isinstance(e, StepBatch) for s in e.steps]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stop_reason in ("stop", "length")
    assert "".join(s.text for s in steps) == done.text
    assert sum(len(s.tokens) for s in steps) == done.stats.generated
    assert all(len(s.tokens) == len(s.drafted) for s in steps)
    assert done.stats.drafted > 0 and done.stats.decode_tps


def test_in_reply_speedup_crosses_the_wire_and_unload(client: EngineClient, tiny_family: Family) -> None:
    client.load(family_spec(tiny_family))
    assert not hasattr(client, "calibrate")  # the speed-up is measured in each reply, not calibrated at load
    with client.generate(TextRequest(prompt="hello", max_tokens=48)) as gen:
        done = next(e for e in gen if isinstance(e, DoneEvent))
    st = done.stats
    assert st.plain_steps > 0 and st.plain_tps and st.speedup is not None and st.speedup > 0
    assert st.pass_tokens >= st.passes and st.tokens_per_pass is not None and st.tokens_per_pass >= 1.0
    assert st.speedup == pytest.approx(st.plain_equiv_s / (st.step_s - st.stall_s))
    assert st.speedup_low is not None and st.speedup_high is not None and st.speedup_low <= st.speedup
    assert st.token_acceptance is None or 0.0 <= st.token_acceptance <= 1.0
    client.unload()
    assert client.loaded is None
    from outrider.worker.errors import EngineRequestError

    with pytest.raises(EngineRequestError, match="no model is loaded"):
        generate_text(client)


def test_kill_9_mid_generation_reports_promptly_after_the_streamed_steps(
    client: EngineClient, tiny_family: Family
) -> None:
    client.load(family_spec(tiny_family))
    pid = client.pid
    assert pid is not None
    gen = client.generate(LONG)
    first = next(gen)
    assert isinstance(first, StepBatch)
    os.kill(pid, signal.SIGKILL)
    t_kill = time.monotonic()
    with pytest.raises(EngineCrashed) as info:
        for _ in gen:
            pass
    # "Promptly": the client notices the closed pipe, it does not wait for a timeout (generate has none). The
    # bound is generous so that a loaded machine does not fail it; a hang would still fail it.
    assert time.monotonic() - t_kill < 10.0
    crash = info.value
    assert str(crash) == "engine crashed (SIGKILL) while generating"
    assert first.text and gen.text == ""  # the text streamed so far is the consumer's (Generation keeps none)
    assert gen.interrupted
    assert _pid_gone(pid, 10.0), "the killed engine was reaped (no zombie)"  # returns as soon as it is
    client.load(family_spec(tiny_family))  # a new process, at once
    assert client.pid != pid
    generate_text(client)


def test_cancel_mid_generation(client: EngineClient, tiny_family: Family) -> None:
    client.load(family_spec(tiny_family))
    gen = client.generate(LONG)
    assert isinstance(next(gen), StepBatch)
    client.cancel()
    events = list(gen)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stop_reason == "cancelled"
    assert done.stats.generated < LONG.max_tokens
    generate_text(client)  # the engine is free again


def test_cancel_from_another_thread_and_close(client: EngineClient, tiny_family: Family) -> None:
    client.load(family_spec(tiny_family))
    gen = client.generate(LONG)
    first = next(gen)  # the reply is under way (an event, not a timer, says so)
    assert isinstance(first, StepBatch)
    canceller = threading.Thread(target=gen.cancel)
    canceller.start()
    canceller.join()
    events = [first, *gen]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.stop_reason == "cancelled"
    assert done.stats.generated < LONG.max_tokens
    assert done.stats.generated == sum(e.n_tokens for e in events if isinstance(e, StepBatch))
    # an abandoned generation closed early frees the engine for the next request
    with client.generate(LONG) as gen2:
        next(gen2)
    assert gen2.finished
    generate_text(client)


def test_requests_are_serialised(client: EngineClient, tiny_family: Family) -> None:
    client.load(family_spec(tiny_family))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(generate_text(client, max_tokens=16)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4 and len(set(results)) == 1  # greedy, same prompt: same reply each time


def test_switch_pairs_twice(client: EngineClient, tiny_family: Family) -> None:
    pid = client.pid
    a = client.load(family_spec(tiny_family))
    text_a = generate_text(client, max_tokens=16)
    b = client.load(PairSpec(str(tiny_family.target), lookup=True, context=CTX))
    text_b = generate_text(client, max_tokens=16)
    c = client.load(family_spec(tiny_family, "unrelated"))
    text_c = generate_text(client, max_tokens=16)
    assert (a.draft_mode, b.draft_mode, c.draft_mode) == ("model", "lookup", "model")
    assert c.draft is not None and c.draft.path.endswith("unrelated.gguf")
    assert text_a == text_b == text_c, "greedy output does not depend on the drafter"
    assert client.pid == pid


def test_switch_model_mid_generation(client: EngineClient, tiny_family: Family, good_model: Path) -> None:
    client.load(family_spec(tiny_family))
    gen = client.generate(LONG)
    next(gen)
    client.cancel()
    done: list[Generation] = []
    t = threading.Thread(target=lambda: (list(gen), done.append(gen)))
    t.start()
    info = client.load(good_spec(good_model))  # waits for the cancelled reply to end
    t.join(10)
    assert done and info.target.path == str(good_model)


def test_shutdown_with_model_loaded(tiny_family: Family) -> None:
    c = EngineClient()
    c.load(family_spec(tiny_family))
    pid, log_path = c.pid, c.log_path
    assert pid is not None and log_path is not None
    assert c.stop() == 0
    assert _pid_gone(pid, 10.0)
    assert not os.path.exists(log_path), "a clean exit leaves no log behind"
    with pytest.raises(EngineNotRunning):
        c.generate(TextRequest(prompt="hello", max_tokens=4))


def test_shutdown_mid_generation(tiny_family: Family) -> None:
    c = EngineClient()
    c.load(family_spec(tiny_family))
    gen = c.generate(LONG)
    next(gen)
    assert c.stop() == 0
    with pytest.raises(EngineNotRunning):  # or the cancelled reply ended first
        for event in gen:
            if isinstance(event, DoneEvent):
                raise EngineNotRunning("done")


def test_engine_dies_with_its_parent(tiny_family: Family, tmp_path: Path) -> None:
    """kill -9 the app: its engine process notices the closed pipe and exits (no orphan)."""
    script = textwrap.dedent(f"""
        import sys, time
        from outrider.worker.client import EngineClient
        from outrider.engine.params import PairSpec, ContextSettings, TextRequest
        c = EngineClient()
        c.load(PairSpec({str(tiny_family.target)!r}, context=ContextSettings(n_ctx=256)))
        gen = c.generate(TextRequest(prompt="the", max_tokens=200))
        print(c.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "OUTRIDER_HOME": str(tmp_path)})
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    assert _pid_gone(child_pid, 20.0, zombie_ok=True), "the engine outlived the app"


def test_client_never_imports_llama_cpp(tiny_family: Family, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        import outrider.worker.client as client_module
        assert "llama_cpp" not in sys.modules, "import"
        from outrider.engine.params import PairSpec, ContextSettings, TextRequest
        with client_module.EngineClient() as c:
            c.load(PairSpec({str(tiny_family.target)!r}, context=ContextSettings(n_ctx=256)))
            list(c.generate(TextRequest(prompt="the", max_tokens=4)))
        assert "llama_cpp" not in sys.modules, "use"
        assert not any(m.startswith(("outrider.engine.llama.backend", "outrider.engine.llama.runtime",
                                        "outrider.engine.llama.load_checks", "outrider.engine.engine"))
                       for m in sys.modules)
        print("clean")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OUTRIDER_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_one_set_of_request_and_event_types_on_both_sides() -> None:
    """The protocol and the engine's modules use the one definition of each request and event type (in
    ``engine/params.py`` and ``engine/events.py``): nothing mirrors them."""
    import dataclasses

    from outrider.engine import chat, drafters, events, params, sampling, speculative
    from outrider.engine import engine as engine_module
    from outrider.engine.llama import backend
    from outrider.engine.stats import GenerationStats
    from outrider.worker import protocol

    uses = [(engine_module.PairSpec, params.PairSpec), (engine_module.TextRequest, params.TextRequest),
            (backend.ModelSettings, params.ModelSettings), (backend.ContextSettings, params.ContextSettings),
            (drafters.LookupSettings, params.LookupSettings), (chat.ChatMessage, params.ChatMessage),
            (sampling.SamplingParams, params.SamplingParams), (speculative.DraftParams, params.DraftParams),
            (engine_module.LoadedPair, events.LoadedPair), (backend.ModelFacts, events.ModelFacts),
            (speculative.StepEvent, events.StepEvent), (speculative.DoneEvent, events.DoneEvent)]
    for used, defined in uses:
        assert used is defined, used
        assert getattr(protocol, defined.__name__, defined) is defined, defined.__name__
    for name in ("ModelInfo", "LoadedInfo", "Stats"):  # the mirrors the protocol once had
        assert not hasattr(protocol, name), name
    assert set(GenerationStats().to_dict()) >= {f.name for f in dataclasses.fields(GenerationStats)}


def test_engine_dataclasses_are_accepted(client: EngineClient, tiny_family: Family) -> None:
    from outrider.engine import engine as engine_module
    from outrider.engine.llama import backend

    spec = engine_module.PairSpec(str(tiny_family.target), draft=str(tiny_family.draft),
                            context=backend.ContextSettings(n_ctx=N_CTX))
    assert client.load(spec).draft_mode == "model"
    with client.generate(engine_module.TextRequest(prompt="the", max_tokens=4)) as gen:
        assert isinstance(list(gen)[-1], DoneEvent)
