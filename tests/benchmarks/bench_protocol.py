"""Tokens per second through the engine-process protocol (a script, not a timed test).

    .venv/bin/python tests/benchmarks/bench_protocol.py [--tokens 200000]

1. ``bench`` requests: the engine process emits synthetic steps as fast as it can (1, 4 and 8 tokens per step)
   and the app consumes them as StepBatches (one per message): the protocol's ceiling. Goal: >= 5,000 tokens/s.
2. The same greedy generation with a generated tiny model, in-process (``outrider.engine``) and through the
   engine process: the protocol's cost on a real (very fast) generation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from outrider.engine.events import DoneEvent, StepBatch
from outrider.engine.params import ContextSettings, DraftParams, PairSpec, TextRequest
from outrider.worker.client import EngineClient
from support.tiny_gguf import TinyShape, make_family

GOAL = 5_000.0


def bench_synthetic(client: EngineClient, n_tokens: int, per_step: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    steps = batches = 0
    last = None
    for event in client.bench(n_tokens, per_step):
        if isinstance(event, StepBatch):  # one wire message
            steps += len(event.steps)
            if event.stats is not last:
                batches, last = batches + 1, event.stats
    return n_tokens / (time.perf_counter() - t0), steps, batches


def bench_real(client: EngineClient, spec: PairSpec, request: TextRequest) -> tuple[float, float]:
    """(in-process decode tokens/s, through-the-worker wall tokens/s) of the same generation."""
    from outrider.engine import engine as engine_module
    from outrider.engine.llama import backend

    engine = engine_module.Engine()
    engine.load(engine_module.PairSpec(spec.target, draft=spec.draft,
                                 context=backend.ContextSettings(**vars(spec.context))))
    t0 = time.perf_counter()
    local_request = engine_module.TextRequest(prompt=request.prompt, max_tokens=request.max_tokens,
                                        draft=engine_module.DraftParams(k=request.draft.k))
    done = next(e for e in engine.run(local_request) if isinstance(e, engine_module.DoneEvent))
    local = done.stats.generated / (time.perf_counter() - t0)
    engine.unload()
    client.load(spec)
    t0 = time.perf_counter()
    remote_done = next(e for e in client.generate(request) if isinstance(e, DoneEvent))
    remote = remote_done.stats.generated / (time.perf_counter() - t0)
    if remote_done.text != done.text:
        print("note: the replies differ (floating-point ties in a random tiny model)", file=sys.stderr)
    return local, remote


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200_000)
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp, EngineClient(log_dir=Path(tmp)) as client:
        for per_step in (1, 4, 8):
            tps, steps, batches = bench_synthetic(client, args.tokens, per_step)
            rows.append((f"synthetic, {per_step} token(s)/step", f"{tps:,.0f}",
                         f"{steps:,} steps in {batches:,} messages"))
        family = make_family(Path(tmp) / "tiny", shape=TinyShape(n_layer=4, n_embd=128, n_head=4, n_ff=256))
        spec = PairSpec(str(family.target), draft=str(family.draft), context=ContextSettings(n_ctx=2048))
        local, remote = bench_real(client, spec, TextRequest(prompt="the of and", max_tokens=1500,
                                                                     draft=DraftParams(k=4)))
        rows.append(("tiny model, in-process", f"{local:,.0f}", "engine alone"))
        rows.append(("tiny model, engine process", f"{remote:,.0f}", f"{100 * (1 - remote / local):+.1f}% cost"))
    width = max(len(r[0]) for r in rows)
    print(f"{'path':<{width}}  {'tokens/s':>10}  notes")
    for name, tps, note in rows:
        print(f"{name:<{width}}  {tps:>10}  {note}")
    worst = min(float(r[1].replace(",", "")) for r in rows[:3])
    print(f"\nprotocol ceiling {worst:,.0f} tokens/s: {'meets' if worst >= GOAL else 'BELOW'} the {GOAL:,.0f} goal")
    return 0 if worst >= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
