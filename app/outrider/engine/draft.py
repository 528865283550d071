"""A draft: the tokens a drafter proposes and what the verifier needs to judge them.

The one data type between the drafters (``drafters.py``, ``chain_draft.py``, ``history_draft.py``, ``mtp.py``)
and whoever reads a proposal (the speculative loop, ``grammar.py``'s cut and verification). It lives apart from
the drafters so that a reader of drafts need not import the drafters, nor they the readers (``grammar.py`` and
``drafters.py`` imported each other for the type checker before).
"""

from __future__ import annotations

import dataclasses

from outrider.engine.sampling import SparseDist


@dataclasses.dataclass(frozen=True)
class Draft:
    """Proposed tokens; ``dists[i]`` is the q that ``tokens[i]`` was drawn from (None when greedy).

    ``sync_s`` is the part of the drafting time spent bringing the drafter up to date with the committed tokens
    (a draft model evaluating what the target emitted since its last draft) and ``synced`` how many tokens that
    was: after a run of plain steps this catch-up is large and says nothing about the cost of drafting a token.
    ``sources[i]`` is the kind of the drafter that proposed ``tokens[i]`` (a chain of drafters, chain_draft.py);
    empty means the decoder's drafter proposed them all.

    ``first_guess`` and ``first_confidence``: the drafter's most likely first token and its confidence in its
    first choice (as p-min reads it), for a drafter whose drafts are gated on that confidence (an MTP head,
    ``confidence_gate.py``); set also when the gate dropped the draft (``tokens`` empty), None otherwise.
    """

    tokens: list[int]
    dists: list[SparseDist] | None = None
    sync_s: float = 0.0
    synced: int = 0
    sources: tuple[str, ...] = ()
    first_guess: int | None = None
    first_confidence: float | None = None


EMPTY_DRAFT = Draft([])
