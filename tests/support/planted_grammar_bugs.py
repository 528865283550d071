"""Plausible bugs of grammar-constrained speculation (structured output), planted by monkeypatching, for
``outrider verify --json-schema / --grammar`` to catch (as ``planted_bugs.py`` does for the plain sampler):

* ``draft_q_unmasked`` — a draft model draws its token from the grammar-masked distribution but hands the
  *unmasked* one to verification as q (the mask applied to the draw, the distribution kept from before it): the
  rejection sampler's ratio p/q and residual max(p - q, 0) then use the wrong q, biasing the output towards the draft;
* ``no_rollback`` — the verification walks the draft through the *real* grammar state instead of a clone, so the
  tokens of a rejected draft stay accepted in it (and the accepted ones are accepted twice).

Not a bug, and not caught on purpose: a draft model that ignores the grammar (draws and reports its unmasked
distribution). A forbidden draft token has p = 0 under the masked target and is always rejected; the acceptance
rule is exact for any q, so only the acceptance suffers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from outrider.engine import grammar as grammar_module
from outrider.engine import speculative
from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import ModelDraft
from outrider.engine.grammar import GrammarMask
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist, distribution, draft_token, greedy_token

GRAMMAR_BUGS = ("draft_q_unmasked", "no_rollback")


def _propose_q_unmasked(self: ModelDraft, committed: Sequence[int], k: int, sampling: SamplingParams,
                        rng: np.random.Generator, p_min: float, draft_min: int = 0,
                        grammar: GrammarMask | None = None) -> Draft:
    """``ModelDraft.propose`` (without p-min, which the test does not use) drawing from the masked distribution but
    returning the unmasked one as the token's q."""
    k = min(k, self.context.n_ctx - len(committed) - 1)
    if k <= 0:
        return EMPTY_DRAFT
    self._sync(committed)
    tokens: list[int] = []
    dists: list[SparseDist] | None = None if sampling.greedy else []
    walker = grammar.clone() if grammar is not None else None
    try:
        while True:
            raw = self._logits(-1)
            logits = raw if walker is None else walker.mask(raw)
            if not np.isfinite(logits).any():
                break
            if sampling.greedy:
                token = greedy_token(logits)
            else:
                token = draft_token(distribution(logits, sampling), sampling, len(committed) + len(tokens))
                assert dists is not None
                dists.append(distribution(raw, sampling))  # THE BUG: q from before the mask
            tokens.append(token)
            if walker is not None:
                walker.accept(token)
            if len(tokens) >= k:
                break
            self.context.decode([token], logits="last")
            self.cached.append(token)
    finally:
        if walker is not None:
            walker.close()
    return Draft(tokens, dists, 0.0, 0)


def _verify_without_rollback(right: Callable[..., tuple[int, int]]) -> Callable[..., tuple[int, int]]:
    def verify(row: Any, draft: Draft, sampling: SamplingParams, position: int,
               grammar: GrammarMask) -> tuple[int, int]:
        real_clone = GrammarMask.clone
        GrammarMask.clone = lambda self: _Unclosed(self)  # type: ignore[method-assign,assignment,return-value]
        try:
            return right(row, draft, sampling, position, grammar)
        finally:
            GrammarMask.clone = real_clone  # type: ignore[method-assign]
    return verify


class _Unclosed:
    """The real state itself where a clone was asked for (``close`` does not free it): THE BUG."""

    def __init__(self, real: GrammarMask) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def close(self) -> None:
        pass


@contextlib.contextmanager
def planted_grammar_bug(bug: str) -> Iterator[None]:
    """The engine (in this process) with ``bug`` (a name of this module's docstring) for the block."""
    with pytest.MonkeyPatch.context() as mp:
        if bug == "draft_q_unmasked":
            mp.setattr(ModelDraft, "propose", _propose_q_unmasked)
        elif bug == "no_rollback":
            mp.setattr(speculative, "verify_draft", _verify_without_rollback(grammar_module.verify_draft))
        else:
            raise ValueError(f"unknown planted grammar bug {bug!r}")
        yield
