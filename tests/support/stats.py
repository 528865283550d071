"""Engine statistics with chosen derived figures, built the way the engine would (from counters only)."""

from __future__ import annotations

from typing import Any

from outrider.engine.stats import GenerationStats


def measured_stats(*, speedup: float | None = None, speedup_error: float | None = None,
                   plain_tps: float | None = None, decode_tps: float | None = None, plain_steps: int | None = None,
                   **counters: Any) -> GenerationStats:
    """A ``GenerationStats`` whose properties read the figures asked for (up to rounding): the counters behind
    ``speedup`` (against ``plain_tps``, default 20 tok/s), its standard error and ``decode_tps`` are solved for."""
    st = GenerationStats(**counters)
    if decode_tps is not None:
        st.decode_s = st.generated / decode_tps
    if speedup is None and plain_tps is None:
        st.plain_steps = plain_steps or 0
        return st
    n = plain_steps if plain_steps is not None else (3 if speedup_error is not None or speedup is None else 1)
    mean = 1.0 / (plain_tps if plain_tps is not None else 20.0)
    st.plain_steps = n
    st.plain_s = n * mean
    var = (speedup_error * mean / speedup) ** 2 * n if speedup and speedup_error is not None and n >= 2 else 0.0
    st.plain_sq_s2 = var * (n - 1) + n * mean * mean
    if speedup is not None:
        st.step_s = st.step_s or 1.0
        st.plain_equiv_s = speedup * st.step_s
    else:
        st.step_s = 0.0
    return st
