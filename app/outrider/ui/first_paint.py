"""``FirstPaintWatcher``: one signal when a window has been painted for the first time.

Start-up paints first and loads after (``app.py``): the pair look-up, the catalogue and the model load wait for
this signal, so they never compete with the first paint for the one Python thread that runs at a time.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QTimer, Signal
from PySide6.QtWidgets import QApplication, QWidget

# If no paint event is seen (a platform that never exposes the window), start loading anyway after this long.
FALLBACK_MS = 2000


class FirstPaintWatcher(QObject):
    """Watches the application's paint events for the first one of ``window`` or a widget inside it.

    Signals:
        painted: once, after the event loop has finished the turn in which the window was first painted (so its
            pixels are on the screen), or ``FALLBACK_MS`` after it was shown if no paint came; never for a window
            that was not shown, or closed first.
    """

    painted = Signal()

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        app = QApplication.instance()
        assert isinstance(app, QApplication), "a QApplication is needed before a window"
        self._window = window
        self._app = app
        self._done = False
        self._cancelled = False
        app.installEventFilter(self)  # paint events go to the widgets inside the window, not to the window
        self._fallback = QTimer(self)  # started when the window is shown: a window never shown never emits
        self._fallback.setSingleShot(True)
        self._fallback.timeout.connect(self._on_fallback_timeout)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt override
        kind = event.type()
        if self._done or kind not in (QEvent.Type.Paint, QEvent.Type.Show, QEvent.Type.Close):
            return False
        if kind == QEvent.Type.Paint and isinstance(watched, QWidget) and watched.window() is self._window:
            self._finish()
        elif kind == QEvent.Type.Show and watched is self._window:
            self._fallback.start(FALLBACK_MS)
        elif kind == QEvent.Type.Close and watched is self._window:
            self.cancel()  # closed before it was painted: nothing is to start loading for it
        return False

    def _on_fallback_timeout(self) -> None:
        self._finish()

    def cancel(self) -> None:
        """Never emit ``painted`` (the app is quitting, or the window closed: nothing may start loading)."""
        self._cancelled = True
        self._finish()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._fallback.stop()
            self._app.removeEventFilter(self)
            QTimer.singleShot(0, self, self._emit)  # after this paint has been flushed

    def _emit(self) -> None:
        if not self._cancelled and self._window.isVisible():
            self.painted.emit()
