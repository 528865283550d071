"""llama.cpp's own speculative decoder, ``llama-speculative-simple``, built from the llama.cpp that the installed
llama-cpp-python vendors (same version, same commit), and run as the benchmarks' "native" column.

The build is cached under ``.cache/bench/llama.cpp-<version>-<cpu|cuda>/bin`` (the binary and its shared
libraries); the first build compiles all of llama.cpp and takes a long time on a small machine, so it runs at the
lowest CPU priority (``nice``) with ``--jobs`` parallel compilers (default 2). The source is the sdist's
``vendor/llama.cpp``: a copy already unpacked at ``.cache/bench/llama_cpp_python-<version>`` (a link to one is
fine), else the sdist from ``pip download``.

What ``llama-speculative-simple`` does at this revision (``examples/speculative-simple``, ``common/speculative.cpp``),
which decides what the column measures:

- ``--spec-type draft-simple -md DRAFT``: a draft model. The target context gets ``n_rs_seq`` 0
  (``common_params_speculative::need_n_rs_seq`` asks snapshots only for MTP/EAGLE-3/DFlash), so on a hybrid target
  it rolls back by *checkpoints*: ``llama_state_seq_get_data_ext(PARTIAL_ONLY)`` into host memory before every
  verify batch, and after a partial acceptance a restore and the accepted tokens evaluated again as the next
  round's batch. The hybrid draft model does the same with its own checkpoint.
- ``--spec-type draft-mtp`` (no ``-md``: the heads in the target file; ``-md HEAD``: a head file): the MTP context,
  and the target keeps ``n_rs_seq`` = ``--spec-draft-n-max`` snapshots, so a hybrid target rolls back through them.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "bench"
TOOL = "llama-speculative-simple"
SUMMARY_TRIES = 5  # runs of one measurement until llama.cpp's final statistics reach its output (run_native)


def build_native(cuda: bool, *, jobs: int = 2) -> Path:
    """The cached ``llama-speculative-simple`` binary, built first if missing (niced, ``jobs`` compilers)."""
    version = importlib.metadata.version("llama-cpp-python")
    flavour = "cuda" if cuda else "cpu"
    binary = CACHE / f"llama.cpp-{version}-{flavour}" / "bin" / TOOL
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    src = CACHE / f"llama_cpp_python-{version}"
    if not src.exists():
        sdist_dir = CACHE / "sdist"
        sdist = next(sdist_dir.glob(f"llama_cpp_python-{version}.tar.gz"), None) if sdist_dir.exists() else None
        if sdist is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d",
                            str(sdist_dir), f"llama-cpp-python=={version}"], check=True)
            sdist = next(sdist_dir.glob(f"llama_cpp_python-{version}.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(CACHE, filter="data")
    build = CACHE / f"build-{flavour}"
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    print(f"# building {TOOL} from {src / 'vendor' / 'llama.cpp'} ({jobs} jobs, niced; slow the first time)",
          flush=True)
    subprocess.run([*nice, "cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(build),
                    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", f"-DGGML_CUDA={'ON' if cuda else 'OFF'}"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*nice, "cmake", "--build", str(build), "--target", TOOL, "-j", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(build / "bin" / TOOL, binary)
    for lib in (build / "bin").glob("*.so*"):
        shutil.copy2(lib, binary.parent / lib.name)
    return binary


@dataclasses.dataclass(frozen=True)
class NativeResult:
    """One ``llama-speculative-simple`` run: decode tokens/s (prompt excluded, as llama.cpp times it), tokens
    decoded, and its drafted / accepted counts."""

    tps: float
    decoded: int
    drafted: int
    accepted: int

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def run_native(binary: Path, target: Path, *, spec_type: str, k: int, prompt: str, tokens: int, threads: int,
               cuda: bool = False, draft: Path | None = None, n_ctx: int = 2048) -> NativeResult:
    """Greedy decoding of ``tokens`` tokens (through end-of-generation tokens) with drafts of up to ``k``."""
    ngl = "99" if cuda else "0"
    cmd = [str(binary), "-m", str(target), "-p", prompt, "-n", str(tokens), "--spec-type", spec_type,
           "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-t", str(threads),
           "-td", str(threads), "-c", str(n_ctx), "--temp", "0", "--top-k", "1", "-ngl", ngl, "-ngld", ngl,
           "--seed", "1", "--ignore-eos"]
    if draft is not None:
        cmd += ["-md", str(draft)]
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    for _ in range(SUMMARY_TRIES):
        out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, check=False)
        log = out.stdout + out.stderr
        decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
        drafted = re.search(r"n_drafted\s*=\s*(\d+)", log)
        accepted = re.search(r"n_accept\s*=\s*(\d+)", log)
        if out.returncode != 0:
            break
        if decoded and drafted and accepted:
            return NativeResult(float(decoded.group(3)), int(decoded.group(1)), int(drafted.group(1)),
                                int(accepted.group(1)))
        # Exit 0 without the summary: llama.cpp's logger is a leaked singleton whose queue a worker thread
        # drains, so lines still queued at exit are lost (its own comment in common/log.cpp, issue #22142); on a
        # busy machine that worker often has not run yet. The run itself was fine: run it again.
    raise RuntimeError(f"{TOOL} failed ({out.returncode}): {' '.join(cmd)}\n{log[-3000:]}")
