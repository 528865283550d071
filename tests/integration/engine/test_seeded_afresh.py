"""A seeded request evaluates its prompt afresh in every context that shapes its text — the target's, a draft
model's, an MTP head's — so it does not depend on the requests before it; an unseeded one keeps the prompt cache.

Why: on a CPU llama.cpp's flash attention evaluates a pass of 64+ rows on a tiled path and fewer rows one by one,
and the two round differently (1.3e-3 in these tiny models' logits, up to 0.9 in SmolLM2's). A prompt evaluated
at once takes the tiled path; the same prompt built from a cached prefix (left by another request that shares it)
plus a short new part does not.

Each case compares a fresh decoder's seeded reply with the same seeded request on a decoder that has first
answered two unseeded requests as a chat would (a 259-token prompt, then one sharing 283 tokens with the seeded
one, whose last 24 the caches add in a pass of fewer than 64 rows): each token's log-probability under the target
(bit for bit: the target's KV cache), the tokens, and every distribution q the drafter proposed from (bit for bit:
the drafter's — what the rejection sampler's accept/residual draws read). The draft model has two layers: a
one-layer draft's KV cache is a projection of its input tokens, the same however the prompt was split.

Breaking it on purpose (each once): the drafter prefilled with ``reuse=True`` whatever the seed
(``SpeculativeDecoder.generate``) failed all four cases with "seed 1: the drafter's q differs" (the target's
log-probabilities and, over these 32 tokens, the text still agreed: a 1e-3 difference in q rarely flips a draw on
tiny models, which is why q itself is compared); ``ModelDraft.prefill`` ignoring ``reuse`` failed the two model
cases the same way (and the unseeded test's ``reuse=False`` count); ``MtpDraft.prefill`` ignoring it the two MTP
cases; the target prefilled with reuse (the code before the fix) failed all four with "seed 1: the target's
log-probabilities differ".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from outrider.engine.draft import Draft
from outrider.engine.drafters import Drafter, ModelDraft, NoDraft
from outrider.engine.llama.backend import LoadedModel, ModelContext
from outrider.engine.llama.mtp_context import MtpContext
from outrider.engine.llama.runtime import Backend
from outrider.engine.mtp import MtpDraft
from outrider.engine.params import ContextSettings, DraftParams, ModelSettings, SamplingParams
from outrider.engine.speculative import DoneEvent, GenerationRequest, SpeculativeDecoder
from support.mtp_gguf import MtpModels, make_mtp_models
from support.tiny_gguf import Family, TinyShape, make_family

CTX = ContextSettings(n_ctx=512, threads=1)
SHAPE = TinyShape(n_layer=4, n_embd=128, n_head=4, n_ff=256)  # the suite's tiny_family shape
WORDS = "the model of the text is fast and the draft is slow so we can see what they were when there".split()
SHARED = " ".join(WORDS * 6)  # 283 tokens: far past the 64 rows where flash attention's tiled path starts
ASK, OTHER = SHARED + " hello world", SHARED + " def return class import"
EARLIER = " ".join(WORDS * 5 + WORDS[:10])  # its first 259: OTHER then adds 41 rows (< 64) to the cached prefix
N_TOKENS = 32


class Recording:
    """A drafter that records every q it proposed from (ids and probabilities), delegating the rest."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.proposed: list[tuple[list[int], list[float]]] = []

    def prefill(self, prompt: Sequence[int], *, reuse: bool = True) -> int:
        return self.inner.prefill(prompt, reuse=reuse)

    def propose(self, committed: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator,
                p_min: float, draft_min: int = 0) -> Draft:
        draft = self.inner.propose(committed, k, sampling, rng, p_min, draft_min)
        self.proposed += [(q.ids.tolist(), q.probs.tolist()) for q in draft.dists or []]
        return draft

    def observe(self, committed: Sequence[int], start: int) -> tuple[int, int]:
        return self.inner.observe(committed, start)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    """The tiny family with a two-layer draft: a one-layer draft's KV cache is its input's projection, the same
    however the prompt was split (only its logits differ), so it could not show what reuse does to a real draft."""
    return make_family(tmp_path_factory.mktemp("tiny2"), shape=SHAPE, extra_layer_scale=0.2, draft_layers=2)


@pytest.fixture(scope="module")
def mtp_models(tmp_path_factory: pytest.TempPathFactory) -> MtpModels:
    return make_mtp_models(tmp_path_factory.mktemp("mtp"))


@pytest.fixture
def make_decoder(backend: Backend, family: Family, mtp_models: MtpModels) -> Iterator[Any]:
    """``make_decoder(kind)``: a new decoder over freshly loaded models (``model``: the tiny family's target and
    its two-layer draft; ``mtp``: the generated target with its NextN block), closed after the test."""
    opened: list[Any] = []

    def make(kind: str) -> tuple[SpeculativeDecoder, Recording]:
        if kind == "model":
            target = LoadedModel(backend, str(family.target), ModelSettings())
            draft_model = LoadedModel(backend, str(family.draft), ModelSettings())
            context = ModelContext(target, CTX)
            inner: Drafter = ModelDraft(ModelContext(draft_model, CTX), target.n_vocab, target)
            opened.extend([context, target, draft_model])
        else:
            target = LoadedModel(backend, str(mtp_models.target), ModelSettings(), load_mtp=True)
            context = ModelContext(target, CTX)
            inner = MtpDraft(context, MtpContext(target, CTX), target.n_vocab)
            opened.extend([context, target])
        drafter = Recording(inner)
        opened.insert(0, drafter)
        return SpeculativeDecoder(target, context, drafter), drafter

    yield make
    for thing in opened:
        thing.close()


def _reply(decoder: SpeculativeDecoder, prompt: list[int], sampling: SamplingParams,
           k: int = 3) -> tuple[list[int], list[Any], DoneEvent]:
    tokens: list[int] = []
    logprobs: list[Any] = []
    # No forced plain probes (they follow the machine's load): both decoders draft at the same steps.
    request = GenerationRequest(prompt, N_TOKENS, sampling, DraftParams(k=k), ignore_eos=True, top_logprobs=0,
                                plain_probe_every=0)
    for event in decoder.generate(request):
        if isinstance(event, DoneEvent):
            return tokens, logprobs, event
        tokens.extend(event.tokens)
        logprobs.extend(event.logprobs)
    raise AssertionError("no done event")


@pytest.mark.parametrize("sampler", ["rejection", "coupled"])
@pytest.mark.parametrize("kind", ["model", "mtp"])
def test_a_seeded_reply_does_not_depend_on_the_request_before(make_decoder: Any, kind: str, sampler: str) -> None:
    for seed in (1, 2):
        sampling = SamplingParams(temperature=1.0, seed=seed, sampler=sampler)  # type: ignore[arg-type]
        fresh, fresh_drafter = make_decoder(kind)
        ask = fresh.model.tokenize(ASK, add_special=True, parse_special=False)
        other = fresh.model.tokenize(OTHER, add_special=True, parse_special=False)
        shared = sum(1 for a, b in zip(ask, other, strict=False) if a == b)
        assert shared >= 64 and len(ask) - shared < 64, (shared, len(ask))
        tokens, logprobs, done = _reply(fresh, ask, sampling)
        assert done.stats.drafted > 0, "nothing was drafted"

        used, used_drafter = make_decoder(kind)
        # Unseeded requests fill the caches as a chat does: EARLIER at once, then OTHER's rest (< 64 rows) after
        # it, so the shared prefix is cached as evaluated in two passes, not one.
        for text in (EARLIER, OTHER):
            _reply(used, used.model.tokenize(text, add_special=True, parse_special=False),
                   SamplingParams(temperature=1.0))
        used_drafter.proposed.clear()
        again_tokens, again_logprobs, again = _reply(used, ask, sampling)
        assert again_logprobs == logprobs, f"seed {seed}: the target's log-probabilities differ"
        assert again_tokens == tokens, f"seed {seed}: the text differs"
        assert used_drafter.proposed == fresh_drafter.proposed, f"seed {seed}: the drafter's q differs"
        assert again.stats.prompt_tokens_reused == 0, "a seeded request evaluates its prompt afresh"


def test_an_unseeded_request_keeps_the_prompt_cache(make_decoder: Any) -> None:
    """The cost of afresh is for seeded requests only: after another request sharing the prefix, an unseeded one
    reuses the target's cache and the draft model evaluates only the new part; ``reuse=False`` evaluates it all."""
    decoder, drafter = make_decoder("model")
    ask = decoder.model.tokenize(ASK, add_special=True, parse_special=False)
    other = decoder.model.tokenize(OTHER, add_special=True, parse_special=False)
    _reply(decoder, other, SamplingParams(temperature=1.0))
    _, _, done = _reply(decoder, ask, SamplingParams(temperature=1.0))
    assert done.stats.prompt_tokens_reused >= 283, done.stats.prompt_tokens_reused
    assert done.stats.drafted > 0
    evaluated = drafter.inner.prefill(other)  # the draft's cache holds ASK and its reply now
    assert 0 < evaluated <= len(other) - 283 + 1, evaluated
    assert drafter.inner.prefill(other, reuse=False) == len(other)


def test_a_seeded_reply_is_computed_the_same_whatever_k_and_threads(make_decoder: Any) -> None:
    """Every target pass of a seeded reply has 2 .. 63 rows (a plain step evaluates one padding row after its
    token), so each position's logits are the same bit for bit with drafting off, at k 1 and k 3, on one thread
    and on two, here past the 256 cache cells from which llama.cpp splits a one-row pass's attention over the
    threads (the coupled sampler's promise: the same text whatever k is chosen, automatic threads included).

    Breaking it on purpose: without the padding row (``pad_plain`` False) it failed with "plain, 1 thread: the
    log-probabilities differ" — the plain reply differed from the k 1 reply at all 32 positions on one thread (the
    tiny models' F16 one-row matrix product), the plain reply on two threads from the one on one thread at all 32
    (the attention split over the threads), and k 1 and k 3 on two threads from one thread at one position, the
    last step, which had no room to draft (a one-row pass). The text still agreed on these tiny models; on
    SmolLM2-135M a one-row pass at 300 cells on two threads differs by up to 0.53 in the logits (measured), enough
    to change which token a seeded draw picks."""
    decoder, _ = make_decoder("model")
    plain = SpeculativeDecoder(decoder.model, decoder.context, NoDraft())
    plain.cached = decoder.cached  # one context, one cache mirror (as ``Engine`` shares them)
    ask = decoder.model.tokenize(ASK, add_special=True, parse_special=False)
    assert len(ask) + N_TOKENS > 256 + 32
    sampling = SamplingParams(temperature=1.0, seed=3, sampler="coupled")
    replies: dict[str, tuple[list[int], list[Any]]] = {}
    drafted = 0
    for threads in (1, 2):
        decoder.context.set_threads(threads)
        for k in (0, 1, 3):
            tokens, logprobs, done = _reply(plain if k == 0 else decoder, ask, sampling, k)
            drafted += done.stats.drafted
            replies[f"{'plain' if k == 0 else f'k {k}'}, {threads} thread{'s' * (threads > 1)}"] = tokens, logprobs
    first_tokens, first_logprobs = replies["k 1, 1 thread"]
    for name, (tokens, logprobs) in replies.items():
        assert logprobs == first_logprobs, f"{name}: the log-probabilities differ"
        assert tokens == first_tokens, f"{name}: the text differs"
    assert drafted > 0, "nothing was drafted"


def test_only_a_seeded_sampled_request_pads_its_plain_steps(make_decoder: Any) -> None:
    """The padding row costs a seeded plain step a two-row pass (1.7-1.9x a one-row one on SmolLM2): a greedy
    request, seeded or not, and an unseeded sampled one evaluate one row per plain step, so the in-app
    benchmark's seeded greedy A/B compares with plain decoding as everyone runs it. The seeded sampled reply's
    plain steps reach the speed-up estimate as plain passes (its plain decoding pays the same row). Broken once
    on purpose (padding whenever a seed is set): the greedy case decoded two-row passes."""
    decoder, _ = make_decoder("model")
    plain = SpeculativeDecoder(decoder.model, decoder.context, NoDraft())
    plain.cached = decoder.cached
    rows: list[int] = []
    real_decode = decoder.context.decode

    def counting_decode(tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        rows.append(len(tokens))
        return real_decode(tokens, *args, **kwargs)

    decoder.context.decode = counting_decode  # type: ignore[method-assign]
    ask = decoder.model.tokenize("the model of the text is", add_special=True, parse_special=False)
    cases = {"greedy, seeded": SamplingParams(temperature=0.0, seed=5),
             "sampled, unseeded": SamplingParams(temperature=1.0),
             "sampled, seeded": SamplingParams(temperature=1.0, seed=5)}
    passes: dict[str, list[int]] = {}
    for name, sampling in cases.items():
        rows.clear()
        _, _, done = _reply(plain, ask, sampling, 0)
        assert done.stats.generated == N_TOKENS
        passes[name] = rows[1:]  # after the prompt's pass
        if name == "sampled, seeded":
            assert done.stats.plain_steps == N_TOKENS  # a padded step is a plain one to the statistics
    assert set(passes["greedy, seeded"]) == {1} and set(passes["sampled, unseeded"]) == {1}
    assert set(passes["sampled, seeded"]) == {2}
