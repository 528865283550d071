"""The fitted pass cost's growth g reaches the reply's statistics (``GenerationStats.pass_growth``): the GUI's
"you are here" chart prices a draft of k tokens with it (c_verify(k + 1) = 1 + g · k one-token passes)."""

from __future__ import annotations

import random

import pytest

from outrider.engine.speedup import PassTiming
from outrider.engine.speedup_fit import estimate_speedup
from outrider.engine.stats import GenerationStats, PlainRateMeter

PLAIN_S = 0.010
GROWTH = 0.3  # each further token of a pass costs 30 % of a one-token pass


def _steps() -> list[PassTiming]:
    rng = random.Random(3)
    steps = []
    for i in range(60):
        batch = 1 if i % 8 == 1 else rng.choice([2, 3, 5])
        target = PLAIN_S * (1 + GROWTH * (batch - 1)) * (1 + rng.uniform(-0.02, 0.02))
        steps.append(PassTiming(batch, target, target + 0.002 * (batch > 1), batch))
    return steps


def test_the_fit_reports_the_growth_of_the_pass_cost() -> None:
    """Broken on purpose (the estimate's growth left at its default 0) this read 0.0."""
    est = estimate_speedup(_steps())
    assert est is not None and est.growth == pytest.approx(GROWTH, rel=0.1)


def test_the_meter_writes_it_into_the_statistics_and_clears_it_with_the_figure() -> None:
    stats = GenerationStats()
    meter = PlainRateMeter(stats, clock=lambda: 0.0)
    for p in _steps():
        meter.add_step(batch=p.batch, pass_tokens=p.pass_tokens, step_s=p.step_s, target_s=p.target_s)
    meter.finish()
    assert stats.pass_growth == pytest.approx(GROWTH, rel=0.1) and stats.speedup is not None
    empty = GenerationStats(pass_growth=0.5)
    PlainRateMeter(empty, clock=lambda: 0.0).finish()  # nothing measured: no figure, no growth
    assert empty.pass_growth is None
