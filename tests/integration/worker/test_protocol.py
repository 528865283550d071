"""The wire protocol, step batching and the unsafe-model registry."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outrider.engine.events import (
    DoneEvent,
    ErrorKind,
    LoadedPair,
    ModelFacts,
    StepBatch,
    StepEvent,
    batch_from_wire,
    done_from_wire,
    done_to_wire,
    loaded_from_wire,
    loaded_to_wire,
    stats_from_wire,
)
from outrider.engine.stats import DERIVED, GenerationStats, PlainRateMeter
from outrider.worker import client as client_module
from outrider.worker.client import EngineClient
from outrider.worker.errors import EngineCrashed, WorkerError, _key_line
from outrider.worker.launch import child_env
from outrider.worker.protocol import PROTOCOL_VERSION, FramedPipe, ProtocolError, decode, encode
from outrider.worker.registry import UnsafeModels


def test_bench_stream_is_complete_and_batched(client: EngineClient) -> None:
    n = 20_000
    t0 = time.perf_counter()
    messages = 0
    last_stats = None
    tokens: list[int] = []
    with client.bench(n) as gen:
        for event in gen:
            if isinstance(event, StepBatch):
                tokens.extend(t for step in event.steps for t in step.tokens)
                if event.stats is not last_stats:
                    messages += 1
                    last_stats = event.stats
    elapsed = time.perf_counter() - t0
    assert isinstance(event, DoneEvent) and event.stats.generated == n
    assert tokens == [i % 1000 + 3 for i in range(n)]
    assert gen.text == " tok" * n
    assert messages < n / 4, "steps travel in batches"
    # Throughput is measured by tests/benchmarks/bench_protocol.py; here only a bound no loaded machine misses
    # (20 000 tokens in 2 minutes) while a per-token round trip or a stall would still exceed it.
    assert elapsed < 120


def test_framed_pipe_roundtrip_and_limits() -> None:
    r, w = os.pipe()
    try:
        pipe = FramedPipe(r, w, max_bytes=1000)
        message = {"type": "steps", "text": "a\ud800b 👨\u200d👩", "n": [1, 2]}
        pipe.send(encode(message))
        assert decode(pipe.recv()) == message
        pipe.send(b"x" * 1001)
        with pytest.raises(ProtocolError):
            pipe.recv()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("data", [b"", b"[1,2]", b"{}", b'{"type": 3}', b"\xff\xfe", b"{" * 10])
def test_decode_rejects_garbage(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(data)


def test_event_parsers_reject_wrong_shapes() -> None:
    with pytest.raises(ProtocolError):
        batch_from_wire({"type": "steps", "steps": "nope", "stats": {}})
    with pytest.raises(ProtocolError):
        batch_from_wire({"type": "steps", "steps": [[1, 2]], "stats": {}})
    with pytest.raises(ProtocolError):
        batch_from_wire({"type": "steps", "steps": [[[5], [False], 0, ["x"], []]], "stats": {"generated": "many"}})
    with pytest.raises(ProtocolError):
        loaded_from_wire([1, 2])
    # unknown fields from a newer engine are ignored
    batch = batch_from_wire({"steps": [[[5], [False], 0, ["x"], []]], "stats": {"generated": 1, "future": 2}})
    assert batch.stats.generated == 1 and batch.text == "x" and batch.steps[0].pieces == ["x"]
    with_pieces = batch_from_wire({"steps": [[[5, 6], [True, False], 1, ["a", "b"], []]], "stats": {}})
    assert with_pieces.steps == (StepEvent([5, 6], [True, False], ["a", "b"], 1),) and with_pieces.k == 1


_OLD_ENGINE = """
import os, time
from outrider.worker.protocol import FramedPipe, encode
FramedPipe(None, 1).send(encode({"type": "hello", "version": 1, "pid": os.getpid(), "backend": {}}))
time.sleep(120)
"""


def test_an_engine_of_another_protocol_version_is_turned_away(
        monkeypatch: pytest.MonkeyPatch, outrider_home: Path) -> None:
    """The hello's version check is what lets each step's text travel once (version 2): an engine that says 1
    (it would send the text twice and in another order) is killed before any request, with both versions named."""
    assert PROTOCOL_VERSION == 2
    started: list[subprocess.Popen[bytes]] = []

    def spawn_old_engine(log_path: str, heartbeat: float) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", _OLD_ENGINE], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=child_env(), bufsize=0)
        started.append(proc)
        return proc

    monkeypatch.setattr(client_module, "spawn", spawn_old_engine)
    old = EngineClient(start_timeout=60.0)
    with pytest.raises(WorkerError, match="protocol 1, expected 2"):
        old.start()
    assert started and started[0].wait(timeout=30) is not None  # killed, not left behind
    assert not old.running


def _measured_stats() -> GenerationStats:
    """A reply's statistics as the engine builds them: plain probes around speculative steps."""
    st = GenerationStats(prompt_tokens=12, generated=40, drafted=30, accepted=21, rejections=6, passes=14,
                         pass_tokens=41, k_sum=30, draft_s=0.2, verify_s=0.5, decode_s=0.8, ttft_s=0.05,
                         draft_mode="model")
    meter = PlainRateMeter(st)
    for batch, tokens, seconds, target in [(5, 4, 0.07, 0.06), (1, 1, 0.05, 0.048), (5, 3, 0.066, 0.056),
                                           (1, 1, 0.052, 0.05), (6, 5, 0.08, 0.07), (1, 1, 0.049, 0.047)]:
        meter.add_step(batch=batch, pass_tokens=tokens, step_s=seconds, target_s=target)
    meter.finish()
    return st


def test_stats_on_the_wire_are_the_engines_fields_and_derived_numbers() -> None:
    wire_fields = set(_measured_stats().to_dict())
    assert wire_fields == set(GenerationStats.__dataclass_fields__) | set(DERIVED)
    assert "baseline_tps" not in wire_fields
    # derived figures are recomputed from the counters, never taken from the wire
    assert stats_from_wire({"generated": 10, "decode_s": 2.0, "decode_tps": 99.0}).decode_tps == 5.0


def test_loaded_and_done_round_trip() -> None:
    info = LoadedPair(ModelFacts(path="t.gguf", n_layer=4), None, "lookup", 512, "CPU", False, "chatml", 10, 0,
                      ("a note",))
    wire = decode(encode({"type": "loaded", "info": {**loaded_to_wire(info), "future": 1}}))
    assert loaded_from_wire(wire["info"]) == info
    done = DoneEvent("stop", _measured_stats(), "text")
    assert done_from_wire(decode(encode(done_to_wire(done)))) == done
    assert ErrorKind.parse("incompatible_pair") is ErrorKind.INCOMPATIBLE_PAIR
    assert ErrorKind.parse("from_the_future") is ErrorKind.ENGINE


def test_stats_round_trip_with_the_in_reply_speedup() -> None:
    st = _measured_stats()
    assert st.speedup is not None and st.speedup_low is not None and st.plain_tps is not None
    wire = decode(encode({"type": "done", "stop_reason": "stop", "stats": st.to_dict(), "text": "x"}))
    done = done_from_wire(wire)
    assert done.stats.to_dict() == st.to_dict()  # every field and derived number, bit for bit
    assert (done.stats.speedup, done.stats.speedup_low, done.stats.speedup_high, done.stats.plain_tps) == (
        st.speedup, st.speedup_low, st.speedup_high, st.plain_tps)
    assert (done.stats.rejections, done.stats.pass_tokens, done.stats.token_acceptance,
            done.stats.tokens_per_pass) == (6, 41, 21 / 27, 41 / 14)
    batch = batch_from_wire({"steps": [[[5], [False], 0, ["x"], []]], "stats": st.to_dict()})
    assert batch.stats == done.stats


def test_stats_from_an_older_engine_drop_the_calibrated_baseline_and_the_figure_without_interval() -> None:
    old = {"generated": 8, "decode_tps": 40.0, "baseline_tps": 20.0, "speedup": 2.0, "speedup_error": 0.01,
           "acceptance_rate": 0.5}
    stats = batch_from_wire({"steps": [[[5], [False], 0, ["x"], []]], "stats": old}).stats
    assert stats.generated == 8 and not hasattr(stats, "baseline_tps")
    assert stats.speedup is None and stats.plain_tps is None and stats.token_acceptance is None


def test_crash_message_and_key_line() -> None:
    tail = ("llama_model_loader: loaded meta data", "/src/llama-vocab.cpp:2106: GGML_ASSERT(x) failed",
            "Fatal Python error: Aborted")
    crash = EngineCrashed("SIGABRT", "loading", "/models/a/model.gguf", log_tail=tail)
    assert str(crash) == "engine crashed (SIGABRT) while loading model.gguf"
    assert crash.detail.endswith("GGML_ASSERT(x) failed")
    assert str(EngineCrashed("SIGSEGV", "generating")) == "engine crashed (SIGSEGV) while generating"
    assert _key_line(()) == ""


def test_unsafe_registry(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF....")
    reg = UnsafeModels(tmp_path / "reg" / "unsafe.json")
    assert not reg.is_unsafe(model)
    reg.mark(model, "engine crashed (SIGABRT) while loading m.gguf")
    reason = UnsafeModels(tmp_path / "reg" / "unsafe.json").reason(model)
    assert reason == "engine crashed (SIGABRT) while loading m.gguf"
    assert reg.is_unsafe(tmp_path / "." / "m.gguf")  # keyed by the real path
    model.write_bytes(b"GGUF.... a new download")
    assert not reg.is_unsafe(model), "a changed file is judged afresh"
    reg.mark(model, "again")
    reg.clear(model)
    assert not reg.is_unsafe(model) and reg.entries() == {}
    (tmp_path / "reg" / "unsafe.json").write_text("{not json")
    assert not reg.is_unsafe(model)  # a damaged registry is treated as empty
