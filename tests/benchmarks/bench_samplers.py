"""Acceptance of the two samplers (coupled = Gumbel-max coupling, rejection = speculative sampling) on the same
replies: the generated tiny family pairs (``tests/support/tiny_gguf.py``, a draft model) and SmolLM2-135M-Instruct
with prompt lookup, at temperatures 0.7 and 1.0.

    PYTHONPATH=app:tests python tests/benchmarks/bench_samplers.py [--replies 8] [--tokens 48] [--k 4]

Per row: draft tokens accepted / drafted and the tokens per target pass, both samplers interleaved per seed (the
same prompts, seeds and k), summed over the replies. Acceptance decides the speed-up at a given k; the coupled
sampler's theory: per position at least (1 - TV) / (1 + TV) against rejection's 1 - TV, equal for a point-mass
proposal (lookup: both accept the proposal with probability p(d)).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from outrider.engine.engine import Engine
from outrider.engine.params import ContextSettings, DraftParams, PairSpec, SamplingParams
from outrider.engine.speculative import DoneEvent
from support.tiny_gguf import TinyShape, make_family

PROMPTS = {
    "tiny": ["the model", "a b c a b c", "def return the self"],
    "smol": ["<|im_start|>user\nRepeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox "
             "jumps over the lazy dog.<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nWrite a Python function that returns the sum of a list.<|im_end|>\n"
             "<|im_start|>assistant\n"],
}


def measure(engine: Engine, prompts: list[str], temperature: float, replies: int, tokens: int,
            k: int) -> dict[str, tuple[int, int, int, int]]:
    """sampler -> (accepted, drafted, generated, passes) over ``replies`` seeds × ``prompts``, interleaved."""
    out = {s: [0, 0, 0, 0] for s in ("coupled", "rejection")}
    for seed in range(replies):
        for text in prompts:
            prompt = engine.tokenize_prompt(text)
            for sampler in ("coupled", "rejection"):
                sampling = SamplingParams(temperature=temperature, seed=seed, sampler=sampler)  # type: ignore[arg-type]
                for event in engine.generate(prompt, max_tokens=tokens, sampling=sampling, draft=DraftParams(k=k),
                                             ignore_eos=True):
                    if isinstance(event, DoneEvent):
                        s = event.stats
                        row = out[sampler]
                        row[0] += s.accepted
                        row[1] += s.drafted
                        row[2] += s.generated
                        row[3] += s.passes
    return {s: (v[0], v[1], v[2], v[3]) for s, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=8, help="seeds per prompt")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args()
    from outrider.demo import demo_model_path

    print(f"load: {os.getloadavg()[0]:.1f} (1-min average); k {args.k}, {args.tokens} tokens per reply, "
          f"{args.replies} seeds per prompt, default filters (top-k 40, top-p 0.95, min-p 0.05)")
    print(f"{'pair':<34} {'T':>4} {'coupled acc.':>13} {'rejection acc.':>15} {'tok/pass c':>11} {'tok/pass r':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        small = make_family(Path(tmp) / "small", shape=TinyShape(n_layer=4, n_embd=128, n_head=4, n_ff=256),
                            extra_layer_scale=0.2)
        peaked = make_family(Path(tmp) / "peaked", shape=TinyShape(n_layer=3, n_embd=64, n_head=2, n_ff=128),
                             extra_layer_scale=0.3, output_scale=4.0, seed=1234)
        pairs = [
            ("tiny family (draft model)", PairSpec(target=str(small.target), draft=str(small.draft)), "tiny"),
            ("peaked tiny family (draft model)", PairSpec(target=str(peaked.target), draft=str(peaked.draft)),
             "tiny"),
            ("tiny target + unrelated draft", PairSpec(target=str(small.target), draft=str(small.unrelated)),
             "tiny"),
            ("SmolLM2-135M + prompt lookup", PairSpec(target=str(demo_model_path()), lookup=True), "smol"),
        ]
        for name, spec, prompts in pairs:
            engine = Engine()
            engine.load(PairSpec(**{**spec.__dict__, "context": ContextSettings(n_ctx=1024, threads=1)}))
            try:
                for temperature in (0.7, 1.0):
                    r = measure(engine, PROMPTS[prompts], temperature, args.replies, args.tokens, args.k)
                    c, j = r["coupled"], r["rejection"]
                    print(f"{name:<34} {temperature:>4.1f} {c[0]:>5}/{c[1]:<5} {c[0] / max(1, c[1]):>4.0%}"
                          f"  {j[0]:>5}/{j[1]:<5} {j[0] / max(1, j[1]):>4.0%} {c[2] / max(1, c[3]):>11.2f} "
                          f"{j[2] / max(1, j[3]):>11.2f}", flush=True)
            finally:
                engine.close()


if __name__ == "__main__":
    main()
