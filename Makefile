# The two commands a new user runs: `make demo` and `make test`. Each creates or reuses .venv and installs
# torch==2.13.0 before anything that depends on torch (a plain `pip install torch` may pull a multi-GB build).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0
EXTRAS := dev

.PHONY: install demo test test-all lint clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed-$(EXTRAS)

demo: install
	$(BIN)/implicit-em demo

test: install
	$(BIN)/python -m pytest -q

test-all: install
	$(BIN)/python -m pytest -q -m ""

LINT_PATHS := $(wildcard src tests benchmarks examples)

lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
