"""Automatic depth scores an MTP head on the prompt, and rests a head that cannot pay — exact all the same.

The models are generated (``support/mtp_gguf.py``): the agreeing head (drafts the target's next token ~90 % of the
time) and a head fed noise (``hidden_noise=2.0``: accepted 2-9 %). Counts, never timings: whether the reply's first
step drafted, whether the head followed the target's passes, and every output against the independent reference
(``support/reference_decoding.py``: a fresh llama.cpp context, one token per decode, its own argmax).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.engine.autodraft import MTP_K_START, SLEEP_MAX, AutoDraftLength
from outrider.engine.engine import Engine, PairSpec
from outrider.engine.events import StepEvent
from outrider.engine.llama.runtime import Backend
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.speculative import DoneEvent
from support.mtp_gguf import make_mtp_models
from support.policy_replies import set_pass_costs
from support.reference_decoding import ReferenceModel

PROMPTS = ["the model is fast and the draft is quick and the", "hello world def return class x = y + z * 2 and"]
CTX = ContextSettings(n_ctx=512, threads=2)


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("mtp-prompt")
    return {"agreeing": make_mtp_models(base / "agreeing").target,
            "noise": make_mtp_models(base / "noise", hidden_noise=2.0, head_seed=99).target}


def _reference(target: Path, prompt: list[int], n: int) -> list[int]:
    with ReferenceModel(target, n_ctx=512) as reference:
        return reference.greedy(prompt, n)


@pytest.fixture()
def loaded(backend: Backend) -> Iterator[list[Engine]]:
    engines: list[Engine] = []
    yield engines
    for e in engines:
        e.unload()


def _load(backend: Backend, target: Path, engines: list[Engine]) -> Engine:
    e = Engine(backend)
    engines.append(e)
    e.load(PairSpec(target=str(target), mtp=True, context=CTX))
    set_pass_costs(e._decoder_or_raise())
    return e


def _reply(e: Engine, prompt: list[int], n: int, k: int | None) -> tuple[list[int], list[StepEvent], DoneEvent]:
    tokens: list[int] = []
    steps: list[StepEvent] = []
    for event in e.generate(prompt, max_tokens=n, draft=DraftParams(k=k), ignore_eos=True):
        if isinstance(event, DoneEvent):
            return tokens, steps, event
        tokens.extend(event.tokens)
        if event.tokens:
            steps.append(event)
    raise AssertionError("no done event")


def _count_copies(drafter: MtpDraft) -> list[int]:
    """Count the head's copies of the target's hidden states (one per target pass it follows) in the list's item."""
    copies = [0]
    capture = drafter._capture

    def counted(pos0: int, n: int) -> None:
        copies[0] += 1
        capture(pos0, n)

    drafter._capture = counted  # type: ignore[method-assign]
    drafter.target.after_decode = counted
    return copies


def test_a_head_scored_on_the_prompt_drafts_at_the_replys_first_step(backend: Backend, heads: dict[str, Path],
                                                                     loaded: list[Engine]) -> None:
    """The first reply after a load (a cold start, nothing cached): the agreeing head, scored on the prompt's own
    positions during its prefill, drafts at the reply's first step, and the reply is the reference's; the noise
    head never drafts.

    Breaking it (``MtpDraft.prompt_rows = 0``: no scoring on the prompt): the agreeing head's first step was plain
    (``steps[0].k == 0``) — the cold start then decoded 5 plain tokens before its first draft."""
    for name, target in heads.items():
        e = _load(backend, target, loaded)
        for text in PROMPTS:
            prompt = e.tokenize_prompt(text)
            e._decoder_or_raise().reset()  # a new conversation: the prompt is evaluated, not found cached
            e._decoder_or_raise().auto_policy = None
            tokens, steps, done = _reply(e, prompt, 24, None)
            assert tokens == _reference(target, prompt, 24), (name, text)
            if name == "agreeing":
                assert steps[0].k > 0 and done.stats.drafted > 0, (text, steps[0].k)
            else:
                assert done.stats.drafted == 0, (text, done.stats.drafted)


def test_a_useless_head_rests_then_wakes_for_the_next_reply_exactly(backend: Backend, heads: dict[str, Path],
                                                                    loaded: list[Engine]) -> None:
    """The noise head at automatic depth, 96 tokens: once it was scored useless on enough of the reply it stops
    following the target — the target's hidden states are no longer copied (``after_decode`` unhooked) for most
    of the reply. The next reply, at depth 2, wakes it: it drafts, reading zeros for the positions decoded while
    it rested, and both replies are the reference's token for token.

    Breaking it (``should_rest`` always False): the head never rested (``drafter.resting`` False after the reply:
    it kept copying the hidden states of every position)."""
    target = heads["noise"]
    e = _load(backend, target, loaded)
    drafter = e._decoder_or_raise().drafter
    assert isinstance(drafter, MtpDraft)
    copies = _count_copies(drafter)
    prompt = e.tokenize_prompt(PROMPTS[0])
    tokens, _, done = _reply(e, prompt, 96, None)
    assert tokens == _reference(target, prompt, 96)
    assert done.stats.drafted == 0
    assert drafter.resting and drafter.target.after_decode is None
    assert copies[0] < 48, copies[0]  # the prompt's prefill is one copy, each plain step until the rest one
    follow = prompt + tokens + e.tokenize_prompt(" and then")
    tokens2, _, done2 = _reply(e, follow, 24, 2)
    assert not drafter.resting and done2.stats.drafted > 0
    assert tokens2 == _reference(target, follow, 24)


def test_a_head_whose_costs_say_it_cannot_pay_sleeps_through_a_reply_exactly(backend: Backend,
                                                                            heads: dict[str, Path],
                                                                            loaded: list[Engine]) -> None:
    """The agreeing head under costs on which no depth pays even at 0.95 acceptance (a GPU's for a tiny target:
    0.6 ms a plain pass, 2 ms a batch, 0.4 ms a head token; set on the policy, counts are asserted, not timings):
    the next reply sleeps through — the head is not scored on the prompt, never follows the target (no hidden
    state is copied) and never drafts — and is the reference's. After SLEEP_MAX plain steps slept, a reply at
    automatic depth is awake again: scored on its prompt, the head drafts where it agrees, still exact.

    Breaking it (``sleeps_through_next_reply`` always False): the sleeping reply copied the target's hidden
    states (the head followed the target, scored on the prompt)."""
    target = heads["agreeing"]
    e = _load(backend, target, loaded)
    decoder = e._decoder_or_raise()
    drafter = decoder.drafter
    assert isinstance(drafter, MtpDraft)
    policy = AutoDraftLength(k_max=DraftParams().k_max, score_first=True, k_start=MTP_K_START)
    policy.settle = 2
    policy.start_reply()
    for _ in range(4):
        policy.observe(batch=3, verify_s=2e-3, drafted=2, accepted=2, draft_s=0.8e-3)
    for verify_s in (1.5e-3, 1.35e-3, 0.6e-3, 0.6e-3, 0.6e-3):
        policy.observe(batch=1, verify_s=verify_s, drafted=0, accepted=0, draft_s=0.0)
    decoder.auto_policy = policy
    copies = _count_copies(drafter)
    prompt = e.tokenize_prompt(PROMPTS[0])
    tokens, steps, done = _reply(e, prompt, 32, None)
    assert tokens == _reference(target, prompt, 32)
    assert done.stats.drafted == 0 and all(s.k == 0 for s in steps)
    assert copies[0] == 0 and drafter.resting
    policy._slept = SLEEP_MAX  # as after SLEEP_MAX plain steps slept through
    follow = prompt + tokens + e.tokenize_prompt(" and then")
    # Awake: the head is scored on its prompt and follows the target again (on this CPU's own timings it may
    # or may not draft; the point is that it is woken and exact).
    tokens2, _, _ = _reply(e, follow, 24, None)
    assert copies[0] > 0 and policy._slept == 0
    assert tokens2 == _reference(target, follow, 24)
