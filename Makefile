# Environment Studio: `make run` sets up and starts the studio with demo data; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# The suite runs on this many pytest-xdist workers (each with its own test database); 1 runs it serially.
TEST_WORKERS ?= 4

.PHONY: setup setup-test services run test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.lock
	touch $@

# The tests also need the test and interop extras (pytest, the ecosystem's real clients, torch/trl/datasets, ruff).
# Harbor's ATIF validator and task models need only pydantic and toml: harbor is installed without its
# runner's dependencies, and past its Python >= 3.12 marker (those modules run on 3.11; the tests prove it).
$(VENV)/.installed-test: requirements-test.lock requirements-harbor.lock $(VENV)/.installed
	$(BIN)/pip install --quiet -r requirements-test.lock
	$(BIN)/pip install --quiet --no-deps --ignore-requires-python --require-hashes -r requirements-harbor.lock
	touch $@

setup: $(VENV)/.installed
	@bash scripts/system_packages.sh
	@bash scripts/check_services.sh
	@bash scripts/sandbox_access.sh

# A development machine asks for DEBUG (the settings keep it off otherwise); set DEBUG=false to try production settings.
run bench: export DEBUG ?= true

run: setup
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo --live-run
	@bash scripts/run_studio.sh $(HOST) $(PORT)

setup-test: setup $(VENV)/.installed-test

test: setup-test
	@bash scripts/start_docker.sh || true
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

test-fast: setup-test
	$(BIN)/python -m pytest -m "not browser and not integration"

lint: setup-test
	$(BIN)/ruff check .

bench: setup-test
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) staticfiles
