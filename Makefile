# Quick start: `make run`, then `make test`. Every target installs what it needs into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: on these machines 2.13.0 is a CPU wheel on disk; a bare `torch` pulls a CUDA build.
TORCH := torch==2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install install-test chromium redis-server nginx run test exact bench load class-load clean

# The venv's own file, written when it is made: a new venv is newer than the stamps below.
$(VENV)/pyvenv.cfg:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# pip runs only when pyproject.toml or the venv is newer than its stamp, so a restart is the lab's own
# start-up (pip checking an installed checkout took 16 s here); the stamps live in the venv and go with it.
INSTALLED := $(VENV)/.installed
TEST_INSTALLED := $(VENV)/.installed-test

$(INSTALLED): pyproject.toml $(VENV)/pyvenv.cfg
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e .
	touch $@

$(TEST_INSTALLED): $(INSTALLED)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(INSTALLED)

install-test: $(TEST_INSTALLED)

# Browser tests drive Debian's chromium; Playwright's own browser download is not reachable here.
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

# The run store's tests start Debian's redis-server on a free loopback port (and stop it after).
redis-server:
	@test -x /usr/bin/redis-server || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server; }

# The deployment's test (tests/test_deploy.py) runs Debian's nginx with deploy/nginx.conf in the foreground.
nginx:
	@test -x /usr/sbin/nginx || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nginx; }

run: install
	$(BIN)/python -m app

test: install-test chromium redis-server nginx
	$(BIN)/ruff check app attention_lab tests bench
	$(BIN)/python -m pytest

# Every test that compares two computations bit for bit "for the same shapes" (tests/test_exactness.py), under
# MKL's compatible kernels, whose sums change order with a product's shape as an Intel Xeon's do; `make test`
# runs a few of them so.
exact: install-test
	MKL_CBWR=COMPATIBLE $(BIN)/python -m pytest $$($(BIN)/python -c \
		"from tests.test_exactness import same_shape_tests; print(*same_shape_tests())")

# The lab against a raw forward pass and bertviz, the page in chromium, writing against model.generate
# (printed), what the speed targets leave for the lab's own work, and Lighthouse on the default page (the npm
# package, kept in bench/.lighthouse); writes bench/results.{json,md} and bench/floor.{json,md}.
LIGHTHOUSE := bench/.lighthouse/node_modules/.bin/lighthouse
$(LIGHTHOUSE):
	@command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nodejs npm; }
	npm install --prefix bench/.lighthouse --no-audit --no-fund --silent lighthouse@12

bench: install chromium $(LIGHTHOUSE)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/bench.py
	$(BIN)/python bench/writing.py
	$(BIN)/python bench/floor.py
	$(BIN)/python bench/lighthouse.py

# The long classroom load test (50 learners for 60 s), then a class beside hostile devices for 60 s (streams,
# slowloris, Integrated Gradients at its bound, 40 ALTI requests at once: tests/load/floods.py), against a
# lab started here on port 8765; then two whole indexes of the largest pasted corpus from one address against a
# lab of a 512 MiB store on port 8767, its peak RSS under the store + 1.5 GiB (tests/load/two_indexes.py).
LOAD_PORT := 8765
SMALL_STORE_PORT := 8767
SMALL_STORE := 536870912
load: install-test
	@$(BIN)/python -m app --port $(LOAD_PORT) > /dev/null 2>&1 & lab=$$!; \
	until curl -sf http://127.0.0.1:$(LOAD_PORT)/api/health > /dev/null; do sleep 0.5; done; \
	$(BIN)/python -m tests.load.learners --url http://127.0.0.1:$(LOAD_PORT) --learners 50 --seconds 60 --server-pid $$lab; \
	status=$$?; \
	$(BIN)/python -m tests.load.floods --url http://127.0.0.1:$(LOAD_PORT) --seconds 60 --server-pid $$lab; \
	status=$$((status || $$?)); kill $$lab; \
	ATTENTION_LAB_MAX_STORE_BYTES=$(SMALL_STORE) $(BIN)/python -m app --port $(SMALL_STORE_PORT) > /dev/null 2>&1 & lab=$$!; \
	until curl -sf http://127.0.0.1:$(SMALL_STORE_PORT)/api/health > /dev/null; do sleep 0.5; done; \
	$(BIN)/python -m tests.load.two_indexes --url http://127.0.0.1:$(SMALL_STORE_PORT) --server-pid $$lab --store-bytes $(SMALL_STORE); \
	status=$$((status || $$?)); kill $$lab; exit $$status

# The long live-class load test (one teacher, 200 learners on event streams, 60 s) against a lab on port 8766.
CLASS_LOAD_PORT := 8766
class-load: install-test
	@$(BIN)/python -m app --port $(CLASS_LOAD_PORT) > /dev/null 2>&1 & lab=$$!; \
	until curl -sf http://127.0.0.1:$(CLASS_LOAD_PORT)/api/health > /dev/null; do sleep 0.5; done; \
	$(BIN)/python -m tests.load.class_learners --url http://127.0.0.1:$(CLASS_LOAD_PORT) --learners 200 --seconds 60 --server-pid $$lab; \
	status=$$?; kill $$lab; exit $$status

clean:
	rm -rf $(VENV) test-artifacts .pytest_cache
