"""Making a self-draft (a draft cut from the target's own layers) and putting it in the model store.

The app's side, shared by ``outrider models self-draft`` and the pair picker; no llama_cpp here:

* ``preview(store, target, layers, draft_type, n_ctx)`` — header only, before anything is built: whether the
  target can be cut (``SelfDraftError`` with ``kind`` otherwise), the candidate layer subsets, the draft's size,
  the pair's memory and the disk space the build needs.
* ``SelfDraftBuild(store, preview, prompts, on_event)`` — the build: the target's sha256 (the provenance), then the
  build process (``python -m outrider.catalogue.selfdraft_build``: llama.cpp writes and measures each candidate),
  then the best draft moved into ``self-drafts/{sha256[:16]}/`` with its record. ``cancel()`` terminates the
  process; ``wait()`` returns a ``SelfDraftResult`` or raises ``SelfDraftError``.

Nothing half-written reaches the store: the process writes into a scratch folder of its own
(``self-drafts/.build-{pid}-…``, the store's file system), the finished file is fsynced and renamed into place
(``fileio.move_into_place``) and only then recorded; a cancel, a crash, a full disk or a failed check removes the
scratch folder. A scratch folder left by a killed app is removed by the next build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from outrider.catalogue.local import kv_bytes_from_header
from outrider.catalogue.schema import MemoryEstimate
from outrider.catalogue.store import ModelStore, SelfDraftRecord
from outrider.engine.llama.gguf_header import GGUFHeader, GGUFHeaderError, read_header
from outrider.engine.selfdraft import (
    DraftType,
    LayerPlan,
    SelfDraftError,
    candidate_plans,
    estimated_draft_bytes,
    parse_layers,
    prunable_layers,
)

CHILD_MODULE: Final = "outrider.catalogue.selfdraft_build"
BUILD_PREFIX: Final = ".build-"
DISK_MARGIN: Final = 64 * 1024 * 1024  # bytes kept free beyond the drafts themselves
DATA_DIR: Final = Path(__file__).resolve().parent.parent / "data"
NEUTRAL_PROMPTS_FILE: Final = DATA_DIR / "selfdraft_calibration.json"
MAX_PROMPTS: Final = 8  # calibration prompts used (the most recent first); each costs seconds per candidate
MAX_PROMPT_CHARS: Final = 2000


def neutral_prompts() -> tuple[str, ...]:
    """The bundled calibration prompts (varied, no personal text): used when the user has no history yet."""
    data = json.loads(NEUTRAL_PROMPTS_FILE.read_text(encoding="utf-8"))
    return tuple(str(p) for p in data["prompts"])


def read_prompts_file(path: Path) -> tuple[str, ...]:
    """``--calibrate PROMPTS.json``: a JSON list of strings, or ``{"prompts": [...]}``. Raises
    ``SelfDraftError('bad_calibration')`` saying what is wrong."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SelfDraftError("bad_calibration", f"cannot read {path}: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise SelfDraftError("bad_calibration", f"{path} is not JSON: {exc}") from exc
    if isinstance(data, dict):
        data = data.get("prompts")
    if not isinstance(data, list) or not data or not all(isinstance(p, str) and p.strip() for p in data):
        raise SelfDraftError("bad_calibration", f"{path} must hold a list of prompts (non-empty strings), "
                                                'or {"prompts": [...]}')
    return clip_prompts(data)


def clip_prompts(prompts: Sequence[str]) -> tuple[str, ...]:
    """At most ``MAX_PROMPTS`` prompts, each cut to ``MAX_PROMPT_CHARS`` characters (calibration time is bounded)."""
    return tuple(p[:MAX_PROMPT_CHARS] for p in prompts if p.strip())[:MAX_PROMPTS]


@dataclasses.dataclass(frozen=True)
class SelfDraftPreview:
    """What a build will do, known from the target's header alone.

    ``plans``: the candidates (one for an explicit ``--layers``); ``draft_bytes``: the largest candidate's file;
    ``memory``: target + that draft at ``n_ctx``; ``disk_needed``: the build's scratch space (the best draft so
    far and the one being measured) plus a margin; ``disk_free``: on the store's file system.
    """

    target: Path
    header: GGUFHeader
    n_layer: int
    plans: tuple[LayerPlan, ...]
    draft_type: DraftType
    draft_bytes: int
    memory: MemoryEstimate
    disk_needed: int
    disk_free: int

    @property
    def auto(self) -> bool:
        return len(self.plans) > 1

    def describe(self) -> str:
        from outrider.catalogue.memory import format_bytes

        what = (f"{len(self.plans)} candidate layer subsets measured" if self.auto
                else f"blocks {self.plans[0].label}")
        return (f"{self.target.name}: {self.n_layer} blocks; {what}; draft about "
                f"{format_bytes(self.draft_bytes)} ({self.draft_type.value.upper()}); target + draft need about "
                f"{format_bytes(self.memory.total)} of memory at {self.memory.n_ctx} tokens")

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "n_layer": self.n_layer, "plans": [p.to_json() for p in self.plans],
                "type": self.draft_type.value, "draft_bytes": self.draft_bytes, "memory": self.memory.to_json(),
                "disk_needed": self.disk_needed, "disk_free": self.disk_free}


def _read_target(target: Path) -> GGUFHeader:
    try:
        return read_header(target)
    except GGUFHeaderError as exc:
        raise SelfDraftError("not_gguf", f"{target.name} cannot be cut: {exc}") from exc


def preview(store: ModelStore, target: Path, layers: str | None = None, draft_type: DraftType = DraftType.Q8_0,
            n_ctx: int = 4096) -> SelfDraftPreview:
    """``layers``: ``None`` or ``"auto"`` searches ``candidate_plans``, else a list like ``0-3,27-29``.
    Raises ``SelfDraftError``: ``not_gguf``, ``no_blocks``, ``too_few_layers``, ``per_layer_metadata``,
    ``bad_layers``, ``disk_full``."""
    target = Path(target)
    header = _read_target(target)
    n_layer = prunable_layers(header)
    if layers is None or layers.strip().lower() == "auto":
        plans = tuple(candidate_plans(n_layer))
    else:
        plans = (parse_layers(layers, n_layer),)
    draft_bytes = max(estimated_draft_bytes(header, p.keep, draft_type) for p in plans)
    n_keep = max(len(p.keep) for p in plans)
    target_kv = kv_bytes_from_header(header, n_ctx)
    memory = MemoryEstimate(n_ctx, header.file_size, draft_bytes, target_kv, target_kv * n_keep // n_layer)
    store.self_drafts_root.mkdir(parents=True, exist_ok=True)
    needed = (2 if len(plans) > 1 else 1) * draft_bytes + DISK_MARGIN
    free = shutil.disk_usage(store.self_drafts_root).free
    result = SelfDraftPreview(target, header, n_layer, plans, draft_type, draft_bytes, memory, needed, free)
    if free < needed:
        from outrider.catalogue.memory import format_bytes

        raise SelfDraftError("disk_full", f"not enough disk space for the draft: needs {format_bytes(needed)}, "
                                          f"{format_bytes(free)} free on {store.self_drafts_root}")
    return result


@dataclasses.dataclass(frozen=True)
class SelfDraftEvent:
    """Progress of a build: ``stage`` is ``hash`` (the target's sha256), ``build`` or ``calibrate``;
    ``done`` of ``total`` steps of that stage (``total`` 0: unknown); ``message`` in words."""

    stage: str
    done: int
    total: int
    message: str

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"type": "progress", "stage": self.stage, "done": self.done, "total": self.total,
                "message": self.message}


@dataclasses.dataclass(frozen=True)
class SelfDraftResult:
    """A built draft: its store record and every candidate's calibration (the chosen one first)."""

    record: SelfDraftRecord
    measures: tuple[dict[str, Any], ...]

    @property
    def path(self) -> Path:
        return self.record.path

    def to_json(self) -> dict[str, Any]:
        chosen = self.measures[0] if self.measures else {}
        return {"path": str(self.path), "layers": self.record.layers, "layers_kept": list(self.record.keep),
                "n_layer": self.record.n_layer, "type": self.record.draft_type,
                "target_sha256": self.record.target_sha256, "acceptance": self.record.acceptance,
                "predicted_speedup": self.record.predicted_speedup, "calibration": self.record.calibration,
                "chosen": chosen, "candidates": list(self.measures)}


EventCallback = Callable[[SelfDraftEvent], None]


def draft_file_name(target: Path, plan: LayerPlan, draft_type: DraftType) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", target.stem)[:80].strip("-.") or "model"
    return f"{stem}.self-{len(plan.keep)}of{plan.n_layer}-{plan.label.replace(',', '_')}.{draft_type.value}.gguf"


def remove_stale_builds(store: ModelStore) -> None:
    """Scratch folders of builds whose process is gone (an app killed mid-build)."""
    with contextlib.suppress(OSError):
        for folder in store.self_drafts_root.glob(f"{BUILD_PREFIX}*"):
            pid = folder.name[len(BUILD_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Cancelled(Exception):
    pass


class SelfDraftBuild:
    """One self-draft build, running on its own thread (and its process) from construction on.

    ``on_event`` is called on that thread, and ``on_finished(build)`` once when it has ended (``result`` or
    ``error`` set; ``wait`` returns at once). ``calibration`` names where the prompts came from (``history``,
    ``bundled``, a file name) for the record. ``fsize_limit`` caps the size of every file the build process
    writes (bytes; writes beyond fail as on a full disk), for tests of that path; ``max_tokens`` per
    calibration prompt; ``threads`` for llama.cpp (0 = its default).
    """

    def __init__(self, store: ModelStore, plan: SelfDraftPreview, prompts: Sequence[str], *,
                 calibration: str = "", on_event: EventCallback | None = None,
                 on_finished: Callable[[SelfDraftBuild], None] | None = None, threads: int = 0,
                 max_tokens: int = 48, fsize_limit: int | None = None) -> None:
        if not prompts:
            raise SelfDraftError("bad_calibration", "calibration needs at least one prompt")
        self.store = store
        self.preview = plan
        self.prompts = tuple(prompts)
        self.calibration = calibration
        self._on_event = on_event
        self._on_finished = on_finished
        self._threads = threads
        self._max_tokens = max_tokens
        self._fsize_limit = fsize_limit
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._done = threading.Event()
        self.result: SelfDraftResult | None = None
        self.error: SelfDraftError | None = None
        self.workdir: Path | None = None
        self._thread = threading.Thread(target=self._run, name="self-draft", daemon=True)
        self._thread.start()

    # -- control ------------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self, *, wait: bool = True) -> None:
        """Stop the build (the process is terminated, its scratch folder removed); ``wait`` then raises
        ``SelfDraftError('cancelled')``. With ``wait`` (not from an event callback), returns once the build has
        ended; without, at once (a GUI thread: ``on_finished`` says when)."""
        self._cancelled.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
        if wait and threading.current_thread() is not self._thread:
            self._done.wait(timeout=30)

    def wait(self, timeout: float | None = None) -> SelfDraftResult:
        if not self._done.wait(timeout):
            raise TimeoutError("the self-draft build is still running")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    # -- the build ----------------------------------------------------------------------------------------
    def _tell(self, stage: str, done: int, total: int, message: str) -> None:
        if self._on_event is not None:
            with contextlib.suppress(Exception):
                self._on_event(SelfDraftEvent(stage, done, total, message))

    def _run(self) -> None:
        try:
            self.result = self._build()
        except _Cancelled:
            self.error = SelfDraftError("cancelled", "the self-draft build was cancelled; nothing was kept")
        except SelfDraftError as exc:
            self.error = SelfDraftError("cancelled", "the self-draft build was cancelled; nothing was kept") \
                if self._cancelled.is_set() else exc
        except OSError as exc:
            self.error = _os_error(exc, self.store)
        except Exception as exc:  # a bug must still end the build with words, never a hung dialog
            self.error = SelfDraftError("build_failed", f"the self-draft build failed: {type(exc).__name__}: {exc}")
        finally:
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
            self._done.set()
            if self._on_finished is not None:
                with contextlib.suppress(Exception):
                    self._on_finished(self)

    def _check_cancel(self) -> None:
        if self._cancelled.is_set():
            raise _Cancelled

    def _target_sha256(self) -> str:
        size = self.preview.header.file_size
        self._tell("hash", 0, size, f"checking {self.preview.target.name} (sha256)")
        sha = self.store.file_sha256(self.preview.target)
        if sha is None:
            raise SelfDraftError("not_gguf", f"cannot read {self.preview.target}")
        self._tell("hash", size, size, f"checked {self.preview.target.name}")
        return sha

    def _build(self) -> SelfDraftResult:
        remove_stale_builds(self.store)
        sha = self._target_sha256()
        self._check_cancel()
        root = self.store.self_drafts_root
        root.mkdir(parents=True, exist_ok=True)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", dir=root))
        reply = self._run_child({
            "target": str(self.preview.target), "n_layer": self.preview.n_layer,
            "plans": [{"keep": list(p.keep), "shape": p.shape} for p in self.preview.plans],
            "type": self.preview.draft_type.value, "prompts": list(self.prompts), "workdir": str(self.workdir),
            "threads": self._threads, "max_tokens": self._max_tokens, "fsize_limit": self._fsize_limit,
        })
        self._check_cancel()
        measures = tuple(reply["measures"])
        chosen = measures[0]
        plan = LayerPlan(self.preview.n_layer, tuple(chosen["keep"]), chosen.get("shape", "custom"))
        built = Path(reply["path"])
        if built.parent != self.workdir:
            raise SelfDraftError("build_failed", "the build process answered with a file outside its folder")
        st = self.preview.target.stat()
        provenance = {"target_sha256": sha, "target_name": self.preview.target.name,
                      "target_path": str(self.preview.target.absolute()), "target_size": st.st_size,
                      "target_mtime_ns": st.st_mtime_ns, "n_layer": self.preview.n_layer,
                      "keep": list(plan.keep), "layers": plan.label, "shape": plan.shape,
                      "type": self.preview.draft_type.value, "acceptance": chosen.get("acceptance"),
                      "predicted_speedup": chosen.get("predicted_speedup"), "calibration": self.calibration,
                      "candidates": len(measures)}
        record = self.store.add_self_draft(built, draft_file_name(self.preview.target, plan,
                                                                  self.preview.draft_type), provenance)
        return SelfDraftResult(record, measures)

    def _run_child(self, job: dict[str, Any]) -> dict[str, Any]:
        command = [sys.executable, "-m", CHILD_MODULE]
        with self._lock:
            self._check_cancel()
            self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            # stdin stays open until the child ends: when this process dies, the OS closes it and the child ends
            proc.stdin.write(json.dumps({**job, "parent_pid": os.getpid(), "parent_pipe": True}) + "\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died at once: reported below from its exit status
        answer: dict[str, Any] | None = None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("type") == "progress":
                self._tell(str(msg.get("stage", "")), int(msg.get("done", 0)), int(msg.get("total", 0)),
                           str(msg.get("message", "")))
            elif msg.get("type") in ("result", "error"):
                answer = msg
                break
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._check_cancel()
        if answer is None:
            raise SelfDraftError("crashed", f"the self-draft build process ended unexpectedly (exit "
                                            f"{proc.returncode}); llama.cpp may not support this model")
        if answer["type"] == "error":
            raise SelfDraftError(str(answer.get("kind", "build_failed")), str(answer.get("message", "")))
        return answer


def _os_error(exc: OSError, store: ModelStore) -> SelfDraftError:
    from outrider.catalogue.errors import local_error

    err = local_error(exc, store.self_drafts_root)
    message = err.message.replace("download again", "build it again")
    return SelfDraftError("disk_full" if err.kind == "disk_full" else "store_write", message)
