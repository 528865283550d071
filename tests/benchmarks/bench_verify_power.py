"""How often ``outrider verify`` catches each planted sampler bug (``tests/support/planted_bugs.py``), and how often
it wrongly fails the correct engine, on a generated same-family tiny pair (``tests/support/tiny_gguf.py``).

    PYTHONPATH=app:tests python tests/benchmarks/bench_verify_power.py [--runs 10] [--samples N] [--tokens M]
        [--bugs always_accept,...] [--prompt "the model"]

Each run is one ``outrider verify --in-process --json`` with its own ``--seed`` (the run index) and the bug's
setting (``planted_bugs.WHERE``). Prints one row per bug: caught / runs, and the median of the tests' p-values.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from support.planted_bugs import BUGS, WHERE, echo_prompt, family_of, planted, verify_once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--samples", type=int, default=None, help="default: verify's own default")
    parser.add_argument("--tokens", type=int, default=None, help="default: verify's own default")
    parser.add_argument("--bugs", default=",".join(("none", *BUGS)))
    parser.add_argument("--prompt", default="a b c a b c")
    parser.add_argument("--family", choices=("peaked", "small"), default="peaked")
    parser.add_argument("--all-settings", action="store_true", help="every setting of planted_bugs.WHERE, not only "
                        "each bug's headline one")
    args = parser.parse_args()
    from outrider.commands.verify import DEFAULT_SAMPLES, DEFAULT_TOKENS

    samples, tokens = args.samples or DEFAULT_SAMPLES, args.tokens or DEFAULT_TOKENS
    with tempfile.TemporaryDirectory() as tmp:
        family = family_of(args.family, Path(tmp))
        print(f"verify --samples {samples} --tokens {tokens}, {args.runs} runs per row, {args.family} tiny family "
              f"pair, k 3, prompt {args.prompt!r}")
        print(f"{'bug':<24} {'setting':<26} {'sampler':<10} {'caught':>7} {'KS p':>9} {'top p':>9} "
              f"{'draft p':>9} {'pos p':>9} {'ident':>6} {'TV det':>7} {'accepted':>11} {'s/run':>6}")
        for bug in args.bugs.split(","):
            nones = [("T 0.7", "rejection"), ("T 0.7", "coupled")] + ([("lookup", "coupled")] if args.all_settings
                                                                       else [])
            rows = nones if bug == "none" else list(WHERE[bug] if args.all_settings else WHERE[bug][:1])
            for setting, sampler in rows:
                prompt = echo_prompt(family.target, args.prompt) if setting == "lookup" else args.prompt
                pair = ["--target", str(family.target)]
                pair += ["--lookup"] if setting == "lookup" else ["--draft", str(family.draft)]
                caught = 0
                ks, top, dp, pos, ident, det, secs = [], [], [], [], [], [], []
                drafted = accepted = 0
                for run in range(args.runs):
                    t0 = time.perf_counter()
                    with planted(bug, 0.7):
                        code, obj = verify_once(pair, setting, sampler, run, samples, tokens, prompt)
                    secs.append(time.perf_counter() - t0)
                    caught += int(not obj["exact"])
                    pit = obj["sampling"]["pit"]
                    ks.append(pit["ks_p"])
                    top.append(pit["top_p"])
                    dp.append(pit["draft_p"])
                    pos.append(min(p["p_value"] for p in obj["sampling"]["positions"]))
                    ident.append(len(obj["identity"]["mismatches"]))
                    det.append(obj["sampling"]["detectable_tv"])
                    drafted += obj["sampling"]["drafted"]
                    accepted += obj["sampling"]["accepted"]
                    _ = code
                label = "caught" if bug != "none" else "failed"
                print(f"{bug:<24} {setting:<26} {sampler:<10} {caught:>3}/{args.runs:<3} "
                      f"{statistics.median(ks):>9.2g} {statistics.median(top):>9.2g} {statistics.median(dp):>9.2g} "
                      f"{statistics.median(pos):>9.2g} {statistics.median(ident):>6.0f} "
                      f"{statistics.median(det):>7.3f} {accepted:>5}/{drafted:<5} {statistics.median(secs):>6.1f}  "
                      f"({label})", flush=True)


if __name__ == "__main__":
    main()
