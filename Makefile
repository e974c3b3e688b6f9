# make test / make demo work from a fresh clone with only python3 and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: test lint typecheck pytest demo bench readme openapi clean browser pg-repack

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP)

test: lint typecheck pytest test-ts test-api

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/python scripts/typecheck.py

pytest: $(STAMP) browser pg-repack
	$(BIN)/pytest

# The browser view's tests drive Debian's Chromium through Playwright (`playwright install`
# cannot download here); CI runs as root on a fresh Debian machine.
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { apt-get update -q && apt-get install -y -q chromium; }

# An erase on PostgreSQL rewrites the tables it touched online with pg_repack (docs/erasure.md):
# the Debian package of each installed server's major version (a client-only one needs none); the tests create the
# extension in their database.
pg-repack:
	@for dir in $(wildcard /usr/lib/postgresql/*); do \
	  test ! -x $$dir/bin/postgres || test -x $$dir/bin/pg_repack || { apt-get update -q && \
	    apt-get install -y -q postgresql-$$(basename $$dir)-repack; } || exit 1; done

# The TypeScript client against a real `ctxledger serve` (Node 20+, packages from npm).
test-ts: $(STAMP)
	cd clients/typescript && npm ci --no-audit --no-fund && \
	  CTXLEDGER_BIN=$(abspath $(BIN))/ctxledger npm test

# The running service fuzzed by schemathesis from its OpenAPI document, on both backends
# at once: no server error and no response outside the schema.
test-api: $(STAMP)
	$(BIN)/python scripts/api_fuzz.py --backend sqlite --backend postgres

demo: $(STAMP)
	$(BIN)/ctxledger demo

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis \
	  clients/typescript/node_modules clients/typescript/dist

readme: $(STAMP)
	$(BIN)/python scripts/readme.py

openapi: $(STAMP)
	$(BIN)/python scripts/openapi.py
