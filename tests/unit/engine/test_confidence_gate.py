"""The confidence gate (engine/confidence_gate.py) and automatic depth's use of it (``first_min``).

The break-even shares are computed here by hand from the recorded costs, not by the cost model's code. The
confidence records are the generated dense head's (``bench_mtp_confidence.py``, depth 4, 130 drafts: first tokens
of confidence 0.1-0.2 kept 0 of 2, 0.2-0.3 kept 16 of 49, 0.3 and more kept 79 of 79) and the hybrid head's
(0.1-0.2 kept 88 of 117, 0.2-0.3 kept 18 of 19, 0.4-0.5 kept 3 of 3).

Broken on purpose (the threshold read as the bottom edge of the gated band instead of its top): the dense head's
gate on a busy CPU reads 0.2, and drafts of confidence 0.2-0.3 — a third of them kept — go on being verified; the
test of it fails.
"""

from __future__ import annotations

import json

import pytest

from outrider.engine.autodraft import AutoDraftLength
from outrider.engine.confidence_gate import GATE_BANDS, GATE_EVIDENCE, ConfidenceGate

DENSE_FIRST = ((0.15, 0, 2), (0.25, 16, 49), (0.35, 19, 19), (0.45, 17, 17), (0.55, 8, 8), (0.7, 26, 26),
               (0.9, 9, 9))  # (confidence, kept, reached) per band
HYBRID_FIRST = ((0.15, 88, 117), (0.25, 18, 19), (0.45, 3, 3))

# Costs (seconds) recorded on the 8 x 768 dense target: one thread beside a CPU-bound process (a pass of 2-5 tokens
# about 3x a pass of 1; bench_mtp_confidence's notes in docs/benchmarks.md), and a GPU-like profile (a pass of 5
# costs 1.1x one, a drafted token 5 % of a pass).
BUSY_CPU = {1: 3.7e-3, 2: 10.5e-3, 3: 10.6e-3, 5: 11.5e-3}
BUSY_DRAFT = 0.5e-3
GPU_LIKE = {1: 10e-3, 2: 10.3e-3, 3: 10.6e-3, 5: 11e-3}
GPU_DRAFT = 0.5e-3


def _outcomes(kept: int, reached: int) -> list[bool]:
    """``kept`` of ``reached`` outcomes spread evenly (the gate's counts decay: no stretch of one kind at the end)."""
    return [(i + 1) * kept // reached > i * kept // reached for i in range(reached)]


def _gate(records: tuple[tuple[float, int, int], ...]) -> ConfidenceGate:
    """A gate fed the records round-robin over the bands (as replies mix them), one observation per first token."""
    gate = ConfidenceGate()
    queues = [[(c, o) for o in _outcomes(kept, reached)] for c, kept, reached in records]
    while any(queues):
        for q in queues:
            if q:
                gate.observe(*q.pop(0))
    return gate


def _policy(costs: dict[int, float], draft: float, accepted_draft: int = 4) -> AutoDraftLength:
    """An MTP head's policy with ``costs`` timed at load and drafts of 4 timed and kept whole, acceptance ~0.9."""
    policy = AutoDraftLength(k_max=16, score_first=True)
    policy.seed_costs({n: [s] * 3 for n, s in costs.items()}, [draft] * 3)
    for _ in range(12):
        policy.observe(batch=5, verify_s=costs[5], drafted=4, accepted=accepted_draft, draft_s=4 * draft)
        policy.observe(batch=1, verify_s=costs[1], drafted=0, accepted=0, draft_s=0.0)
    policy.observe(batch=5, verify_s=costs[5], drafted=4, accepted=1, draft_s=4 * draft)
    return policy


def test_no_evidence_gates_nothing() -> None:
    gate = ConfidenceGate()
    assert gate.threshold(0.9) == 0.0
    gate.observe(0.05, False)
    gate.observe(0.05, False)  # two rejections: under GATE_EVIDENCE
    assert GATE_EVIDENCE > 2
    assert gate.threshold(0.9) == 0.0


def test_a_band_kept_less_than_break_even_is_gated_up_to_its_top_edge() -> None:
    gate = _gate(DENSE_FIRST)
    # Band 0.2-0.3: (kept + overall share) / (reached + 1) with overall 95/130: (16 + 0.73) / 50 = 0.33.
    assert gate.kept_share(2) == pytest.approx((16 + 95 / 130) / 50, abs=0.05)
    assert gate.threshold(0.73) == pytest.approx(0.3)
    # Break-even low (a GPU): nothing is kept so rarely that dropping it pays.
    assert gate.threshold(0.3) == 0.0


def test_the_gate_stops_at_the_first_band_that_pays() -> None:
    gate = _gate(((0.15, 0, 10), (0.25, 10, 10), (0.35, 0, 10)))
    # 0.3-0.4 is kept less often than 0.2-0.3, but a threshold gates everything under it: not past a band that pays.
    assert gate.threshold(0.7) == pytest.approx(0.2)


def test_bands_without_evidence_under_a_gated_one_are_gated_with_it() -> None:
    gate = _gate(((0.35, 0, 6), (0.75, 6, 6)))
    assert gate.threshold(0.7) == pytest.approx(0.4)


def test_a_band_near_break_even_is_not_gated() -> None:
    """The hybrid head's 0.1-0.2 band, kept 0.75, against a quiet CPU's break-even of 0.55: no gate."""
    gate = _gate(HYBRID_FIRST)
    assert gate.threshold(0.55) == 0.0


def test_a_band_kept_as_often_as_the_rest_is_not_gated() -> None:
    """Where only a near-certain first token would pay (break-even 0.95), the hybrid's 0.1-0.2 band — most of its
    first tokens, kept about as often as all of them — is still not the gate's to close: its confidence does not
    tell those drafts apart, and whether they pay is the choice of k. The dense head's 0.2-0.3 band is."""
    assert _gate(HYBRID_FIRST).threshold(0.95) == 0.0
    assert _gate(DENSE_FIRST).threshold(0.95) == pytest.approx(0.3)


@pytest.mark.parametrize(("later", "count"), [((0.75, True), 150), ((0.25, True), 30)])
def test_a_gated_band_opens_again(later: tuple[float, bool], count: int) -> None:
    """Old evidence fades while other bands are seen (0.75 kept, 150 times), and a dropped draft's outcome (the
    head's guess against the plain step's token) moves its band like a verified one: a band gated on a bad stretch
    opens once its first tokens are kept again (0.25 kept, 30 times)."""
    gate = ConfidenceGate()
    for _ in range(6):
        gate.observe(0.75, True)
        gate.observe(0.25, False)
    assert gate.threshold(0.7) == pytest.approx(0.3)
    for _ in range(count):
        gate.observe(*later)
    assert gate.threshold(0.7) == 0.0


def test_break_even_on_recorded_costs() -> None:
    """q* = ((k - 1) c_draft + c_verify(k + 1)) / c_verify(1) - 1, over 1 + the later positions' expected kept."""
    busy = _policy(BUSY_CPU, BUSY_DRAFT)
    m = busy.model
    a = m.acceptance
    assert a is not None
    falloff = m.falloff()
    later = a * falloff[2] + a * falloff[2] * a * falloff[3] + a * falloff[2] * a * falloff[3] * a * falloff[4]
    expected = ((3 * BUSY_DRAFT + BUSY_CPU[5]) / BUSY_CPU[1] - 1) / (1 + later)
    assert m.first_break_even(4) == pytest.approx(expected, rel=0.02)
    assert 0.6 < expected < 0.9
    gpu = _policy(GPU_LIKE, GPU_DRAFT).model.first_break_even(4)
    assert gpu is not None and gpu < 0.2


def test_first_min_gates_the_dense_heads_doubtful_drafts_on_a_busy_cpu_only() -> None:
    for costs, draft, expected in ((BUSY_CPU, BUSY_DRAFT, 0.3), (GPU_LIKE, GPU_DRAFT, 0.0)):
        policy = _policy(costs, draft)
        for c, kept, reached in DENSE_FIRST:
            for outcome in _outcomes(kept, reached):
                policy.observe_first(c, outcome)
        assert policy.first_min(4) == pytest.approx(expected), costs


def test_first_min_is_none_without_a_gate_and_zero_before_costs() -> None:
    assert AutoDraftLength(k_max=16).first_min(4) is None  # a draft model's policy: no gate
    fresh = AutoDraftLength(k_max=16, score_first=True)
    assert fresh.first_min(4) == 0.0
    fresh.observe_first(0.25, False)
    assert fresh.first_min(4) == 0.0


def test_the_gate_travels_in_a_snapshot() -> None:
    policy = _policy(BUSY_CPU, BUSY_DRAFT)
    for c, kept, reached in DENSE_FIRST:
        for outcome in _outcomes(kept, reached):
            policy.observe_first(c, outcome)
    restored = AutoDraftLength.restore(json.loads(json.dumps(policy.snapshot())))
    assert restored.gate is not None and policy.gate is not None
    assert restored.gate.reached == pytest.approx(policy.gate.reached)
    assert restored.gate.kept == pytest.approx(policy.gate.kept)
    assert restored.first_min(4) == policy.first_min(4) == pytest.approx(0.3)


def test_a_snapshot_from_before_the_gate_restores_an_empty_one() -> None:
    snapshot = _policy(BUSY_CPU, BUSY_DRAFT).snapshot()
    del snapshot["gate_reached"], snapshot["gate_kept"]
    restored = AutoDraftLength.restore(snapshot)
    assert restored.gate is not None and restored.gate.reached == [0.0] * GATE_BANDS


@pytest.mark.parametrize(("field", "value", "message"), [
    ("gate_kept", [5.0] + [0.0] * (GATE_BANDS - 1), "more first tokens kept"),
    ("gate_reached", [1.0] * (GATE_BANDS - 1), "gate_reached must be a list of"),
    ("gate_kept", [-1.0] + [0.0] * (GATE_BANDS - 1), "gate_kept must be a list of"),
])
def test_a_damaged_gate_in_a_snapshot_is_refused(field: str, value: list[float], message: str) -> None:
    snapshot = _policy(BUSY_CPU, BUSY_DRAFT).snapshot()
    snapshot[field] = value
    with pytest.raises(ValueError, match=message):
        AutoDraftLength.restore(snapshot)


def test_a_dropped_draft_charges_its_drafting_to_waking() -> None:
    """A step whose draft was dropped is a plain step that paid a head pass: the ledger of waking charges it."""
    saved = []
    for draft_s in (0.0, 1e-3):
        policy = _policy(BUSY_CPU, BUSY_DRAFT)
        policy.start_reply()
        policy.observe(batch=1, verify_s=BUSY_CPU[1], drafted=0, accepted=0, draft_s=0.0)
        before = policy.ledger.totals()[0]
        policy.observe(batch=1, verify_s=BUSY_CPU[1], drafted=0, accepted=0, draft_s=draft_s)
        saved.append(policy.ledger.totals()[0] - before)
    assert saved[1] == pytest.approx(saved[0] - 1e-3)
