# Every target creates .venv and installs the project first when needed, so a
# fresh clone needs nothing but `make test` or `make run`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTOS := $(wildcard proto/flux/v1/*.proto)
# KEDA's external scaler contract, vendored (proto/flux/keda/NOTICE); generated beside flux/v1.
KEDA_PROTOS := $(wildcard proto/flux/keda/*.proto)
RELEASED := proto/released/flux-v1.binpb

.PHONY: install proto check-proto release-proto test test-unit run demo bench chaos lint clean docs

install: $(STAMP) node-deps

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The Node client's packages (clients/node): only where npm exists and they are missing,
# so machines without Node still install, and a second run does nothing.
.PHONY: node-deps
node-deps:
	@if command -v npm >/dev/null 2>&1 && [ ! -d clients/node/node_modules ]; then \
		npm ci --prefix clients/node --no-audit --no-fund; \
	fi

proto: $(STAMP)
	rm -f flux/v1/*_pb2*.py flux/v1/*_pb2*.pyi flux/keda/*_pb2*.py flux/keda/*_pb2*.pyi
	$(PY) -m grpc_tools.protoc -I proto \
		--python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
		--plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc \
		$(PROTOS) $(KEDA_PROTOS)

# Lints the protos and refuses breaking changes against the released snapshot
# (tools/check_proto.sh, buf installed by npm on first use), then regenerates
# flux/v1 and fails when the checked-in code differs from it.
check-proto: proto
	tools/check_proto.sh proto
	@changes="$$(git status --porcelain -- flux/v1 flux/keda proto)"; \
	if [ -n "$$changes" ]; then \
		echo "flux/v1 differs from what 'make proto' produces (or is not committed):"; \
		echo "$$changes"; git --no-pager diff --stat -- flux/v1; exit 1; \
	fi

# Makes the current protos the released contract that check-proto compares
# against. Run it when cutting a release, never to quiet check-proto.
release-proto:
	tools/buf.sh lint proto
	tools/buf.sh build proto --exclude-source-info -o $(RELEASED)

# The suite on TEST_WORKERS processes (pytest-xdist). Integration tests mostly wait on servers,
# workers and sockets, so more processes than cores pay (issue 41: measured on 2 cores).
# --dist loadgroup hands out tests one by one, except that a module marked xdist_group (one whose
# module-scoped server is costly to start twice) runs whole on one process. The 20 slowest
# tests are listed at the end, so CI shows where the time goes.
TEST_WORKERS ?= 4
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=20

# The pure tests alone: nothing in tests/unit starts a server or a process, or listens on a
# socket (those tests are in tests/integration).
test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

# The main job on the embedded default: the control plane, state in SQLite under ./.flux/.
# Also installs the Node client's packages (where npm exists), so Getting started's next
# steps work; FLUX_ARGS passes flags, e.g. make run FLUX_ARGS="--grpc-port 0".
FLUX_ARGS ?=
run: $(STAMP) node-deps
	$(VENV)/bin/flux start server $(FLUX_ARGS)

# The matcher alone over a sample fleet built around this machine; no server needed.
demo: $(STAMP)
	$(PY) -m flux.cli.demo

bench: $(STAMP)
	$(PY) -m bench

# A seeded fault run against real processes (bench/chaos): CHAOS_SECONDS (default 600),
# CHAOS_SEED (default random, printed), CHAOS_STORE=sqlite|postgres|both. Exits 1 on a violation.
chaos: $(STAMP)
	$(PY) -m bench.chaos

# The documentation site (mkdocs.yml, docs/) into site/: --strict fails on a broken link or
# anchor, a page missing from the nav, or a warning. The CLI, HTTP and gRPC references are
# generated during the build (docs/hooks.py over tools/docs_reference.py); nothing generated is kept.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

lint: $(STAMP)
	$(PY) -m ruff check flux gateway tests bench examples
	$(PY) -m ruff format --check flux gateway tests bench examples

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
