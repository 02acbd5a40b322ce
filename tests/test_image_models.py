"""LlamaGen VQ tokenizer and GPT: shapes, reference key names, 2D RoPE, KV-cache rollback with and
without classifier-free guidance, multi-token forwards, CFG mixing and its cutoff, and the typed
class/text condition (ClassCondition) that replaces the old out-of-vocabulary prefix ids."""

from __future__ import annotations

import pytest
import torch

from leapgen.errors import ConfigError, InputError
from leapgen.models.condition import NULL_LABEL, ClassCondition, EncoderState, Guidance
from leapgen.models.guidance import cfg_logits
from leapgen.models.llamagen import TEXT_NULL, GPTConfig, LlamaGenGPT, precompute_freqs_cis_2d
from leapgen.models.llamagen_lm import LlamaGenLM
from leapgen.tokenizers.vq_image import VQConfig, VQModel

TINY_VQ = dict(codebook_size=32, codebook_embed_dim=4, ch=8, ch_mult=(1, 2, 2), num_res_blocks=1, z_channels=8,
               norm_groups=4, image_size=16)


def tiny_gpt(text: bool = True, seed: int = 0, cond_qk_zero: bool = False, **kw) -> LlamaGenGPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=32, dim=32, n_layer=2, n_head=4, n_kv_head=2, multiple_of=16, num_classes=3, grid_size=4,
               token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0, cond_qk_zero=cond_qk_zero)
    if text:
        cfg.update(text_vocab_size=12, text_len=3, text_layers=1)
    cfg.update(kw)
    g = LlamaGenGPT(GPTConfig(**cfg))
    torch.nn.init.normal_(g.output.weight, std=0.3)  # the reference zero-initialises the head
    return g.eval()


def conds(g: LlamaGenGPT, scale: float = 1.0, interval: int = -1) -> ClassCondition:
    """Two rows: class 1 (null text) and, for a text model, the text [3, 4] without a class
    (else class 2)."""
    if g.config.text_len:
        return ClassCondition(labels=torch.tensor([1, NULL_LABEL]),
                              text_ids=torch.tensor([g.text_words(None), g.text_words([3, 4])]),
                              guidance=Guidance(scale, interval))
    return ClassCondition(labels=torch.tensor([1, 2]), guidance=Guidance(scale, interval))


# ------------------------------------------------------------------------------------------ VQ
def test_vq_shapes_and_codebook_round_trip():
    torch.manual_seed(0)
    vq = VQModel(VQConfig(**TINY_VQ)).eval()
    imgs = (torch.rand(3, 16, 16, 3) * 255).to(torch.uint8)
    codes = vq.encode(imgs)
    assert codes.shape == (3, 4, 4) and codes.dtype == torch.long
    assert int(codes.min()) >= 0 and int(codes.max()) < 32
    pil = vq.decode(codes)
    assert len(pil) == 3 and pil[0].size == (16, 16) and pil[0].mode == "RGB"
    assert vq.encode(pil).shape == (3, 4, 4)  # PIL input
    book = vq.codebook()
    assert book.shape == (32, 4)
    assert torch.allclose(book.norm(dim=-1), torch.ones(32), atol=1e-5)  # l2-normalised
    idx, _ = vq.quantize.nearest(book * 3.0)  # every code's nearest neighbour is itself, at any scale
    assert torch.equal(idx, torch.arange(32))
    # decoding codes consumes exactly these vectors
    with torch.no_grad():
        direct = vq.decode_latents(book[codes].permute(0, 3, 1, 2))
        assert torch.allclose(vq.decode_code(codes), direct)


def test_vq_errors_and_save_load(tmp_path):
    vq = VQModel(VQConfig(**TINY_VQ)).eval()
    with pytest.raises(InputError, match="not divisible"):
        vq.encode((torch.rand(1, 18, 16, 3) * 255).to(torch.uint8))
    with pytest.raises(InputError, match="codes must lie"):
        vq.decode(torch.full((1, 4, 4), 99))
    with pytest.raises(ConfigError):
        VQConfig(ch=10, norm_groups=4)
    vq.save_pretrained(tmp_path / "vq")
    again = VQModel.from_pretrained(tmp_path / "vq")
    x = (torch.rand(2, 16, 16, 3) * 255).to(torch.uint8)
    assert torch.equal(vq.encode(x), again.encode(x))


def test_vq_reference_key_names_and_from_llamagen(tmp_path):
    vq = VQModel(VQConfig(**TINY_VQ)).eval()
    keys = set(vq.state_dict())
    # names of tokenizer/tokenizer_image/vq_model.py in FoundationVision/LlamaGen
    for k in ("encoder.conv_in.weight", "encoder.conv_blocks.0.res.0.conv1.weight", "encoder.conv_blocks.0.res.0.norm1.weight",
              "encoder.conv_blocks.1.res.0.nin_shortcut.weight", "encoder.conv_blocks.0.downsample.conv.weight",
              "encoder.conv_blocks.2.attn.0.q.weight", "encoder.conv_blocks.2.attn.0.proj_out.weight",
              "encoder.mid.0.conv1.weight", "encoder.mid.1.k.weight", "encoder.norm_out.weight", "encoder.conv_out.weight",
              "decoder.conv_in.weight", "decoder.mid.2.conv2.weight", "decoder.conv_blocks.0.attn.1.v.weight",
              "decoder.conv_blocks.0.upsample.conv.weight", "decoder.conv_blocks.2.res.1.conv2.weight",
              "decoder.conv_out.weight", "quantize.embedding.weight", "quant_conv.weight", "post_quant_conv.weight"):
        assert k in keys, k
    # a checkpoint as LlamaGen writes it: {"model": state_dict} with the codebook usage buffer
    ref = {k: v.clone() for k, v in vq.state_dict().items()}
    ref["quantize.codebook_used"] = torch.zeros(65536)
    import argparse

    torch.save({"model": ref, "steps": 1, "args": argparse.Namespace(vq_model="VQ-8")}, tmp_path / "vq.pt")
    loaded = VQModel.from_llamagen(tmp_path / "vq.pt", preset="VQ-8", **TINY_VQ)
    x = (torch.rand(2, 16, 16, 3) * 255).to(torch.uint8)
    assert torch.equal(loaded.encode(x), vq.encode(x))
    codes = vq.encode(x)
    assert torch.allclose(loaded.decode_code(codes), vq.decode_code(codes))
    bad = dict(ref)
    del bad["quant_conv.weight"]
    with pytest.raises(ConfigError, match="quant_conv.weight"):
        VQModel.from_llamagen(bad, preset="VQ-8", **TINY_VQ)
    assert VQModel(VQConfig(**{**TINY_VQ, "ch_mult": (1, 1, 2, 2, 4), "image_size": 64})).downsample == 16


# ------------------------------------------------------------------------------------------ GPT
def test_gpt_reference_key_names_and_from_llamagen():
    g = tiny_gpt(text=False, cond_qk_zero=True)
    keys = set(g.state_dict())
    for k in ("tok_embeddings.weight", "cls_embedding.embedding_table.weight", "layers.0.attention.wqkv.weight",
              "layers.0.attention.wo.weight", "layers.1.feed_forward.w1.weight", "layers.1.feed_forward.w2.weight",
              "layers.1.feed_forward.w3.weight", "layers.0.attention_norm.weight", "layers.0.ffn_norm.weight",
              "norm.weight", "output.weight"):
        assert k in keys, k
    assert g.cls_embedding.embedding_table.weight.shape[0] == 4  # num_classes + the null class
    ref = {"model": {**{k: v.clone() for k, v in g.state_dict().items()},
                     "freqs_cis": precompute_freqs_cis_2d(4, 8, 10000, 1, True)}}
    loaded = LlamaGenGPT.from_llamagen(ref, preset="GPT-B", vocab_size=32, dim=32, n_layer=2, n_head=4, n_kv_head=2,
                                       multiple_of=16, num_classes=3, grid_size=4)
    toks = torch.tensor([[0, 5, 7, 9], [0, 1, 2, 3]])
    labels = torch.tensor([1, 3])  # class 1 and the null class
    assert torch.equal(loaded(toks, labels=labels), g(toks, labels=labels))
    with pytest.raises(ConfigError, match="shape"):
        LlamaGenGPT.from_llamagen(ref, preset="GPT-B", vocab_size=64, dim=32, n_layer=2, n_head=4, n_kv_head=2,
                                  multiple_of=16, num_classes=3, grid_size=4)
    with pytest.raises(ConfigError, match="unknown GPT preset"):
        LlamaGenGPT.from_llamagen(ref, preset="GPT-Q")
    big = GPTConfig(**{"vocab_size": 16384, "num_classes": 1000, "n_layer": 12, "n_head": 12, "dim": 768})
    assert big.ffn_hidden == 2048  # find_multiple(int(2 * 4 * 768 / 3), 256)


def test_rope_2d_rows_and_columns():
    head_dim, grid, p = 16, 4, 2
    table = precompute_freqs_cis_2d(grid, head_dim, 10000.0, p, cond_zero=True)
    assert table.shape == (p + grid * grid, head_dim // 2, 2)
    assert torch.equal(table[:p], torch.zeros(p, head_dim // 2, 2))  # LlamaGen: zero at the condition prefix
    ident = precompute_freqs_cis_2d(grid, head_dim, 10000.0, p, cond_zero=False)
    assert torch.equal(ident[:p, :, 0], torch.ones(p, head_dim // 2)) and torch.equal(ident[:p, :, 1], torch.zeros(p, head_dim // 2))
    img = table[p:].view(grid, grid, head_dim // 2, 2)
    half = head_dim // 4
    # first half of the rotary pairs depends on the row only, the second half on the column only
    assert torch.allclose(img[:, 0:1, :half], img[:, :, :half].expand(grid, grid, half, 2)[:, 0:1])
    assert torch.allclose(img[:, :, :half], img[:, :1, :half].expand(-1, grid, -1, -1))
    assert torch.allclose(img[:, :, half:], img[:1, :, half:].expand(grid, -1, -1, -1))
    assert not torch.allclose(img[0, 0, :half], img[1, 0, :half]) and not torch.allclose(img[0, 0, half:], img[0, 1, half:])


def feed_all(lm: LlamaGenLM, cond: ClassCondition | None, rows: list[list[int]]) -> torch.Tensor:
    """One forward over the condition slots (placeholder ids) and the image tokens of every row."""
    cache = lm.new_cache(len(rows), cond)
    p = lm.condition_slots(cond)
    return lm(torch.tensor([[0] * p + r for r in rows]), cache)


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_multi_token_forward_equals_token_by_token(scale):
    g = tiny_gpt()
    lm = LlamaGenLM(g)
    cond = conds(g, scale)
    img = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    full = feed_all(lm, cond, img)
    cache = lm.new_cache(2, cond)
    P = lm.condition_slots(cond)
    assert P == g.cls_token_num == 4
    first = lm(torch.zeros(2, P, dtype=torch.long), cache)
    steps = [lm(torch.tensor([[i[k]] for i in img]), cache)[:, 0] for k in range(5)]
    assert torch.allclose(first, full[:, :P], atol=1e-5)
    assert torch.allclose(torch.stack(steps, 1), full[:, P:], atol=1e-5)
    assert lm.forwards == 1 + 1 + 5  # the doubled CFG batch counts once
    # the condition slots may be fed in pieces: the text encoding does not depend on it
    cache = lm.new_cache(2, cond)
    parts = [lm(torch.zeros(2, k, dtype=torch.long), cache) for k in (2, 2)]
    assert torch.allclose(torch.cat(parts, 1), full[:, :P], atol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_cache_rollback_equals_recompute(scale):
    g = tiny_gpt()
    lm = LlamaGenLM(g)
    cond = conds(g, scale)
    P = g.cls_token_num
    z = [0] * P
    row = [cond.select_rows(torch.tensor([i])) for i in range(2)]
    # keep_new with per-row counts (holes), then continue
    cache = lm.new_cache(2, cond)
    lm(torch.tensor([z + [5]] * 2), cache)
    start = len(cache)
    lm(torch.tensor([[6, 7, 8], [9, 10, 11]]), cache)
    cache.keep_new(start, torch.tensor([1, 3]))
    got = lm(torch.tensor([[20], [21]]), cache)[:, 0]
    want0 = feed_all(lm, row[0], [[5, 6, 20]])[0, -1]
    want1 = feed_all(lm, row[1], [[5, 9, 10, 11, 21]])[0, -1]
    assert torch.allclose(got[0], want0, atol=1e-5) and torch.allclose(got[1], want1, atol=1e-5)
    # crop
    cache = lm.new_cache(2, cond)
    lm(torch.tensor([z + [5, 6, 7]] * 2), cache)
    cache.crop(P + 1)
    got = lm(torch.tensor([[30], [31]]), cache)[:, 0]
    want = feed_all(lm, cond, [[5, 30], [5, 31]])[:, -1]
    assert torch.allclose(got, want, atol=1e-5)
    # select: a tree x0 -> {y1, y2} fed at once; keep the path x0, y2
    cache = lm.new_cache(2, cond)
    lm(torch.tensor([z] * 2), cache)
    start = len(cache)
    anc = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)[None]
    pos = cache.position_ids(3, torch.tensor([[0, 1, 1]]))
    lm(torch.tensor([[5, 6, 7], [8, 9, 10]]), cache, position_ids=pos, attn_mask=anc)
    cache.select(start, torch.tensor([[0, 2], [0, 1]]), torch.tensor([2, 2]))
    got = lm(torch.tensor([[12], [13]]), cache)[:, 0]
    want = feed_all(lm, cond, [[5, 7, 12], [8, 9, 13]])[:, -1]
    assert torch.allclose(got, want, atol=1e-5)
    # select_rows: drop row 0 (after holes were made); the condition follows the rows
    cache.keep_new(len(cache) - 1, torch.tensor([0, 1]))
    cache.select_rows(torch.tensor([1]))
    assert cache.cond.batch_size == 1 and int(cache.cond.labels[0]) == int(cond.labels[1])
    got = lm(torch.tensor([[14]]), cache)[:, 0]
    want = feed_all(lm, row[1], [[8, 9, 13, 14]])[:, -1]
    assert torch.allclose(got, want, atol=1e-5)


def test_cfg_mixing_and_cutoff():
    g = tiny_gpt()
    img = [5, 6, 7, 8, 9]
    lm = LlamaGenLM(g)
    cond = feed_all(lm, conds(g), [img] * 2)
    uncond = feed_all(lm, None, [img] * 2)  # no condition = the null class and null text
    null = ClassCondition(labels=torch.tensor([NULL_LABEL] * 2), text_ids=torch.full((2, 3), TEXT_NULL))
    assert torch.equal(feed_all(lm, null, [img] * 2), uncond)
    s = 2.5
    guided = feed_all(lm, conds(g, s, -1), [img] * 2)
    P = g.cls_token_num
    assert torch.allclose(guided[:, P - 1 :], (uncond + (cond - uncond) * s)[:, P - 1 :], atol=1e-5)
    # cutoff: token k (k image tokens before it) is guided iff k - 1 <= interval (LlamaGen's loop)
    cut = feed_all(lm, conds(g, s, 1), [img] * 2)
    for j in range(P - 1, P + len(img)):
        k = j - P + 1
        want = (uncond + (cond - uncond) * s)[:, j] if k - 1 <= 1 else cond[:, j]
        assert torch.allclose(cut[:, j], want, atol=1e-5), k
    assert not torch.allclose(cut[:, -1], guided[:, -1])
    # the adapter keeps no guidance between calls: an unguided condition gives the conditional logits
    assert torch.equal(feed_all(lm, conds(g, s).unguided(), [img] * 2), cond)
    # the functional form
    c, u = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    n = torch.tensor([[0, 1, 2], [3, 4, 5]])
    out = cfg_logits(c, u, 4.0, n, 2)
    assert torch.allclose(out[n <= 3], (u + 4.0 * (c - u))[n <= 3]) and torch.equal(out[n > 3], c[n > 3])
    assert torch.equal(cfg_logits(c, u, 1.0, n, -1), c)
    assert torch.allclose(cfg_logits(c, u, 0.0, n, -1), u)


def test_adapter_contract_and_errors():
    g = tiny_gpt()
    lm = LlamaGenLM(g)
    assert lm.grid == (4, 4) and lm.vocab_size == 32 and lm.max_length == g.cls_token_num + 16
    assert lm.embeddings().shape == (32, 32)
    assert lm.token_latents() is lm.embeddings()
    lat = torch.randn(32, 4)
    lm.set_token_latents(lat)
    assert lm.token_latents() is lat
    with pytest.raises(ConfigError):
        lm.set_token_latents(torch.randn(31, 4))
    with pytest.raises(InputError, match="guidance scale"):
        Guidance(-1.0)
    # ids outside the image vocabulary are not conditions any more
    with pytest.raises(InputError, match="image codes"):
        lm(torch.tensor([[10_000]]), lm.new_cache(1))
    with pytest.raises(InputError, match="image codes"):
        lm(torch.tensor([[32 + 1]]), lm.new_cache(1))
    with pytest.raises(InputError):
        g.condition_ids(7)
    with pytest.raises(InputError, match="class-conditional"):
        tiny_gpt(text=False).condition_ids(0, [3])


def test_wrong_condition_is_refused():
    g = tiny_gpt()
    lm = LlamaGenLM(g)
    with pytest.raises(InputError, match="ClassCondition"):
        lm.new_cache(1, EncoderState(memory=torch.zeros(1, 2, 4)))
    with pytest.raises(InputError, match="ClassCondition.*not raw tensors"):
        lm.new_cache(1, torch.tensor([1]))
    with pytest.raises(InputError, match="2 rows but the batch has 3"):
        lm.new_cache(3, conds(g))
    with pytest.raises(InputError, match=r"class label 3 is outside \[0, 3\)"):
        lm.new_cache(1, ClassCondition(labels=torch.tensor([3])))
    with pytest.raises(InputError, match="text length 3"):
        lm.new_cache(1, ClassCondition(labels=torch.tensor([0]), text_ids=torch.tensor([[3, 4]])))
    with pytest.raises(InputError, match=r"\[0, 12\)"):
        lm.new_cache(1, ClassCondition(labels=torch.tensor([0]), text_ids=torch.tensor([[3, 4, 12]])))
    with pytest.raises(InputError, match="class-conditional only"):
        LlamaGenLM(tiny_gpt(text=False)).new_cache(1, ClassCondition(labels=torch.tensor([0]), text_ids=torch.tensor([[3]])))
    with pytest.raises(InputError, match=r"shape \[B\]"):
        ClassCondition(labels=torch.tensor([[0]]))


def test_text_condition_changes_logits():
    g = tiny_gpt()
    lm = LlamaGenLM(g)

    def text(words):
        return ClassCondition(labels=torch.tensor([NULL_LABEL]), text_ids=torch.tensor([g.text_words(words)]))

    a = feed_all(lm, text([3, 4]), [[5]])[0, -1]
    b = feed_all(lm, text([5, 6]), [[5]])[0, -1]
    null = feed_all(lm, text(None), [[5]])[0, -1]
    assert not torch.allclose(a, b) and not torch.allclose(a, null)


def test_training_logits_match_the_adapter():
    """The recipe's condition ids ([class] + words) and the adapter's typed condition give the same logits."""
    g = tiny_gpt()
    codes = torch.randint(0, 32, (2, 16), generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([g.condition_ids(1, None), g.condition_ids(None, [3, 4])])
    train = g.training_logits(ids, codes)
    lm = LlamaGenLM(g)
    got = feed_all(lm, conds(g), codes[:, :-1].tolist())[:, g.cls_token_num - 1 :]
    assert torch.allclose(train, got, atol=1e-5)
    assert g.null_condition_ids() == [3, TEXT_NULL, TEXT_NULL, TEXT_NULL]


def test_vq_decoding_in_channels_last_matches_the_contiguous_decoder_and_training_still_learns():
    """Decoding (no gradients) converts the decoder to channels-last memory format once, in place;
    its images match the contiguous decoder's to float rounding, and the training path (gradients
    on) keeps working on the same parameter objects."""
    import copy

    torch.manual_seed(0)
    vq = VQModel(VQConfig(**TINY_VQ)).eval()
    reference = copy.deepcopy(vq)
    params = [id(p) for p in vq.decoder.parameters()]
    codes = torch.randint(0, vq.codebook_size, (3, 4, 4))
    with torch.no_grad():
        zq = reference.quantize.codebook()[codes].permute(0, 3, 1, 2)
        want = reference.decoder(reference.post_quant_conv(zq))
        got = vq.decode_code(codes)
    assert vq.decoder.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    assert [id(p) for p in vq.decoder.parameters()] == params
    assert got.is_contiguous() and torch.allclose(got, want, atol=1e-5)
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    rec, losses, _ = vq.train()(x)
    ((rec - x) ** 2).mean().backward()
    assert vq.decoder.conv_in.weight.grad is not None and torch.isfinite(vq.decoder.conv_in.weight.grad).all()
