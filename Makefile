# Relay's front door. `make run` starts everything on embedded defaults; `make test`
# runs the suite against real PostgreSQL and Redis (started if they are down).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-half-speed bench caniemail install install-dev migrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt client/pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

migrate: install
	$(BIN)/python manage.py migrate --noinput

## Start web, worker, beat and SMTP on SQLite and the filesystem broker (var/).
run: install
	scripts/run.sh

## Set up and run the whole test suite: three xdist workers on two cores (tests/parallel.py).
PARALLEL := -n 3 --dist loadfile
test: install-dev
	scripts/test.sh $(PARALLEL)

## The suite with one core kept busy, as on a machine at about half speed.
test-half-speed: install-dev
	scripts/with-busy-core.sh scripts/test.sh $(PARALLEL)

## Run one benchmark: make bench NAME=expiry_burst ARGS="--mailboxes 20000" (see docs/benchmarks.md).
bench: install-dev
	scripts/bench.sh $(NAME) $(ARGS)

## Refresh the HTML check's caniemail data (checks/data/caniemail.json) from the npm registry.
caniemail: install
	scripts/caniemail-refresh.sh

clean:
	rm -rf var .pytest_cache
