"""``outrider models …``: list, download, verify, scan, check, refresh, fetch, self-draft, delete.

Exit statuses: 0 success (for download/fetch: only when the file is verified), 1 runtime failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from outrider.commands.base import EXIT_BAD_INPUT, EXIT_RUNTIME, CliError, positive_int, print_json, rpc_list
from outrider.commands.rpc_worker import placement_lines, worker_memory
from outrider.commands.self_draft import register_self_draft


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="the catalogue of pairs and the models on disk")
    sub = p.add_subparsers(dest="models_command", parser_class=type(p))
    p.set_defaults(func=lambda args: _usage(p))

    s = sub.add_parser("list", help="catalogue pairs with the pair picker's state (installed, downloadable, paused, "
                                    "incompatible…) and whether they fit in memory")
    s.add_argument("--json", action="store_true", help="one JSON document on stdout")
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("download", help="download and verify both files of a pair (resumable)")
    s.add_argument("pair_id")
    s.add_argument("--json", action="store_true", help="JSON progress lines")
    s.set_defaults(func=cmd_download)

    s = sub.add_parser("verify", help="re-hash installed files against the catalogue's sha256")
    s.add_argument("pair_id", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("scan", help="GGUF files already on disk and which pairs they complete")
    s.add_argument("--json", action="store_true")
    s.add_argument("--folder", action="append", default=[], help="also scan this folder (repeatable)")
    s.set_defaults(func=cmd_scan)

    s = sub.add_parser("check", help="header-only compatibility of a target and a draft GGUF")
    s.add_argument("target")
    s.add_argument("draft")
    s.add_argument("--json", action="store_true")
    s.add_argument("--ctx", type=positive_int, default=4096, help="context for the memory estimate (tokens, >= 1)")
    s.add_argument("--rpc", type=rpc_list, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                   help="also ask these RPC workers for their memory and show where each model would live")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("refresh", help="(maintainers) compare each catalogue file's revision, size and sha256 with "
                                       "the Hub's own API; --write puts the Hub's values and today's date in the file")
    s.add_argument("--write", action="store_true", help="write the Hub's values and the check's date into the "
                                                        "catalogue file (atomically; comments kept)")
    s.add_argument("--latest", action="store_true", help="ask for the newest commit (main) instead of the pinned "
                                                         "revision, and move the pin there with --write")
    s.add_argument("--model", action="append", default=[], metavar="KEY",
                   help="only this [models.KEY] entry (repeatable)")
    s.add_argument("--json", action="store_true", help="one JSON object per file, then a summary")
    s.set_defaults(func=cmd_refresh)

    s = sub.add_parser("fetch", help="one file from the Hub into the model store (resumable, verified)")
    s.add_argument("repo")
    s.add_argument("file")
    s.add_argument("--revision", default="main")
    s.add_argument("--sha256")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_fetch)

    register_self_draft(sub)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return EXIT_BAD_INPUT


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _catalogue() -> Any:
    """The catalogue; entries it skipped (unsafe repo/file) are named on stderr, one warning line each."""
    from outrider.catalogue import CatalogueError, load_catalogue

    try:
        cat = load_catalogue()
    except CatalogueError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from exc
    for line in cat.warnings:
        sys.stderr.write(f"outrider: warning: {line}\n")
    return cat


def _pair(cat: Any, pair_id: str) -> Any:
    try:
        return cat.get(pair_id)
    except KeyError as exc:
        raise CliError(str(exc.args[0]), EXIT_BAD_INPUT) from exc


def _states(cat: Any, store: Any, extra: list[Path] | None = None) -> dict[str, Any]:
    from outrider.catalogue import DiscoveryScanner

    found = DiscoveryScanner(store, extra_folders=extra).match_catalogue(cat)
    return {p.id: store.pair_state(p, found) for p in cat}


def cmd_list(args: argparse.Namespace) -> int:
    """Every catalogue pair with the status the pair picker shows (the same ``CatalogueService`` rows)."""
    from outrider.catalogue import ensure_offline_hub
    from outrider.catalogue.memory import FIT_MARK, format_bytes
    from outrider.catalogue.service import CatalogueService

    ensure_offline_hub()
    service = CatalogueService.default(catalogue=_catalogue())
    scan = service.scan()
    if args.json:
        pairs = []
        for r in scan.rows:
            d = r.pair.to_json()
            d["state"] = r.state.to_json()
            d["installed"] = r.state.installed
            d.update(r.to_json())
            pairs.append(d)
        print_json({"catalogue": str(service.catalogue.path), "store": str(service.store.root),
                    "memory": scan.memory.to_json(), "pairs": pairs})
        return 0
    for r in scan.rows:
        p = r.pair
        print(f"{p.id:28} {r.status_text:22} {format_bytes(p.size):>9} download  {format_bytes(r.memory.total):>9} "
              f"memory @{r.memory.n_ctx}{FIT_MARK[r.fit]}  {p.licence}{'  [gated]' if p.gated else ''}")
        if r.reason:
            print(f"{'':28} {r.reason}")
    print(scan.memory.describe())
    return 0


def _progress_printer(as_json: bool) -> Any:
    from outrider.catalogue import DownloadEvent

    def on_event(ev: DownloadEvent) -> None:
        if as_json:
            print_json(ev.to_json())
        elif ev.type in ("progress", "joined"):
            eta = f", {ev.eta:.0f} s left" if ev.eta is not None else ""
            pct = 100 * ev.bytes_done / ev.total if ev.total else 0
            sys.stderr.write(f"\r{ev.file}: {pct:5.1f}% ({_gb(ev.bytes_done)} of {_gb(ev.total)}, "
                             f"{ev.speed / 1e6:.1f} MB/s{eta})")
            sys.stderr.flush()
        elif ev.type in ("verifying", "done", "start"):
            sys.stderr.write(f"\r{ev.file}: {ev.type} {ev.message}\n")
    return on_event


def _run_download(handle: Any, timeout: float | None = None) -> Any:
    from outrider.catalogue import DownloadError

    try:
        return handle.wait(timeout)
    except KeyboardInterrupt:
        handle.cancel()
        raise
    except DownloadError as exc:
        raise CliError(exc.message, EXIT_RUNTIME) from exc


def _too_big_note(pair: Any) -> str | None:
    """The note printed before downloading a pair that will not fit in this machine's free memory (as the pair
    picker's question); None when it fits or the memory is unknown."""
    from outrider.catalogue.memory import Fit, MemoryInfo, describe_memory, judge_fit, probe_nvidia_vram, read_ram

    memory = MemoryInfo(*read_ram(), *probe_nvidia_vram())
    estimate = pair.memory()
    if judge_fit(estimate.total, memory) is not Fit.TOO_BIG:
        return None
    return (f"note: {pair.id} is too big for this machine ({describe_memory(estimate, memory)}): it will not load "
            "here, or run very slowly; downloading anyway (Ctrl-C stops and keeps the partial file)")


def cmd_download(args: argparse.Namespace) -> int:
    from outrider.catalogue import DownloadError, DownloadManager, DownloadOptions, ModelStore

    cat = _catalogue()
    pair = _pair(cat, args.pair_id)
    note = _too_big_note(pair)
    if note is not None:
        sys.stderr.write(note + "\n")
    store = ModelStore()
    manager = DownloadManager(store, DownloadOptions(endpoint=os.environ.get("HF_ENDPOINT") or None))
    try:
        dl = manager.download_pair(pair, _progress_printer(args.json))
    except DownloadError as exc:
        raise CliError(exc.message, EXIT_RUNTIME) from exc
    paths = _run_download(dl)
    if args.json:
        print_json({"type": "installed", "pair": pair.id, "paths": [str(p) for p in paths]})
    else:
        for p in paths:
            print(p)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from outrider.catalogue import ModelStore, ensure_offline_hub

    ensure_offline_hub()
    cat = _catalogue()
    store = ModelStore()
    pairs = [_pair(cat, args.pair_id)] if args.pair_id else list(cat)
    states = _states(cat, store)
    failed = False
    done: set[str] = set()
    for pair in pairs:
        for fs in states[pair.id].files:
            if fs.model.key in done:
                continue
            done.add(fs.model.key)
            if fs.path is None:
                result = "missing"
                failed = failed or bool(args.pair_id)
            else:
                t0 = time.monotonic()
                ok = store.verify_model(fs.model, fs.path).verified
                result = "ok" if ok else "MISMATCH — downloaded file is corrupted, download again"
                failed = failed or not ok
                _ = t0
            if args.json:
                print_json({"key": fs.model.key, "file": fs.model.file, "path": str(fs.path) if fs.path else None,
                            "result": result.split(" ")[0].lower()})
            else:
                print(f"{fs.model.key:40} {result}  {fs.path or ''}")
    return EXIT_RUNTIME if failed else 0


def cmd_scan(args: argparse.Namespace) -> int:
    from outrider.catalogue import DiscoveryScanner, ModelStore, ensure_offline_hub

    ensure_offline_hub()
    cat = _catalogue()
    store = ModelStore()
    extra = store.user_folders() + [Path(f) for f in args.folder]
    scanner = DiscoveryScanner(store, extra_folders=extra)
    found = scanner.scan()
    matched = scanner.match_catalogue(cat, found)
    states = {p.id: store.pair_state(p, matched) for p in cat}
    complete = [pid for pid, st in states.items() if st.complete]
    if args.json:
        print_json({"files": [f.to_json() for f in found],
                    "matches": {k: v.to_json() for k, v in matched.items()},
                    "complete_pairs": complete,
                    "installed_pairs": [pid for pid, st in states.items() if st.installed]})
        return 0
    for f in found:
        print(f"{f.source:9} {_gb(f.size):>10}  {f.path}")
    print(f"{len(found)} GGUF file(s); complete pairs: {', '.join(complete) or 'none'}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from outrider.catalogue import check_local_pair
    from outrider.engine.llama.gguf_header import GGUFHeaderError

    try:
        report = check_local_pair(args.target, args.draft, args.ctx)
    except GGUFHeaderError as exc:
        raise CliError(f"{exc} ({exc.kind})", EXIT_BAD_INPUT) from exc
    workers = worker_memory(args.rpc) if args.rpc else []
    if args.json:
        print_json({**report.to_json(), "rpc": workers} if args.rpc else report.to_json())
    elif report.compatibility.ok:
        print(f"compatible: the draft can speculate for the target; needs about {_gb(report.memory.total)} "
              f"at {report.memory.n_ctx} tokens of context")
    else:
        print(f"not compatible ({report.compatibility.rule}): {report.compatibility.reason}")
    if workers and not args.json:
        print("\n".join(placement_lines(workers, report.memory.target_weights)))
    return 0 if report.compatibility.ok else EXIT_RUNTIME


def cmd_refresh(args: argparse.Namespace) -> int:
    """Compare the catalogue with the Hub (``catalogue.refresh``); exit 0 when every file was answered (and, without
    --write, matched), 1 when one could not be checked or differs and was not written."""
    import datetime

    from outrider.catalogue import CatalogueError
    from outrider.catalogue.refresh import RefreshResult, refresh, write_catalogue

    cat = _catalogue()
    unknown = [k for k in args.model if k not in cat.models]
    if unknown:
        raise CliError(f"no [models.{unknown[0]!r}] in {cat.path} (known: {', '.join(cat.models)})", EXIT_BAD_INPUT)
    chosen = [m for k, m in cat.models.items() if not args.model or k in args.model]

    def show(r: RefreshResult) -> None:
        if args.json:
            print_json({"type": "file", **r.to_json()})
        elif r.error is not None:
            print(f"{r.key}: could not check ({r.error.message})")
        elif not r.changes:
            print(f"{r.key}: matches the Hub ({r.facts.revision[:12] if r.facts else ''})")
        else:
            for c in r.changes:
                print(f"{r.key}: {c.field} {c.old!s:.64} -> {c.new!s:.64}")
        sys.stdout.flush()

    results = refresh(chosen, latest=args.latest, on_result=show)
    failed = [r for r in results if not r.ok]
    changed = [r for r in results if r.changes]
    written = False
    if args.write and len(failed) < len(results):
        try:
            written = write_catalogue(cat.path, results, datetime.datetime.now(datetime.UTC).date())
        except (CatalogueError, OSError) as exc:
            raise CliError(f"catalogue not written: {exc}", EXIT_RUNTIME) from exc
    summary = {"type": "summary", "checked": len(results), "failed": len(failed), "changed": len(changed),
               "written": written, "catalogue": str(cat.path)}
    if args.json:
        print_json(summary)
    else:
        print(f"{len(results)} file(s) checked, {len(changed)} differ from the Hub, {len(failed)} could not be "
              f"checked; " + (f"written to {cat.path}" if written else "catalogue not changed"
                              + ("" if args.write or not changed else " (--write to update it)")))
    return EXIT_RUNTIME if failed or (changed and not args.write) else 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from outrider.catalogue import DownloadManager, DownloadOptions, FileRequest, ModelStore
    from outrider.catalogue.schema import SHA256_RE, file_path_problem, repo_id_problem

    if args.sha256 and not SHA256_RE.fullmatch(args.sha256.lower()):
        raise CliError("--sha256 must be 64 hex digits", EXIT_BAD_INPUT)
    if args.repo.count("/") != 1:
        raise CliError("REPO must be owner/name", EXIT_BAD_INPUT)
    if (why := repo_id_problem(args.repo)) is not None:
        raise CliError(f"REPO {args.repo[:100]!r} is not a Hugging Face repo id: it {why}", EXIT_BAD_INPUT)
    if (why := file_path_problem(args.file)) is not None:
        raise CliError(f"FILE {args.file[:100]!r} {why}", EXIT_BAD_INPUT)
    if not args.revision or any(c.isspace() or ord(c) < 32 for c in args.revision) or len(args.revision) > 200:
        raise CliError("--revision must be a branch, tag or commit (no spaces or control characters)",
                       EXIT_BAD_INPUT)
    store = ModelStore()
    manager = DownloadManager(store, DownloadOptions(endpoint=os.environ.get("HF_ENDPOINT") or None))
    req = FileRequest(args.repo, args.file, args.revision, None, args.sha256.lower() if args.sha256 else None)
    path = _run_download(manager.download_file(req, _progress_printer(args.json)))
    if args.json:
        print_json({"type": "installed", "path": str(path)})
    print(path)
    return 0
