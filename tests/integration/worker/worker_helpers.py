"""Helpers shared by the engine-process tests (fixtures are in conftest.py)."""

from __future__ import annotations

from pathlib import Path

from outrider.engine.params import ContextSettings, PairSpec, TextRequest
from outrider.worker.client import EngineClient
from support.tiny_gguf import Family

N_CTX = 512
CTX = ContextSettings(n_ctx=N_CTX, n_batch=256, threads=2)


def good_spec(model: Path | str, **kwargs: object) -> PairSpec:
    return PairSpec(str(model), context=CTX, **kwargs)  # type: ignore[arg-type]


def family_spec(family: Family, draft: str = "draft") -> PairSpec:
    return PairSpec(str(family.target), draft=str(getattr(family, draft)), context=CTX)


def generate_text(client: EngineClient, prompt: str = "the of and", max_tokens: int = 8) -> str:
    with client.generate(TextRequest(prompt=prompt, max_tokens=max_tokens)) as gen:
        for _ in gen:
            pass
        assert gen.done is not None
        return gen.text


def assert_good_load_works(client: EngineClient, model: Path) -> None:
    """The parent is alive and a good model loads and generates after whatever happened before."""
    info = client.load(good_spec(model))
    assert info.n_ctx == N_CTX
    generate_text(client, max_tokens=4)
