"""Plausible sampler bugs, planted into the engine by monkeypatching, to measure and test ``outrider verify``'s power.

Each bug is a context manager that replaces one function of the engine's sampling step for the duration of the
block (in this process: ``outrider verify --in-process``), with what a plausible wrong implementation would do:

* ``always_accept`` — the rejection sampler accepts every draft token (no min(1, p/q) test);
* ``residual_from_p`` — after a rejection it draws from p instead of normalise(max(p - q, 0));
* ``pmin_on_drawn`` — the draft model judges p-min on the probability of the token it drew, after drawing it (the
  exactness contract says: decide from q before the draw);
* ``accept_at_t1`` — the acceptance ratio p(x)/q(x) is computed from the temperature-1 distributions whatever the
  temperature (the filters kept): invisible at temperature 1;
* ``coupled_always_accept`` — the coupled sampler accepts the draft's Gumbel-max choice without comparing it with
  the target's.

``SETTINGS`` are the verify settings the bugs are measured in (the options after the pair).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from outrider.engine import drafters, sampling
from outrider.engine.draft import EMPTY_DRAFT, Draft
from outrider.engine.drafters import ModelDraft, common_prefix_length
from outrider.engine.params import SamplingParams
from outrider.engine.sampling import SparseDist, distribution, draft_token, greedy_token
from support.tiny_gguf import Family, TinyShape, make_family

SETTINGS: dict[str, list[str]] = {
    "T 0.7": ["--temperature", "0.7"],
    "lookup": ["--temperature", "0.7"],  # with --lookup instead of --draft
    "p-min 0.5": ["--temperature", "0.7", "--draft-p-min", "0.5"],
    "p-min 0.75 + draft-min 2": ["--temperature", "0.7", "--draft-p-min", "0.75", "--draft-min", "2"],
}


def _tempered(dist: SparseDist, temperature: float) -> SparseDist:
    """The same support at temperature 1 again: p_T ∝ exp(l / T), so p_1 ∝ p_T^T."""
    probs = dist.probs**temperature
    return SparseDist(dist.ids, probs / probs.sum())


def _pmin_on_drawn_propose(
    self: ModelDraft, committed: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
    p_min: float, draft_min: int = 0,
) -> Draft:
    """``ModelDraft.propose`` with the p-min test moved after the draw, on the drawn token's probability."""
    room = self.context.n_ctx - len(committed) - 1
    k = min(k, room)
    if k <= 0:
        return EMPTY_DRAFT
    synced = len(committed) - min(common_prefix_length(self.cached, committed), len(committed) - 1)
    self._sync(committed)
    tokens: list[int] = []
    dists: list[SparseDist] | None = None if params.greedy else []
    while True:
        logits = self._logits(-1)
        if params.greedy:
            token = greedy_token(logits)
        else:
            q = distribution(logits, params)
            token = draft_token(q, params, len(committed) + len(tokens))
            if p_min > 0 and q.prob_of(token) < p_min:  # THE BUG: judged on the token just drawn
                break
            assert dists is not None
            dists.append(q)
        tokens.append(token)
        if len(tokens) >= k:
            break
        self.context.decode([token], logits="last")
        self.cached.append(token)
    return Draft(tokens, dists, 0.0, synced)


def _coupled_always_accept(tokens: Sequence[int], target_dist: Callable[[int], SparseDist],
                           qs: Sequence[SparseDist], params: SamplingParams, position: int) -> tuple[int, int]:
    n = len(tokens)
    return n, sampling.gumbel_argmax([target_dist(n)], [position + n], sampling.draws_of(params))[0]


@contextlib.contextmanager
def planted(bug: str, temperature: float) -> Iterator[None]:
    """The engine with ``bug`` (a name of this module's docstring) for the duration of the block."""
    with pytest.MonkeyPatch.context() as mp:
        if bug == "always_accept":
            mp.setattr(sampling, "accept_draft_token", lambda token, p, q, u: True)
        elif bug == "residual_from_p":
            mp.setattr(sampling, "residual", lambda p, q: p)
        elif bug == "pmin_on_drawn":
            mp.setattr(drafters.ModelDraft, "propose", _pmin_on_drawn_propose)
        elif bug == "accept_at_t1":
            right = sampling.accept_draft_token
            mp.setattr(sampling, "accept_draft_token", lambda token, p, q, u: right(
                token, _tempered(p, temperature), _tempered(q, temperature) if q.ids.shape[0] > 1 else q, u))
        elif bug == "coupled_always_accept":
            mp.setattr(sampling, "verify_sampled", _coupled_always_accept)
            import outrider.engine.speculative as speculative

            mp.setattr(speculative, "verify_sampled", _coupled_always_accept)
        elif bug != "none":
            raise ValueError(f"unknown planted bug {bug!r}")
        yield


BUGS = ("always_accept", "residual_from_p", "pmin_on_drawn", "accept_at_t1", "coupled_always_accept")
# Where each bug can show: the settings it is measured in (the first is its headline row), and its sampler.
WHERE: dict[str, tuple[tuple[str, str], ...]] = {
    "always_accept": (("T 0.7", "rejection"), ("lookup", "rejection")),
    "residual_from_p": (("T 0.7", "rejection"), ("lookup", "rejection")),
    "pmin_on_drawn": (("p-min 0.5", "rejection"), ("p-min 0.75 + draft-min 2", "rejection")),
    "accept_at_t1": (("T 0.7", "rejection"), ("lookup", "rejection")),
    "coupled_always_accept": (("T 0.7", "coupled"),),
}


SMALL_SHAPE = TinyShape(n_layer=4, n_embd=128, n_head=4, n_ff=256)  # the test suite's tiny_family
# test_sampling_exact's family: peaked next-token distributions, a draft (the first layer) that often disagrees.
PEAKED_SHAPE = TinyShape(n_layer=3, n_embd=64, n_head=2, n_ff=128)


def family_of(name: str, directory: Path) -> Family:
    if name == "small":
        return make_family(directory, shape=SMALL_SHAPE, extra_layer_scale=0.2)
    return make_family(directory, shape=PEAKED_SHAPE, extra_layer_scale=0.3, output_scale=4.0, seed=1234)


def verify_once(pair: list[str], setting: str, sampler: str, seed: int, samples: int | None, tokens: int | None,
                prompt: str) -> tuple[int, dict[str, Any]]:
    """One ``outrider verify --in-process --json`` (its exit status, its JSON object); ``samples`` / ``tokens``
    None: verify's defaults."""
    from outrider.cli import main as outrider_main

    size = [*(["--samples", str(samples)] if samples else []), *(["--tokens", str(tokens)] if tokens else [])]
    argv = ["verify", *pair, *SETTINGS[setting], "--sampler", sampler, "--seed", str(seed), *size, "--prompt",
            prompt, "--ctx", "512", "--threads", "1", "--k", "3", "--in-process", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = outrider_main(argv)
    return code, json.loads(out.getvalue())


def echo_prompt(target: Path, prompt: str, n: int = 12) -> str:
    """``prompt`` + the target's greedy continuation of it + ``prompt`` again: prompt lookup then proposes what the
    target itself continued with (as in test_sampling_exact's lookup case), so it drafts at most positions."""
    from outrider.engine.engine import Engine
    from outrider.engine.params import ContextSettings, PairSpec, SamplingParams

    engine = Engine()
    try:
        engine.load(PairSpec(target=str(target), context=ContextSettings(n_ctx=256, threads=1)))
        events = list(engine.generate(engine.tokenize_prompt(prompt), max_tokens=n, sampling=SamplingParams()))
        return f"{prompt}{events[-1].text} {prompt}"  # type: ignore[union-attr]
    finally:
        engine.close()
