# ollama-py: `make run` to try it, `make test` to test it.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE ?= $(HOME)/.cache/ollama-py
MODELS_CACHE := $(CACHE)/models
SMOLLM2 := $(MODELS_CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA := $(MODELS_CACHE)/gemma-3-270m-q4_k_m.gguf
PROMPT ?= Why is the sky blue?
export OLLAMA_HOST ?= 127.0.0.1:11434

.PHONY: install prereqs test-prereqs runner runners models run lint test test-unit test-integration bench bench-peers clean help

help:
	@echo "make run    build what this host answers from, start the server in the background, ask SmolLM2 a question"
	@echo "make runners  every runner variant this host can build (make run builds only the one it uses)"
	@echo "make test   the whole test suite: lint, unit tests, then integration with the real llama-server and SmolLM2"
	@echo "make lint   ruff and mypy (seconds; the first step of make test)"
	@echo "make bench  benchmarks (results in bench/results/)"
	@echo "make clean  remove the venv and built runners (the cache in $(CACHE) stays)"

prereqs:
	@PYTHON=$(PYTHON) scripts/setup_system.sh build
	@scripts/check_prereqs.sh

# What the tests start besides our own code (Debian's docker-registry, htpasswd, chromium for
# the web console's browser tests): installed when this user may,
# else the exact command to run is printed and nothing runs.
test-prereqs:
	@PYTHON=$(PYTHON) scripts/setup_system.sh test

$(VENV)/.installed: pyproject.toml | prereqs
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@# setuptools warns on every editable install (a generic note about same-named folders): not for our users
	@PYTHONWARNINGS=ignore $(PY) -m pip install --quiet -e '.[test,lint]'
	@touch $@

# What llama.cpp's converter imports (torch, transformers, ...; pyproject's `convert` extra): only `create` from a
# safetensors directory needs it, so `make run` goes without; the tests convert a tiny model of their own.
$(VENV)/.installed-convert: pyproject.toml $(VENV)/.installed
	@PYTHONWARNINGS=ignore $(PY) -m pip install --quiet -e '.[convert]'
	@touch $@

# Every runner variant this host can build and run (cpu, cpu_avx2, vulkan, cuda, metal as the host allows).
runners: | prereqs
	@scripts/build_runners.sh

# Only the variant this host will answer from (cuda where an NVIDIA GPU is, metal on Apple Silicon, vulkan on a
# Vulkan GPU, else the best CPU build): what `make run` builds first; the others come with `make runners`.
runner: | prereqs
	@scripts/build_runners.sh --this-host

models:
	@PYTHON=$(PYTHON) scripts/fetch_models.sh

install: $(VENV)/.installed runners models

run: $(VENV)/.installed runner models
	@PY=$(PY) scripts/demo.sh "$(PROMPT)"

# The cheap checks first, so a style, type or unit failure shows in seconds, before the long runner build:
# lint -> unit tests (nothing built) -> runners, models and the system packages the rest start -> the rest.
test:
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory test-unit
	@$(MAKE) --no-print-directory test-integration

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m mypy

# What needs no runner, model or browser (the `unit` mark: tests/unit and tests/fakes less `integration`).
test-unit: $(VENV)/.installed $(VENV)/.installed-convert
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 -m unit $(PYTEST_ARGS)

test-integration: test-prereqs install $(VENV)/.installed-convert
	@PYTHON=$(PYTHON) scripts/fetch_models.sh --gemma
	@# Claude Code and Codex CLI from npm (pinned) for tests/integration/test_agents_cli.py; 2 = no npm: they skip
	@scripts/fetch_agents.sh || [ $$? -eq 2 ]
	@# the CUDA build on a machine with nvcc but no GPU: its backend object compiles (cached after the first time)
	@if command -v nvcc >/dev/null 2>&1; then scripts/build_runners.sh --check-cuda; fi
	OLLAMA_PY_TEST_RUNNER=$(CURDIR)/runners/cpu_avx2/llama-server \
	OLLAMA_PY_TEST_RUNNERS_DIR=$(CURDIR)/runners \
	OLLAMA_PY_TEST_QUANTIZE=$$(ls $(CURDIR)/runners/*/llama-quantize | head -1) \
	OLLAMA_PY_TEST_MODEL=$(SMOLLM2) OLLAMA_PY_TEST_GEMMA=$(GEMMA) \
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -m "not unit" $(PYTEST_ARGS)

bench: install
	$(PY) bench/overhead.py --runner runners/cpu_avx2/llama-server --model $(SMOLLM2)
	$(PY) bench/peers.py --runner runners/cpu_avx2/llama-server --model $(SMOLLM2)
	@# the gateway over the fake runner at a GPU's pace, and issue 38's targets for it, met or not: the processes
	@# where the kernel puts them, then serve on CPU of its own (as on a GPU's host; the fake and the client share
	@# the first CPU on both sides)
	$(PY) bench/gpu_speed_fake.py --rounds 40 --conc-rounds 8 --label make-bench
	$(PY) bench/gpu_speed_fake.py --rounds 40 --conc-rounds 8 --pin-serve --label make-bench-pin-serve
	@# the 16 clients wave by wave: where a side falls behind the runner reached directly
	$(PY) bench/waves.py --rounds 10

# ollama-py against llama-server's router mode and a plain llama-server, each at its defaults (issue 25)
bench-peers: install
	$(PY) bench/peers.py --runner runners/cpu_avx2/llama-server --model $(SMOLLM2) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) runners/cpu runners/cpu_avx2 runners/cuda runners/metal *.egg-info
