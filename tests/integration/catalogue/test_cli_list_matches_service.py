"""``outrider models list`` shows what the pair picker shows: both are ``CatalogueService.scan()`` (one service, two
front ends), for every status a pair can have on disk and for the memory verdict."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.fake_hf import COMMIT
from tests.support.tiny_gguf import Family, make_family

from outrider.catalogue import ModelStore, load_catalogue
from outrider.catalogue.memory import Fit
from outrider.catalogue.service import CatalogueService, PairStatus

ROOT = Path(__file__).resolve().parents[3]
REPO = "org/tiny-GGUF"


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return make_family(tmp_path_factory.mktemp("fam"))


def _model(key: str, path: Path, *, n_layer: int = 2, n_head_kv: int = 4, head_dim: int = 32) -> str:
    data = path.read_bytes()
    return (f'[models."{key}"]\nsource = "hf"\nrepo = "{REPO}"\nfile = "{path.name}"\nrevision = "{COMMIT}"\n'
            f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\nlicence = "apache-2.0"\n'
            f'gated = false\nfamily = "tiny"\nn_layer = {n_layer}\nn_head_kv = {n_head_kv}\n'
            f'head_dim = {head_dim}\n\n')


def _pair(pid: str, target: str, draft: str) -> str:
    return (f'[[pairs]]\nid = "{pid}"\nname = "{pid}"\nfamily = "tiny"\ntags = ["chat"]\ntarget = "{target}"\n'
            f'draft = "{draft}"\nk = 4\ndraft_min = 0\np_min = 0.5\ndefault_context = 512\n\n')


def _install(store: ModelStore, src: Path, *, record: bool = True) -> Path:
    dest = store.path_for(REPO, src.name, COMMIT)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    if record:
        store.write_record(dest, hashlib.sha256(dest.read_bytes()).hexdigest())
    return dest


@pytest.fixture
def env(home: Path, tmp_path: Path, family: Family, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A catalogue with one pair in each state; the same environment here and in the CLI's process."""
    copies = tmp_path / "files"
    copies.mkdir()
    remote = shutil.copyfile(family.unrelated, copies / "remote.gguf")
    partial = shutil.copyfile(family.unrelated, copies / "partial.gguf")
    unrecorded = shutil.copyfile(family.unrelated, copies / "unrecorded.gguf")
    text = "schema_version = 1\ndefault_context = 512\n\n"
    text += _model("target", family.target) + _model("draft", family.draft) + _model("bad", family.incompatible)
    text += _model("remote", remote) + _model("partial", partial) + _model("unrecorded", unrecorded)
    text += _model("huge", remote, n_layer=100_000, n_head_kv=1_000, head_dim=1_000)  # petabytes of KV cache
    text += ('[models."packaged"]\nsource = "pypi"\npackage = "outrider-no-such-package"\npackage_version = "1.0"\n'
             'file = "outrider_no_such_package/m.gguf"\nsize = 1000\nsha256 = "' + "0" * 64 + '"\n'
             'licence = "apache-2.0"\ngated = false\nfamily = "tiny"\nn_layer = 1\nn_head_kv = 1\nhead_dim = 1\n\n')
    text += _pair("installed", "target", "draft") + _pair("incompatible", "target", "bad")
    text += _pair("downloadable", "remote", "prompt-lookup") + _pair("paused", "partial", "prompt-lookup")
    text += _pair("on-disk", "unrecorded", "prompt-lookup") + _pair("too-big", "huge", "prompt-lookup")
    text += _pair("unavailable", "packaged", "prompt-lookup")
    catalogue = tmp_path / "catalogue.toml"
    catalogue.write_text(text, encoding="utf-8")

    store = ModelStore(home / "models")
    for src in (family.target, family.draft, family.incompatible):
        _install(store, src)
    _install(store, unrecorded, record=False)
    part = store.part_path(store.path_for(REPO, partial.name, COMMIT))
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_bytes(partial.read_bytes()[: partial.stat().st_size // 2])

    monkeypatch.setenv("OUTRIDER_CATALOGUE", str(catalogue))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no real LM Studio / Ollama folders
    return dict(os.environ)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outrider.cli", "models", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_models_list_shows_the_service_rows(env: dict[str, str]) -> None:
    service = CatalogueService.default(catalogue=load_catalogue())
    rows = {r.pair.id: r for r in service.scan().rows}
    assert {pid: r.status for pid, r in rows.items()} == {
        "installed": PairStatus.INSTALLED, "incompatible": PairStatus.INCOMPATIBLE,
        "downloadable": PairStatus.DOWNLOADABLE, "paused": PairStatus.PAUSED, "on-disk": PairStatus.ON_DISK,
        "too-big": PairStatus.DOWNLOADABLE, "unavailable": PairStatus.UNAVAILABLE}
    assert rows["too-big"].fit is Fit.TOO_BIG and rows["paused"].status_text == "paused 50%"
    assert "rule:" in rows["incompatible"].reason and "pip install" in rows["unavailable"].reason

    r = _cli(["list", "--json"], env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    listed = {p["id"]: p for p in doc["pairs"]}
    assert list(listed) == list(rows)  # catalogue order
    for pid, row in rows.items():
        assert {k: listed[pid][k] for k in row.to_json()} == row.to_json(), pid
        assert listed[pid]["installed"] is row.state.installed
    assert set(doc["memory"]) == {"ram_total", "ram_available", "vram_total", "vram_free"}

    r = _cli(["list"], env)
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line and not line.startswith(" ")}
    for pid, row in rows.items():
        assert row.status_text in lines[pid], (pid, lines[pid])
    assert "⚠ too big" in lines["too-big"] and "⚠" not in lines["installed"]
    assert rows["incompatible"].reason in r.stdout and rows["unavailable"].reason in r.stdout
