# leapgen task runner. Two commands matter on a fresh machine:
#   make demo   install, then generate text with `ar` and `speculative` on the shipped default
#   make test   install, then run the whole test suite
PYTHON ?= python
PIP ?= $(PYTHON) -m pip
# torch first: on CPU-only machines `pip install torch==2.13.0` takes the CPU build; an unpinned
# torch pulled in by the dependency resolver would download the CUDA wheels instead.
TORCH_SPEC ?= torch==2.13.0
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install install-test demo test lint bench-text train-text-code docs-samplers clean

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e .

install-test:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test,bench]"

demo: install
	leapgen generate text "def parse_args(argv):" --sampler ar,speculative --max-new-tokens 96

test: install-test
	$(PYTHON) -m pytest -q

lint:
	ruff check leapgen tests

bench-text: install
	leapgen bench text --runs 5 --json docs/bench_text.json --markdown docs/bench_text.md

train-text-code: install
	leapgen train text-code --out assets/text-code

docs-samplers: install
	{ sed -n '1,/^| name/p' docs/samplers.md | sed '$$d'; leapgen samplers --markdown; } > docs/samplers.md.new && mv docs/samplers.md.new docs/samplers.md

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
