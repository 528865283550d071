"""``outrider chats …``: list, export, import, search, rename, delete and restore stored conversations, and
``reindex`` history lookup's draft index.

The commands open the same history store as the app (``OUTRIDER_HOME`` relocates it). Bad input (an unknown id,
an unreadable import file, text that is not UTF-8, a read-only history, a data directory that cannot be made)
exits 2 with one line on stderr; a locked data directory (the app is running) or a full disk exits 1. A history
found damaged is reported on every run that finds it (one ``notice`` line naming the kept file and how much was
recovered). ``--json`` prints one JSON object per line.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from outrider.commands.base import EXIT_BAD_INPUT, EXIT_RUNTIME, CliError, positive_int, print_json
from outrider.fileio import atomic_write_text
from outrider.history import (
    ConversationNotFoundError,
    ConversationSummary,
    DataDirectoryError,
    ExportFormat,
    HistoryStore,
    ImportFormatError,
    RecordUnreadableError,
    StoreError,
    StoreReadOnlyError,
    UnreadableRecord,
)


def store_error(exc: StoreError) -> CliError:
    """The one line (and exit status) for a store failure: what the user can act on is bad input (2)."""
    if isinstance(exc, StoreReadOnlyError | DataDirectoryError):
        return CliError(str(exc), EXIT_BAD_INPUT)
    return CliError(" ".join(str(exc).split()), EXIT_RUNTIME)  # locked, disk full, …: one line, exit 1


def open_history() -> HistoryStore:
    """Open the history for a command; a damaged history is reported (one stderr line) every time it is found."""
    try:
        store = HistoryStore.open()
    except StoreError as exc:
        raise store_error(exc) from None
    if store.notice is not None:
        sys.stderr.write(f"outrider: notice: {store.notice.message}\n")
    return store


def check_text(value: str | None, what: str) -> None:
    """Refuse text that cannot be stored: command-line bytes that were not UTF-8 arrive as lone surrogates."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CliError(f"{what} is not valid UTF-8 text (check the terminal's encoding)") from None


@contextmanager
def _open_store() -> Iterator[HistoryStore]:
    store = open_history()
    try:
        yield store
    except ConversationNotFoundError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except RecordUnreadableError as exc:
        raise CliError(f"{exc} (use --raw to export it as stored)", EXIT_RUNTIME) from None
    except ImportFormatError as exc:
        raise CliError(f"cannot import: {exc}", EXIT_BAD_INPUT) from None
    except StoreError as exc:
        raise store_error(exc) from None
    finally:
        store.close()


def _conversation_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CliError(f"not a conversation id: {text!r} (see `outrider chats list`)") from None
    if value <= 0:
        raise CliError(f"not a conversation id: {text!r} (see `outrider chats list`)")
    return value


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _summary_json(entry: ConversationSummary | UnreadableRecord) -> dict[str, Any]:
    if isinstance(entry, UnreadableRecord):
        return {"id": entry.id, "unreadable": True, "label": entry.label, "reason": entry.reason}
    return {
        "id": entry.id,
        "uuid": entry.uuid,
        "title": entry.title,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
        "pair_id": entry.pair_id,
        "message_count": entry.message_count,
    }


def _cmd_list(args: argparse.Namespace) -> int:
    with _open_store() as store:
        entries = store.list_conversations()
    for entry in entries:
        if args.json:
            print_json(_summary_json(entry))
        elif isinstance(entry, UnreadableRecord):
            sys.stdout.write(f"{entry.id:>5}  ({entry.label}: {entry.reason}; `chats export {entry.id} --raw`)\n")
        else:
            sys.stdout.write(
                f"{entry.id:>5}  {_when(entry.updated_at)}  {entry.message_count:>4} msgs  {entry.title}\n"
            )
    return 0


def _write_output(text: str, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        atomic_write_text(Path(output), text)
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}", EXIT_RUNTIME) from None


def _cmd_export(args: argparse.Namespace) -> int:
    fmt = ExportFormat(args.format)
    with _open_store() as store:
        if args.id == "all":
            if args.raw:
                raise CliError("--raw exports one conversation at a time")
            text, unreadable = store.render_all(fmt)
            for record in unreadable:
                sys.stderr.write(
                    f"outrider: warning: conversation {record.id} {record.label}; "
                    f"export it with `outrider chats export {record.id} --raw`\n"
                )
        else:
            conversation_id = _conversation_id(args.id)
            text = store.export_raw(conversation_id) if args.raw else store.render_conversation(conversation_id, fmt)
    _write_output(text, args.output)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no such file: {args.file}")
    with _open_store() as store:
        result = store.import_json(path)
    sys.stdout.write(f"imported {len(result.imported)} conversation(s), skipped {result.skipped} already present\n")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    check_text(args.text, "the search text")
    with _open_store() as store:
        hits = store.search(args.text, limit=args.limit)
    for hit in hits:
        if args.json:
            print_json(
                {
                    "conversation_id": hit.conversation_id,
                    "conversation_title": hit.conversation_title,
                    "message_id": hit.message_id,
                    "role": str(hit.role),
                    "snippet": hit.snippet,
                    "created_at": hit.created_at,
                }
            )
        else:
            sys.stdout.write(f"{hit.conversation_id:>5}  {hit.conversation_title}  [{hit.role}] {hit.snippet}\n")
    return 0


def _cmd_rename(args: argparse.Namespace) -> int:
    conversation_id = _conversation_id(args.id)
    check_text(args.title, "the title")
    title = args.title.strip()
    if not title:
        raise CliError("the title must not be empty")
    with _open_store() as store:
        store.rename_conversation(conversation_id, title)
    sys.stdout.write(f"renamed conversation {conversation_id} to {title!r}\n")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    conversation_id = _conversation_id(args.id)
    with _open_store() as store:
        store.delete_conversation(conversation_id)
    sys.stdout.write(f"deleted conversation {conversation_id} (undo: outrider chats restore {conversation_id})\n")
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    conversation_id = _conversation_id(args.id)
    with _open_store() as store:
        store.restore_conversation(conversation_id)
    sys.stdout.write(f"restored conversation {conversation_id}\n")
    return 0


def _cmd_reindex(args: argparse.Namespace) -> int:
    """Delete history lookup's index files (docs/engine.md, "History lookup"): the engine rebuilds them from the
    history at its next load of a pair with history lookup."""
    from outrider.engine.history_index import remove_index_files

    with _open_store() as store:
        removed = remove_index_files(store.db_path)
    sys.stdout.write(f"removed {removed} draft index file(s); history lookup rebuilds its index from the history "
                     "at the next load\n")
    return 0


def register(subparsers: Any) -> None:
    """Add ``chats`` and its subcommands to the ``outrider`` parser."""
    chats = subparsers.add_parser("chats", help="list, search, export and import stored conversations")
    sub = chats.add_subparsers(dest="chats_command", metavar="COMMAND", required=True)

    def add(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
        parser.set_defaults(func=func)
        return parser

    p = add("list", _cmd_list, "list conversations, newest first")
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = add("export", _cmd_export, "export one conversation (or `all`) to Markdown or JSON")
    p.add_argument("id", metavar="ID", help="a conversation id, or `all`")
    p.add_argument("--format", choices=[f.value for f in ExportFormat], default=ExportFormat.MARKDOWN.value)
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    p.add_argument("--raw", action="store_true", help="dump the stored record as is (for unreadable records)")

    p = add("import", _cmd_import, "import a JSON export (conversations already present are skipped)")
    p.add_argument("file", metavar="FILE")

    p = add("search", _cmd_search, "full-text search over all messages")
    p.add_argument("text", metavar="TEXT")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--limit", type=positive_int, default=50, help="at most this many matches (default 50)")

    p = add("rename", _cmd_rename, "rename a conversation")
    p.add_argument("id", metavar="ID")
    p.add_argument("title", metavar="TITLE")

    p = add("delete", _cmd_delete, "delete a conversation (undo with `restore`)")
    p.add_argument("id", metavar="ID")

    p = add("restore", _cmd_restore, "undo a delete")
    p.add_argument("id", metavar="ID")

    add("reindex", _cmd_reindex, "rebuild history lookup's draft index (deleted now, rebuilt at the next load)")
