"""The live statistics' words (plain Python, no Qt: testable alone): tooltips, one-line explanations, numbers,
the speed-up as the panels write them and the "you are here" curves. The figures themselves come from the
conversation flow's ``ReplyMeter`` (``outrider.conversation.meter``).
"""

from __future__ import annotations

from collections.abc import Sequence

from outrider.conversation.meter import LiveStats
from outrider.engine.autodraft import expected_rate, expected_tokens_per_pass
from outrider.engine.speedup import describe_range, describe_speedup, speedup_is_settled

_PLAIN = "plain decoding measured in this reply, at the same context length and load"

# Tooltips: the definitions of docs/metrics.md, word for word where possible.
TOOLTIPS: dict[str, str] = {
    "decode_now": "Decode tokens/s over the last second: tokens emitted / decode time (prompt evaluation "
                  "excluded).",
    "decode_tps": "decode_tps — generated / decode time (first step to last; prompt evaluation excluded), for "
                  "the whole reply.",
    "acceptance_rate": "acceptance_rate — accepted / drafted: the share of drafted tokens the target accepted "
                       "(none before anything was drafted).",
    "token_acceptance": "token_acceptance — accepted / (accepted + rejections): the per-token acceptance a, the "
                        "chance that a draft token is accepted given the one before it was; the cost model "
                        "E(k) = (1 − a^(k+1)) / (1 − a) uses it.",
    "tokens_per_pass": "tokens_per_pass — pass_tokens / passes: how many tokens each read of the target's weights "
                       "bought (at least 1).",
    "k": "Current draft length k chosen for the last step (0 = a plain step); k_mean is the mean draft length "
         "chosen per step.",
    "speedup": f"speedup — measured against {_PLAIN}: the time plain decoding takes for this reply's tokens "
               "(from a cost model fitted to every target pass of the reply, stalls and the cold first step "
               "left out) / the time the reply took, drafting included. Measured, never predicted; the range is "
               "a 95 % interval, shown instead of one figure while it is wider than ±20 %; exactly 1.00× with "
               "the draft off.",
    "plain_tps": f"plain_tps — tokens/s of {_PLAIN}: 1 / the fitted cost of a one-token pass (the decoder "
                 "forces a few plain steps early in the reply, then one every few dozen steps).",
    "ttft_s": "ttft_s — time from the request to the first emitted token.",
    "prompt_tps": "prompt_tps — evaluated (not reused) prompt tokens / prompt evaluation time. When the prompt's "
                  "start was kept in the KV cache from the previous turn (prompt_tokens_reused), those tokens were "
                  "not read again: the panel says how many, since a rate over the few new ones means nothing.",
    "time_share": "draft_s, verify_s, other_s — decode time spent drafting, in target passes, and in everything "
                  "else.",
    "generated": "generated — tokens emitted in the reply (accepted draft tokens + target tokens).",
    "by_drafter": "by_drafter — accepted / drafted for each drafter of a chain (history lookup, prompt lookup, "
                  "draft model, MTP), each with its own automatic k; a drafter that does not pay is switched off.",
    "provenance": "Accepted draft token: the drafter proposed it and the target agreed. Target token: the token "
                  "the target chose itself after a rejection, or its bonus token after a fully accepted draft.",
}


# One line beside each statistic for a first-time user: what it means, in plain words (docs/metrics.md).
EXPLANATIONS: dict[str, str] = {
    "speedup": "below 1×, drafting and checking cost more time than the accepted tokens save",
    "decode_now": "tokens per second over the last second",
    "decode_tps": "tokens per second over the whole reply",
    "acceptance_rate": "share of drafted tokens the target kept",
    "token_acceptance": "chance a draft token is kept if the one before was",
    "tokens_per_pass": "tokens gained per read of the target (never below 1)",
    "k": "tokens drafted for the last step (0 = plain step)",
    "plain_tps": "the target alone, timed between drafted steps",
    "ttft_s": "from sending to the first token",
    "prompt_tps": "prompt tokens read per second, or how many were kept from the last turn",
    "time_share": "where decoding time went",
    "generated": "tokens in this reply",
    "by_drafter": "accepted / drafted per drafter",
}

DRAFTER_LABELS = {"history": "history", "lookup": "prompt", "model": "model", "mtp": "MTP"}


def by_drafter_text(counts: Sequence[tuple[str, int, int]]) -> str:
    """``history 62/62 · prompt 2/60``: (kind, accepted, drafted) per drafter; an en dash when none drafted."""
    if not counts:
        return "–"
    return " · ".join(f"{DRAFTER_LABELS.get(kind, kind)} {accepted}/{drafted}" for kind, accepted, drafted in counts)


def prompt_speed_text(s: LiveStats) -> str:
    """The "Prompt speed" figure: tokens/s over the prompt evaluated; after a prompt-cache reuse how many tokens
    were cached instead (``412 cached``): a rate over the few new tokens of a cached prompt read "14464 tok/s",
    which says nothing about prompt reading. As short as a rate: "cached 24 tokens · 12 new" widened the panel
    and cut every value off at its right."""
    if s.prompt_tokens_reused > 0:
        return f"{s.prompt_tokens_reused} cached"
    return fmt(s.prompt_tps, ".0f", " tok/s")


CURVE_POINTS = 41  # acceptances from 0 to 1 the "you are here" curves are evaluated at


def you_are_here_curves(k: int, draft_cost: float | None, growth: float | None
                        ) -> tuple[list[float], list[float], list[float] | None]:
    """The "you are here" chart's curves for draft length ``k``: acceptances a from 0 to 1, the expected tokens
    per target pass E(k) = (1 − a^(k+1)) / (1 − a) at each, and the expected net speed-up over plain decoding
    E(k) / (k · c_draft + c_verify(k + 1)) with the reply's measured costs in one-token passes (``LiveStats.
    draft_cost``; c_verify(k + 1) = 1 + g · k, ``pass_growth``) — the cost model automatic k chooses by
    (``engine.autodraft``), not a second formula. No speed-up curve (None) until the costs are measured."""
    xs = [i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    tokens = [expected_tokens_per_pass(a, k) for a in xs]
    if draft_cost is None or growth is None:
        return xs, tokens, None
    return xs, tokens, [expected_rate(a, k, draft_cost, 1.0 + growth * k) for a in xs]


def fmt(value: float | int | None, spec: str, suffix: str = "") -> str:
    """A number for a label, or an en dash when there is none yet."""
    if value is None:
        return "–"
    return f"{value:{spec}}{suffix}"


def format_speedup(speedup: float | None, low: float | None, high: float | None, *,
                   streaming: bool = True) -> str:
    """The measured speed-up as the panel shows it (``describe_speedup``, docs/metrics.md): ``1.85× (1.70–2.00)``
    once settled, the range ``measuring… 1.40–2.60×`` while it is wider than ±20 % and the reply runs (``1.40–
    2.60×, uncertain`` once it ended so), ``measuring…`` before it can be measured (``not measured`` at the end)."""
    if speedup is None or low is None or high is None:
        return "measuring…" if streaming else "not measured"
    if streaming and not speedup_shown_as_figure(speedup, low, high):
        return f"measuring… {describe_range(low, high)}"
    return describe_speedup(speedup, low, high)


def speedup_shown_as_figure(speedup: float | None, low: float | None, high: float | None) -> bool:
    """Whether the speed-up is shown as one bold figure: measured exactly, or its interval within ±20 %."""
    if speedup is None or low is None or high is None:
        return False
    return high - low <= 1e-9 * max(1.0, speedup) or speedup_is_settled(speedup, low, high)
