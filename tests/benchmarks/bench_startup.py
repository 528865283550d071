"""Start-up time of the desktop app: time to the window (first paint) and time to ready (the demo pair loaded),
from launch, with an empty history and with a large generated one (2,000 conversations, 100,000 messages).

Each run launches ``outrider --startup-probe`` (the real app: ``ui/app.py``'s ``StartupProbe`` prints when the
window was first painted and when the pair was ready as ``time.monotonic()`` values, one clock for every process
on Linux, then quits) and subtracts the launch time taken here. A *first start* also runs without Python's
bytecode cache (``PYTHONPYCACHEPREFIX`` set to an empty folder: what the first launch after an install pays).
The goal (issue 14): the window within 1.5 s of launch.

Usage: python tests/benchmarks/bench_startup.py [--runs 3] [--conversations 2000] [--messages 100000]
       [--platform xcb|offscreen] [--json]
With --platform xcb (the default when xvfb-run's Xvfb is installed) a private Xvfb server is started once; its
start-up is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GOAL_WINDOW_S = 1.5
PARAGRAPHS = (
    "Speculative decoding lets a small draft model propose several tokens that the target then checks in one "
    "batched pass; the output is exactly what the target alone would have written.",
    "```python\ndef fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n```",
    "- acceptance: the share of drafted tokens the target kept\n- tokens per pass: tokens kept per target pass",
    "The **speed-up** can be below 1× when the draft is rarely right: every rejected token cost a draft step.",
)


def _history_document(conversations: int, messages: int) -> str:
    """An export document (history/exchange.py's JSON format) of ``conversations`` conversations holding
    ``messages`` messages in all, alternating user/assistant, a few hundred characters of Markdown each."""
    from outrider.history.exchange import FORMAT_NAME, FORMAT_VERSION

    per = max(2, messages // conversations)
    now = time.time() - conversations * 600.0
    convs: list[dict[str, Any]] = []
    for c in range(conversations):
        start = now + c * 600.0
        msgs = []
        for m in range(per):
            user = m % 2 == 0
            text = (f"Question {m // 2 + 1} of chat {c + 1}: how does the draft length k change the speed-up?"
                    if user else "\n\n".join(PARAGRAPHS[(c + m + i) % len(PARAGRAPHS)] for i in range(2)))
            msgs.append({"role": "user" if user else "assistant", "text": text, "status": "complete",
                         "created_at": start + m * 5.0, "stats": None})
        convs.append({"uuid": f"00000000-0000-4000-8000-{c:012d}", "title": f"Chat {c + 1} about drafting",
                      "created_at": start, "updated_at": start + per * 5.0, "pair_id": "smollm2-135m-lookup",
                      "settings": {}, "messages": msgs, "unreadable_message_ids": []})
    return json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "exported_at": time.time(),
                       "conversations": convs})


def make_large_home(home: Path, conversations: int, messages: int) -> dict[str, int]:
    """Fill ``home`` (an OUTRIDER_HOME) with the generated history; the newest conversation is the one open last."""
    os.environ["OUTRIDER_HOME"] = str(home)
    from outrider.history import HistoryStore

    store = HistoryStore.open()
    try:
        store.import_json_text(_history_document(conversations, messages))
        summaries = store.list_conversations()
        newest = max(summaries, key=lambda s: getattr(s, "updated_at", 0.0))
        count = sum(1 for _ in summaries)
    finally:
        store.close()
    (home / "settings.json").write_text(json.dumps({"last_conversation_id": newest.id}), encoding="utf-8")
    return {"conversations": count, "messages": conversations * max(2, messages // conversations)}


@contextmanager
def xvfb_display() -> Iterator[str]:
    """A private Xvfb server for the runs; yields its DISPLAY."""
    proc = subprocess.Popen(["Xvfb", "-displayfd", "1", "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        number = proc.stdout.readline().strip()
        if not number:
            raise RuntimeError("Xvfb did not start")
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


def probe_once(env: dict[str, str]) -> dict[str, float]:
    """One launch of the app; seconds from launch to each of its marks (``window``, ``ready``)."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "outrider.cli", "--startup-probe"], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"startup_probe"')]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the probe failed (status {proc.returncode}): {proc.stderr.strip()[-500:]}")
    report = json.loads(lines[-1])
    times = {name: value - start for name, value in report["startup_probe"].items()}
    return times | {f"{name}_cpu": value for name, value in report["cpu"].items()}


def run_case(name: str, home: Path, env: dict[str, str], runs: int, *, cold: bool) -> dict[str, Any]:
    samples = []
    for _ in range(runs):
        run_env = {**env, "OUTRIDER_HOME": str(home)}
        cache = None
        if cold:  # no bytecode cache: every module compiled, as on the first launch after an install
            cache = tempfile.mkdtemp(prefix="outrider-pycache-")
            run_env["PYTHONPYCACHEPREFIX"] = cache
        try:
            samples.append(probe_once(run_env))
        finally:
            if cache:
                shutil.rmtree(cache, ignore_errors=True)
    shown = [s["conversation"] for s in samples if "conversation" in s]
    window = [s["window"] for s in samples]
    ready = [s["ready"] for s in samples]
    return {"case": name, "runs": runs, "window_median_s": statistics.median(window), "window_min_s": min(window),
            "window_max_s": max(window), "ready_median_s": statistics.median(ready), "ready_min_s": min(ready),
            "ready_max_s": max(ready), "window_cpu_s": statistics.median(s.get("window_cpu", 0.0) for s in samples),
            "conversation_median_s": statistics.median(shown) if shown else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--platform", choices=("xcb", "offscreen"),
                        default="xcb" if shutil.which("Xvfb") else "offscreen")
    parser.add_argument("--json", action="store_true", help="one JSON object per case instead of a table")
    args = parser.parse_args(argv)

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "OUTRIDER_HOME")}
    env["QT_QPA_PLATFORM"] = args.platform
    results = []
    with tempfile.TemporaryDirectory(prefix="outrider-bench-startup-") as tmp, \
            (xvfb_display() if args.platform == "xcb" else _no_display()) as display:
        if display:
            env["DISPLAY"] = display
        empty, large = Path(tmp, "empty"), Path(tmp, "large")
        empty.mkdir()
        large.mkdir()
        t = time.monotonic()
        size = make_large_home(large, args.conversations, args.messages)
        made = time.monotonic() - t
        print(f"# large history: {size['conversations']} conversations, {size['messages']} messages "
              f"(generated in {made:.1f} s); platform {args.platform}; {os.cpu_count()} CPUs; load average "
              f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
        probe_once({**env, "OUTRIDER_HOME": str(empty)})  # warm-up: the OS file cache and the bytecode cache
        cases = [("empty history", empty, False), (f"{size['conversations']:,} chats / {size['messages']:,} "
                                                   "messages", large, False),
                 ("first start (no bytecode cache, empty history)", empty, True)]
        for name, home, cold in cases:
            results.append(run_case(name, home, env, args.runs, cold=cold))
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    print("| case | window (median, min–max) | last chat shown (median) | ready (median, min–max) | CPU to window |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        shown = "–" if r["conversation_median_s"] is None else f"{r['conversation_median_s']:.2f} s"
        print(f"| {r['case']} | {r['window_median_s']:.2f} s ({r['window_min_s']:.2f}–{r['window_max_s']:.2f}) | "
              f"{shown} | "
              f"{r['ready_median_s']:.2f} s ({r['ready_min_s']:.2f}–{r['ready_max_s']:.2f}) | "
              f"{r['window_cpu_s']:.2f} s |")
    return 0


@contextmanager
def _no_display() -> Iterator[str]:
    yield ""


if __name__ == "__main__":
    raise SystemExit(main())
