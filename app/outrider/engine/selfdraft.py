"""Self-drafts: a draft model cut from the target's own layers (no second download, same vocabulary by
construction). This module is the arithmetic and the checks — which blocks to keep, whether a GGUF can be cut,
how large the draft will be, and which measured candidate promises the largest speed-up. It loads nothing:
llama.cpp's side (writing the pruned copy, measuring a candidate) is ``engine/llama/prune.py`` and
``engine/selfdraft_calibrate.py``, run in a child process.

Why the candidates look as they do: training-free self-speculation (Draft & Verify, SWIFT, CLaSp) keeps the first
and the last blocks and skips middle ones — the first blocks build the token's representation, the last ones map
it onto the vocabulary, the middle ones refine it. ``candidate_plans`` measures that shape at several sizes and,
at one size, the two obvious alternatives (the first blocks only; blocks spread evenly), so every ``auto`` search
checks the finding on the user's own model instead of trusting it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

from outrider.engine.autodraft import expected_tokens_per_pass
from outrider.engine.llama.gguf_header import GGUFHeader

MIN_TARGET_LAYERS: Final = 3  # the first and last block kept and at least one dropped
AUTO_KEEP_FRACTIONS: Final = (0.25, 0.4, 0.55, 0.7)  # sizes ``auto`` tries, as a fraction of the target's blocks
SHAPE_CHECK_FRACTION: Final = 0.4  # the size at which the other shapes are measured too
CALIBRATION_K: Final = 4  # draft length every candidate is measured at (the same for all: comparable)
QUANT_BLOCK: Final = 32  # Q8_0 and Q4_0 quantise rows in blocks of 32 values; other rows keep their type
Q6_K_BLOCK: Final = 256
Q6_K_BITS: Final = 6.5625


class DraftType(enum.StrEnum):
    """The weight type of the written draft (its matrices; norms stay F32)."""

    Q8_0 = "q8_0"
    Q4_0 = "q4_0"

    @property
    def llama_ftype(self) -> int:
        """llama.cpp's ``llama_ftype`` (``LLAMA_FTYPE_MOSTLY_Q8_0`` = 7, ``…_Q4_0`` = 2)."""
        return {DraftType.Q8_0: 7, DraftType.Q4_0: 2}[self]

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight: 32 values + one F16 scale per block."""
        return {DraftType.Q8_0: 8.5, DraftType.Q4_0: 4.5}[self]


class SelfDraftError(Exception):
    """A self-draft could not be made; ``kind`` is stable and machine-readable.

    Kinds: ``not_gguf`` (the target is not a readable GGUF), ``no_blocks`` (no ``blk.N`` tensors: nothing to cut),
    ``too_few_layers``, ``per_layer_metadata`` (an architecture whose metadata lists a value per block, which a cut
    would leave inconsistent), ``bad_layers`` (a ``--layers`` list that is not a valid subset), ``build_failed``
    (llama.cpp refused to write it), ``load_failed`` (the written draft does not load), ``disk_full``,
    ``store_write``, ``cancelled``, ``bad_calibration``, ``crashed`` (the build process died), ``not_speculative``
    (a recurrent model, whose memory llama.cpp cannot roll back: no draft can speculate for it).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """Which of the target's ``n_layer`` blocks the draft keeps (sorted, unique, a strict subset)."""

    n_layer: int
    keep: tuple[int, ...]
    shape: str = "custom"  # "middle" (first and last kept), "prefix", "spread" or "custom"

    def __post_init__(self) -> None:
        check_keep(self.n_layer, self.keep)

    @property
    def prune(self) -> tuple[int, ...]:
        """The blocks removed (what llama.cpp's ``prune_layers`` takes)."""
        kept = set(self.keep)
        return tuple(i for i in range(self.n_layer) if i not in kept)

    @property
    def label(self) -> str:
        """The kept blocks as ranges, e.g. ``0-3,27-29`` (what ``--layers`` reads back)."""
        return format_ranges(self.keep)

    def to_json(self) -> dict[str, Any]:
        return {"n_layer": self.n_layer, "keep": list(self.keep), "layers": self.label, "shape": self.shape}


def format_ranges(indices: Sequence[int]) -> str:
    parts: list[str] = []
    start = prev = None
    for i in indices:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def check_keep(n_layer: int, keep: Sequence[int]) -> None:
    """Raises ``SelfDraftError('bad_layers')`` unless ``keep`` is sorted, unique, in ``[0, n_layer)``, not empty
    and leaves at least one block out (a draft as deep as the target would cost as much as the target)."""
    if not keep:
        raise SelfDraftError("bad_layers", "keep at least one block")
    if list(keep) != sorted(set(keep)):
        raise SelfDraftError("bad_layers", "the kept blocks must be listed once each, in increasing order")
    if keep[0] < 0 or keep[-1] >= n_layer:
        raise SelfDraftError("bad_layers", f"block numbers must be between 0 and {n_layer - 1} (the target has "
                                           f"{n_layer} blocks)")
    if len(keep) >= n_layer:
        raise SelfDraftError("bad_layers", f"keeping all {n_layer} blocks makes a draft as slow as the target; "
                                           "leave some out")


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_layers(text: str, n_layer: int) -> LayerPlan:
    """``0-3,27-29`` or ``0,1,2,29`` → the plan keeping those blocks. Raises ``SelfDraftError('bad_layers')``."""
    keep: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part)
        if m is None:
            raise SelfDraftError("bad_layers", f"{part.strip()[:40]!r} is not a block number or a range like 0-3")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise SelfDraftError("bad_layers", f"range {lo}-{hi} runs backwards")
        if hi >= n_layer:
            raise SelfDraftError("bad_layers", f"block {hi} does not exist: the target has {n_layer} blocks "
                                               f"(0-{n_layer - 1})")
        keep.update(range(lo, hi + 1))
    return LayerPlan(n_layer, tuple(sorted(keep)))


def middle_plan(n_layer: int, n_keep: int) -> LayerPlan:
    """Keep the first ``ceil(n_keep / 2)`` and the last ``floor(n_keep / 2)`` blocks, drop the middle."""
    head = (n_keep + 1) // 2
    tail = n_keep - head
    keep = tuple(range(head)) + tuple(range(n_layer - tail, n_layer))
    return LayerPlan(n_layer, keep, "middle")


def prefix_plan(n_layer: int, n_keep: int) -> LayerPlan:
    """Keep the first ``n_keep`` blocks (an early exit through the target's own output head)."""
    return LayerPlan(n_layer, tuple(range(n_keep)), "prefix")


def spread_plan(n_layer: int, n_keep: int) -> LayerPlan:
    """Keep ``n_keep`` blocks spread evenly from the first to the last."""
    if n_keep == 1:
        return LayerPlan(n_layer, (0,), "spread")
    keep = sorted({round(i * (n_layer - 1) / (n_keep - 1)) for i in range(n_keep)})
    return LayerPlan(n_layer, tuple(keep), "spread")


def keep_count(n_layer: int, fraction: float) -> int:
    """Blocks kept at ``fraction`` of ``n_layer``: at least 2 (first and last), at most ``n_layer - 1``."""
    return max(2, min(n_layer - 1, round(n_layer * fraction)))


def candidate_plans(n_layer: int) -> list[LayerPlan]:
    """What ``--layers auto`` measures: the middle-dropped shape at each of ``AUTO_KEEP_FRACTIONS``, and at
    ``SHAPE_CHECK_FRACTION`` the prefix and spread shapes too (duplicates removed, order kept)."""
    if n_layer < MIN_TARGET_LAYERS:
        raise SelfDraftError("too_few_layers", f"the target has {n_layer} block(s); a self-draft needs at least "
                                               f"{MIN_TARGET_LAYERS}")
    plans = [middle_plan(n_layer, keep_count(n_layer, f)) for f in AUTO_KEEP_FRACTIONS]
    n_check = keep_count(n_layer, SHAPE_CHECK_FRACTION)
    plans += [prefix_plan(n_layer, n_check), spread_plan(n_layer, n_check)]
    seen: set[tuple[int, ...]] = set()
    out = []
    for plan in plans:
        if plan.keep not in seen:
            seen.add(plan.keep)
            out.append(plan)
    return out


# -- can this GGUF be cut? ------------------------------------------------------------------------------------
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def block_numbers(header: GGUFHeader) -> set[int]:
    return {int(m.group(1)) for t in header.tensors if (m := _BLOCK.match(t.name))}


def prunable_layers(header: GGUFHeader) -> int:
    """The target's block count, after checking that a pruned copy of it is a valid model of the same
    architecture. Raises ``SelfDraftError``: ``no_blocks``, ``too_few_layers``, ``per_layer_metadata``."""
    blocks = block_numbers(header)
    raw = header.arch_value("block_count")
    if not blocks or not isinstance(raw, int) or isinstance(raw, bool):
        raise SelfDraftError("no_blocks", f"{header.path.name} has no numbered blocks (blk.N tensors and a "
                                          f"block_count) to cut; architecture {header.architecture or 'unknown'!r}")
    n_layer = raw
    if blocks != set(range(n_layer)):
        raise SelfDraftError("no_blocks", f"{header.path.name}'s blocks ({len(blocks)}) do not match its "
                                          f"block_count ({n_layer})")
    if n_layer < MIN_TARGET_LAYERS:
        raise SelfDraftError("too_few_layers", f"{header.path.name} has {n_layer} block(s); a self-draft needs at "
                                               f"least {MIN_TARGET_LAYERS} (the first and last kept, one dropped)")
    prefix = f"{header.architecture}."
    for key, value in header.metadata.items():
        # llama.cpp rewrites block_count but not values listed per block (hybrid and variable-width models):
        # their pruned copy would describe blocks it no longer has.
        if key.startswith(prefix) and hasattr(value, "__len__") and not isinstance(value, str) \
                and len(value) == n_layer:
            raise SelfDraftError("per_layer_metadata", f"{header.path.name} ({header.architecture}) describes each "
                                                       f"block separately ({key}); a cut copy would not load")
    if int(header.arch_value("full_attention_interval", 0) or 0) > 0:
        # a hybrid whose block types follow from their numbers: renumbered blocks would change type
        raise SelfDraftError("per_layer_metadata", f"{header.path.name} ({header.architecture}) mixes block types "
                                                   "by position (full_attention_interval); a cut copy would not "
                                                   "load")
    if int(header.arch_value("nextn_predict_layers", 0) or 0) > 0:
        raise SelfDraftError("per_layer_metadata", f"{header.path.name} ends with NextN (MTP) blocks; use MTP "
                                                   "drafting for it instead of a self-draft")
    return n_layer


def estimated_draft_bytes(header: GGUFHeader, keep: Iterable[int], draft_type: DraftType) -> int:
    """The written draft's size: the kept blocks' and the shared tensors' weights at ``draft_type`` (rows whose
    length is not a multiple of ``QUANT_BLOCK``, and 1-D tensors, keep their size), plus the header."""
    kept = set(keep)
    names = {t.name for t in header.tensors}
    output = "output.weight" if "output.weight" in names else "token_embd.weight"  # tied embeddings
    total = header.data_offset
    for t in header.tensors:
        m = _BLOCK.match(t.name)
        if m is not None and int(m.group(1)) not in kept:
            continue
        if len(t.shape) < 2 or t.shape[0] % QUANT_BLOCK != 0:
            total += t.n_bytes
            continue
        bits = draft_type.bits_per_weight
        if t.name == output and draft_type is not DraftType.Q8_0:
            # llama.cpp gives the output head more bits: Q6_K, or Q8_0 where rows are not whole Q6_K blocks
            bits = Q6_K_BITS if t.shape[0] % Q6_K_BLOCK == 0 else DraftType.Q8_0.bits_per_weight
        total += math.ceil(math.prod(t.shape) * bits / 8)
    return total


# -- choosing among measured candidates -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CandidateMeasure:
    """One candidate's calibration: counters of speculative runs at ``k`` and the measured costs (seconds).

    ``token_acceptance`` is the geometric model's ``a`` (accepted / (accepted + rejections)), which
    ``expected_tokens_per_pass`` expects; ``acceptance`` is accepted / drafted, the figure users know.
    """

    plan: LayerPlan
    k: int
    drafted: int
    accepted: int
    rejections: int
    draft_s_per_token: float  # the draft's cost of proposing one token
    verify_s_per_pass: float  # the target's cost of verifying k + 1 tokens in one batch
    plain_s_per_token: float  # the target's cost of one token alone (plain decoding)
    draft_bytes: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def token_acceptance(self) -> float:
        total = self.accepted + self.rejections
        return self.accepted / total if total else 0.0

    @property
    def predicted_speedup(self) -> float:
        """E(a, k) tokens per pass, each pass costing k drafted tokens and one verification, against plain
        decoding's cost for as many tokens: ``E · plain / (k · draft + verify)``.

        A verification pass of k + 1 tokens is never cheaper than a pass of one, so ``verify`` is taken as at least
        ``plain``: a plain timing the machine stalled would otherwise predict a speed-up beyond the tokens a pass
        yields (bench_selfdraft.py at load 8 read 6.75x for a SmolLM2 subset accepting 2 %, and auto chose it)."""
        cost = self.k * self.draft_s_per_token + max(self.verify_s_per_pass, self.plain_s_per_token)
        if cost <= 0 or self.plain_s_per_token <= 0:
            return 0.0
        return expected_tokens_per_pass(self.token_acceptance, self.k) * self.plain_s_per_token / cost

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "k": self.k, "drafted": self.drafted, "accepted": self.accepted,
                "acceptance": round(self.acceptance, 4), "token_acceptance": round(self.token_acceptance, 4),
                "draft_ms_per_token": round(self.draft_s_per_token * 1e3, 3),
                "verify_ms_per_pass": round(self.verify_s_per_pass * 1e3, 3),
                "plain_ms_per_token": round(self.plain_s_per_token * 1e3, 3),
                "predicted_speedup": round(self.predicted_speedup, 3), "draft_bytes": self.draft_bytes}


def rank(measure: CandidateMeasure) -> tuple[float, int]:
    """Sort key, best first: the largest predicted speed-up, then the smaller draft."""
    return (-measure.predicted_speedup, len(measure.plan.keep))


def best_candidate(measures: Sequence[CandidateMeasure]) -> CandidateMeasure:
    """The candidate with the largest predicted speed-up (the smaller draft on a tie)."""
    if not measures:
        raise ValueError("no candidate was measured")
    return min(measures, key=rank)
