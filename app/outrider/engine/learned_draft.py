"""What automatic draft length learned about a pair, kept across loads (``PairSpec.learned_draft``: the app's is
``paths.learned_draft_file``).

Automatic k learns three things before it drafts well: what a target pass costs per batch size and what a drafted
token costs (they belong to the pair, its settings and the machine), and how far an MTP head's score on a prompt
understates its acceptance on the reply (it belongs to the pair). A fresh load starts from none of them, and its
first reply pays for the learning: measured on the generated hybrid ``qwen35`` + NextN target (bench_mtp.py,
"hybrid agreeing", 24-token replies), the first reply after a load ran at 0.88-0.92x the best fixed depth, the
replies after it at 0.98-1.00x. Kept in a file, the first reply after a load of a pair used before starts where the
last load left off.

One JSON file holds the pairs most recently used (``KEEP_PAIRS``), each under a key that changes with anything the
costs or the acceptance depend on: each model file (path, size and modification time: a file replaced by another
quantisation is another pair), the drafter, the load settings and the llama.cpp build (``pair_key``). Written
after each reply through ``fileio.atomic_write_json`` (owner-only, atomic and durable), so a crash leaves the last
complete file. A file
that cannot be read or does not fit (``LearnedDraftError``) loses nothing but the learning: the load goes on cold
and says so, and the next reply writes a good file over it.

A chain of drafters (history lookup) keeps one policy per member, re-learned per reply from its own scoring
(chain_draft.py): nothing is kept for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from outrider.engine.autodraft import AutoDraftLength
from outrider.engine.params import PairSpec
from outrider.fileio import atomic_write_json

FORMAT = 1  # of the file; a file of another format is read as empty and written over
KEEP_PAIRS = 32  # the pairs most recently saved; older ones are dropped at the next save


class LearnedDraftError(Exception):
    """The file of learned draft lengths exists but cannot be used: ``path`` and what is wrong with it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _file_identity(path: str | None) -> dict[str, Any] | None:
    """Path, size (bytes) and modification time (ns) of a model file; None without one."""
    if path is None:
        return None
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return {"path": str(resolved), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def pair_key(spec: PairSpec, build: str) -> str:
    """A key (hex sha256) for ``spec`` loaded by llama.cpp build ``build`` (``Backend.info.name``): the same for a
    reload of the same files with the same settings, different when any file, setting or the build differs."""
    settings = dataclasses.asdict(dataclasses.replace(spec, learned_draft=None))
    described = {
        "settings": settings,
        "target": _file_identity(spec.target),
        "draft": _file_identity(spec.draft),
        "mtp_head": _file_identity(spec.mtp_head),
        "build": build,
    }
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class LearnedDraftLengths:
    """The file at ``path`` (created at the first ``remember``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, Any]:
        """The pairs in the file ({} when there is no file). ``LearnedDraftError`` when it cannot be read or is
        not one of these files."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise LearnedDraftError(self.path, f"cannot be read ({exc})") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LearnedDraftError(self.path, f"is not JSON (line {exc.lineno}: {exc.msg})") from exc
        if not isinstance(data, dict) or not isinstance(data.get("pairs"), dict):
            raise LearnedDraftError(self.path, "is not a file of learned draft lengths (no \"pairs\")")
        if data.get("format") != FORMAT:
            return {}
        pairs: dict[str, Any] = data["pairs"]
        return pairs

    def recall(self, key: str) -> AutoDraftLength | None:
        """The policy saved under ``key``; None when none was. ``LearnedDraftError`` when the file or that entry
        cannot be used."""
        entry = self._read().get(key)
        if entry is None:
            return None
        if not isinstance(entry, dict) or "policy" not in entry:
            raise LearnedDraftError(self.path, "its entry for this pair has no policy")
        try:
            return AutoDraftLength.restore(entry["policy"])
        except ValueError as exc:
            raise LearnedDraftError(self.path, f"its entry for this pair does not fit ({exc})") from exc

    def remember(self, key: str, policy: AutoDraftLength) -> None:
        """Save ``policy`` under ``key``, keeping the KEEP_PAIRS most recently saved pairs. An unreadable file is
        written over (its learning is lost either way); ``OSError`` when the folder cannot be written."""
        try:
            pairs = self._read()
        except LearnedDraftError:
            pairs = {}
        pairs[key] = {"saved": time.time(), "policy": policy.snapshot()}
        if len(pairs) > KEEP_PAIRS:
            def saved(k: str) -> float:
                entry = pairs[k]
                when = entry.get("saved") if isinstance(entry, dict) else None
                return float(when) if isinstance(when, (int, float)) else 0.0

            pairs = {k: pairs[k] for k in sorted(pairs, key=saved)[-KEEP_PAIRS:]}
        atomic_write_json(self.path, {"format": FORMAT, "pairs": pairs}, indent=None)
