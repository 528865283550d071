"""The exactness check of the benchmark dialog: ``outrider verify``'s plan
(``outrider.engine.measure.verify_stats``: greedy identity, then the per-position token distributions of
speculative vs plain samples) run through the engine bridge, cancellable,
with progress; ``verify_summary`` puts its verdict in words.
"""

from __future__ import annotations

from typing import Any, Protocol

from PySide6.QtCore import QObject

from outrider.engine.measure.bench import stats_dict
from outrider.engine.measure.verify_stats import VerifyCollector, VerifyJob, VerifyReport
from outrider.engine.params import ChatMessage, DraftParams, SamplingParams, TextRequest
from outrider.ui.dialogs.benchmark_runner import BridgeRun, EngineBridgeLike, RunState


class VerifyBridgeLike(EngineBridgeLike, Protocol):
    """What the exactness check needs from ``QtEngineBridge``: the benchmark's signals plus ``step_received``
    (a ``StepBatch``: ``steps``, each with the emitted token ids ``tokens``)."""

    step_received: Any


class VerifyRunner(BridgeRun):
    """Runs ``outrider verify``'s plan (``outrider.engine.measure.verify_stats``) through the bridge, one
    generation at a time: greedy speculative and plain, then ``samples`` speculative/plain pairs at the sampling
    settings. ``finished`` carries the ``VerifyReport``; the other signals are ``BridgeRun``'s.
    """

    bridge: VerifyBridgeLike

    def __init__(self, bridge: VerifyBridgeLike, parent: QObject | None = None) -> None:
        super().__init__(bridge, parent)
        self.collector: VerifyCollector | None = None
        self._prompt = ""
        self._sampling = SamplingParams(temperature=1.0)
        self._draft = DraftParams()
        self._tokens: list[int] = []

    def start(self, prompt: str, *, samples: int, tokens: int, sampling: SamplingParams,
              draft: DraftParams | None = None, alpha: float = 0.01) -> None:
        """Check ``prompt`` with ``samples`` samples of ``tokens`` tokens per mode at ``sampling`` (temperature
        > 0; its seed, or 0, seeds the samples)."""
        if self.running:
            raise RuntimeError("a check is already running")
        if sampling.temperature <= 0:
            raise ValueError("the sampling check needs a temperature above 0")
        self.collector = VerifyCollector(samples, tokens, sampling.seed or 0, alpha)
        self._prompt = prompt
        self._sampling = sampling
        self._draft = draft or DraftParams()
        self._begin(self.collector.total)

    def request_for(self, job: VerifyJob) -> TextRequest:
        s = self._sampling
        sampling = SamplingParams(0.0 if job.greedy else s.temperature, s.top_k, s.top_p, s.min_p, job.seed)
        assert self.collector is not None
        return TextRequest(messages=(ChatMessage("user", self._prompt),), max_tokens=self.collector.tokens,
                           sampling=sampling, draft=self._draft, plain=job.plain)

    def _request(self, index: int) -> TextRequest:
        assert self.collector is not None
        self._tokens = []
        return self.request_for(self.collector.jobs[index])

    def _bridge_slots(self) -> list[tuple[Any, Any]]:
        return [(self.bridge.step_received, self._on_bridge_step_received), *super()._bridge_slots()]

    def _on_bridge_step_received(self, batch: Any) -> None:
        if self.state is not RunState.RUNNING:
            return
        for step in getattr(batch, "steps", (batch,)):
            self._tokens.extend(int(t) for t in step.tokens)

    def _record(self, index: int, done: Any) -> None:
        assert self.collector is not None
        stats = stats_dict(done.stats)
        self.collector.record(self.collector.jobs[index], self._tokens, drafted=int(stats.get("drafted") or 0),
                              accepted=int(stats.get("accepted") or 0))

    def _result(self) -> object:
        assert self.collector is not None
        return self.collector.report()


def verify_sentence(report: VerifyReport) -> str:
    """The verdict of an exactness check as one plain sentence (the figures are in ``verify_details``)."""
    greedy = (f"greedy output identical to plain decoding over {report.greedy_tokens} tokens"
              if report.greedy_identical else
              f"greedy output differs from plain decoding at token {report.first_divergence}")
    if report.verdict == "exact":
        return (f"Exact: {greedy}, and the sampled text is distributed as plain sampling's — speculation changed "
                "nothing but the speed.")
    if report.verdict == "inconclusive":
        if report.drafted == 0:
            why = ("nothing was drafted while sampling, so the speculative runs were plain decoding and prove "
                   "nothing — try another prompt or a longer draft")
        else:
            why = "no position had tokens frequent enough to compare — use more samples"
        return f"Inconclusive: {why} ({greedy})."
    where = ", ".join(str(j) for j in report.rejected)
    sampled = (f"the sampled tokens differ from plain sampling at position(s) {where}" if report.rejected else
               "the sampled tokens are not distributed as plain sampling's")
    return f"Not exact: {greedy}; {sampled}."


def verify_details(report: VerifyReport) -> str:
    """The statistics behind the verdict: what was compared, and the tests' figures."""
    checked = f"{report.samples} speculative and {report.samples} plain samples of {report.tokens} tokens"
    drafted = (f"{report.drafted:,} draft tokens were verified by the target while sampling, "
               f"{report.accepted:,} accepted.")
    numbers = (f"smallest p-value {report.min_p_value:.3g} (each must exceed {report.threshold:.3g}), largest "
               f"total-variation distance {report.max_tv:.3f}")
    return f"Compared {checked}: {numbers}. {drafted}"


def verify_summary(report: VerifyReport) -> str:
    """The verdict and its statistics, for a saved report."""
    return f"{verify_sentence(report)}\n\n{verify_details(report)}"
