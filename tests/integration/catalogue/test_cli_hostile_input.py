"""``outrider models …`` with hostile input: unsafe catalogue entries, deeply nested TOML, odd repo ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.fake_hf import tiny_catalogue
from tests.support.tiny_gguf import Family, make_family

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return make_family(tmp_path_factory.mktemp("fam"))


def run(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outrider.cli", "models", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _evil_model(key: str, repo: str, file: str) -> str:
    return (f'[models."{key}"]\nsource = "hf"\nrepo = "{repo}"\nfile = "{file}"\n'
            f'revision = "{"0" * 40}"\nsize = 10\nsha256 = "{"0" * 64}"\nlicence = "mit"\ngated = false\n'
            f'family = "evil"\nn_layer = 1\nn_head_kv = 1\nhead_dim = 1\n\n')


def _evil_pair(pid: str, target: str) -> str:
    return (f'[[pairs]]\nid = "{pid}"\nname = "evil"\nfamily = "evil"\ntags = ["chat"]\ntarget = "{target}"\n'
            'draft = "prompt-lookup"\nk = 4\ndraft_min = 0\np_min = 0.5\n\n')


@pytest.fixture
def env(home: Path, tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e["HOME"] = str(tmp_path / "user")
    e["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing here reaches the network
    return e


def test_unsafe_catalogue_entries_are_named_skipped_and_the_rest_listed(env: dict[str, str], tmp_path: Path,
                                                                       family: Family) -> None:
    cat = tiny_catalogue(tmp_path / "cat.toml", family.target, family.draft)
    evil = {"dotdot": ("org/x", "../.."), "absolute": ("org/x", "/etc/passwd"), "badrepo": ("../x", "a.gguf"),
            "oddrepo": ("org/a..b", "a.gguf")}
    text = cat.read_text(encoding="utf-8")
    for key, (repo, file) in evil.items():
        text += _evil_model(key, repo, file) + _evil_pair(f"evil-{key}", key)
    cat.write_text(text, encoding="utf-8")
    env["OUTRIDER_CATALOGUE"] = str(cat)
    for args in (["list"], ["list", "--json"], ["verify"], ["scan"]):
        r = run(args, env)
        assert r.returncode == 0, (args, r.stderr)
        assert "Traceback" not in r.stderr and "ValueError" not in r.stderr
        warnings = [x for x in r.stderr.splitlines() if x.startswith("outrider: warning:")]
        for key in evil:
            assert any(f"models.'{key}' skipped" in w for w in warnings), (key, r.stderr)
            assert any(f"'evil-{key}' skipped" in w for w in warnings), (key, r.stderr)
    ids = [p["id"] for p in json.loads(run(["list", "--json"], env).stdout)["pairs"]]
    assert ids == ["smollm2-135m-lookup", "tiny-pair"]
    r = run(["download", "evil-dotdot"], env)
    assert r.returncode == 2 and "no pair 'evil-dotdot'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("toml", [
    "schema_version = " + "[" * 100_000 + "]" * 100_000,
    "x = " + "{a = " * 50_000 + "1" + "}" * 50_000,
    "a" + ".a" * 100_000 + " = 1",  # tomllib is quadratic in dotted-key depth: minutes without a bound
    "[" + ".".join(["a"] * 100_000) + "]",
])
def test_deeply_nested_toml_is_a_clear_error(env: dict[str, str], tmp_path: Path, toml: str) -> None:
    (tmp_path / "deep.toml").write_text(toml, encoding="utf-8")
    env["OUTRIDER_CATALOGUE"] = str(tmp_path / "deep.toml")
    t0 = time.monotonic()
    r = run(["list"], env, timeout=60)
    assert time.monotonic() - t0 < 30
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not a catalogue" in r.stderr or "not valid TOML" in r.stderr


@pytest.mark.parametrize("repo, file", [
    ("org/a..b", "x.gguf"), ("org/-x", "x.gguf"), ("org/x--y", "x.gguf"), ("org/" + "x" * 200, "x.gguf"),
    ("org/ünï", "x.gguf"), ("org/x", "../../etc/passwd"), ("org/x", "/abs.gguf"), ("org/x", "a/./b.gguf"),
])
def test_odd_repo_ids_and_files_are_one_line_and_exit_2(env: dict[str, str], repo: str, file: str) -> None:
    r = run(["fetch", repo, file], env)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "HFValidationError" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
