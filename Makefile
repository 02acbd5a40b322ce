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

.PHONY: system-deps install install-test demo test lint bench-text bench-acceptance bench-image bench-molecule bench-plot bench-gpu docs-benchmarks train-text-code train-image-emoji train-molecule-safe docs-samplers clean

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e .

install-test: system-deps
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test,bench,image,molecule]"
	$(PIP) install -q --no-deps "molsets==0.3.1"

# The emoji font the image recipe renders (Debian fonts-noto-color-emoji); installed only when missing.
system-deps:
	@test -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf || { \
	  echo "installing fonts-noto-color-emoji (apt-get)"; \
	  (apt-get update -qq && apt-get install -y -qq fonts-noto-color-emoji) >/dev/null || \
	  { echo "could not install fonts-noto-color-emoji; install it with your package manager" >&2; exit 1; }; }

demo: install
	leapgen generate text "def parse_args(argv):" --sampler ar,speculative --max-new-tokens 96 --echo

test: install-test
	$(PYTHON) -m pytest -q

lint:
	ruff check leapgen tests
	lint-imports --no-cache

# batch 1 and batch 8 (8 prompts as one batch) tables with transformers' generate() peers, efficiency,
# draft cost per accepted token, the draft-length schedules compared, and speedup vs batch size (1-8)
bench-text: install
	leapgen bench text --runs 5 --prompts 8 --batch-size 8 --no-sweep --compare-schedules \
		--sweep-batch-sizes 1,2,4,8 --json docs/bench_text.json --markdown docs/bench_text.md
	leapgen bench text --runs 5 --prompts 8 --batch-size 8 --no-sweep --no-peers --no-draft-cost \
		--samplers ar,speculative,sjd,gsd,lantern \
		--json docs/bench_text_image_samplers.json --markdown docs/bench_text_image_samplers.md

bench-acceptance: install
	$(PYTHON) -m leapgen.bench.acceptance --pipeline leapgen/text-code --n-prompts 32 --max-new-tokens 64 \
		--batch-size 8 --out-md docs/bench_acceptance.md --out-png docs/acceptance_vs_budget.png \
		--out-json docs/bench_acceptance.json

bench-image: install-test
	leapgen bench image --runs 3 --samples 16 --batch-size 8 --exclude prompt_lookup,spec_tree --compare-schedules \
		--sweep-batch-sizes 1,2,4,8 --json docs/bench_image.json --markdown docs/bench_image.md --png-dir docs
	leapgen bench image --runs 3 --samples 4 --batch-size 1 --samplers speculative,sjd,gsd,lantern \
		--json docs/bench_image_batch1.json --markdown docs/bench_image_batch1.md

# the figure of docs/benchmarks.md: wall speedup against ar vs batch size, text and image panels,
# redrawn from the JSON that bench-text and bench-image wrote
bench-plot:
	$(PYTHON) -m leapgen.bench.batch_sweep --text docs/bench_text.json --image docs/bench_image.json \
		--out docs/speedup_vs_batch.png

# on a machine with an NVIDIA GPU: the same tables at batch 1 and 16 in bfloat16 (device name in each header)
bench-gpu: install-test
	leapgen bench text --device cuda --dtype bfloat16 --runs 5 --prompts 16 --batch-size 16 --no-sweep \
		--compare-schedules --sweep-batch-sizes 1,2,4,8,16 --json docs/bench_text_gpu.json --markdown docs/bench_text_gpu.md
	leapgen bench image --device cuda --dtype bfloat16 --runs 3 --samples 32 --batch-size 16 \
		--exclude prompt_lookup,spec_tree --sweep-batch-sizes 1,2,4,8,16 \
		--json docs/bench_image_gpu.json --markdown docs/bench_image_gpu.md
	leapgen bench image --device cuda --dtype bfloat16 --runs 3 --samples 4 --batch-size 1 \
		--samplers speculative,sjd,gsd,lantern --json docs/bench_image_gpu_batch1.json \
		--markdown docs/bench_image_gpu_batch1.md

bench-molecule: install-test
	leapgen bench molecule --num-samples 1000 --runs 1 --batch-size 64 --multi-steps 16 --maskgit-steps 12 \
		--sweep-batch-sizes 1,8 --sweep-samples 16 --json docs/bench_molecule.json \
		--markdown docs/bench_molecule.md --png docs/molecule_samples.png

docs-benchmarks:
	{ cat docs/benchmarks_intro.md; \
	  echo '## Speedup against ar vs batch size: `make bench-plot`'; echo; \
	  echo '![wall speedup against ar vs batch size, text and image](speedup_vs_batch.png)'; echo; \
	  echo '## Text samplers: `make bench-text`'; echo; sed '1d' docs/bench_text.md; echo; \
	  echo '### The image samplers on the text model (greedy)'; echo; \
	  sed '1,2d; s/^### /#### /' docs/bench_text_image_samplers.md; echo; \
	  echo '## Accepted length vs draft budget: `make bench-acceptance`'; echo; \
	  echo '![accepted tokens per target forward vs draft budget](acceptance_vs_budget.png)'; echo; \
	  sed '1d; s/^## /### /' docs/bench_acceptance.md; echo; \
	  echo '## Image samplers: `make bench-image`'; echo; sed '1d; s/^## /### /' docs/bench_image.md; echo; \
	  echo '![samples beside their acceptance maps](image_acceptance_maps.png)'; echo; \
	  echo '### Batch size 1 (speed only)'; echo; sed '1d; s/^## /#### /' docs/bench_image_batch1.md; echo; \
	  if [ -f docs/bench_text_gpu.md ]; then echo '## GPU: `make bench-gpu`'; echo; \
	    echo '### Text'; echo; sed '1d; s/^### /#### /' docs/bench_text_gpu.md; echo; \
	    echo '### Image, batch 16'; echo; sed '1d; s/^## /#### /' docs/bench_image_gpu.md; echo; \
	    echo '### Image, batch 1'; echo; sed '1d; s/^## /#### /' docs/bench_image_gpu_batch1.md; echo; fi; \
	  echo '## Molecules, masked vs autoregressive: `make bench-molecule`'; echo; \
	  sed '1d; s/^## /### /' docs/bench_molecule.md; echo; \
	  echo '![de novo samples](molecule_samples.png)'; } > docs/benchmarks.md

train-text-code: install
	leapgen train text-code --out assets/text-code

train-image-emoji: install-test
	leapgen train image-emoji --out assets/image-emoji

train-molecule-safe: install-test
	leapgen train molecule-safe --out assets/molecule-safe

docs-samplers: install
	{ sed -n '1,/^| name/p' docs/samplers.md | sed '$$d'; leapgen samplers --markdown; } > docs/samplers.md.new && mv docs/samplers.md.new docs/samplers.md

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
