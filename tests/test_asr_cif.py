"""CIF (leapgen.models.cif): the loop and cumsum forms agree, the fired count follows floor(sum alpha)
with the 0.45 tail, padding never changes a row, and a hand-computed case matches FunASR's rule."""

from __future__ import annotations

import math

import pytest
import torch

from leapgen.errors import InputError
from leapgen.models import cif
from leapgen.models.cif import add_tail, cif_cumsum, cif_loop


def _case(seed: int, b: int = 4, t: int = 30, d: int = 6):
    g = torch.Generator().manual_seed(seed)
    t = int(torch.randint(1, t, (1,), generator=g))
    h = torch.randn(b, t, d, generator=g, dtype=torch.float64)
    a = torch.rand(b, t, generator=g, dtype=torch.float64) * 0.95
    a[1, t // 2 :] = 0.0  # a padded row
    return h, a


def test_public_signature():
    h, a = _case(0)
    fired, frames = cif(h, a)
    assert fired.shape[:2] == frames.shape and fired.shape[0] == 4 and fired.shape[2] == 6
    assert fired.shape[1] == int(torch.round(a.sum(-1)).max())


@pytest.mark.parametrize("seed", range(60))
def test_loop_and_cumsum_forms_agree(seed):
    h, a = _case(seed)
    f_loop, fr_loop = cif_loop(h, a)
    f_sum, fr_sum = cif(h, a)
    assert torch.equal(fr_loop, fr_sum)
    assert torch.allclose(f_loop, f_sum, atol=1e-9)


def test_hand_computed_case():
    h = torch.tensor([[[1.0], [2.0], [4.0], [8.0]]])
    a = torch.tensor([[0.6, 0.6, 0.6, 0.6]])
    fired, frames = cif(h, a)
    # token 1 = 0.6*1 + 0.4*2 ; fires at frame 1, remainder 0.2*2 ; token 2 = 0.4 + 0.6*4 + ... fires at 3
    # integrate: 0.6, 1.2 -> fire (0.2), 0.8, 1.4 -> fire (0.4) ; token 2 = 0.2*2 + 0.6*4 + 0.2*8
    assert frames.tolist() == [[1, 3]]
    assert torch.allclose(fired[0, :, 0], torch.tensor([0.6 + 0.8, 0.4 + 2.4 + 1.6]))
    floop, _ = cif_loop(h, a)
    assert torch.allclose(floop, fired)


@pytest.mark.parametrize("seed", range(20))
def test_fired_count_is_floor_of_sum_with_tail(seed):
    h, a = _case(seed)
    mask = (a > 0).double()
    mask[:, :1] = 1
    h2, a2, num = add_tail(h, a * mask, mask)
    assert a2.shape[1] == a.shape[1] + 1
    expected = torch.floor((a * mask).sum(-1) + 0.45)
    assert torch.equal(num.double(), expected)
    _, frames = cif(h2, a2)
    fired = (frames >= 0).sum(-1)
    # every row fires exactly floor(sum + tail) times (within the output width)
    assert torch.equal(fired, torch.minimum(num, torch.tensor(frames.shape[1])))


def test_padding_never_changes_a_row():
    g = torch.Generator().manual_seed(3)
    rows = [(torch.randn(n, 5, generator=g), torch.rand(n, generator=g) * 0.9) for n in (3, 17, 9, 25, 1, 12, 20, 7)]
    t = max(n for n, _ in [(r[0].shape[0], 0) for r in rows])
    h = torch.zeros(8, t, 5)
    a = torch.zeros(8, t)
    for i, (hi, ai) in enumerate(rows):
        h[i, : hi.shape[0]], a[i, : ai.shape[0]] = hi, ai
        h[i, hi.shape[0] :] = 99.0  # garbage in padded frames must not matter (alpha = 0 there)
    fired, frames = cif(h, a)
    for i, (hi, ai) in enumerate(rows):
        f1, fr1 = cif(hi[None], ai[None])
        k = f1.shape[1]
        n_fire = int((fr1 >= 0).sum())
        assert torch.allclose(fired[i, :n_fire], f1[0, :n_fire], atol=1e-5)
        assert fired[i, n_fire:].abs().max() == 0 if fired.shape[1] > n_fire else True
        assert frames[i, :k].tolist()[:n_fire] == fr1[0].tolist()[:n_fire]


def test_alpha_of_one_or_more_follows_the_loop():
    h = torch.randn(1, 4, 3)
    a = torch.tensor([[2.5, 0.0, 0.2, 0.9]])
    f, fr = cif(h, a)
    fl, frl = cif_loop(h, a)
    assert torch.equal(fr, frl) and torch.allclose(f, fl)
    assert fr.tolist()[0] == [0, 1, 3, -1]  # the loop fires again on the next frame
    fc, frc = cif_cumsum(h, a)  # the cumsum form fires once per frame (training only)
    assert frc.tolist()[0] == [0, 3, -1, -1]


def test_threshold_other_than_one_uses_the_loop():
    h, a = _case(5)
    f, fr = cif(h, a, threshold=0.8)
    fl, frl = cif_loop(h, a, threshold=0.8)
    assert torch.equal(fr, frl) and torch.allclose(f, fl)


def test_bad_inputs():
    with pytest.raises(InputError, match="hidden"):
        cif(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(InputError, match=">= 0"):
        cif(torch.zeros(1, 3, 2), -torch.ones(1, 3))


def test_gradients_flow_through_the_cumsum_form():
    h = torch.randn(2, 10, 4, requires_grad=True)
    a = (torch.rand(2, 10) * 0.9).requires_grad_()
    f, _ = cif_cumsum(h, a * 2)
    f.sum().backward()
    assert h.grad is not None and a.grad is not None and math.isfinite(float(a.grad.sum()))
