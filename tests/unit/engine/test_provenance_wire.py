"""Token origins and per-drafter counts on the wire (engine/events.py): what a chain of drafters sends, what an
engine that does not name its drafters sends, and what a broken engine might send."""

from __future__ import annotations

import json

import pytest

from outrider.engine.events import (
    DRAFTED,
    ProtocolError,
    StepEvent,
    batch_from_wire,
    done_from_wire,
    done_to_wire,
    step_to_wire,
    steps_to_wire,
)
from outrider.engine.events import DoneEvent as Done
from outrider.engine.stats import DrafterCounts, GenerationStats


def _through_json(message: dict[str, object]) -> dict[str, object]:
    decoded = json.loads(json.dumps(message))
    assert isinstance(decoded, dict)
    return decoded


def test_origins_and_by_drafter_survive_the_wire() -> None:
    """(Without origins in ``step_to_wire`` the decoded step read every drafted token as 'draft'.)"""
    stats = GenerationStats(drafted=3, accepted=2, by_drafter={"history": DrafterCounts(2, 2, 1),
                                                               "model": DrafterCounts(1, 0, 1)})
    step = StepEvent([5, 6, 7], [True, True, False], ["a", "b", "c"], 3, stats, ["history", "history", "target"])
    batch = batch_from_wire(_through_json(steps_to_wire([step_to_wire(step)], stats)))
    assert batch.steps[0].provenance == ["history", "history", "target"]
    assert batch.stats.by_drafter == stats.by_drafter
    done = done_from_wire(_through_json(done_to_wire(Done("stop", stats, "abc"))))
    assert done.stats.by_drafter["history"].acceptance_rate == 1.0


def test_a_step_without_origins_reads_as_the_unnamed_drafter() -> None:
    """Empty origins (an engine that did not say): drafted tokens are of the unnamed drafter."""
    batch = batch_from_wire({"type": "steps", "steps": [[[1, 2], [True, False], 2, ["a", "b"], []]],
                             "stats": {"drafted": 1}})
    assert batch.steps[0].provenance == [DRAFTED, "target"]
    assert batch.stats.by_drafter == {}


def test_elements_of_a_newer_engine_are_ignored() -> None:
    """After origins come the step's logprobs (the server's), then whatever a newer engine adds."""
    batch = batch_from_wire({"type": "steps", "steps": [[[1], [False], 0, ["a"], ["target"], [], {"x": 1}]],
                             "stats": {"by_drafter": {"history": {"drafted": 1, "accepted": 1, "future": 3}}}})
    assert batch.steps[0].provenance == ["target"] and batch.stats.by_drafter["history"].drafted == 1


@pytest.mark.parametrize("origins", [["history"], [1, 2], "history", [None, "target"]])
def test_bad_origins_are_a_protocol_error(origins: object) -> None:
    with pytest.raises(ProtocolError, match="origins"):
        batch_from_wire({"type": "steps", "steps": [[[1, 2], [True, False], 2, ["a", "b"], origins]],
                         "stats": {}})


@pytest.mark.parametrize("by_drafter", [[], {"history": 3}, {"history": {"drafted": "many"}},
                                        {"history": {"accepted": True}}])
def test_bad_per_drafter_counts_are_a_protocol_error(by_drafter: object) -> None:
    with pytest.raises(ProtocolError, match="by_drafter"):
        batch_from_wire({"type": "steps", "steps": [], "stats": {"by_drafter": by_drafter}})
