"""The ```python examples of README.md and of some docs pages run as written.

Each page's blocks run in order in one namespace (a block may use what an earlier one of the same
page defined), statement by statement, in a temporary folder that holds the placeholder inputs the
examples name (``a.wav``, ``voice.wav``, ``word.png``, ``wave``, ``mz`` ...: see ``_placeholders``).
A statement whose line ends in a comment ``# SomeError: ...`` must raise that error (the docs show
refusals that way). Everything a page's example is changed by before it runs is listed below, with
the reason, and each entry must still match the page (a stale one fails): ``SUBSTITUTIONS`` (a
placeholder path, or a smaller size so the suite stays fast), ``SKIPPED`` (blocks not run) and
``CHECKS`` (asserts of what the comments and prose say, run right after the statement they name).
"""

from __future__ import annotations

import ast
import random
import re
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"

#: the pages whose examples run here
PAGES = ["README.md", "docs/architecture.md", "docs/asr.md", "docs/ocr.md", "docs/peptides.md", "docs/s2st.md",
         "docs/tts.md", "docs/image_samplers.md"]

#: the hand-written pages with ```python examples that do not run here, and why (times on the 2-core CPU);
#: README.md runs one call of each of their pipelines
NOT_RUN = {
    "docs/audio.md": "seven 5 s clips: ~20 s",
    "docs/dllm.md": "nine masked-diffusion decodes: ~50 s",
    "docs/images.md": "needs LlamaGen's checkpoints (network), and re-measures a table: ~20 s",
    "docs/image_continuous.md": "~4 s, and README.md runs image-emoji-mar and -dd",
    "docs/image_families.md": "~5 s, and README.md runs image-emoji-nar, -var, -nfig and -ctf",
    "docs/molecules.md": "64-molecule GenMol runs and every task: ~100 s",
    "docs/text_lossy.md": "every text-heads sampler: ~20 s",
}

#: (page, text in the page, what runs instead, why)
SUBSTITUTIONS: list[tuple[str, str, str, str]] = [
    ("README.md", 'AutoModelForCausalLM.from_pretrained("path/or/hub-id")',
     f'AutoModelForCausalLM.from_pretrained("{ASSETS}/text-code/model")', "placeholder: the shipped model"),
    ("README.md", 'AutoTokenizer.from_pretrained("path/or/hub-id")',
     f'AutoTokenizer.from_pretrained("{ASSETS}/text-code/tokenizer")', "placeholder: the shipped tokenizer"),
    ("README.md", "num_samples=64", "num_samples=4", "speed: 64 GenMol molecules take ~25 s on a 2-core CPU"),
    ("README.md", "num_samples=32", "num_samples=4", "speed: as above"),
    ("README.md", "num_rounds=3", "num_rounds=1", "speed: one lead-optimisation round"),
    ("README.md", 'sampler="magnet", duration=5.0', 'sampler="magnet", duration=1.0', "speed: a 1 s clip"),
    ("README.md", '("def add(a, b):", sampler="fast_dllm")', '("def add(a, b):", sampler="fast_dllm", max_new_tokens=32)',
     "speed: 128 masked-diffusion tokens take ~9 s"),
    ("docs/architecture.md", '"/tmp/bytes"', '"bytes_pipeline"', "write into the test's folder, not /tmp"),
]

#: (page, text in the block, why it does not run here)
SKIPPED: list[tuple[str, str, str]] = [
    ("docs/architecture.md", "logits = lm(tokens[B, n], cache", "a signature sketch, not code"),
    ("docs/architecture.md", "result = sampler.generate(models, prompts, config, generator=None, cond=None)",
     "a signature sketch: the registered sampler already exists"),
]

#: (page, text in the block, code asserting what the prose around it says)
CHECKS: list[tuple[str, str, str]] = [
    ("README.md", 'out = pipe(["def add(a, b):", ""])',
     'assert out.texts[1] is None and out.errors[1].startswith("prompt 1 is empty; ")\n'
     "assert isinstance(out.texts[0], str) and out.errors[0] is None"),
    ("README.md", "print(out.finish_reasons, out.stop_reasons)",
     'assert out.finish_reasons == ["stop"] and out.stop_reasons == ["\\n\\n"]'),
    ("README.md", 'out.acceptance_map(0).save("animal_map.png")',
     'assert Path("animal.png").is_file() and Path("animal_map.png").is_file() and len(out.images) == 2'),
    ("README.md", 'sampler="nar")', "assert _.stats.target_forwards == 31  # 31 forwards per image"),
    ("README.md", 'sampler="var")', "assert _.stats.target_forwards == 9"),
    ("README.md", '(["a.wav"], sampler="paraformer")', "assert _.texts[0] and _.timestamps[0]  # .texts, .timestamps"),
    ("README.md", '(["word.png"], sampler="cppd")', 'assert _.texts == ["hello"] and _.confidences[0]'),
    ("docs/s2st.md", 'out = pipe("assets/s2st-en-de/examples/clip0.wav"',
     "assert out.sample_rate == 16000 and out.audios[0].dtype == np.float32 and out.texts[0]\n"
     "assert {'latency', 'encoder_time', 'decoder_time', 'acoustic_time', 'vocoder_time'} <= set(out.stats.extra)"),
    ("docs/s2st.md", "vocode=False)", "assert _.audios == [None] and _.mels[0] is not None"),
    ("docs/ocr.md", 'out = pipe(["word.png", pil_image, uint8_array])',
     "assert out.errors == [None, None, None] and all(out.texts)"),
    ("docs/ocr.md", 'pipe(images, sampler="speculative")',
     'assert _.texts == pipe(images, sampler="ar").texts  # "greedy-identical to ar"'),
    ("docs/peptides.md", "out = pipe([spec]", "assert out.errors == [None] and out.sequences[0]"),
    ("docs/asr.md", 'draft="ctc")', "assert out.errors == [None] and out.texts[0]"),
    ("docs/asr.md", "print(out.texts, out.timestamps[0], out.stats)",
     "assert all(len(w) == 3 and w[1] <= w[2] for w in out.timestamps[0])"),
    ("docs/tts.md", 'out.save(0, "hello.wav")', 'assert Path("hello.wav").is_file()'),
]

FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
RAISES = re.compile(r"#\s*([A-Z]\w*(?:Error|Exception))\b:")


def python_blocks(page: str) -> list[tuple[int, str]]:
    """(first line of the code, code) of each ```python block of ``page``."""
    text = (ROOT / page).read_text()
    return [(text[: m.start(1)].count("\n") + 1, m.group(1)) for m in FENCE.finditer(text)]


def _placeholders() -> dict:
    """The inputs the examples name, made in the current folder: audio files and arrays, word images,
    a peptide spectrum."""
    import soundfile as sf
    from PIL import Image

    from leapgen.data import ocr as ocr_corpus
    from leapgen.data import peptide as peptide_corpus

    shutil.copy(ASSETS / "asr-en/examples/clip.wav", "a.wav")
    wave, rate = sf.read("a.wav", dtype="float32")
    sf.write("b.flac", wave, rate)
    shutil.copy(ASSETS / "tts-en/examples/prompt.wav", "voice.wav")
    shutil.copy(ASSETS / "s2st-en-de/examples/clip0.wav", "question.wav")
    Path("assets").symlink_to(ASSETS)  # docs/s2st.md names assets/s2st-en-de/examples/clip0.wav
    wav_a, _ = sf.read(ASSETS / "s2st-en-de/examples/clip0.wav", dtype="float32")
    wav_b, _ = sf.read(ASSETS / "s2st-en-de/examples/clip1.wav", dtype="float32")
    font = ocr_corpus.find_fonts()[0]
    Image.fromarray(ocr_corpus.render_word("hello", font, random.Random(1))).save("word.png")
    pil_image = Image.open("word.png")
    spectrum = peptide_corpus.simulate("PEPTLDEK", 2, random.Random(0))
    return {
        "wave": wave, "wav_a": wav_a, "wav_b": wav_b,
        "pil_image": pil_image, "uint8_array": ocr_corpus.render_word("value", font, random.Random(0)),
        "images": ["word.png", pil_image],
        "mz": spectrum["mz"], "it": spectrum["intensity"], "pmz": spectrum["precursor_mz"],
        "mz_array": spectrum["mz"], "intensity_array": spectrum["intensity"],
    }


def _statements(page: str, line: int, code: str):
    """(where, source, compiled statement) of each top-level statement of a block."""
    tree = ast.increment_lineno(ast.parse(code, filename=page), line - 1)  # tracebacks give the page's lines
    lines = code.splitlines()
    for node in tree.body:
        source = "\n".join(lines[node.lineno - line : node.end_lineno - line + 1])
        if isinstance(node, ast.Expr):  # its value becomes ``_``, as at the prompt
            node = ast.copy_location(ast.Assign(targets=[ast.Name("_", ast.Store())], value=node.value), node)
            ast.fix_missing_locations(node)
        yield f"{page}:{node.lineno}", source, compile(ast.Module(body=[node], type_ignores=[]), page, "exec")


def _run_block(page: str, line: int, code: str, namespace: dict) -> None:
    for where, source, statement in _statements(page, line, code):
        m = RAISES.search(source.splitlines()[-1])
        if m is None:
            exec(statement, namespace)
        else:
            with pytest.raises(Exception) as info:  # any type: its name is checked below
                exec(statement, namespace)
            names = [c.__name__ for c in type(info.value).__mro__]
            assert m.group(1) in names, f"{where}: the page says {m.group(1)}, got {info.type.__name__}: {info.value}"
        for p, anchor, check in CHECKS:
            if p == page and anchor in source:
                exec(compile(check, f"check after {where}", "exec"), {**namespace, "Path": Path, "np": np})


def test_adjustment_lists_match_the_pages():
    """Every substitution, skip and check still names text of its page (no stale entry hides a block)."""
    for page, old, *_ in SUBSTITUTIONS:
        assert old in "".join(c for _, c in python_blocks(page)), f"{page}: no {old!r} left in its examples"
    for page, anchor, _ in SKIPPED:
        hits = [c for _, c in python_blocks(page) if anchor in c]
        assert len(hits) == 1, f"{page}: {anchor!r} is in {len(hits)} python blocks, expected 1"
    for page, anchor, _ in CHECKS:
        hits = [s for line, c in python_blocks(page) for _, s, _ in _statements(page, line, c) if anchor in s]
        assert len(hits) == 1, f"{page}: {anchor!r} is in {len(hits)} statements, expected 1"


def test_every_page_with_examples_is_listed():
    """A docs page with ```python examples either runs here or says why not (bench tables have none)."""
    assert len(python_blocks("README.md")) >= 5
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if python_blocks(f"docs/{p.name}")}
    assert pages <= set(PAGES) | set(NOT_RUN), f"add to PAGES or NOT_RUN: {sorted(pages - set(PAGES) - set(NOT_RUN))}"
    assert not set(PAGES) & set(NOT_RUN)


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, tmp_path, monkeypatch):
    from leapgen.pipelines import base as pipeline_base
    from leapgen.samplers import base as sampler_base

    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("docs_example")  # a real module: dataclasses look their class's module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    namespace.update(_placeholders())
    samplers, pipelines = dict(sampler_base._REGISTRY), dict(pipeline_base._PIPELINES)
    try:
        for line, code in python_blocks(page):
            if any(p == page and anchor in code for p, anchor, _ in SKIPPED):
                continue
            for p, old, new, _ in SUBSTITUTIONS:
                if p == page:
                    code = code.replace(old, new)
            _run_block(page, line, code, namespace)
    finally:  # the pages' new samplers (docs/architecture.md's "bigram") and pipelines stay in this test
        for name in set(sampler_base._REGISTRY) - set(samplers):
            del sampler_base._REGISTRY[name]
        for name in set(pipeline_base._PIPELINES) - set(pipelines):
            del pipeline_base._PIPELINES[name]
