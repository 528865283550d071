"""Automatic draft length's learning kept across loads: the snapshot, the file, the pair's key.

The policies are driven on the recorded costs of test_autodraft_prompt_score.py (bench_mtp_steps.py's dense
``glm4moe`` + NextN target): a one-token pass 4.3 ms, a verify of 2-5 tokens 8-11 ms, 0.7 ms per drafted token.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from outrider.engine.autodraft import WINDOW, AutoDraftLength
from outrider.engine.learned_draft import KEEP_PAIRS, LearnedDraftError, LearnedDraftLengths, pair_key
from outrider.engine.params import ContextSettings, ModelSettings, PairSpec

ONE = 0.0043
BATCH = {1: ONE, 2: 0.0080, 3: 0.0090, 4: 0.0100, 5: 0.0110}
DRAFT = 0.0007


def _reply(policy: AutoDraftLength, prompt_hits: int, steps: int, phase: int) -> list[int]:
    """One scripted reply: the prompt scored ``prompt_hits`` of 16, then ``steps`` steps on the recorded costs,
    accepted 3 of 4 tokens (one rejection every fourth drafting step, shifted by ``phase``); the choices made."""
    policy.start_reply()
    policy.observe_prompt(prompt_hits, 16)
    chosen = []
    for step in range(steps):
        k = policy.choose()
        chosen.append(k)
        batch = min(k + 1, 5)
        if k == 0:
            policy.observe(batch=1, verify_s=ONE, drafted=0, accepted=0, draft_s=0.0)
            if policy.wants_shadow and step % 4 == 3:
                policy.observe_shadow(3, 4)
            continue
        accepted = k - 1 if (step + phase) % 4 == 0 else k
        policy.observe(batch=batch, verify_s=BATCH[batch], drafted=k, accepted=accepted, draft_s=k * DRAFT)
    return chosen


def _taught(score_first: bool) -> AutoDraftLength:
    policy = AutoDraftLength(k_max=8, score_first=score_first, k_start=2)
    for phase in range(3):
        _reply(policy, 9, 20, phase)
    return policy


@pytest.mark.parametrize("score_first", [True, False], ids=["mtp", "draft model"])
def test_a_restored_policy_chooses_as_the_one_it_was_taken_from(score_first: bool) -> None:
    """Taken after three replies, through JSON, restored: on the same next replies it chooses the same k at every
    step as the policy that went on, and a fresh policy does not (so the comparison can tell).

    Breaking it (the prompt calibration's offset left out of ``restore``): the MTP policy's next reply started at
    another depth from its first step."""
    original = _taught(score_first)
    restored = AutoDraftLength.restore(json.loads(json.dumps(original.snapshot())))
    fresh = AutoDraftLength(k_max=8, score_first=score_first, k_start=2)
    assert restored.snapshot() == original.snapshot()
    went_on = [_reply(original, 9, 16, phase) for phase in (1, 2)]
    assert [_reply(restored, 9, 16, phase) for phase in (1, 2)] == went_on
    assert [_reply(fresh, 9, 16, phase) for phase in (1, 2)] != went_on


def test_a_restored_policy_knows_the_costs_before_its_first_reply() -> None:
    """What a reload gains: the costs and the prompt calibration are there before any pass of the new load."""
    restored = AutoDraftLength.restore(_taught(True).snapshot())
    assert restored.model.best_k() is not None
    assert restored.calibration.offset is not None
    assert AutoDraftLength(k_max=8, score_first=True).model.best_k() is None


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.pop("draft_per_token"), "draft_per_token is missing"),
    (lambda s: s.update(version=99), "version 99"),
    (lambda s: s.update(k_max="eight"), "k_max must be a whole number"),
    (lambda s: s.update(accepted=-1.0), "accepted must be a number from 0"),
    (lambda s: s.update(prompt_offset=2.0), "prompt_offset must be a number from 0.0 to 0.5"),
    (lambda s: s.update(score_first=1), "score_first must be true or false"),
    (lambda s: s["verify"].update({"40": {"samples": [0.01], "stamp": 1}}), "batch size '40'"),
    (lambda s: s["verify"].update({"\u00b2": {"samples": [0.01], "stamp": 1}}), "batch size '\u00b2'"),
    (lambda s: s["verify"]["2"].update(samples=[0.01, -0.5]), "verify.2.samples must be a list"),
    (lambda s: s.update(draft_per_token=[0.001] * (WINDOW + 1)), f"at most {WINDOW} positive timings"),
])
def test_a_snapshot_that_does_not_fit_is_refused_by_name(change: Any, message: str) -> None:
    snapshot = _taught(True).snapshot()
    change(snapshot)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        AutoDraftLength.restore(snapshot)


# -- the file ---------------------------------------------------------------------------------------------------
def test_a_policy_remembered_is_recalled_under_its_key_only(tmp_path: Path) -> None:
    store = LearnedDraftLengths(tmp_path / "sub" / "draft-length.json")
    assert store.recall("a") is None  # no file yet
    policy = _taught(True)
    store.remember("a", policy)
    recalled = store.recall("a")
    assert recalled is not None and recalled.snapshot() == policy.snapshot()
    assert store.recall("b") is None
    assert [p.name for p in store.path.parent.iterdir()] == ["draft-length.json"]  # no temporary left behind


def test_an_unreadable_file_is_a_named_error_and_is_written_over(tmp_path: Path) -> None:
    """A file cut short (a disk that filled up, an editor): recall says which file and what is wrong; the next
    save replaces it with a good one."""
    path = tmp_path / "draft-length.json"
    path.write_text('{"format": 1, "pairs": {"a": ', encoding="utf-8")
    store = LearnedDraftLengths(path)
    with pytest.raises(LearnedDraftError, match="is not JSON") as caught:
        store.recall("a")
    assert str(path) in str(caught.value)
    store.remember("a", _taught(False))
    assert store.recall("a") is not None


def test_an_entry_that_does_not_fit_is_a_named_error(tmp_path: Path) -> None:
    path = tmp_path / "draft-length.json"
    snapshot = _taught(True).snapshot()
    snapshot["shadow_interval"] = 0
    path.write_text(json.dumps({"format": 1, "pairs": {"a": {"saved": 1.0, "policy": snapshot}}}), encoding="utf-8")
    with pytest.raises(LearnedDraftError, match="shadow_interval must be a whole number from 1"):
        LearnedDraftLengths(path).recall("a")
    path.write_text(json.dumps([1, 2]), encoding="utf-8")
    with pytest.raises(LearnedDraftError, match="not a file of learned draft lengths"):
        LearnedDraftLengths(path).recall("a")


def test_a_file_of_another_format_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "draft-length.json"
    path.write_text(json.dumps({"format": 2, "pairs": {"a": {"policy": {}}}}), encoding="utf-8")
    assert LearnedDraftLengths(path).recall("a") is None


def test_the_pairs_most_recently_saved_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LearnedDraftLengths(tmp_path / "draft-length.json")
    policy = _taught(False)
    clock = iter(range(1000))
    monkeypatch.setattr("outrider.engine.learned_draft.time.time", lambda: float(next(clock)))
    for i in range(KEEP_PAIRS + 3):
        store.remember(f"pair {i}", policy)
    store.remember("pair 0", policy)  # used again: now the most recent
    kept = json.loads(store.path.read_text(encoding="utf-8"))["pairs"]
    assert len(kept) == KEEP_PAIRS
    # pair 0 went first (at the 33rd save), came back, and pushed out the oldest then: pairs 1 to 3 are gone.
    assert set(kept) == {"pair 0", *(f"pair {i}" for i in range(4, KEEP_PAIRS + 3))}


# -- the key ----------------------------------------------------------------------------------------------------
@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("target.gguf", "draft.gguf"):
        made[name] = tmp_path / name
        made[name].write_bytes(b"GGUF" + bytes(60))
    return made


def test_the_key_is_the_same_for_a_reload_and_differs_with_what_costs_depend_on(files: dict[str, Path]) -> None:
    spec = PairSpec(target=str(files["target.gguf"]), draft=str(files["draft.gguf"]),
                    context=ContextSettings(n_ctx=1024, threads=2), learned_draft="/somewhere/draft-length.json")
    key = pair_key(spec, "CPU")
    assert pair_key(dataclasses.replace(spec, learned_draft="/elsewhere.json"), "CPU") == key
    assert pair_key(spec, "CUDA") != key
    assert pair_key(dataclasses.replace(spec, context=ContextSettings(n_ctx=1024, threads=4)), "CPU") != key
    assert pair_key(dataclasses.replace(spec, target_settings=ModelSettings(gpu_layers=10)), "CPU") != key
    assert pair_key(dataclasses.replace(spec, draft=None, lookup=True), "CPU") != key
    # The draft file replaced by another of the same name (another quantisation): another pair.
    files["draft.gguf"].write_bytes(b"GGUF" + bytes(80))
    assert pair_key(spec, "CPU") != key
    stat = files["draft.gguf"].stat()
    resized = pair_key(spec, "CPU")
    os.utime(files["draft.gguf"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert pair_key(spec, "CPU") != resized
