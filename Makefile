# vNext for Django — developer menu. `make help` lists the targets.
SHELL := /bin/bash

# Python: the newest of python3.13, python3.12, python3.11 that runs, or the one PYTHON names
# (`make install PYTHON=python3.12`, or a path). A name that is only a pyenv shim of a version
# installed but not selected (it is on PATH, yet fails) is taken from pyenv's own installs.
# resolve_python: the first of $(1) that runs as Python >= 3.11.
resolve_python = $(shell for name in $(1); do \
	  if $$name -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then \
	    echo "$$name"; exit 0; fi; \
	  ver=$$(echo "$$name" | sed -n 's/^python\(3\.[0-9][0-9]*\)$$/\1/p'); \
	  [ -n "$$ver" ] || continue; \
	  for found in $$(ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$$ver.*/bin/python$$ver 2>/dev/null \
	      | grep -E "/versions/$$ver\.[0-9]+/bin/" | sort -V -r); do \
	    if "$$found" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then \
	      echo "$$found"; exit 0; fi; \
	  done; \
	done)
PYTHON_CHOICES := python3.13 python3.12 python3.11
ifeq ($(origin PYTHON),undefined)
PYTHON := $(call resolve_python,$(PYTHON_CHOICES))
else
override PYTHON := $(or $(call resolve_python,$(PYTHON)),$(PYTHON))
endif
# Its version, empty when it does not run or is older than 3.11.
PYVER := $(shell $(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11); \
	print(".".join(map(str, sys.version_info[:3])))' 2>/dev/null)
# Which interpreter made a virtualenv: its version and base installation.
PY_IDENTITY := import sys; print(sys.version_info[:3], sys.base_prefix)

VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp names the interpreter's version: another Python means another stamp, and the
# install step rebuilds a virtualenv that another interpreter made.
STAMP := $(VENV)/.installed-py$(PYVER)
PORT ?= 8000
# The mock API the examples' HTTP tasks call (`Example:ApiBaseUrl`, default localhost:3001):
# `make run` allows it through the egress policy (set VNEXT_EGRESS_ALLOW_HOSTS to replace it).
EXAMPLES_MOCK ?= localhost:3001
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/vnext_test
# Test processes (pytest-xdist, a file at a time so a file's servers start once); 0: one process.
TEST_PROCESSES ?= 2
# The browser tests (tests/site/test_admin__browser_*.py) drive Debian's chromium through its
# chromedriver; Graphviz's dot, when installed, draws the admin's state diagrams (without it the
# built-in layout does, and the tests of the Graphviz path skip); `make browser` installs them with
# apt-get (as root, or through sudo).
CHROMEDRIVER := /usr/bin/chromedriver
DOT := /usr/bin/dot
BROWSER_PACKAGES := chromium chromium-driver graphviz
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.DEFAULT_GOAL := help
.PHONY: help install python browser run serve test lint format bench worker beat relay consume migrate clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml vnext_client/pyproject.toml
	@[ -n "$(PYVER)" ] || { echo "No Python >= 3.11 found ($(or $(PYTHON),$(PYTHON_CHOICES))):" \
	  "install python3.13, 3.12 or 3.11, or name one with PYTHON=/path/to/python3.x" >&2; exit 1; }
	@echo "==> Python $(PYVER): $(PYTHON)"
	@if [ -f $(VENV)/pyvenv.cfg ] && [ "$$($(PY) -c '$(PY_IDENTITY)' 2>/dev/null)" \
	    != "$$($(PYTHON) -c '$(PY_IDENTITY)')" ]; then \
	  echo "==> $(VENV) was made by another Python ($$($(PY) --version 2>&1 || echo broken)): rebuilding it"; \
	  rm -rf $(VENV); fi
	@echo "==> [1/3] virtualenv $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] upgrading pip"
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@echo "==> [3/3] vnext-django and its dev tools (about 85 packages; the first time takes a minute or two)"
	$(PY) -m pip install --disable-pip-version-check -e '.[dev]'
	@# The client library for integrators: its own package, tested against a live server.
	$(PY) -m pip install --disable-pip-version-check -e ./vnext_client
	@rm -f $(VENV)/.installed*
	@touch $(STAMP)
	@echo "==> $(VENV) ready (Python $(PYVER))"

install: $(STAMP) ## Create the virtualenv and install everything

python: ## Show the Python the virtualenv is made with (choose another with PYTHON=...)
	@if [ -n "$(PYVER)" ]; then echo "$(PYVER) $(PYTHON)"; \
	else echo "No Python >= 3.11 found ($(or $(PYTHON),$(PYTHON_CHOICES)))" >&2; exit 1; fi

browser: ## Install chromium, chromedriver (browser tests) and graphviz (optional: admin diagrams) with apt-get, once
	@[ -x $(CHROMEDRIVER) ] && [ -x $(DOT) ] || { \
	  echo "==> $(CHROMEDRIVER) or $(DOT) is missing: apt-get install $(BROWSER_PACKAGES)"; \
	  apt="$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get"; \
	  packages="-y --no-install-recommends $(BROWSER_PACKAGES)"; \
	  $$apt install $$packages \
	  || { echo "==> retrying after apt-get update"; $$apt update && $$apt install $$packages; } \
	  || { echo "Could not install $(BROWSER_PACKAGES): install them as root" >&2; exit 1; }; }

run: $(STAMP) ## Embedded server: SQLite, examples loaded, operator account, http://127.0.0.1:$(PORT)
	PORT=$(PORT) VNEXT_EGRESS_ALLOW_HOSTS=$${VNEXT_EGRESS_ALLOW_HOSTS-$(EXAMPLES_MOCK)} \
	  $(PY) manage.py vnext_run

serve: $(STAMP) ## Production server, same topology as run: serve only (run `make migrate` first)
	PORT=$(PORT) HOST=$${HOST:-0.0.0.0} $(PY) manage.py vnext_run --serve-only

test: $(STAMP) browser lint ## Lint, then the whole suite against PostgreSQL (and a browser)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile $(PYTEST_ARGS) || { \
	  code=$$?; [ $$code -ne 5 ] || echo "pytest ran no test (exit 5): check PYTEST_ARGS" >&2; \
	  exit $$code; }

lint: $(STAMP) ## ruff (lint + format check), mypy and the import contracts (.importlinter)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports --no-cache

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP) ## Benchmarks (not tests): figures beside a same-run baseline
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) -m bench

worker: $(STAMP) ## A Celery worker (production: needs CELERY_BROKER_URL)
	$(VENV)/bin/celery -A vnext worker --loglevel=INFO

beat: $(STAMP) ## Celery beat with the django-celery-beat database scheduler
	$(VENV)/bin/celery -A vnext beat --loglevel=INFO --scheduler django_celery_beat.schedulers:DatabaseScheduler

relay: $(STAMP) ## The outbox relay: instance events to RabbitMQ / Redis Streams (VNEXT_OUTBOX_TARGETS)
	$(PY) manage.py outbox_relay

consume: $(STAMP) ## Consume broker events into instances (VNEXT_EVENT_ROUTES; README "Events from a broker")
	$(PY) manage.py events_consume $(CONSUME_ARGS)

migrate: $(STAMP) ## Apply database migrations
	$(PY) manage.py migrate

clean: ## Remove the virtualenv and local state
	rm -rf $(VENV) var build *.egg-info
