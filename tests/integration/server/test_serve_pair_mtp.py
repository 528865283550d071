"""``outrider serve --pair ID`` with a catalogue pair that drafts by MTP: the pair's drafter kind decides the options
(heads in the target: ``--mtp``; a head file: ``--mtp-head FILE``), never prompt lookup.

Breaking it on purpose: the old ``args.lookup = pair.draft is None`` served an MTP pair with prompt lookup, which
``test_serve_pair_with_mtp_heads_drafts_with_them`` caught.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

import pytest

from outrider.catalogue import ModelStore
from outrider.commands.serve import _resolve_pair
from support.fake_hf import COMMIT
from support.mtp_gguf import MtpModels, MtpShape, make_mtp_models

REPO = "org/tiny-mtp-GGUF"


def _model(key: str, path: Path, *, nextn: int) -> str:
    data = path.read_bytes()
    return (f'[models."{key}"]\nsource = "hf"\nrepo = "{REPO}"\nfile = "{path.name}"\nrevision = "{COMMIT}"\n'
            f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\nlicence = "apache-2.0"\n'
            f'gated = false\nfamily = "tiny"\narchitecture = "glm4moe"\nn_layer = 2\nn_head_kv = 2\n'
            f'head_dim = 64\nnextn_layers = {nextn}\n\n')


def _pair(pid: str, target: str, draft: str, drafter: str) -> str:
    return (f'[[pairs]]\nid = "{pid}"\nname = "{pid}"\nfamily = "tiny"\ntags = ["chat"]\ntarget = "{target}"\n'
            f'draft = "{draft}"\ndrafter = "{drafter}"\nk = 2\ndraft_min = 0\np_min = 0.0\n'
            'default_context = 512\nspeedup = ""\nspeedup_source = ""\nstatus = "compatible"\n\n')


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MtpModels:
    models = make_mtp_models(tmp_path / "gen", shape=MtpShape(n_layer=2, n_embd=128, n_head=2))
    text = "schema_version = 1\ndefault_context = 512\n\n"
    text += _model("target", models.target, nextn=1) + _model("trunk", models.trunk, nextn=0)
    text += _model("head", models.head, nextn=1)
    text += _pair("own-heads", "target", "mtp", "mtp") + _pair("head-file", "trunk", "head", "mtp-head")
    (tmp_path / "catalogue.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("OUTRIDER_CATALOGUE", str(tmp_path / "catalogue.toml"))
    monkeypatch.setenv("OUTRIDER_HOME", str(tmp_path / "home"))
    store = ModelStore()
    for path in (models.target, models.trunk, models.head):
        dest = store.path_for(REPO, path.name, COMMIT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        store.write_record(dest, hashlib.sha256(dest.read_bytes()).hexdigest())
    return models


def _args(pair: str) -> argparse.Namespace:
    return argparse.Namespace(pair=pair, target=None, draft=None, lookup=False, mtp=False, mtp_head=None, k=None,
                              draft_min=0)


def test_serve_pair_with_mtp_heads_drafts_with_them(installed: MtpModels) -> None:
    args = _args("own-heads")
    _resolve_pair(args)
    assert args.mtp and not args.lookup and args.draft is None and args.mtp_head is None
    assert Path(args.target).name == installed.target.name and args.k == 2


def test_serve_pair_with_a_head_file_drafts_with_it(installed: MtpModels) -> None:
    args = _args("head-file")
    _resolve_pair(args)
    assert not args.mtp and not args.lookup and args.draft is None
    assert Path(args.target).name == installed.trunk.name and Path(args.mtp_head).name == installed.head.name
