"""Reading a catalogue file into a ``Catalogue``: size and line limits, TOML, renamed fields under their new
names, unsafe Hugging Face entries skipped with a warning, and every schema problem listed at once.

``load_catalogue()`` reads ``$OUTRIDER_CATALOGUE`` or the shipped ``models/catalogue.toml``; a file that breaks the
schema raises ``CatalogueError`` whose ``problems`` name each finding (``pairs[2] (id): k must be > 0``).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from outrider.catalogue.schema import (
    DRAFTER_KINDS,
    MTP_IN_TARGET,
    PAIR_STATUSES,
    PROMPT_LOOKUP,
    REVISION_RE,
    SHA256_RE,
    Catalogue,
    CatalogueError,
    DraftSettings,
    ModelFile,
    Pair,
    file_path_problem,
    repo_id_problem,
)
from outrider.engine.mtp_files import SHARED_KV_HEAD_ARCHS

KNOWN_TAGS = frozenset({"chat", "code", "reasoning", "demo"})
MAX_CATALOGUE_BYTES = 8 * 1024 * 1024
MAX_CATALOGUE_LINE = 8192  # tomllib is quadratic in the depth of a dotted key (a.a.a…): bound it by line length
LINK_RE = re.compile(r"^https://[A-Za-z0-9.-]+\.[A-Za-z]{2,}(?:/[^\s<>\"]*)?$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def default_catalogue_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$OUTRIDER_CATALOGUE`` or the ``models/catalogue.toml`` shipped with the app."""
    env = os.environ if environ is None else environ
    override = env.get("OUTRIDER_CATALOGUE")
    if override:
        return Path(override)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "models" / "catalogue.toml"
        if candidate.is_file():
            return candidate
    return here.parents[3] / "models" / "catalogue.toml"


_MODEL_REQUIRED: dict[str, type] = {
    "source": str, "file": str, "size": int, "licence": str, "gated": bool, "family": str,
                   "n_layer": int, "n_head_kv": int, "head_dim": int}
_PAIR_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "id": str, "name": str, "family": str, "tags": list, "target": str, "draft": str,
                  "k": (int, str), "draft_min": int, "p_min": (int, float)}


# Pair fields renamed since catalogues were written: old name → new name. The old name is still read (a user's
# OUTRIDER_CATALOGUE may predate the rename); the new name wins when a pair has both.
RENAMED_PAIR_FIELDS = {"draft_max": "k"}  # "draft_max" meant the draft length k (fixed count or "auto")


def _current_names(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with every pair's renamed fields (``RENAMED_PAIR_FIELDS``) under their new names."""
    pairs = data.get("pairs")
    if not isinstance(pairs, list) or not any(isinstance(p, dict) and p.keys() & RENAMED_PAIR_FIELDS for p in pairs):
        return data
    renamed = []
    for p in pairs:
        if isinstance(p, dict):
            p = dict(p)
            for old, new in RENAMED_PAIR_FIELDS.items():
                if old in p:
                    value = p.pop(old)
                    p.setdefault(new, value)
        renamed.append(p)
    return {**data, "pairs": renamed}


def validate_data(data: Mapping[str, Any]) -> list[str]:
    """Every schema problem in parsed catalogue data (empty when valid)."""
    data = _current_names(data)
    problems: list[str] = []
    if data.get("schema_version") != 1:
        problems.append("schema_version must be 1")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        return [*problems, "no [models.*] tables"]
    for key, m in models.items():
        if not isinstance(m, dict):
            problems.append(f"models.{key}: not a table")
            continue
        where = f"models.{key}"
        for field, typ in _MODEL_REQUIRED.items():
            if field not in m:
                problems.append(f"{where}: missing {field}")
            elif not isinstance(m[field], typ) or (typ is int and isinstance(m[field], bool)):
                problems.append(f"{where}: {field} must be {typ.__name__}")
        size = m.get("size")
        if isinstance(size, int) and size <= 0:
            problems.append(f"{where}: size must be > 0")
        for field in ("n_layer", "n_head_kv", "head_dim"):
            if isinstance(m.get(field), int) and m[field] <= 0:
                problems.append(f"{where}: {field} must be > 0")
        problems.extend(_memory_field_problems(where, m))
        checked = m.get("checked", "")
        if checked and (not isinstance(checked, str) or not DATE_RE.match(checked)):
            problems.append(f"{where}: checked must be a date YYYY-MM-DD")
        sha = m.get("sha256")
        if sha is None or sha == "":
            if not str(m.get("sha256_missing_reason", "")).strip():
                problems.append(f"{where}: sha256 missing and no sha256_missing_reason")
        elif not isinstance(sha, str) or not SHA256_RE.match(sha):
            problems.append(f"{where}: sha256 must be 64 lowercase hex digits")
        source = m.get("source")
        if source == "hf":
            repo_problem = repo_id_problem(m.get("repo"))
            if repo_problem:
                problems.append(f"{where}: repo {repo_problem}")
            file_problem = file_path_problem(m.get("file"))
            if file_problem and isinstance(m.get("file"), str):
                problems.append(f"{where}: file {file_problem}")
            if not isinstance(m.get("revision"), str) or not REVISION_RE.match(m["revision"]):
                problems.append(f"{where}: revision must be a pinned 40-hex commit")
        elif source == "pypi":
            if not m.get("package") or not m.get("package_version"):
                problems.append(f"{where}: a pypi model needs package and package_version")
        elif source is not None:
            problems.append(f"{where}: source must be 'hf' or 'pypi'")
    pairs = data.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        return [*problems, "no [[pairs]]"]
    seen: set[str] = set()
    file_family: dict[str, str] = {}
    for i, p in enumerate(pairs):
        where = f"pairs[{i}] ({p.get('id', '?')})" if isinstance(p, dict) else f"pairs[{i}]"
        if not isinstance(p, dict):
            problems.append(f"{where}: not a table")
            continue
        for field, types in _PAIR_REQUIRED.items():
            if field not in p:
                problems.append(f"{where}: missing {field}")
            elif not isinstance(p[field], types):
                problems.append(f"{where}: {field} has the wrong type")
        pid = p.get("id")
        if isinstance(pid, str):
            if pid in seen:
                problems.append(f"{where}: duplicate id")
            seen.add(pid)
            if not re.match(r"^[a-z0-9][a-z0-9.\-]*$", pid):
                problems.append(f"{where}: id must be lowercase letters, digits, '.', '-'")
        tags = p.get("tags")
        if isinstance(tags, list):
            if not tags:
                problems.append(f"{where}: no use tags")
            for t in tags:
                if t not in KNOWN_TAGS:
                    problems.append(f"{where}: unknown tag {t!r}")
        k = p.get("k")
        if isinstance(k, str) and k != "auto":
            problems.append(f"{where}: k must be an integer or 'auto'")
        if isinstance(k, int) and k <= 0:
            problems.append(f"{where}: k must be > 0")
        pm = p.get("p_min")
        if isinstance(pm, (int, float)) and not 0.0 <= float(pm) <= 1.0:
            problems.append(f"{where}: p_min must be within 0..1")
        if p.get("speedup") and not p.get("speedup_source"):
            problems.append(f"{where}: a published speed-up needs its speedup_source")
        problems.extend(_pair_text_problems(where, p))
        problems.extend(_drafter_problems(where, p, models))
        family = p.get("family")
        for role in ("target", "draft"):
            key = p.get(role)
            if role == "draft" and key in (PROMPT_LOOKUP, MTP_IN_TARGET):
                continue
            if not isinstance(key, str):
                continue
            if key not in models:
                problems.append(f"{where}: {role} {key!r} is not a models key")
                continue
            m = models[key]
            if isinstance(m, dict) and m.get("family") != family:
                problems.append(f"{where}: {role} {key} is family {m.get('family')!r}, the pair {family!r}")
            prev = file_family.setdefault(key, str(family))
            if prev != family:
                problems.append(f"{where}: model {key} used in families {prev!r} and {family!r}")
        if p.get("target") == p.get("draft"):
            problems.append(f"{where}: target and draft are the same file")
        ctx = p.get("default_context", data.get("default_context"))
        if not isinstance(ctx, int) or ctx <= 0:
            problems.append(f"{where}: default_context must be a positive integer")
    return problems


_OPTIONAL_COUNTS = ("nextn_layers", "n_layer_kv", "recurrent_bytes", "n_layer_swa", "swa_window", "swa_head_kv",
                    "swa_head_dim")


def _memory_field_problems(where: str, m: Mapping[str, Any]) -> list[str]:
    """The optional architecture facts: whole numbers >= 0, consistent with ``n_layer``."""
    problems: list[str] = []
    for field in _OPTIONAL_COUNTS:
        value = m.get(field, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{where}: {field} must be a whole number >= 0")
    if "architecture" in m and not (isinstance(m["architecture"], str) and m["architecture"]):
        problems.append(f"{where}: architecture must be a GGUF architecture name")
    n_layer = m.get("n_layer")
    if isinstance(n_layer, int):
        kv, swa = m.get("n_layer_kv", 0), m.get("n_layer_swa", 0)
        if isinstance(kv, int) and isinstance(swa, int) and kv + swa > n_layer:
            problems.append(f"{where}: n_layer_kv + n_layer_swa must be at most n_layer")
    if m.get("n_layer_swa") and not m.get("swa_window"):
        problems.append(f"{where}: sliding-window layers need their swa_window")
    return problems


def _drafter_problems(where: str, p: Mapping[str, Any], models: Mapping[str, Any]) -> list[str]:
    """``drafter`` (optional) is one of DRAFTER_KINDS and agrees with ``draft``; MTP needs heads to draft with."""
    problems: list[str] = []
    kind = pair_drafter(p)
    if kind not in DRAFTER_KINDS:
        return [f"{where}: drafter must be one of {', '.join(DRAFTER_KINDS)}, not {str(kind)[:40]!r}"]
    draft = p.get("draft")
    target_key = p.get("target")
    target = models.get(target_key) if isinstance(target_key, str) else None
    if kind == "lookup" and draft != PROMPT_LOOKUP:
        problems.append(f"{where}: drafter lookup needs draft = {PROMPT_LOOKUP!r}")
    if kind == "mtp":
        if draft != MTP_IN_TARGET:
            problems.append(f"{where}: drafter mtp needs draft = {MTP_IN_TARGET!r}")
        elif isinstance(target, dict) and not target.get("nextn_layers"):
            problems.append(f"{where}: drafter mtp needs a target with nextn_layers > 0")
    if kind in ("model", "mtp-head") and draft in (PROMPT_LOOKUP, MTP_IN_TARGET):
        problems.append(f"{where}: drafter {kind} needs draft to be a models key")
    if kind == "mtp-head" and isinstance(draft, str) and isinstance(models.get(draft), dict):
        head = models[draft]
        if not head.get("nextn_layers") and head.get("architecture") not in SHARED_KV_HEAD_ARCHS:
            problems.append(f"{where}: the MTP head file {draft} needs nextn_layers > 0 (or the architecture of "
                            "a head that drafts from the target's KV cache)")
        if isinstance(target, dict) and head.get("architecture") and target.get("architecture") and not (
                head["architecture"] == target["architecture"]
                or head["architecture"].startswith(f"{target['architecture']}-")):
            problems.append(f"{where}: the MTP head {draft} is for {head['architecture']} models, the target is "
                            f"{target['architecture']}")
    return problems


def pair_drafter(p: Mapping[str, Any]) -> str:
    """A pair table's drafter kind: ``drafter`` when given, else from ``draft``."""
    kind = p.get("drafter")
    if kind is not None:
        return str(kind)
    draft = p.get("draft")
    return "lookup" if draft == PROMPT_LOOKUP else ("mtp" if draft == MTP_IN_TARGET else "model")


def _pair_text_problems(where: str, p: Mapping[str, Any]) -> list[str]:
    """What is wrong with a pair's user-facing text: ``status`` one of ``PAIR_STATUSES``, ``source`` and
    ``speedup_source`` one https link each (no notes, no lists)."""
    problems: list[str] = []
    status = p.get("status", "")
    if status != "" and status not in PAIR_STATUSES:
        problems.append(f"{where}: status must be one of {', '.join(PAIR_STATUSES)}, not {str(status)[:40]!r}")
    for field in ("source", "speedup_source"):
        value = p.get(field, "")
        if value and (not isinstance(value, str) or not LINK_RE.match(value)):
            problems.append(f"{where}: {field} must be one https:// link, not {str(value)[:60]!r}")
    return problems


def _model_from(key: str, m: Mapping[str, Any]) -> ModelFile:
    sha = m.get("sha256") or None
    return ModelFile(
        key=key, source=m["source"], file=m["file"], size=m["size"], sha256=sha, licence=m["licence"],
        gated=m["gated"], family=m["family"], n_layer=m["n_layer"], n_head_kv=m["n_head_kv"],
        head_dim=m["head_dim"], repo=m.get("repo", ""), revision=m.get("revision", ""),
        package=m.get("package", ""), package_version=m.get("package_version", ""),
        sha256_missing_reason=m.get("sha256_missing_reason", ""), gated_note=m.get("gated_note", ""),
        checked=m.get("checked", ""), architecture=m.get("architecture", ""),
        **{field: int(m.get(field, 0)) for field in _OPTIONAL_COUNTS},
    )


def unsafe_entries(data: Mapping[str, Any]) -> dict[str, str]:
    """Hugging Face models whose ``repo`` or ``file`` (strings) could name a place outside the model store or
    are not valid names: key → why."""
    out: dict[str, str] = {}
    models = data.get("models")
    if not isinstance(models, dict):
        return out
    for key, m in models.items():
        if not isinstance(m, dict) or m.get("source") != "hf":
            continue
        for field, check in (("repo", repo_id_problem), ("file", file_path_problem)):
            value = m.get(field)
            if not isinstance(value, str):
                continue
            problem = check(value)
            if problem:
                out[str(key)] = f"{field} {value[:80]!r} {problem}"
                break
    return out


def _without_unsafe(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """``data`` without unsafe models and the pairs that use them, and one warning line per skipped entry."""
    unsafe = unsafe_entries(data)
    if not unsafe:
        return data, []
    warnings = [f"catalogue entry models.{key[:80]!r} skipped: {why}" for key, why in unsafe.items()]
    models = {k: v for k, v in data["models"].items() if k not in unsafe}
    pairs = data.get("pairs")
    if isinstance(pairs, list):
        kept = []
        for p in pairs:
            bad = [p.get(r) for r in ("target", "draft") if p.get(r) in unsafe] if isinstance(p, dict) else []
            if bad:
                warnings.append(f"pair {str(p.get('id', '?'))[:80]!r} skipped: it uses the skipped entry "
                                f"models.{str(bad[0])[:80]!r}")
            else:
                kept.append(p)
        pairs = kept
    return {**data, "models": models, "pairs": pairs}, warnings


def parse_catalogue(data: Mapping[str, Any], path: Path) -> Catalogue:
    """Build a Catalogue from parsed TOML; raises CatalogueError listing every problem.

    A Hugging Face model whose repo or file is unsafe (``..``, an absolute path, an invalid repo id) is skipped
    with the pairs that use it; ``Catalogue.warnings`` says which and why, and the rest loads.
    """
    data, warnings = _without_unsafe(_current_names(data))
    problems = validate_data(data)
    if problems:
        raise CatalogueError(f"{path}: {len(problems)} schema problem(s): {problems[0]}", problems)
    models = {key: _model_from(key, m) for key, m in data["models"].items()}
    pairs = []
    for p in data["pairs"]:
        pairs.append(Pair(
            id=p["id"], name=p["name"], family=p["family"], tags=tuple(p["tags"]), target=models[p["target"]],
            draft=None if p["draft"] in (PROMPT_LOOKUP, MTP_IN_TARGET) else models[p["draft"]],
            settings=DraftSettings(p["k"], p["draft_min"], float(p["p_min"])),
            default_context=int(p.get("default_context", data.get("default_context", 4096))),
            speedup=p.get("speedup", ""), speedup_source=p.get("speedup_source", ""), status=p.get("status", ""),
            source=p.get("source", ""), drafter=pair_drafter(p),
        ))
    return Catalogue(path=path, models=models, pairs=tuple(pairs), warnings=tuple(warnings))


def load_catalogue(path: str | os.PathLike[str] | None = None) -> Catalogue:
    """Load and validate ``path`` (default: ``$OUTRIDER_CATALOGUE`` or the shipped catalogue)."""
    p = Path(path) if path is not None else default_catalogue_path()
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_CATALOGUE_BYTES + 1)
    except OSError as exc:
        raise CatalogueError(f"cannot read catalogue {p}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_CATALOGUE_BYTES:
        raise CatalogueError(f"catalogue {p} is larger than {MAX_CATALOGUE_BYTES // (1024 * 1024)} MiB: "
                             "not a catalogue")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogueError(f"catalogue {p} is not valid TOML: {exc}") from exc
    for n, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_CATALOGUE_LINE:
            raise CatalogueError(f"catalogue {p} line {n} is longer than {MAX_CATALOGUE_LINE} characters: "
                                 "not a catalogue")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"catalogue {p} is not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise CatalogueError(f"catalogue {p} is nested too deeply: not a catalogue") from exc
    try:
        return parse_catalogue(data, p)
    except RecursionError as exc:
        raise CatalogueError(f"catalogue {p} is nested too deeply: not a catalogue") from exc
