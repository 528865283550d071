"""Prompt lookup's shadow scoring (``PromptLookupDraft.observe``, engine/drafters.py) against a brute-force
reference: what its first guess would have been at each position, from the text before that position only."""

from __future__ import annotations

import random

from outrider.engine.drafters import PromptLookupDraft
from outrider.engine.params import LookupSettings


def _reference(committed: list[int], start: int, lo: int, hi: int) -> tuple[int, int]:
    """(hits, trials): at each i >= max(start, 1), the longest n-gram (hi down to lo) ending at i that occurred
    before, its latest occurrence's next token as the guess."""
    hits = trials = 0
    for i in range(max(start, 1), len(committed)):
        for n in range(min(hi, i), lo - 1, -1):
            gram = committed[i - n : i]
            found = [e for e in range(n, i) if committed[e - n : e] == gram]
            if found:
                trials += 1
                hits += int(committed[found[-1]] == committed[i])
                break
    return hits, trials


def test_shadow_scoring_agrees_with_a_brute_force_reference() -> None:
    """Random texts over small vocabularies, scored in pieces as the decoder does (each call from where the last
    ended), also after proposing. (Indexing each position before guessing it — the two loops swapped — let every
    guess see its own token: hits equalled trials and the assert failed.)"""
    rng = random.Random(5)
    for _ in range(150):
        settings = LookupSettings()
        lo, hi = settings.ngram_min, settings.ngram_max
        lookup = PromptLookupDraft(settings)
        committed = [rng.randrange(4) for _ in range(rng.randrange(1, 20))]
        lookup.prefill(committed)
        start = len(committed)
        for _ in range(rng.randrange(1, 6)):
            committed += [rng.randrange(4) for _ in range(rng.randrange(1, 30))]
            assert lookup.observe(committed, start) == _reference(committed, start, lo, hi)
            start = len(committed)
