"""Helpers of the server tests (fixtures are in conftest.py): a ``LocalServer`` on 127.0.0.1 (a free port) over a
real engine client, with the official ``openai`` client pointed at it and the jobs it finished."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import openai

from outrider.engine.params import DraftParams
from outrider.server.app import DEFAULT_STREAM_INTERVAL_S, ServerConfig
from outrider.server.local import LocalServer
from outrider.server.requests import Defaults
from outrider.server.scheduler import Job
from outrider.worker.client import EngineClient

T = TypeVar("T")

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


def at_once(calls: Sequence[Callable[[], T]], timeout: float = 120.0) -> list[T]:
    """Run every call in a thread of its own, all started before any is waited for; their results in the order of
    ``calls``. The first exception a call raised is raised here; a call still running after ``timeout`` fails."""
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # re-raised on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"a concurrent call did not finish within {timeout:.0f} s"
    if errors:
        raise errors[0]
    return cast("list[T]", results)  # every call returned: each slot holds its result
