"""--rpc / --split values, the settings fields the GUI edits, and the spec that reaches the engine (no llama.cpp)."""

from __future__ import annotations

import pytest

from outrider.engine.params import ModelSettings, check_rpc_endpoint, parse_rpc_list, parse_split
from outrider.settings import AppSettings
from outrider.worker.errors import EngineCrashed


def test_rpc_list_parses_and_normalises() -> None:
    assert parse_rpc_list(" 10.0.0.2:50052 , gpu-box:07,") == ("10.0.0.2:50052", "gpu-box:7")
    assert parse_rpc_list("") == ()


@pytest.mark.parametrize(("text", "words"), [
    ("host", "HOST:PORT"), (":50052", "HOST:PORT"), ("host:port", "port must be"), ("host:70000", "port must be"),
    ("a b:1", "HOST:PORT"), ("::1:50052", "IPv6"), ("a:1,a:01", "twice"),
    (",".join(f"h:{p}" for p in range(1, 18)), "at most 16"),
])
def test_rpc_list_refuses_bad_entries(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_rpc_list(text)


def test_model_settings_check_wire_values() -> None:
    settings = ModelSettings(rpc=["h:1"], split=[3, 1])  # type: ignore[arg-type]  # as JSON brings them
    assert settings.rpc == ("h:1",) and settings.split == (3.0, 1.0)
    with pytest.raises(ValueError, match="HOST:PORT"):
        ModelSettings(rpc=(5,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split"):
        ModelSettings(split=(0.0, 0.0))
    with pytest.raises(ValueError, match="HOST:PORT"):
        check_rpc_endpoint(None)


def test_split_parses_proportions() -> None:
    assert parse_split("3, 1") == (3.0, 1.0)
    for bad in ("", "a,b", "-1,2", "0,0", "nan"):
        with pytest.raises(ValueError):
            parse_split(bad)


def test_settings_fields_reach_the_target_only() -> None:
    s = AppSettings(rpc_servers="10.0.0.2:50052,10.0.0.3:50052", target_split="2,1")
    spec = s.validated().pair_spec("t.gguf", "d.gguf", False)
    assert spec.target_settings.rpc == ("10.0.0.2:50052", "10.0.0.3:50052")
    assert spec.target_settings.split == (2.0, 1.0)
    assert spec.draft_settings.rpc == () and spec.draft_settings.split == ()
    assert AppSettings().pair_spec("t", None, False).target_settings.rpc == ()


def test_bad_saved_rpc_settings_fall_back_to_none() -> None:
    s = AppSettings.from_json({"rpc_servers": "no-port", "target_split": "x", "context_size": 2048})
    assert (s.rpc_servers, s.target_split, s.context_size) == ("", "", 2048)


def test_a_lost_worker_is_named_in_the_crash_message() -> None:
    tail = ("/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response", "(backtrace)")
    assert "an RPC worker stopped answering" in str(EngineCrashed("SIGABRT", "generating", log_tail=tail))
    assert "RPC" not in str(EngineCrashed("SIGABRT", "generating", log_tail=("GGML_ASSERT(x) failed",)))


def test_connections_to_workers_get_keepalive_and_a_send_timeout() -> None:
    """A worker's machine that vanishes is noticed in seconds, not after TCP's ~15 minutes (Linux)."""
    import socket

    from outrider.engine.llama import rpc

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client, \
                socket.create_connection(("127.0.0.1", port)) as other:
            assert rpc.harden_connections([f"localhost:{port}"]) == 2
            assert rpc.harden_connections([f"127.0.0.1:{port + 1}"]) == 0  # other peers are left alone
            for sock in (client, other):
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == rpc.KEEPALIVE_IDLE_S
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == rpc.KEEPALIVE_COUNT
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == rpc.USER_TIMEOUT_MS
