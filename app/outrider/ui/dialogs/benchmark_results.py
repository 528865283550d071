"""The benchmark's results: the table model over ``outrider bench``'s row dicts, and the Markdown report."""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt

from outrider.engine.measure.bench import bench_summary, slower_labels
from outrider.ui.models.table_model import HeaderedTableModel

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()



class ResultColumn(enum.IntEnum):
    Prompt = 0
    Acceptance = 1
    TokensPerPass = 2
    PlainTps = 3
    SpecTps = 4
    Speedup = 5
    Predicted = 6
    Ratio = 7


# (header, row key, format, tooltip) — definitions as in docs/metrics.md. Headers are short so that every column
# fits the dialog without a horizontal scroll; the tooltip says what each one is in full.
_RESULT_COLUMNS: dict[ResultColumn, tuple[str, str, str, str]] = {
    ResultColumn.Prompt: ("Prompt", "label", "", "The prompt (its start); full text in the Markdown report"),
    ResultColumn.Acceptance: ("Acceptance", "acceptance_rate", ".1%",
                              "Acceptance: accepted / drafted, the share of drafted tokens the target accepted "
                              "(median)"),
    ResultColumn.TokensPerPass: ("Tok/pass", "tokens_per_pass", ".2f",
                                 "Tokens per target pass: pass_tokens / passes, the tokens each read of the "
                                 "target's weights bought (never below 1; median)"),
    ResultColumn.PlainTps: ("Plain tok/s", "plain_decode_tps", ".1f", "Decode tokens/s without a draft (median)"),
    ResultColumn.SpecTps: ("Spec. tok/s", "spec_decode_tps", ".1f",
                           "Speculative decode tokens/s, with the draft (median)"),
    ResultColumn.Speedup: ("Speed-up", "ab_speedup", ".2f",
                           "Measured speed-up: speculative tok/s ÷ plain tok/s; below 1 the draft makes this "
                           "prompt slower"),
    ResultColumn.Predicted: ("Predicted", "predicted_speedup", ".2f",
                             "Predicted speed-up: the cost model of docs/metrics.md, E(a, k) · c_plain / "
                             "(k · c_draft + c_verify), from the per-token acceptance a = accepted / (accepted + "
                             "rejections) and the measured draft and verify costs (outrider bench's figure)"),
    ResultColumn.Ratio: ("Meas./pred.", "measured_over_predicted", ".2f",
                         "Measured ÷ predicted speed-up; far from 1: the cost model misjudges this machine or "
                         "prompt"),
}


# The Markdown report has room for the full names.
_MARKDOWN_HEADERS = ("Prompt", "Acceptance", "Tokens/pass", "Plain tok/s", "Speculative tok/s", "Speed-up",
                     "Predicted", "Measured/predicted")


class BenchmarkResultsModel(HeaderedTableModel):
    """One row per benchmarked prompt: a thin adapter over the row dicts of ``outrider bench``."""

    headers = tuple((title, tip) for title, _key, _fmt, tip in _RESULT_COLUMNS.values())
    RowRole = Qt.ItemDataRole.UserRole + 1
    ValueRole = Qt.ItemDataRole.UserRole + 2

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[dict[str, Any]] = []

    def clear(self) -> None:
        self.beginResetModel()
        self._rows = []
        self.endResetModel()

    def append(self, row: dict[str, Any]) -> None:
        self.beginInsertRows(_ROOT, len(self._rows), len(self._rows))
        self._rows.append(row)
        self.endInsertRows()

    @property
    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows)

    def _row_count(self) -> int:
        return len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not self.is_valid(index):
            return None
        row = self._rows[index.row()]
        col = ResultColumn(index.column())
        _title, key, fmt, tip = _RESULT_COLUMNS[col]
        value = row.get(key)
        if role == Qt.ItemDataRole.DisplayRole:
            return format_value(value, fmt) + ("×" if col in (ResultColumn.Speedup, ResultColumn.Predicted)
                                               and value is not None else "")
        if role == Qt.ItemDataRole.ToolTipRole:
            if col is ResultColumn.Prompt:
                return str(row.get("prompt", ""))
            if col is ResultColumn.Speedup and isinstance(value, float) and value < 1.0:
                return f"{tip}\n⚠ Slower than plain decoding for this prompt: consider draft 'auto' or off."
            return tip
        if role == Qt.ItemDataRole.TextAlignmentRole and col is not ResultColumn.Prompt:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == self.RowRole:
            return row
        if role == self.ValueRole:
            return value
        return None


def format_value(value: Any, fmt: str) -> str:
    if value is None:
        return "—"
    return format(value, fmt) if fmt else str(value)


# ============================================================================================ markdown ==
def results_markdown(rows: Sequence[dict[str, Any]], prompts: Sequence[tuple[str, str]], *, pair_name: str = "",
                     runs: int = 0, max_tokens: int = 0, when: _dt.datetime | None = None) -> str:
    """The report: a table per prompt, the medians, the settings and every prompt in full."""
    stamp = (when or _dt.datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M %Z").strip()
    title = f"# Outrider benchmark{': ' + pair_name if pair_name else ''}"
    out = [title, "", f"{stamp} · {runs} run(s) per mode, interleaved · up to {max_tokens} tokens · greedy", ""]
    heads = list(_MARKDOWN_HEADERS)
    out.append("| " + " | ".join(heads) + " |")
    out.append("|" + "|".join([":--"] + ["--:"] * (len(heads) - 1)) + "|")
    for r in rows:
        cells = []
        for c in ResultColumn:
            _t, key, fmt, _tip = _RESULT_COLUMNS[c]
            text = format_value(r.get(key), fmt)
            if c in (ResultColumn.Speedup, ResultColumn.Predicted) and r.get(key) is not None:
                text += "×"
            cells.append(text.replace("|", "\\|"))
        out.append("| " + " | ".join(cells) + " |")
    if rows:
        s = bench_summary(list(rows))
        out += ["", f"**Median speed-up {s['median_ab_speedup']:.2f}×** · median acceptance "
                    f"{s['median_acceptance']:.1%} over {s['prompts']} prompt(s)."]
        slower = slower_labels(rows)
        if slower:
            out.append(f"Slower than plain decoding on: {', '.join(slower)}.")
    out += ["", "Speed-up = speculative decode tokens/s ÷ plain decode tokens/s (measured); acceptance = "
                "accepted ÷ drafted; predicted = the cost model of docs/metrics.md.", "", "## Prompts", ""]
    out += [f"- **{label}**: {prompt}" for label, prompt in prompts]
    return "\n".join(out) + "\n"
