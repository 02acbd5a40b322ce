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
# the browser tests drive Debian's chromium (APT_PACKAGES); playwright never downloads a browser of its own
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD ?= 1

.PHONY: data-audio-music data-tts-en train-audio-codec train-audio-codec-decoder train-audio-codec-decoder-more train-audio-music bench-audio test-audio data-speech-en data-speech-en-2k data-speech-de train-asr-de train-asr-en train-asr-en-2k train-asr-en-2k-more bench-asr test-asr system-deps install install-test demo test lint bench-text bench-acceptance bench-image bench-molecule bench-plot bench-gpu docs-benchmarks train-text-code train-image-emoji train-molecule-safe docs-samplers train-image-families bench-image-families clean train-image-mar train-image-dd bench-image-continuous test-image-continuous

install:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e .

install-test: system-deps
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test,bench,image,molecule,audio,demo]"
	$(PIP) install -q --no-deps "molsets==0.3.1"

# Debian packages the recipes, corpora and tests use, installed only when one is missing:
# the emoji font (image), espeak-ng and sox (speech), fluidsynth and the General MIDI soundfont (music),
# g++ and ninja (the CPU small-M GEMM of leapgen/kernels/cpu_gemm.py is built on first use).
APT_PACKAGES = fonts-noto-color-emoji espeak-ng sox fluidsynth fluid-soundfont-gm chromium g++ ninja-build
system-deps:
	@missing=""; \
	  test -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf || missing="$$missing fonts-noto-color-emoji"; \
	  command -v espeak-ng >/dev/null || missing="$$missing espeak-ng"; \
	  command -v sox >/dev/null || missing="$$missing sox"; \
	  command -v fluidsynth >/dev/null || missing="$$missing fluidsynth"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v g++ >/dev/null || missing="$$missing g++"; \
	  command -v ninja >/dev/null || missing="$$missing ninja-build"; \
	  test -f /usr/share/sounds/sf2/FluidR3_GM.sf2 || missing="$$missing fluid-soundfont-gm"; \
	  if [ -n "$$missing" ]; then echo "installing$$missing (apt-get)"; \
	    (apt-get update -qq && apt-get install -y -qq $$missing) >/dev/null || \
	    { echo "could not install$$missing; install them with your package manager" >&2; exit 1; }; fi

demo: install
	leapgen generate text "def parse_args(argv):" --sampler ar,speculative --max-new-tokens 96 --echo

# the suite runs on every core (pytest-xdist; each worker one torch thread, work stealing balances
# the long tests); TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= auto
test: install-test
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

lint:
	ruff check leapgen tests
	lint-imports --no-cache

# batch 1 and batch 8 (8 prompts as one batch) tables with transformers' generate() peers, efficiency,
# draft cost per accepted token, the draft-length schedules compared, and speedup vs batch size (1-8)
bench-text: install
	leapgen bench text --runs 3 --prompts 8 --batch-size 8 --no-sweep --compare-schedules \
		--sweep-batch-sizes 1,2,4,8 --json docs/bench_text.json --markdown docs/bench_text.md
	leapgen bench text --runs 3 --prompts 8 --batch-size 8 --no-sweep --no-peers --no-draft-cost \
		--samplers ar,speculative,sjd,gsd,lantern \
		--json docs/bench_text_image_samplers.json --markdown docs/bench_text_image_samplers.md

bench-acceptance: install
	$(PYTHON) -m leapgen.bench.acceptance --pipeline leapgen/text-code --n-prompts 32 --max-new-tokens 64 \
		--batch-size 8 --out-md docs/bench_acceptance.md --out-png docs/acceptance_vs_budget.png \
		--out-json docs/bench_acceptance.json

bench-image: install-test
	leapgen bench image --runs 3 --samples 16 --batch-size 8 --exclude prompt_lookup,spec_tree --compare-schedules \
		--sweep-batch-sizes 1,2,4,8 --json docs/bench_image.json --markdown docs/bench_image.md --png-dir docs
	leapgen bench image --runs 3 --samples 4 --batch-size 1 --samplers 'speculative,sjd,gsd,lantern,sjd[window=6],gsd[window=6]' \
		--json docs/bench_image_batch1.json --markdown docs/bench_image_batch1.md

# the figure of docs/benchmarks.md: wall speedup against ar vs batch size, text and image panels,
# redrawn from the JSON that bench-text and bench-image wrote
bench-plot:
	$(PYTHON) -m leapgen.bench.batch_sweep --text docs/bench_text.json --image docs/bench_image.json \
		--out docs/speedup_vs_batch.png

# on a machine with an NVIDIA GPU: the same tables at batch 1 and 16 in bfloat16 (device name in each header)
bench-gpu: install-test
	leapgen bench kernels --device cuda --runs 20 --json docs/bench_kernels_gpu.json --markdown docs/bench_kernels_gpu.md
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

# family benchmark pages included in docs/benchmarks.md when present: file stem:title (~ = space)
FAMILY_BENCHES = image_families:Image~families~that~decode~many~tokens~per~step \
	image_continuous:Continuous-token~images,~MAR,~CSpD,~Distilled~Decoding audio:Audio,~MAGNeT~vs~autoregressive \
	asr:Speech~recognition,~Paraformer,~CTC,~AR dllm:Diffusion~language~models parallel:Parallel~decoding~failure~suite \
	text_lossy:Trained~and~lossy~text~methods ocr:Scene~text,~CPPD peptide:Peptide~sequencing \
	speech:Zero-shot~TTS,~MaskGCT~vs~AR s2st:Speech-to-speech~translation,~DASpeech~vs~AR scaleout:Scale-out~on~Ray
docs-benchmarks:
	{ cat docs/benchmarks_intro.md; \
	  if [ -f docs/speedup_vs_batch.png ]; then echo '## Speedup against ar vs batch size: `make bench-plot`'; echo; \
	    echo '![wall speedup against ar vs batch size, text and image](speedup_vs_batch.png)'; echo; fi; \
	  echo '## Text samplers: `make bench-text`'; echo; sed '1d' docs/bench_text.md; echo; \
	  echo '### The image samplers on the text model (greedy)'; echo; \
	  sed '1,2d; s/^### /#### /' docs/bench_text_image_samplers.md; echo; \
	  echo '## Accepted length vs draft budget: `make bench-acceptance`'; echo; \
	  echo '![accepted tokens per target forward vs draft budget](acceptance_vs_budget.png)'; echo; \
	  sed '1d; s/^## /### /' docs/bench_acceptance.md; echo; \
	  echo '## Image samplers: `make bench-image`'; echo; sed '1d; s/^## /### /' docs/bench_image.md; echo; \
	  echo '![samples beside their acceptance maps](image_acceptance_maps.png)'; echo; \
	  echo '### Batch size 1 (speed only)'; echo; sed '1d; s/^## /#### /' docs/bench_image_batch1.md; echo; \
	  if [ -f docs/bench_kernels_gpu.md ]; then echo '## Kernels on a GPU: `make bench-gpu`'; echo; \
	    sed '1,2d' docs/bench_kernels_gpu.md; echo; fi; \
	  if [ -f docs/bench_text_gpu.md ]; then echo '## GPU: `make bench-gpu`'; echo; \
	    echo '### Text'; echo; sed '1d; s/^### /#### /' docs/bench_text_gpu.md; echo; \
	    echo '### Image, batch 16'; echo; sed '1d; s/^## /#### /' docs/bench_image_gpu.md; echo; \
	    echo '### Image, batch 1'; echo; sed '1d; s/^## /#### /' docs/bench_image_gpu_batch1.md; echo; fi; \
	  echo '## Molecules, masked vs autoregressive: `make bench-molecule`'; echo; \
	  sed '1d; s/^## /### /' docs/bench_molecule.md; echo; \
	  echo '![de novo samples](molecule_samples.png)'; echo; \
	  for pair in $(FAMILY_BENCHES); do f=$${pair%%:*}; t=$${pair#*:}; \
	    if [ -f docs/bench_$$f.md ]; then echo "## $$t: \`make bench-$$(echo $$f | tr _ -)\`" | tr '~' ' '; echo; \
	      sed '1{/^#/d}; s/^## /### /' docs/bench_$$f.md; echo; fi; done; } > docs/benchmarks.md

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

# speech-en over 1,000 words (the first three runs of the shipped asr-en) and over 2,000 words with
# 10 % of the training utterances gapped word by word (its fourth run, and the bench: the same
# held-out sentences as the 1,000-word corpus)
SPEECH_CORPUS_2K ?= $(HOME)/.cache/leapgen/speech-en-2k
data-speech-en: install-test
	leapgen data speech-en --hours 20 --vocab-words 1000

data-speech-en-2k: install-test
	leapgen data speech-en --out $(SPEECH_CORPUS_2K) --hours 20 --vocab-words 2000 --gapped 0.1

train-asr-en: install-test
	leapgen train asr-en --out assets/asr-en

# the shipped asset's fourth run: continue it on the 2,000-word corpus (docs/asr.md lists every run)
train-asr-en-2k: data-speech-en-2k
	leapgen train asr-en --out assets/asr-en --corpus $(SPEECH_CORPUS_2K) --init-from assets/asr-en \
		--minutes 62 --lr 0.001 --warmup 100 --ar-token-dropout 0.3 --spec-augment-masks 2 --threads 1

# its later runs (8-12 in docs/asr.md): one more budget each at half the learning rate, from the asset;
# runs 8-10 used the default hour, run 11 ASR_MORE_MINUTES=58, run 12 ASR_MORE_MINUTES=108
ASR_MORE_MINUTES ?= 60
train-asr-en-2k-more: data-speech-en-2k
	leapgen train asr-en --out assets/asr-en --corpus $(SPEECH_CORPUS_2K) --init-from assets/asr-en \
		--minutes $(ASR_MORE_MINUTES) --lr 0.0005 --warmup 50 --ar-token-dropout 0.3 --spec-augment-masks 2 --threads 1

# the German ASR that judges S2ST output (ASR-BLEU of `leapgen bench s2st`): the s2st grammar's German
# sentences minus the S2ST test sentences, 7,000 utterances (about 4 min at one worker), then asr-en's
# recipe on it from assets/asr-en (about 40 min on one thread)
data-speech-de: install-test
	leapgen data speech-de

train-asr-de: data-speech-de
	leapgen train asr-de --out assets/asr-de --threads 1

bench-asr: data-speech-en-2k
	leapgen bench asr --out docs --corpus $(SPEECH_CORPUS_2K)

test-asr:
	OMP_NUM_THREADS=1 python -m pytest -q tests/test_asr_cif.py tests/test_asr_frontend.py tests/test_asr_models.py tests/test_asr_pipeline.py tests/test_asr_bleu.py

# image families that decode many tokens per step (issue #13); the budgets of the shipped runs
# (docs/image_families.md; VAR and NFIG ran side by side, one thread each)
train-image-families: install-test
	leapgen train image-nar --out assets/image-emoji-nar --minutes 20 --threads 1
	leapgen train image-var --out assets/image-emoji-var --minutes 70 --batch-size 8 --threads 1
	leapgen train image-nfig --out assets/image-emoji-nfig --minutes 70 --batch-size 8 --threads 1
	leapgen train image-ctf --out assets/image-emoji-ctf --coarse-minutes 13 --fine-minutes 6 --threads 1

bench-image-families: install-test
	leapgen bench image-families --samples 64 --batch 8 --batch1-calls 2 --out docs

# audio family (issue #12): corpus -> codec -> music models; docs/audio.md gives the reduced budget of the shipped run
data-audio-music: install-test
	leapgen data audio-music --hours 5

# espeak-ng speech for the codec and the TTS recipe (40 seen voices x 100 sentences, 8 unseen voices)
TTS_CORPUS ?= $(HOME)/.cache/leapgen/tts-en-100
data-tts-en: install-test
	leapgen data tts-en --out $(TTS_CORPUS) --per-speaker 100

train-audio-codec: data-audio-music data-tts-en
	leapgen train audio-codec --out /tmp/audio-codec --speech-corpus $(TTS_CORPUS) --speech-fraction 0.4

train-audio-music: train-audio-codec
	leapgen train audio-music --out assets/audio-music --codec-dir /tmp/audio-codec
	$(MAKE) train-audio-codec-decoder

# the shipped codec's decoder fine-tuned on music alone (encoder and codebooks frozen: the same codes, so the
# music models stay valid); 70 min on one thread
train-audio-codec-decoder: data-audio-music
	leapgen train audio-codec --out /tmp/audio-codec-decoder --decoder-from assets/audio-music/codec --minutes 70 \
		--lr 1e-3 --num-threads 1
	cp /tmp/audio-codec-decoder/model.safetensors /tmp/audio-codec-decoder/train_metrics.json assets/audio-music/codec/
	$(MAKE) train-audio-codec-decoder-more

# the decoder fine-tuning continued from the result of the one above at half its peak learning rate (75 min on one
# thread; the shipped codec since 2026-11-29 10:40)
train-audio-codec-decoder-more: data-audio-music
	leapgen train audio-codec --out /tmp/audio-codec-decoder2 --decoder-from assets/audio-music/codec --minutes 75 \
		--lr 5e-4 --num-threads 1
	cp /tmp/audio-codec-decoder2/model.safetensors /tmp/audio-codec-decoder2/train_metrics.json assets/audio-music/codec/

bench-audio: install-test
	leapgen bench audio --out docs

test-audio:
	OMP_NUM_THREADS=1 python -m pytest -q tests/test_audio_models.py tests/test_audio_pipeline.py

# continuous-token images (issue #14): KL-VAE + MAR/CSpD, Distilled Decoding
train-image-mar: install-test
	leapgen train image-mar --out assets/image-emoji-mar

train-image-dd: install-test
	leapgen train image-dd --out assets/image-emoji-dd

bench-image-continuous: install-test
	leapgen bench image-continuous --samples 8 --runs 2 --out docs

test-image-continuous:
	OMP_NUM_THREADS=1 python -m pytest -q tests/test_image_continuous.py

# masked diffusion LMs, ParallelBench-style suite, GenMol strict validity (issue #17)
.PHONY: train-text-code-diffusion train-text-code-diffusion-adapted train-parallel-tasks bench-dllm bench-parallel bench-genmol-fix test-dllm
train-text-code-diffusion: install
	leapgen train text-code-diffusion --out assets/text-code-diffusion

train-text-code-diffusion-adapted: install
	leapgen train text-code-diffusion-adapted --out assets/text-code-diffusion-adapted

train-parallel-tasks: install
	leapgen train parallel-tasks --out assets/parallel-tasks

bench-dllm: install
	leapgen bench dllm --json docs/bench_dllm.json --markdown docs/bench_dllm.md

bench-parallel: install
	leapgen bench parallel --json docs/bench_parallel.json --markdown docs/bench_parallel.md --png docs/parallel_quality_vs_tokens_per_step.png

bench-genmol-fix: install-test
	leapgen bench genmol-fix --num-samples 256

test-dllm:
	OMP_NUM_THREADS=1 python -m pytest -q tests/test_dllm_samplers.py tests/test_dllm_pipeline.py

# text: trained and lossy methods (#19): bild, chimera, judge, first, gear, superposed, cntp
.PHONY: train-text-code-heads bench-text-lossy test-text-lossy
train-text-code-heads: install
	leapgen train text-code-heads --out assets/text-code/heads

bench-text-lossy: install
	leapgen bench text-lossy --out docs

test-text-lossy:
	OMP_NUM_THREADS=1 python -m pytest -q tests/test_text_lossy.py tests/test_registry_guarantees.py -k "not cuda and (text_lossy or chimera or judge or first or superposed or bild or gear or cntp or text-heads)"

# recognition beyond speech (#20): CPPD scene text, peptide sequencing
.PHONY: data-ocr-en train-ocr-en data-peptide train-peptide bench-ocr bench-peptide test-recognition
data-ocr-en: install
	leapgen data ocr-en

train-ocr-en: install
	leapgen train ocr-en --out assets/ocr-en

data-peptide: install
	leapgen data peptide

train-peptide: install
	leapgen train peptide --out assets/peptide

bench-ocr: install
	leapgen bench ocr --out docs

bench-peptide: install
	leapgen bench peptide --out docs

test-recognition:
	OMP_NUM_THREADS=1 python -m pytest -q tests/test_ocr.py tests/test_peptide.py tests/test_registry_guarantees.py -k "not cuda and (ocr or peptide or cppd or pmc or bidirectional)"

.PHONY: serve-demo bench-scaleout bench-demo-startup test-demo
# the Gradio demo of every shipped pipeline on 127.0.0.1:7860 (`make demo` is the CLI text demo)
serve-demo: install
	$(PIP) install -q -e ".[demo]"
	leapgen demo --port 7860

bench-demo-startup:
	leapgen bench demo-startup --out docs

bench-scaleout:
	$(PYTHON) -m leapgen.distributed.bench --prompts 512 --max-new-tokens 32 --out docs
	$(PYTHON) -m leapgen.distributed.bench --prompts 512 --max-new-tokens 8 --out docs/scaleout_short_job

test-demo:
	$(PYTHON) -m pytest -q tests/test_demo_browser.py tests/test_demo_unit.py tests/test_distributed.py

# the demo screenshots in docs/ (docs/demo_<tab>.png), taken by the browser tests
docs-demo: install-test
	LEAPGEN_DEMO_SCREENSHOTS=docs $(PYTHON) -m pytest -q tests/test_demo_browser.py

# zero-shot TTS (MaskGCT vs AR T2S): tests, bench (docs/bench_speech.md, docs/tts/), recipe
test-tts:
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -q tests/test_tts.py tests/test_tts_recipe.py tests/test_tts_asset.py tests/test_registry_guarantees.py -k "tts or maskgct or shipped"

bench-speech: data-tts-en
	leapgen bench speech --out docs --corpus $(TTS_CORPUS)

train-tts: data-tts-en
	leapgen train tts-en --out assets/tts-en --corpus-dir $(TTS_CORPUS)

# speech-to-speech translation (DASpeech DAG decoding vs an AR baseline): corpus, recipe, bench, tests
.PHONY: data-s2st-en-de train-s2st-en-de train-language-id bench-s2st test-s2st test-tts bench-speech train-tts docs-demo
data-s2st-en-de: install-test
	leapgen data s2st-en-de
train-s2st-en-de: install-test
	leapgen train s2st-en-de --out assets/s2st-en-de
# the S2ST pipeline's spoken language check (English vs German x-vector, 5 min on one thread; needs
# speech-en-2k, speech-de and s2st-en-de): writes the component into the shipped pipeline folder
train-language-id: install-test
	leapgen train language-id --out assets/s2st-en-de/language_id --threads 1
bench-s2st: install-test
	leapgen bench s2st --out docs --speed-utts 10 --repeats 3
test-s2st:
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -q tests/test_s2st.py tests/test_s2st_dag.py
