"""Helpers of the server tests (fixtures are in conftest.py): a ``LocalServer`` on 127.0.0.1 (a free port) over a
real engine client, with the official ``openai`` client pointed at it and the jobs it finished."""

from __future__ import annotations

import dataclasses
import threading

import openai

from outrider.engine.params import DraftParams
from outrider.server.app import DEFAULT_STREAM_INTERVAL_S, ServerConfig
from outrider.server.local import LocalServer
from outrider.server.requests import Defaults
from outrider.server.scheduler import Job
from outrider.worker.client import EngineClient

DEMO_CTX = 1024
TINY_CTX = 2048


@dataclasses.dataclass
class Served:
    """A running server, its engine client, an OpenAI client for it and the jobs it finished (in order)."""

    server: LocalServer
    engine: EngineClient
    api: openai.OpenAI
    finished: list[Job]
    done: threading.Condition

    @property
    def url(self) -> str:
        return self.server.url

    def wait_finished(self, count: int, timeout: float = 60.0) -> list[Job]:
        """The first ``count`` finished jobs (waits for them)."""
        with self.done:
            assert self.done.wait_for(lambda: len(self.finished) >= count, timeout), (
                f"only {len(self.finished)} of {count} jobs finished")
            return list(self.finished[:count])

    def reset(self) -> None:
        with self.done:
            self.finished.clear()


def serve(engine: EngineClient, name: str, *, api_key: str | None = None, max_tokens_limit: int = 4096,
          max_request_bytes: int = 1 << 20, max_queued: int = 16, k: int | None = None,
          stream_interval_s: float = DEFAULT_STREAM_INTERVAL_S) -> Served:
    finished: list[Job] = []
    done = threading.Condition()

    def on_finished(job: Job) -> None:
        with done:
            finished.append(job)
            done.notify_all()

    config = ServerConfig(model_name=lambda: name, api_key=api_key,
                          defaults=Defaults(draft=DraftParams(k=k), max_tokens_limit=max_tokens_limit),
                          max_request_bytes=max_request_bytes, stream_interval_s=stream_interval_s)
    server = LocalServer(engine, config, port=0, max_queued=max_queued, on_finished=on_finished)
    server.start()
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key=api_key or "no-key", max_retries=0, timeout=120)
    return Served(server, engine, api, finished, done)
