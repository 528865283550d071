"""``--sampler`` on the commands, the server's ``sampler`` extension field and the engine wire carry the sampler
choice; bad values are refused by name. (Breaking it: dropping ``sampler`` from ``text_request`` made the CLI test
see ``coupled`` for ``--sampler rejection``; leaving ``sampler`` out of ``_EXTENSIONS`` made the server answer 400
``unknown field``.)"""

from __future__ import annotations

import pytest

from outrider.cli import build_parser
from outrider.commands.engine_options import text_request
from outrider.engine.params import DEFAULT_SAMPLER, SamplingParams, TextRequest
from outrider.engine.sampling import resolve_seed
from outrider.server.requests import ApiError, Defaults, chat_request, completion_request
from outrider.worker.engine_process import _build_request
from outrider.worker.protocol import request_to_wire


def _args(*extra: str) -> list[str]:
    return ["generate", "--target", "t.gguf", "--prompt", "hi", *extra]


@pytest.mark.parametrize("sampler", ["coupled", "rejection"])
def test_the_generate_option_reaches_the_request(sampler: str) -> None:
    args = build_parser().parse_args(_args("--temperature", "0.7", "--sampler", sampler))
    assert text_request(args, prompt="hi").sampling.sampler == sampler


def test_the_default_sampler_is_auto_and_a_bad_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert DEFAULT_SAMPLER == "auto"
    assert text_request(build_parser().parse_args(_args()), prompt="hi").sampling.sampler == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(_args("--sampler", "gumbel"))
    assert "invalid choice: 'gumbel'" in capsys.readouterr().err


def test_the_server_field_overrides_the_default_and_bad_values_are_400() -> None:
    defaults = Defaults(sampling=SamplingParams(sampler="rejection"))
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert chat_request(chat, defaults).text.sampling.sampler == "rejection"
    assert chat_request({**chat, "sampler": "coupled"}, defaults).text.sampling.sampler == "coupled"
    assert completion_request({"prompt": "x", "sampler": "rejection"}, Defaults()).text.sampling.sampler == "rejection"
    with pytest.raises(ApiError) as err:
        chat_request({**chat, "sampler": "greedy"}, defaults)
    assert err.value.status == 400 and err.value.param == "sampler"
    assert "auto, coupled, rejection" in err.value.message


def test_auto_is_coupled_for_a_seeded_request_and_rejection_otherwise() -> None:
    """A seeded reply must repeat whatever automatic k picks (coupled); an unseeded one takes the sampler with the
    higher acceptance (rejection). Decided before the seed is filled in."""
    seeded = resolve_seed(SamplingParams(temperature=0.7, seed=4))
    assert (seeded.sampler, seeded.seed) == ("coupled", 4)
    unseeded = resolve_seed(SamplingParams(temperature=0.7))
    assert unseeded.sampler == "rejection" and unseeded.seed is not None
    assert resolve_seed(SamplingParams(temperature=0.7, sampler="coupled")).sampler == "coupled"
    assert resolve_seed(SamplingParams(temperature=0.7, seed=1, sampler="rejection")).sampler == "rejection"


def test_the_engine_wire_carries_the_sampler() -> None:
    request = TextRequest(prompt="x", sampling=SamplingParams(temperature=0.5, seed=3, sampler="rejection"))
    assert _build_request(request_to_wire(request)).sampling == request.sampling
