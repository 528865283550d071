"""The app itself (no command) with a data folder it cannot use: one line, exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_app_with_outrider_home_a_file_says_so_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    env = dict(os.environ, OUTRIDER_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "outrider.cli"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"outrider: error: cannot use the data directory {home}: it is a file, not a folder"]
    assert "Traceback" not in r.stderr
