"""``outrider models …`` through a subprocess, against the fake Hub and a catalogue of generated GGUFs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.fake_hf import COMMIT, FakeHub, tiny_catalogue
from tests.support.tiny_gguf import Family, make_family

ROOT = Path(__file__).resolve().parents[3]
GUARD = '''
import os, socket
_real = socket.socket.connect
def _guarded(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1",):
        raise RuntimeError(f"network access attempted: {address!r}")
    return _real(self, address)
socket.socket.connect = _guarded
socket.socket.connect_ex = lambda self, a: (_guarded(self, a), 0)[1]
'''


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return make_family(tmp_path_factory.mktemp("fam"))


def run(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outrider.cli", "models", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def env(home: Path, tmp_path: Path, family: Family) -> dict[str, str]:
    e = dict(os.environ)
    e["OUTRIDER_CATALOGUE"] = str(tiny_catalogue(tmp_path / "cat.toml", family.target, family.draft))
    e["HOME"] = str(tmp_path / "user")  # no real LM Studio / Ollama folders
    return e


def _serve(hub: FakeHub, family: Family) -> None:
    hub.add("org/tiny-GGUF", family.target.name, family.target.read_bytes())
    hub.add("org/tiny-GGUF", family.draft.name, family.draft.read_bytes())


def test_download_list_verify_check_and_offline(hub: FakeHub, env: dict[str, str], family: Family,
                                                tmp_path: Path) -> None:
    _serve(hub, family)
    r = run(["list", "--json"], env)
    assert r.returncode == 0, r.stderr
    pairs = {p["id"]: p for p in json.loads(r.stdout)["pairs"]}
    assert not pairs["tiny-pair"]["installed"] and pairs["smollm2-135m-lookup"]["installed"]
    assert pairs["tiny-pair"]["memory"]["total"] > pairs["tiny-pair"]["size"]

    r = run(["download", "tiny-pair", "--json"], env)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert {x["type"] for x in lines} >= {"start", "verifying", "done", "installed"}
    assert all({"bytes_done", "total", "speed"} <= set(x) for x in lines if x["type"] == "progress")
    paths = lines[-1]["paths"]
    assert [Path(p).name for p in paths] == [family.target.name, family.draft.name]

    r = run(["check", *paths], env)
    assert r.returncode == 0 and "compatible" in r.stdout
    r = run(["check", paths[0], str(family.incompatible), "--json"], env)
    assert r.returncode == 1 and json.loads(r.stdout)["compatible"] is False
    r = run(["check", paths[0], str(tmp_path / "nope.gguf")], env)
    assert r.returncode == 2 and "Traceback" not in r.stderr

    # offline: with the pair on disk nothing connects anywhere (socket guard in every Python process)
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD)
    off = dict(env, PYTHONPATH=os.pathsep.join([str(guard_dir), env.get("PYTHONPATH", "")]),
               HF_ENDPOINT="http://10.255.255.1:9")
    for args in (["list", "--json"], ["verify", "tiny-pair"], ["download", "tiny-pair", "--json"], ["scan"]):
        r = run(args, off)
        assert r.returncode == 0, (args, r.stderr)
        assert "network access attempted" not in r.stderr
    assert json.loads(run(["list", "--json"], off).stdout)["pairs"][1]["installed"] is True

    # a corrupted installed file is caught by verify
    p = Path(paths[1])
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    r = run(["verify", "tiny-pair"], env)
    assert r.returncode == 1 and "corrupted" in r.stdout


def test_fetch_prints_path_last_and_errors_are_one_line(hub: FakeHub, env: dict[str, str],
                                                        family: Family) -> None:
    _serve(hub, family)
    r = run(["fetch", "org/tiny-GGUF", family.draft.name, "--json"], env)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert Path(last).is_file() and Path(last).read_bytes() == family.draft.read_bytes()
    assert COMMIT in last
    r = run(["fetch", "org/tiny-GGUF", family.target.name, "--revision", COMMIT, "--sha256", "0" * 64], env)
    assert r.returncode == 1 and "differs" in r.stderr
    r = run(["fetch", "org/tiny-GGUF", "missing.gguf"], env)
    assert r.returncode == 1 and "not found" in r.stderr and "Traceback" not in r.stderr
    hub.faults.repo_status["org/tiny-GGUF"] = (401, "GatedRepo")
    r = run(["fetch", "org/tiny-GGUF", family.draft.name, "--revision", "f" * 40], env)
    assert r.returncode == 1 and "gated" in r.stderr and f"{hub.endpoint}/org/tiny-GGUF" in r.stderr
    r = run(["download", "no-such-pair"], env)
    assert r.returncode == 2
    r = run(["fetch", "bad-repo", "x.gguf"], env)
    assert r.returncode == 2


def test_scan_reports_complete_pairs(env: dict[str, str], family: Family, tmp_path: Path) -> None:
    folder = tmp_path / "dl"
    folder.mkdir()
    for p in (family.target, family.draft):
        (folder / p.name).write_bytes(p.read_bytes())
    r = run(["scan", "--json", "--folder", str(folder)], env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "tiny-pair" in out["complete_pairs"] and "tiny-pair" not in out["installed_pairs"]
    assert len([f for f in out["files"] if f["source"] == "folder"]) == 2


def test_offline_env_is_set_before_huggingface_hub_import(env: dict[str, str]) -> None:
    code = ("import os; os.environ.pop('HF_HUB_OFFLINE', None)\n"
            "from outrider.catalogue import ensure_offline_hub, DiscoveryScanner\n"
            "ensure_offline_hub()\n"
            "import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "True", r.stderr


def test_download_of_a_pair_too_big_for_this_machine_says_so_first(hub: FakeHub, env: dict[str, str],
                                                                   family: Family, tmp_path: Path) -> None:
    """As the picker asks before such a download, the command line says so first (one note on stderr) and, not
    being interactive, goes on; a pair that fits gets no note."""
    _serve(hub, family)
    r = run(["download", "tiny-pair"], env)
    assert r.returncode == 0 and "too big" not in r.stderr, r.stderr
    cat = Path(env["OUTRIDER_CATALOGUE"])
    huge = tmp_path / "huge.toml"  # the same files; a KV cache of about 50 TB at the default context
    huge.write_text(cat.read_text(encoding="utf-8").replace("n_layer = 8\n", "n_layer = 100000000\n"),
                    encoding="utf-8")
    r = run(["download", "tiny-pair"], dict(env, OUTRIDER_CATALOGUE=str(huge)))
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith("note: tiny-pair is too big for this machine (needs about ")
    assert "free): it will not load here, or run very slowly; downloading anyway" in notes[0]
