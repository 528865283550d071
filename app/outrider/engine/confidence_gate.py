"""Whether an MTP head's draft is worth verifying, judged by the head's confidence in its first token.

A draft that the target rejects at its first token yields one token for a verify pass, where a plain step would
have yielded the same token for a one-token pass. On a busy CPU a pass of 2 to 5 tokens costs 2.5-3x a pass of
one (one thread beside a CPU-bound process), so each such draft loses about two plain steps; a draft kept whole
saves more than that, and whether a short reply gains or loses was decided by the share of first tokens rejected.
The head knows more than that share: the probability of its own first choice (the confidence p-min reads, the top-10
softmax of ``sampling.top_probability``; at temperature > 0 the draft distribution's largest probability) tells
the drafts it will lose. Measured on the generated dense head (``bench_mtp_confidence.py``, depth 4, 130 drafts):
first tokens of confidence 0.2-0.3 were kept 0.33 of the time, those of 0.3 and more every time; the generated
hybrid head's confidence says far less (0.1-0.2: kept 0.75, 0.2-0.3: 0.95).

So what a head's confidence means is learned per head, not fixed as p-min is: per confidence band, how often a
first token of that confidence was kept (decaying counts). ``threshold`` gives the confidence under which a draft
is dropped before verification (the step is then plain): every band below it that has evidence was kept less
often than the break-even share the caller computes from the measured costs (``AutoDraftLength.first_min``), and
clearly less often than the head's first tokens in general (what its confidence tells apart).
Drafts dropped still teach it: the head's first guess is compared with the token the plain step then emits
(``observe`` with that outcome), so a band gated on old evidence is corrected by new text without drafting it.
"""

from __future__ import annotations

from collections.abc import Sequence

GATE_BANDS = 10  # confidence bands of equal width over [0, 1]
GATE_DECAY = 0.99  # weight of the past per first-token outcome (about 100: what a head's confidence means belongs
# to the head, not to the text; at 0.97 with an evidence of 3 the dense head's 0.2-0.3 band lost its evidence after
# one outcome in another band, and the gate came and went within a reply)
GATE_EVIDENCE = 3.0  # decayed outcomes a band needs before it may be gated (one or two rejections decide nothing)
GATE_MARGIN = 0.15  # a band is gated only when kept this much less often than break-even: near it a gate saves
# little and errs either way on thin evidence (the generated hybrid head's 0.1-0.2 band, kept 0.5-0.75 against a
# break-even of 0.5-0.55 on a quiet CPU, was gated now and then, and its 24-token replies lost 2-4 %)
GATE_PRIOR = 1.0  # pseudo-count pulling a band's kept share towards all bands' share (a band of 3 drafts all
# rejected is not read as certain: 0 of 3 with the others' 0.8 reads 0.2)


class ConfidenceGate:
    """Decayed counts per confidence band of first draft tokens reached (verified, or compared while the draft was
    dropped) and kept. Invariant: 0 <= kept[b] <= reached[b] for every band b."""

    def __init__(self) -> None:
        self.reached = [0.0] * GATE_BANDS
        self.kept = [0.0] * GATE_BANDS

    @staticmethod
    def band(confidence: float) -> int:
        """The band of a confidence in [0, 1] (1.0 falls in the top band)."""
        return min(GATE_BANDS - 1, max(0, int(confidence * GATE_BANDS)))

    def observe(self, confidence: float, kept: bool) -> None:
        """A first draft token of ``confidence`` was kept (``kept``) or not by the target."""
        self.reached = [GATE_DECAY * x for x in self.reached]
        self.kept = [GATE_DECAY * x for x in self.kept]
        b = self.band(confidence)
        self.reached[b] += 1.0
        self.kept[b] += 1.0 if kept else 0.0

    def kept_share(self, b: int) -> float | None:
        """Band b's kept share, pulled by GATE_PRIOR towards all bands' share; None without GATE_EVIDENCE."""
        if self.reached[b] < GATE_EVIDENCE:
            return None
        total = sum(self.reached)
        overall = sum(self.kept) / total
        return (self.kept[b] + GATE_PRIOR * overall) / (self.reached[b] + GATE_PRIOR)

    def threshold(self, break_even: float) -> float:
        """The confidence under which a first token is not worth verifying, 0 for none: the top edge of the
        highest band such that it and every band below it with evidence were kept less often than ``break_even``
        less GATE_MARGIN, and less often than all first tokens together less GATE_MARGIN (bands without evidence
        are passed over: gated only below one that is).

        The second condition keeps the gate to what confidence tells apart: a band kept about as often as the
        head's first tokens in general says nothing its confidence knows, and whether such drafts pay at all is
        automatic depth's choice of k on the same costs. Without it, the hybrid head's 0.1-0.2 band — most of its
        first tokens, kept 0.65-0.75 — was gated whenever break-even rose past 0.8 on a long draft, and its quiet
        192-token replies fell from 1.03-1.06x to 0.95-0.99x the best depth."""
        total = sum(self.reached)
        if total <= 0:
            return 0.0
        overall = sum(self.kept) / total
        gate = 0.0
        for b in range(GATE_BANDS):
            share = self.kept_share(b)
            if share is None:
                continue
            if share >= min(break_even, overall) - GATE_MARGIN:
                break
            gate = (b + 1) / GATE_BANDS
        return gate

    def restore(self, reached: Sequence[float], kept: Sequence[float]) -> None:
        """Counts from a snapshot (``AutoDraftLength.restore``); ``ValueError`` if they do not fit."""
        if len(reached) != GATE_BANDS or len(kept) != GATE_BANDS:
            raise ValueError(f"gate: {GATE_BANDS} bands expected, got {len(reached)} and {len(kept)}")
        if any(k < 0 or k > r + 1e-9 for r, k in zip(reached, kept, strict=True)):
            raise ValueError("gate: more first tokens kept in a band than reached it")
        self.reached, self.kept = [float(x) for x in reached], [float(x) for x in kept]
