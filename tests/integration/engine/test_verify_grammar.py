"""``outrider verify --grammar FILE`` / ``--json-schema FILE``: exactness of speculation under a grammar (structured
output), checked against the target's grammar-masked distribution, on the generated tiny family (draft model).

The correct engine passes, with drafting (drafted > 0) and every sample inside the masked support; two plausible
bugs of grammar-constrained speculation, planted (``tests/support/planted_grammar_bugs.py``), are caught.

Breaking it on purpose:
* ``Engine.score`` scoring without the grammar (the unmasked target as the reference) made the correct engine fail
  ``test_verify_under_a_grammar_passes`` (KS p ≈ 0: every sampled token was judged against mass the grammar had
  taken away) — the reference really is the masked distribution;
* the draft's q unmasked (``draft_q_unmasked``: drawn masked, reported unmasked) passes verify without a grammar
  (the bug needs one) and failed with it: at 200 samples KS p 3e-6, likeliest-token p 4e-6, draft direction
  p 2e-4; after a merge of later drafting changes KS p 0.003 and position 0's chi-square p 1.4e-4 (still caught,
  closer to the thresholds); at verify's default 400 samples, which the test now takes: KS p 9e-7, likeliest-token
  p 3e-6, draft direction p 4e-5;
* the grammar state not rolled back (``no_rollback``) broke the grammar on the first speculative reply: the engine
  was then asked to accept a token its state forbids, and verify stopped with that error instead of "EXACT".
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.planted_grammar_bugs import planted_grammar_bug
from support.tiny_gguf import Family

# Words of the tiny vocabulary: the grammar leaves a handful of tokens at each position, so the masked
# distributions differ much from the unmasked ones (where a grammar bug shows).
WORDS_GBNF = 'root ::= word (" " word)*\nword ::= "the" | "model" | "draft" | "target" | "token" | "speed" | ' \
             '"fast" | "slow" | "text" | "code"\n'
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def grammar_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("grammars")
    words = folder / "words.gbnf"
    words.write_text(WORDS_GBNF, encoding="utf-8")
    schema = folder / "person.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    broken = folder / "broken.gbnf"
    broken.write_text("root ::= (\n", encoding="utf-8")
    not_json = folder / "not.json"
    not_json.write_text("{name: 1", encoding="utf-8")
    return {"words": words, "schema": schema, "broken": broken, "not_json": not_json}


def pair(family: Family) -> list[str]:
    return ["verify", "--target", str(family.target), "--draft", str(family.draft), "--prompt", "the model",
            "--ctx", "256", "--k", "3", "--threads", "1"]


def outrider(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, "-m", "outrider.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def in_process(family: Family, *extra: str) -> tuple[int, dict[str, Any] | None, str]:
    """``outrider verify --in-process --json`` in this process (where a planted bug is): exit status, the JSON
    object (None when it stopped with an error), stderr."""
    from outrider.cli import main as outrider_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = outrider_main([*pair(family), "--in-process", "--json", *extra])
    text = out.getvalue()
    return code, (json.loads(text) if text.strip() else None), err.getvalue()


def test_verify_under_a_grammar_passes(tiny_family: Family, grammar_files: dict[str, Path]) -> None:
    r = outrider(*pair(tiny_family), "--samples", "200", "--tokens", "8", "--grammar", str(grammar_files["words"]),
                 "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["exact"] and report["greedy"]["identical"]
    sampling = report["sampling"]
    assert sampling["drafted"] > 100 and sampling["accepted"] > 0  # speculation happened, under the grammar
    assert sampling["pit"]["outside"] == 0  # every sampled token is one the grammar allowed there


def test_verify_readable_summary_names_the_schema(tiny_family: Family, grammar_files: dict[str, Path]) -> None:
    r = outrider(*pair(tiny_family), "--samples", "30", "--tokens", "6", "--json-schema",
                 str(grammar_files["schema"]))
    assert r.returncode in (0, 1), r.stderr
    assert r.stdout.startswith(f"under the JSON schema {grammar_files['schema']}: every distribution below is the "
                               "target's grammar-masked one\ngreedy (temperature 0): identical over 6 tokens")


def test_unmasked_draft_q_is_caught(tiny_family: Family, grammar_files: dict[str, Path]) -> None:
    settings = ("--samples", "400", "--tokens", "8", "--seed", "0")
    with planted_grammar_bug("draft_q_unmasked"):
        code, report, err = in_process(tiny_family, *settings, "--grammar", str(grammar_files["words"]))
    assert code == 1, err
    assert report is not None and not report["exact"]
    assert report["sampling"]["drafted"] > 0
    assert report["greedy"]["identical"]  # greedy never uses q: the statistics caught it
    pit = report["sampling"]["pit"]
    pooled = min(pit["ks_p"], pit["top_p"], pit["draft_p"])
    per_position = min(p["p_value"] for p in report["sampling"]["positions"])
    assert pooled < 0.01 / 6 or per_position < 0.01 / 16  # a test below its threshold (verify's α = 0.01)


def test_grammar_state_not_rolled_back_is_caught(tiny_family: Family, grammar_files: dict[str, Path]) -> None:
    with planted_grammar_bug("no_rollback"):
        code, report, err = in_process(tiny_family, "--samples", "40", "--tokens", "8", "--grammar",
                                       str(grammar_files["words"]))
    assert code != 0 and (report is None or not report["exact"])
    assert "not allowed by the grammar" in err


@pytest.mark.parametrize(("option", "name", "says"), [
    ("--grammar", "missing", "cannot read"),
    ("--json-schema", "not_json", "is not JSON"),
    ("--grammar", "broken", "grammar"),
])
def test_bad_grammar_files_exit_2(tiny_family: Family, grammar_files: dict[str, Path], option: str, name: str,
                                  says: str) -> None:
    path = grammar_files.get(name, grammar_files["words"].parent / "missing.gbnf")
    r = outrider(*pair(tiny_family), "--samples", "5", "--tokens", "3", option, str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
