# vNext for Django — developer menu. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/vnext_test

.DEFAULT_GOAL := help
.PHONY: help install run test lint format bench worker beat migrate clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create the virtualenv and install everything

run: $(STAMP) ## Embedded server: SQLite, examples loaded, operator account, http://127.0.0.1:$(PORT)
	PORT=$(PORT) $(PY) manage.py vnext_run

test: $(STAMP) lint ## Lint, then the whole suite against PostgreSQL
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint + format check) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP) ## Benchmarks (not tests): figures beside a same-run baseline
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} $(PY) -m bench

worker: $(STAMP) ## A Celery worker (production: needs CELERY_BROKER_URL)
	$(VENV)/bin/celery -A vnext worker --loglevel=INFO

beat: $(STAMP) ## Celery beat with the django-celery-beat database scheduler
	$(VENV)/bin/celery -A vnext beat --loglevel=INFO --scheduler django_celery_beat.schedulers:DatabaseScheduler

migrate: $(STAMP) ## Apply database migrations
	$(PY) manage.py migrate

clean: ## Remove the virtualenv and local state
	rm -rf $(VENV) var build *.egg-info
