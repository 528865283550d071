"""The option helpers the terminal commands share: one range check (``base.in_range``) behind the port, thread and
draft-length types, and one ``--prompt | --chat [--system]`` group (``engine_options.add_prompt_options``) for
``generate`` and ``verify``. Bad input is argparse's one-line error, exit 2."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from outrider.commands import generate, rpc_worker, verify
from outrider.commands.base import in_range
from outrider.commands.engine_options import add_prompt_options, k_value


def test_in_range_keeps_the_bounds_and_says_what_is_wrong() -> None:
    assert in_range(1, 1, 3, "n") == 1 and in_range(3, 1, 3, "n") == 3
    with pytest.raises(argparse.ArgumentTypeError, match=r"^n must be between 1 and 3, got 4$"):
        in_range(4, 1, 3, "n")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^threads must be between 1 and 2 \(CPUs\), got 0$"):
        in_range(0, 1, 2, "threads", " (CPUs)")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("0", "a port must be between 1 and 65535, got 0"),
        ("65536", "a port must be between 1 and 65535, got 65536"),
        ("http", "expected a whole number, got 'http'"),
    ],
)
def test_a_bad_port_is_refused_in_words(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        rpc_worker._port(text)
    assert str(info.value) == error


def test_ports_threads_and_k_inside_their_ranges() -> None:
    assert rpc_worker._port("1") == 1 and rpc_worker._port("65535") == 65535
    cpus = os.cpu_count() or 1
    assert rpc_worker._threads(str(cpus)) == cpus
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^threads must be between 1 and {cpus} \(this machine's"):
        rpc_worker._threads(str(cpus + 1))
    assert k_value("auto") is None and k_value("0") == 0 and k_value("64") == 64
    with pytest.raises(argparse.ArgumentTypeError, match=r"^draft length must be between 0 and 64, got 65$"):
        k_value("65")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected a number or 'auto', got 'lots'$"):
        k_value("lots")


def _parser(register: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="outrider", exit_on_error=False)
    register(parser.add_subparsers(dest="command"))  # type: ignore[operator]
    return parser


@pytest.mark.parametrize("module", [generate, verify])
def test_generate_and_verify_take_one_prompt_or_one_chat_message(
    module: object, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "generate" if module is generate else "verify"
    parser = _parser(module.register)  # type: ignore[attr-defined]
    args = parser.parse_args([name, "--target", "t.gguf", "--chat", "hi", "--system", "be brief"])
    assert (args.prompt, args.chat, args.system) == (None, "hi", "be brief")
    args = parser.parse_args([name, "--target", "t.gguf", "--prompt", "once upon"])
    assert (args.prompt, args.chat, args.system) == ("once upon", None, None)
    for both_or_none in ([name, "--target", "t.gguf", "--prompt", "a", "--chat", "b"], [name, "--target", "t.gguf"]):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(both_or_none)
        assert info.value.code == 2
    assert "--prompt" in capsys.readouterr().err


def test_the_prompt_group_alone() -> None:
    parser = argparse.ArgumentParser()
    add_prompt_options(parser)
    assert vars(parser.parse_args(["--chat", "x"])) == {"prompt": None, "chat": "x", "system": None}


def test_rpc_and_split_lists_say_the_parsers_words_as_argparse_errors() -> None:
    from outrider.commands.base import rpc_list, split_list

    assert rpc_list("127.0.0.1:50052,10.0.0.2:50052") == ("127.0.0.1:50052", "10.0.0.2:50052")
    assert split_list("3,1") == (3.0, 1.0)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^an RPC worker is given as HOST:PORT, got 'nope'$"):
        rpc_list("nope")
    with pytest.raises(argparse.ArgumentTypeError) as info:
        split_list("3,x")
    assert str(info.value) and "Traceback" not in str(info.value)


@pytest.mark.parametrize(("argv", "learns"), [
    (["generate", "--prompt", "hi"], True),
    (["ask", "hi"], True),
    (["serve"], True),
    (["generate", "--prompt", "hi", "--cold-start"], False),
    (["bench"], False),
    (["verify", "--prompt", "hi"], False),
])
def test_what_automatic_draft_length_learned_is_kept_except_where_a_command_measures(
        argv: list[str], learns: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate, ask and serve start from what the pair's last load learned (the app's file); bench and verify
    measure, so their figures do not depend on earlier runs; --cold-start is a cold start anywhere."""
    from outrider.cli import build_parser
    from outrider.commands.engine_options import pair_spec

    monkeypatch.setenv("OUTRIDER_HOME", str(tmp_path))
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    args = build_parser().parse_args([argv[0], "--target", str(target), *argv[1:]])
    expected = str(tmp_path / "draft-length.json") if learns else None
    assert pair_spec(args).learned_draft == expected
