"""Hostile sweep (5) of the non-speech pipelines and the CLI, as realistic users try them: inputs no
other test names. Each test here failed before its fix; tiny models, module-scoped fixtures."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import make_llama

from leapgen.pipelines.freshness import rebuild_count
from leapgen.pipelines.text_logprobs import token_logprobs

torch.set_num_threads(1)


# ---------------------------------------------------------------- freshness: buffers count


class _BufferCodebook(torch.nn.Module):
    """A VQ codebook held as a buffer (an EMA VQ's codebook is one: updated in place, no gradient)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())


@pytest.fixture(scope="module")
def image_pipe():
    from test_image_pipeline import make_pipe

    pipe = make_pipe()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_a_codebook_buffer_changed_in_place_rebuilds_the_adapters(image_pipe):
    """The image pipeline copies the VQ codebook into its adapters (token latents, read by LANTERN).
    A codebook registered as a buffer and edited in place (an EMA update) was not in the freshness
    key, so every later call ran on the stale copy; now buffers are keyed like parameters."""
    pipe = image_pipe
    quant = pipe.vq.quantize
    quant.embedding = _BufferCodebook(quant.embedding.weight)  # a replaced submodule: followed before too
    pipe("faces", sampler="ar", seed=0)
    before = rebuild_count(pipe)
    with torch.no_grad():
        quant.embedding.weight.copy_(torch.randn_like(quant.embedding.weight))  # the in-place EMA step
    pipe("faces", sampler="ar", seed=0)
    assert rebuild_count(pipe) == before + 1
    want = F.normalize(quant.embedding.weight.float(), p=2, dim=-1) if pipe.vq.config.codebook_l2_norm \
        else quant.embedding.weight.float()
    assert torch.equal(pipe.lms["model"].token_latents(), want)
    pipe("faces", sampler="ar", seed=0)
    assert rebuild_count(pipe) == before + 1  # nothing changed: no rebuild


# ---------------------------------------------------------------- logprobs of a mixed-length batch


def test_logprobs_of_a_mixed_length_batch_keep_only_the_generated_positions():
    """A long prompt beside a short one: the teacher-forced forward kept every position from the
    shortest prompt's end (right padding), nearly the whole batch's logits; the prompts are now
    left-padded to one end column (with their own position ids), so it keeps the longest output + 1,
    and the values still equal an unbatched forward of each row."""
    model = make_llama(40, seed=4)
    shapes: list[tuple[int, ...]] = []
    hook = model.register_forward_hook(lambda m, a, out: shapes.append(tuple(out.logits.shape)))
    prompts, outs = [list(range(1, 38)), [5], [7, 8, 9]], [[3, 4], [6, 7, 8, 9, 10], []]
    try:
        lps, tops = token_logprobs(model, prompts, outs, 3)
    finally:
        hook.remove()
    assert shapes == [(3, 6, 40)]  # max output 5, + 1 (was 42 - 1 + 1 = 42)
    for p, o, lp, top in zip(prompts, outs, lps, tops):
        assert len(lp) == len(top) == len(o)
        if not o:
            continue
        with torch.no_grad():
            ref = model(torch.tensor([p + o])).logits[0].double().log_softmax(-1)[len(p) - 1 : len(p) - 1 + len(o)]
        assert torch.allclose(torch.tensor(lp, dtype=torch.double), ref[torch.arange(len(o)), torch.tensor(o)], atol=1e-5)
        assert [list(d) for d in top] == ref.topk(3, dim=-1).indices.tolist()


# ---------------------------------------------------------------- CLI: a path the system refuses


@pytest.fixture(scope="module")
def tiny_image_dir(tmp_path_factory):
    from test_image_pipeline import make_pipe

    folder = tmp_path_factory.mktemp("tiny-image-sweep5")
    make_pipe().save_pretrained(folder)
    return folder


def test_cli_output_folder_on_a_read_only_file_system_is_one_line(tiny_image_dir, tmp_path, monkeypatch, capsys):
    """``--out`` under a read-only (or special: /proc) file system passes the permission check (root,
    or a read-only mount) and the folder's creation failed with a raw OSError traceback; now one
    ``error:`` line naming the path, exit status 1."""
    import errno
    import pathlib

    from leapgen.cli import main

    target = tmp_path / "ro" / "images"

    def refuse(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    rc = main(["generate", "image", "faces", "--pipeline", str(tiny_image_dir), "--out", str(target)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert str(target) in err and "Read-only file system" in err


# ---------------------------------------------------------------- molecules: lead_opt's score_fn


@pytest.fixture(scope="module")
def molecule_pipe():
    from leapgen.pipelines import Pipeline

    return Pipeline.from_pretrained("leapgen/molecule-safe")


@pytest.mark.parametrize("bad", [float("nan"), 0.5, None, "a"])
def test_lead_opt_score_fn_returning_one_value_not_a_list_says_so(molecule_pipe, bad):
    """score_fn is called with a LIST of SMILES; one that returns a single number (the common mistake:
    ``lambda s: qed(s)``) raised a raw "TypeError: 'float' object is not iterable" (a string was read as
    a list of characters); now an InputError saying what it must return."""
    from leapgen.errors import InputError

    with pytest.raises(InputError, match=r"score_fn returned .* not a list; it is called with a list of molecules"):
        molecule_pipe(task="lead_opt", molecules=["CCOc1ccccc1"], num_samples=2, num_rounds=1,
                      score_fn=lambda smiles: bad, seed=0)


def test_invalid_smiles_is_said_once_by_the_error_not_printed_by_rdkit(molecule_pipe, capfd):
    """An invalid fragment or starting molecule gives an InputError / errors[i]; RDKit's C++ log also
    printed "SMILES Parse Error ..." lines to stderr (a library logs, never prints; the CLI showed them
    above its one-line error). Now parsed with RDKit's log silenced."""
    from leapgen.errors import InputError

    capfd.readouterr()
    with pytest.raises(InputError, match="not a valid SMILES"):
        molecule_pipe(num_samples=2, task="motif", fragments=["C1CC(("])
    out = molecule_pipe(task="lead_opt", molecules=["CCO", "C1CC(("], num_samples=2, num_rounds=1, seed=0)
    assert out.errors[0] is None and "not a valid SMILES" in out.errors[1]
    captured = capfd.readouterr()
    assert "SMILES Parse Error" not in captured.err + captured.out


# ---------------------------------------------------------------- prompts as arrays / tensors


def test_image_prompts_as_a_1d_array_or_tensor_of_class_ids(image_pipe):
    """Class ids read off a dataset (``torch.tensor([0, 2])``, ``np.arange(3)``) were taken as ONE
    prompt and refused ("prompt 0 is a Tensor"); now a 1-D array / tensor / range is the batch, each
    entry a prompt (a bad id fails alone), a 0-d one a single prompt, a 2-D one a clear error."""
    import numpy as np

    from leapgen.errors import InputError

    out = image_pipe(torch.tensor([0, 2]), sampler="ar", seed=0, cfg_scale=1.0)
    assert len(out.images) == 2 and out.errors == [None, None] and out.prompts == [0, 2]
    mixed = image_pipe(np.array([1, 7]), sampler="ar", seed=0, cfg_scale=1.0)
    assert mixed.images[1] is None and "out of range" in mixed.errors[1] and mixed.errors[0] is None
    assert image_pipe(np.array(1), sampler="ar", seed=0, cfg_scale=1.0).prompts == [1]
    assert len(image_pipe(range(2), sampler="ar", seed=0, cfg_scale=1.0).images) == 2
    with pytest.raises(InputError, match=r"array of shape \(2, 2\); pass a list or a 1-D array"):
        image_pipe(np.zeros((2, 2), dtype=int), seed=0)
    # negative prompts too: one per prompt from a 1-D tensor, one shared from a 0-d array
    kw = {"sampler": "ar", "seed": 0, "temperature": 0.0}
    per = image_pipe(["faces", "flags"], negative_prompt=torch.tensor([1, 2]), **kw)
    assert torch.equal(per.token_ids, image_pipe(["faces", "flags"], negative_prompt=[1, 2], **kw).token_ids)
    shared = image_pipe(["faces", "flags"], negative_prompt=np.array(1), **kw)
    assert torch.equal(shared.token_ids, image_pipe(["faces", "flags"], negative_prompt=1, **kw).token_ids)


def test_text_prompts_as_a_1d_array_of_strings(pipe):
    """``np.array(["def f():", "import os"])`` (a column read with numpy / pandas ``.values``) was
    refused as "not a string or a list of strings"; now its entries are the prompts."""
    import numpy as np

    out = pipe(np.array(["def f():", "import os"]), max_new_tokens=2)
    ref = pipe(["def f():", "import os"], max_new_tokens=2)
    assert out.texts == ref.texts and out.errors == [None, None]


def test_molecule_task_names_are_forgiving_and_settings_of_another_task_are_refused(molecule_pipe):
    """``task='Linker'`` / ``' motif '`` / ``'lead-opt'`` were 'unknown task'; and ``linker_mode`` on a motif
    task or ``num_rounds`` on a de novo one were silently ignored (the call ran as if they were not given).
    Now the name is normalised (case, spaces, '-'), and a setting of another task is an InputError."""
    from leapgen.errors import InputError

    out = molecule_pipe(num_samples=2, task=" Superstructure ", fragments=["c1ccc2[nH]ccc2c1"], seed=0)
    assert out.task == "superstructure"
    with pytest.raises(InputError, match=r"linker_mode belongs to task='linker', not task='motif'"):
        molecule_pipe(num_samples=2, task="motif", fragments=["[*]c1ccccc1"], linker_mode="one_step")
    with pytest.raises(InputError, match=r"num_rounds belongs to task='lead_opt', not task='de_novo'"):
        molecule_pipe(num_samples=2, num_rounds=5)


def test_min_new_tokens_above_max_new_tokens_is_refused(pipe):
    """``min_new_tokens=8, max_new_tokens=4`` ran and returned 4 tokens as if min_new_tokens were not
    given; now a ConfigError (vLLM's rule: min_tokens <= max_tokens)."""
    from leapgen.errors import ConfigError

    with pytest.raises(ConfigError, match=r"min_new_tokens=8 is above max_new_tokens=4"):
        pipe("def f():", min_new_tokens=8, max_new_tokens=4)
    assert len(pipe("def f():", min_new_tokens=4, max_new_tokens=4, stop_at_eos=True).token_ids[0]) == 4


# ---------------------------------------------------------------- OCR: a speck is no text


def test_ocr_image_whose_only_ink_is_a_speck_fails_alone():
    """A white image with one dark pixel (a speck of dust on a blank scan) passed the blank check
    (its extremes differ) and was read as 'st' without a word; now that item fails alone, under the
    word path and under ``auto``, and the other items are read."""
    import numpy as np

    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/ocr-en")
    speck = np.pad(np.zeros((1, 1), np.uint8), 20, constant_values=255)
    word = np.full((40, 120), 255, np.uint8)
    word[12:28, 20:100:6] = 0  # a row of vertical strokes: some reading, not an error
    for layout in ("word", "auto"):
        out = pipe([word, speck], layout=layout)
        assert out.texts[1] is None and "isolated pixel" in out.errors[1], layout
        assert out.errors[0] is None and out.texts[0] is not None, layout


def test_ocr_paths_with_a_tilde_or_a_url(tmp_path, monkeypatch):
    """'~/word.png' was 'does not exist' (no home expansion), and a URL was folded by Path into
    'http:/example.com/x.png' and reported as a missing file; now '~' is expanded and a URL is said
    to be one (no network: download it first). Spectrum files expand '~' too."""
    import numpy as np
    from PIL import Image

    from leapgen.pipelines import Pipeline
    from leapgen.pipelines.spectra_files import read_spectra

    monkeypatch.setenv("HOME", str(tmp_path))
    word = np.full((40, 120), 255, np.uint8)
    word[12:28, 20:100:6] = 0
    Image.fromarray(word).save(tmp_path / "word.png")
    pipe = Pipeline.from_pretrained("leapgen/ocr-en")
    out = pipe(["~/word.png", "http://example.com/x.png"], layout="word")
    assert out.errors[0] is None and out.texts[0] == pipe(word, layout="word").texts[0]
    assert "is a URL" in out.errors[1] and "http://example.com/x.png" in out.errors[1]
    (tmp_path / "a.json").write_text('{"mz": [100.0, 200.0], "intensity": [1.0, 2.0], "precursor_mz": 400.0, "charge": 2}')
    assert len(read_spectra("~/a.json")) == 1


def test_cli_demo_on_a_port_in_use_is_one_line_before_anything_loads(capsys):
    """``leapgen demo --port N`` with N taken loaded the pipelines, then died in Gradio's launch with an
    OSError traceback; now the port is tried first: one ``error:`` line, exit status 2."""
    import socket

    from leapgen.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["demo", "--port", str(port), "--pipeline", "leapgen/text-code"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: cannot serve the demo on 127.0.0.1:") and err.count("\n") == 1
    assert "pass another --port" in err


def test_acceptance_map_takes_python_indices(image_pipe):
    """``out.acceptance_map(-1)`` (the last image, as a list) was 'out of range' and a non-integer
    index a raw TypeError; now negative and numpy indices work and anything else is an InputError."""
    import numpy as np

    from leapgen.errors import InputError

    out = image_pipe(["faces", "flags"], sampler="speculative", seed=0)
    last = out.acceptance_map(-1)
    assert last.tobytes() == out.acceptance_map(1).tobytes() == out.acceptance_map(np.int64(1)).tobytes()
    for bad in ("a", 1.0, True):
        with pytest.raises(InputError, match="image index"):
            out.acceptance_map(bad)
    with pytest.raises(InputError, match="out of range"):
        out.acceptance_map(-3)


def test_diffusion_text_pipeline_says_a_chat_is_a_chat():
    """A chat (``[{"role": "user", "content": ...}]``, what the causal text pipeline renders with its
    template) was taken as a list of prompts: "prompt 0 is a dict, expected a string"; now it is named
    a chat that this pipeline cannot render, and in a batch it fails alone."""
    from leapgen.errors import InputError
    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/text-code-diffusion")
    chat = [{"role": "user", "content": "write a function"}]
    with pytest.raises(InputError, match=r"prompt 0 is a chat \(a list of messages\).*pass the text to continue"):
        pipe(chat, max_new_tokens=4)
    out = pipe([chat, "def f():"], max_new_tokens=4, seed=0)
    assert out.texts[0] is None and "is a chat" in out.errors[0] and out.errors[1] is None


def test_molecule_smiles_from_a_numpy_column(molecule_pipe):
    """``molecules=df["smiles"].values`` / ``fragments=np.array([...])`` (1-D numpy arrays of SMILES)
    were refused as 'not a list'; now their entries are the molecules (a bad one still fails alone)."""
    import numpy as np

    out = molecule_pipe(task="lead_opt", molecules=np.array(["CCOc1ccccc1", "C1CC(("]), num_samples=2, num_rounds=1,
                        seed=0)
    assert out.errors[0] is None and "not a valid SMILES" in out.errors[1]
    link = molecule_pipe(num_samples=2, task="linker", fragments=np.array(["[*]c1ccccc1", "[*]C1CCNCC1"]), seed=0)
    ref = molecule_pipe(num_samples=2, task="linker", fragments=["[*]c1ccccc1", "[*]C1CCNCC1"], seed=0)
    assert link.smiles == ref.smiles


def test_ocr_a_4d_batch_array_says_to_pass_a_list():
    """A [N, H, W, C] batch array (a data loader's) was refused with only 'must be [H, W] or [H, W, 1|3|4]';
    the message now says what to pass instead."""
    import numpy as np

    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/ocr-en")
    out = pipe(np.full((2, 40, 120, 3), 255, np.uint8))  # one item, failed alone (the OCR pipeline's rule)
    assert out.texts == [None] and "a batch of images is a list: pass list(array)" in out.errors[0]


def test_cli_image_prompt_minus_one_is_a_class_id(tiny_image_dir, tmp_path, capsys):
    """``leapgen generate image -- -1`` (or "+2") was read as the TEXT "-1" (only "3" counted as a class
    id), which the shipped model reads as its word '1' and drew an image of it; now a signed whole
    number is a class id, so -1 is refused as out of range."""
    from leapgen.cli import main

    rc = main(["generate", "image", "--pipeline", str(tiny_image_dir), "--out", str(tmp_path / "o"), "-1"])
    assert rc == 2 and "class id -1 is out of range" in capsys.readouterr().err
    assert main(["generate", "image", "--pipeline", str(tiny_image_dir), "--out", str(tmp_path / "o"), " +2 "]) == 0
    assert (tmp_path / "o" / "class-2_ar_0.png").is_file()


def test_peptide_tuple_of_the_wrong_length_says_its_length():
    """A 3-tuple spectrum (the charge forgotten) was refused with 'or a 4-tuple, got tuple', which
    reads as a contradiction; now the message names the fields and the length it got."""
    import numpy as np

    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained("leapgen/peptide")
    mz, inten = np.array([100.1, 200.2, 300.3]), np.ones(3)
    out = pipe([(mz, inten, 400.0), (mz, inten, 400.0, 2)])
    assert out.sequences[0] is None and "got a tuple of 3" in out.errors[0] and "precursor_mz, charge)" in out.errors[0]
    assert out.errors[1] is None


def test_all_items_bad_message_has_no_doubled_punctuation():
    """'no prompt could be used: prompt 0 is a int, expected a string.; prompt 1 ...' read '.;' between
    the reasons; now each reason's full stop is dropped before the join and one ends the message."""
    from leapgen.errors import InputError
    from leapgen.pipelines.items import check_items

    def refuse(i, p):
        raise InputError(f"prompt {i} is bad.")

    with pytest.raises(InputError) as err:
        check_items(["a", "b"], refuse)
    assert str(err.value) == "no prompt could be used: prompt 0 is bad; prompt 1 is bad."


def test_cli_unknown_flag_names_the_subcommand_help(capsys):
    """An unknown flag after a subcommand printed the top-level usage ('leapgen [-h] [--version]
    COMMAND ...') only; the error now points at the subcommand's own --help."""
    from leapgen.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["generate", "text", "def f():", "--bogus-flag"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --bogus-flag (see `leapgen generate text --help`" in capsys.readouterr().err


def test_image_prompts_as_emoji_and_plurals(image_pipe):
    """The emoji model was trained on the emoji's Unicode names, yet the emoji itself ('🍎', '🇫🇷') was
    'no word the model knows', and so were a class in the singular ('animal') and a plural word
    ('dogs'); now emoji are read as their names, and a class or words with a plural 's' added or
    dropped are tried before the prompt is refused (a prompt with known words is read as before)."""
    kw = {"sampler": "ar", "seed": 0, "temperature": 0.0, "cfg_scale": 1.0}
    out = image_pipe(["🍎", "🇫🇷", "animal", "dogs", "zzzqqq"], **kw)
    assert out.errors[:4] == [None] * 4 and "no word the model knows" in out.errors[4]
    ref = image_pipe(["red apple", "flag: fr", "animals", "dog"], **kw)
    assert torch.equal(out.token_ids[:4], ref.token_ids)
    assert out.prompts[:4] == ["🍎", "🇫🇷", "animal", "dogs"]  # as given
