"""``PairChoice``: what to load — a catalogue pair or the user's own files — as the pair picker emits it, the
start-up code picks it and the chat session loads it (one type for all of them; no Qt)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from outrider.catalogue import DraftSettings
from outrider.catalogue.service import PairRow
from outrider.engine.params import ContextSettings, DraftParams, PairSpec

AUTO_DRAFT = DraftSettings("auto", 0, 0.0)


@dataclasses.dataclass(frozen=True)
class PairChoice:
    """What to load. ``draft`` is None with prompt lookup.

    Attributes:
        target: the target GGUF.
        draft: the draft GGUF, or None (prompt lookup).
        lookup: draft by prompt lookup (n-grams) instead of a model.
        pair_id: the catalogue pair's id; None (or "") for the user's own files.
        name: what to show.
        settings: the recommended draft settings (catalogue), or automatic k for an own pair.
        n_ctx: the context size to load with (the pair's default, or the one chosen in the picker).
        demo: the offline demo pair (the app invites the user to choose a real one).
    """

    target: Path
    draft: Path | None
    lookup: bool
    pair_id: str | None = None
    name: str = ""
    settings: DraftSettings = AUTO_DRAFT
    n_ctx: int = 4096
    demo: bool = False

    @classmethod
    def from_row(cls, row: PairRow) -> PairChoice:
        target = row.state.target_path
        if target is None:
            raise ValueError(f"{row.pair.id} is not on disk")
        draft = row.state.draft_path
        return cls(target, draft, draft is None, row.pair.id, row.pair.name, row.pair.settings,
                   row.pair.default_context)

    @classmethod
    def own(cls, target: Path, draft: Path | None, n_ctx: int = 4096) -> PairChoice:
        name = f"{target.stem} + {draft.stem}" if draft is not None else f"{target.stem} + prompt lookup"
        return cls(Path(target), None if draft is None else Path(draft), draft is None, None, name, AUTO_DRAFT,
                   n_ctx)

    def to_spec(self) -> PairSpec:
        """The engine's load request (default GPU layers and threads; the settings panel may replace them)."""
        return PairSpec(target=str(self.target), draft=None if self.draft is None else str(self.draft),
                        lookup=self.lookup, context=ContextSettings(n_ctx=self.n_ctx))

    def draft_params(self) -> DraftParams:
        """The recommended draft settings as the engine's DraftParams (``"auto"`` → automatic k)."""
        k = self.settings.k
        if isinstance(k, int):
            return DraftParams(k=k, k_max=max(k, 1), draft_min=self.settings.draft_min, p_min=self.settings.p_min)
        return DraftParams(k=None, draft_min=self.settings.draft_min, p_min=self.settings.p_min)


def pair_choice_of(obj: Any, *, demo_id: str | None = None) -> PairChoice:
    """A ``PairChoice`` from what may be picked: a ``PairChoice``, a catalogue ``PairState`` or a
    ``LocalPairReport``; ``demo`` is set when its catalogue id is ``demo_id``."""
    if isinstance(obj, PairChoice):
        if demo_id and obj.pair_id == demo_id and not obj.demo:
            return dataclasses.replace(obj, demo=True)
        return obj
    pair = getattr(obj, "pair", None)
    target = getattr(obj, "target_path", None)
    if pair is not None and target is not None:  # catalogue.PairState
        draft = getattr(obj, "draft_path", None)
        return PairChoice(Path(target), Path(draft) if draft else None, pair.draft is None, pair.id, pair.name,
                          demo=pair.id == demo_id)
    if isinstance(getattr(obj, "target", None), Path | str):  # a LocalPairReport
        draft = getattr(obj, "draft", None)
        lookup = bool(getattr(obj, "lookup", False)) or draft is None
        pair_id = getattr(obj, "pair_id", None) or ""
        name = getattr(obj, "name", "") or Path(obj.target).name
        return PairChoice(Path(obj.target), Path(draft) if draft else None, lookup, pair_id, name,
                          demo=bool(pair_id) and pair_id == demo_id)
    raise TypeError(f"not a pair choice: {type(obj).__name__}")
