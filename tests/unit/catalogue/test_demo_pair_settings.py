"""The offline demo pair drafts the same way whichever way it was opened. Before: the first start ran it with
automatic k while the catalogue (the picker) recommended a fixed k of 8."""

from __future__ import annotations

from outrider.catalogue import load_catalogue


def test_the_demo_pair_recommends_what_the_first_start_uses() -> None:
    demo = load_catalogue().demo
    assert demo is not None
    assert demo.settings.k == "auto"  # the app's own default (ui/picker/choice.py AUTO_DRAFT) at the first start
