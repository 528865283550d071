"""Regressions of the [truth] review: k against n_batch, a longer draft vocabulary, a full context with prompt
lookup, cancel before prompt evaluation, KV memory from the model's key/value lengths, the in-reply speed-up
with the draft off while the machine's load changes. Greedy outputs are compared with an independent reference
(tests/support/reference_decoding.py: one token per llama_decode, its own argmax)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from outrider.engine.engine import Engine
from outrider.engine.errors import DecodeError
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams, ModelSettings, PairSpec, SamplingParams
from outrider.engine.speculative import DoneEvent, StepEvent
from outrider.engine.threads import CONTENDED_WINDOWS, CONTENTION_WINDOW_S, OtherLoadMeter, usable_cpus
from support.reference_decoding import ReferenceModel
from support.tiny_gguf import TinyShape, build_vocab, make_family, random_weights, vocab_variant, write_gguf

SHAPE = TinyShape(n_layer=3, n_embd=128, n_head=4, n_ff=256)


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_family(tmp_path_factory.mktemp("limits"), shape=SHAPE, extra_layer_scale=0.05, prefix="lim")


def _run(engine: Engine, prompt: list[int], **kwargs: object) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    done = None
    for event in engine.generate(prompt, **kwargs):  # type: ignore[arg-type]
        if isinstance(event, StepEvent):
            tokens.extend(event.tokens)
        else:
            done = event
    assert done is not None
    return tokens, done


@pytest.mark.parametrize("k", [3, 5, 8])
def test_k_above_n_batch_keeps_greedy_output(backend: Backend, family, k: int) -> None:  # type: ignore[no-untyped-def]
    """n_batch 4: a draft of k >= 4 would split the verification pass (k 5 changed the output, k 8 raised)."""
    engine = Engine(backend)
    engine.load(PairSpec(target=str(family.target), draft=str(family.target),
                         context=ContextSettings(n_ctx=256, n_batch=4)))
    try:
        prompt = engine.tokenize_prompt("the model is")
        tokens, done = _run(engine, prompt, max_tokens=40, draft=DraftParams(k=k), ignore_eos=True)
        assert done.stats.drafted > 0
        assert done.stats.k_sum <= 3 * done.stats.passes  # every step at most n_batch - 1
    finally:
        engine.unload()
    reference = ReferenceModel(family.target)
    assert tokens == reference.greedy(prompt, len(tokens))


def test_draft_with_a_longer_vocabulary_never_proposes_missing_ids(backend: Backend, tmp_path: Path) -> None:
    """A draft with 100 extra tokens (allowed up to 128) whose head favours exactly those: none may reach the
    target (llama_decode failed on them)."""
    vocab = build_vocab()
    target_w = random_weights(SHAPE, len(vocab[0]), 5)
    target = write_gguf(tmp_path / "t.gguf", target_w, SHAPE, vocab, name="t")
    long_vocab = vocab_variant(extra_words=100)
    n_long = len(long_vocab[0])
    draft_shape = TinyShape(n_layer=1, n_embd=SHAPE.n_embd, n_head=SHAPE.n_head, n_ff=SHAPE.n_ff)
    draft_w = random_weights(draft_shape, n_long, 6)
    head = draft_w["output.weight"].astype("float32")
    head[len(vocab[0]):] = head[: n_long - len(vocab[0])] * 50  # the extra ids win every argmax
    draft_w["output.weight"] = head.astype("float16")
    draft = write_gguf(tmp_path / "d.gguf", draft_w, draft_shape, long_vocab, name="d")
    engine = Engine(backend)
    engine.load(PairSpec(target=str(target), draft=str(draft), context=ContextSettings(n_ctx=256)))
    try:
        prompt = engine.tokenize_prompt("hello world")
        tokens, done = _run(engine, prompt, max_tokens=24, draft=DraftParams(k=4), ignore_eos=True)
        assert done.stats.drafted > 0
        assert max(tokens) < len(vocab[0])
    finally:
        engine.unload()
    assert tokens == ReferenceModel(target).greedy(prompt, len(tokens))


def test_draft_with_a_shorter_vocabulary_is_fed_only_ids_it_has(backend: Backend, tmp_path: Path) -> None:
    """A target with 100 more tokens than its draft (allowed up to 128) whose head favours exactly those: the
    target emits ids the draft lacks, and the reply goes on, drafting, equal to the target alone. Before the fix
    the draft was fed those ids and the reply died with "llama_decode returned -1"; with ``feedable`` bypassed
    (ids passed as they are) this test fails the same way."""
    vocab = build_vocab()
    long_vocab = vocab_variant(extra_words=100)
    n_short, n_long = len(vocab[0]), len(long_vocab[0])
    target_w = random_weights(SHAPE, n_long, 7)
    head = target_w["output.weight"].astype("float32")
    head[n_short:] = head[: n_long - n_short] * 4  # the extra ids win many argmaxes, not all
    target_w["output.weight"] = head.astype("float16")
    target = write_gguf(tmp_path / "t.gguf", target_w, SHAPE, long_vocab, name="t")
    draft_shape = TinyShape(n_layer=1, n_embd=SHAPE.n_embd, n_head=SHAPE.n_head, n_ff=SHAPE.n_ff)
    draft = write_gguf(tmp_path / "d.gguf", random_weights(draft_shape, n_short, 8), draft_shape, vocab, name="d")
    engine = Engine(backend)
    engine.load(PairSpec(target=str(target), draft=str(draft), context=ContextSettings(n_ctx=256)))
    try:
        prompt = engine.tokenize_prompt("hello world")
        tokens, done = _run(engine, prompt, max_tokens=32, draft=DraftParams(k=3), ignore_eos=True)
        again, _ = _run(engine, prompt + tokens[:5], max_tokens=8, draft=DraftParams(k=3), ignore_eos=True)
        sampled, sampled_done = _run(engine, prompt, max_tokens=32, draft=DraftParams(k=3), ignore_eos=True,
                                     sampling=SamplingParams(temperature=1.0, seed=3))  # outrider verify's path
        assert sampled_done.stats.drafted > 0 and len(sampled) == 32 and max(sampled) < n_long
        assert done.stats.drafted > 0 and done.stop_reason == "length"
        assert max(tokens) >= n_short  # the target did emit ids the draft lacks, before later drafts
        assert any(t >= n_short for t in tokens[:-4])
    finally:
        engine.unload()
    reference = ReferenceModel(target)
    assert tokens == reference.greedy(prompt, len(tokens))
    assert again == reference.greedy(prompt + tokens[:5], len(again))


def test_k_mean_counts_the_draft_that_ran_not_the_k_chosen(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    """k 8 with p-min 0.999: the draft model is almost never that sure, so p-min empties most drafts. k_mean must
    be the tokens verified per pass (drafted / passes here: no stop cuts a step), not 8 (before the fix it read
    8.0 while well under one token per pass was drafted)."""
    engine = Engine(backend)
    engine.load(PairSpec(target=str(family.target), draft=str(family.unrelated), context=ContextSettings(n_ctx=256)))
    try:
        prompt = engine.tokenize_prompt("the model is")
        _, done = _run(engine, prompt, max_tokens=40, draft=DraftParams(k=8, p_min=0.999), ignore_eos=True)
        _, full = _run(engine, prompt, max_tokens=40, draft=DraftParams(k=8), ignore_eos=True)
    finally:
        engine.unload()
    s = done.stats
    assert s.k_mean is not None and s.k_mean == pytest.approx(s.drafted / s.passes)
    assert s.k_mean < 4
    assert full.stats.drafted > 0 and full.stats.k_mean == pytest.approx(full.stats.drafted / full.stats.passes)


class _ScriptedLoad(OtherLoadMeter):
    """Other processes' load as a test says: ``probe`` at load, ``between`` before each reply."""

    def __init__(self, probe: float) -> None:
        super().__init__()
        self.at_load = probe
        self.between: float | None = None

    def probe(self, seconds: float = 0.1, sleep: object = None) -> float:
        return self.at_load

    def busy_since_last(self, min_interval: float = 1.0) -> float | None:
        return self.between


def test_automatic_threads_follow_the_cpus_other_processes_leave_free(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    """Threads 0: loaded while every CPU is busy, one thread (the load fact and the reply's stats say so); the
    load gone before the next reply, every CPU; an explicit count is kept whatever the load. Broken once on
    purpose (no re-choice before a reply): the second reply still ran 1 thread."""
    meter = _ScriptedLoad(probe=float(usable_cpus() + 4))
    engine = Engine(backend, load_meter=meter, thread_wait=lambda: 0.0)  # no load within a reply
    prompt_text = "the model is"
    try:
        info = engine.load(PairSpec(target=str(family.target), draft=str(family.draft),
                                    context=ContextSettings(n_ctx=256)))
        assert info.threads == 1 and engine.spec is not None and engine.spec.context.threads == 0
        prompt = engine.tokenize_prompt(prompt_text)
        _, busy = _run(engine, prompt, max_tokens=8, draft=DraftParams(k=2))
        meter.between = 0.0
        _, quiet = _run(engine, prompt, max_tokens=8, draft=DraftParams(k=2))
        assert busy.stats.threads == 1 and quiet.stats.threads == usable_cpus()
        explicit = engine.load(PairSpec(target=str(family.target), context=ContextSettings(n_ctx=256, threads=2)))
        meter.between = float(usable_cpus() + 4)
        _, kept = _run(engine, prompt, max_tokens=4)
        assert explicit.threads == 2 and kept.stats.threads == 2
    finally:
        engine.unload()


def test_prompt_lookup_stops_at_a_full_context_like_plain_decoding(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(backend)
    engine.load(PairSpec(target=str(family.target), lookup=True, context=ContextSettings(n_ctx=256)))
    try:
        prompt = engine.tokenize_prompt("a b c a b c a b c a b c")
        plain, plain_done = _run(engine, prompt, max_tokens=1000, plain=True, ignore_eos=True)
        spec, spec_done = _run(engine, prompt, max_tokens=1000, draft=DraftParams(k=8), ignore_eos=True)
        assert spec_done.stats.drafted > 0
        assert len(prompt) + len(plain) == 256 == len(prompt) + len(spec)
        assert plain_done.stop_reason == spec_done.stop_reason == "length"
        assert spec == plain
    finally:
        engine.unload()


def test_a_cancel_before_prompt_evaluation_is_not_swallowed(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    """The engine's abort flag is cleared when a request starts, not by each decode."""
    model = LoadedModel(backend, family.target, ModelSettings())
    ctx = ModelContext(model, ContextSettings(n_ctx=512, n_batch=32))
    try:
        ctx.clear_abort()
        ctx.request_abort()  # arrives after the request started, before its prompt is evaluated
        with pytest.raises(DecodeError) as info:
            ctx.decode(list(range(3, 300)), logits="none", abortable=True)
        assert info.value.status == 2 and ctx.n_past == 0
    finally:
        ctx.close()
        model.close()


def test_engine_cancel_during_a_long_prompt(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(backend)
    engine.load(PairSpec(target=str(family.target), draft=str(family.draft),
                         context=ContextSettings(n_ctx=2048, n_batch=16)))
    try:
        prompt = [1] + [3 + (i % 200) for i in range(1800)]
        events = engine.generate(prompt, max_tokens=50)
        engine.cancel()  # after the request object exists, before the first step runs
        tokens, done = [], None
        for event in events:
            if isinstance(event, DoneEvent):
                done = event
            else:
                tokens.extend(event.tokens)
        assert done is not None and done.stop_reason == "cancelled" and len(tokens) < 50
        again = [e for e in engine.generate(engine.tokenize_prompt("the"), max_tokens=5) if isinstance(e, DoneEvent)]
        assert again[0].stop_reason != "cancelled"  # the next request starts clean
    finally:
        engine.unload()


def test_kv_bytes_use_the_models_key_and_value_lengths(backend: Backend, tmp_path: Path) -> None:
    """Heads 64 wide by n_embd / n_head, but the file says keys and values are 48 wide (as Qwen3 0.6B says 128
    where n_embd / n_head gives 64; llama.cpp's llama loader needs keys and values of one width)."""
    shape = TinyShape(n_layer=2, n_embd=128, n_head=2, n_ff=256)
    vocab = build_vocab()
    w = random_weights(shape, len(vocab[0]), 9)
    n_kv = shape.n_head
    rng = np.random.default_rng(9)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)

    for i in range(shape.n_layer):
        w[f"blk.{i}.attn_q.weight"] = mat(48 * shape.n_head, shape.n_embd)
        w[f"blk.{i}.attn_k.weight"] = mat(48 * n_kv, shape.n_embd)
        w[f"blk.{i}.attn_v.weight"] = mat(48 * n_kv, shape.n_embd)
        w[f"blk.{i}.attn_output.weight"] = mat(shape.n_embd, 48 * shape.n_head)
    path = write_gguf(tmp_path / "kv.gguf", w, shape, vocab, name="kv",
                      extra_kv={"llama.attention.key_length": 48, "llama.attention.value_length": 48,
                                "llama.rope.dimension_count": 48})
    model = LoadedModel(backend, path, ModelSettings())
    try:
        assert model.kv_bytes_per_token() == 2 * shape.n_layer * n_kv * (48 + 48)
    finally:
        model.close()


BURN = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"


@pytest.fixture
def cpu_burners() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_speedup_with_the_draft_off_stays_one_when_load_starts_mid_reply(
    backend: Backend, family, cpu_burners: list[subprocess.Popen[bytes]]  # type: ignore[no-untyped-def]
) -> None:
    engine = Engine(backend)
    engine.load(PairSpec(target=str(family.target), draft=str(family.draft), context=ContextSettings(n_ctx=512)))
    try:
        started = threading.Event()
        done = None
        for i, event in enumerate(engine.generate(engine.tokenize_prompt("the"), max_tokens=200,
                                                  draft=DraftParams(k=0), ignore_eos=True)):
            if i == 60 and not started.is_set():  # the machine gets busy mid-reply
                cpu_burners.extend(subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(3))
                started.set()
            if isinstance(event, DoneEvent):
                done = event
        assert started.is_set() and done is not None
        assert done.stats.drafted == 0 and done.stats.plain_steps == done.stats.passes
        assert done.stats.speedup == pytest.approx(1.0, abs=0.05)
    finally:
        engine.unload()


@pytest.mark.skipif(usable_cpus() < 2, reason="one CPU: there is no thread to give up")
def test_automatic_threads_step_down_within_a_reply_whose_threads_wait_for_a_cpu(backend: Backend, family) -> None:  # type: ignore[no-untyped-def]
    """A load that starts mid-reply: the threads are seen waiting for a CPU (here scripted: all the time), and
    the reply steps down to fewer threads between its passes — on the target's context and the draft's — and
    says so in its stats; the greedy text is the one the reply would have had anyway (the thread count changes
    how a pass is split, not its result). Broken once on purpose (the governor not called from the engine's
    reply loop): the reply ended with every CPU's threads; (the contended passes not told to the decoder): no
    contended step."""
    quiet_meter = _ScriptedLoad(probe=0.0)
    engine = Engine(backend, load_meter=quiet_meter, thread_wait=time.monotonic)
    reference = Engine(backend, load_meter=_ScriptedLoad(probe=0.0), thread_wait=lambda: 0.0)
    spec = PairSpec(target=str(family.target), draft=str(family.draft), context=ContextSettings(n_ctx=512))
    try:
        assert engine.load(spec).threads == usable_cpus()
        prompt = engine.tokenize_prompt("the model is")
        started = time.monotonic()
        tokens, done = _run(engine, prompt, max_tokens=400, draft=DraftParams(k=2), ignore_eos=True)
        took = time.monotonic() - started
        if took < CONTENTION_WINDOW_S * (CONTENDED_WINDOWS + 1):
            pytest.skip(f"the reply took {took * 1000:.0f} ms: too short to see a window")
        assert done.stats.drafted > 0 and done.stats.threads < usable_cpus()
        assert all(ctx.n_threads == done.stats.threads for ctx in engine._contexts())
        assert len(engine._contexts()) == 2
        # The passes the step down rested on reach the reply's speed-up estimate as contended ones.
        meter = engine._decoder._meter if engine._decoder is not None else None
        assert meter is not None and any(p.contended for p in meter.steps)
        reference.load(spec)
        expected, plain = _run(reference, prompt, max_tokens=400, draft=DraftParams(k=2), ignore_eos=True)
        assert plain.stats.threads == usable_cpus() and tokens == expected
    finally:
        engine.unload()
        reference.unload()
