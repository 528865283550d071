"""Building and measuring self-drafts with llama.cpp (runs in the self-draft build process, never in the app).

``build_plan`` writes one candidate (``engine/llama/prune.py``) and ``measure_plan`` loads it as the target's
draft and speculates on the calibration prompts: greedy, ``CALIBRATION_K`` tokens drafted per step, each prompt run
plain and then speculative, interleaved, so both costs are measured under the same load. ``search`` does that for
every ``candidate_plans`` entry and returns them all, the best first (by predicted speed-up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from outrider.engine.engine import Engine
from outrider.engine.errors import EngineError
from outrider.engine.events import DoneEvent
from outrider.engine.llama.prune import write_pruned
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ChatMessage, ContextSettings, DraftParams, PairSpec
from outrider.engine.selfdraft import (
    CALIBRATION_K,
    CandidateMeasure,
    DraftType,
    LayerPlan,
    SelfDraftError,
    rank,
)

Progress = Callable[[str, int, int, str], None]
"""``progress(stage, done, total, message)``: stage is ``build`` or ``calibrate``; ``done`` of ``total`` steps."""

CALIBRATION_TOKENS = 48  # tokens generated per prompt and run: enough for tens of draft steps, seconds per prompt
CALIBRATION_CTX = 1024


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What to measure on: prompts (user messages, through the target's chat template) and the run's shape."""

    prompts: tuple[str, ...]
    max_tokens: int = CALIBRATION_TOKENS
    k: int = CALIBRATION_K
    n_ctx: int = CALIBRATION_CTX
    threads: int = 0

    def __post_init__(self) -> None:
        if not self.prompts or not all(p.strip() for p in self.prompts):
            raise SelfDraftError("bad_calibration", "calibration needs at least one prompt that is not empty")


def build_plan(backend: Backend, target: Path, out: Path, plan: LayerPlan, draft_type: DraftType,
               *, threads: int = 0) -> None:
    """Write the draft keeping ``plan.keep`` to ``out``. Raises ``SelfDraftError``."""
    write_pruned(backend, target, out, plan.prune, draft_type, threads=threads)


def _prompt_tokens(engine: Engine, prompt: str) -> list[int]:
    try:
        return engine.tokenize_chat([ChatMessage("user", prompt)], reserve=CALIBRATION_TOKENS)
    except EngineError:  # no usable chat template: the text as it is
        return engine.tokenize_prompt(prompt)


def _done(events: object) -> DoneEvent:
    for event in events:  # type: ignore[attr-defined]
        if isinstance(event, DoneEvent):
            return event
    raise EngineError("generation ended without a done event")


def measure_plan(backend: Backend, target: Path, draft: Path, plan: LayerPlan, calibration: Calibration,
                 *, progress: Callable[[int], None] | None = None) -> CandidateMeasure:
    """Load ``target`` with ``draft`` and measure acceptance and costs on ``calibration``'s prompts.

    Raises ``SelfDraftError('load_failed')`` when the pair does not load (llama.cpp's reason in the message).
    """
    engine = Engine(backend)
    try:
        engine.load(PairSpec(target=str(target), draft=str(draft),
                             context=ContextSettings(n_ctx=calibration.n_ctx, threads=calibration.threads)))
    except EngineError as exc:
        raise SelfDraftError("load_failed", f"the written draft does not load with its target: {exc}") from exc
    if engine.info is None or engine.info.draft_mode != "model":
        engine.unload()
        raise SelfDraftError("not_speculative", "this model cannot speculate with a draft model (llama.cpp cannot "
                                                "roll its memory back), so a self-draft would never be used")
    drafted = accepted = rejections = spec_passes = plain_tokens = 0
    draft_s = verify_s = plain_s = 0.0
    params = DraftParams(k=calibration.k)
    try:
        for i, prompt in enumerate(calibration.prompts):
            tokens = _prompt_tokens(engine, prompt)
            plain = _done(engine.generate(tokens, max_tokens=calibration.max_tokens, plain=True, ignore_eos=True))
            spec = _done(engine.generate(tokens, max_tokens=calibration.max_tokens, draft=params, ignore_eos=True))
            plain_tokens += plain.stats.passes
            plain_s += plain.stats.verify_s
            drafted += spec.stats.drafted
            accepted += spec.stats.accepted
            rejections += spec.stats.rejections
            spec_passes += spec.stats.passes
            draft_s += spec.stats.draft_s
            verify_s += spec.stats.verify_s
            if progress is not None:
                progress(i + 1)
    finally:
        engine.unload()
    return CandidateMeasure(
        plan=plan, k=calibration.k, drafted=drafted, accepted=accepted, rejections=rejections,
        draft_s_per_token=draft_s / drafted if drafted else 0.0,
        verify_s_per_pass=verify_s / spec_passes if spec_passes else 0.0,
        plain_s_per_token=plain_s / plain_tokens if plain_tokens else 0.0,
        draft_bytes=draft.stat().st_size,
    )


def search(backend: Backend, target: Path, workdir: Path, plans: Sequence[LayerPlan], draft_type: DraftType,
           calibration: Calibration, *, progress: Progress | None = None,
           threads: int = 0) -> tuple[list[CandidateMeasure], Path]:
    """Build and measure every plan, each draft written to ``workdir``; every measure (the best first) and the
    path of the best draft. Only the best draft so far is kept on disk (a beaten one is deleted at once), so the
    search needs room for two drafts, not one per candidate."""
    measures: list[CandidateMeasure] = []
    best: tuple[CandidateMeasure, Path] | None = None
    steps = len(plans) * (1 + len(calibration.prompts))
    done = 0

    def tell(stage: str, message: str) -> None:
        if progress is not None:
            progress(stage, done, steps, message)

    for n, plan in enumerate(plans):
        path = workdir / f"candidate-{n}.gguf"
        name = f"candidate {n + 1} of {len(plans)} (blocks {plan.label})"
        tell("build", f"{name}: writing")
        build_plan(backend, target, path, plan, draft_type, threads=threads)
        done += 1
        base = done

        def on_prompt(i: int, base: int = base, name: str = name) -> None:
            nonlocal done
            done = base + i
            tell("calibrate", f"{name}: prompt {i} of {len(calibration.prompts)}")

        measure = measure_plan(backend, target, path, plan, calibration, progress=on_prompt)
        measures.append(measure)
        if best is None or rank(measure) < rank(best[0]):
            if best is not None:
                best[1].unlink(missing_ok=True)
            best = (measure, path)
        else:
            path.unlink(missing_ok=True)
        tell("calibrate", f"{name}: acceptance {measure.acceptance:.0%}, predicted speed-up "
                          f"{measure.predicted_speedup:.2f}x")
    if best is None:
        raise SelfDraftError("bad_layers", "no candidate to measure")
    measures.sort(key=rank)
    return measures, best[1]
