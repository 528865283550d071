"""A reply's stored token ids (``TextRequest.continue_tokens``) cross to the engine process unchanged; anything
else there is refused as a bad request, and ids are only for continuing a reply."""

from __future__ import annotations

import pytest

from outrider.engine.params import ChatMessage, TextRequest
from outrider.history import ReplyStats
from outrider.history.reply_tokens import decode_tokens, with_tokens
from outrider.worker.engine_process import _BadRequest, _build_request
from outrider.worker.protocol import request_to_wire

HISTORY = (ChatMessage("user", "Count"), ChatMessage("assistant", "One\n\n"))


def test_the_ids_cross_the_wire() -> None:
    request = TextRequest(messages=HISTORY, continue_reply=True, continue_tokens=(101, 198, 198))
    assert _build_request(request_to_wire(request)).continue_tokens == (101, 198, 198)
    assert _build_request(request_to_wire(TextRequest(messages=HISTORY[:1]))).continue_tokens is None


@pytest.mark.parametrize("ids", [[1, "2"], [1, -3], [True], "101"])
def test_ids_that_are_not_token_ids_are_refused(ids: object) -> None:
    data = request_to_wire(TextRequest(messages=HISTORY, continue_reply=True))
    data["continue_tokens"] = ids
    with pytest.raises(_BadRequest, match="continue_tokens"):
        _build_request(data)


def test_ids_are_only_for_continuing() -> None:
    with pytest.raises(ValueError, match="only for continuing"):
        TextRequest(messages=HISTORY[:1], continue_tokens=(1,))


def test_the_history_keeps_ids_of_a_continuable_reply_and_of_its_text_only() -> None:
    kept = with_tokens(ReplyStats(generated=3), "One\n\n", [101, 198, 198], continuable=True)
    assert decode_tokens("One\n\n", kept) == (101, 198, 198)
    assert decode_tokens("One\n", kept) is None  # another text (edited, damaged): ignored
    assert with_tokens(ReplyStats(generated=3), "One", [101], continuable=False) == ReplyStats(generated=3)
    assert decode_tokens("One", ReplyStats(extra={"tokens": {"ids": [1, "x"], "chars": 3}})) is None
    assert decode_tokens("One", ReplyStats.from_dict(kept.to_dict() | {"tokens": {"ids": [5], "chars": 3}})) == (5,)
