"""Grammar-constrained decoding with llama.cpp's grammar sampler: which tokens may come next (structured output).

``GrammarMask`` wraps ``llama_sampler_init_grammar`` (GBNF; JSON schemas are turned into GBNF by llama-cpp-python's
own ``json_schema_to_gbnf``, the port of llama.cpp's converter). Its state is the tokens accepted so far. Exactness
under speculation (docs/server.md, Structured output): the *target's* distribution at every verified position is
the grammar-masked one — the state after the draft tokens before that position, walked on a ``clone()`` so a
rejected draft token leaves the real state untouched (the roll-back) — and only the emitted tokens are
``accept``-ed into the real state. Drafts are masked too: a draft model samples from its masked distribution
(``ModelDraft.propose(grammar=…)``), and a deterministic draft (prompt lookup, or any greedy draft) is cut at its
first token the grammar forbids — a cut that depends only on tokens already fixed, so it keeps the output exact.

Masking a whole vocabulary row costs one pass of llama.cpp's grammar over every token (a few ms for 49k tokens), so
greedy choice first asks about the best few candidates one at a time (``greedy``): at a position the grammar
forces, the model almost always ranks the allowed token among them.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp.llama_cpp as ll
import numpy as np
import numpy.typing as npt

from outrider.engine.draft import Draft
from outrider.engine.errors import GrammarError
from outrider.engine.params import GrammarSpec, SamplingParams
from outrider.engine.sampling import distribution, verify_sampled

FloatArray = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
GREEDY_CANDIDATES = 32  # best-ranked tokens asked about one by one before a whole row is masked
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data, 12 bytes
assert _TOKEN_DATA.itemsize == ctypes.sizeof(ll.llama_token_data)


def gbnf_of(spec: GrammarSpec) -> str:
    """The GBNF text of ``spec``: as given, any JSON object, or a JSON schema converted by llama-cpp-python."""
    from llama_cpp import llama_grammar

    if spec.kind == "gbnf":
        return spec.text
    if spec.kind == "json":
        return str(llama_grammar.JSON_GBNF)
    try:
        schema_gbnf = str(llama_grammar.json_schema_to_gbnf(spec.text))
    except Exception as exc:  # the converter raises what it meets (AssertionError for a bad $ref, KeyError…)
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {exc}") from exc
    if spec.kind == "text_or_tool_calls":
        return text_or_tool_calls_gbnf(schema_gbnf)
    return schema_gbnf


TOOL_CALL_TAG = "<tool_call>"


def text_or_tool_calls_gbnf(call_gbnf: str) -> str:
    """A reply that is free text followed by any number of ``<tool_call>`` … ``</tool_call>`` blocks, or one bare
    call object, each call following ``call_gbnf`` (a JSON-schema grammar, its ``root`` renamed ``tool-call``):
    ``tool_choice: "auto"`` with strict functions, where the model chooses between answering and calling but a call
    it makes is always schema-valid (what llama.cpp's lazy grammars give, here as one grammar).

    The text may not contain the opening tag (else an unconstrained call could hide in it) nor start, after
    white space, with ``{`` (a bare object is a call): the ``otc-s0`` … ``otc-s10`` rules are the automaton of "does not
    contain ``<tool_call>``", one rule per characters of the tag matched so far (``<`` occurs in it only first,
    so a mismatch falls back to state 0, or to state 1 on ``<``)."""
    renamed = re.sub(r"^root(\s*::=)", r"tool-call\1", call_gbnf, flags=re.MULTILINE)
    tag = TOOL_CALL_TAG
    rules = [  # "otc-" names: a schema's own rules are named after its properties (a property "text"…)
        "root ::= otc-lead otc-text otc-calls | otc-lead tool-call otc-lead",
        "otc-lead ::= [ \\t\\n\\r]*",
        'otc-text ::= "" | [^{< \\t\\n\\r] otc-s0 | "<" otc-s1',
        f'otc-calls ::= ("{tag}" otc-lead tool-call otc-lead "</tool_call>" otc-lead)*',
        'otc-s0 ::= "" | [^<] otc-s0 | "<" otc-s1',
    ]
    for i in range(1, len(tag)):
        char = tag[i]
        nxt = f' | "{char}" otc-s{i + 1}' if i + 1 < len(tag) else ""  # the whole tag: no way on
        rules.append(f'otc-s{i} ::= "" | "<" otc-s1 | [^<{char}] otc-s0{nxt}')
    return renamed.rstrip("\n") + "\n" + "\n".join(rules) + "\n"


class GrammarMask:
    """A grammar's state over one model's vocabulary. ``close()`` frees it (idempotent).

    ``allows(token)``, ``mask(logits)`` and ``greedy(logits)`` ask about the next token without changing the state;
    ``accept(token)`` advances it (a forbidden token is refused: llama.cpp itself would abort on it).
    """

    def __init__(self, vocab: Any, n_vocab: int, gbnf: str, *, _sampler: Any = None) -> None:
        self._vocab = vocab
        self.n_vocab = n_vocab
        self._gbnf = gbnf
        if _sampler is None:
            _sampler = ll.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
            if not _sampler:
                raise GrammarError("the grammar could not be parsed (llama.cpp refused it)")
        self._sampler: Any = _sampler
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._row: npt.NDArray[Any] | None = None

    @classmethod
    def of(cls, model: Any, spec: GrammarSpec) -> GrammarMask:
        """The grammar of ``spec`` over ``model``'s (a ``LoadedModel``) vocabulary."""
        return cls(model.vocab, model.n_vocab, gbnf_of(spec))

    def clone(self) -> GrammarMask:
        """An independent copy of the current state (for walking a draft)."""
        return GrammarMask(self._vocab, self.n_vocab, self._gbnf, _sampler=ll.llama_sampler_clone(self._sampler))

    def close(self) -> None:
        if getattr(self, "_sampler", None) is not None:
            ll.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:
        self.close()

    def _apply(self, data: npt.NDArray[Any]) -> None:
        array = ll.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), size=data.shape[0], selected=-1,
            sorted=False)
        ll.llama_sampler_apply(self._sampler, ctypes.byref(array))

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next."""
        one = self._one
        one["id"][0], one["logit"][0], one["p"][0] = token, 0.0, 0.0
        self._apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def accept(self, token: int) -> None:
        """Advance the state by ``token``; ``GrammarError`` for a forbidden one (llama.cpp would abort the process)."""
        if not self.allows(token):
            raise GrammarError(f"token {token} is not allowed by the grammar here")
        ll.llama_sampler_accept(self._sampler, token)

    def mask(self, logits: FloatArray) -> FloatArray:
        """A copy of ``logits`` with every forbidden token at -inf (the whole row: a pass over the vocabulary)."""
        n = min(self.n_vocab, logits.shape[0])
        if self._row is None or self._row.shape[0] != n:
            self._row = np.zeros(n, dtype=_TOKEN_DATA)
            self._row["id"] = np.arange(n, dtype=np.int32)
        row = self._row
        row["logit"] = logits[:n]
        self._apply(row)
        out = np.full(logits.shape[0], -np.inf, dtype=np.float32)
        out[:n] = row["logit"]
        return out

    def greedy(self, logits: FloatArray) -> int:
        """The allowed token with the highest logit (ties: the lowest id, as ``argmax``)."""
        top = int(np.argmax(logits))
        if self.allows(top):
            return top
        n = min(GREEDY_CANDIDATES, logits.shape[0])
        best = np.argpartition(-logits, n - 1)[:n]
        for token in sorted(best.tolist(), key=lambda t: (-float(logits[t]), t)):
            if self.allows(token):
                return int(token)
        masked = self.mask(logits)
        if not np.isfinite(masked.max()):
            raise GrammarError("the grammar allows no token here (it cannot be completed with this vocabulary)")
        return int(np.argmax(masked))

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` the grammar allows in a row from the current state (the state is unchanged)."""
        if not tokens:
            return 0
        walker = self.clone()
        try:
            for i, token in enumerate(tokens):
                if not walker.allows(token):
                    return i
                walker.accept(token)
            return len(tokens)
        finally:
            walker.close()


def cut_draft(draft: Draft, grammar: GrammarMask, sampling: SamplingParams) -> Draft:
    """``draft`` up to its first token the grammar forbids — when the cut keeps the output exact: at temperature 0
    (any draft), or for a deterministic draft (every q a point mass: prompt lookup), where the cut depends only on
    tokens already fixed. A sampled draft from a drafter that ignores the grammar is left whole: its forbidden
    token is simply rejected by the masked target (p = 0), as the acceptance rule requires."""
    import dataclasses

    deterministic = sampling.greedy or draft.dists is None or all(d.ids.shape[0] == 1 for d in draft.dists)
    if not draft.tokens or not deterministic:
        return draft
    n = grammar.allowed_prefix(draft.tokens)
    if n == len(draft.tokens):
        return draft
    return dataclasses.replace(draft, tokens=draft.tokens[:n], dists=draft.dists[:n] if draft.dists else None)


def verify_draft(row: Callable[[int], FloatArray], draft: Draft, sampling: SamplingParams, position: int,
                 grammar: GrammarMask) -> tuple[int, int]:
    """``SpeculativeDecoder._verify`` under a grammar: the target's row i (``row(i)``) masked by the grammar's
    state after ``draft.tokens[:i]`` — walked on a clone, so a rejected token never reaches the real state — then
    the same rule (greedy match, or the request's sampler: ``sampling.verify_sampled``, the draft's first token at
    absolute ``position``). Returns (accepted, next token); the next token is always one the grammar allows.

    Rows after a draft token the grammar forbids are masked with the state before it: they are never used, since
    that token cannot be chosen by the masked target (probability 0), so the draft is rejected there or earlier."""
    walker = grammar.clone()
    walked = 0  # draft tokens accepted into the walker
    forbidden = False

    def state_for(i: int) -> GrammarMask:
        nonlocal walked, forbidden
        while walked < i and not forbidden:
            token = draft.tokens[walked]
            if walker.allows(token):
                walker.accept(token)
                walked += 1
            else:
                forbidden = True
        return walker

    try:
        if sampling.greedy:
            for i, token in enumerate(draft.tokens):
                choice = state_for(i).greedy(row(i))
                if choice != token:
                    return i, choice
            return len(draft.tokens), state_for(len(draft.tokens)).greedy(row(len(draft.tokens)))
        assert draft.dists is not None or not draft.tokens
        return verify_sampled(draft.tokens, lambda i: distribution(state_for(i).mask(row(i)), sampling),
                              draft.dists or [], sampling, position)
    finally:
        walker.close()


def grammar_allowed(grammar: GrammarMask, tokens: Sequence[int]) -> list[BoolArray]:
    """The tokens ``grammar`` allows at each position of ``tokens`` (one row over the vocabulary each), the state
    walked along ``tokens`` on a clone (``grammar`` itself is unchanged): what ``outrider verify`` masks the
    target's reference distributions with. After a token the grammar forbids, the walk stops: the later positions
    get the state before it (the sample is already wrong there: that token has probability 0)."""
    walker = grammar.clone()
    zeros = np.zeros(grammar.n_vocab, dtype=np.float32)
    out: list[BoolArray] = []
    stuck = False
    try:
        for token in tokens:
            allowed = np.isfinite(walker.mask(zeros))
            out.append(allowed)
            if not stuck and 0 <= token < allowed.shape[0] and allowed[token]:
                walker.accept(int(token))
            else:
                stuck = True
        return out
    finally:
        walker.close()


def masked_row(logits: FloatArray, allowed: Sequence[BoolArray] | None, position: int) -> FloatArray:
    """``logits`` with the tokens the grammar forbids at ``position`` at -inf (``allowed`` None: unchanged)."""
    if allowed is None:
        return logits
    row = allowed[position]
    n = min(row.shape[0], logits.shape[0])
    out = np.full(logits.shape[0], -np.inf, dtype=np.float32)
    out[:n] = np.where(row[:n], logits[:n], -np.inf)
    return out
