"""The `outrider generate` / `outrider bench` command-line contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.tiny_gguf import Family


def outrider(*args: str, timeout: float = 180, env_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    if env_home is not None:
        env["OUTRIDER_HOME"] = str(env_home)
    return subprocess.run(
        [sys.executable, "-m", "outrider.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_json_stream_contract(tiny_family: Family) -> None:
    r = outrider(
        "generate",
        "--target",
        str(tiny_family.target),
        "--draft",
        str(tiny_family.draft),
        "--prompt",
        "the model",
        "--max-tokens",
        "20",
        "--json",
        "--k",
        "3",
        "--ctx",
        "256",
        "--in-process",
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    steps, done = lines[:-1], lines[-1]
    assert all(s["event"] == "step" and len(s["tokens"]) == len(s["drafted"]) for s in steps)
    assert done["event"] == "done" and done["stop_reason"] == "length"
    for key in (
        "generated",
        "drafted",
        "accepted",
        "acceptance_rate",
        "tokens_per_pass",
        "decode_tps",
        "prompt_tps",
        "ttft_s",
        "k_mean",
        "rejections",
        "pass_tokens",
        "token_acceptance",
        "plain_steps",
        "plain_tps",
        "speedup",
        "speedup_low",
        "speedup_high",
        "speedup_settled",
    ):
        assert key in done["stats"], key
    assert "baseline_tps" not in done["stats"]
    st = done["stats"]
    assert st["plain_steps"] >= 1
    assert st["speedup"] == pytest.approx(st["plain_equiv_s"] / (st["step_s"] - st["stall_s"]))
    assert st["speedup_low"] <= st["speedup"] <= st["speedup_high"]
    assert st["generated"] == sum(len(s["tokens"]) for s in steps) == 20
    assert sum(sum(s["drafted"]) for s in steps) == done["stats"]["accepted"]


def test_chat_streams_text_and_summary(smollm_path: Path) -> None:
    r = outrider(
        "generate",
        "--target",
        str(smollm_path),
        "--lookup",
        "--chat",
        "Say hello.",
        "--system",
        "Be brief.",
        "--max-tokens",
        "12",
        "--in-process",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "acceptance" in r.stderr and "tok/s" in r.stderr
    assert "speed-up" in r.stderr and "measured in this reply" in r.stderr and "per-token a" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "/nonexistent.gguf", "--prompt", "x"], "file not found"),
        (["--prompt", "x", "--max-tokens", "0"], "must be at least 1"),
        (["--prompt", "x", "--k", "lots"], "expected a number or 'auto'"),
        (["--prompt", "x", "--temperature", "-2"], "temperature must be >= 0"),
        (["--prompt", "x", "--top-p", "7"], "top-p"),
    ],
)
def test_bad_input_exits_2_with_one_line(tiny_family: Family, args: list[str], message: str) -> None:
    full = ["generate", *args] if "--target" in args else ["generate", "--target", str(tiny_family.target), *args]
    r = outrider(*full, "--in-process")
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_not_a_gguf_and_incompatible_pair(tmp_path: Path, tiny_family: Family) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>not a model</html>")
    r = outrider("generate", "--target", str(junk), "--prompt", "x", "--in-process")
    assert r.returncode == 2 and "not a GGUF file" in r.stderr and "Traceback" not in r.stderr
    r = outrider(
        "generate",
        "--target",
        str(tiny_family.target),
        "--draft",
        str(tiny_family.incompatible),
        "--prompt",
        "x",
        "--in-process",
    )
    assert r.returncode == 2 and "more than 128 apart" in r.stderr and "Traceback" not in r.stderr


def test_bench_reports_measured_and_predicted_speedup(tiny_family: Family, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(["the model", "hello world"]))
    r = outrider(
        "bench",
        "--target",
        str(tiny_family.target),
        "--draft",
        str(tiny_family.draft),
        "--prompts",
        str(prompts),
        "--max-tokens",
        "24",
        "--runs",
        "1",
        "--ctx",
        "256",
        "--json",
        "--in-process",
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["event"] for row in rows] == ["prompt", "prompt", "summary"]
    for row in rows[:2]:
        assert row["plain_decode_tps"] > 0 and row["spec_decode_tps"] > 0
        assert row["ab_speedup"] == pytest.approx(row["spec_decode_tps"] / row["plain_decode_tps"])
        assert row["predicted_speedup"] > 0 and row["measured_over_predicted"] > 0
        assert row["token_acceptance"] is None or 0.0 <= row["token_acceptance"] <= 1.0
        assert row["in_reply_speedup"] is not None and row["in_reply_speedup"] > 0
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = outrider("bench", "--target", str(tiny_family.target), "--lookup", "--prompts", str(bad), "--in-process")
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_through_the_engine_process_by_default(tiny_family: Family, tmp_path: Path) -> None:
    r = outrider("generate", "--target", str(tiny_family.target), "--draft", str(tiny_family.draft), "--prompt",
                 "the model", "--max-tokens", "12", "--json", "--ctx", "256")
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["stats"]["generated"] == 12


def test_engine_crash_exits_3_with_one_line(tmp_path: Path) -> None:
    from support.bad_models import f64_output

    model = f64_output(tmp_path)  # segfaults at the first decode
    r = outrider("generate", "--target", str(model), "--prompt", "hello", env_home=tmp_path)
    assert r.returncode == 3
    assert r.stderr.strip().splitlines()[-1] == "outrider: error: engine crashed (SIGSEGV) while generating"


def test_ignore_eos_generates_exactly_max_tokens_through_end_of_text(tiny_family: Family, tmp_path: Path) -> None:
    """The tiny target ends its reply to this prompt with an end-of-text token (after ~600 tokens); with
    ``--ignore-eos`` the same reply goes on to exactly 1000 (it starts the same: greedy, the same model, the same
    thread count — automatic threads follow the machine's load, and past 256 cached cells llama.cpp's one-row
    attention splits the keys across the threads, so two runs of a loaded CI machine parted at token 481)."""
    def run(*extra: str) -> tuple[list[int], dict[str, object]]:
        r = outrider("generate", "--target", str(tiny_family.target), "--prompt", "the model", "--max-tokens",
                     "1000", "--ctx", "2048", "--threads", "1", "--json", *extra, env_home=tmp_path)
        assert r.returncode == 0, r.stderr
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        return [t for s in lines[:-1] for t in s["tokens"]], lines[-1]

    ended, ended_done = run()
    assert ended_done["stop_reason"] == "stop" and len(ended) < 1000  # the model's own end: the flag has work
    through, through_done = run("--ignore-eos")
    assert through_done["stop_reason"] == "length" and len(through) == 1000
    assert through[: len(ended)] == ended
