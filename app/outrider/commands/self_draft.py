"""``outrider models self-draft``: a draft cut from the target's own layers; ``outrider models delete``: a model of
the store, with the self-drafts made from it.

``self-draft`` prints what it will build and the memory the pair will need (stderr) before it starts, progress on
stderr, and the written draft's path as the last line of stdout; ``--json`` prints one object instead (path,
layers kept, acceptance measured, every candidate). Exit 0 when the draft is in the store, 2 for bad input (a
target that cannot be cut, a bad ``--layers`` or ``--calibrate``), 1 when the build failed (full disk, llama.cpp
refused, cancelled with Ctrl-C); nothing half-written is left in the store in any case.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from outrider.commands.base import EXIT_BAD_INPUT, EXIT_RUNTIME, CliError, positive_int, print_json

BAD_INPUT_KINDS = frozenset({"not_gguf", "no_blocks", "too_few_layers", "per_layer_metadata", "bad_layers",
                             "bad_calibration"})


def register_self_draft(sub: Any) -> None:
    from outrider.engine.selfdraft import DraftType

    s = sub.add_parser("self-draft", help="make a draft from the target's own layers (no second download): "
                                          "a pruned, re-quantised copy, stored with the target's sha256")
    s.add_argument("--target", required=True, metavar="T.gguf", help="the model to cut the draft from")
    s.add_argument("--layers", default="auto", metavar="auto|LIST",
                   help="blocks to keep, e.g. 0-3,26-29; auto (default) measures candidate subsets on the "
                        "calibration prompts and keeps the one with the largest predicted speed-up")
    s.add_argument("--type", choices=[t.value for t in DraftType], default=DraftType.Q8_0.value,
                   help="weight type of the draft (default q8_0)")
    s.add_argument("--calibrate", metavar="PROMPTS.json", type=Path,
                   help="calibration prompts (a JSON list of strings); default: your recent prompts from the chat "
                        "history, else a bundled neutral set")
    s.add_argument("--out", metavar="D.gguf", type=Path,
                   help="also write the draft here (the store keeps the copy the pair picker finds)")
    s.add_argument("--ctx", type=positive_int, default=4096, help="context for the memory estimate (tokens)")
    s.add_argument("--threads", type=positive_int, default=None, help="llama.cpp threads (default: its own)")
    s.add_argument("--tokens", type=positive_int, default=48,
                   help="tokens generated per calibration prompt and run (default 48)")
    s.add_argument("--json", action="store_true", help="one JSON object on stdout (progress stays on stderr)")
    s.set_defaults(func=cmd_self_draft)

    s = sub.add_parser("delete", help="delete a model file of the store; the self-drafts made from it are "
                                      "offered for deletion too")
    s.add_argument("path", type=Path)
    group = s.add_mutually_exclusive_group()
    group.add_argument("--with-drafts", action="store_true", help="also delete its self-drafts (no question)")
    group.add_argument("--keep-drafts", action="store_true", help="keep its self-drafts (no question)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_delete)


def _error(exc: Exception) -> CliError:
    kind = getattr(exc, "kind", "")
    return CliError(str(exc), EXIT_BAD_INPUT if kind in BAD_INPUT_KINDS else EXIT_RUNTIME)


def calibration_prompts(path: Path | None) -> tuple[tuple[str, ...], str]:
    """(prompts, where they came from): ``--calibrate``, else the user's recent prompts, else the bundled set."""
    from outrider.catalogue.selfdraft import clip_prompts, neutral_prompts, read_prompts_file

    if path is not None:
        return read_prompts_file(path), path.name
    from outrider.history import HistoryStore, StoreError
    from outrider.history.recent import recent_user_prompts

    try:
        history = HistoryStore.open()
    except StoreError as exc:  # locked by the running app, damaged…: calibrate on the bundled text instead
        sys.stderr.write(f"outrider: note: the chat history cannot be read ({' '.join(str(exc).split())}); "
                         "calibrating on the bundled prompts\n")
        return neutral_prompts(), "bundled"
    try:
        recent = recent_user_prompts(history)
    finally:
        history.close()
    if recent:
        return clip_prompts(recent), "history"
    return neutral_prompts(), "bundled"


def _progress(as_json: bool) -> Any:
    def on_event(ev: Any) -> None:
        if ev.stage == "hash":
            sys.stderr.write(f"{ev.message}\n")
        else:
            pct = f"{100 * ev.fraction:3.0f}% " if ev.total else ""
            sys.stderr.write(f"{pct}{ev.message}\n")
        sys.stderr.flush()
    return on_event


def _copy_out(source: Path, out: Path) -> Path:
    """The draft also at ``out``: a hard link where the file system allows, else a copy; atomic either way."""
    from outrider.fileio import move_into_place

    out = out.expanduser().absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        move_into_place(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return out


def cmd_self_draft(args: argparse.Namespace) -> int:
    from outrider.catalogue import ModelStore
    from outrider.catalogue.selfdraft import SelfDraftBuild, preview
    from outrider.engine.selfdraft import DraftType, SelfDraftError

    target = Path(args.target).expanduser()
    if args.out is not None and args.out.expanduser().absolute() == target.absolute():
        raise CliError("--out must not be the target itself", EXIT_BAD_INPUT)
    store = ModelStore()
    try:
        plan = preview(store, target, args.layers, DraftType(args.type), args.ctx)
        prompts, source = calibration_prompts(args.calibrate)
        sys.stderr.write(plan.describe() + f"; calibrating on {len(prompts)} prompt(s) ({source})\n")
        build = SelfDraftBuild(store, plan, prompts, calibration=source, on_event=_progress(args.json),
                               threads=args.threads or 0, max_tokens=args.tokens)
        try:
            result = build.wait()
        except KeyboardInterrupt:
            build.cancel()
            raise
    except SelfDraftError as exc:
        raise _error(exc) from exc
    path = result.path
    if args.out is not None:
        try:
            path = _copy_out(result.path, args.out)
        except OSError as exc:
            raise CliError(f"the draft is in the store ({result.path}) but cannot be written to {args.out}: "
                           f"{exc.strerror or exc}", EXIT_RUNTIME) from exc
    if (result.record.predicted_speedup or 0.0) < 1.0:
        sys.stderr.write(f"outrider: note: no layer subset is predicted to be faster than plain decoding on this "
                         f"machine (best {result.record.predicted_speedup or 0.0:.2f}x); with automatic k the "
                         "engine will mostly leave this draft unused\n")
    if args.json:
        print_json({**result.to_json(), "path": str(path), "store_path": str(result.path)})
        return 0
    chosen = result.measures[0] if result.measures else {}
    for m in result.measures:
        mark = "*" if m is chosen else " "
        sys.stdout.write(f"{mark} blocks {m['layers']:<24} ({m['shape']:6}) acceptance {m['acceptance']:6.1%}  "
                         f"predicted speed-up {m['predicted_speedup']:.2f}x\n")
    sys.stdout.write(f"{result.record.describe()}\n{path}\n")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from outrider.catalogue import ModelStore
    from outrider.catalogue.errors import UnsafePathError

    store = ModelStore()
    path = Path(args.path).expanduser()
    drafts = store.self_drafts_of(path) if path.is_file() else []
    delete_drafts = args.with_drafts
    if drafts and not args.with_drafts and not args.keep_drafts:
        names = "\n".join(f"  {d.path}  ({d.describe()})" for d in drafts)
        if not sys.stdin.isatty():
            raise CliError(f"{path.name} has {len(drafts)} self-draft(s) made from it:\n{names}\n"
                           "say --with-drafts to delete them too, or --keep-drafts", EXIT_BAD_INPUT)
        answer = input(f"{path.name} has {len(drafts)} self-draft(s) made from it:\n{names}\n"
                       "Delete them too? [y/N] ")
        delete_drafts = answer.strip().lower() in ("y", "yes")
    deleted: list[str] = []
    try:
        store.delete_model(path)
        deleted.append(str(path))
        if delete_drafts:
            for d in drafts:
                store.delete_model(d.path)
                deleted.append(str(d.path))
    except UnsafePathError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from exc
    except OSError as exc:
        raise CliError(f"cannot delete {exc.filename or path}: {exc.strerror or exc}", EXIT_RUNTIME) from exc
    kept = [str(d.path) for d in drafts if not delete_drafts]
    if args.json:
        print_json({"deleted": deleted, "kept_drafts": kept})
    else:
        for p in deleted:
            print(f"deleted {p}")
        for p in kept:
            print(f"kept {p}")
    return 0
