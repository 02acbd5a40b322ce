"""The lean inference forward of nn.TransformerEncoder stacks equals the module's own."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from leapgen.models.torch_lean import encoder_forward, padding_bias

torch.set_num_threads(1)


def stack(activation: str = "gelu", norm_first: bool = True, final_norm: bool = True, seed: int = 0) -> nn.TransformerEncoder:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True, norm_first=norm_first, activation=activation)
    return nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(32) if final_norm else None, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("final_norm", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_forward_equals_the_module(activation, final_norm, padded):
    enc = stack(activation, final_norm=final_norm)
    x = torch.randn(3, 17, 32, generator=torch.Generator().manual_seed(1))
    pad = None
    if padded:
        pad = torch.zeros(3, 17, dtype=torch.bool)
        pad[0, 12:] = True
        pad[2, 5:] = True
    with torch.inference_mode():
        want = enc(x, src_key_padding_mask=pad)
        got = encoder_forward(enc, x, pad)
    real = torch.ones(3, 17, dtype=torch.bool) if pad is None else ~pad
    assert got.shape == want.shape
    assert torch.allclose(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_rows_do_not_see_each_others_padding():
    enc = stack()
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(2))
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 4:] = True
    with torch.inference_mode():
        both = encoder_forward(enc, x, pad)
        alone = encoder_forward(enc, x[1:, :4], None)
    assert torch.allclose(both[1, :4], alone[0], atol=1e-5)


def test_training_mode_and_post_norm_layers_run_the_module():
    enc = stack(norm_first=False)
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        assert torch.allclose(encoder_forward(enc, x), enc(x), atol=1e-6)
    enc = stack().train()
    torch.manual_seed(4)
    a = encoder_forward(enc, x)
    torch.manual_seed(4)
    b = enc(x)
    assert torch.equal(a, b)  # the same dropout draws: the module itself ran
    assert a.requires_grad


def test_padding_bias_is_finite_and_none_without_padding():
    like = torch.zeros(1)
    assert padding_bias(torch.ones(2, 4, dtype=torch.bool), like) is None
    bias = padding_bias(torch.tensor([[True, False], [False, False]]), like)
    assert bias.shape == (2, 1, 1, 2) and bool(torch.isfinite(bias).all()) and bias[0, 0, 0, 0] == 0 and bias[0, 0, 0, 1] < -1e30


@pytest.mark.parametrize("kind", ["float", "bool"])
def test_one_layer_with_an_attention_mask_and_padding_equals_the_module(kind):
    from leapgen.models.torch_lean import encoder_layer_forward

    layer = stack().layers[0]
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(5))
    near = (torch.arange(10)[:, None] - torch.arange(10)[None]).abs() <= 2
    mask = torch.zeros(10, 10).masked_fill(~near, float("-inf")) if kind == "float" else ~near  # module conventions
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    with torch.inference_mode():
        for kp in (None, pad):
            want = layer(x, src_mask=mask, src_key_padding_mask=kp)
            got = encoder_layer_forward(layer, x, mask, kp)
            real = torch.ones(2, 10, dtype=torch.bool) if kp is None else ~kp
            assert torch.allclose(got[real], want[real], atol=1e-5, rtol=1e-5)


def decoder_stack(norm_first: bool = True, final_norm: bool = False, seed: int = 0) -> nn.TransformerDecoder:
    torch.manual_seed(seed)
    layer = nn.TransformerDecoderLayer(32, 4, 64, 0.1, batch_first=True, norm_first=norm_first)
    return nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(32) if final_norm else None).eval()


@pytest.mark.parametrize("final_norm", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_decoder_forward_equals_the_module(final_norm, padded):
    from leapgen.models.torch_lean import decoder_forward

    dec = decoder_stack(final_norm=final_norm)
    g = torch.Generator().manual_seed(6)
    x, mem = torch.randn(3, 7, 32, generator=g), torch.randn(3, 11, 32, generator=g)
    tpad = mpad = None
    if padded:
        tpad, mpad = torch.zeros(3, 7, dtype=torch.bool), torch.zeros(3, 11, dtype=torch.bool)
        tpad[1, 4:] = mpad[1, 6:] = mpad[2, 2:] = True
    with torch.inference_mode():
        want = dec(x, mem, tgt_key_padding_mask=tpad, memory_key_padding_mask=mpad)
        got = decoder_forward(dec, x, mem, tpad, mpad)
        alone = decoder_forward(dec, x[1:2, :4], mem[1:2, :6])  # a padded row decoded alone
    real = torch.ones(3, 7, dtype=torch.bool) if tpad is None else ~tpad
    assert got.shape == want.shape
    assert torch.allclose(got[real], want[real], atol=1e-5, rtol=1e-5)
    assert bool(torch.isfinite(got).all())
    if padded:
        assert torch.allclose(got[1, :4], alone[0], atol=1e-5)


def test_decoder_forward_runs_the_module_in_training_and_for_post_norm_layers():
    from leapgen.models.torch_lean import decoder_forward

    g = torch.Generator().manual_seed(7)
    x, mem = torch.randn(2, 5, 32, generator=g), torch.randn(2, 8, 32, generator=g)
    post = decoder_stack(norm_first=False)
    with torch.inference_mode():
        assert torch.equal(decoder_forward(post, x, mem), post(x, mem))
    dec = decoder_stack().train()
    torch.manual_seed(8)
    a = decoder_forward(dec, x, mem)
    torch.manual_seed(8)
    assert torch.equal(a, dec(x, mem)) and a.requires_grad  # the same dropout draws: the module ran


def test_attention_with_extra_key_bias_runs_the_module():
    """add_bias_kv / add_zero_attn change the attention maths: the lean path must not take them."""
    from leapgen.models.torch_lean import decoder_forward

    d = 32
    x = torch.randn(2, 6, d, generator=torch.Generator().manual_seed(9))
    mem = torch.randn(2, 7, d, generator=torch.Generator().manual_seed(10))
    for extra in ({"add_zero_attn": True}, {"add_bias_kv": True}):
        dec = decoder_stack()
        dec.layers[0].multihead_attn = nn.MultiheadAttention(d, 4, batch_first=True, **extra).eval()
        with torch.inference_mode():
            assert torch.allclose(decoder_forward(dec, x, mem), dec(x, mem), atol=1e-6), extra
