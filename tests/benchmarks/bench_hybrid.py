"""Speculation on hybrid targets: speculative vs plain, and what rolling a rejected draft back costs.

    python tests/benchmarks/bench_hybrid.py [--quick] [--runs N] [--tokens N] [--threads N] [--cuda]

Models: the generated hybrid families of ``tests/support/hybrid_gguf.py`` (``qwen35``: gated delta-net + attention,
``lfm2``: short convolutions + attention), a target of --layers x --width F16 blocks and its draft of the target's
first quarter of layers (at least 4, so that it keeps an attention layer; agreement ~0.85). Everything is measured
in this process, interleaved (A B A B ...), and reported as medians and ratios from this run only.

1. Replies, decode tok/s (prompt excluded): plain decoding; the hybrid draft with k = 4 and automatic k, the target
   rolling back through its recurrent-state snapshots (``n_rs_seq``); and the same with the *checkpoint approach*
   (``rollback_tokens=0``: the target saves its recurrent state with ``llama_state_seq_get_data_ext`` before each
   verify batch and, on a rejection, restores it and re-evaluates the accepted tokens — what llama-server does for a
   plain draft model on a hybrid target).
2. Per round, on the target alone (milliseconds; "pass" = one verify batch of k + 1 = 5 tokens, with snapshots):
   the snapshot rollback of r rejected tokens (``seq_rm`` + the next one-token pass, minus that pass when nothing
   was rolled back), per rejected token and as a share of a pass (goal: < 5 %); what keeping the snapshots adds to
   every pass (a 5-token pass with ``n_rs_seq`` = 8 against one without); and the checkpoint approach's save,
   restore and replay.

3. The **native** column: llama.cpp's own ``llama-speculative-simple`` (built from the vendored source, cached,
   ``tests/benchmarks/native_llama.py``) on the same target and draft files with the same k, prompt and threads.
   At this llama.cpp revision it gives a draft model's target ``n_rs_seq`` 0, so on a hybrid target it *is* the
   checkpoint approach (``PARTIAL_ONLY`` state copies to host memory, a restore and a re-evaluation after every
   partial acceptance): the row "native" is llama.cpp's checkpoint rounds, "checkpoint" ours.
4. A checkpoint's price per round at realistic context lengths (``--fill`` positions in the cache): saving and
   restoring the recurrent part (``PARTIAL_ONLY``; into host memory, as llama.cpp's tools do, and on the device,
   as Outrider's checkpoint rounds do), and the whole sequence state (``llama_state_seq_get_data`` /
   ``set_data``: every attention position too, which grows with the context), against the snapshot rollback
   (``seq_rm``), which costs the same at any length.

``--quick`` (small models, few runs) finishes in under a minute once the native binary is cached (the first build
compiles llama.cpp: slow on a small machine); ``--no-native`` skips the native column. ``--cuda`` offloads every
layer (numbers then mean a GPU; the script is the same, and builds the native tool with CUDA).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))

import llama_cpp.llama_cpp as ll  # noqa: E402
from native_llama import NativeResult, build_native, run_native  # noqa: E402

from outrider.engine.compat import ROLLBACK_TOKENS  # noqa: E402
from outrider.engine.drafters import ModelDraft  # noqa: E402
from outrider.engine.llama.backend import LoadedModel, ModelContext  # noqa: E402
from outrider.engine.llama.runtime import Backend  # noqa: E402
from outrider.engine.params import ContextSettings, DraftParams, ModelSettings  # noqa: E402
from outrider.engine.speculative import DoneEvent, GenerationRequest, SpeculativeDecoder  # noqa: E402
from support.hybrid_gguf import (  # noqa: E402
    HybridFamily,
    Lfm2Shape,
    Qwen35Shape,
    make_lfm2_family,
    make_qwen35_family,
)

CACHE = ROOT / ".cache" / "bench-hybrid"
PROMPT_WORDS = "the model is fast and the draft is".split()
K = 4


def families(layers: int, width: int) -> dict[str, HybridFamily]:
    q_shape = Qwen35Shape(n_layer=layers, n_embd=width, n_ff=2 * width, ssm_d_state=64, ssm_n_group=2,
                          ssm_dt_rank=width // 64)
    l_shape = Lfm2Shape(n_layer=layers, n_embd=width, n_ff=2 * width,
                        attention_layers=tuple(i for i in range(layers) if i % 3 == 2))
    return {
        "qwen35": make_qwen35_family(CACHE / "qwen35", shape=q_shape, draft_layers=max(4, layers // 4)),
        "lfm2": make_lfm2_family(CACHE / "lfm2", shape=l_shape, draft_layers=max(4, layers // 4)),
    }


def prompt_ids(model: LoadedModel) -> list[int]:
    return model.tokenize(" ".join(PROMPT_WORDS), add_special=True, parse_special=False)


class Pair:
    """A target, its draft and two target contexts (snapshots / checkpoint-only) with their decoders."""

    def __init__(self, backend: Backend, family: HybridFamily, settings: ContextSettings, gpu: int) -> None:
        ms = ModelSettings(gpu_layers=gpu)
        self.target = LoadedModel(backend, family.target, ms)
        self.draft = LoadedModel(backend, family.draft, ms)
        self.snap_ctx = ModelContext(self.target, settings)
        self.ckpt_ctx = ModelContext(self.target, settings, rollback_tokens=0)
        self.decoders = {
            "plain": SpeculativeDecoder(self.target, self.snap_ctx, self._drafter(settings)),
            "snapshots": SpeculativeDecoder(self.target, self.snap_ctx, self._drafter(settings)),
            "checkpoint": SpeculativeDecoder(self.target, self.ckpt_ctx, self._drafter(settings)),
        }
        self.decoders["plain"].cached = self.decoders["snapshots"].cached  # one context, one cache mirror

    def _drafter(self, settings: ContextSettings) -> ModelDraft:
        return ModelDraft(ModelContext(self.draft, settings, rollback_tokens=0), self.target.n_vocab)

    def reply(self, mode: str, k: int | None, tokens: int) -> tuple[float, int, int]:
        """(decode tok/s, drafted, accepted) of one reply; automatic k starts cold."""
        decoder = self.decoders[mode]
        decoder.auto_policy = None
        draft = DraftParams(k=0 if mode == "plain" else k)
        request = GenerationRequest(prompt_ids(self.target), max_tokens=tokens, draft=draft, ignore_eos=True)
        done = None
        for event in decoder.generate(request):
            if isinstance(event, DoneEvent):
                done = event
        assert done is not None
        return done.stats.decode_tps or 0.0, done.stats.drafted, done.stats.accepted

    def close(self) -> None:
        for decoder in self.decoders.values():
            decoder.drafter.close()
        self.snap_ctx.close()
        self.ckpt_ctx.close()
        self.draft.close()
        self.target.close()


def rollback_costs(backend: Backend, family: HybridFamily, settings: ContextSettings, gpu: int, runs: int
                   ) -> dict[str, float]:
    """Milliseconds per operation on the target alone (medians of ``runs`` interleaved repetitions). A verify
    batch is [last prompt token, 4 draft tokens]; a rejection of all 4 keeps the first (``truncate(base + 1)``)."""
    ms = ModelSettings(gpu_layers=gpu)
    with LoadedModel(backend, family.target, ms) as model, ModelContext(model, settings) as snap, \
            ModelContext(model, settings, rollback_tokens=0) as bare:
        prompt = prompt_ids(model)
        batch = [prompt[-1], *range(300, 300 + K)]
        base = len(prompt) - 1
        samples: dict[str, list[float]] = {}

        def add(name: str, fn: Callable[[], object], ctx: ModelContext) -> None:
            t0 = time.perf_counter()
            fn()
            ctx.synchronize()
            samples.setdefault(name, []).append((time.perf_counter() - t0) * 1000)

        def reset(ctx: ModelContext) -> None:
            ctx.clear()
            ctx.decode(prompt[:-1])

        for _ in range(runs):
            reset(snap)
            add("pass, snapshots", lambda: snap.decode(batch, logits="all"), snap)
            rollbacks = snap.rollbacks
            add("seq_rm", lambda: snap.truncate(base + 1), snap)
            assert snap.rollbacks == rollbacks + 1 and snap.n_past == base + 1
            add("pass 1 after rollback", lambda: snap.decode([400]), snap)
            reset(snap)
            snap.decode(batch[:2], logits="all")
            add("pass 1 without rollback", lambda: snap.decode([400]), snap)
            reset(bare)
            add("pass, no snapshots", lambda: bare.decode(batch, logits="all"), bare)
            reset(bare)
            add("checkpoint save", bare.checkpoint, bare)
            bare.decode(batch, logits="all")
            add("checkpoint restore", lambda: bare.truncate(base + 1), bare)
            assert bare.n_past == base
            add("replay 1 token", lambda: bare.decode(batch[:1], logits="none"), bare)
        return {name: statistics.median(values) for name, values in samples.items()}


def _timed_ms(fn: Callable[[], object], ctx: ModelContext) -> float:
    t0 = time.perf_counter()
    fn()
    ctx.synchronize()
    return (time.perf_counter() - t0) * 1000


def _state_copy(ctx: ModelContext, flag: int) -> tuple[float, float, int]:
    """(save ms, restore ms, bytes) of one copy of sequence 0's state with ``flag`` (``llama_state_seq_*_ext``)."""
    size = int(ll.llama_state_seq_get_size_ext(ctx.handle, 0, flag))
    buf = (ctypes.c_uint8 * size)()
    t0 = time.perf_counter()
    written = int(ll.llama_state_seq_get_data_ext(ctx.handle, buf, size, 0, flag))
    ctx.synchronize()
    t1 = time.perf_counter()
    if not written or not ll.llama_state_seq_set_data_ext(ctx.handle, buf, written, 0, flag):
        raise RuntimeError(f"llama.cpp refused to save or restore the sequence state (flags {flag})")
    ctx.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) * 1000, (t2 - t1) * 1000, written


def state_copy_costs(backend: Backend, family: HybridFamily, settings: ContextSettings, gpu: int, runs: int,
                     fill: int) -> dict[str, float]:
    """Milliseconds per operation with ``fill`` positions in the target's cache (medians of ``runs``): the
    snapshot rollback of K tokens after a verify batch, and a checkpoint's save + restore in three forms — the
    recurrent part to host memory (``PARTIAL_ONLY``: llama.cpp's tools), on the device (``PARTIAL_ONLY |
    ON_DEVICE``: Outrider's checkpoint rounds), and the whole sequence (flags 0, ``llama_state_seq_get_data`` /
    ``set_data``). Also the bytes each copy holds."""
    ms = ModelSettings(gpu_layers=gpu)
    out: dict[str, list[float]] = {}
    with LoadedModel(backend, family.target, ms) as model, ModelContext(model, settings) as snap, \
            ModelContext(model, settings, rollback_tokens=0) as bare:
        n_vocab = model.n_vocab
        history = [10 + (i * 7) % (n_vocab - 10) for i in range(fill)]
        batch = [history[-1], *range(300, 300 + K)]
        flags = {"host": ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY,
                 "device": ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY | ll.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE,
                 "full": ll.LLAMA_STATE_SEQ_FLAGS_NONE}
        for ctx in (snap, bare):
            ctx.clear()
            ctx.decode(history[:-1])
        base = fill - 1
        for _ in range(runs):
            # A verify batch with all K drafts rejected: the cache grows by one position per run (the kept token).
            kept = snap.n_past + 1
            snap.decode(batch, logits="all")
            out.setdefault("seq_rm", []).append(_timed_ms(lambda kept=kept: snap.truncate(kept), snap))
            assert snap.n_past == kept
            for name, flag in flags.items():
                save_ms, restore_ms, size = _state_copy(bare, flag)
                out.setdefault(f"{name} save", []).append(save_ms)
                out.setdefault(f"{name} restore", []).append(restore_ms)
                out.setdefault(f"{name} bytes", []).append(float(size))
            assert bare.n_past == base
    return {name: statistics.median(values) for name, values in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small models, 2 runs (a smoke run)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cuda", action="store_true", help="offload every layer to the GPU")
    ap.add_argument("--no-native", action="store_true", help="skip llama.cpp's own llama-speculative-simple")
    ap.add_argument("--fill", type=int, default=768, help="cache positions for the checkpoint-copy costs")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.tokens, args.layers, args.width, args.fill = 2, 32, 8, 256, 256
    if not 16 <= args.fill <= 1024 - 64:
        ap.error("--fill must be 16..960 (the benchmark's context is 1024 positions)")
    binary = None if args.no_native else build_native(args.cuda)
    gpu = -1 if args.cuda else 0
    settings = ContextSettings(n_ctx=1024, threads=args.threads)
    backend = Backend()
    print(f"# bench_hybrid: {platform.machine()} {os.cpu_count()} CPUs, threads {args.threads}, "
          f"{'CUDA' if args.cuda else 'CPU'}, {args.layers} layers x {args.width}, {args.tokens} tokens, "
          f"{args.runs} runs, ROLLBACK_TOKENS {ROLLBACK_TOKENS}")
    print(f"# load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    fams = families(args.layers, args.width)
    modes = [("plain", 0), ("snapshots", K), ("snapshots", None), ("checkpoint", K), ("checkpoint", None)]
    print("\n| target | mode | k | tok/s | vs plain | acceptance |")
    print("|---|---|---|---|---|---|")
    for arch, family in fams.items():
        pair = Pair(backend, family, settings, gpu)
        try:
            pair.reply("snapshots", K, 8)  # page the weights in
            rates: dict[tuple[str, int | None], list[float]] = {}
            counts: dict[tuple[str, int | None], list[int]] = {}
            native: list[NativeResult] = []
            for _ in range(args.runs):  # interleaved: ours in every mode, then llama.cpp's tool, each run
                for mode, k in modes:
                    tps, drafted, accepted = pair.reply(mode, k, args.tokens)
                    rates.setdefault((mode, k), []).append(tps)
                    c = counts.setdefault((mode, k), [0, 0])
                    c[0] += drafted
                    c[1] += accepted
                if binary is not None:
                    native.append(run_native(binary, family.target, draft=family.draft, spec_type="draft-simple",
                                             k=K, prompt=" ".join(PROMPT_WORDS), tokens=args.tokens,
                                             threads=args.threads, cuda=args.cuda, n_ctx=settings.n_ctx))
            plain = statistics.median(rates["plain", 0])
            for mode, k in modes:
                tps = statistics.median(rates[mode, k])
                drafted, accepted = counts[mode, k]
                acc = f"{accepted / drafted:.2f}" if drafted else "-"
                print(f"| {arch} | {mode} | {'auto' if k is None else k} | {tps:.1f} | {tps / plain:.2f}x | {acc} |")
            if native:
                # Its acceptance is not comparable: after a partial acceptance it restores the checkpoint and
                # re-evaluates the accepted tokens as the next round's "draft", and counts only fully accepted
                # rounds (its own comment: "we ignore the discarded small drafts"), so it reads 1.00.
                tps = statistics.median(r.tps for r in native)
                print(f"| {arch} | native (llama.cpp checkpoints) | {K} | {tps:.1f} | {tps / plain:.2f}x | n/a |")
        finally:
            pair.close()
    print("\n| target | pass of 5 tokens: snapshots / none | seq_rm of 4 tokens | next pass: after a rollback / "
          "without | rollback per rejected token | checkpoint: save + restore + replay of 1 token |")
    print("|---|---|---|---|---|---|")
    for arch, family in fams.items():
        c = rollback_costs(backend, family, settings, gpu, max(5, args.runs * 4))
        snap_pass, bare_pass = c["pass, snapshots"], c["pass, no snapshots"]
        # The rollback itself is seq_rm (an index update); the next pass reads the state from a snapshot plane
        # instead of the current one, which is the same work (the ratio column shows it).
        per_token = c["seq_rm"] / K + max(0.0, c["pass 1 after rollback"] - c["pass 1 without rollback"]) / K
        ckpt = c["checkpoint save"] + c["checkpoint restore"] + c["replay 1 token"]
        print(f"| {arch} | {snap_pass:.2f} / {bare_pass:.2f} ms ({(snap_pass / bare_pass - 1) * 100:+.0f} %) | "
              f"{c['seq_rm'] * 1000:.0f} µs | {c['pass 1 after rollback'] / c['pass 1 without rollback']:.2f} | "
              f"{per_token * 1000:.0f} µs = {per_token / snap_pass * 100:.2f} % of a pass | "
              f"{c['checkpoint save']:.3f} + {c['checkpoint restore']:.3f} + {c['replay 1 token']:.2f} ms "
              f"= {ckpt / snap_pass * 100:.0f} % of a pass |")
    print(f"\n| target | cache positions | snapshot rollback (seq_rm of {K}) | checkpoint to host: save + restore | "
          "on device: save + restore | whole sequence state: save + restore | bytes: recurrent part / whole |")
    print("|---|---|---|---|---|---|---|")
    for arch, family in fams.items():
        for fill in sorted({len(PROMPT_WORDS) + 2, args.fill}):
            c = state_copy_costs(backend, family, settings, gpu, max(5, args.runs * 4), fill)
            print(f"| {arch} | {fill} | {c['seq_rm'] * 1000:.0f} µs | "
                  f"{c['host save']:.3f} + {c['host restore']:.3f} ms | "
                  f"{c['device save']:.3f} + {c['device restore']:.3f} ms | "
                  f"{c['full save']:.3f} + {c['full restore']:.3f} ms | "
                  f"{c['host bytes'] / 1024:.0f} KiB / {c['full bytes'] / 1024:.0f} KiB |")
    print(f"\n# load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
