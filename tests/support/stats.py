"""Engine statistics with chosen speed-up figures, shaped the way the engine writes them."""

from __future__ import annotations

from typing import Any

from outrider.engine.stats import GenerationStats


def measured_stats(*, speedup: float | None = None, speedup_low: float | None = None,
                   speedup_high: float | None = None, plain_tps: float | None = None,
                   decode_tps: float | None = None, plain_steps: int | None = None,
                   **counters: Any) -> GenerationStats:
    """A ``GenerationStats`` reading the figures asked for: ``speedup`` with its interval (±5 % unless given:
    a settled figure), ``plain_tps`` (20 tok/s unless given, when there is a speed-up) and ``decode_tps``
    (``decode_s`` is solved for); ``plain_equiv_s`` = speedup · step_s as ``PlainRateMeter`` keeps it."""
    st = GenerationStats(**counters)
    if decode_tps is not None:
        st.decode_s = st.generated / decode_tps
    st.plain_steps = plain_steps if plain_steps is not None else (0 if speedup is None and plain_tps is None else 3)
    if speedup is None:
        st.plain_tps = plain_tps
        return st
    st.plain_tps = plain_tps if plain_tps is not None else 20.0
    st.speedup = speedup
    st.speedup_low = speedup_low if speedup_low is not None else speedup * 0.95
    st.speedup_high = speedup_high if speedup_high is not None else speedup * 1.05
    st.step_s = st.step_s or 1.0
    st.plain_equiv_s = speedup * st.step_s
    return st
