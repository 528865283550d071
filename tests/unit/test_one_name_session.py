"""One name per concept (docs/architecture.md): "session" named both the engine process's loaded pair
(``engine/session.py``) and the chat's Qt adapter (``ui/chat_session.py``, ``ChatSession``). They are now
``engine/engine.py`` (``Engine``) and ``ui/chat_controller.py`` (``ChatController``), and no module, class, function
or attribute of the app is called a session. Breaking it: putting back ``window.session`` (an alias of the chat
controller) or a module ``ui/chat_session.py`` fails the test; huggingface_hub's ``get_session`` (its own name, for
its HTTP client) is the one use allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import outrider

APP = Path(outrider.__file__).parent
ALLOWED = {"get_session"}  # huggingface_hub's HTTP session: a third-party name, not one of ours


def _names_defined(tree: ast.AST) -> set[str]:
    """Every name a module binds or reads as an attribute: defs, classes, assignments, arguments, ``x.attr``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[-1])
    return names


def test_no_module_of_the_app_is_called_a_session() -> None:
    modules = [p.relative_to(APP) for p in APP.rglob("*.py") if "session" in p.stem.lower()]
    assert modules == []


def test_no_name_in_the_app_is_a_session() -> None:
    offenders: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        names = {n for n in _names_defined(ast.parse(path.read_text(encoding="utf-8")))
                 if "session" in n.lower() and n not in ALLOWED}
        if names:
            offenders[str(path.relative_to(APP))] = names
    assert offenders == {}
