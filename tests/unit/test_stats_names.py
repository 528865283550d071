"""One name, one figure: every statistics view is derived from the engine's ``GenerationStats``
(docs/architecture.md, "One name per concept"), and a name a view shares with it holds exactly its figure.

The views: the live figures a display reads (``LiveStats``, ``conversation/meter.py``), what is stored with a reply
(``ReplyStats`` via ``reply_stats``, ``history/``), the wire dict (``stats_to_wire``) and the server's ``timings``.
A view may add figures of its own (listed here, each with why); any other name must be one of the engine's.
Breaking it: ``LiveStats.prompt_reused`` (the engine's ``prompt_tokens_reused`` under a second name) failed the
first test, and a view copying ``acceptance_rate`` from ``token_acceptance`` failed the second.
"""

from __future__ import annotations

import dataclasses

from outrider.conversation.meter import LiveStats, ReplyMeter
from outrider.engine.events import stats_from_wire, stats_to_wire
from outrider.engine.stats import DrafterCounts, GenerationStats
from outrider.history.models import ReplyStats
from outrider.history.turns import reply_stats
from outrider.server.responses import timings

ENGINE_NAMES = frozenset(
    {f.name for f in dataclasses.fields(GenerationStats)}
    | {name for name in dir(GenerationStats) if isinstance(getattr(GenerationStats, name), property)}
)
OWN_FIGURES: dict[type, frozenset[str]] = {
    # per tick: the rate over the last second, the last step's k, time shares, the cost of a drafted token in
    # one-token passes, whether it still streams; by_drafter is the engine's counts as (kind, accepted, drafted)
    LiveStats: frozenset({"decode_now", "k", "draft_share", "verify_share", "other_share", "draft_cost",
                          "streaming", "by_drafter"}),
    # what the request was (pair, temperature) and how the reply ended; unknown stored keys are kept
    ReplyStats: frozenset({"pair_id", "temperature", "stop_reason", "extra"}),
}


def _engine_stats() -> GenerationStats:
    """A reply's statistics with a distinct value in every figure."""
    return GenerationStats(
        prompt_tokens=40, prompt_tokens_reused=12, prompt_s=0.25, generated=61, drafted=50, accepted=37,
        rejections=9, passes=24, pass_tokens=62, k_sum=50, draft_s=0.125, verify_s=0.75, decode_s=1.0,
        step_s=0.96875, ttft_s=0.3125, plain_steps=4, plain_tps=31.0, plain_equiv_s=1.6, stall_s=0.0625,
        speedup=1.75, speedup_low=1.5, speedup_high=2.0, draft_mode="history+lookup", pass_growth=0.0703125,
        by_drafter={"history": DrafterCounts(30, 25, 7), "lookup": DrafterCounts(20, 12, 9)},
    )


def _live(stats: GenerationStats) -> LiveStats:
    meter = ReplyMeter(clock=lambda: 0.0)
    meter.begin_reply()
    meter.add(stats, 3)
    return meter.live_stats()


def test_every_name_of_a_view_is_the_engine_s_or_one_of_its_own() -> None:
    for view, own in OWN_FIGURES.items():
        names = {f.name for f in dataclasses.fields(view)}
        assert not names - ENGINE_NAMES - own, f"{view.__name__} names figures the engine does not"
        assert own <= names  # the list of its own figures is not stale


def test_a_name_a_view_shares_with_the_engine_holds_the_engine_s_figure() -> None:
    stats = _engine_stats()
    live = _live(stats)
    stored = reply_stats(stats, "stop", pair_id="p", temperature=0.5)
    shared_live = {f.name for f in dataclasses.fields(LiveStats)} & ENGINE_NAMES - OWN_FIGURES[LiveStats]
    shared_stored = {f.name for f in dataclasses.fields(ReplyStats)} & ENGINE_NAMES
    assert {"speedup", "token_acceptance", "prompt_tokens_reused", "draft_mode"} <= shared_live
    assert {"speedup", "decode_tps", "tokens_per_pass", "k_mean"} <= shared_stored
    for name in shared_live:
        assert getattr(live, name) == getattr(stats, name), name
    for name in shared_stored - {"k_mean"}:
        assert getattr(stored, name) == getattr(stats, name), name
    assert stored.k_mean == round(stats.k_mean or 0.0, 2)  # stored to two decimals
    assert live.by_drafter == (("history", 25, 30), ("lookup", 12, 20))


def test_the_wire_and_the_server_s_timings_use_the_engine_s_names_for_its_figures() -> None:
    stats = _engine_stats()
    wire = stats_to_wire(stats)
    assert set(wire) <= ENGINE_NAMES and stats_from_wire(wire) == stats
    server = timings(stats)
    for name in set(server) & ENGINE_NAMES:
        assert server[name] == getattr(stats, name), name
    # llama-server's own names for the same figures (its clients read them), and nothing else of the engine's
    assert (server["predicted_per_second"], server["plain_per_second"], server["draft_n_accepted"]) == (
        stats.decode_tps, stats.plain_tps, stats.accepted)
