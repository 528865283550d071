"""The app's settings carry an MTP pair through a restart and into the load request.

Breaking it on purpose: without ``pair_mtp`` in ``AppSettings`` the restored choice of an MTP pair loaded with no
drafter at all (``draft_mode`` "none"), which ``test_a_saved_mtp_pair_is_restored_with_its_heads`` caught.
"""

from __future__ import annotations

from pathlib import Path

from outrider.settings import AppSettings
from outrider.ui.picker.choice import PairChoice


def test_pair_spec_with_mtp_heads_or_a_head_file() -> None:
    s = AppSettings()
    heads = s.pair_spec("t.gguf", None, False, True)
    assert heads.mtp and heads.mtp_head is None and heads.draft is None and not heads.lookup
    assert heads.draft_mode == "mtp"
    head_file = s.pair_spec("t.gguf", "mtp-head.gguf", False, True)
    assert head_file.mtp_head == "mtp-head.gguf" and not head_file.mtp and head_file.draft is None
    forced = AppSettings(draft_source="lookup").pair_spec("t.gguf", "mtp-head.gguf", False, True)
    assert forced.lookup and not forced.mtp and forced.mtp_head is None and forced.draft_mode == "lookup"
    assert s.pair_spec("t.gguf", "d.gguf", False).draft == "d.gguf"  # a draft model as before


def test_a_saved_mtp_pair_is_restored_with_its_heads() -> None:
    saved = AppSettings.from_json({**AppSettings().to_json(), "pair_target": "t.gguf", "pair_mtp": True})
    assert saved.pair_mtp
    choice = PairChoice.own(Path(saved.pair_target), None, mtp=saved.pair_mtp)
    spec = saved.pair_spec(str(choice.target), None, choice.lookup, choice.mtp)
    assert spec.draft_mode == "mtp" and choice.name == "t + its MTP heads"
    assert AppSettings.from_json({"pair_mtp": "yes"}).pair_mtp is False  # a bad value is the default
