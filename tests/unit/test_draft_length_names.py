"""One name per meaning for the draft length: ``k`` (a fixed count or auto) and ``k_max`` (automatic k's ceiling),
in the CLI, the GUI's settings file and the catalogue; the old names are still read."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from outrider.catalogue.loading import parse_catalogue
from outrider.cli import build_parser
from outrider.commands.engine_options import text_request
from outrider.settings import AppSettings, load_settings


def _generate(*args: str) -> object:
    return build_parser().parse_args(["generate", "--target", "t.gguf", "--prompt", "x", *args])


@pytest.mark.parametrize(("args", "k", "k_max"), [
    ((), None, 16), (("--k", "5"), 5, 16), (("--k", "auto", "--k-max", "8"), None, 8), (("--k", "0"), 0, 16),
])
def test_cli_k_and_k_max(args: tuple[str, ...], k: int | None, k_max: int) -> None:
    draft = text_request(_generate(*args), prompt="x").draft  # type: ignore[arg-type]
    assert (draft.k, draft.k_max) == (k, k_max)


def test_cli_draft_max_is_a_hidden_alias_of_k(capsys: pytest.CaptureFixture[str]) -> None:
    args = _generate("--draft-max", "3")
    assert args.k == 3  # type: ignore[attr-defined]
    assert capsys.readouterr().err.strip().splitlines() == ["note: --draft-max is now --k"]
    assert "--draft-max" not in build_parser().parse_args(["generate", "--target", "t", "--prompt", "x"]).__dict__
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    assert "--draft-max" not in capsys.readouterr().out


def test_old_settings_keys_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"draft_mode": "fixed", "draft_k": 7, "user_overrides": "draft_k,p_min"}),
                    encoding="utf-8")
    settings, notice = load_settings(path)
    assert notice is None
    assert (settings.k_policy, settings.k, settings.overridden()) == ("fixed", 7, {"k", "p_min"})
    assert settings.draft_params().k == 7
    assert "draft_k" not in settings.to_json() and settings.to_json()["k"] == 7
    # A file with both names: the new one wins.
    assert AppSettings.from_json({"draft_k": 7, "k": 9}).k == 9


CATALOGUE = Path(__file__).resolve().parents[2] / "models" / "catalogue.toml"


@pytest.mark.parametrize("field", ["k", "draft_max"])  # draft_max: the old name, still read
def test_catalogue_k_field(field: str) -> None:
    data = tomllib.loads(CATALOGUE.read_text(encoding="utf-8"))
    assert all("k" in p and "draft_max" not in p for p in data["pairs"])
    for value in (6, "auto"):
        for p in data["pairs"]:
            p.pop("k", None)
            p.pop("draft_max", None)
            p[field] = value
        cat = parse_catalogue(data, CATALOGUE)
        assert {p.settings.k for p in cat.pairs} == {value}
