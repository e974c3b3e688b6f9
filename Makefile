# make test / make demo work from a fresh clone with only python3 and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: test lint typecheck pytest demo bench readme openapi clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP)

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/python scripts/typecheck.py

pytest: $(STAMP)
	$(BIN)/pytest

demo: $(STAMP)
	$(BIN)/ctxledger demo

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis

readme: $(STAMP)
	$(BIN)/python scripts/readme.py

openapi: $(STAMP)
	$(BIN)/python scripts/openapi.py
