"""What the pair picker hands to the main window: ``PairChoice`` (a catalogue pair, or the user's own files)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from outrider.catalogue import DraftSettings
from outrider.catalogue.service import PairRow
from outrider.worker import protocol

AUTO_DRAFT = DraftSettings("auto", 0, 0.0)


@dataclasses.dataclass(frozen=True)
class PairChoice:
    """What the user picked: a catalogue pair, or their own files. ``draft`` is None with prompt lookup.

    Attributes:
        target: the target GGUF.
        draft: the draft GGUF, or None (prompt lookup).
        lookup: draft by prompt lookup (n-grams) instead of a model.
        pair_id: the catalogue pair's id, None for an own pair.
        name: what to show.
        settings: the recommended draft settings (catalogue), or automatic k for an own pair.
        n_ctx: the context size to load with (the pair's default, or the one chosen in the picker).
    """

    target: Path
    draft: Path | None
    lookup: bool
    pair_id: str | None
    name: str
    settings: DraftSettings = AUTO_DRAFT
    n_ctx: int = 4096

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

    def to_spec(self) -> protocol.PairSpec:
        """The engine's load request (default GPU layers and threads; the settings panel may replace them)."""
        return protocol.PairSpec(target=str(self.target), draft=None if self.draft is None else str(self.draft),
                                 lookup=self.lookup, context=protocol.ContextSettings(n_ctx=self.n_ctx))

    def draft_params(self) -> protocol.DraftParams:
        """The recommended draft settings as the engine's DraftParams (``"auto"`` → automatic k)."""
        dm = self.settings.draft_max
        if isinstance(dm, int):
            return protocol.DraftParams(k=dm, k_max=max(dm, 1), draft_min=self.settings.draft_min,
                                        p_min=self.settings.p_min)
        return protocol.DraftParams(k=None, draft_min=self.settings.draft_min, p_min=self.settings.p_min)
