"""A step from the engine process is checked whole before the app uses it (the engine parses model files: it is
not trusted). Before: misaligned or non-integer tokens were accepted and a bad ``k`` raised ``ValueError`` (not the
``ProtocolError`` events.py promises), so a broken engine could draw garbage or crash the reader thread."""

from __future__ import annotations

import json

import pytest

from outrider.engine.events import ProtocolError, StepEvent, batch_from_wire, step_to_wire, steps_to_wire
from outrider.engine.stats import GenerationStats


def _batch(step: list[object]) -> object:
    return batch_from_wire({"type": "steps", "steps": [step], "stats": {}})


@pytest.mark.parametrize(("step", "words"), [
    ([[5, 6], [True], 1, ["a", "b"], []], "one true/false per token"),
    ([[5, "6"], [True, False], 1, ["a", "b"], []], "token ids"),
    ([[5.0], [False], 0, ["a"], []], "token ids"),
    ([[True], [False], 0, ["a"], []], "token ids"),
    ([[-1], [False], 0, ["a"], []], "token ids"),
    ([[5], [1], 0, ["a"], []], "one true/false per token"),
    ([[5, 6], [True, False], 1, ["ab"], []], "one per token"),
    ([[5], [False], "four", ["a"], []], "step k"),
    ([[5], [False], 2.5, ["a"], []], "step k"),
    ([[5], [False], -1, ["a"], []], "step k"),
    ([[5], [False], 10**9, ["a"], []], "step k"),
    ([[5], [False], 0, "a", []], "pieces must be a list"),
    ([[5], [False], 0, ["a"], "target"], "origins"),
    ([[5], [False], 0, ["a"]], "a step is"),
    ([[5], [False], "a", 0, ["a"]], "step k"),  # protocol version 1's shape (the text third): refused
    ([[5], [False], 0, ["a"], [], [1, 2]], "logprobs"),
])
def test_a_malformed_step_is_a_protocol_error(step: list[object], words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        _batch(step)


def test_well_formed_steps_pass_including_held_back_text() -> None:
    batch = batch_from_wire({"type": "steps", "stats": {}, "steps": [
        [[5, 6], [True, False], 1, ["a", "b"], []],
        [[], [], 0, ["c"], []],  # the end of a reply: text held back for a stop string, no token
    ]})
    steps = batch.steps  # type: ignore[attr-defined]
    assert [s.tokens for s in steps] == [[5, 6], []] and steps[0].k == 1 and steps[1].pieces == ["c"]


def test_a_steps_text_travels_once() -> None:
    """The joined text is its pieces': protocol version 2 sends only the pieces. Breaking it (``step_to_wire``
    sending ``step.text`` as well, as version 1 did) doubled the text on the wire and this saw it twice."""
    step = StepEvent([5, 6], [True, False], ["Zebra", "fish"], 1, None, ["lookup", "target"])
    message = json.dumps(steps_to_wire([step_to_wire(step)], GenerationStats()))
    assert message.count("Zebra") == 1 and "Zebrafish" not in message
    decoded = batch_from_wire(json.loads(message))
    assert decoded.steps == (StepEvent([5, 6], [True, False], ["Zebra", "fish"], 1, None, ["lookup", "target"]),)
    assert decoded.text == "Zebrafish"
