"""``python -m outrider.worker``: start an engine process, print its hello (backend) and stop it (exit 0)."""

from __future__ import annotations

import json
import sys

from outrider.worker.client import EngineClient
from outrider.worker.errors import WorkerError


def main() -> int:
    try:
        with EngineClient() as client:
            print(json.dumps({"pid": client.pid, "backend": client.backend}, indent=2))
            code = client.stop()
    except WorkerError as exc:
        print(f"outrider worker: {exc}", file=sys.stderr)
        return 3
    return 0 if code == 0 else 3


if __name__ == "__main__":
    raise SystemExit(main())
