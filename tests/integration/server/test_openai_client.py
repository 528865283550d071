"""The server as the official ``openai`` client sees it, against the demo pair (SmolLM2-135M + prompt lookup):
models list, greedy output equal to ``outrider generate --chat``, streaming equal to the whole answer, finish
reasons, usage and llama-server's ``timings`` with Outrider's acceptance and speed-up."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
from server_helpers import DEMO_CTX, Served, at_once

pytestmark = [pytest.mark.smollm, pytest.mark.slow]

QUESTION = "Name three colours of the rainbow."


def generate_cli(*args: str) -> tuple[str, str]:
    """``outrider generate … --json`` in a fresh process: (reply text, stop reason)."""
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    r = subprocess.run([sys.executable, "-m", "outrider.cli", "generate", *args, "--json"], capture_output=True,
                       text=True, timeout=300, env=env, check=False)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    return "".join(e["text"] for e in events if e["event"] == "step"), events[-1]["stop_reason"]


def test_models_list_names_the_served_pair(demo: Served) -> None:
    models = demo.api.models.list()
    assert [m.id for m in models.data] == ["smollm2-135m-lookup"]
    assert models.data[0].owned_by == "outrider"
    assert demo.api.models.retrieve("smollm2-135m-lookup").id == "smollm2-135m-lookup"
    with pytest.raises(openai.NotFoundError) as caught:
        demo.api.models.retrieve("gpt-4o")
    body: Any = caught.value.body
    assert body["code"] == "model_not_found" and body["param"] == "model"


def test_greedy_chat_equals_outrider_generate(demo: Served, smollm_path: Path) -> None:
    expected, stop_reason = generate_cli("--target", str(smollm_path), "--lookup", "--chat", QUESTION,
                                         "--max-tokens", "48", "--ctx", str(DEMO_CTX), "--threads", "2")
    reply = demo.api.chat.completions.create(model="smollm2-135m-lookup", temperature=0, max_tokens=48,
                                             messages=[{"role": "user", "content": QUESTION}])
    assert expected.strip(), "generate produced text"
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].finish_reason == stop_reason
    assert reply.choices[0].message.role == "assistant"


def test_greedy_completion_equals_outrider_generate_prompt(demo: Served, smollm_path: Path) -> None:
    prompt = "The capital of France is"
    expected, _ = generate_cli("--target", str(smollm_path), "--lookup", "--prompt", prompt, "--max-tokens", "16",
                               "--ctx", str(DEMO_CTX), "--threads", "2")
    reply = demo.api.completions.create(model="x", prompt=prompt, max_tokens=16, temperature=0)
    assert reply.choices[0].text == expected
    assert reply.object == "text_completion"


def test_system_prompt_is_part_of_the_chat(demo: Served, smollm_path: Path) -> None:
    system = "You answer in one word."
    expected, _ = generate_cli("--target", str(smollm_path), "--lookup", "--chat", QUESTION, "--system", system,
                               "--max-tokens", "24", "--ctx", str(DEMO_CTX), "--threads", "2")
    reply = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=24, messages=[
        {"role": "developer", "content": system}, {"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    assert reply.choices[0].message.content == expected


def test_streaming_equals_the_whole_answer(demo: Served) -> None:
    messages: Any = [{"role": "user", "content": "Write a short poem about the sea."}]
    whole = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=40, messages=messages)
    chunks = list(demo.api.chat.completions.create(model="m", temperature=0, max_tokens=40, messages=messages,
                                                   stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]
    timings = finals[0].model_extra["timings"]  # type: ignore[index]
    assert timings["predicted_n"] == usage.completion_tokens


def test_streaming_completion_equals_whole(demo: Served) -> None:
    whole = demo.api.completions.create(model="m", prompt="Once upon a time", max_tokens=24, temperature=0)
    stream = demo.api.completions.create(model="m", prompt="Once upon a time", max_tokens=24, temperature=0,
                                         stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"


def test_finish_reason_length_and_usage(demo: Served) -> None:
    reply = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=3,
                                             messages=[{"role": "user", "content": "Tell me a long story."}])
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 3 and reply.usage.prompt_tokens > 3


def test_ignore_eos_runs_a_reply_that_would_end_to_max_tokens(demo: Served) -> None:
    """llama-server's ``ignore_eos``: a reply the model ends itself (finish "stop" well short of max_tokens) runs to
    exactly max_tokens with it, and its first tokens are the free reply's; ``false`` changes nothing; a non-boolean
    is refused by name. (Breaking it: leaving ``ignore_eos`` out of the TextRequest the server builds, the reply
    stopped where the free one did: ``finish_reason == "length"`` failed with "stop".)"""
    messages: Any = [{"role": "user", "content": "Say hi."}]
    free = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=64, messages=messages)
    assert free.choices[0].finish_reason == "stop" and free.usage is not None
    assert free.usage.completion_tokens < 64
    same = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=64, messages=messages,
                                            extra_body={"ignore_eos": False})
    assert same.choices[0].message.content == free.choices[0].message.content
    full = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=64, messages=messages,
                                            extra_body={"ignore_eos": True})
    assert full.choices[0].finish_reason == "length"
    assert full.usage is not None and full.usage.completion_tokens == 64
    assert (full.choices[0].message.content or "").startswith(free.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError) as err:
        demo.api.chat.completions.create(model="m", max_tokens=4, messages=messages, extra_body={"ignore_eos": "yes"})
    assert "ignore_eos must be true or false" in str(err.value)


def test_finish_reason_stop_on_a_stop_string(demo: Served) -> None:
    messages: Any = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    free = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=40, messages=messages)
    text = free.choices[0].message.content or ""
    assert "4" in text, text
    cut = demo.api.chat.completions.create(model="m", temperature=0, max_tokens=40, messages=messages, stop=["4"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[: text.index("4")]


def test_seeded_sampling_repeats(demo: Served) -> None:
    messages: Any = [{"role": "user", "content": "Invent a name for a cat."}]
    a, b = (demo.api.chat.completions.create(model="m", temperature=1.2, top_p=0.9, seed=7, max_tokens=16,
                                             messages=messages) for _ in range(2))
    assert a.choices[0].message.content == b.choices[0].message.content


def test_timings_carry_the_speculative_statistics(demo: Served) -> None:
    reply = demo.api.chat.completions.create(
        model="m", temperature=0, max_tokens=64,
        messages=[{"role": "user", "content": "Repeat exactly: the cat sat on the mat, the cat sat on the mat, "
                                              "the cat sat on the mat."}])
    t = reply.model_extra["timings"]  # type: ignore[index]
    for key in ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
                "predicted_per_second", "draft_n", "draft_n_accepted", "acceptance_rate", "speedup",
                "speedup_low", "speedup_high", "speedup_settled", "tokens_per_pass", "k_mean", "draft_mode"):
        assert key in t, key
    assert t["draft_mode"] == "lookup"
    assert t["predicted_n"] == reply.usage.completion_tokens  # type: ignore[union-attr]
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    assert t["acceptance_rate"] == pytest.approx(t["draft_n_accepted"] / t["draft_n"])
    assert t["predicted_per_second"] == pytest.approx(t["predicted_n"] / (t["predicted_ms"] / 1000))
    assert t["tokens_per_pass"] >= 1.0
    assert t["speedup"] is None or t["speedup_low"] <= t["speedup"] <= t["speedup_high"]


def test_concurrent_requests_each_equal_the_same_request_alone(demo: Served) -> None:
    """Two streams and two whole answers at once: queued, never interleaved, each exactly as if served alone."""
    asks: list[tuple[str, bool]] = [("Name a colour.", True), ("Name a fruit.", True), ("Name a city.", False),
                                    ("Name an animal.", False)]
    alone = {q: demo.api.chat.completions.create(model="m", temperature=0, max_tokens=24, messages=[
        {"role": "user", "content": q}]).choices[0].message.content for q, _ in asks}

    def ask(question: str, stream: bool) -> str:
        messages: Any = [{"role": "user", "content": question}]
        if stream:
            return "".join(c.choices[0].delta.content or "" for c in demo.api.chat.completions.create(
                model="m", temperature=0, max_tokens=24, messages=messages, stream=True) if c.choices)
        return demo.api.chat.completions.create(model="m", temperature=0, max_tokens=24,
                                                messages=messages).choices[0].message.content or ""

    texts = at_once([functools.partial(ask, q, stream) for q, stream in asks])
    got = {q: text for (q, _), text in zip(asks, texts, strict=True)}
    assert got == alone
