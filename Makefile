# Everyday commands. `make run` starts the whole system; `make test` runs the tests.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE ?= chatproject.settings.base
export DATABASE_URL ?= postgres://chat:chat@127.0.0.1:5432/chat
PORT ?= 8000

.PHONY: bootstrap lock services migrate run test test-fast lint typecheck prepare-model bench hosts-test

bootstrap:
	bash scripts/bootstrap.sh

# Rewrites requirements/lock/ from requirements/*.txt (needs PyPI); UPGRADE=1 or UPGRADE_PACKAGE="a b" to move pins.
lock:
	bash scripts/lock.sh

services:
	bash scripts/services.sh

migrate: bootstrap services
	$(PY) manage.py migrate --noinput -v0

prepare-model: bootstrap
	$(PY) manage.py prepare_model

run: migrate
	bash scripts/run.sh

test: bootstrap services
	bash scripts/test.sh $(ARGS)

# The everyday loop: every test that needs no real engine (marker `engine`) and no live stack (marker `live`).
test-fast: bootstrap services
	TEST_LANE=fast bash scripts/test.sh $(ARGS)

# The product across network namespaces (data, web, two worker hosts, two dispatcher hosts) with faults; root.
# ARGS="--quick" is CI's form (docs/hosts-test.md).
hosts-test: bootstrap
	bash scripts/hosts-test.sh $(ARGS)

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: bootstrap
	$(VENV)/bin/mypy .
