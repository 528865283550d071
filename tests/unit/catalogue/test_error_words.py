"""A download that fails on this machine (the model store cannot be written) or on a connection that escaped the
retries is reported as a typed error in words: never a raw ``[Errno 13] …`` or an exception's class name."""

from __future__ import annotations

import errno
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from outrider.catalogue import download
from outrider.catalogue.errors import (
    ERROR_CLASSES,
    DiskFullError,
    NetworkError,
    StoreWriteError,
    error_from_json,
    local_error,
)

RAW = re.compile(r"Errno|Error\b|Exception|Traceback|\[")


@pytest.mark.parametrize(("code", "cls", "words"), [
    (errno.EACCES, StoreWriteError, "no permission to write /m/x.gguf"),
    (errno.EPERM, StoreWriteError, "no permission to write /m/x.gguf"),
    (errno.EROFS, StoreWriteError, "/m/x.gguf is on a read-only disk"),
    (errno.ENOSPC, DiskFullError, "the disk is full: cannot write /m/x.gguf"),
    (errno.ENAMETOOLONG, StoreWriteError, "the path is too long"),
    (errno.EIO, StoreWriteError, "cannot write /m/x.gguf: input/output error"),
])
def test_local_errors_are_typed_and_in_words(code: int, cls: type, words: str) -> None:
    err = local_error(OSError(code, "ignored strerror" if code != errno.EIO else "Input/output error",
                              "/m/x.gguf"))
    assert type(err) is cls and words in err.message, err.message
    assert not RAW.search(err.message)


def test_a_file_where_a_folder_must_be_is_named(tmp_path: Path) -> None:
    blocking = tmp_path / "models"
    blocking.write_text("oops", encoding="utf-8")
    err = local_error(NotADirectoryError(errno.ENOTDIR, "Not a directory", str(blocking / "org" / "x.gguf")))
    assert err.message.startswith(f"{blocking} is a file where a folder is needed")


def test_store_write_round_trips_through_json() -> None:
    err = local_error(PermissionError(errno.EACCES, "Permission denied", "/m"))
    assert ERROR_CLASSES["store_write"] is StoreWriteError
    again = error_from_json(err.to_json())
    assert type(again) is StoreWriteError and again.message == err.message


class _Queue:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put(self, obj: dict[str, Any]) -> None:
        self.events.append(obj)


@pytest.mark.parametrize(("raised", "kind", "words"), [
    (PermissionError(errno.EACCES, "Permission denied", "/store/models/org/x.gguf.part"), "store_write",
     "no permission to write /store/models/org/x.gguf.part"),
    (OSError(errno.EROFS, "Read-only file system", "/store/models"), "store_write", "read-only disk"),
    (socket.gaierror(-2, "Name or service not known"), "network", "no network: cannot reach Hugging Face"),
    (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), "network", "connection to Hugging Face"),
])
def test_the_download_process_reports_os_errors_in_words(monkeypatch: pytest.MonkeyPatch, raised: OSError,
                                                          kind: str, words: str) -> None:
    class Failing:
        def __init__(self, job: dict[str, Any], q: Any) -> None: ...

        def run(self) -> Path:
            raise raised

    monkeypatch.setattr(download, "_Transfer", Failing)
    q = _Queue()
    download._child_main({"request": {"file": "x.gguf"}, "options": {}, "store_root": "/store/models"}, q)
    [event] = q.events
    assert event["type"] == "error" and event["error"]["kind"] == kind
    assert words in event["message"] and not RAW.search(event["message"]), event["message"]
    assert isinstance(error_from_json(event["error"]), StoreWriteError if kind == "store_write" else NetworkError)
