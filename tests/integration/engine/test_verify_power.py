"""``outrider verify`` catches plausible sampler bugs at its default size, and passes the correct engine.

Each bug of ``support/planted_bugs.py`` is monkeypatched into the engine's sampling step (``--in-process``) and
verify runs with its defaults (samples, tokens, alpha) in the setting where the bug acts, on the peaked tiny family
pair (``test_sampling_exact``'s: its draft often disagrees with the target). The catch rates over 10 seeds each are
measured by ``tests/benchmarks/bench_verify_power.py`` (docs/metrics.md); here one seed per bug, fixed before
looking (0), must be caught, and the unpatched engine must pass with both samplers.
Before the pooled tests against the target's exact distribution, verify (then only a per-position speculative-vs-
plain chi-square) mostly passed "residual from p", "p-min on the drawn token" and "accept at temperature 1" on this
pair: their per-position p-values have medians 0.003, 0.005 and 0.03 over 10 runs, above the Bonferroni threshold
(6e-4); each is now caught by the draft-direction or the top-token test (docs/metrics.md).
"""

from __future__ import annotations

import pytest

from support.planted_bugs import WHERE, echo_prompt, family_of, planted, verify_once
from support.tiny_gguf import Family

PROMPT = "a b c a b c"


@pytest.fixture(scope="module")
def peaked(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return family_of("peaked", tmp_path_factory.mktemp("peaked-verify"))


def _run(family: Family, setting: str, sampler: str) -> dict[str, object]:
    pair = ["--target", str(family.target)]
    pair += ["--lookup"] if setting == "lookup" else ["--draft", str(family.draft)]
    prompt = echo_prompt(family.target, PROMPT) if setting == "lookup" else PROMPT
    code, obj = verify_once(pair, setting, sampler, 0, None, None, prompt)
    assert code == (0 if obj["exact"] else 1)
    return obj


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(WHERE))
def test_verify_catches_the_planted_bug(bug: str, peaked: Family) -> None:
    setting, sampler = WHERE[bug][0]
    with planted(bug, 0.7):
        obj = _run(peaked, setting, sampler)
    assert obj["sampling"]["drafted"] > 0  # type: ignore[index]
    assert obj["exact"] is False, f"verify passed the planted bug {bug}: {obj['sampling']['pit']}"  # type: ignore[index]


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["rejection", "coupled"])
def test_verify_passes_the_correct_engine(sampler: str, peaked: Family) -> None:
    obj = _run(peaked, "T 0.7", sampler)
    assert obj["sampling"]["drafted"] > 0  # type: ignore[index]
    assert obj["exact"] is True, obj["sampling"]["pit"]  # type: ignore[index]
