"""The in-reply speed-up (PlainRateMeter) and the derived statistics, on synthetic step timings."""

from __future__ import annotations

import pytest

from outrider.engine.stats import GenerationStats, PlainRateMeter


def _run(steps: list[tuple[int, float, float | None]]) -> GenerationStats:
    stats = GenerationStats()
    meter = PlainRateMeter(stats)
    for tokens, step_s, plain_s in steps:
        meter.add_step(pass_tokens=tokens, step_s=step_s, plain_s=plain_s)
    return stats


def test_plain_decoding_reads_exactly_one() -> None:
    stats = _run([(1, 0.010 + 0.001 * i, 0.010 + 0.001 * i) for i in range(20)])
    assert stats.speedup == pytest.approx(1.0)
    assert stats.plain_tps == pytest.approx(20 / sum(0.010 + 0.001 * i for i in range(20)))


def test_speedup_is_tokens_times_plain_cost_over_time() -> None:
    # plain step 10 ms/token; speculative steps yield 3 tokens in 15 ms: 2x on those steps.
    steps = [(1, 0.010, 0.010)] + [(3, 0.015, None)] * 10 + [(1, 0.010, 0.010)]
    stats = _run(steps)
    assert stats.speedup == pytest.approx((0.010 + 10 * 3 * 0.010 + 0.010) / (0.010 + 10 * 0.015 + 0.010))


def test_no_speedup_before_a_plain_measurement() -> None:
    stats = _run([(3, 0.015, None)] * 4)
    assert stats.speedup is None and stats.speedup_error is None


def test_speculative_steps_are_valued_at_the_plain_cost_around_them() -> None:
    """A load change mid-reply: plain steps get 3x slower and so do speculative ones; the ratio stays 2x."""
    fast = [(1, 0.010, 0.010)] + [(4, 0.020, None)] * 5
    slow = [(1, 0.030, 0.030)] + [(4, 0.060, None)] * 5 + [(1, 0.030, 0.030)]
    stats = _run(fast + slow)
    # Only the segment that straddles the change is valued at the mean of 10 and 30 ms.
    spec_equiv = 5 * 4 * 0.020 + 5 * 4 * 0.030
    spec_time = 5 * 0.020 + 5 * 0.060
    want = (spec_equiv + 0.010 + 0.030 + 0.030) / (spec_time + 0.010 + 0.030 + 0.030)
    assert stats.speedup == pytest.approx(want)
    assert 1.5 < stats.speedup < 2.5


def test_a_naive_baseline_would_be_fooled_by_load_but_this_is_not() -> None:
    """Speculation at a true 2x throughout, the machine 3x slower in the second half: stays near 2x."""
    steps: list[tuple[int, float, float | None]] = []
    for block in range(8):
        cost = 0.010 if block < 4 else 0.030
        steps.append((1, cost, cost))
        steps += [(4, 2 * cost, None)] * 7
    stats = _run(steps)
    assert stats.speedup == pytest.approx(2.0, rel=0.1)


def test_uncertainty_from_the_spread_of_plain_steps() -> None:
    steady = _run([(1, 0.010, 0.010), (2, 0.010, None)] * 10)
    noisy = _run([(1, 0.005 + 0.010 * (i % 2), 0.005 + 0.010 * (i % 2)) for i in range(20)])
    assert steady.speedup_error == pytest.approx(0.0, abs=1e-6)
    assert noisy.speedup_error is not None and noisy.speedup_error > 0.05


def test_token_acceptance_and_tokens_per_pass() -> None:
    s = GenerationStats(drafted=40, accepted=30, rejections=6, passes=10, pass_tokens=37, generated=36)
    assert s.acceptance_rate == pytest.approx(0.75)
    assert s.token_acceptance == pytest.approx(30 / 36)
    assert s.tokens_per_pass == pytest.approx(3.7)
    d = s.to_dict()
    for key in ("token_acceptance", "speedup", "speedup_error", "plain_tps", "tokens_per_pass"):
        assert key in d
