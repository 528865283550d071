"""Temperature 0: speculative output is token-for-token target-only greedy decoding.

Every drafter (family draft, unrelated draft, the target as its own draft, prompt lookup) at k in
{1, 2, 4, 8, auto} over 30+ prompts. The one honest exception is a near-tie of the target's top two logits at
the first divergence (batched and single-token evaluation may round differently); it is recognised by measuring
that gap, never by loosening the comparison elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, ModelSettings
from outrider.engine.speculative import DoneEvent, DraftParams
from support.tiny_gguf import Family

PROMPTS = [
    "the",
    "hello world",
    "def return class",
    "the model is fast",
    "a b c d e f",
    "for i in range",
    "what is the speed of",
    "token token token token",
    "they said that",
    "import data result",
    "user assistant system",
    "1 2 3 4 5 6 7 8",
    "print(value)",
    "there can be one",
    "who would do that",
    "if else while",
    "fast slow fast slow",
    "list dict str int",
    "the draft and the target",
    "{[()]}",
    "name: file line",
    "she was at the",
    "we are not",
    "text code text code text",
    "self.value = data",
    "hello",
    "world world",
    "time will tell",
    "all were there",
    "from the file",
    "up about out more",
    "#!/usr/bin/env",
    "x = y + z * 2",
]
K_VALUES: list[int | None] = [1, 2, 4, 8, None]
TIE_GAP = 1e-3  # logits closer than this are a tie that batch size may flip


def _tokens(engine: Engine, prompt: list[int], *, k: int | None, plain: bool, n: int) -> tuple[list[int], DoneEvent]:
    out: list[int] = []
    for event in engine.generate(prompt, max_tokens=n, draft=DraftParams(k=k), plain=plain):
        if isinstance(event, DoneEvent):
            return out, event
        out.extend(event.tokens)
    raise AssertionError("no done event")


def _top2_gap(backend: Backend, target: Path, tokens: list[int]) -> float:
    with LoadedModel(backend, target, ModelSettings()) as model, ModelContext(model, ContextSettings(n_ctx=512)) as ctx:
        ctx.decode(tokens, logits="last")
        row = np.sort(np.asarray(ctx.logits_row(-1), dtype=np.float64))
        return float(row[-1] - row[-2])


def assert_same_or_tie(backend: Backend, target: Path, prompt: list[int], plain: list[int], spec: list[int]) -> None:
    if plain == spec:
        return
    i = next((j for j, (a, b) in enumerate(zip(plain, spec, strict=False)) if a != b), min(len(plain), len(spec)))
    gap = _top2_gap(backend, target, prompt + plain[:i])
    assert gap < TIE_GAP, f"diverged at token {i} with a logit gap of {gap:.4g} (not a tie): {plain} vs {spec}"


@pytest.fixture(scope="module", params=["family", "unrelated", "self", "lookup"])
def drafter_engine(
    request: pytest.FixtureRequest, backend: Backend, tiny_family: Family
) -> Iterator[tuple[str, Engine]]:
    kind = request.param
    draft = {"family": tiny_family.draft, "unrelated": tiny_family.unrelated, "self": tiny_family.target}.get(kind)
    engine = Engine(backend)
    engine.load(
        PairSpec(
            target=str(tiny_family.target),
            draft=str(draft) if draft else None,
            lookup=kind == "lookup",
            context=ContextSettings(n_ctx=512, threads=2),
        )
    )
    yield kind, engine
    engine.unload()


def test_greedy_identity(drafter_engine: tuple[str, Engine], backend: Backend, tiny_family: Family) -> None:
    kind, engine = drafter_engine
    drafted = accepted = 0
    for text in PROMPTS:
        prompt = engine.tokenize_prompt(text)
        plain, _ = _tokens(engine, prompt, k=0, plain=True, n=24)
        for k in K_VALUES:
            spec, done = _tokens(engine, prompt, k=k, plain=False, n=24)
            assert_same_or_tie(backend, tiny_family.target, prompt, plain, spec)
            drafted += done.stats.drafted
            accepted += done.stats.accepted
    assert drafted > 0
    rate = accepted / drafted
    if kind == "self":
        assert rate == 1.0
    elif kind == "unrelated":
        assert rate < 0.1
    elif kind == "family":
        assert rate > 0.3


def test_provenance_and_counts_agree(backend: Backend, tiny_family: Family) -> None:
    engine = Engine(backend)
    engine.load(
        PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft), context=ContextSettings(n_ctx=512))
    )
    try:
        flags: list[bool] = []
        done = None
        for event in engine.generate(engine.tokenize_prompt("the model is"), max_tokens=60, draft=DraftParams(k=4)):
            if isinstance(event, DoneEvent):
                done = event
            else:
                assert len(event.tokens) == len(event.drafted)
                if event.tokens:  # the final event may carry only held-back text
                    assert len(event.pieces) == len(event.tokens)
                flags.extend(event.drafted)
        assert done is not None
        s = done.stats
        assert sum(flags) == s.accepted
        assert len(flags) == s.generated
        assert s.acceptance_rate == pytest.approx(s.accepted / s.drafted)
        assert s.tokens_per_pass == pytest.approx(s.generated / s.passes)
        assert s.draft_s + s.verify_s <= s.decode_s + 1e-6
        d = s.to_dict()
        for key in (
            "generated",
            "drafted",
            "accepted",
            "acceptance_rate",
            "tokens_per_pass",
            "decode_tps",
            "prompt_tps",
            "ttft_s",
            "k_mean",
        ):
            assert d[key] is not None, key
    finally:
        engine.unload()


def test_speedup_is_measured_in_the_reply(backend: Backend, tiny_family: Family) -> None:
    """Plain decoding reads exactly 1.00x; a speculating reply measures plain steps of its own (forced probes
    after the first step, never the first) and gives its figure with an interval around it."""
    engine = Engine(backend)
    engine.load(PairSpec(target=str(tiny_family.target), lookup=True, context=ContextSettings(n_ctx=512)))
    try:
        prompt = engine.tokenize_prompt("a b a b a b a b a b a b")
        plain = next(e for e in engine.generate(prompt, max_tokens=24, plain=True) if isinstance(e, DoneEvent))
        assert plain.stats.drafted == 0 and plain.stats.plain_steps == plain.stats.passes
        assert plain.stats.speedup == plain.stats.speedup_low == plain.stats.speedup_high == 1.0
        spec = next(e for e in engine.generate(prompt, max_tokens=64, draft=DraftParams(k=4))
                    if isinstance(e, DoneEvent))
        s = spec.stats
        assert s.drafted > 0 and s.plain_steps >= 1  # the decoder's probes, when lookup found no plain step
        assert s.speedup is not None and s.speedup_low is not None and s.speedup_high is not None
        assert 0 < s.speedup_low < s.speedup < s.speedup_high
        assert s.tokens_per_pass is not None and s.tokens_per_pass >= 1.0
        assert s.pass_tokens >= s.passes
    finally:
        engine.unload()


def test_fixed_k_respected(backend: Backend, tiny_family: Family) -> None:
    engine = Engine(backend)
    engine.load(
        PairSpec(target=str(tiny_family.target), draft=str(tiny_family.target), context=ContextSettings(n_ctx=512))
    )
    try:
        ks = [
            e.k
            for e in engine.generate(engine.tokenize_prompt("the"), max_tokens=40, draft=DraftParams(k=3))
            if not isinstance(e, DoneEvent)
        ]
        # The first step drafts (the coldest step of a reply is no plain measurement); the others draft the fixed k
        # or are the speed-up meter's plain probes. How many probes a reply takes is the meter's choice, not k's:
        # on a quiet machine one step in four at most early on, on a loaded one more (it probes again when the
        # passes' cost moves: 9 probes to 7 drafts in a CI run under other load), so only "some drafts" is k's.
        assert ks[0] == 3
        assert set(ks[1:-1]) <= {0, 3} and ks.count(3) >= 3
        # p_min = 1 stops every draft immediately: plain decoding with k still reported
        done = next(
            e
            for e in engine.generate(engine.tokenize_prompt("the"), max_tokens=20, draft=DraftParams(k=3, p_min=1.0))
            if isinstance(e, DoneEvent)
        )
        assert done.stats.drafted == 0
        done = next(
            e
            for e in engine.generate(engine.tokenize_prompt("the"), max_tokens=20, draft=DraftParams(k=2, draft_min=3))
            if isinstance(e, DoneEvent)
        )
        assert done.stats.drafted == 0
    finally:
        engine.unload()


def test_dataclass_params_validate() -> None:
    with pytest.raises(ValueError, match="draft length"):
        DraftParams(k=-1)
    with pytest.raises(ValueError, match="p-min"):
        dataclasses.replace(DraftParams(), p_min=3.0)


def test_counts_stay_consistent_when_the_last_step_is_cut(backend: Backend, tiny_family: Family) -> None:
    engine = Engine(backend)
    engine.load(
        PairSpec(target=str(tiny_family.target), draft=str(tiny_family.target), context=ContextSettings(n_ctx=512))
    )
    try:
        flags: list[bool] = []
        done = None
        for event in engine.generate(engine.tokenize_prompt("the"), max_tokens=13, draft=DraftParams(k=8)):
            if isinstance(event, DoneEvent):
                done = event
            else:
                flags.extend(event.drafted)
        assert done is not None and done.stop_reason == "length"
        assert done.stats.generated == len(flags) == 13
        assert done.stats.accepted == sum(flags) <= done.stats.generated
    finally:
        engine.unload()


def test_auto_k_keeps_what_it_learned_across_replies(backend: Backend, tiny_family: Family) -> None:
    engine = Engine(backend)
    engine.load(
        PairSpec(target=str(tiny_family.target), draft=str(tiny_family.draft), context=ContextSettings(n_ctx=512))
    )
    try:
        list(engine.generate(engine.tokenize_prompt("the model"), max_tokens=30))
        decoder = engine._decoder_or_raise()
        policy = decoder.auto_policy
        assert policy is not None and policy.model.verify[1].value is not None  # plain cost measured once
        ks = [
            e.k
            for e in engine.generate(engine.tokenize_prompt("hello world"), max_tokens=30)
            if not isinstance(e, DoneEvent)
        ]
        assert decoder.auto_policy is policy  # the second reply starts from what the first one learned
        # What k it then picks depends on this machine's measured costs (plain decoding may win: k 0), not on the
        # test: the reply's steps all come from the learned policy, none from a cold start at k_start.
        assert ks and all(0 <= k <= policy.k_max for k in ks)
    finally:
        engine.unload()
