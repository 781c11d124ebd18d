# The two commands a new user runs: `make demo` and `make test`. Each creates or reuses .venv and installs
# torch==2.13.0 before anything that depends on torch (a plain `pip install torch` may pull a multi-GB build).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0
# What each command installs on top of torch: the demo needs the package alone; the tests also need the dev
# tools and the optional extras whose adapters they exercise (transformers, TensorBoard, Lightning, pyarrow for
# .parquet data, safetensors for saved models).
DEMO_SPEC := -e .
TEST_SPEC := -e ".[dev,hf,tensorboard,lightning,parquet,safetensors]"

.PHONY: install demo test test-long test-all lint clean

define install_into_venv
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q $(TORCH) $(1)
	touch $@
endef

$(VENV)/.installed-demo: pyproject.toml Makefile
	$(call install_into_venv,$(DEMO_SPEC))

$(VENV)/.installed-test: pyproject.toml Makefile
	$(call install_into_venv,$(TEST_SPEC))

install: $(VENV)/.installed-test

demo: $(VENV)/.installed-demo
	$(BIN)/implicit-em demo
	$(BIN)/implicit-em audit --quick --jobs auto --out runs/demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

# The tests make test leaves out for time (tests/long_tests.txt); CI runs both.
test-long: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "long and not slow"

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m ""

LINT_PATHS := $(wildcard src tests benchmarks examples tools)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
