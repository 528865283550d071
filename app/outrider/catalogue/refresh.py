"""Machine-checked provenance: compare each catalogue file with what the Hugging Face Hub itself reports.

``outrider models refresh`` asks the Hub's own API (``GET /api/models/{repo}/revision/{rev}?blobs=true``, through
huggingface_hub's ``HfApi.model_info(files_metadata=True)``) for each ``source = "hf"`` file's commit, size and LFS
sha256, and reports every difference; ``--write`` puts the Hub's values into the catalogue file (a targeted
rewrite of those lines only, comments kept) and records the date of the check in ``checked``. By default the
pinned revision is checked; ``latest=True`` asks for the branch head (``main``) and moves the pin to it.

No Qt. The network is used only here and only when asked; tests point ``HF_ENDPOINT`` at a fake Hub.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from outrider.catalogue.errors import DownloadError, NotFoundError, map_hub_error
from outrider.catalogue.loading import parse_catalogue
from outrider.catalogue.schema import REVISION_RE, SHA256_RE, CatalogueError, ModelFile

DEFAULT_ENDPOINT = "https://huggingface.co"
FIELDS = ("revision", "size", "sha256")


@dataclasses.dataclass(frozen=True)
class HubFacts:
    """What the Hub reports for one file at one revision: the commit (40 hex), size (bytes), LFS sha256."""

    revision: str
    size: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Change:
    """One field whose catalogue value differs from the Hub's."""

    field: str
    old: str | int | None
    new: str | int


@dataclasses.dataclass(frozen=True)
class RefreshResult:
    """The outcome for one catalogue file: ``facts`` and ``changes`` when the Hub answered, else ``error``."""

    key: str
    repo: str
    file: str
    facts: HubFacts | None = None
    changes: tuple[Change, ...] = ()
    error: DownloadError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "repo": self.repo, "file": self.file,
            "hub": dataclasses.asdict(self.facts) if self.facts else None,
            "changes": [dataclasses.asdict(c) for c in self.changes],
            "error": self.error.to_json() if self.error else None,
        }


FactsFetcher = Callable[[ModelFile, str], HubFacts]


def hub_endpoint(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def fetch_facts(model: ModelFile, revision: str, *, endpoint: str | None = None, token: str | None = None,
                timeout: float = 30.0) -> HubFacts:
    """The Hub's commit, size and LFS sha256 of ``model.file`` at ``revision`` (a commit or a branch).

    Raises a ``DownloadError`` subclass (network, not found, gated, server…) with a message for the user.
    """
    from huggingface_hub import HfApi

    base = endpoint or hub_endpoint()
    page = f"{base}/{model.repo}"
    api = HfApi(endpoint=base, token=token)
    try:
        info = api.model_info(model.repo, revision=revision, files_metadata=True, timeout=timeout)
    except Exception as exc:  # every failure becomes a typed error for the user
        raise map_hub_error(exc, f"{base}/api/models/{model.repo}/revision/{revision}", page,
                            has_token=bool(token)) from exc
    return facts_from_info(model, info.sha, info.siblings or [], page)


def facts_from_info(model: ModelFile, commit: str | None, siblings: Iterable[Any], page: str) -> HubFacts:
    """``HubFacts`` for ``model.file`` out of a ``ModelInfo``'s commit and siblings; refuses answers that are not
    a pinned commit, a size and a sha256 (``NotFoundError``)."""
    if not isinstance(commit, str) or not REVISION_RE.match(commit):
        raise NotFoundError(f"the Hub did not report a commit for {page} (got {str(commit)[:60]!r})", url=page)
    for sibling in siblings:
        if getattr(sibling, "rfilename", None) != model.file:
            continue
        lfs = getattr(sibling, "lfs", None)
        sha = getattr(lfs, "sha256", None) if lfs is not None else None
        size = getattr(lfs, "size", None) if lfs is not None else getattr(sibling, "size", None)
        if not isinstance(sha, str) or not SHA256_RE.match(sha):
            raise NotFoundError(f"{model.file} in {page} is not an LFS file with a sha256", url=page)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise NotFoundError(f"the Hub reported no size for {model.file} in {page}", url=page)
        return HubFacts(revision=commit, size=size, sha256=sha)
    raise NotFoundError(f"{model.file} is not in {page} at {commit[:12]}", url=page)


def changes_of(model: ModelFile, facts: HubFacts) -> tuple[Change, ...]:
    """The fields (revision, size, sha256) where the catalogue and the Hub differ."""
    out = []
    for field in FIELDS:
        old = getattr(model, field) or None
        new = getattr(facts, field)
        if old != new:
            out.append(Change(field, old, new))
    return tuple(out)


def refresh(models: Iterable[ModelFile], *, latest: bool = False, fetch: FactsFetcher | None = None,
            on_result: Callable[[RefreshResult], None] | None = None) -> list[RefreshResult]:
    """Ask the Hub about each ``source = "hf"`` model (pypi files are skipped); one result each, failures
    included (one unreachable repo does not stop the others). ``on_result`` is called as each arrives."""
    fetcher: FactsFetcher = fetch if fetch is not None else (lambda m, rev: fetch_facts(m, rev))
    results = []
    for model in models:
        if model.source != "hf":
            continue
        revision = "main" if latest or not model.revision else model.revision
        try:
            facts = fetcher(model, revision)
            result = RefreshResult(model.key, model.repo, model.file, facts, changes_of(model, facts))
        except DownloadError as exc:
            result = RefreshResult(model.key, model.repo, model.file, error=exc)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


# ------------------------------------------------------------------------------------------- writing back --
_SECTION_RE = re.compile(r'^\[models\."(?P<key>[^"]+)"\]\s*$')
_TABLE_RE = re.compile(r"^\s*\[")


def apply_to_text(text: str, results: Iterable[RefreshResult], checked: datetime.date) -> str:
    """``text`` (a catalogue file) with each answered model's revision, size and sha256 set to the Hub's and
    ``checked`` set to the date; every other line, comments included, unchanged."""
    facts = {r.key: r.facts for r in results if r.facts is not None}
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _SECTION_RE.match(lines[i].rstrip("\r\n"))
        if not m or m.group("key") not in facts:
            out.append(lines[i])
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not _TABLE_RE.match(lines[end]):
            end += 1
        out.extend(_rewrite_section(lines[i:end], facts[m.group("key")], checked))
        i = end
    return "".join(out)


def _rewrite_section(section: list[str], facts: HubFacts, checked: datetime.date) -> list[str]:
    values = {"revision": f'"{facts.revision}"', "size": str(facts.size), "sha256": f'"{facts.sha256}"',
              "checked": f'"{checked.isoformat()}"'}
    seen: set[str] = set()
    out = []
    for line in section:
        key = line.split("=", 1)[0].strip() if "=" in line else ""
        if key in values:
            newline = "\n" if line.endswith("\n") else ""
            out.append(f"{key} = {values[key]}{newline}")
            seen.add(key)
        else:
            out.append(line)
    # fields the section lacked go after its last key line (before trailing blank lines and comments)
    last = max((n for n, line in enumerate(out) if "=" in line and not line.lstrip().startswith("#")), default=0)
    missing = [f"{key} = {values[key]}\n" for key in values if key not in seen]
    if missing and not out[last].endswith("\n"):
        out[last] += "\n"
    return out[:last + 1] + missing + out[last + 1:]


def write_catalogue(path: Path, results: Iterable[RefreshResult], checked: datetime.date) -> bool:
    """Write the Hub's values into the catalogue at ``path`` (atomically); False when nothing changed.

    The new text is validated before it replaces the file: a result the schema refuses raises ``CatalogueError``
    and leaves the file as it was.
    """
    import tomllib

    text = path.read_text(encoding="utf-8")
    new = apply_to_text(text, results, checked)
    if new == text:
        return False
    try:
        parse_catalogue(tomllib.loads(new), path)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"refusing to write {path}: the updated text is not TOML ({exc})") from exc
    fd, tmp = tempfile.mkstemp(prefix=".catalogue-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(new)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
