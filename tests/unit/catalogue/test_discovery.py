"""Discovery on fake Hugging Face cache / LM Studio / Ollama / user folder layouts with generated GGUFs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from tests.support.fake_hf import tiny_catalogue
from tests.support.tiny_gguf import Family

from outrider.catalogue import DiscoveryScanner, FileState, ModelStore, check_local_pair, load_catalogue

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _hf_cache(root: Path, repo: str, src: Path) -> Path:
    d = root / f"models--{repo.replace('/', '--')}"
    sha = _sha(src)
    (d / "blobs").mkdir(parents=True)
    shutil.copy(src, d / "blobs" / sha)
    snap = d / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    os.symlink(f"../../blobs/{sha}", snap / src.name)
    (d / "refs").mkdir()
    (d / "refs" / "main").write_text(COMMIT)
    return snap / src.name


def _ollama(root: Path, name: str, src: Path) -> Path:
    sha = _sha(src)
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    blob = root / "blobs" / f"sha256-{sha}"
    shutil.copy(src, blob)
    cfg = root / "blobs" / ("sha256-" + "c" * 64)
    cfg.write_text("{}")
    m = root / "manifests" / "registry.ollama.ai" / "library" / name
    m.mkdir(parents=True)
    (m / "latest").write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{sha}", "size": src.stat().st_size},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "c" * 64, "size": 2},
    ]}))
    return blob


def test_finds_every_layout_and_completes_pairs(tmp_path: Path, home: Path, tiny_family: Family) -> None:
    cat = load_catalogue(tiny_catalogue(tmp_path / "c.toml", tiny_family.target, tiny_family.draft))
    fake_home = tmp_path / "user"
    cache = tmp_path / "hf" / "hub"
    hf_target = _hf_cache(cache, "org/tiny-GGUF", tiny_family.target)
    lm = fake_home / ".lmstudio" / "models" / "pub" / "tiny-GGUF"
    lm.mkdir(parents=True)
    shutil.copy(tiny_family.draft, lm / tiny_family.draft.name)
    ollama_blob = _ollama(fake_home / ".ollama" / "models", "tiny-unrelated", tiny_family.unrelated)
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(tiny_family.incompatible, folder / "incompatible.gguf")
    (folder / "notes.txt").write_text("x")
    store = ModelStore()
    store.add_folder(folder)
    scanner = DiscoveryScanner(store, home=fake_home, hf_cache=cache, environ={})
    found = {f.source: f for f in scanner.scan()}
    assert set(found) == {"hf-cache", "lmstudio", "ollama", "folder"}
    assert found["hf-cache"].sha256 == _sha(tiny_family.target) and found["hf-cache"].repo == "org/tiny-GGUF"
    assert found["hf-cache"].path == hf_target
    assert found["lmstudio"].repo == "pub/tiny-GGUF" and found["lmstudio"].sha256 is None
    assert found["ollama"].path == ollama_blob and found["ollama"].name == "tiny-unrelated:latest"
    assert found["ollama"].sha256 == _sha(tiny_family.unrelated)
    matched = scanner.match_catalogue(cat)
    assert matched["tiny-target"].verified and matched["tiny-target"].how == "hf-cache"
    assert not matched["tiny-draft"].verified and matched["tiny-draft"].how == "lmstudio"  # name + size only
    state = store.pair_state(cat.get("tiny-pair"), matched)
    assert state.complete and not state.installed
    assert store.verify_model(cat.models["tiny-draft"], state.draft_path).verified


def test_same_size_other_content_is_not_a_match(tmp_path: Path, home: Path, tiny_family: Family) -> None:
    cat = load_catalogue(tiny_catalogue(tmp_path / "c.toml", tiny_family.target, tiny_family.draft))
    cache = tmp_path / "hf"
    bad = tmp_path / "x" / tiny_family.target.name
    bad.parent.mkdir()
    data = bytearray(tiny_family.target.read_bytes())
    data[-1] ^= 0xFF
    bad.write_bytes(bytes(data))
    _hf_cache(cache, "org/tiny-GGUF", bad)
    scanner = DiscoveryScanner(ModelStore(), home=tmp_path / "nobody", hf_cache=cache, environ={})
    assert "tiny-target" not in scanner.match_catalogue(cat)


def test_empty_machine_finds_nothing(tmp_path: Path, home: Path) -> None:
    scanner = DiscoveryScanner(ModelStore(), home=tmp_path / "nobody", hf_cache=tmp_path / "none", environ={})
    assert scanner.scan() == []


def test_add_my_own_pair(tiny_family: Family) -> None:
    ok = check_local_pair(tiny_family.target, tiny_family.draft, 1024)
    assert ok.compatibility.ok and ok.memory.total > ok.memory.weights
    # 8 layers x 4 KV heads x (64 + 64) x 1024 x 2 bytes for the target
    assert ok.memory.target_kv == 8 * 4 * 128 * 1024 * 2
    bad = check_local_pair(tiny_family.target, tiny_family.incompatible)
    assert not bad.compatibility.ok and bad.compatibility.reason


def test_startup_pair_is_demo_until_a_pair_is_installed(tmp_path: Path, home: Path, tiny_family: Family) -> None:
    from outrider.catalogue import startup_pair

    cat = load_catalogue(tiny_catalogue(tmp_path / "c.toml", tiny_family.target, tiny_family.draft))
    store = ModelStore()
    first = startup_pair(cat, store)
    if cat.demo is not None and store.pair_state(cat.demo).installed:
        assert first is not None and first.pair.id == "smollm2-135m-lookup"
    for key in ("tiny-target", "tiny-draft"):
        m = cat.models[key]
        dest = store.path_for_model(m)
        assert dest is not None
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_family.target if key == "tiny-target" else tiny_family.draft, dest)
        assert store.verify_model(m).verified
    chosen = startup_pair(cat, store)
    assert chosen is not None and chosen.pair.id == "tiny-pair"
    assert chosen.target_path == store.path_for_model(cat.models["tiny-target"])


def test_ollama_blob_with_right_name_and_size_but_other_bytes_is_not_installed(
        tmp_path: Path, home: Path, tiny_family: Family, monkeypatch: pytest.MonkeyPatch) -> None:
    import outrider.catalogue.store as store_mod

    cat = load_catalogue(tiny_catalogue(tmp_path / "c.toml", tiny_family.target, tiny_family.draft))
    ollama = tmp_path / "user" / ".ollama" / "models"
    blob = _ollama(ollama, "tiny", tiny_family.target)  # named sha256-<the target's sha256>
    good = blob.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    blob.write_bytes(bytes(bad))  # same name, same size, corrupt content
    hashed: list[Path] = []
    real_sha = store_mod.sha256_file

    def counting(path: Path, progress: object = None) -> str:
        hashed.append(path)
        return real_sha(path)

    monkeypatch.setattr(store_mod, "sha256_file", counting)

    def listing() -> dict[str, FileState]:  # a fresh store and scanner, as in each `models list`
        return DiscoveryScanner(ModelStore(), home=tmp_path / "user", hf_cache=tmp_path / "none",
                                environ={}).match_catalogue(cat)

    assert "tiny-target" not in listing()
    assert not store_mod.ModelStore().pair_state(cat.get("tiny-pair"), listing()).installed
    assert len(hashed) == 1  # hashed lazily once; the verdict is cached by path + size + mtime
    blob.write_bytes(good)  # repaired (new mtime): hashed again, then trusted
    found = listing()
    assert found["tiny-target"].verified and found["tiny-target"].how == "ollama"
    assert len(hashed) == 2
    listing()
    assert len(hashed) == 2
