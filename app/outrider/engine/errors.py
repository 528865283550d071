"""Typed engine errors. They carry facts; words for people are chosen at the UI/CLI boundary."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of everything the engine raises on purpose."""


class ModelLoadError(EngineError):
    """A model file could not be loaded.

    Attributes:
        kind: a stable machine-readable reason (``missing``, ``not_gguf``, ``incomplete``, ``unsupported_arch``,
            ``out_of_memory``, ``permission``, ``is_directory``, ``unsupported_memory``, ``load_failed``).
        path: the file that failed.
        log_tail: the llama.cpp log lines captured around the failure.
    """

    def __init__(self, kind: str, path: str, message: str, log_tail: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path
        self.log_tail = log_tail


class IncompatiblePairError(EngineError):
    """Target and draft cannot be used together; ``rule`` names the first failing rule."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


class ContextOverflowError(EngineError):
    """The input alone does not fit in the context window."""

    def __init__(self, n_tokens: int, n_ctx: int, *, reserved: int = 0) -> None:
        """``n_tokens`` of input, ``n_ctx`` the context size, ``reserved`` the tokens it had to leave for the
        reply."""
        super().__init__(f"message is {n_tokens} tokens; this model's context is {n_ctx}")
        self.n_tokens = n_tokens
        self.n_ctx = n_ctx
        self.reserved = reserved


class DecodeError(EngineError):
    """llama_decode failed (status code kept); the KV cache has been rolled back to the committed tokens."""

    def __init__(self, status: int, message: str, log_tail: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.log_tail = log_tail


class TemplateError(EngineError):
    """The model's chat template could not be rendered (unsafe, broken or raised on purpose)."""


class GrammarError(EngineError):
    """A structured-output constraint (JSON schema, grammar) cannot be used: the request's fault."""


class FimUnsupported(EngineError):
    """A fill-in-the-middle request (a suffix) for a model whose GGUF declares no FIM tokens."""
