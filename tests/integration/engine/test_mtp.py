"""MTP drafting (the target's own NextN block, or a separate head file) against an independent reference.

The models are generated (``support/mtp_gguf.py``: a dense ``glm4moe`` trunk and one NextN block, in the target
file and as a head file). The reference (``support/reference_decoding.py``) is the target GGUF in a fresh llama.cpp
context, one token per ``llama_decode``, its own ``np.argmax``: no Outrider engine code.

Breaking it on purpose: feeding each MTP cell the hidden state of its own position instead of the one before
(``MtpDraft._rows_for`` reading ``p`` for ``p - 1``) leaves the output exact (the target verifies) and lowers the
default head's acceptance only a little (0.95 to 0.91: it mostly reads the token), so
``test_the_head_reads_the_targets_state_before_its_token`` uses a head that reads only the hidden state: fed
right, its draft is the token the target chose from that state; with the off-by-one it failed on every prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from outrider.engine.draft import Draft
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.errors import IncompatiblePairError
from outrider.engine.llama.runtime import Backend
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import ContextSettings, DraftParams, SamplingParams
from outrider.engine.speculative import DoneEvent
from support.mtp_gguf import MtpModels, MtpShape, make_mtp_models
from support.policy_replies import set_pass_costs
from support.reference_decoding import ReferenceModel

PROMPTS = ["the model is fast", "hello world", "def return class", "a b a b a b", "x = y + z * 2"]
N_TOKENS = 32
TIE_GAP = 1e-3
CTX = ContextSettings(n_ctx=256, threads=2)


@pytest.fixture(scope="module")
def mtp_models(tmp_path_factory: pytest.TempPathFactory) -> MtpModels:
    return make_mtp_models(tmp_path_factory.mktemp("mtp"))


@pytest.fixture(scope="module")
def references(mtp_models: MtpModels) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    with ReferenceModel(mtp_models.target, n_ctx=256) as reference:
        for text in PROMPTS:
            prompt = reference.tokenize(text)
            out["prompt:" + text] = prompt
            out[text] = reference.greedy(prompt, N_TOKENS)
    return out


@pytest.fixture(scope="module", params=["mtp", "mtp-head"])
def engine(request: pytest.FixtureRequest, backend: Backend, mtp_models: MtpModels) -> Iterator[tuple[str, Engine]]:
    kind = request.param
    spec = (PairSpec(target=str(mtp_models.target), mtp=True, context=CTX) if kind == "mtp"
            else PairSpec(target=str(mtp_models.trunk), mtp_head=str(mtp_models.head), context=CTX))
    e = Engine(backend)
    info = e.load(spec)
    assert info.draft_mode == "mtp"
    set_pass_costs(e._decoder_or_raise())  # automatic depth's row must draft, whatever the machine's load
    yield kind, e
    e.unload()


def _generate(engine: Engine, prompt: list[int], draft: DraftParams,
              sampling: SamplingParams = SamplingParams()) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    for event in engine.generate(prompt, max_tokens=N_TOKENS, draft=draft, sampling=sampling, ignore_eos=True):
        if isinstance(event, DoneEvent):
            return tokens, event
        tokens.extend(event.tokens)
    raise AssertionError("no done event")


def test_mtp_greedy_equals_the_reference(engine: tuple[str, Engine], references: dict[str, list[int]],
                                         mtp_models: MtpModels) -> None:
    """Depth 1, 2, 3 and automatic, p-min and draft-min: token for token the reference's greedy output, with
    drafts made and mostly accepted at depth 1 (the generated head agrees with its target ~90% of the time)."""
    kind, e = engine
    mismatches: list[str] = []
    ties = 0
    per_depth: dict[str, tuple[int, int]] = {}
    with ReferenceModel(mtp_models.target, n_ctx=256) as reference:
        for draft in (DraftParams(k=1), DraftParams(k=2), DraftParams(k=3), DraftParams(k=None),
                      DraftParams(k=3, p_min=0.6, draft_min=2)):
            drafted = accepted = 0
            for text in PROMPTS:
                prompt = references["prompt:" + text]
                got, done = _generate(e, prompt, draft)
                drafted += done.stats.drafted
                accepted += done.stats.accepted
                assert done.stats.draft_mode == "mtp"
                expected = references[text]
                if got == expected:
                    continue
                i = next(j for j, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
                gap = reference.top2_gap(prompt + expected[:i])
                if gap < TIE_GAP:
                    ties += 1
                else:
                    mismatches.append(f"{text!r} {draft}: first difference at token {i} (logit gap {gap:.3g})")
            per_depth["p-min" if draft.p_min else str(draft.k)] = (accepted, drafted)
    assert not mismatches, f"{kind}: MTP output is not target-only greedy decoding:\n" + "\n".join(mismatches)
    assert ties <= 2
    for depth, (_, drafted) in per_depth.items():
        assert drafted > 0, f"{kind} k={depth}: nothing was drafted"
    accepted, drafted = per_depth["1"]
    assert accepted >= 0.75 * drafted, f"{kind}: depth-1 acceptance {accepted}/{drafted}: the head is fed wrongly"
    accepted, drafted = per_depth["3"]
    assert accepted < drafted, f"{kind}: every draft token was accepted: rejections are not tested"


def test_mtp_replies_reuse_the_caches_across_turns(engine: tuple[str, Engine],
                                                    references: dict[str, list[int]]) -> None:
    """A second reply whose prompt extends the first reply (a chat's next turn) and one whose prompt diverges
    early (an edited conversation) are both the reference's output: the MTP context re-syncs by itself."""
    _, e = engine
    first = references["prompt:hello world"]
    got, _ = _generate(e, first, DraftParams(k=2))
    assert got == references["hello world"]
    got, done = _generate(e, references["prompt:the model is fast"], DraftParams(k=2))
    assert got == references["the model is fast"] and done.stats.drafted > 0
    got, _ = _generate(e, first, DraftParams(k=3))
    assert got == references["hello world"]


def test_mtp_sampling_runs_with_dists(engine: tuple[str, Engine], references: dict[str, list[int]]) -> None:
    """At temperature 1 the MTP drafter hands q for each draft token (the exact acceptance rule needs it); the
    chi-square exactness check itself is `outrider verify --mtp` (test_cli_mtp.py)."""
    _, e = engine
    got, done = _generate(e, references["prompt:the model is fast"], DraftParams(k=3),
                          SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0, seed=7))
    assert len(got) == N_TOKENS and done.stats.drafted > 0 and done.stats.accepted > 0


def test_mtp_on_a_target_without_nextn_layers_is_refused(backend: Backend, mtp_models: MtpModels) -> None:
    with pytest.raises(IncompatiblePairError) as err:
        Engine(backend).load(PairSpec(target=str(mtp_models.trunk), mtp=True, context=CTX))
    assert err.value.rule == "no_mtp_layers"
    assert "mtp-trunk.gguf has no MTP layers" in str(err.value) and "--mtp-head" in str(err.value)


def test_a_head_file_is_refused_as_the_target(backend: Backend, mtp_models: MtpModels) -> None:
    with pytest.raises(IncompatiblePairError) as err:
        Engine(backend).load(PairSpec(target=str(mtp_models.head), mtp=True, context=CTX))
    assert err.value.rule == "head_only" and "--mtp-head" in str(err.value)


def test_a_head_for_another_model_is_refused(backend: Backend, mtp_models: MtpModels, tmp_path: Path) -> None:
    """A head of a narrower model (another n_embd), and one of a deeper model: each named, nothing loaded."""
    narrow = make_mtp_models(tmp_path / "narrow", shape=MtpShape(n_embd=128, n_head=2, n_ff=256))
    deep = make_mtp_models(tmp_path / "deep", shape=MtpShape(n_layer=6))
    for head, rule in ((narrow.head, "embedding_length"), (deep.head, "block_count")):
        with pytest.raises(IncompatiblePairError) as err:
            Engine(backend).load(PairSpec(target=str(mtp_models.trunk), mtp_head=str(head), context=CTX))
        assert err.value.rule == rule
        assert "belongs to another model" in str(err.value)
    with pytest.raises(IncompatiblePairError) as err:
        Engine(backend).load(PairSpec(target=str(mtp_models.trunk), mtp_head=str(mtp_models.trunk), context=CTX))
    assert err.value.rule == "not_a_head"


def test_choosing_two_drafters_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one drafter"):
        PairSpec(target="t.gguf", mtp=True, lookup=True)
    with pytest.raises(ValueError, match="choose one drafter"):
        PairSpec(target="t.gguf", mtp=True, mtp_head="h.gguf")


def test_the_head_reads_the_targets_state_before_its_token(backend: Backend, tmp_path: Path) -> None:
    """Cell p of the MTP context must get the target's hidden state at p - 1. A head that reads only the hidden
    state (``token_weight=0``) then yields the target's own prediction from that state, which is the last
    committed token: its first draft equals it."""
    probe = make_mtp_models(tmp_path / "probe", token_weight=0.0, hidden_weight=1.0, hidden_noise=0.0)
    e = Engine(backend)
    e.load(PairSpec(target=str(probe.target), mtp=True, context=CTX))
    try:
        decoder = e._decoder
        assert decoder is not None
        same = 0
        for text in PROMPTS:
            prompt = e.tokenize_prompt(text)
            got, _ = _generate_n(e, prompt, 1)
            draft = decoder.drafter.propose([*prompt, *got], 1, SamplingParams(), np.random.default_rng(0), 0.0)
            same += int(draft.tokens == got)
        assert same >= len(PROMPTS) - 1, f"the head's draft matched the target's choice on {same} of {len(PROMPTS)}"
    finally:
        e.unload()


def _generate_n(engine: Engine, prompt: list[int], n: int) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    for event in engine.generate(prompt, max_tokens=n, draft=DraftParams(k=0), ignore_eos=True):
        if isinstance(event, DoneEvent):
            return tokens, event
        tokens.extend(event.tokens)
    raise AssertionError("no done event")


def test_a_draft_is_charged_its_own_catch_up(engine: tuple[str, Engine], references: dict[str, list[int]],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What automatic depth is charged for an MTP draft: feeding again the tokens the last verify pass kept is
    part of every draft (the drafted cells are removed), so only the tokens plain steps emitted since the previous
    draft are reported as catch-up (``Draft.synced``, which the decoder mostly leaves out of the cost).

    Breaking it (reporting every cell fed, as before): after a speculative step whose 3 drafts were accepted the
    draft reported 4 cells of catch-up and the decoder left half of its first MTP pass uncharged; this test then
    fails on the first draft after a speculative step."""
    _, e = engine
    drafter = e._decoder_or_raise().drafter
    assert isinstance(drafter, MtpDraft)
    log: list[tuple[str, int]] = []
    propose = drafter.propose

    def recorded(*args: object, **kwargs: object) -> Draft:
        draft = propose(*args, **kwargs)  # type: ignore[arg-type]
        log.append(("draft", draft.synced))
        return draft

    monkeypatch.setattr(drafter, "propose", recorded)
    prompt = references["prompt:the model is fast"]
    for event in e.generate(prompt, max_tokens=64, draft=DraftParams(k=3), ignore_eos=True):
        if isinstance(event, DoneEvent):
            break
        log.append(("step", event.k))
    plain_since = 0
    expected: list[tuple[int, int]] = []
    for kind, value in log:
        if kind == "draft":
            expected.append((value, plain_since))
            plain_since = 0
        elif value == 0:  # a plain step (the reply's first, and the decoder's plain-rate probes)
            plain_since += 1
    after_plain = sum(plain > 0 for _, plain in expected)
    assert after_plain >= 1 and len(expected) - after_plain >= 5, log
    wrong = [(got, plain) for got, plain in expected if got != plain]
    assert not wrong, f"(reported catch-up, plain steps since the last draft): {wrong}"


def _cold_auto_reply(e: Engine, prompt: list[int], n: int) -> DoneEvent:
    """One reply at automatic depth from a cold start (as the first reply after a load)."""
    e._decoder_or_raise().auto_policy = None
    for event in e.generate(prompt, max_tokens=n, draft=DraftParams(k=None), ignore_eos=True):
        if isinstance(event, DoneEvent):
            return event
    raise AssertionError("no done event")


@pytest.mark.parametrize("load", [1.0, 0.6, 2.0])
def test_automatic_depth_scores_an_mtp_head_before_its_first_draft(backend: Backend, mtp_models: MtpModels,
                                                                   tmp_path: Path, load: float) -> None:
    """A cold start at automatic depth does not draft until the MTP head was scored — on the prompt's positions at
    its prefill (``test_mtp_prompt_score.py``), or on the target's own tokens where the prompt was cached (the
    scored cells are the ones its first draft would feed anyway) — and drafts only if that acceptance could
    pay: a head whose input is noise (accepted 5-9 % of the time, bench_mtp.py's "dense low") never drafts; the
    agreeing head does. Counts, not timings: before any draft the decision reads no measured cost but the ratio
    of the plain passes' prior line.

    Breaking it (``score_first`` off, as before): the noise head drafted 4 tokens at the reply's first step and 4
    more after the plain-rate probes (8 drafted, none accepted) on every prompt — 3-13 % of a 24-192-token reply
    in bench_mtp.py.

    And whatever the machine's load did since the passes were timed (``load``: 0.6, a load that came after the
    timing; 2.0, one that went away): with the batches timed at load read as timed against the replies' one-token
    passes, the noise head drafted 2 at its probes on two or three of the prompts at 0.6 and 0.7 (``_load_shift``
    returning 0), and once on CI, where the load moved between the timing and the replies."""
    low = make_mtp_models(tmp_path / "low", hidden_noise=2.0, head_seed=99)
    for target, useful in ((low.target, False), (mtp_models.target, True)):
        e = Engine(backend)
        e.load(PairSpec(target=str(target), mtp=True, context=CTX))
        set_pass_costs(e._decoder_or_raise(), load)
        try:
            drafted = []
            for text in PROMPTS[:3]:
                done = _cold_auto_reply(e, e.tokenize_prompt(text), 48)
                assert done.stats.generated == 48
                drafted.append(done.stats.drafted)
            if useful:
                assert min(drafted) > 0, drafted
            else:
                assert drafted == [0, 0, 0], drafted
        finally:
            e.unload()
