"""Outrider: local chat with speculative decoding made visible."""

__version__ = "0.1.0"
