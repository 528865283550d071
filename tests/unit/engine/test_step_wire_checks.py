"""A step from the engine process is checked whole before the app uses it (the engine parses model files: it is
not trusted). Before: misaligned or non-integer tokens were accepted and a bad ``k`` raised ``ValueError`` (not the
``ProtocolError`` events.py promises), so a broken engine could draw garbage or crash the reader thread."""

from __future__ import annotations

import pytest

from outrider.engine.events import ProtocolError, batch_from_wire


def _batch(step: list[object]) -> object:
    return batch_from_wire({"type": "steps", "steps": [step], "stats": {}})


@pytest.mark.parametrize(("step", "words"), [
    ([[5, 6], [True], "ab", 1, ["a", "b"]], "one true/false per token"),
    ([[5, "6"], [True, False], "ab", 1, ["a", "b"]], "token ids"),
    ([[5.0], [False], "a", 0, ["a"]], "token ids"),
    ([[True], [False], "a", 0, ["a"]], "token ids"),
    ([[-1], [False], "a", 0, ["a"]], "token ids"),
    ([[5], [1], "a", 0, ["a"]], "one true/false per token"),
    ([[5, 6], [True, False], "ab", 1, ["ab"]], "one per token"),
    ([[5], [False], "a", "four", ["a"]], "step k"),
    ([[5], [False], "a", 2.5, ["a"]], "step k"),
    ([[5], [False], "a", -1, ["a"]], "step k"),
    ([[5], [False], "a", 10**9, ["a"]], "step k"),
])
def test_a_malformed_step_is_a_protocol_error(step: list[object], words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        _batch(step)


def test_well_formed_steps_pass_including_held_back_text() -> None:
    batch = batch_from_wire({"type": "steps", "stats": {}, "steps": [
        [[5, 6], [True, False], "ab", 1, ["a", "b"]],
        [[], [], "c", 0, ["c"]],  # the end of a reply: text held back for a stop string, no token
    ]})
    steps = batch.steps  # type: ignore[attr-defined]
    assert [s.tokens for s in steps] == [[5, 6], []] and steps[0].k == 1 and steps[1].pieces == ["c"]
