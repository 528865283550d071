"""``outrider models refresh [--write]``: the catalogue's revision, size and sha256 checked against the Hub's own API
(``/api/models/{repo}/revision/{rev}?blobs=true``, huggingface_hub's real client) served by the fake Hub."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from tests.support.fake_hf import COMMIT, FakeHub, tiny_catalogue
from tests.support.tiny_gguf import Family, make_family

from outrider.catalogue.errors import NetworkError, network_words
from outrider.catalogue.loading import load_catalogue
from outrider.catalogue.refresh import HubFacts, RefreshResult, apply_to_text, fetch_facts, refresh

ROOT = Path(__file__).resolve().parents[3]
REPO = "org/tiny-GGUF"
NEW_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return make_family(tmp_path_factory.mktemp("fam"))


@pytest.fixture
def catalogue(tmp_path: Path, family: Family) -> Path:
    path = tiny_catalogue(tmp_path / "cat.toml", family.target, family.draft)
    path.write_text("# a maintainer's comment stays\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    return path


def run(args: list[str], catalogue: Path, hub_endpoint: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OUTRIDER_CATALOGUE=str(catalogue), HF_ENDPOINT=hub_endpoint)
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run([sys.executable, "-m", "outrider.cli", "models", "refresh", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _serve(hub: FakeHub, family: Family, commit: str = COMMIT, draft: bytes | None = None) -> None:
    hub.add(REPO, family.target.name, family.target.read_bytes(), commit)
    hub.add(REPO, family.draft.name, draft if draft is not None else family.draft.read_bytes(), commit)


def test_the_fake_hub_answers_model_info_like_the_hub(hub: FakeHub, family: Family, catalogue: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub's own ``model_info(files_metadata=True)`` reads the commit, size and LFS sha256."""
    from huggingface_hub import constants

    # other tests of the session may have imported huggingface_hub in offline mode (discovery sets it)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    _serve(hub, family)
    model = load_catalogue(catalogue).models["tiny-target"]
    facts = fetch_facts(model, COMMIT, endpoint=hub.endpoint)
    data = family.target.read_bytes()
    assert facts == HubFacts(COMMIT, len(data), hashlib.sha256(data).hexdigest())
    assert any(p.startswith(f"/api/models/{REPO}/revision/{COMMIT}") and "blobs=" in p.lower()
               for _m, p, _r in hub.requests)


def test_refresh_reports_matching_files_and_changes_nothing(hub: FakeHub, family: Family, catalogue: Path) -> None:
    _serve(hub, family)
    before = catalogue.read_text(encoding="utf-8")
    r = run([], catalogue, hub.endpoint)
    assert r.returncode == 0, r.stderr
    assert "tiny-target: matches the Hub" in r.stdout and "tiny-draft: matches the Hub" in r.stdout
    assert "2 file(s) checked, 0 differ" in r.stdout and "smollm2" not in r.stdout  # pypi files are not asked
    assert catalogue.read_text(encoding="utf-8") == before


def test_refresh_write_fills_revision_size_sha256_and_the_date(hub: FakeHub, family: Family,
                                                              catalogue: Path) -> None:
    """The Hub moved: the draft was re-uploaded at a new commit. --latest --write moves the pins, fills the new
    size and sha256 from the LFS oid, records today's date, and keeps every other line."""
    new_draft = family.draft.read_bytes() + b"\0" * 64
    _serve(hub, family, NEW_COMMIT, draft=new_draft)
    hub.heads[REPO] = NEW_COMMIT
    r = run(["--latest"], catalogue, hub.endpoint)  # without --write: reported, exit 1, file unchanged
    assert r.returncode == 1 and f"tiny-draft: revision {COMMIT} -> {NEW_COMMIT}" in r.stdout
    assert "(--write to update it)" in r.stdout and COMMIT in catalogue.read_text(encoding="utf-8")

    r = run(["--latest", "--write", "--json"], catalogue, hub.endpoint)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert lines[-1] == {"type": "summary", "checked": 2, "failed": 0, "changed": 2, "written": True,
                         "catalogue": str(catalogue)}
    text = catalogue.read_text(encoding="utf-8")
    assert text.startswith("# a maintainer's comment stays\n")
    data = tomllib.loads(text)
    draft = data["models"]["tiny-draft"]
    assert draft["revision"] == NEW_COMMIT and draft["size"] == len(new_draft)
    assert draft["sha256"] == hashlib.sha256(new_draft).hexdigest()
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert draft["checked"] == today and data["models"]["tiny-target"]["checked"] == today
    assert "checked" not in data["models"]["smollm2"]  # not on the Hub: untouched
    cat = load_catalogue(catalogue)  # still a valid catalogue
    assert cat.models["tiny-draft"].sha256 == hashlib.sha256(new_draft).hexdigest()

    r = run([], catalogue, hub.endpoint)  # and now the pinned revision matches
    assert r.returncode == 0 and "0 differ" in r.stdout


def test_refresh_failures_are_words_and_do_not_stop_the_others(hub: FakeHub, family: Family, catalogue: Path,
                                                               tmp_path: Path) -> None:
    _serve(hub, family)
    hub.faults.repo_status[REPO] = (401, "RepoNotFound")
    r = run(["--write"], catalogue, hub.endpoint)
    assert r.returncode == 1
    assert "tiny-target: could not check (repository not found" in r.stdout
    assert "2 could not be checked; catalogue not changed" in r.stdout
    assert "checked =" not in catalogue.read_text(encoding="utf-8")
    # nothing listening: "cannot reach", never a raw errno or exception name
    r = run(["--model", "tiny-target"], catalogue, "http://127.0.0.1:9")
    assert r.returncode == 1 and "tiny-target: could not check (cannot reach 127.0.0.1" in r.stdout
    assert "Errno" not in r.stdout and "Error:" not in r.stdout
    r = run(["--model", "no-such-model"], catalogue, hub.endpoint)
    assert r.returncode == 2 and "no [models.'no-such-model']" in r.stderr


def test_a_file_missing_at_the_revision_is_reported() -> None:
    """``refresh`` keeps going past a failed file and says which one."""
    cat = load_catalogue(ROOT / "models" / "catalogue.toml")
    models = [cat.models["qwen3-0.6b-q8_0"], cat.models["qwen3-8b-q4_k_m"]]

    def fetch(model: object, revision: str) -> HubFacts:
        if getattr(model, "key", "") == "qwen3-0.6b-q8_0":
            raise NetworkError("no network: cannot reach Hugging Face")
        return HubFacts(revision, 1, "0" * 64)

    results = refresh(models, fetch=fetch)
    assert [r.ok for r in results] == [False, True]
    assert {c.field for c in results[1].changes} == {"size", "sha256"}


def test_apply_to_text_edits_only_the_answered_sections() -> None:
    text = ('[models."a"]\nrevision = "old"\nsize = 1\nsha256 = "x"  \n\n# note\n[models."b"]\nrevision = "keep"\n'
            'size = 2\n')
    facts = HubFacts("a" * 40, 5, "b" * 64)
    out = apply_to_text(text, [RefreshResult("a", "o/r", "f", facts)], datetime.date(2026, 12, 1))
    assert out == (f'[models."a"]\nrevision = "{"a" * 40}"\nsize = 5\nsha256 = "{"b" * 64}"\n'
                   'checked = "2026-12-01"\n\n# note\n[models."b"]\nrevision = "keep"\nsize = 2\n')


@pytest.mark.parametrize(("exc", "words"), [
    (OSError(-2, "Name or service not known"), "no network: cannot reach Hugging Face"),
    (ConnectionRefusedError(111, "Connection refused"), "cannot reach Hugging Face: the connection was refused"),
    (TimeoutError("timed out"), "cannot reach Hugging Face: no answer in time"),
])
def test_network_failures_in_words(exc: Exception, words: str) -> None:
    wrapped = RuntimeError("[Errno -2] Name or service not known" if "-2" in str(exc) else str(exc))
    wrapped.__cause__ = exc
    said = network_words(wrapped, "https://huggingface.co/org/x/resolve/main/f.gguf")
    assert said.startswith(words) and not re.search(r"Errno|Error\b", said)
