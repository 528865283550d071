"""Measurements over the engine: the A/B benchmark arithmetic and the exactness statistics of `outrider verify`."""
