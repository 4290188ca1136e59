# durafact: `make demo` and `make test` work from a fresh clone with only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
GOAL ?= Plan a weekend trip to Kraków

.PHONY: demo test docs up down bench lint format clean chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The `local` extra builds llama-cpp-python from source: about 10 minutes the first
# time on 2 cores; pip caches the wheel, so later installs take seconds.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[local]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,local]'
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/python starter.py plan "$(GOAL)"

# Two test processes (pytest-xdist), each with its own dev server and scripted model: the
# tests mostly wait on Temporal, so two of them fit 2 cores and halve the wall time.
test: $(VENV)/.installed-dev chromium frontends/node_modules/.package-lock.json
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 --durations=30

# The documentation site on http://127.0.0.1:8001 (8000 is the console's), rebuilt as
# docs/ changes. `make test` builds it in strict mode (tests/docs/test_site.py).
docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

# The console's browser tests drive the system Chromium (Playwright cannot download its
# own browser here). Installed when missing and root can apt-get it, as on these
# machines and in CI; elsewhere the browser tests fail with one line saying how.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  [ -n "$$DURAFACT_CHROMIUM" ] || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || true

# The protocols' own JavaScript clients (the AI SDK, AG-UI), which the front-end tests
# drive, from the committed lock file. Node.js 20 or later and npm are needed.
frontends/node_modules/.package-lock.json: frontends/package.json frontends/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "the front-end tests need Node.js 20+ and npm: apt-get install -y nodejs npm (or https://nodejs.org)"; exit 1; }
	npm ci --prefix frontends --silent --no-audit --no-fund
	touch $@

up: $(VENV)/.installed-demo
	$(BIN)/python starter.py up

down:
	$(BIN)/python starter.py down

bench: $(VENV)/.installed-dev chromium
	$(BIN)/python -m bench.plan_execute_bench
	$(BIN)/python -m bench.answer_flow_bench
	$(BIN)/python -m bench.reflection_bench
	$(BIN)/python -m bench.react_bench
	$(BIN)/python -m bench.prefix_bench
	$(BIN)/python -m bench.budget_bench
	$(BIN)/python -m bench.eval_bench
	$(BIN)/python -m bench.scale_out_bench
	$(BIN)/python -m bench.chat_bench
	$(BIN)/python -m bench.throughput_bench
	$(BIN)/python -m bench.console_bench
	$(BIN)/python -m bench.protocols_bench
	$(BIN)/python -m bench.cli_startup
	$(BIN)/python -m bench.check_bench

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info frontends/node_modules
