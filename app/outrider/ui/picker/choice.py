"""``PairChoice``: what to load — a catalogue pair or the user's own files — as the pair picker emits it, the
start-up code picks it and the chat controller loads it (one type for all of them; no Qt)."""

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
    """What to load. ``draft`` is None with prompt lookup and with the target's own MTP heads.

    Attributes:
        target: the target GGUF.
        draft: the draft GGUF (an MTP head file when ``mtp``), or None (prompt lookup, MTP heads in the target).
        lookup: draft by prompt lookup (n-grams) instead of a model.
        pair_id: the catalogue pair's id; None (or "") for the user's own files.
        name: what to show.
        settings: the recommended draft settings (catalogue), or automatic k for an own pair.
        n_ctx: the context size to load with (the pair's default, or the one chosen in the picker).
        demo: the offline demo pair (the app invites the user to choose a real one).
        mtp: draft with MTP heads: the target's own (``draft`` None) or the head file ``draft``.
    """

    target: Path
    draft: Path | None
    lookup: bool
    pair_id: str | None = None
    name: str = ""
    settings: DraftSettings = AUTO_DRAFT
    n_ctx: int = 4096
    demo: bool = False
    mtp: bool = False

    @classmethod
    def from_row(cls, row: PairRow) -> PairChoice:
        target = row.state.target_path
        if target is None:
            raise ValueError(f"{row.pair.id} is not on disk")
        draft = row.state.draft_path
        mtp = row.pair.draft_kind in ("mtp", "mtp-head")
        return cls(target, draft, draft is None and not mtp, row.pair.id, row.pair.name, row.pair.settings,
                   row.pair.default_context, mtp=mtp)

    @classmethod
    def own(cls, target: Path, draft: Path | None, n_ctx: int = 4096, *, mtp: bool = False) -> PairChoice:
        """The user's own files: a draft model, prompt lookup (no draft), or with ``mtp`` the target's MTP heads
        (no draft) or an MTP head file (``draft``)."""
        if mtp:
            name = f"{target.stem} + " + (f"MTP head {draft.stem}" if draft is not None else "its MTP heads")
        else:
            name = f"{target.stem} + {draft.stem}" if draft is not None else f"{target.stem} + prompt lookup"
        return cls(Path(target), None if draft is None else Path(draft), draft is None and not mtp, None, name,
                   AUTO_DRAFT, n_ctx, mtp=mtp)

    @property
    def drafter(self) -> str:
        """``model``, ``lookup``, ``mtp`` (heads in the target) or ``mtp-head`` (a head file)."""
        if self.mtp:
            return "mtp" if self.draft is None else "mtp-head"
        return "lookup" if self.lookup else "model"

    def to_spec(self) -> PairSpec:
        """The engine's load request (default GPU layers and threads; the settings panel may replace them)."""
        context = ContextSettings(n_ctx=self.n_ctx)
        if self.mtp:
            return PairSpec(target=str(self.target), mtp=self.draft is None,
                            mtp_head=None if self.draft is None else str(self.draft), context=context)
        return PairSpec(target=str(self.target), draft=None if self.draft is None else str(self.draft),
                        lookup=self.lookup, context=context)

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
        mtp = pair.draft_kind in ("mtp", "mtp-head")
        return PairChoice(Path(target), Path(draft) if draft else None, pair.draft is None and not mtp, pair.id,
                          pair.name, demo=pair.id == demo_id, mtp=mtp)
    if isinstance(getattr(obj, "target", None), Path | str):  # a LocalPairReport
        draft = getattr(obj, "draft", None)
        mtp = bool(getattr(obj, "mtp", False))
        lookup = not mtp and (bool(getattr(obj, "lookup", False)) or draft is None)
        pair_id = getattr(obj, "pair_id", None) or ""
        name = getattr(obj, "name", "") or Path(obj.target).name
        return PairChoice(Path(obj.target), Path(draft) if draft else None, lookup, pair_id, name,
                          demo=bool(pair_id) and pair_id == demo_id, mtp=mtp)
    raise TypeError(f"not a pair choice: {type(obj).__name__}")
