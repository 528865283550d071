"""`outrider generate`'s summary and `outrider bench`'s rows: the engine's in-reply speed-up as reported, and a
prediction from the per-token acceptance a (accepted / (accepted + rejections)), not accepted / drafted."""

from __future__ import annotations

from typing import Any

import pytest

from outrider.commands.generate import format_bench_table, format_summary
from outrider.engine.autodraft import expected_tokens_per_pass
from outrider.engine.measure.bench import bench_row, bench_summary, predicted_speedup
from outrider.engine.stats import GenerationStats


def _spec(**kw: Any) -> dict[str, Any]:
    # 20 passes of k = 4: 80 drafted, 48 accepted, 16 rejections -> a = 48/64 = 0.75, accepted/drafted = 0.6
    st = GenerationStats(generated=68, drafted=80, accepted=48, rejections=16, passes=20, pass_tokens=68, k_sum=80,
                         draft_s=0.16, verify_s=0.5, decode_s=0.7, step_s=0.7, plain_steps=2, plain_tps=50.0,
                         plain_equiv_s=1.36, speedup=1.36 / 0.7, speedup_low=1.7, speedup_high=2.2,
                         draft_mode="model")
    return {**st.to_dict(), **kw}


def _plain() -> dict[str, Any]:
    st = GenerationStats(generated=68, passes=68, pass_tokens=68, verify_s=1.36, decode_s=1.4, step_s=1.4,
                         plain_steps=68, plain_tps=50.0, plain_equiv_s=1.36, speedup=1.0, speedup_low=1.0,
                         speedup_high=1.0)
    return st.to_dict()


def test_prediction_uses_the_per_token_acceptance() -> None:
    spec, plain = _spec(), _plain()
    assert spec["token_acceptance"] == pytest.approx(0.75) and spec["acceptance_rate"] == pytest.approx(0.6)
    c_plain, c_draft, c_verify = 1.36 / 68, 0.16 / 80, 0.5 / 20
    expected = expected_tokens_per_pass(0.75, 4) * c_plain / (4 * c_draft + c_verify)
    assert predicted_speedup(spec, plain) == pytest.approx(expected)
    too_low = expected_tokens_per_pass(0.6, 4) * c_plain / (4 * c_draft + c_verify)
    assert predicted_speedup(spec, plain) > too_low * 1.15  # accepted/drafted would under-predict
    # records from before token_acceptance existed fall back to accepted / drafted
    old = {k: v for k, v in spec.items() if k != "token_acceptance"}
    assert predicted_speedup(old, plain) == pytest.approx(too_low)


def test_bench_row_names_the_measured_ab_and_the_prediction() -> None:
    row = bench_row("p", "prompt", {"plain": [_plain()], "spec": [_spec()]})
    assert row["ab_speedup"] == pytest.approx(row["spec_decode_tps"] / row["plain_decode_tps"])  # the A/B of whole runs
    assert row["predicted_speedup"] == pytest.approx(predicted_speedup(_spec(), _plain()))
    assert row["token_acceptance"] == pytest.approx(0.75)
    assert row["in_reply_speedup"] == pytest.approx(_spec()["speedup"])
    summary = bench_summary([row])
    assert summary["median_predicted_speedup"] == pytest.approx(row["predicted_speedup"])
    table = format_bench_table([row])
    assert "A/B speed-up" in table and "predicted" in table and "accepted / (accepted + rejections)" in table


def test_summary_prints_the_in_reply_speedup_with_its_interval() -> None:
    s = _spec()
    text = format_summary(s, "length")
    assert "speed-up 1.94× (1.70–2.20) vs plain 50.0 tok/s measured in this reply (20 passes, 2 plain)" in text
    wide = format_summary({**s, "speedup_low": 1.2, "speedup_high": 2.6}, "length")
    assert "speed-up 1.20–2.60×, uncertain vs plain" in wide
    assert "per-token a 75.0%" in text
    none = format_summary(GenerationStats(generated=3, passes=3, pass_tokens=3).to_dict(), "stop")
    assert "speed-up not measured" in none
