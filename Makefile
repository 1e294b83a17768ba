# Shuttle: `make run` starts the whole system on embedded defaults; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard proto/shuttle/v1/*.proto)
STUBS  := shuttle/v1/__init__.py

.PHONY: install proto run test test-unit test-integration test-real-model chaos lint fmt bench bench-events migrate purge clean

install: $(STAMP) $(STUBS)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Shuttle needs Python 3.11 or newer as '$(PYTHON)' (set PYTHON=...)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || \
		{ echo "could not create $(VENV): install the venv module (Debian: apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Generated stubs are build output (see .gitignore): never edit them by hand.
proto: $(STAMP)
	@rm -rf shuttle/v1
	$(PY) -m grpc_tools.protoc -I proto \
		--plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc \
		--python_out=. --grpc_python_out=. --mypy_out=quiet:. --mypy_grpc_out=quiet:. \
		$(PROTOS)
	@touch $(STUBS)

$(STUBS): $(PROTOS) | $(STAMP)
	@$(MAKE) --no-print-directory proto

# REPLICAS=3 or REPLICAS=executor=3,gateway=2: several processes per service (needs
# SHUTTLE_DATABASE_URL on PostgreSQL and SHUTTLE_REDIS_URL).
run: install
	$(PY) -m cli up $(if $(REPLICAS),--replicas '$(REPLICAS)')

test: install
	$(PY) -m pytest -q

test-unit: install
	$(PY) -m pytest -q -m "not integration"

test-integration: install
	$(PY) -m pytest -q -m integration

# Gemma 3 270M behind llama.cpp's server, through the whole system (docs/real-models.md):
# every run must end cleanly within its bounds. llama.cpp is compiled on install (a few
# minutes); for a CPU-generic build, since a native one may use instructions (AMX) that a
# virtual machine's kernel does not grant.
REAL_MODEL_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

test-real-model: install
	CMAKE_ARGS='$(REAL_MODEL_CMAKE_ARGS)' $(PY) -m pip install --quiet -e '.[dev,real-model]'
	rm -rf var/real-model
	$(PY) -m pytest -q --real-model -m real_model tests/real_model; status=$$?; \
		$(PY) -m tests.real_model.report --write; exit $$status

# The fault matrix at full size (more runs, 100 reconnecting SSE clients, every kill point of
# the takeover matrix on both stacks, 20 runs through a rolling restart); `make test` runs a
# reduced form. Each fault test records its row under var/chaos/, rendered into
# docs/reliability.md.
chaos: install
	rm -rf var/chaos
	CHAOS_SCALE=full $(PY) -m pytest -q -m chaos tests/chaos
	$(PY) -m tests.chaos.report --write

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy shuttle services gateway cli tests bench

# The benchmark suite beside its peers (about 10 minutes on 2 cores): saves figures under var/bench/
# and rewrites docs/benchmarks.md with its charts in docs/img/. BENCH_ARGS=--quick for a
# development run; `python -m bench.report` re-renders from the saved figures.
EVENT_BENCHMARKS := events_append events_latency-sqlite events_latency-pg \
	events_latency-sequential sse_fanout sse_idle

bench: install
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m bench $(BENCH_ARGS)

# Only the event log's figures: append throughput, subscriber latency, SSE fan-out, idle SSE.
bench-events: install
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m bench --only $(EVENT_BENCHMARKS) $(BENCH_ARGS)

# The events service's schema (also migrated at its start-up) and its retention purge,
# with the same SHUTTLE_* settings as the service.
migrate: install
	$(PY) -m services.events.admin migrate

purge: install
	$(PY) -m services.events.admin purge

fmt: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf shuttle/v1 var .pytest_cache .mypy_cache .ruff_cache
