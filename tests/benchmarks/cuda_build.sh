#!/usr/bin/env bash
# Builds the llama.cpp that llama-cpp-python vendors with CUDA, once, on a bare GPU machine, for the benchmarks'
# `--cuda` runs: the same shared libraries serve llama-cpp-python (copied into a llama_cpp package directory) and
# the native column (`llama-speculative-simple`, put where native_llama.build_native looks for its cached build).
# One build instead of two (pip's own CUDA build, then native_llama's) halves the compile time of a GPU session.
# Every library and the tool find each other next to themselves ($ORIGIN), as in llama-cpp-python's own wheel: a
# copy that still pointed into the build tree could load a second, different copy of a library.
#
#   bash tests/benchmarks/cuda_build.sh LLAMA_CPP_SRC_DIR LLAMA_CPP_PACKAGE_DIR [CUDA_ARCH]
#
# LLAMA_CPP_SRC_DIR: the sdist's vendor/llama.cpp; LLAMA_CPP_PACKAGE_DIR: an installed llama_cpp package (its lib/
# is replaced); CUDA_ARCH: compute capability without the dot (default: 90, Hopper). Needs nvcc, cuBLAS, CMake and
# ninja. Set JOBS to limit parallel compilers (default: every CPU).
set -euo pipefail
src=${1:?llama.cpp source directory}
package=${2:?llama_cpp package directory}
arch=${3:-90}
root=$(cd "$(dirname "$0")/../.." && pwd)
version=$(python3 - "$package" <<'EOF'
import re, sys, pathlib
text = (pathlib.Path(sys.argv[1]) / "__init__.py").read_text()
print(re.search(r'__version__\s*=\s*"([^"]+)"', text).group(1))
EOF
)
build=${BUILD_DIR:-/tmp/llama.cpp-cuda-build}
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_RPC=ON -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
    >/dev/null
cmake --build "$build" --target llama ggml-rpc llama-speculative-simple -j "${JOBS:-$(nproc)}"
mkdir -p "$package/lib"
cp -a "$build"/bin/*.so* "$package/lib/"
native="$root/.cache/bench/llama.cpp-$version-cuda/bin"
mkdir -p "$native"
cp -a "$build"/bin/llama-speculative-simple "$build"/bin/*.so* "$native/"
echo "llama.cpp $version built for sm_$arch: $package/lib, $native"
