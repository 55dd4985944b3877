# The two commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test test-slow lint bench clean

$(BIN)/singularity: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/singularity

run: setup
	$(BIN)/singularity demo

test: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -m "not slow" -q

test-slow: setup
	$(BIN)/pytest -m slow -q

bench: setup
	$(BIN)/python -m bench.persistence

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
