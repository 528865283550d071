"""Typed, persisted settings: one JSON file under ``outrider.paths.data_dir()``, written atomically.

``AppSettings`` is plain data (a frozen dataclass, validated on load: a bad or unknown value falls back to its
default, never crashes the app). A file that cannot be read as a JSON object at all (truncated, not UTF-8, nested
too deeply) is never overwritten: ``load_settings`` moves it aside to ``settings.json.damaged-<time>`` and returns
a ``SettingsNotice`` (plain data) that the GUI shows; ``save_settings`` writes the file. No Qt here: the GUI's
facade is ``outrider.ui.settings.QtSettings``. The path is injectable for tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from outrider import paths
from outrider.engine.params import (
    DEFAULT_SAMPLER,
    SAMPLERS,
    ContextSettings,
    DraftParams,
    ModelSettings,
    PairSpec,
    Sampler,
    SamplingParams,
    parse_rpc_list,
    parse_split,
)
from outrider.fileio import atomic_write_text

SETTINGS_FILENAME = "settings.json"
# Where the draft tokens come from: the pair's own drafter (its draft model; prompt lookup for a pair that has
# none), prompt lookup forced, or none (plain decoding: the target alone, k = 0).
DRAFT_SOURCES = ("model", "lookup", "none")
DRAFT_SOURCE_LABELS = {"model": "The pair's own (its draft model, else prompt lookup)",
                       "lookup": "Prompt lookup (n-gram)", "none": "None (plain decoding)"}
# How the draft length k is chosen: by the cost model per step (0..k_max), or always ``k``.
K_POLICIES = ("auto", "fixed")
K_POLICY_LABELS = {"auto": "Automatic (cost model)", "fixed": "Fixed k"}
THEMES = ("light", "dark")
# How a sampled draft is verified (SamplingParams.sampler): both exact, coupled also drafter-invariant.
SAMPLER_LABELS = {"auto": "Automatic (coupled with a seed, else rejection)",
                  "coupled": "Coupled (same seed, same text with any draft)",
                  "rejection": "Rejection (classic speculative sampling)"}
# Settings a chosen pair recommends; the ones the user set in the settings dialog are listed in
# ``AppSettings.user_overrides`` and then kept when a pair is chosen.
PAIR_RECOMMENDED = ("draft_source", "k_policy", "k", "draft_min", "p_min", "context_size")
# Keys renamed since a settings file could have been written: old name → new name. Read on load (the new name wins
# when a file has both), including inside ``user_overrides``; the next save writes the new names only.
RENAMED_KEYS = {"draft_k": "k"}  # the fixed draft length (draft_mode "fixed") was "draft_k"
# The old single "draft_mode" (auto / fixed / off / lookup) is two settings now: the draft source and the k policy.
# An old file's value is read into both (the new keys win when a file has them); a bad old value is ignored.
SPLIT_DRAFT_MODE: dict[str, dict[str, str]] = {
    "auto": {"draft_source": "model", "k_policy": "auto"},
    "fixed": {"draft_source": "model", "k_policy": "fixed"},
    "off": {"draft_source": "none"},
    "lookup": {"draft_source": "lookup"},
}


@dataclasses.dataclass(frozen=True)
class AppSettings:
    """Everything the settings dialog edits.

    Drafting: ``draft_source`` (model / lookup / none, see ``DRAFT_SOURCES``) says where draft tokens come from;
    ``k_policy`` how the draft length k is chosen: ``auto`` (the cost model picks 0..``k_max`` per step) or
    ``fixed`` (always ``k``). Units: sizes in tokens, ``p_min``, ``top_p`` and ``min_p`` are probabilities 0–1;
    GPU layers -1 = all, threads 0 = automatic, seed -1 = random.
    """

    target_gpu_layers: int = -1
    draft_gpu_layers: int = -1
    context_size: int = 4096
    threads: int = 0
    draft_source: str = "model"
    # History lookup (engine/history_draft.py): draft from the user's own chats too, chained before prompt lookup
    # and the draft model. On by default: it costs nothing where it finds nothing (automatic k switches it off).
    lookup_history: bool = True
    k_policy: str = "auto"
    k: int = 4
    k_max: int = 16
    draft_min: int = 0
    p_min: float = 0.0
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = -1  # -1: random
    sampler: str = DEFAULT_SAMPLER
    system_prompt: str = ""
    max_tokens: int = 1024
    theme: str = "light"
    show_provenance: bool = True
    pair_id: str = ""
    pair_target: str = ""  # the last chosen pair, loaded at the next start (files as chosen)
    pair_draft: str = ""
    pair_lookup: bool = False
    pair_mtp: bool = False  # the pair drafts with MTP heads: the target's own, or the head file pair_draft
    pair_name: str = ""
    user_overrides: str = ""  # comma-separated PAIR_RECOMMENDED names the user set in the settings dialog
    last_conversation_id: int = 0  # the conversation open when the app was last used, reopened at start (0: none)
    # llama.cpp RPC workers holding part of the target (docs/rpc.md): "HOST:PORT[,HOST:PORT…]", "" = none; and the
    # share of the target's offloaded layers per device ("3,1": local GPUs first, then the workers), "" = auto.
    rpc_servers: str = ""
    target_split: str = ""
    # The "Serve on localhost" panel's last address and API key ("" = none), shown again at the next start. The key
    # is kept in this file only (written owner-only, PRIVATE_FILE_MODE), never logged.
    serve_host: str = "127.0.0.1"
    serve_port: int = 8080
    serve_api_key: str = ""

    def overridden(self) -> set[str]:
        return {n for n in self.user_overrides.split(",") if n}

    def recommended(self, k: int | str, draft_min: int, p_min: float, n_ctx: int) -> dict[str, Any]:
        """The changes a pair's recommended settings make (``k``: a fixed draft length or ``"auto"``), leaving out
        those the user overrode."""
        changes: dict[str, Any] = {"draft_source": "model", "draft_min": draft_min, "p_min": p_min,
                                   "context_size": n_ctx}
        if isinstance(k, int) and k > 0:
            changes.update(k_policy="fixed", k=k)
        else:
            changes["k_policy"] = "auto"
        keep = self.overridden()
        if "k_policy" in keep or "k" in keep:
            keep |= {"k_policy", "k"}
        return {k: v for k, v in changes.items() if k not in keep}

    def validated(self) -> AppSettings:
        """A copy with every out-of-range value replaced by its default."""
        d = AppSettings()
        fixes: dict[str, Any] = {}
        checks = {
            "target_gpu_layers": self.target_gpu_layers >= -1, "draft_gpu_layers": self.draft_gpu_layers >= -1,
            "context_size": 256 <= self.context_size <= 1 << 20, "threads": 0 <= self.threads <= 1024,
            "draft_source": self.draft_source in DRAFT_SOURCES, "k_policy": self.k_policy in K_POLICIES,
            "k": 1 <= self.k <= 64, "k_max": 1 <= self.k_max <= 64,
            "draft_min": 0 <= self.draft_min <= 64, "p_min": 0.0 <= self.p_min <= 1.0,
            "temperature": 0.0 <= self.temperature <= 5.0, "top_k": 0 <= self.top_k <= 100_000,
            "top_p": 0.0 <= self.top_p <= 1.0, "min_p": 0.0 <= self.min_p <= 1.0, "seed": self.seed >= -1,
            "sampler": self.sampler in SAMPLERS,
            "max_tokens": 1 <= self.max_tokens <= 1 << 20, "theme": self.theme in THEMES,
            "rpc_servers": _parses(parse_rpc_list, self.rpc_servers),
            "target_split": not self.target_split.strip() or _parses(parse_split, self.target_split),
            "serve_host": bool(self.serve_host.strip()), "serve_port": 1 <= self.serve_port <= 65535,
        }
        for name, ok in checks.items():
            if not ok:
                fixes[name] = getattr(d, name)
        return dataclasses.replace(self, **fixes) if fixes else self

    @classmethod
    def from_json(cls, data: Any) -> AppSettings:
        if not isinstance(data, dict):
            return cls()
        data = _migrated(data)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value, default = data[f.name], getattr(cls(), f.name)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, int):
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                value = float(value) if ok else value
            else:
                ok = isinstance(value, str)
            if ok:
                kwargs[f.name] = value
        return cls(**kwargs).validated()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # -- what the engine receives ---------------------------------------------------------------------------
    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
                              seed=None if self.seed < 0 else self.seed, sampler=cast(Sampler, self.sampler))

    def draft_params(self) -> DraftParams:
        """The drafting request: k = 0 (plain) with no draft source, ``k`` when fixed, ``None`` (auto) else."""
        k: int | None = None
        if self.draft_source == "none":
            k = 0
        elif self.k_policy == "fixed":
            k = self.k
        return DraftParams(k=k, k_max=self.k_max, draft_min=self.draft_min, p_min=self.p_min)

    def pair_spec(self, target: str, draft: str | None, lookup: bool, mtp: bool = False, *,
                  history: str | None = None, learned: str | None = None) -> PairSpec:
        """The load request: the ``lookup`` source forces prompt lookup; otherwise the pair's own drafter (also
        with no draft source: it then drafts nothing, k = 0, and switching back needs no reload). With ``mtp``
        the pair's drafter is MTP heads: the target's own (no ``draft``) or the head file ``draft``. ``history``:
        the history database, drafted from (history lookup) while ``lookup_history`` is on. ``learned``: the file
        of learned draft lengths (``PairSpec.learned_draft``)."""
        mtp_head: str | None = None
        if self.draft_source == "lookup":
            draft, lookup, mtp = None, True, False
        elif mtp:
            draft, mtp_head, lookup = None, draft, False
        return PairSpec(target=target, draft=draft, lookup=lookup and draft is None and not mtp and not mtp_head,
                        mtp=mtp and mtp_head is None, mtp_head=mtp_head,
                        lookup_history=history if self.lookup_history else None, learned_draft=learned,
                        target_settings=ModelSettings(gpu_layers=self.target_gpu_layers,
                                                      rpc=parse_rpc_list(self.rpc_servers),
                                                      split=parse_split(self.target_split)
                                                      if self.target_split.strip() else ()),
                        draft_settings=ModelSettings(gpu_layers=self.draft_gpu_layers),
                        context=ContextSettings(n_ctx=self.context_size, threads=self.threads))


def _parses(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _migrated(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the keys of ``RENAMED_KEYS`` under their new names and an old ``draft_mode`` split into
    ``draft_source`` and ``k_policy`` (``SPLIT_DRAFT_MODE``), in ``user_overrides`` too. New keys win."""
    data = dict(data)
    for old, new in RENAMED_KEYS.items():
        if old in data:
            value = data.pop(old)
            data.setdefault(new, value)
    mode = data.pop("draft_mode", None)
    if isinstance(mode, str):
        for key, value in SPLIT_DRAFT_MODE.get(mode, {}).items():
            data.setdefault(key, value)
    overrides = data.get("user_overrides")
    if isinstance(overrides, str) and overrides:
        names: list[str] = []
        for n in overrides.split(","):
            if n == "draft_mode":
                names += ["draft_source", "k_policy"]
            elif n:
                names.append(RENAMED_KEYS.get(n, n))
        data["user_overrides"] = ",".join(dict.fromkeys(names))
    return data


@dataclasses.dataclass(frozen=True)
class SettingsNotice:
    """``settings.json`` could not be read; the defaults are in use and the damaged file was kept aside.

    Attributes:
        path: the settings file.
        kept_at: where the damaged file now is (``None`` if it could not be moved: then it is left in place and
            not overwritten).
        reason: why it could not be read.
    """

    path: Path
    kept_at: Path | None
    reason: str

    @property
    def message(self) -> str:
        if self.kept_at is not None:
            where = f"it was kept at {self.kept_at}"
        else:
            where = "it was left in place and will not be overwritten"
        return f"Your settings could not be read ({self.reason}): {where}; the default settings are in use."


def _keep_aside(path: Path) -> Path | None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.damaged-{stamp}.{n}")
        n += 1
    try:
        os.replace(path, target)
    except OSError:
        return None
    return target


def load_settings(path: Path) -> tuple[AppSettings, SettingsNotice | None]:
    """The settings in ``path``; a damaged file is moved aside (never overwritten) and reported. Never raises."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return AppSettings(), None
    except OSError as exc:
        return AppSettings(), SettingsNotice(path, None, f"it cannot be read: {exc.strerror or exc}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        reason = "it is not UTF-8 text"
    except json.JSONDecodeError as exc:
        reason = f"it is not valid JSON: {exc.msg} at line {exc.lineno}"
    except RecursionError:
        reason = "it is nested too deeply"
    else:
        if isinstance(data, dict):
            return AppSettings.from_json(data), None
        reason = "it is not a JSON object"
    return AppSettings(), SettingsNotice(path, _keep_aside(path), reason)


def settings_path() -> Path:
    """The settings file: ``settings.json`` in the data folder."""
    return paths.data_dir() / SETTINGS_FILENAME


def save_settings(path: Path, value: AppSettings) -> None:
    """Write ``value`` to ``path`` atomically (the old file or the whole new one, never half).

    Raises:
        OSError: the file could not be written.
        ValueError: a value cannot be written as JSON.
    """
    atomic_write_text(path, json.dumps(value.to_json(), indent=2, sort_keys=True) + "\n")
