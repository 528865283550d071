"""The conversation list model changes by rows, never by a reset (``ConversationListModel.set_rows``).

Each change of the history (a reply finished, a chat created, renamed, deleted, a search typed) reloads the list;
a reset made the view forget its current row and scroll position and redraw every row. Counted here: the model's
signals for each kind of change, and what a view's current index and a persistent index point at after it.
Breaking it (``set_rows`` as ``beginResetModel``/``endResetModel`` again) made every count here a reset.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from PySide6.QtCore import QPersistentModelIndex
from PySide6.QtWidgets import QListView

from outrider.ui.widgets.conversation_list import ConversationListModel
from outrider.ui.widgets.conversation_rows import ConversationRole, ConversationRow


def _row(cid: int, title: str | None = None, count: int = 2, updated: float = 0.0) -> ConversationRow:
    return ConversationRow(cid, title or f"chat {cid}", message_count=count, updated_at=updated)


class Signals:
    def __init__(self, model: ConversationListModel) -> None:
        self.seen: Counter[str] = Counter()
        self.changed_rows: list[int] = []
        for name in ("modelReset", "rowsInserted", "rowsRemoved", "rowsMoved", "layoutChanged"):
            getattr(model, name).connect(lambda *_, n=name: self.seen.update([n]))
        model.dataChanged.connect(self._on_data_changed)

    def _on_data_changed(self, top: Any, bottom: Any, *_: Any) -> None:
        self.seen.update(["dataChanged"])
        self.changed_rows.extend(range(top.row(), bottom.row() + 1))

    def take(self) -> dict[str, int]:
        seen, self.seen = dict(self.seen), Counter()
        return seen


@pytest.fixture
def model(qtbot: Any) -> ConversationListModel:
    return ConversationListModel()


def _ids(model: ConversationListModel) -> list[int]:
    return [row.id for row in model.rows()]


def test_each_change_is_the_row_signals_it_needs(model: ConversationListModel) -> None:
    signals = Signals(model)
    model.set_rows([_row(3), _row(2), _row(1)])
    assert signals.take() == {"rowsInserted": 3} and _ids(model) == [3, 2, 1]
    model.set_rows([_row(3), _row(2), _row(1)])
    assert signals.take() == {}  # nothing changed: nothing said
    model.set_rows([_row(1, count=4, updated=9.0), _row(3), _row(2)])  # a reply in chat 1 made it the newest
    assert signals.take() == {"rowsMoved": 1, "dataChanged": 1} and signals.changed_rows == [0]
    assert _ids(model) == [1, 3, 2] and model.rows()[0].message_count == 4
    model.set_rows([_row(4, count=1), _row(1, count=4, updated=9.0), _row(3), _row(2)])  # a new chat
    assert signals.take() == {"rowsInserted": 1} and _ids(model) == [4, 1, 3, 2]
    model.set_rows([_row(4, "Packing", count=1), _row(1, count=4, updated=9.0), _row(3), _row(2)])  # renamed
    signals.changed_rows.clear()
    assert signals.take() == {"dataChanged": 1}
    model.set_rows([_row(4, "Packing", count=1), _row(3), _row(2)])  # chat 1 deleted
    assert signals.take() == {"rowsRemoved": 1} and _ids(model) == [4, 3, 2]
    model.set_rows([_row(2), _row(9)])  # a search: two rows, one the list did not have
    assert signals.take() == {"rowsRemoved": 2, "rowsInserted": 1} and _ids(model) == [2, 9]
    model.set_rows([])
    assert signals.take() == {"rowsRemoved": 2} and model.rowCount() == 0


def test_the_view_keeps_its_current_conversation_through_a_reload(qtbot: Any, model: ConversationListModel) -> None:
    view = QListView()
    qtbot.addWidget(view)
    view.setModel(model)
    model.set_rows([_row(3), _row(2), _row(1)])
    view.setCurrentIndex(model.index(2, 0))  # chat 1
    held = QPersistentModelIndex(model.index(1, 0))  # chat 2
    model.set_rows([_row(1, count=4), _row(5), _row(3), _row(2)])
    assert model.data(view.currentIndex(), ConversationRole.ID) == 1 and view.currentIndex().row() == 0
    assert held.isValid() and model.data(model.index(held.row(), 0), ConversationRole.ID) == 2


def test_a_conversation_listed_twice_keeps_its_first_row(model: ConversationListModel) -> None:
    model.set_rows([_row(1, "first"), _row(2), _row(1, "again")])
    assert [(r.id, r.title) for r in model.rows()] == [(1, "first"), (2, "chat 2")]
