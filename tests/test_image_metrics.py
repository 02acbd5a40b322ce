"""Image metrics: Fréchet distance against closed forms, the feature classifier, class accuracy and
the token NLL against a manual computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from leapgen.bench.image_metrics import (
    EmojiFeatureClassifier,
    class_accuracy,
    fid,
    fid_emoji,
    frechet_distance,
    images_to_tensor,
    load_feature_classifier,
    token_nll,
)
from leapgen.errors import AssetNotFoundError, InputError
from leapgen.train.feature_classifier import train_feature_classifier


def _random_spd(d: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.normal(size=(d, d))
    return a @ a.T + 0.1 * np.eye(d)


# ============================================================================== Fréchet distance


def test_frechet_closed_form_commuting() -> None:
    """Diagonal covariances: FD = |mu1 - mu2|^2 + sum (sqrt(a_i) - sqrt(b_i))^2."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.1, 4, 6), rng.uniform(0.1, 4, 6)
    mu1, mu2 = rng.normal(size=6), rng.normal(size=6)
    expect = float(((mu1 - mu2) ** 2).sum() + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum())
    assert frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expect, rel=1e-10)


def test_frechet_closed_form_general() -> None:
    """Non-commuting covariances: Tr sqrt(S1 S2) from scipy's sqrtm; and the 1-D formula."""
    from scipy import linalg

    rng = np.random.default_rng(1)
    s1, s2 = _random_spd(5, rng), _random_spd(5, rng)
    mu1, mu2 = rng.normal(size=5), rng.normal(size=5)
    expect = float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2) - 2 * np.trace(linalg.sqrtm(s1 @ s2).real))
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expect, rel=1e-8)
    # 1-D Gaussians: (m1 - m2)^2 + (sd1 - sd2)^2
    assert frechet_distance([1.0], [[4.0]], [3.0], [[9.0]]) == pytest.approx(4.0 + 1.0)


def test_frechet_singular_covariances() -> None:
    """Rank-deficient covariances (fewer samples than dimensions) stay finite and >= 0."""
    rng = np.random.default_rng(2)
    fa, fb = rng.normal(size=(5, 16)), rng.normal(size=(5, 16)) + 0.5
    d = fid(fa, fb)
    assert math.isfinite(d) and d > 0
    assert fid(fa, fa) == pytest.approx(0.0, abs=1e-8)


def test_fid_symmetric_zero_for_identical_and_converges_to_closed_form() -> None:
    rng = np.random.default_rng(3)
    s1, s2 = _random_spd(4, rng) / 4, _random_spd(4, rng) / 4
    mu1, mu2 = np.zeros(4), np.full(4, 0.5)
    fa = rng.multivariate_normal(mu1, s1, size=20000)
    fb = rng.multivariate_normal(mu2, s2, size=20000)
    assert fid(fa, fb) == pytest.approx(fid(fb, fa), rel=1e-9)
    assert fid(fa, fa) == pytest.approx(0.0, abs=1e-9)
    assert fid(torch.from_numpy(fa), torch.from_numpy(fa.copy())) == pytest.approx(0.0, abs=1e-9)
    # the sample estimate approaches the population value
    assert fid(fa, fb) == pytest.approx(frechet_distance(mu1, s1, mu2, s2), rel=0.05)
    # and a shifted copy gives exactly the squared shift
    assert fid(fa, fa + 0.3) == pytest.approx(4 * 0.09, rel=1e-9)


def test_fid_errors() -> None:
    with pytest.raises(InputError, match="at least 2"):
        fid(np.zeros((1, 3)), np.zeros((4, 3)))
    with pytest.raises(InputError, match="dimensions differ"):
        fid(np.random.rand(4, 3), np.random.rand(4, 2))
    with pytest.raises(InputError, match="NaN"):
        fid(np.full((4, 3), np.nan), np.random.rand(4, 3))


# ============================================================================== classifier


class _Synthetic:
    """Four classes of shapes (disc / square) x colours (red / blue) on white, random size/position."""

    class_names = ("red disc", "red square", "blue disc", "blue square")

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.labels = torch.from_numpy(rng.integers(0, 4, n))
        self.images = np.full((n, 64, 64, 3), 255, np.uint8)
        yy, xx = np.mgrid[:64, :64]
        for i, c in enumerate(self.labels.tolist()):
            r = rng.integers(10, 18)
            cx, cy = rng.integers(22, 42, 2)
            disc = (xx - cx) ** 2 + (yy - cy) ** 2 < r * r
            square = (abs(xx - cx) < r) & (abs(yy - cy) < r)
            self.images[i][disc if c % 2 == 0 else square] = (220, 30, 30) if c < 2 else (30, 30, 220)
        self.images = torch.from_numpy(self.images)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.manual_seed(0)
    ds = _Synthetic(320)
    out = tmp_path_factory.mktemp("pipe") / "feature_classifier"
    metrics = train_feature_classifier(
        ds, out, epochs=10, seed=0, batch_size=32, channels=(8, 16, 16, 16), feature_dim=16, progress=False
    )
    return ds, out, metrics


def test_classifier_trains_above_chance_and_round_trips(trained) -> None:
    ds, out, metrics = trained
    assert metrics["n_heldout"] > 0 and metrics["n_train"] + metrics["n_heldout"] == len(ds.labels)
    assert metrics["chance_uniform"] == pytest.approx(0.25)
    # clearly above chance on held-out images it never saw
    assert metrics["heldout_accuracy"] >= 0.6, metrics
    clf = load_feature_classifier(out)
    assert clf.class_names == ds.class_names
    assert clf.metrics["heldout_accuracy"] == pytest.approx(metrics["heldout_accuracy"])
    # the loaded model (fp16 weights) predicts what the trained one predicted after its fp16 round trip
    assert torch.equal(clf.predict(ds.images[:40]), metrics["model"].predict(ds.images[:40]))
    f = clf.features(ds.images[:10])
    assert f.shape == (10, 16) and f.dtype == torch.float64
    # a pipeline folder holding feature_classifier/ also resolves
    via_pipe = load_feature_classifier(out.parent)
    assert isinstance(via_pipe, EmojiFeatureClassifier)
    assert torch.equal(via_pipe.predict(ds.images[:10]), clf.predict(ds.images[:10]))


def test_class_accuracy_and_fid_emoji(trained) -> None:
    ds, out, metrics = trained
    clf = metrics["model"]
    x, y = ds.images, ds.labels
    pred = clf.predict(x)
    acc = class_accuracy(x, y, clf)
    assert acc == pytest.approx(float((pred == y).float().mean()))
    # labels shifted by one class are wrong wherever the prediction was right
    assert class_accuracy(x, (y + 1) % 4, clf) <= 1 - acc + 1e-9
    # PIL input gives the same answer as arrays
    from PIL import Image

    pil = [Image.fromarray(a.numpy()) for a in x[:20]]
    assert class_accuracy(pil, y[:20], clf) == class_accuracy(x[:20], y[:20], clf)
    with pytest.raises(InputError):
        class_accuracy(x[:5], y[:4], clf)
    # FID (emoji features): zero for identical sets, larger for a set of another class than for a
    # disjoint set of the same mixture
    a, b = x[:100], x[100:200]
    assert fid_emoji(a, a, clf) == pytest.approx(0.0, abs=1e-6)
    same = fid_emoji(a, b, clf)
    red_only = x[200:][y[200:] < 2][:60]
    assert fid_emoji(red_only, b, clf) > same


def test_load_feature_classifier_missing(tmp_path) -> None:
    with pytest.raises(AssetNotFoundError, match="train"):
        load_feature_classifier(tmp_path)


def test_images_to_tensor_shapes() -> None:
    x = images_to_tensor(np.zeros((2, 32, 32, 3), np.uint8))
    assert x.shape == (2, 3, 64, 64)
    with pytest.raises(InputError):
        images_to_tensor(np.zeros((2, 32, 32), np.uint8))
    with pytest.raises(InputError):
        images_to_tensor([])


# ============================================================================== token NLL


def test_token_nll_matches_manual(target_model) -> None:
    from leapgen.models import HFCausalLM

    lm = HFCausalLM(target_model)
    g = torch.Generator().manual_seed(0)
    prompts = [[1, 2], [3, 4], [5, 6, 7]]
    toks = [torch.randint(0, 48, (6,), generator=g).tolist() for _ in prompts]
    before = lm.forwards
    got = token_nll(lm, prompts, toks)
    assert lm.forwards == before  # the counter is restored
    # manual: one full forward of the HF model per row, log-softmax, pick the targets
    total, n = 0.0, 0
    with torch.no_grad():
        for p, t in zip(prompts, toks):
            seq = torch.tensor([p + t])
            logits = target_model(seq).logits[0].double()
            lp = torch.log_softmax(logits, -1)
            for j, tok in enumerate(t):
                total -= float(lp[len(p) - 1 + j, tok])
                n += 1
    assert got == pytest.approx(total / n, rel=1e-5)
    # the model's own greedy tokens have a lower NLL than random ones
    greedy = []
    with torch.no_grad():
        for p in prompts:
            seq = list(p)
            for _ in range(6):
                seq.append(int(target_model(torch.tensor([seq])).logits[0, -1].argmax()))
            greedy.append(seq[len(p) :])
    assert token_nll(lm, prompts, greedy) < got
    with pytest.raises(InputError):
        token_nll(lm, prompts[:2], toks)


def test_token_nll_disables_guidance(target_model) -> None:
    """A model with a ``cfg_scale`` attribute is scored at cfg_scale=1 (conditional logits) and restored."""
    from leapgen.models import HFCausalLM

    class Guided(HFCausalLM):
        cfg_scale = 4.0
        seen: list[float] = []

        def _forward(self, tokens, cache, position_ids, mask, cond):
            self.seen.append(self.cfg_scale)
            return super()._forward(tokens, cache, position_ids, mask, cond)

    lm = Guided(target_model)
    token_nll(lm, [[1, 2]], [[3, 4, 5]])
    assert lm.seen == [1.0] and lm.cfg_scale == 4.0


def test_token_nll_on_llamagen_uses_conditional_logits() -> None:
    """On the image GPT with a guided condition (cfg 3), token_nll equals the NLL of the plain
    teacher-forced conditional logits (``training_logits``), and the condition is left as it was."""
    from leapgen.models.condition import ClassCondition, Guidance
    from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
    from leapgen.models.llamagen_lm import LlamaGenLM

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=16, dim=32, n_layer=2, n_head=2, multiple_of=16, num_classes=3, grid_size=4,
                    token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0)
    gpt = LlamaGenGPT(cfg).eval()
    with torch.no_grad():
        gpt.output.weight.normal_(0.0, 0.5)
    lm = LlamaGenLM(gpt)
    labels = [0, 1, 2, 1]
    cond = ClassCondition(labels=torch.tensor(labels), guidance=Guidance(3.0))
    codes = torch.randint(0, 16, (4, 16), generator=torch.Generator().manual_seed(1))
    got = token_nll(lm, [[]] * 4, codes, cond=cond)
    assert cond.guidance.scale == 3.0
    with torch.no_grad():
        logits = gpt.training_logits(torch.tensor([gpt.condition_ids(c) for c in labels]), codes).double()
    manual = float(torch.nn.functional.cross_entropy(logits.reshape(-1, 16), codes.reshape(-1)))
    assert got == pytest.approx(manual, rel=1e-5)
    # the guided logits would give another number (so the test can tell the two apart)
    cache = lm.new_cache(4, cond)
    p = lm.condition_slots(cond)
    guided = lm(torch.cat([torch.zeros(4, p, dtype=torch.long), codes[:, :-1]], 1), cache)[:, p - 1 :].double()
    assert abs(float(torch.nn.functional.cross_entropy(guided.reshape(-1, 16), codes.reshape(-1))) - manual) > 1e-3
