"""outrider.crash: reports for uncaught exceptions and native crashes of the app, and the pending-report marker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider import crash

APP_DIR = str(Path(crash.__file__).resolve().parents[1])


@pytest.fixture
def forwarded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hooks in place before ours (pytest-qt and pytest install their own): record what is passed on."""
    seen: list[str] = []
    monkeypatch.setattr(sys, "excepthook", lambda t, e, tb: seen.append(f"{t.__name__}: {e}"))
    monkeypatch.setattr(threading, "excepthook", lambda a: seen.append(f"{a.exc_type.__name__}: {a.exc_value}"))
    return seen


@pytest.fixture
def crash_dir(tmp_path: Path, forwarded: list[str]) -> Iterator[Path]:
    yield tmp_path / "logs"
    crash.uninstall_crash_handler()


def _run_child(code: str, log: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": APP_DIR, "OUTRIDER_HOME": str(log.parent)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_nothing_pending_in_a_fresh_directory(crash_dir: Path) -> None:
    assert crash.install_crash_handler(crash_dir) == crash_dir
    assert crash.pending_crash_report() is None
    crash.acknowledge_crash_report()  # no marker: no error


def test_install_is_idempotent_and_uninstall_restores_hooks(crash_dir: Path, tmp_path: Path) -> None:
    before, before_thread = sys.excepthook, threading.excepthook
    crash.install_crash_handler(crash_dir)
    assert crash.install_crash_handler(tmp_path / "other") == crash_dir
    own = crash_dir / f"faulthandler-{os.getpid()}.log"
    assert own.is_file()
    crash.uninstall_crash_handler()
    assert sys.excepthook is before and threading.excepthook is before_thread
    assert not own.exists()  # empty: removed on a clean exit


def test_uncaught_exception_writes_a_report_and_marker(crash_dir: Path, forwarded: list[str]) -> None:
    seen: list[Path] = []
    crash.install_crash_handler(crash_dir, on_report=seen.append)
    try:
        raise ValueError("boom in a slot")
    except ValueError:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    report = crash.pending_crash_report()
    assert report is not None and report.parent == crash_dir and seen == [report]
    text = report.read_text(encoding="utf-8")
    assert "Uncaught ValueError in the main thread" in text
    assert "boom in a slot" in text and "outrider: " in text and "Traceback" in text
    assert forwarded == ["ValueError: boom in a slot"]  # the previous hook still gets it
    crash.acknowledge_crash_report()
    assert crash.pending_crash_report() is None
    assert report.is_file()  # the report is kept


def test_exception_in_a_thread_is_reported(crash_dir: Path, forwarded: list[str]) -> None:
    crash.install_crash_handler(crash_dir)

    def fail() -> None:
        raise RuntimeError("worker thread failed")

    t = threading.Thread(target=fail, name="outrider-test-thread")
    t.start()
    t.join()
    report = crash.pending_crash_report()
    assert report is not None
    text = report.read_text(encoding="utf-8")
    assert "thread 'outrider-test-thread'" in text and "worker thread failed" in text
    assert forwarded == ["RuntimeError: worker thread failed"]


def test_keyboard_interrupt_is_not_a_crash(crash_dir: Path, forwarded: list[str]) -> None:
    crash.install_crash_handler(crash_dir)
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    assert crash.pending_crash_report() is None
    assert forwarded == ["KeyboardInterrupt: "]


def test_a_failing_callback_does_not_hide_the_report(crash_dir: Path) -> None:
    def bad(_: Path) -> None:
        raise OSError("dialog failed")

    crash.install_crash_handler(crash_dir, on_report=bad)
    crash.write_crash_report(ValueError, ValueError("x"), None)
    assert crash.pending_crash_report() is not None


def test_newest_report_wins_and_old_ones_are_pruned(crash_dir: Path) -> None:
    paths = [crash.write_crash_report(ValueError, ValueError(str(i)), None, directory=crash_dir)
             for i in range(crash.REPORTS_KEPT + 3)]
    assert crash.pending_crash_report(crash_dir) == paths[-1]
    assert len(list(crash_dir.glob("crash-*.txt"))) == crash.REPORTS_KEPT


def test_broken_marker_means_nothing_pending(crash_dir: Path) -> None:
    crash_dir.mkdir(parents=True)
    (crash_dir / crash.MARKER_NAME).write_text("{not json", encoding="utf-8")
    assert crash.pending_crash_report(crash_dir) is None
    (crash_dir / crash.MARKER_NAME).write_text('{"report": "gone.txt"}', encoding="utf-8")
    assert crash.pending_crash_report(crash_dir) is None


def test_uncaught_exception_in_a_real_process(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    proc = _run_child("""
        from outrider.crash import install_crash_handler
        install_crash_handler()
        raise SystemError("the GUI fell over")
    """, log)
    assert proc.returncode == 1 and "the GUI fell over" in proc.stderr
    report = crash.pending_crash_report(log)
    assert report is not None and "the GUI fell over" in report.read_text(encoding="utf-8")
    assert not list(log.glob("faulthandler-*.log"))  # atexit removed the empty native file


def test_native_crash_is_reported_on_the_next_start(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    proc = _run_child("""
        import faulthandler
        from outrider.crash import install_crash_handler
        install_crash_handler()
        faulthandler._sigsegv()
    """, log)
    assert proc.returncode != 0
    left = list(log.glob("faulthandler-*.log"))
    assert len(left) == 1 and "Fatal Python error" in left[0].read_text(encoding="utf-8")
    report = crash.pending_crash_report(log)  # harvested on the "next start"
    assert report is not None
    text = report.read_text(encoding="utf-8")
    assert "native crash (Fatal Python error: Segmentation fault)" in text and "Current thread" in text
    assert not list(log.glob("faulthandler-*.log"))


def test_empty_native_file_of_a_dead_process_is_removed(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    log.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = log / f"faulthandler-{int(dead.stdout)}.log"
    stale.write_text("", encoding="utf-8")
    alive = log / f"faulthandler-{os.getppid()}.log"  # a running process (another instance): left alone
    alive.write_text("", encoding="utf-8")
    assert crash.pending_crash_report(log) is None
    assert not stale.exists() and alive.exists()


def test_missing_std_streams_go_to_a_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert crash.ensure_std_streams(tmp_path) is None  # both exist under pytest
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", None)
    path = crash.ensure_std_streams(tmp_path)
    assert path == tmp_path / crash.APP_LOG_NAME
    print("hello from a windowed app")
    sys.stderr.write("a warning\n")
    sys.stdout.flush()
    text = path.read_text(encoding="utf-8")
    assert "hello from a windowed app" in text and "a warning" in text
    sys.stdout.close()


def test_the_app_shows_a_crash_of_last_time_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ui.app.crash_notice: the next start names the report, then forgets it (no Qt needed)."""
    from outrider.ui.app import crash_notice

    monkeypatch.setenv("OUTRIDER_HOME", str(tmp_path))
    assert crash_notice() is None
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        report = crash.write_crash_report(type(exc), exc, exc.__traceback__)
    notice = crash_notice()
    assert notice is not None and str(report) in notice
    assert crash_notice() is None
