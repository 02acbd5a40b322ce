"""diffusers conventions of the pipelines and components (issue 10, item 5).

model_index.json written one way and read back to choose the classes; component configs saved and
loaded one way; BaseOutput results and ``return_dict=False``; ``generator=``,
``callback_on_step_end``, ``set_progress_bar_config``; ``pipe.to(device, dtype)``; no state kept
from one call to the next; an encoder-decoder model refused by the text pipeline.
"""

from __future__ import annotations

import ast
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from diffusers.utils import BaseOutput

from leapgen.configuration import ConfigMixin
from leapgen.errors import AssetNotFoundError, ConfigError, InputError, ModelMismatchError
from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
from leapgen.pipelines import ImageARPipeline, MoleculePipeline, Pipeline, TextPipeline
from leapgen.pipelines.base import component_entry
from leapgen.pipelines.loading import parse_to_args
from leapgen.pipelines.outputs import ImageOutput, MoleculeOutput, TextOutput
from leapgen.tokenizers.safe import SAFETokenizer
from leapgen.tokenizers.vq_image import VQConfig, VQModel
from leapgen.tokenizers.word_vocab import WordVocab

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["def add(a, b):", "import os\n"]


@pytest.fixture(scope="module")
def text_pipe() -> TextPipeline:
    return Pipeline.from_pretrained("leapgen/text-code")


@pytest.fixture(scope="module")
def image_pipe() -> ImageARPipeline:
    return Pipeline.from_pretrained("leapgen/image-emoji")


@pytest.fixture(scope="module")
def mol_pipe() -> MoleculePipeline:
    pytest.importorskip("rdkit", reason="the molecule extra (RDKit) is not installed")
    return Pipeline.from_pretrained("leapgen/molecule-safe")


# ---------------------------------------------------------------------------------------- model_index.json
@pytest.mark.parametrize("name,cls", [("text-code", TextPipeline), ("image-emoji", ImageARPipeline),
                                      ("molecule-safe", MoleculePipeline)])
def test_shipped_model_index_is_read_back(name, cls):
    index = json.loads((ROOT / "assets" / name / "model_index.json").read_text())
    assert index["_class_name"] == cls.__name__
    for comp in cls.components:
        entry = index.get(comp)
        assert entry is None or (isinstance(entry, list) and len(entry) == 2), (comp, entry)


def test_save_writes_one_index_format_and_loads_it_back(text_pipe, tmp_path):
    text_pipe.save_pretrained(tmp_path / "p")
    index = json.loads((tmp_path / "p" / "model_index.json").read_text())
    assert index["_class_name"] == "TextPipeline" and "_leapgen_version" in index
    assert index["model"] == ["transformers", type(text_pipe.model).__name__]
    assert index["model"] == component_entry(text_pipe.model)
    again = TextPipeline.from_pretrained(tmp_path / "p")
    assert type(again) is TextPipeline
    a = text_pipe(PROMPTS, max_new_tokens=8)
    assert again(PROMPTS, max_new_tokens=8).token_ids == a.token_ids


def test_leapgen_components_are_named_by_their_module(image_pipe, tmp_path):
    folder = tmp_path / "img"
    image_pipe.save_pretrained(folder, dtype=torch.float16)
    index = json.loads((folder / "model_index.json").read_text())
    assert index["vq"] == ["leapgen.tokenizers.vq_image", "VQModel"]
    assert index["text_tokenizer"] == ["leapgen.tokenizers.word_vocab", "WordVocab"]
    assert index["class_names"] == list(image_pipe.class_names)  # the pipeline's own setting, read back
    again = Pipeline.from_pretrained(folder)
    assert isinstance(again, ImageARPipeline) and again.class_names == image_pipe.class_names


def _copy_text_asset(tmp_path: Path) -> Path:
    dst = tmp_path / "text"
    shutil.copytree(ROOT / "assets" / "text-code", dst)
    return dst


def _edit_index(folder: Path, **entries) -> None:
    index = json.loads((folder / "model_index.json").read_text())
    index.update(entries)
    (folder / "model_index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    "entries,match",
    [
        ({"_class_name": "NoSuchPipeline"}, "NoSuchPipeline.*known pipelines"),
        ({"model": ["transformers", "NoSuchModelForCausalLM"]}, "'model'.*no class 'NoSuchModelForCausalLM'"),
        ({"model": ["no_such_library_xyz", "Model"]}, "'model'.*cannot be imported"),
        ({"model": "LlamaForCausalLM"}, "expected \\[library, class\\]"),
        ({"model": ["json", "JSONDecoder"]}, "no from_pretrained"),
    ],
)
def test_wrong_index_entries_raise_clear_errors(tmp_path, entries, match):
    folder = _copy_text_asset(tmp_path)
    _edit_index(folder, **entries)
    with pytest.raises(ConfigError, match=match):
        Pipeline.from_pretrained(folder)


def test_index_picks_the_class_and_a_mismatch_is_refused(tmp_path):
    folder = _copy_text_asset(tmp_path)
    with pytest.raises(ConfigError, match="holds a TextPipeline, not a ImageARPipeline"):
        ImageARPipeline.from_pretrained(folder)
    shutil.rmtree(folder / "draft")
    with pytest.raises(AssetNotFoundError, match="'draft'"):
        Pipeline.from_pretrained(folder)
    _edit_index(folder, draft=[None, None])
    assert Pipeline.from_pretrained(folder).draft is None


# ---------------------------------------------------------------------------------------- component configs
def _tiny_vq() -> VQModel:
    return VQModel(VQConfig(codebook_size=16, codebook_embed_dim=4, ch=8, ch_mult=(1, 2), z_channels=8,
                            norm_groups=4, image_size=16)).eval()


def _tiny_gpt() -> LlamaGenGPT:
    return LlamaGenGPT(GPTConfig(vocab_size=16, dim=32, n_layer=1, n_head=2, multiple_of=16, num_classes=2,
                                 grid_size=2, class_names=("a", "b"))).eval()


def test_every_leapgen_component_saves_and_loads_its_config_one_way(tmp_path):
    tok = SAFETokenizer(["[PAD]", "[BOS]", "[EOS]", "[MASK]", "[UNK]", "c", "C", "."])
    vocab = WordVocab(["red", "apple"], max_len=3)
    objs = {"vq": _tiny_vq(), "gpt": _tiny_gpt(), "words": vocab, "safe": tok}
    for name, obj in objs.items():
        assert isinstance(obj, ConfigMixin), name
        obj.save_pretrained(tmp_path / name)
        raw = json.loads((tmp_path / name / type(obj).config_name).read_text())
        assert raw["_class_name"] == type(obj).__name__ and "_leapgen_version" in raw
        again = type(obj).from_pretrained(tmp_path / name)
        assert again.config_dict() == obj.config_dict(), name
    assert again.id_to_token == tok.id_to_token
    vq = VQModel.from_pretrained(tmp_path / "vq")
    assert all(torch.equal(vq.state_dict()[k], v) for k, v in objs["vq"].state_dict().items())
    with pytest.raises(ConfigError, match="written by a LlamaGenGPT, not a VQModel"):
        VQModel.from_pretrained(tmp_path / "gpt")
    with pytest.raises(ConfigError, match="unknown VQConfig field"):
        VQModel.from_config({"codebook_size": 16, "no_such_field": 1})


# ---------------------------------------------------------------------------------------- outputs
def test_outputs_are_base_outputs_and_return_dict_false_gives_tuples(text_pipe):
    out = text_pipe(PROMPTS, max_new_tokens=6)
    assert isinstance(out, BaseOutput) and isinstance(out, TextOutput)
    assert out["texts"] == out.texts and out[0] == out.texts
    assert repr(out).startswith("TextOutput(texts=")
    tup = text_pipe(PROMPTS, max_new_tokens=6, return_dict=False)
    assert isinstance(tup, tuple) and len(tup) == 9  # new fields are appended: the first seven keep their places
    texts, token_ids, stats, prompt_ids, errors, reasons, stop_reasons, logprobs, top_logprobs = tup
    assert logprobs is None and top_logprobs is None  # not asked for
    assert texts == out.texts and token_ids == out.token_ids and prompt_ids == out.prompt_token_ids
    assert errors == out.errors == [None] * len(PROMPTS)
    assert reasons == out.finish_reasons and set(reasons) <= {"stop", "length"} and stop_reasons == out.stop_reasons
    assert issubclass(ImageOutput, BaseOutput) and issubclass(MoleculeOutput, BaseOutput)


# ---------------------------------------------------------------------------------------- generator / callback / progress
def test_generator_matches_seed_and_is_checked(text_pipe):
    a = text_pipe(PROMPTS, sampler="speculative", temperature=1.0, max_new_tokens=10, seed=3)
    b = text_pipe(PROMPTS, sampler="speculative", temperature=1.0, max_new_tokens=10,
                  generator=torch.Generator().manual_seed(3))
    assert a.token_ids == b.token_ids
    with pytest.raises(InputError, match="either seed= or generator="):
        text_pipe(PROMPTS, seed=1, generator=torch.Generator())
    with pytest.raises(InputError, match="torch.Generator"):
        text_pipe(PROMPTS, generator=3)
    with pytest.raises(InputError, match="one per prompt"):  # diffusers' list form: refused, with the way out
        text_pipe(PROMPTS, generator=[torch.Generator() for _ in PROMPTS])
    with pytest.raises(InputError, match=r"generator is on cpu but the pipeline runs on cuda"):
        text_pipe.prepare_generator(torch.Generator(), None, device=torch.device("cuda"))


@pytest.mark.parametrize("name", ["text-code", "text-code-diffusion-adapted", "image-emoji-dd", "peptide"])
def test_a_seed_out_of_range_is_refused_where_seeds_become_generators(name):
    """seed=2**70 used to be a raw "ValueError: Overflow when unpacking long long" from torch; every
    pipeline turns seeds into generators through samplers.base.make_generator, which checks the range."""
    pipe = Pipeline.from_pretrained(f"leapgen/{name}")
    prompt = {"mz": [100.0, 200.0], "intensity": [1.0, 1.0], "precursor_mz": 400.0, "charge": 2} if name == "peptide" \
        else "red apple" if name.startswith("image") else "def f():"
    for seed in (2**70, 2**64, -(2**63) - 1):
        with pytest.raises(ConfigError, match=r"seed must be an integer in \[-2\*\*63, 2\*\*64\)"):
            pipe(prompt, seed=seed)
    assert pipe.prepare_generator(None, 2**64 - 1).initial_seed() == 2**64 - 1  # the range's last seed works
    pipe.prepare_generator(None, -1)  # torch takes negative seeds too (a bench derives seed - 1)


def test_callback_on_step_end_and_progress_bar(text_pipe):
    calls = []
    out = text_pipe(PROMPTS, max_new_tokens=7, callback_on_step_end=lambda pipe, step, info: calls.append(
        (pipe, step, info["stats"].target_forwards)))
    assert [c[1] for c in calls] == list(range(1, len(calls) + 1)) and calls[0][0] is text_pipe
    assert len(calls) == len(out.stats.accepted_per_step) > 0
    with pytest.raises(InputError, match="callback_on_step_end"):
        text_pipe(PROMPTS, max_new_tokens=2, callback_on_step_end="no")
    buf = io.StringIO()
    try:
        text_pipe.set_progress_bar_config(disable=False, file=buf, desc="gen")
        text_pipe(PROMPTS, max_new_tokens=5)
        assert "gen" in buf.getvalue()
        buf.truncate(0)
        text_pipe.set_progress_bar_config(disable=True, file=buf)
        text_pipe(PROMPTS, max_new_tokens=5, progress=True)
        assert buf.getvalue().strip("\x00") == ""
    finally:
        text_pipe.set_progress_bar_config()


def test_molecule_callback_generator_and_tuple(mol_pipe):
    calls = []
    out = mol_pipe(num_samples=4, sampler="genmol", seed=0, batch_size=2,
                   callback_on_step_end=lambda pipe, step, info: calls.append(info["batch"]))
    same = mol_pipe(num_samples=4, sampler="genmol", batch_size=2, generator=torch.Generator().manual_seed(0))
    assert same.token_ids == out.token_ids
    tup = mol_pipe(num_samples=4, sampler="genmol", seed=0, batch_size=2, return_dict=False)
    assert tup[0] == out.smiles and len(tup) == len(out.as_tuple())
    assert set(calls) == {0, 1} and len(calls) >= 2  # every decode step of both batches


# ---------------------------------------------------------------------------------------- .to
def test_to_parses_device_and_dtype_like_diffusers(text_pipe):
    assert parse_to_args(("cuda", torch.float16), None, None) == (torch.device("cuda"), torch.float16)
    assert parse_to_args((torch.bfloat16, "cpu"), None, None) == (torch.device("cpu"), torch.bfloat16)
    assert parse_to_args((), "cuda:1", torch.float16) == (torch.device("cuda:1"), torch.float16)
    with pytest.raises(ConfigError, match="torch.int64"):
        text_pipe.to(torch.int64)
    with pytest.raises(InputError, match="device"):
        text_pipe.to(3.5)
    with pytest.raises(InputError, match="two dtypes"):
        text_pipe.to(torch.float16, torch.float32)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            text_pipe.to("cuda", torch.float16)


def test_to_float64_and_back(tmp_path):
    pipe = Pipeline.from_pretrained("leapgen/text-code")
    ref = pipe(PROMPTS, sampler="speculative", max_new_tokens=8)
    assert pipe.to(torch.float64) is pipe and pipe.dtype == torch.float64 and pipe.draft.dtype == torch.float64
    out = pipe(PROMPTS, sampler="speculative", max_new_tokens=8)
    assert out.token_ids == ref.token_ids  # a tiny model: float64 keeps the greedy choices
    pipe.to(device="cpu", dtype=torch.float32)
    assert pipe.dtype == torch.float32 and pipe.to("cpu").device == torch.device("cpu")
    assert pipe(PROMPTS, sampler="speculative", max_new_tokens=8).token_ids == ref.token_ids


def test_image_pipeline_to_float64(image_pipe):
    pipe = Pipeline.from_pretrained("leapgen/image-emoji").to(torch.float64)
    assert pipe.vq.codebook().dtype == torch.float64
    out = pipe(["food"], sampler="ar", temperature=0.0, cfg_scale=1.0)
    assert out.images[0].size == (64, 64) and out.token_ids.shape == (1, 16, 16)


# ---------------------------------------------------------------------------------------- no state between calls
TEXT_CALLS = [
    (dict(sampler="speculative", num_draft_tokens=2, temperature=0.9, seed=4), dict(sampler="speculative", num_draft_tokens=5, seed=0)),
    (dict(sampler="lookahead", temperature=0.0), dict(sampler="prompt_lookup", temperature=0.7, top_k=5, seed=1)),
    (dict(sampler="jacobi", temperature=0.0), dict(sampler="lookahead", temperature=0.7, seed=0)),
    (dict(sampler="aded", temperature=0.0), dict(sampler="spec_tree", temperature=0.9, seed=2)),
]


@pytest.mark.parametrize("first,second", TEXT_CALLS)
def test_text_pipeline_keeps_no_state(text_pipe, first, second):
    text_pipe(PROMPTS, max_new_tokens=12, **first)
    again = text_pipe(PROMPTS, max_new_tokens=12, **second)
    fresh = Pipeline.from_pretrained("leapgen/text-code")(PROMPTS, max_new_tokens=12, **second)
    assert again.token_ids == fresh.token_ids


IMAGE_CALLS = [
    (dict(sampler="lantern", cfg_scale=1.5, temperature=1.0, seed=3), dict(sampler="lantern", cfg_scale=3.0, seed=0, temperature=1.0)),
    (dict(sampler="gsd", cfg_scale=4.0, seed=1, temperature=1.0), dict(sampler="speculative", cfg_scale=2.0, temperature=0.0, num_draft_tokens=3)),
    (dict(sampler="sjd", cfg_scale=2.0, seed=5, temperature=1.0), dict(sampler="ar", cfg_scale=1.0, temperature=0.0)),
]


@pytest.mark.parametrize("first,second", IMAGE_CALLS)
def test_image_pipeline_keeps_no_state(image_pipe, first, second):
    image_pipe(["animals"], **first)
    again = image_pipe(["food"], **second)
    fresh = Pipeline.from_pretrained("leapgen/image-emoji")(["food"], **second)
    assert torch.equal(again.token_ids, fresh.token_ids)


MOL_CALLS = [
    (dict(sampler="genmol", temperature=1.5, seed=3), dict(sampler="maskgit", seed=0)),
    (dict(sampler="mask_predict", seed=1), dict(sampler="genmol", seed=0, temperature=0.5)),
    (dict(sampler="ar", seed=2, temperature=0.6), dict(sampler="ar", seed=0)),
]


@pytest.mark.parametrize("first,second", MOL_CALLS)
def test_molecule_pipeline_keeps_no_state(mol_pipe, first, second):
    mol_pipe(num_samples=4, batch_size=4, **first)
    again = mol_pipe(num_samples=4, batch_size=4, **second)
    fresh = Pipeline.from_pretrained("leapgen/molecule-safe")(num_samples=4, batch_size=4, **second)
    assert again.token_ids == fresh.token_ids and again.smiles == fresh.smiles


# ---------------------------------------------------------------------------------------- bad models, layering
def test_text_pipeline_refuses_an_encoder_decoder_model(text_pipe):
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
    with pytest.raises(ModelMismatchError, match="encoder-decoder"):
        TextPipeline(model=BartForConditionalGeneration(cfg), tokenizer=text_pipe.tokenizer)


def test_pipelines_never_import_train_and_stay_small():
    for folder in ("pipelines", "chem"):
        for path in sorted((ROOT / "leapgen" / folder).glob("*.py")):
            text = path.read_text()
            assert len(text.splitlines()) < 500, f"{path.name} has {len(text.splitlines())} lines"
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom):
                    mod = ("." * node.level) + (node.module or "")
                    assert not (mod.startswith("..train") or mod.startswith("leapgen.train")), (path.name, mod)
                elif isinstance(node, ast.Import):
                    assert not any(a.name.startswith("leapgen.train") for a in node.names), path.name


def test_molecule_pipeline_to_float64(mol_pipe):
    pipe = Pipeline.from_pretrained("leapgen/molecule-safe")
    ref = mol_pipe(num_samples=4, sampler="genmol", seed=0, batch_size=4)
    assert pipe.to(torch.float64).dtype == torch.float64 and pipe.ar_model.dtype == torch.float64
    out = pipe(num_samples=4, sampler="genmol", seed=0, batch_size=4)
    assert out.smiles == ref.smiles  # a tiny model: float64 keeps the sampled choices here
    assert len(pipe(num_samples=2, sampler="ar", seed=0).smiles) == 2


# ---------------------------------------------------------------------------------------- one bad item fails alone
def test_text_batch_bad_prompts_fail_alone(text_pipe):
    long = "x = 1\n" * 2000  # far beyond the 1024-token context window
    out = text_pipe(["def add(a, b):", None, "", long, "import os\n"], max_new_tokens=6)
    assert out.texts[1] is None and out.texts[2] is None and out.texts[3] is None
    assert "prompt 1 is None" in out.errors[1] and "empty" in out.errors[2] and "context window" in out.errors[3]
    assert out.errors[0] is None and out.errors[4] is None and out.token_ids[1] is None
    alone = text_pipe(["def add(a, b):", "import os\n"], max_new_tokens=6)  # greedy: the same tokens
    assert [out.token_ids[0], out.token_ids[4]] == alone.token_ids and [out.texts[0], out.texts[4]] == alone.texts
    with pytest.raises(InputError, match="no prompt could be used: prompt 0 is empty.*prompt 1 is an int"):
        text_pipe(["", 3], max_new_tokens=6)
    with pytest.raises(InputError, match="prompt 0 is empty"):
        text_pipe("", max_new_tokens=6)


def test_diffusion_text_batch_bad_prompts_fail_alone():
    pipe = Pipeline.from_pretrained("leapgen/text-code-diffusion")
    out = pipe(["def add(a, b):", 7, "x = 1\n" * 2000], sampler="fast_dllm", max_new_tokens=32)
    assert isinstance(out.texts[0], str) and out.texts[1] is None and out.texts[2] is None
    assert "int" in out.errors[1] and "positions" in out.errors[2] and out.errors[0] is None
    assert out.prompt_token_ids[1] is None and len(out.token_ids[0]) <= 32


@pytest.mark.parametrize("name", ["image-emoji", "image-emoji-var", "image-emoji-ctf"])
def test_image_batch_bad_prompts_fail_alone(name):
    pipe = Pipeline.from_pretrained(f"leapgen/{name}")
    out = pipe(["animals", "", 99, "red apple"], seed=0, num_images_per_prompt=2)
    assert len(out.images) == len(out.errors) == len(out.prompts) == 8 and out.token_ids.shape[0] == 8
    ok = [0, 1, 6, 7]
    assert all(out.images[i] is not None and out.errors[i] is None for i in ok)
    assert all(out.images[i] is None and out.errors[i] for i in (2, 3, 4, 5))
    assert "empty" in out.errors[2] and "out of range" in out.errors[4]
    assert (out.token_ids[2:6] == -1).all() and (out.token_ids[ok] >= 0).all()
    assert out.token_steps[2] == [] and len(out.token_steps[0]) == out.token_ids[0].numel()
    with pytest.raises(InputError, match="image 2 was not generated: prompt 1 is empty"):
        out.acceptance_map(2)
    with pytest.raises(InputError, match="no prompt could be used"):
        pipe(["", 99])


@pytest.mark.parametrize("asset", ["image-emoji", "image-emoji-ctf", "image-emoji-var", "image-emoji-mar", "image-emoji-dd"])
@pytest.mark.parametrize("n", [0, True, 2.0])
def test_num_images_per_prompt_is_checked_alike_by_every_image_pipeline(asset, n):
    """One rule (items.check_count) for the five image pipelines; True used to pass three of them
    and read as one image, and the message did not always name the argument."""
    pipe = Pipeline.from_pretrained(f"leapgen/{asset}")
    with pytest.raises(InputError, match="num_images_per_prompt must be an integer >= 1"):
        pipe(["faces"], num_images_per_prompt=n, seed=0)


@pytest.mark.parametrize("asset", ["image-emoji", "image-emoji-ctf", "image-emoji-var", "image-emoji-mar", "audio-music"])
@pytest.mark.parametrize("scale", [float("inf"), -1.0, True, "2"])
def test_cfg_scale_is_checked_by_the_one_guidance_rule(asset, scale):
    """models.condition.check_guidance_scale in every pipeline with guidance (inf used to pass the
    pipelines' own copies of the check)."""
    pipe = Pipeline.from_pretrained(f"leapgen/{asset}")
    prompt = "a calm piano melody" if asset == "audio-music" else ["faces"]
    with pytest.raises(InputError, match=r"guidance scale \(cfg_scale\) must be a number from 0 to 1000"):
        pipe(prompt, cfg_scale=scale, seed=0)
