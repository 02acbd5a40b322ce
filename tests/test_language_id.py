"""The spoken language check of the S2ST pipeline (issue #16's bad-input rule): the ``language-id``
recipe on a corpus the test synthesises, and the shipped identifier refusing a German clip while
the other items of the batch still translate. Every clip comes from the repository or from
espeak-ng (CI's system deps), never from the corpus cache."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from leapgen.errors import ConfigError, InputError
from leapgen.models.language_id import LanguageID, LanguageIDConfig

ASSETS = Path(__file__).resolve().parents[1] / "assets"
S2ST = ASSETS / "s2st-en-de"

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng (make system-deps)")


def say(text: str, voice: str, path: Path) -> Path:
    """``text`` spoken by espeak-ng ``voice``, written as 16 kHz mono wav at ``path``."""
    import soundfile as sf
    import soxr

    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), text], check=True, capture_output=True)
    wave, rate = sf.read(str(raw), dtype="float32")
    sf.write(str(path), soxr.resample(wave, rate, 16000).astype(np.float32), 16000)
    raw.unlink()
    return path


def _corpus(root: Path, rows: dict[str, list[tuple[str, str]]]) -> Path:
    """A speech-en/-de style corpus: ``<split>.jsonl`` rows (``audio`` relative, ``voice``) per split."""
    for split, items in rows.items():
        (root / split).mkdir(parents=True)
        lines = []
        for k, (text, voice) in enumerate(items):
            say(text, voice, root / split / f"{k}.wav")
            lines.append(json.dumps({"audio": f"{split}/{k}.wav", "text": text, "voice": voice}))
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_config_round_trip_and_probabilities(tmp_path):
    torch.manual_seed(0)
    lid = LanguageID(LanguageIDConfig(languages=("en", "de", "fr"))).eval()
    lid.save_pretrained(tmp_path)
    back = LanguageID.from_pretrained(tmp_path)
    assert back.languages == ("en", "de", "fr")
    waves = [np.random.default_rng(i).standard_normal(16000 * (i + 1)).astype(np.float32) * 0.1 for i in range(2)]
    p = back.probabilities(waves)
    assert p.shape == (2, 3) and torch.allclose(p.sum(-1), torch.ones(2))
    assert torch.allclose(p, lid.probabilities(waves), atol=1e-5)
    with pytest.raises(ConfigError):
        LanguageID(LanguageIDConfig(languages=("en",)))


@needs_espeak
def test_recipe_smoke_run_gives_a_loadable_component(tmp_path):
    from leapgen.train import run_recipe

    en = _corpus(tmp_path / "en", {"train": [("the value is returned", "en-us"), ("open the file", "en-gb+f2")],
                                   "test_unseen_voice": [("close the door", "en-gb-x-rp+f5")]})
    de = _corpus(tmp_path / "de", {"train": [("der tisch ist gelb", "de"), ("ich sehe zwei hunde", "de+m2")],
                                   "test_seen": [("wo ist die schule", "de+m5")]})
    m = run_recipe("language-id", out_dir=str(tmp_path / "lid"), en_corpus=str(en), de_corpus=str(de),
                   s2st_corpus=str(tmp_path / "no-s2st"), minutes=0.05, max_steps=3, batch_size=4)
    assert m["steps"] == 3 and m["train_clips"]["speech-en train"] == 2 and m["train_clips"]["speech-de train"] == 2
    assert set(m["heldout"]) == {"speech-en test_unseen_voice", "speech-de test_seen held-out voices"}
    saved = json.loads((tmp_path / "lid" / "train_metrics.json").read_text())
    assert saved["heldout"]["speech-en test_unseen_voice"]["en"]["clips"] == 1
    lid = LanguageID.from_pretrained(tmp_path / "lid")
    assert lid.languages == ("en", "de")
    assert lid.probabilities([np.zeros(16000, np.float32) + 0.01]).shape == (1, 2)
    with pytest.raises(ConfigError, match="no de training clips"):
        run_recipe("language-id", out_dir=str(tmp_path / "lid2"), en_corpus=str(en), de_corpus=str(tmp_path / "none"),
                   s2st_corpus=str(tmp_path / "no-s2st"), minutes=0.01, max_steps=1)


@pytest.fixture(scope="module")
def shipped():
    from leapgen.pipelines import Pipeline

    pipe = Pipeline.from_pretrained(S2ST)
    assert pipe.language_id is not None, "assets/s2st-en-de ships a language_id component"
    return pipe


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng (make system-deps)")
    d = tmp_path_factory.mktemp("clips")
    return {"de": str(say("ich sehe die schwarze lampe heute", "de", d / "de.wav")),
            "de_unseen_words": str(say("der hund spielt morgen mit dem roten ball", "de+f3", d / "de2.wav")),
            "en_unseen_voice": str(say("where are the green chairs today", "en-gb-x-rp+f5", d / "en.wav"))}


def test_german_clips_are_refused_while_the_batch_translates(shipped, clips):
    batch = [clips["de"], str(S2ST / "examples" / "clip0.wav"), clips["de_unseen_words"],
             str(ASSETS / "asr-en" / "examples" / "clip.wav"), clips["en_unseen_voice"]]
    out = shipped(batch, vocode=False)
    for i in (0, 2):
        assert out.errors[i] and "German" in out.errors[i] and "check_language=False" in out.errors[i], out.errors[i]
        assert out.texts[i] is None and out.mels[i] is None
    for i in (1, 3, 4):
        assert out.errors[i] is None and out.texts[i], (i, out.errors[i])
    assert out.stats.extra["languages"] == ["de", "en", "de", "en", "en"]


def test_the_override_translates_german(shipped, clips):
    for kwargs in (dict(check_language=False), dict(language_threshold=0.0)):
        out = shipped(clips["de"], vocode=False, **kwargs)
        assert out.errors == [None] and out.texts[0], kwargs
    assert shipped(clips["de"], vocode=False, check_language=False).stats.extra["languages"] == [None]


@pytest.mark.parametrize("kwargs", [dict(language_threshold=1.5), dict(language_threshold="high"),
                                    dict(check_language="yes")])
def test_bad_language_arguments_are_refused(shipped, kwargs):
    with pytest.raises(InputError, match=next(iter(kwargs))):
        shipped(str(S2ST / "examples" / "clip0.wav"), vocode=False, **kwargs)


def test_without_the_component_nothing_is_checked(shipped, clips, caplog):
    from leapgen.pipelines import S2STPipeline

    with caplog.at_level("INFO", logger="leapgen.pipelines.s2st"):
        bare = S2STPipeline(model=shipped.model, frontend=shipped.frontend, vocab=shipped.vocab, mel=shipped.mel)
    assert "not checked" in caplog.text
    out = bare(clips["de"], vocode=False)
    assert out.errors == [None] and out.stats.extra["languages"] == [None]


def test_cli_reports_the_refusal_and_takes_no_language_check(clips, tmp_path, capsys):
    from leapgen.cli import main

    assert main(["translate", clips["de"], "--out-dir", str(tmp_path)]) == 1
    assert "ERROR: item 0: this sounds like German" in capsys.readouterr().out
    assert main(["translate", clips["de"], "--out-dir", str(tmp_path), "--no-language-check"]) == 0
    assert "ERROR" not in capsys.readouterr().out
