"""Sampling through the real engine, WITH speculation, at temperature 1 and 0.7 and with both samplers: every
sampled position follows the target's own distribution, computed exactly and independently.

The reference is ``support/reference_decoding.py``: the target GGUF in a fresh llama.cpp context, evaluated one
token per ``llama_decode`` (no Outrider engine code), with llama.cpp's filter chain written out again, and the exact
marginal distribution of positions 0 to 3 obtained by enumerating every prefix in the filtered support. Each case
runs ``N_RUNS`` seeded generations of 4 tokens with k = 2 through ``Engine.generate``: whichever step the engine
speculates first (it may decode the first token plainly, to measure the plain rate), drafted-and-verified positions,
corrected positions and bonus tokens all fall inside the four; every case must actually speculate (drafted > 0) and
see rejections (accepted < drafted).

Power (why N_RUNS = 20 000). The test per position is Pearson's chi-square against the exact distribution over at
most ``MAX_CELLS`` + 1 cells (the likeliest tokens, then one cell for the rest), at alpha = 1e-3 / 4 (Bonferroni over
the four positions). A skew of total variation 0.01 has a noncentrality lambda = N * sum(d_i^2 / p_i):
 - the reference example of the p-min bug (token probability 0.10 -> 0.11, taken from a token of 0.9):
   lambda = 20 000 * 1e-4 * (1/0.1 + 1/0.9) = 22.2, median p-value 5e-5 at df = 4 (power 0.65); mass moved onto a
   token of probability <= 0.05 gives lambda >= 44 (median p 2e-9, power 0.99);
 - only the least detectable 0.01 shape (between two tokens of probability 0.5) has lambda = 8 and goes unseen;
   it would need about 60 000 runs per case (a minute and more on two cores).
An exact engine fails a case with probability 1e-3 for a given seed; seeds are fixed, so runs are reproducible for a
given engine (a change of how the engine consumes its random stream draws new samples).
The p-min cases' skews in this family are far larger than 0.01 (see the report in the assertion messages).

Temperature 0.7 (the ``_t0.7`` cases): a sampler that computes its acceptance at temperature 1 whatever the setting
changes nothing at temperature 1, so the cases at 1 alone cannot see it. Mutation check: that bug
(``support/planted_bugs.py``'s ``accept_at_t1``) planted into the engine fails ``lookup_t0.7`` here (positions 1-3,
p ~ 1e-278 to 1e-100: the target's greedy token, which lookup proposes, came out 8 % too rarely). The ``coupled_``
cases run the coupled sampler (a seeded request's default): exact whatever was drafted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from scipy import stats

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams, Sampler, SamplingParams
from outrider.engine.speculative import DoneEvent
from support.reference_decoding import AmbiguousFilterError, Filters, ReferenceModel
from support.tiny_gguf import Family, TinyShape, make_family

N_RUNS = 20_000
N_POSITIONS = 4
ALPHA = 1e-3
MAX_CELLS = 4  # the likeliest tokens get a cell each, the rest share one
SEED0 = 7_000_000
# A case's exact distribution is taken only where no filter boundary is within this many logits of a candidate
# (``filtered_distribution``'s ``tie``): batching moves these logits by thousandths, and on an AMD EPYC two tokens
# 4e-5 apart across the top-p cut of ``all_filters`` at position 3 let the engine sample the one the reference cut.
# Such a prompt is passed over for the next of FALLBACK_PROMPTS (which one a case ran on is in its report).
BOUNDARY_TIE = 1e-3
FALLBACK_PROMPTS = ["def return", "a b c", "the self", "there this one", "class import", "x y z"]

# Peaked next-token distributions (logits with a standard deviation of about 4): filtered supports stay small, the
# draft (the target's first layer) is often confident, and a target with 3 layers disagrees with it often enough.
SHAPE = TinyShape(n_layer=3, n_embd=64, n_head=2, n_ff=128)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    drafter: str  # "model" or "lookup"
    prompt: str
    filters: Filters
    draft: DraftParams
    echo: int = 0  # > 0: the prompt is P + the target's greedy continuation of P (this many tokens) + P again
    sampler: Sampler = "rejection"


CASES = [
    Case("top_k", "model", "def return", Filters(top_k=4), DraftParams(k=2)),
    Case("top_p", "model", "a b c", Filters(top_p=0.8), DraftParams(k=2)),
    Case("min_p", "model", "a b c", Filters(min_p=0.2), DraftParams(k=2)),
    Case("all_filters", "model", "def return", Filters(top_k=6, top_p=0.9, min_p=0.05), DraftParams(k=2)),
    Case("p_min_0.5", "model", "def return", Filters(top_k=4), DraftParams(k=2, p_min=0.5)),
    Case("p_min_0.75", "model", "the self", Filters(top_k=4), DraftParams(k=2, p_min=0.75)),
    Case("draft_min_2", "model", "a b c", Filters(top_k=4), DraftParams(k=2, draft_min=2)),
    Case("draft_min_2_p_min_0.5", "model", "def return", Filters(top_k=4), DraftParams(k=2, draft_min=2, p_min=0.5)),
    # Prompt lookup finds the repeated text and proposes what the target itself continued it with.
    Case("lookup", "lookup", "there this one", Filters(top_k=4), DraftParams(k=2), echo=5),
    # Temperature 0.7: where a sampler that gets the temperature wrong shows.
    Case("all_filters_t0.7", "model", "def return", Filters(0.7, top_k=6, top_p=0.9, min_p=0.05), DraftParams(k=2)),
    Case("p_min_0.5_t0.7", "model", "def return", Filters(0.7, top_k=4), DraftParams(k=2, p_min=0.5)),
    Case("lookup_t0.7", "lookup", "there this one", Filters(0.7, top_k=4), DraftParams(k=2), echo=5),
    # The coupled sampler: the target's own Gumbel-max choice whatever was drafted.
    Case("coupled_all_filters_t0.7", "model", "def return", Filters(0.7, top_k=6, top_p=0.9, min_p=0.05),
         DraftParams(k=2), sampler="coupled"),
    Case("coupled_lookup", "lookup", "there this one", Filters(top_k=4), DraftParams(k=2), echo=5,
         sampler="coupled"),
]


@pytest.fixture(scope="module")
def peaked_family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return make_family(
        tmp_path_factory.mktemp("peaked"), shape=SHAPE, extra_layer_scale=0.3, output_scale=4.0, seed=1234
    )


@pytest.fixture(scope="module")
def engines(backend: Backend, peaked_family: Family) -> Iterator[dict[str, Engine]]:
    context = ContextSettings(n_ctx=64, threads=1)
    model, lookup = Engine(backend), Engine(backend)
    model.load(PairSpec(target=str(peaked_family.target), draft=str(peaked_family.draft), context=context))
    lookup.load(PairSpec(target=str(peaked_family.target), lookup=True, context=context))
    yield {"model": model, "lookup": lookup}
    model.unload()
    lookup.unload()


def _speculative_samples(engine: Engine, prompt: list[int], case: Case) -> tuple[np.ndarray, int, int]:
    f = case.filters
    out = np.empty((N_RUNS, N_POSITIONS), dtype=np.int64)
    drafted = accepted = 0
    for i in range(N_RUNS):
        sampling = SamplingParams(
            temperature=f.temperature, top_k=f.top_k, top_p=f.top_p, min_p=f.min_p, seed=SEED0 + i,
            sampler=case.sampler,
        )
        tokens: list[int] = []
        for event in engine.generate(
            prompt, max_tokens=N_POSITIONS, sampling=sampling, draft=case.draft, ignore_eos=True
        ):
            if isinstance(event, DoneEvent):
                drafted += event.stats.drafted
                accepted += event.stats.accepted
            else:
                tokens.extend(event.tokens)
        assert len(tokens) == N_POSITIONS, tokens
        out[i] = tokens
    return out, drafted, accepted


def chi_square_against(samples: np.ndarray, exact: dict[int, float]) -> tuple[float, str]:
    """p-value of ``samples`` against the exact distribution, and a readable table of the cells."""
    n = len(samples)
    outside = sorted(set(np.unique(samples).tolist()) - set(exact))
    assert not outside, f"sampled tokens the target gives probability 0: {outside}"
    ranked = sorted(exact, key=lambda t: -exact[t])
    cells = [t for t in ranked[:MAX_CELLS] if exact[t] * n >= 5]
    counts = {t: int(np.count_nonzero(samples == t)) for t in cells}
    observed = [counts[t] for t in cells]
    expected = [exact[t] * n for t in cells]
    rest_expected = n - sum(expected)
    if rest_expected >= 5:
        observed.append(n - sum(observed))
        expected.append(rest_expected)
    else:  # too little mass left for a cell of its own: fold it into the last one
        observed[-1] += n - sum(observed)
        expected[-1] += rest_expected
    labels = [str(t) for t in cells] + ["rest"] * (len(observed) - len(cells))
    table = ", ".join(
        f"{label}: {o} vs {e:.0f} ({(o - e) / n:+.4f})" for label, o, e in zip(labels, observed, expected, strict=True)
    )
    if len(observed) < 2:
        return 1.0, table
    return float(stats.chisquare(observed, expected).pvalue), table


def _unambiguous(engine: Engine, family: Family, case: Case) -> tuple[str, list[int], list[dict[int, float]]]:
    """(text, prompt tokens, exact marginals) of the case's prompt, or of the first of FALLBACK_PROMPTS whose
    marginals have no filter boundary within BOUNDARY_TIE (with ``echo``: the text, its greedy continuation, the
    text again)."""
    with ReferenceModel(family.target, n_ctx=64) as reference:
        for text in [case.prompt, *(p for p in FALLBACK_PROMPTS if p != case.prompt)]:
            prompt = engine.tokenize_prompt(text)
            if case.echo:
                prompt = [*prompt, *reference.greedy(prompt, case.echo), *prompt[1:]]
            try:
                return text, prompt, reference.marginals(prompt, case.filters, N_POSITIONS, tie=BOUNDARY_TIE)
            except AmbiguousFilterError:
                continue
    raise AssertionError(f"{case.name}: every prompt has a filter boundary within {BOUNDARY_TIE} logits")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_speculative_sampling_follows_the_exact_target_distribution(
    case: Case, engines: dict[str, Engine], peaked_family: Family
) -> None:
    engine = engines[case.drafter]
    text, prompt, exact = _unambiguous(engine, peaked_family, case)
    samples, drafted, accepted = _speculative_samples(engine, prompt, case)
    # The case must really speculate, and the verifier must really reject some draft tokens.
    assert drafted > 0, "nothing was drafted: this case does not test speculative sampling"
    assert accepted < drafted, f"every drafted token was accepted ({accepted}/{drafted}): no rejection is tested"
    report = []
    failures = []
    for pos in range(N_POSITIONS):
        pvalue, table = chi_square_against(samples[:, pos], exact[pos])
        tv = 0.5 * sum(
            abs(np.count_nonzero(samples[:, pos] == t) / N_RUNS - exact[pos].get(t, 0.0))
            for t in set(exact[pos]) | set(np.unique(samples[:, pos]).tolist())
        )
        report.append(f"position {pos}: p={pvalue:.3g}, empirical TV={tv:.4f}; {table}")
        if pvalue < ALPHA / N_POSITIONS:
            failures.append(pos)
    summary = f"{case.name} on {text!r}: drafted {drafted}, accepted {accepted}\n" + "\n".join(report)
    assert not failures, f"speculative samples differ from the target distribution at {failures}\n{summary}"


def test_reference_marginals_are_distributions(peaked_family: Family, backend: Backend) -> None:
    """The reference itself: marginals sum to 1, position 0 equals the one-step distribution, filters hold."""
    with ReferenceModel(peaked_family.target, n_ctx=64) as reference:
        prompt = reference.tokenize("def return")
        f = Filters(top_k=4)
        marginals = reference.marginals(prompt, f, 3)
        assert [pytest.approx(sum(m.values())) for m in marginals] == [1.0, 1.0, 1.0]
        assert marginals[0] == pytest.approx(reference.distribution(prompt, f))
        assert len(marginals[0]) == 4 and len(marginals[1]) <= 16
        logits = reference.logits_after(prompt)
        assert set(marginals[0]) == set(np.argsort(-logits)[:4].tolist())
        assert reference.greedy(prompt, 1) == [int(np.argmax(logits))]
    _ = backend  # the session backend installs llama.cpp's log capture before the reference loads anything

