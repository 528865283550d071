"""Which files can draft by MTP, from their GGUF headers alone (no llama_cpp: the GUI and the catalogue use it).

A target carries MTP heads when its header declares ``{arch}.nextn_predict_layers`` > 0 *and* holds the NextN
tensors (``blk.N.nextn.eh_proj.weight``): converters that drop the heads often keep the count (a "trunk-only"
file). A separate head file is a GGUF of the target's architecture that holds only the NextN block(s) ("MTP-only":
no ``blk.0.attn_norm.weight``), with the target's width and vocabulary. Gemma 4's "assistant" heads
(architecture ``gemma4-assistant``) share the target's KV cache instead, which Outrider's MTP drafter does not do:
they are refused by name. Every refusal is a ``MtpFileProblem`` with a sentence a user can act on.
"""

from __future__ import annotations

import dataclasses
import os
import re

from outrider.engine.compat import check_facts, facts_from_header
from outrider.engine.llama.gguf_header import GGUFHeader, read_header

_NEXTN_TENSOR = re.compile(r"^blk\.(\d+)\.nextn\.eh_proj\.weight$")
SHARED_KV_HEAD_ARCHS = frozenset({"gemma4-assistant", "gemma4_assistant"})


@dataclasses.dataclass(frozen=True)
class MtpFileProblem:
    """Why a file cannot be used for MTP drafting: ``rule`` (stable) and ``reason`` (a sentence)."""

    rule: str
    reason: str


def nextn_layers(header: GGUFHeader) -> int:
    """The NextN (MTP) blocks the file declares (``{arch}.nextn_predict_layers``), 0 when none."""
    value = header.arch_value("nextn_predict_layers", 0)
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def nextn_tensor_blocks(header: GGUFHeader) -> list[int]:
    """The block indices that hold NextN tensors."""
    return sorted({int(m.group(1)) for t in header.tensors if (m := _NEXTN_TENSOR.match(t.name))})


def has_mtp_heads(header: GGUFHeader) -> bool:
    """True when the file declares NextN blocks and carries their tensors."""
    return nextn_layers(header) > 0 and bool(nextn_tensor_blocks(header))


def is_head_only(header: GGUFHeader) -> bool:
    """An MTP-only file: NextN blocks and no trunk."""
    return has_mtp_heads(header) and not any(t.name == "blk.0.attn_norm.weight" for t in header.tensors)


def target_problem(header: GGUFHeader) -> MtpFileProblem | None:
    """Why ``--mtp`` cannot use this target's own heads; None when it can."""
    name = header.path.name
    declared = nextn_layers(header)
    if declared == 0:
        return MtpFileProblem("no_mtp_layers", f"{name} has no MTP layers (its header declares no "
                              "nextn_predict_layers); use a file converted with its MTP heads, or a head file "
                              "with --mtp-head")
    if not nextn_tensor_blocks(header):
        return MtpFileProblem("mtp_layers_dropped", f"{name} declares {declared} MTP layer(s) but holds none of "
                              "their tensors (they were dropped at conversion); use a file with the heads, or a "
                              "head file with --mtp-head")
    if is_head_only(header):
        return MtpFileProblem("head_only", f"{name} holds only MTP heads, not a model: give it with --mtp-head "
                              "next to its target")
    return None


def head_problem(target: GGUFHeader, head: GGUFHeader) -> MtpFileProblem | None:
    """Why ``head`` cannot draft for ``target`` as a separate MTP head file; None when it can."""
    name, tname = head.path.name, target.path.name
    if head.architecture in SHARED_KV_HEAD_ARCHS:
        return MtpFileProblem("shared_kv_head", f"{name} is a {head.architecture} head, which drafts from the "
                              "target's own KV cache: this version of Outrider cannot run such heads yet")
    if not has_mtp_heads(head):
        return MtpFileProblem("not_a_head", f"{name} is not an MTP head file (no MTP layers in its header)")
    if head.architecture != target.architecture:
        return MtpFileProblem("architecture", f"{name} is an MTP head for {head.architecture or 'an unknown'} "
                              f"models; {tname} is {target.architecture or 'unknown'}")
    width_h, width_t = head.arch_value("embedding_length"), target.arch_value("embedding_length")
    if width_h != width_t:
        return MtpFileProblem("embedding_length", f"{name} is a head for a model {width_h} wide; {tname} is "
                              f"{width_t} wide: it belongs to another model")
    trunk_h = int(head.arch_value("block_count", 0) or 0) - nextn_layers(head)
    trunk_t = int(target.arch_value("block_count", 0) or 0) - nextn_layers(target)
    if trunk_h != trunk_t:
        return MtpFileProblem("block_count", f"{name} is a head for a model of {trunk_h} layers; {tname} has "
                              f"{trunk_t}: it belongs to another model")
    report = check_facts(facts_from_header(target), facts_from_header(head))
    if not report.ok:
        return MtpFileProblem(f"vocab_{report.rule}", f"{name} has another vocabulary than {tname}: {report.reason}")
    return None


def check_target_file(path: str | os.PathLike[str]) -> MtpFileProblem | None:
    """``target_problem`` of a file on disk (raises GGUFHeaderError for an unreadable one)."""
    return target_problem(read_header(path, keep_arrays=False))


def check_head_file(target: str | os.PathLike[str], head: str | os.PathLike[str]) -> MtpFileProblem | None:
    """``head_problem`` of two files on disk (raises GGUFHeaderError for an unreadable one)."""
    return head_problem(read_header(target), read_header(head))
