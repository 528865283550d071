"""The server's response bodies: whole answers, stream chunks and the pre-encoded text chunk of a stream (equal to
encoding the whole chunk, for every text), and what a stream opens and closes with; the server's configuration never
shows its API key."""

from __future__ import annotations

import json

import pytest

from outrider.engine.stats import GenerationStats
from outrider.server.responses import DONE_EVENT, ReplyShape, sse

TEXTS = ["", "Hello", " world\n", 'quote " and \\ backslash', "tab\tand\u2028line separator", "é ü 漢字 🙂",
         "\x00text\x00", "</script>", "data: [DONE]\n\n"]


def events(stream: bytes) -> list[object]:
    """The JSON of each ``data:`` event of an SSE body (``[DONE]`` as the string)."""
    assert stream.endswith(b"\n\n")
    out: list[object] = []
    for event in stream.decode().split("\n\n")[:-1]:
        assert event.startswith("data: ") and "\n" not in event, event
        payload = event.removeprefix("data: ")
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("text", TEXTS)
def test_the_pre_encoded_text_chunk_equals_the_encoded_chunk(chat: bool, text: str) -> None:
    shape = ReplyShape("demo", chat=chat)
    assert shape.text_event(text) == sse(shape.chunk(text))
    (chunk,) = events(shape.text_event(text))
    assert isinstance(chunk, dict)
    choice = chunk["choices"][0]
    assert (choice["delta"]["content"] if chat else choice["text"]) == text
    assert choice["finish_reason"] is None and chunk["id"] == shape.id and chunk["model"] == "demo"
    assert chunk["object"] == ("chat.completion.chunk" if chat else "text_completion")


def test_a_chat_stream_opens_with_the_assistant_role_and_a_completion_stream_with_nothing() -> None:
    (opening,) = events(ReplyShape("m", chat=True).opening())
    assert isinstance(opening, dict)
    assert opening["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert ReplyShape("m", chat=False).opening() == b""


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("include_usage", [True, False])
def test_a_stream_closes_with_finish_reason_timings_usage_and_done(chat: bool, include_usage: bool) -> None:
    shape = ReplyShape("m", chat=chat)
    stats = GenerationStats(prompt_tokens=7, generated=5)
    closing = events(shape.closing("length", stats, include_usage=include_usage))
    assert closing[-1] == "[DONE]" and shape.closing("stop", stats, include_usage=False).endswith(DONE_EVENT)
    last = closing[0]
    assert isinstance(last, dict)
    assert last["choices"][0]["finish_reason"] == "length" and last["timings"]["predicted_n"] == 5
    assert (last["choices"][0]["delta"] == {}) if chat else (last["choices"][0]["text"] == "")
    assert len(closing) == (3 if include_usage else 2)
    if include_usage:
        usage = closing[1]
        assert isinstance(usage, dict)
        assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 7, "completion_tokens": 5,
                                                             "total_tokens": 12}


def test_a_cancelled_reply_finishes_as_stop() -> None:
    shape = ReplyShape("m", chat=True)
    assert shape.completion("x", "cancelled", GenerationStats())["choices"][0]["finish_reason"] == "stop"
    last = events(shape.closing("cancelled", GenerationStats(), include_usage=False))[0]
    assert isinstance(last, dict) and last["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("chat", [True, False])
def test_a_whole_answer(chat: bool) -> None:
    shape = ReplyShape("m", chat=chat)
    body = shape.completion("Hi there", "stop", GenerationStats(prompt_tokens=3, generated=2))
    assert body["id"].startswith("chatcmpl-" if chat else "cmpl-")
    assert body["object"] == ("chat.completion" if chat else "text_completion")
    choice = body["choices"][0]
    if chat:
        assert choice["message"] == {"role": "assistant", "content": "Hi there"}
    else:
        assert choice["text"] == "Hi there"
    assert choice["finish_reason"] == "stop" and choice["logprobs"] is None
    assert body["usage"]["total_tokens"] == 5 and body["timings"]["predicted_n"] == 2


def test_the_api_key_is_not_in_the_server_config_repr() -> None:
    from outrider.server.app import ServerConfig

    config = ServerConfig(model_name=lambda: "m", api_key="s3cret-key")
    assert "s3cret-key" not in repr(config) and "s3cret-key" not in str(config)
    assert config.api_key == "s3cret-key"
