"""``--mtp`` and ``--mtp-head`` on every command that loads a pair: they draft, ``verify`` finds them exact at T = 1,
and a target without MTP layers or a head of another model is one clear line (exit 2), in every command.

Breaking it on purpose: leaving ``mtp``/``mtp_head`` out of ``pair_spec`` made every command run plainly
(``verify`` then said "drafted 0"), which ``test_verify_with_mtp_is_exact_at_temperature_1`` and
``test_generate_reports_mtp_drafting`` caught.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.mtp_gguf import MtpModels, MtpShape, make_mtp_models

COMMANDS = {
    "generate": ["generate", "--prompt", "the model", "--max-tokens", "4"],
    "bench": ["bench", "--max-tokens", "4", "--runs", "1"],
    "verify": ["verify", "--prompt", "the model", "--samples", "2", "--tokens", "2"],
    "ask": ["ask", "hello", "--max-tokens", "4"],
    "serve": ["serve", "--port", "0"],
}


def outrider(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8", OUTRIDER_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "outrider.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> MtpModels:
    return make_mtp_models(tmp_path_factory.mktemp("mtp-cli"))


@pytest.fixture(scope="module")
def other_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MTP head of a model 128 wide: not the generated target's (256)."""
    return make_mtp_models(tmp_path_factory.mktemp("mtp-other"), shape=MtpShape(n_embd=128, n_head=2, n_ff=256)).head


def test_verify_with_mtp_is_exact_at_temperature_1(models: MtpModels, tmp_path: Path) -> None:
    """The target's own heads (--mtp) and the head file (--mtp-head): greedy identical, drafted > 0, and the
    chi-square check at temperature 1 finds no position whose distribution differs from plain decoding."""
    for drafter in (["--target", str(models.target), "--mtp"],
                    ["--target", str(models.trunk), "--mtp-head", str(models.head)]):
        r = outrider("verify", *drafter, "--prompt", "the model", "--ctx", "256", "--k", "2", "--top-k", "4",
                     "--samples", "150", "--tokens", "3", "--seed", "5", "--json", home=tmp_path)
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert obj["greedy"] == {"identical": True, "first_divergence": None}
        assert obj["sampling"]["drafted"] > 0 and obj["sampling"]["accepted"] > 0
        assert obj["exact"] is True, obj


def test_generate_reports_mtp_drafting(models: MtpModels, tmp_path: Path) -> None:
    r = outrider("generate", "--target", str(models.target), "--mtp", "--prompt", "the model", "--max-tokens", "24",
                 "--k", "2", "--ctx", "256", "--json", "--in-process", home=tmp_path)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["stats"]["draft_mode"] == "mtp" and done["stats"]["drafted"] > 0


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_target_without_mtp_layers(command: str, models: MtpModels, tmp_path: Path) -> None:
    r = outrider(*COMMANDS[command], "--target", str(models.trunk), "--mtp", "--ctx", "256", home=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "mtp-trunk.gguf has no MTP layers" in r.stderr and "--mtp-head" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_head_of_another_model(command: str, models: MtpModels, other_head: Path,
                                                       tmp_path: Path) -> None:
    r = outrider(*COMMANDS[command], "--target", str(models.trunk), "--mtp-head", str(other_head), "--ctx", "256",
                 home=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "is a head for a model 128 wide" in r.stderr and "belongs to another model" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_takes_one_drafter_only(command: str, models: MtpModels, tmp_path: Path) -> None:
    r = outrider(*COMMANDS[command], "--target", str(models.target), "--mtp", "--lookup", home=tmp_path)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    r = outrider(*COMMANDS[command], "--target", str(models.target), "--mtp-head", str(tmp_path / "none.gguf"),
                 home=tmp_path)
    assert r.returncode == 2 and "file not found" in r.stderr
