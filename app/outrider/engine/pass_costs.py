"""What the target's passes cost on this machine, timed once when a pair with an MTP head is loaded.

Automatic depth judges an MTP head's first draft before it has timed any pass of its own. Without timings it
assumes that verifying n tokens costs 1 + 0.25 (n - 1) one-token passes (``autodraft.PRIOR_SLOPE``), which holds
on a GPU and for a memory-bound model on a CPU, and is far off on a busy CPU: on one thread beside a CPU-bound
process a pass of 2 tokens cost 2.8x a pass of 1 on the 8 x 768 bench model, and a never-loaded pair's first
24-token reply drafted from its first step on the assumption, at 0.83-0.85x plain (bench_mtp_steps.py --burner,
"auto cold"). A few passes timed at load let that first judgement stand on this machine's costs instead.

The passes are those of a verify step, timed as ``SpeculativeDecoder.generate`` times them: the same context, every
row's logits, an awake head's copy of the hidden states included (``MtpDraft._capture`` follows every decode), the
decode waited for (a GPU returns before its work is done). Each size runs ``settle`` untimed passes first: the pass
that follows one of another size rebuilds llama.cpp's graph (and on CUDA the next one captures it), which plain
decoding in a run does not pay. Every pass starts from an empty memory, so the target holds nothing afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

PASS_SIZES = (1, 2, 3, 5)  # tokens per pass: plain decoding, and the verify passes of drafts of 1, 2 and 4 (an
# MTP head's first draft is 2 to 4 long: ``autodraft.MTP_K_START`` .. ``FIRST_DRAFT_MAX``); the cost model fits its
# line through the batched sizes (``autodraft._batch_line``), so three of them
PASS_REPEATS = 3  # timings per size: ``autodraft.MIN_SAMPLES``, below which one timing is checked against the others
PASS_BUDGET_S = 1.0  # seconds at most for the timed passes (a large model on a CPU): the sizes timed by then count


class TimedContext(Protocol):
    """The target context's calls the timing uses (``llama.backend.ModelContext``)."""

    n_batch: int

    def clear(self) -> None: ...

    def decode(self, tokens: Sequence[int], *, logits: str | int = "last", abortable: bool = False) -> None: ...

    def synchronize(self) -> None: ...


def time_target_passes(context: TimedContext, token: int, *, settle: int, rollback_limit: int | None,
                       sizes: Sequence[int] = PASS_SIZES, repeats: int = PASS_REPEATS,
                       budget_s: float = PASS_BUDGET_S,
                       clock: Callable[[], float] = time.perf_counter) -> dict[int, list[float]]:
    """Seconds per pass, per batch size: ``repeats`` timings of each size in ``sizes`` that one pass can hold (at
    most ``n_batch`` tokens, and at most ``rollback_limit`` + 1 on a target that rolls back through snapshots),
    each after ``settle`` untimed passes of that size, every pass ``token`` repeated from position 0, after one
    untimed pass of the largest. Sizes are timed in the order given; once ``budget_s`` has passed, no further size
    is started. The context is left empty."""
    limit = context.n_batch if rollback_limit is None else min(context.n_batch, rollback_limit + 1)
    sizes = [n for n in sizes if n <= limit]
    timings: dict[int, list[float]] = {}
    try:
        if sizes:
            # Untimed: the first pass after a load reads the weights in from the file (1.2-1.3x a plain pass's
            # time on the 8 x 768 bench model, timed first it made every batch look cheap next to plain decoding).
            context.clear()
            context.decode([token] * max(sizes), logits="all")
            context.synchronize()
        start = clock()  # the budget is the timing's own: the pass that reads the weights in is any load's
        for n in sizes:
            if clock() - start > budget_s:
                break
            timed: list[float] = []
            for i in range(settle + repeats):
                context.clear()
                t0 = clock()
                context.decode([token] * n, logits="all")
                context.synchronize()
                if i >= settle:
                    timed.append(clock() - t0)
            timings[n] = timed
    finally:
        context.clear()
    return timings
