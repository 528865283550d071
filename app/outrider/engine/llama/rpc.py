"""llama.cpp's RPC backend (ggml-rpc) through ctypes: remote devices for the target, and the worker's server.

A worker (``outrider rpc-worker``) serves its machine's devices with ``ggml_backend_rpc_start_server``; the engine
adds each worker with ``ggml_backend_rpc_add_server``, registers its devices and passes them, NULL-terminated, in
``llama_model_params.devices`` (left NULL, llama.cpp would keep every layer local).

ggml-rpc aborts the whole process when it cannot connect or a worker's socket breaks (GGML_ABORT). Hence:
``probe`` connects first, with a timeout, so an unreachable worker is a typed error within seconds; a worker
lost mid-reply ends the engine *process* (it runs apart from the app, which keeps the partial reply).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import socket
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from outrider.engine.errors import ModelLoadError

DEVICE_TYPE_CPU = 0
DEVICE_TYPE_GPU = 1
DEVICE_TYPE_IGPU = 2
PROBE_TIMEOUT_S = 3.0


class RpcUnavailable(ModelLoadError):
    """This llama.cpp was built without its RPC backend (``GGML_RPC=on``)."""


@dataclasses.dataclass(frozen=True)
class Device:
    """One ggml backend device. Memory in bytes (for a worker: the remote machine's, as it reports it)."""

    name: str
    description: str
    type: int
    memory_free: int
    memory_total: int

    @property
    def is_rpc(self) -> bool:
        return self.name.startswith("RPC")


def library_dir() -> Path:
    """The folder of llama-cpp-python's shared libraries."""
    return Path(llama_cpp.__file__).parent / "lib"


def find_library(stem: str) -> Path | None:
    """llama.cpp's library ``stem`` (e.g. ``ggml-rpc``) in ``library_dir()``: .so, .dylib or .dll; None if absent."""
    for name in (f"lib{stem}.so", f"lib{stem}.dylib", f"{stem}.dll", f"lib{stem}.dll"):
        path = library_dir() / name
        if path.exists():
            return path
    return None


def has_rpc() -> bool:
    """Whether the installed llama.cpp ships its RPC backend."""
    return find_library("ggml-rpc") is not None


class Ggml:
    """Typed access to the few ggml backend functions used here (libggml, and libggml-rpc when present)."""

    def __init__(self) -> None:
        import llama_cpp.llama_cpp  # noqa: F401  (loads libllama and, through it, libggml)

        ggml, base, rpc = find_library("ggml"), find_library("ggml-base"), find_library("ggml-rpc")
        if ggml is None or base is None:
            raise OSError(f"llama.cpp's ggml libraries are not in {library_dir()}")
        self._ggml = ctypes.CDLL(str(ggml))
        self._base = ctypes.CDLL(str(base))
        self._rpc: Any = ctypes.CDLL(str(rpc)) if rpc is not None else None
        g, b = self._ggml, self._base
        g.ggml_backend_dev_count.restype = ctypes.c_size_t
        g.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        g.ggml_backend_dev_get.restype = ctypes.c_void_p
        g.ggml_backend_device_register.argtypes = [ctypes.c_void_p]
        g.ggml_backend_device_register.restype = None
        for lib in (b, g):  # the device accessors live in libggml-base (newer) or libggml (older)
            if hasattr(lib, "ggml_backend_dev_name"):
                self._dev = lib
                break
        d = self._dev
        d.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
        d.ggml_backend_dev_name.restype = ctypes.c_char_p
        d.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
        d.ggml_backend_dev_description.restype = ctypes.c_char_p
        d.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
        d.ggml_backend_dev_type.restype = ctypes.c_int
        d.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                              ctypes.POINTER(ctypes.c_size_t)]
        d.ggml_backend_dev_memory.restype = None
        d.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
        d.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
        d.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        d.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
        if self._rpc is not None:
            r = self._rpc
            r.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
            r.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
            r.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                        ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
            r.ggml_backend_rpc_start_server.restype = None

    @property
    def has_rpc(self) -> bool:
        return self._rpc is not None

    def device_handles(self) -> list[int]:
        """Every registered device, in llama.cpp's order."""
        return [int(self._ggml.ggml_backend_dev_get(i)) for i in range(int(self._ggml.ggml_backend_dev_count()))]

    def describe(self, handle: int) -> Device:
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._dev.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
        return Device(
            name=(self._dev.ggml_backend_dev_name(handle) or b"").decode("utf-8", "replace"),
            description=(self._dev.ggml_backend_dev_description(handle) or b"").decode("utf-8", "replace"),
            type=int(self._dev.ggml_backend_dev_type(handle)),
            memory_free=int(free.value),
            memory_total=int(total.value),
        )

    def local_accelerators(self) -> list[int]:
        """This machine's GPUs (dedicated or integrated), in llama.cpp's order; RPC devices excluded."""
        return [h for h in self.device_handles()
                if self._dev.ggml_backend_dev_type(h) in (DEVICE_TYPE_GPU, DEVICE_TYPE_IGPU)
                and not (self._dev.ggml_backend_dev_name(h) or b"").startswith(b"RPC")]

    def add_server(self, endpoint: str) -> list[int]:
        """Connect to a worker and register its devices (once per endpoint and process); their handles."""
        if self._rpc is None:
            raise RuntimeError("no RPC backend")
        known = _ADDED_SERVERS.get(endpoint)
        if known is not None:
            return known
        reg = self._rpc.ggml_backend_rpc_add_server(endpoint.encode())
        handles = [int(self._dev.ggml_backend_reg_dev_get(reg, i))
                   for i in range(int(self._dev.ggml_backend_reg_dev_count(reg)))] if reg else []
        for handle in handles:
            self._ggml.ggml_backend_device_register(handle)
        _ADDED_SERVERS[endpoint] = handles
        return handles

    def start_server(self, endpoint: str, cache_dir: str | None, threads: int, devices: Sequence[int]) -> None:
        """Serve ``devices`` at ``endpoint`` ("HOST:PORT") until the process ends (blocks; never returns)."""
        if self._rpc is None:
            raise RuntimeError("no RPC backend")
        array = (ctypes.c_void_p * len(devices))(*devices)
        self._rpc.ggml_backend_rpc_start_server(endpoint.encode(), cache_dir.encode() if cache_dir else None,
                                                threads, len(devices), array)

    def serving_devices(self) -> list[int]:
        """What a worker serves, as llama.cpp's rpc-server chooses: the GPUs, or else the CPU."""
        gpus = self.local_accelerators()
        if gpus:
            return gpus
        return [h for h in self.device_handles() if self._dev.ggml_backend_dev_type(h) == DEVICE_TYPE_CPU][:1]


# ggml-rpc keeps each added server (and its registered devices) for the life of the process: registering them
# again would list every device twice. This records what this process already added.
_ADDED_SERVERS: dict[str, list[int]] = {}


RPC_CMD_HELLO = 14
RPC_PROTO_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of the pinned llama.cpp (ggml-rpc.h)
RPC_CONN_CAPS_SIZE = 24


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Connect to a worker and say hello as ggml-rpc does; ModelLoadError within ``timeout`` seconds if it cannot.

    ggml-rpc itself aborts the process on a failed connection, and waits forever on a worker busy with another
    client (a worker serves one at a time): so this comes before ``add_server``. Kinds: ``rpc_unreachable``,
    ``rpc_busy`` (no answer: another client holds it, or it is not an RPC worker), ``rpc_version``.
    """
    host, _, port = endpoint.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ModelLoadError("rpc_unreachable", endpoint,
                             f"RPC worker {endpoint} is unreachable ({reason}) — is `outrider rpc-worker` "
                             f"running there?") from None
    with sock:
        try:
            sock.sendall(bytes([RPC_CMD_HELLO]) + struct.pack("<Q", RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE))
            reply = _recv_exactly(sock, 8 + 4 + RPC_CONN_CAPS_SIZE)
        except OSError:
            raise ModelLoadError("rpc_busy", endpoint,
                                 f"RPC worker {endpoint} did not answer within {timeout:g} s — it serves one "
                                 f"client at a time (is another Outrider using it?), or it is not an "
                                 f"`outrider rpc-worker`") from None
    (size,) = struct.unpack("<Q", reply[:8])
    major, minor = reply[8], reply[9]
    if size != 4 + RPC_CONN_CAPS_SIZE or major != RPC_PROTO_MAJOR:
        raise ModelLoadError("rpc_version", endpoint,
                             f"RPC worker {endpoint} speaks RPC protocol {major}.{minor}, this llama.cpp "
                             f"{RPC_PROTO_MAJOR}.x — run the same Outrider version on both machines")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError("closed by the worker")
        data += chunk
    return data


# A worker whose machine vanishes (power cut, cable pulled) sends no reset: without these, the engine would wait
# for TCP's own retransmission timeout (about 15 minutes on Linux). Keep-alive probes after 5 s of silence, every
# 2 s, 3 unanswered = dead (~11 s while waiting for a reply); unacknowledged data given up after 10 s.
KEEPALIVE_IDLE_S = 5
KEEPALIVE_INTERVAL_S = 2
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 10_000


def harden_connections(endpoints: Sequence[str]) -> int:
    """Set keep-alive and a send timeout on this process's TCP connections to ``endpoints`` (Linux; elsewhere a
    no-op). ggml-rpc keeps one connection per worker open while a model uses it. Returns how many were set."""
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir() or not hasattr(socket, "TCP_KEEPIDLE"):
        return 0
    wanted = {_resolved(e) for e in endpoints}
    count = 0
    for entry in fd_dir.iterdir():
        fd = int(entry.name)
        try:
            if not os.readlink(entry).startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with sock:
            try:
                if sock.family != socket.AF_INET or sock.getpeername() not in wanted:
                    continue
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
                if hasattr(socket, "TCP_USER_TIMEOUT"):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
                count += 1
            except OSError:
                continue
    return count


def _resolved(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    try:
        return socket.gethostbyname(host), int(port)
    except OSError:
        return host, int(port)


@dataclasses.dataclass(frozen=True)
class Placement:
    """The devices a model's layers may be offloaded to, NULL-terminated for ``llama_model_params.devices``."""

    handles: tuple[int, ...]
    remote: tuple[Device, ...]
    array: Any  # ctypes array of void*, kept alive with the model params


def local_only(ggml: Ggml | None) -> Placement | None:
    """For a model without workers in a process that has added some: this machine's GPUs only, explicitly, so that
    llama.cpp's default ("all registered devices") can never put the draft on a worker. None when no worker was
    added (llama.cpp's default is then local anyway)."""
    if ggml is None or not _ADDED_SERVERS:
        return None
    handles = list(ggml.local_accelerators())
    return Placement(tuple(handles), (), (ctypes.c_void_p * (len(handles) + 1))(*handles, None))


def connect(ggml: Ggml | None, endpoints: Sequence[str], model_path: str) -> Placement:
    """Probe, add and register every worker; the local GPUs followed by the workers' devices."""
    if ggml is None or not ggml.has_rpc:
        raise RpcUnavailable("rpc_unavailable", model_path,
                             "this llama.cpp was built without RPC (GGML_RPC=on); run `make setup` again")
    for endpoint in endpoints:
        probe(endpoint)
    handles = list(ggml.local_accelerators())
    remote: list[Device] = []
    for endpoint in endpoints:
        added = ggml.add_server(endpoint)
        if not added:
            raise ModelLoadError("rpc_unreachable", model_path, f"RPC worker {endpoint} serves no device")
        handles.extend(added)
        remote.extend(ggml.describe(h) for h in added)
    array = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)
    return Placement(tuple(handles), tuple(remote), array)


def buffer_sizes(log_lines: Sequence[str]) -> list[tuple[str, int]]:
    """``(buffer name, bytes)`` of each "model buffer size" line llama.cpp logs while loading a model.

    The name is the device's buffer type, e.g. ``RPC0[127.0.0.1:50052]`` or ``CPU_Mapped``.
    """
    sizes: list[tuple[str, int]] = []
    for line in log_lines:
        if "model buffer size" not in line:
            continue
        head, _, tail = line.partition("model buffer size =")
        name = head.split(":", 1)[-1].strip()
        try:
            mib = float(tail.strip().split()[0])
        except (IndexError, ValueError):
            continue
        sizes.append((name, round(mib * 1024 * 1024)))
    return sizes
