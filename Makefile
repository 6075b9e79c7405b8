# Quick start: `make run`, then `make test`. Every target installs what it needs into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: on these machines 2.13.0 is a CPU wheel on disk; a bare `torch` pulls a CUDA build.
TORCH := torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install install-test chromium run test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e .

install-test: install
	$(BIN)/pip install --quiet -e '.[test]'

# Browser tests drive Debian's chromium; Playwright's own browser download is not reachable here.
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

run: install
	$(BIN)/python -m app

test: install-test chromium
	$(BIN)/ruff check app tests bench
	$(BIN)/python -m pytest

# The lab against a raw forward pass and bertviz, and the page in chromium; writes bench/results.{json,md}.
bench: install chromium
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) test-artifacts .pytest_cache
