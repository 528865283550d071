"""Generation statistics: each number is defined once, here and in docs/metrics.md.

Times are seconds from ``time.perf_counter``; rates are tokens per second.

The speed-up is *measured in the reply it describes*, from every target pass the reply made: the cost model,
its interval and the plain probes are defined in ``outrider.engine.speedup`` (and docs/metrics.md);
``PlainRateMeter`` here records the steps and writes the figures into ``GenerationStats``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from outrider.engine.speedup import (
    LOAD_PROBE_GAP,
    LOAD_SHIFT,
    PLAIN_PROBE_GAP,
    PLAIN_PROBES_MIN,
    PLAIN_RUN,
    PLAIN_RUN_FIRST,
    REFIT_INTERVAL_S,
    PassTiming,
    speedup_is_settled,
)


@dataclasses.dataclass
class DrafterCounts:
    """One drafter's part of a reply (a chain of drafters has one per member, chain_draft.py).

    Attributes:
        drafted: tokens it proposed that the target verified (cut where a stop ended the reply, like ``drafted``).
        accepted: of those, the tokens the target accepted.
        steps: steps in which it proposed at least one token.
    """

    drafted: int = 0
    accepted: int = 0
    steps: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


@dataclasses.dataclass
class GenerationStats:
    """Counters of one reply; the derived numbers are properties so they can never disagree, except the
    speed-up fields (``plain_tps`` to ``speedup_high``), which ``PlainRateMeter`` writes from its fit over the
    reply's steps (the counters alone do not hold them).

    Attributes:
        prompt_tokens: tokens in the prompt (the formatted conversation).
        prompt_tokens_reused: prompt tokens whose KV cache was kept from the previous turn (not evaluated).
        prompt_s: time evaluating the new prompt tokens (target and draft), until the device finished.
        generated: tokens emitted in the reply (accepted draft tokens + target tokens).
        drafted: tokens the drafter proposed and the target verified.
        accepted: drafted tokens the target accepted.
        rejections: steps that ended on a rejected draft token (a draft run the target cut short).
        passes: target verification passes (one per decoding step).
        pass_tokens: tokens the target passes yielded: ``generated`` plus an end-of-generation token that ended
            the reply (it costs a pass but is not emitted). Invariant: pass_tokens >= passes.
        k_sum: sum over steps of the tokens drafted and verified (the chosen k less what p-min cut).
        draft_s / verify_s: time spent drafting (draft model catch-up included) / in target passes, each pass
            with its rollback (a checkpoint round's restore and replay of the accepted tokens included).
        decode_s: wall time from the first decoding step to the last (draft + verify + bookkeeping).
        step_s: engine time of all decoding steps (``decode_s`` less the time the consumer held each step).
        ttft_s: time from the request to the first emitted token.
        plain_steps: one-token passes (steps that drafted nothing: measured plain decoding), the first included.
        plain_tps: plain decoding tokens/s of this reply, 1 / c1 of the cost model (``engine.speedup``).
        plain_equiv_s: seconds plain decoding would have needed for the tokens of every step so far.
        stall_s: target time above the cost model's winsorization bound, taken out of both sides (seconds).
        pass_growth: g of the fitted pass cost c1 · (1 + g · (n - 1)): a pass of n tokens costs 1 + g · (n - 1)
            one-token passes (None while the cost model is not identified; 0 when nothing was drafted).
        speedup: plain_equiv_s / (step_s - stall_s); None while the cost model is not identified.
        speedup_low / speedup_high: its 95 % interval (None with ``speedup``); equal when measured exactly.
        draft_mode: the drafter that drafted (``model``, ``lookup``, ``mtp``, a chain ``history+lookup+model``);
            ``off`` when one is loaded but the request asked for no drafting (k = 0), ``none`` without one.
        by_drafter: ``drafted`` and ``accepted`` split by the kind of drafter that proposed each token (``lookup``
            = prompt lookup, ``history``, ``model``, ``mtp``); their sums are ``drafted`` and ``accepted``.
    """

    prompt_tokens: int = 0
    prompt_tokens_reused: int = 0
    prompt_s: float = 0.0
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0
    passes: int = 0
    pass_tokens: int = 0
    k_sum: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    decode_s: float = 0.0
    step_s: float = 0.0
    ttft_s: float | None = None
    plain_steps: int = 0
    plain_tps: float | None = None
    plain_equiv_s: float = 0.0
    stall_s: float = 0.0
    pass_growth: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    draft_mode: str = "none"
    threads: int = 0  # llama.cpp CPU threads the reply ran with (engine/threads.py; 0: not known)
    by_drafter: dict[str, DrafterCounts] = dataclasses.field(default_factory=dict)

    def count_drafters(self, sources: Sequence[str], accepted: int) -> None:
        """Add one step's verified draft tokens, ``sources[i]`` the drafter of token i; the first ``accepted``
        were accepted."""
        seen: set[str] = set()
        for i, kind in enumerate(sources):
            counts = self.by_drafter.get(kind)
            if counts is None:
                counts = self.by_drafter[kind] = DrafterCounts()
            counts.drafted += 1
            counts.accepted += int(i < accepted)
            if kind not in seen:
                seen.add(kind)
                counts.steps += 1

    @property
    def acceptance_rate(self) -> float | None:
        """accepted draft tokens / drafted tokens (None before anything was drafted)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def token_acceptance(self) -> float | None:
        """accepted / (accepted + rejections): the per-token acceptance ``a`` of the geometric model (the
        chance that the next draft token is accepted given the previous one was), which E(k) expects."""
        total = self.accepted + self.rejections
        return self.accepted / total if total else None

    @property
    def tokens_per_pass(self) -> float | None:
        """pass_tokens / passes: how many tokens each read of the target's weights bought (>= 1.00)."""
        return self.pass_tokens / self.passes if self.passes else None

    @property
    def k_mean(self) -> float | None:
        """Mean draft length verified per step (0 for a plain step or a draft p-min emptied)."""
        return self.k_sum / self.passes if self.passes else None

    @property
    def decode_tps(self) -> float | None:
        """generated tokens / decode_s (prompt evaluation excluded)."""
        return self.generated / self.decode_s if self.decode_s > 0 else None

    @property
    def prompt_tps(self) -> float | None:
        """Evaluated (not reused) prompt tokens / prompt_s."""
        evaluated = self.prompt_tokens - self.prompt_tokens_reused
        return evaluated / self.prompt_s if self.prompt_s > 0 and evaluated > 0 else None

    @property
    def other_s(self) -> float:
        """decode_s not spent drafting or verifying (sampling, detokenising, bookkeeping)."""
        return max(0.0, self.decode_s - self.draft_s - self.verify_s)

    @property
    def speedup_settled(self) -> bool:
        """The interval is within ±``SETTLED_WIDTH`` of the figure: shown as a number, else as a range."""
        return speedup_is_settled(self.speedup, self.speedup_low, self.speedup_high)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in DERIVED:
            out[name] = getattr(self, name)
        return out


DERIVED = ("acceptance_rate", "token_acceptance", "tokens_per_pass", "k_mean", "decode_tps", "prompt_tps",
           "other_s", "speedup_settled")


class PlainRateMeter:
    """Records the steps of one reply and keeps the speed-up fields of ``GenerationStats`` current.

    The fit is redone at most every ``REFIT_INTERVAL_S`` of wall time (the GUI reads the figures four times a
    second; a fit takes about a millisecond, which must not slow a reply of sub-millisecond passes), and always
    by ``finish`` before the last statistics go out.
    """

    def __init__(self, stats: GenerationStats, clock: Callable[[], float] = time.perf_counter, *,
                 load_probes: bool = True, settle: int = 1) -> None:
        """``settle``: one-token passes after a pass of another size before one costs what plain decoding costs
        (``speedup.settle_passes``: 1 on a CPU, 2 on a CUDA back-end); each forced run is that much longer."""
        if settle < 1:
            raise ValueError(f"settle must be at least 1 pass, not {settle}")
        self.stats = stats
        self.load_probes = load_probes  # False: plain runs on the fixed schedule only (a reproducible reply)
        self.settle = settle
        self._clock = clock
        self._fitted_at = clock()
        self.steps: list[PassTiming] = []
        self.steps_since_plain = 0  # steps since the latest one-token pass
        self.forced_run = 0  # plain steps in a row up to the latest step that this meter asked for
        self.steady_plain = 0  # one-token passes after the first step that followed ``settle`` one-token passes
        self._asked = False  # whether the latest ``wants_plain_probe`` asked for a plain step
        self._long_run = False  # the run under way measures a new load or thread count: PLAIN_RUN_FIRST long
        self._threads_changed = False  # the latest step ran on another thread count than the one before it

    def wants_plain_probe(self, probe_every: int) -> bool:
        """Whether the next step should be forced plain (k = 0) so that plain decoding is measured.

        A probe is a run of plain steps: the first pass after a verify pass is not what plain decoding costs
        (llama.cpp rebuilds its compute graph when the batch size changes, measured at +25-40 % of a one-token
        pass on the benchmark's pairs), only the passes after it are; on a CUDA back-end only those after the
        second, which captures the CUDA graph the later ones replay (``settle``: each run is that much longer).
        Never the first step (the coldest); then
        a run of ``PLAIN_RUN_FIRST`` from the second step, runs of ``PLAIN_RUN`` every ``PLAIN_PROBE_GAP`` steps
        until ``PLAIN_PROBES_MIN`` steady plain passes were seen, then a run once in every ``probe_every``
        steps (0: never), and sooner when the passes' cost moved (``_load_moved``): a load that starts or
        stops mid-reply changes what a plain pass costs in a way verify passes cannot tell (a descheduled
        thread costs every pass about the same time, whatever its size), so the estimate needs plain passes
        under the new load."""
        self._asked = self._wants_plain(probe_every)
        return self._asked

    def _wants_plain(self, probe_every: int) -> bool:
        if probe_every <= 0 or not self.steps:
            return False
        if self.forced_run:  # a run under way: the first run is longer, it gives the early anchors at once
            long_run = self._long_run or self.steady_plain + 1 < PLAIN_RUN_FIRST
            return self.forced_run < (PLAIN_RUN_FIRST if long_run else PLAIN_RUN) + self.settle - 1
        self._long_run = False
        if len(self.steps) == 1:
            return True  # the second step: the first run
        if self.load_probes and self._threads_changed:
            # Another thread count (``threads.ThreadGovernor``): plain passes cost something else from here on, and
            # the new stretch needs two steady ones of its own at once (the first pays the change of batch size).
            self._threads_changed = False
            self._long_run = True
            return True
        if self.steady_plain < PLAIN_PROBES_MIN:
            return self.steps_since_plain >= PLAIN_PROBE_GAP - 1
        if self.load_probes and self.steps_since_plain >= LOAD_PROBE_GAP and self._load_moved():
            self._long_run = True  # two steady passes under the new load, not one
            return True
        return self.steps_since_plain >= probe_every - 1

    def _load_moved(self) -> bool:
        """Whether the latest two passes both cost more than ``1 + LOAD_SHIFT`` times (or both less than its
        inverse) the median of the passes of their own size since the latest plain pass."""
        recent = self.steps[-self.steps_since_plain:]
        if len(recent) < 3:
            return False
        ratios = []
        for p in recent[-2:]:
            earlier = [q.target_s for q in recent[:-2] if q.batch == p.batch]
            if not earlier:
                return False
            ratios.append(p.target_s / statistics.median(earlier))
        shift = 1 + LOAD_SHIFT
        return all(r > shift for r in ratios) or all(r < 1 / shift for r in ratios)

    def add_step(self, *, batch: int, pass_tokens: int, step_s: float, target_s: float, threads: int = 0) -> None:
        """One decoding step: ``batch`` tokens evaluated, ``pass_tokens`` yielded, ``step_s`` seconds in all of
        which ``target_s`` without the drafter, on ``threads`` llama.cpp threads (0: not known; ``PassTiming``)."""
        if self.steps and threads and self.steps[-1].threads and threads != self.steps[-1].threads:
            self._threads_changed = True
        self.steps.append(PassTiming(batch, min(target_s, step_s), step_s, pass_tokens, threads))
        self.stats.step_s += step_s
        if batch <= 1:
            self.stats.plain_steps += 1
            before = self.steps[-1 - self.settle:-1]
            self.steady_plain += len(self.steps) > 1 + self.settle and all(p.batch <= 1 for p in before)
            self.steps_since_plain = 0
        else:
            self.steps_since_plain += 1
        self.forced_run = self.forced_run + 1 if batch <= 1 and self._asked else 0
        self._asked = False
        if self._clock() - self._fitted_at >= REFIT_INTERVAL_S:
            self.finish()

    def mark_contended(self, passes: int) -> None:
        """The latest ``passes`` steps ran while other processes kept the threads waiting for a CPU (the evidence on
        which they stepped down): a stretch of their own in the fit (``PassTiming.contended``). The first step is
        out of every fit and stays as it is."""
        for i in range(max(1, len(self.steps) - passes), len(self.steps)):
            self.steps[i] = dataclasses.replace(self.steps[i], contended=True)

    def finish(self) -> None:
        """Refit the cost model on every step so far and write the speed-up fields."""
        s = self.stats
        from outrider.engine.speedup_fit import estimate_speedup  # numpy: in the engine process only

        est = estimate_speedup(self.steps, self.settle)
        self._fitted_at = self._clock()
        if est is None:
            s.speedup = s.speedup_low = s.speedup_high = s.plain_tps = s.pass_growth = None
            s.plain_equiv_s = s.stall_s = 0.0
            return
        s.speedup, s.speedup_low, s.speedup_high = est.speedup, est.low, est.high
        s.plain_tps = 1.0 / est.plain_s if est.plain_s > 0 else None
        s.plain_equiv_s, s.stall_s, s.pass_growth = est.plain_equiv_s, est.stall_s, est.growth
