"""The `outrider verify` command-line contract, through the real engine process on a generated tiny family pair."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.processes import WAIT_LIMIT_S, engine_of, release, wait_for_cpu
from support.tiny_gguf import Family


def outrider(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-m", "outrider.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def pair(family: Family) -> list[str]:
    return ["verify", "--target", str(family.target), "--draft", str(family.draft), "--prompt", "the model",
            "--ctx", "256"]


def check_shape(obj: dict[str, object], samples: int, tokens: int) -> None:
    """The --json object, exactly (docs/engine.md, "Checking exactness")."""
    assert set(obj) == {"greedy", "sampling", "identity", "exact"}
    greedy, sampling = obj["greedy"], obj["sampling"]
    assert isinstance(greedy, dict) and isinstance(sampling, dict) and isinstance(obj["exact"], bool)
    assert set(greedy) == {"identical", "first_divergence"}
    assert isinstance(greedy["identical"], bool)
    assert greedy["first_divergence"] is None or isinstance(greedy["first_divergence"], int)
    assert set(sampling) == {"samples", "drafted", "accepted", "sampler", "positions", "pit", "detectable_tv"}
    assert sampling["samples"] == samples and sampling["sampler"] in ("coupled", "rejection")
    pit = sampling["pit"]
    assert isinstance(pit, dict) and pit["values"] == samples * tokens
    assert {"ks_p", "top_p", "draft_p", "outside", "detectable_tv", "detectable_top"} <= set(pit)
    assert sampling["detectable_tv"] == pit["detectable_tv"] and 0 < pit["detectable_tv"] < 1
    identity = obj["identity"]
    assert isinstance(identity, dict) and set(identity) == {"pairs", "mismatches"}
    assert isinstance(sampling["drafted"], int) and isinstance(sampling["accepted"], int)
    positions = sampling["positions"]
    assert isinstance(positions, list) and [p["position"] for p in positions] == list(range(tokens))
    for p in positions:
        assert set(p) == {"position", "speculative", "plain", "p_value", "tv"}
        for side in ("speculative", "plain"):
            assert sum(p[side].values()) == samples
            assert all(k == "<end>" or k.isdigit() for k in p[side])
        assert isinstance(p["p_value"], float) and 0.0 <= p["p_value"] <= 1.0
        assert isinstance(p["tv"], float) and 0.0 <= p["tv"] <= 1.0


def test_json_contract_greedy_identical_and_drafted(tiny_family: Family) -> None:
    r = outrider(*pair(tiny_family), "--k", "3", "--top-k", "4", "--samples", "40", "--tokens", "5",
                 "--seed", "3", "--json")
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1  # one object
    obj = json.loads(lines[0])
    check_shape(obj, 40, 5)
    assert obj["greedy"] == {"identical": True, "first_divergence": None}
    assert obj["sampling"]["drafted"] > 0
    assert 0 <= obj["sampling"]["accepted"] <= obj["sampling"]["drafted"]
    assert r.returncode == (0 if obj["exact"] else 1)


def test_readable_summary(tiny_family: Family) -> None:
    r = outrider(*pair(tiny_family), "--k", "3", "--top-k", "4", "--samples", "20", "--tokens", "3")
    assert r.returncode in (0, 1), r.stderr
    out = r.stdout
    assert out.startswith("greedy (temperature 0): identical over 3 tokens")
    assert "p-value" in out and "TV" in out
    assert "20 speculative + 20 plain samples of 3 tokens" in out
    assert "draft tokens were verified by the target" in out
    assert "rejection sampler" in out and "against the target's exact distribution (60 tokens)" in out
    assert "coupled identity (same seed, with and without drafting): 10/10 pairs identical" in out
    assert "No bias larger than TV" in out


def test_exact_with_draft_p_min_and_draft_min(tiny_family: Family) -> None:
    """Temperature 1 with --draft-p-min 0.5 and --draft-min 2: whether a position is drafted must not depend on
    the token drawn there. With top-k 2 the draft's top probability is always >= 0.5, so an exact engine keeps
    drafting; an engine that stops on the *drawn* token's probability (or drops short drafts after drawing)
    skews the output towards the draft's favourite tokens — this check rejects it (p ~ 1e-8 at positions 1-3)."""
    r = outrider(*pair(tiny_family), "--temperature", "1", "--top-k", "2", "--top-p", "1", "--min-p", "0",
                 "--k", "4", "--draft-p-min", "0.5", "--draft-min", "2", "--samples", "300",
                 "--tokens", "4", "--seed", "0", "--json")
    assert r.returncode in (0, 1), r.stderr
    obj = json.loads(r.stdout)
    check_shape(obj, 300, 4)
    assert obj["sampling"]["drafted"] > 100, obj["sampling"]["drafted"]
    assert obj["greedy"]["identical"]
    ps = {p["position"]: round(p["p_value"], 6) for p in obj["sampling"]["positions"]}
    assert obj["exact"], f"speculative sampling differs from plain sampling: p-values {ps}"
    assert r.returncode == 0


def test_nothing_drafted_is_inconclusive_exit_1(tiny_family: Family) -> None:
    # p-min 1: the draft is never that sure, so nothing is drafted and the check proves nothing.
    r = outrider(*pair(tiny_family), "--k", "3", "--draft-p-min", "1", "--samples", "5", "--tokens", "2")
    assert r.returncode == 1, r.stderr
    assert "INCONCLUSIVE" in r.stdout and "nothing was drafted" in r.stdout
    assert r.stderr.strip().splitlines() == ["outrider: verify: inconclusive — nothing was drafted at the sampling "
                                             "stage"]


def test_few_samples_are_still_compared_with_the_target(tiny_family: Family) -> None:
    """10 samples over ~40 likely tokens: every category is rare, so the per-position comparison has nothing left
    after pooling — but every token is still tested against the target's exact distribution (the verdict stands,
    with the large detectable TV that 30 tokens give)."""
    r = outrider(*pair(tiny_family), "--k", "3", "--samples", "10", "--tokens", "3", "--json")
    obj = json.loads(r.stdout)
    assert obj["sampling"]["drafted"] > 0 and obj["greedy"]["identical"]
    assert all(p["p_value"] == 1.0 for p in obj["sampling"]["positions"])
    assert obj["sampling"]["pit"]["values"] == 30 and obj["sampling"]["detectable_tv"] > 0.3
    assert obj["identity"] == {"pairs": 10, "mismatches": []}
    assert obj["exact"] is True and r.returncode == 0, r.stderr


def test_the_coupled_sampler_pairs_every_sample_by_seed(tiny_family: Family) -> None:
    r = outrider(*pair(tiny_family), "--k", "3", "--sampler", "coupled", "--samples", "12", "--tokens", "4",
                 "--json")
    obj = json.loads(r.stdout)
    check_shape(obj, 12, 4)
    assert obj["sampling"]["sampler"] == "coupled" and obj["identity"] == {"pairs": 12, "mismatches": []}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "x"], "verify needs a drafter: --draft D, --lookup, --mtp or --mtp-head FILE"),
        (["--lookup", "--prompt", "x", "--temperature", "0"], "--temperature > 0"),
        (["--lookup", "--prompt", "x", "--samples", "0"], "must be at least 1"),
        (["--lookup", "--prompt", "x", "--tokens", "x"], "expected a whole number"),
        (["--lookup", "--prompt", "x", "--alpha", "1.5"], "between 0 and 1"),
        (["--lookup", "--prompt", "x", "--k", "0"], "drafts nothing"),
        (["--lookup", "--prompt", "x", "--top-p", "7"], "top-p"),
        (["--lookup"], "one of the arguments --prompt --chat is required"),
        (["--draft", "/nonexistent-draft.gguf", "--prompt", "x"], "file not found"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_family: Family, args: list[str], message: str) -> None:
    r = outrider("verify", "--target", str(tiny_family.target), *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


def test_missing_target_exits_2(tmp_path: Path) -> None:
    r = outrider("verify", "--target", str(tmp_path / "nope.gguf"), "--lookup", "--prompt", "x")
    assert r.returncode == 2 and r.stderr.strip() == f"outrider: error: file not found: {tmp_path / 'nope.gguf'}"


def test_ctrl_c_exits_130_promptly_and_leaves_no_engine_behind(tiny_family: Family, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONIOENCODING="utf-8", OUTRIDER_HOME=str(tmp_path))
    cli = subprocess.Popen([sys.executable, "-m", "outrider.cli", *pair(tiny_family), "--samples", "100000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stopped: list[int] = []
    try:
        engine = engine_of(cli.pid)
        # Loaded and sampling (100,000 samples take minutes): an event, the engine's own progress, not a sleep
        # (its imports and the tiny pair's load take ~0.5 s of CPU; a loaded machine took 15 s of wall time).
        wait_for_cpu(engine, 2.0)
        os.kill(engine, signal.SIGSTOP)
        stopped.append(engine)
        time.sleep(0.3)
        cli.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = cli.communicate(timeout=WAIT_LIMIT_S)
        # A stopped engine is killed, not waited for: waiting is the 20 s cancel grace or the 30 s heartbeat
        # timeout; the kill takes ~0.3 s, and 10 s leaves a loaded machine room without missing the bug.
        assert time.monotonic() - t0 < 10
        assert cli.returncode == 130, err
        assert err.strip().splitlines()[-1] == "outrider: interrupted"
        time.sleep(0.5)
        with pytest.raises(ProcessLookupError):  # the stopped engine was killed, not left behind
            os.kill(engine, 0)
    finally:
        cli.kill()
        release(stopped)
