"""A reload of a pair starts automatic draft length where the last load left off (``PairSpec.learned_draft``).

On the generated dense ``glm4moe`` + NextN target whose head agrees with it (``support/mtp_gguf.py``): counts and
states, never timings. A reply drafts (so there is something learned), the file holds it, a second load of the
same file starts from it (costs known before its first pass), another file or a damaged record starts cold and
says why — and the replies stay the target's own greedy output (``support/reference_decoding.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from outrider.engine.engine import Engine, PairSpec
from outrider.engine.llama.runtime import Backend
from outrider.engine.params import ContextSettings, DraftParams
from outrider.engine.speculative import DoneEvent
from support.mtp_gguf import make_mtp_models
from support.policy_replies import set_pass_costs
from support.reference_decoding import ReferenceModel

PROMPT = "the model is fast and the draft is quick and the"
CTX = ContextSettings(n_ctx=512, threads=2)
TOKENS = 40


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mtp_models(tmp_path_factory.mktemp("learned") / "agreeing").target


@pytest.fixture()
def engine(backend: Backend) -> Iterator[Engine]:
    e = Engine(backend)
    yield e
    e.unload()


def _reply(e: Engine, k: int | None = None) -> tuple[list[int], DoneEvent]:
    tokens: list[int] = []
    for event in e.generate(e.tokenize_prompt(PROMPT), max_tokens=TOKENS, draft=DraftParams(k=k), ignore_eos=True):
        if isinstance(event, DoneEvent):
            return tokens, event
        tokens.extend(event.tokens)
    raise AssertionError("no done event")


def _saved(path: Path) -> dict[str, dict[str, object]]:
    pairs: dict[str, dict[str, object]] = json.loads(path.read_text(encoding="utf-8"))["pairs"]
    return pairs


def test_a_reload_starts_from_what_the_last_load_learned(engine: Engine, target: Path, tmp_path: Path) -> None:
    """Breaking it (``_recall_draft_length`` not handing the recalled policy to the decoder): the reload's policy
    was None before its first reply, and its costs unknown. A reload with a recalled policy times no passes."""
    learned = tmp_path / "draft-length.json"
    spec = PairSpec(target=str(target), mtp=True, context=CTX, learned_draft=str(learned))
    engine.load(spec)
    set_pass_costs(engine._decoder_or_raise())
    first, done = _reply(engine)
    assert done.stats.drafted > 0
    saved = _saved(learned)
    assert len(saved) == 1
    policy = engine._decoder_or_raise().auto_policy
    assert policy is not None and next(iter(saved.values()))["policy"] == json.loads(json.dumps(policy.snapshot()))

    engine.load(spec)
    restored = engine._decoder_or_raise().auto_policy
    assert restored is not None, "the reload started cold"
    # Its replies' own costs: the load times no passes (engine/pass_costs.py), which only lengthened a reload.
    assert engine._decoder_or_raise().pass_costs == {}
    # Known before the reload's first pass: what a pass costs and how often the head is kept (not whether drafting
    # pays: that needs a draft the first reply timed, and where the passes timed at load ran 1.6x the replies' own
    # its first draft, untimed, was its only one).
    assert restored.model.verify_cost(1) is not None and restored.model.acceptance is not None
    assert restored.snapshot() == policy.snapshot()
    again, _ = _reply(engine)  # whether it drafts is the learned costs' call (this tiny model's are close)
    with ReferenceModel(target, n_ctx=512) as reference:
        expected = reference.greedy(engine.tokenize_prompt(PROMPT), TOKENS)
    assert first == expected and again == expected


def test_a_fixed_k_reply_and_a_load_without_the_file_save_nothing(engine: Engine, target: Path,
                                                                    tmp_path: Path) -> None:
    learned = tmp_path / "draft-length.json"
    engine.load(PairSpec(target=str(target), mtp=True, context=CTX, learned_draft=str(learned)))
    _reply(engine, k=2)
    assert not learned.exists()  # fixed k: automatic draft length learned nothing
    engine.load(PairSpec(target=str(target), mtp=True, context=CTX))
    _reply(engine)
    assert not learned.exists()


def test_another_file_under_the_same_name_starts_cold(engine: Engine, target: Path, tmp_path: Path) -> None:
    """The target's modification time moved (a file replaced by another): its learning is another pair's."""
    learned = tmp_path / "draft-length.json"
    spec = PairSpec(target=str(target), mtp=True, context=CTX, learned_draft=str(learned))
    engine.load(spec)
    _reply(engine)
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    engine.load(spec)
    assert engine._decoder_or_raise().auto_policy is None
    assert engine._decoder_or_raise().pass_costs, "a cold start's passes were not timed"
    _reply(engine)
    assert len(_saved(learned)) == 2


def test_a_damaged_file_is_a_note_and_the_next_reply_writes_a_good_one(engine: Engine, target: Path,
                                                                       tmp_path: Path) -> None:
    learned = tmp_path / "draft-length.json"
    learned.write_text('{"format": 1, "pairs": {', encoding="utf-8")
    info = engine.load(PairSpec(target=str(target), mtp=True, context=CTX, learned_draft=str(learned)))
    notes = [n for n in info.notes if "learned" in n]
    assert len(notes) == 1 and str(learned) in notes[0] and "is not JSON" in notes[0], info.notes
    assert engine._decoder_or_raise().pass_costs, "a load that goes on cold did not time its passes"
    _, done = _reply(engine)
    assert done.stats.generated == TOKENS
    assert len(_saved(learned)) == 1
