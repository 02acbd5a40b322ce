"""The masked-generation engine (``leapgen.samplers.masked``) on tiny random bidirectional models.

Invariants (masked.md §11.3): every step reveals at least one token; committed tokens never change
under commit-only policies; given (prompt / fragment) tokens are never overwritten; step counts as
configured; temperature 0 + commit-all in one forward equals the argmax baseline; seeded runs
reproduce (batch 1 and 8). Plus a MAGNeT-shaped configuration (4 codebooks x 3-token spans x
codebook stages x annealed CFG) built from the same parts, direct transcriptions of MaskGIT's and
Mask-Predict's reference loops, and clear errors on bad parameters / inputs.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from leapgen.errors import ConfigError, InputError, NumericalError
from leapgen.models import MaskedTokenModel, TorchMaskedLM
from leapgen.samplers.base import DecodeConfig
from leapgen.samplers.masked import (
    SCHEDULES,
    GenMol,
    MaskedInputs,
    MaskedSampler,
    MaskGIT,
    MaskPredict,
)

torch.set_num_threads(1)

V = 24  # output vocabulary; MASK = V lies outside it (MaskGIT-style)
MASK = V
N_CLASSES = 3


class TinyMaskedNet(nn.Module):
    """A 1-layer bidirectional transformer over K codebooks, optionally class-conditioned.

    Logits are scaled up so distributions are peaky (argmax well separated from ties).
    ``cond`` is a class id per row; None selects the learned null class.
    """

    def __init__(self, vocab: int = V, codebooks: int = 1, d: int = 32, max_len: int = 64, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.k, self.v = codebooks, vocab
        self.emb = nn.ModuleList(nn.Embedding(vocab + 1, d) for _ in range(codebooks))
        self.pos = nn.Embedding(max_len, d)
        self.cls = nn.Embedding(N_CLASSES + 1, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(d, codebooks * vocab)
        self.stages_seen: list[int | None] = []

    def forward(self, tokens, cond=None, stage=None, attention_mask=None):
        self.stages_seen.append(stage)
        x = tokens if tokens.dim() == 3 else tokens[:, None]
        b, _, seq = x.shape
        h = sum(self.emb[i](x[:, i]) for i in range(self.k)) + self.pos(torch.arange(seq))[None]
        label = torch.full((b,), N_CLASSES) if cond is None else cond
        h = h + self.cls(label)[:, None]
        h = self.enc(h, src_key_padding_mask=None if attention_mask is None else ~attention_mask)
        out = 4.0 * self.head(h).reshape(b, seq, self.k, self.v).permute(0, 2, 1, 3)
        return out if tokens.dim() == 3 else out[:, 0]


@pytest.fixture(scope="module")
def net():
    return TinyMaskedNet()


@pytest.fixture()
def model(net):
    return TorchMaskedLM(net, mask_id=MASK, vocab_size=V)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def run(sampler, model, inputs, seed: int = 0, **config):
    cfg = DecodeConfig(**{"temperature": 1.0, **config})
    return sampler.generate({"model": model}, inputs, cfg, gen(seed))


def rows_with_prompts(batch: int, masks: int = 20, seed: int = 1) -> list[list[int]]:
    """Rows of different lengths: a prompt, masks, and some fixed tokens interleaved (fragments)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(batch):
        prompt = torch.randint(0, V, (1 + i % 3,), generator=g).tolist()
        body = [MASK] * (masks + i)
        for j in range(3, len(body), 7):  # fixed tokens inside the masked region
            body[j] = int(torch.randint(0, V, (1,), generator=g))
        rows.append(prompt + body)
    return rows


def check_trajectory(res, inputs_rows: list[list[int]], *, commit_only: bool) -> None:
    """Shared invariants over a recorded trajectory."""
    traj = [t.reshape(t.shape[0], -1) for t in res.trajectory]
    gen_mask = res.generated.reshape(res.generated.shape[0], -1)
    first = traj[0]
    for b, row in enumerate(inputs_rows):
        assert first[b, : len(row)].tolist() == row
    prev = first
    for step, cur in enumerate(traj[1:]):
        fixed = ~gen_mask
        assert torch.equal(cur[fixed], first[fixed]), "a given token was overwritten"
        if commit_only:
            was = (prev != MASK) & gen_mask
            assert torch.equal(cur[was], prev[was]), f"a committed token changed at step {step}"
        revealed = ((prev == MASK) & gen_mask).sum(1) - ((cur == MASK) & gen_mask).sum(1)
        had = ((prev == MASK) & gen_mask).any(1)
        if commit_only:
            assert bool((revealed[had] >= 1).all()), f"a step revealed nothing: {revealed.tolist()}"
        prev = cur
    assert not bool(((prev == MASK) & gen_mask).any())
    assert not bool((res.tokens[res.generated] == MASK).any())
    assert not bool((res.tokens[res.generated] >= V).any())


# ------------------------------------------------------------------------------------------
# registry and contract


def test_presets_are_registered_with_paper_guarantee_and_defaults():
    from leapgen.samplers.base import get_sampler, sampler_info

    expect = {"maskgit": 12, "mask_predict": 10, "genmol": None}
    for name, steps in expect.items():
        info = sampler_info(name)
        assert info.family == "masked" and info.guarantee == "lossy" and info.needs == ("model",)
        assert info.paper and info.summary
        assert info.defaults["steps"] == steps
        smp = get_sampler(name)
        assert isinstance(smp, MaskedSampler) and smp.name == name
        assert "Defaults" in type(smp).__doc__ and "Guarantee" in type(smp).__doc__
    assert sampler_info("maskgit").defaults["choice_temperature"] == 4.5
    assert sampler_info("maskgit").defaults["schedule"] == "cosine"
    assert sampler_info("mask_predict").defaults["policy"] == "remask_lowest"
    assert sampler_info("genmol").defaults["schedule"] == "one_per_step"


def test_model_contract_shapes_counter_and_errors(net):
    m = TorchMaskedLM(net, mask_id=MASK, vocab_size=V)
    x = torch.tensor([[1, MASK, 3, MASK]])
    out = m(x)
    assert out.shape == (1, 4, V) and out.dtype == torch.float32 and m.forwards == 1
    with pytest.raises(InputError, match="outside the vocabulary"):
        m(torch.tensor([[1, V + 5]]))
    with pytest.raises(InputError, match="shape"):
        m(torch.zeros(1, 2, 4, dtype=torch.long))
    m4 = TorchMaskedLM(TinyMaskedNet(codebooks=4), mask_id=MASK, vocab_size=V, num_codebooks=4)
    assert m4(torch.full((2, 4, 5), MASK)).shape == (2, 4, 5, V)

    class NaNNet(nn.Module):
        def forward(self, tokens):
            return torch.full((*tokens.shape, V), float("nan"))

    with pytest.raises(NumericalError):
        TorchMaskedLM(NaNNet(), mask_id=MASK, vocab_size=V)(x)

    class OneBadValue(nn.Module):  # finite logits but one entry: NaN / +inf / a whole row -inf / -inf (allowed)
        def __init__(self, kind: str) -> None:
            super().__init__()
            self.kind = kind

        def forward(self, tokens):
            out = torch.zeros(*tokens.shape, V)
            if self.kind == "row-inf":
                out[0, -1] = float("-inf")
            else:
                out[0, -1, 3] = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}[self.kind]
            return out

    for kind in ("nan", "+inf", "row-inf"):
        with pytest.raises(NumericalError):
            TorchMaskedLM(OneBadValue(kind), mask_id=MASK, vocab_size=V)(x)
    assert TorchMaskedLM(OneBadValue("-inf"), mask_id=MASK, vocab_size=V)(x)[0, -1, 3] == float("-inf")
    assert isinstance(m, MaskedTokenModel) and m.null_cond(torch.tensor([1])) is None


# ------------------------------------------------------------------------------------------
# invariants


COMMIT_ONLY_CONFIGS = {
    "maskgit": (MaskGIT, {}),
    "genmol": (GenMol, {}),
    "blocks_per_block": (MaskedSampler, {"region": "blocks", "block_length": 8, "schedule": "per_block", "scorer": "prob", "steps": 12}),
    "threshold": (MaskedSampler, {"policy": "threshold", "threshold": 0.7, "scorer": "prob"}),
    "spans": (MaskedSampler, {"region": "spans", "span_len": 3, "scorer": "prob", "steps": 6}),
    "fragments": (MaskedSampler, {"region": "fragments", "steps": 3, "schedule": "linear"}),
    "sin_margin": (MaskedSampler, {"schedule": "sin", "scorer": "margin", "steps": 8}),
    "prob_gumbel_entropy_free": (MaskedSampler, {"scorer": "prob_gumbel", "choice_temperature": 1.0, "steps": 8}),
    "neg_entropy": (MaskedSampler, {"scorer": "neg_entropy", "steps": 8}),
    "random_order": (MaskedSampler, {"scorer": "random", "steps": 8}),
}


@pytest.mark.parametrize("name", sorted(COMMIT_ONLY_CONFIGS))
@pytest.mark.parametrize("batch", [1, 8])
def test_commit_only_invariants(model, name, batch):
    cls, params = COMMIT_ONLY_CONFIGS[name]
    smp = cls(**params, hooks=("trajectory",))
    rows = rows_with_prompts(batch)
    res = run(smp, model, rows, seed=batch)
    check_trajectory(res, rows, commit_only=True)
    assert all(n >= 1 for step in res.stats.accepted_per_step for n in step)
    n_masks = [r.count(MASK) for r in rows]
    assert res.stats.new_tokens == sum(n_masks)
    assert res.stats.baseline_steps == max(n_masks)
    assert res.stats.target_forwards == len(res.stats.accepted_per_step) == res.stats.extra["steps"]
    assert [len(s) for s in res.sequences] == [len(r) for r in rows]


def test_mask_predict_keeps_given_tokens_and_follows_the_linear_schedule(model):
    rows = rows_with_prompts(8, masks=30)
    res = run(MaskPredict(hooks=("trajectory",)), model, rows, temperature=0.0)
    check_trajectory(res, rows, commit_only=False)
    steps = 10
    assert res.stats.target_forwards == steps
    for b, row in enumerate(rows):
        n = row.count(MASK)
        masked = [int((t[b] == MASK).sum()) for t in res.trajectory[1:]]
        assert masked == [n * (steps - t) // steps for t in range(1, steps)] + [0]


def test_step_counts_as_configured(model):
    rows = [[1, 2] + [MASK] * 40, [3] + [MASK] * 45]
    for steps in (1, 5, 12):
        assert run(MaskGIT(steps=steps), model, rows).stats.target_forwards == steps
    assert run(MaskPredict(steps=7), model, rows).stats.target_forwards == 7
    res = run(GenMol(), model, [[1] + [MASK] * 9, [2] + [MASK] * 4])
    assert res.stats.target_forwards == 9  # one token per step: the longest row's mask count
    assert [len(s) for s in res.stats.accepted_per_step] == [2] * 4 + [1] * 5
    assert res.stats.step_compression == 1.0
    # fewer masks than steps: still at least one per step, so at most #masks forwards
    assert run(MaskGIT(steps=12), model, [[1] + [MASK] * 5]).stats.target_forwards == 5
    # blocks split the budget: 3 blocks of 8 x (12 // 3) steps
    res = run(MaskedSampler(region="blocks", block_length=8, schedule="per_block", steps=12), model, [[1] + [MASK] * 24])
    assert res.stats.target_forwards == 12 and res.stats.extra["stages"] == 3
    assert res.stats.accepted_per_step == [[2]] * 12


@pytest.mark.parametrize("batch", [1, 8])
def test_temperature_zero_commit_all_is_one_argmax_forward(model, batch):
    rows = rows_with_prompts(batch)
    inputs = MaskedInputs.coerce(rows, mask_id=MASK, num_codebooks=1)
    with torch.inference_mode():
        logits = model(inputs.tokens, attention_mask=inputs.attention_mask)
    baseline = torch.where(inputs.tokens == MASK, logits.argmax(-1), inputs.tokens)
    for smp in (MaskedSampler(policy="threshold", threshold=0.0, scorer="prob"), MaskGIT(steps=1)):
        res = run(smp, model, inputs, temperature=0.0)
        assert res.stats.target_forwards == 1
        for b, row in enumerate(rows):
            assert res.sequences[b] == baseline[b, : len(row)].tolist()


def test_mask_inside_the_vocabulary_is_never_proposed():
    inner_mask = 5

    class LovesMask(TinyMaskedNet):  # a network whose favourite token is its mask token (and 7)
        def forward(self, tokens, **kw):
            out = super().forward(tokens, **kw).clone()
            out[..., inner_mask] = 1e4
            out[..., 7] = 1e3
            return out

    m = TorchMaskedLM(LovesMask(seed=3), mask_id=inner_mask, vocab_size=V)
    res = MaskedSampler(policy="threshold", threshold=0.0, scorer="prob", suppress_ids=(7,)).generate(
        {"model": m}, torch.full((2, 30), inner_mask), DecodeConfig(temperature=1.0), gen(0)
    )
    assert not bool((res.tokens == inner_mask).any()) and not bool((res.tokens == 7).any())


# ------------------------------------------------------------------------------------------
# reproducibility


@pytest.mark.parametrize("batch", [1, 8])
def test_seeded_generator_reproduces(model, batch):
    rows = rows_with_prompts(batch)
    for cls in (MaskGIT, GenMol, MaskPredict):
        a = run(cls(), model, rows, seed=11)
        b = run(cls(), model, rows, seed=11)
        assert torch.equal(a.tokens, b.tokens) and a.stats.accepted_per_step == b.stats.accepted_per_step
        if cls is not MaskPredict:
            c = run(cls(), model, rows, seed=12)
            assert not torch.equal(a.tokens, c.tokens)


def test_deterministic_decoding_is_independent_of_the_batch(model):
    rows = rows_with_prompts(8)
    for smp in (MaskGIT(choice_temperature=0.0, steps=6), MaskPredict(), MaskedSampler(policy="threshold", scorer="prob")):
        together = run(smp, model, rows, temperature=0.0).sequences
        alone = [run(smp, model, [r], temperature=0.0).sequences[0] for r in rows]
        assert together == alone


# ------------------------------------------------------------------------------------------
# direct transcriptions of the reference loops (zero noise, argmax proposals)


def reference_maskgit(model, x: torch.Tensor, steps: int) -> torch.Tensor:
    """google-research/maskgit parallel_decode.decode with choice_temperature 0 and argmax sampling."""
    unknown0 = (x == MASK).sum(1, keepdim=True)
    cur = x.clone()
    sampled = cur
    for step in range(steps):
        logits = model(cur)
        unknown = cur == MASK
        sampled = torch.where(unknown, logits.argmax(-1), cur)
        ratio = (step + 1) / steps
        mask_ratio = min(max(math.cos(math.pi / 2 * ratio), 1e-6), 1.0)
        probs = logits.softmax(-1).gather(-1, sampled[..., None]).squeeze(-1)
        conf = torch.where(unknown, probs.log(), torch.full_like(probs, float("inf")))
        mask_len = torch.floor(unknown0 * mask_ratio).long()
        mask_len = torch.maximum(torch.ones_like(mask_len), torch.minimum(unknown.sum(1, keepdim=True) - 1, mask_len))
        cut = conf.sort(-1).values.gather(-1, mask_len)
        cur = torch.where(conf < cut, torch.full_like(sampled, MASK), sampled)
    return sampled


def reference_mask_predict(model, x: torch.Tensor, steps: int) -> torch.Tensor:
    """facebookresearch/Mask-Predict MaskPredict.generate (one length candidate)."""
    gen_pos = x == MASK
    n = gen_pos.sum(1)
    probs_all = model(x).softmax(-1)
    tok = torch.where(gen_pos, probs_all.argmax(-1), x)
    score = torch.where(gen_pos, probs_all.max(-1).values, torch.full(x.shape, float("inf")))
    for t in range(1, steps):
        n_mask = n * (steps - t) // steps
        order = score.sort(dim=1, stable=True).indices
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(x.shape[1]).expand_as(order))
        remask = rank < n_mask[:, None]
        tok = tok.masked_fill(remask, MASK)
        p = model(tok).softmax(-1)
        tok = torch.where(remask, p.argmax(-1), tok)
        score = torch.where(remask, p.max(-1).values, score)
    return tok


def test_maskgit_matches_reference_transcription(model):
    x = torch.tensor([[1, 2] + [MASK] * 30, [MASK] * 20 + [3, 4] + [MASK] * 10])
    with torch.inference_mode():
        ref = reference_maskgit(model, x, 8)
    res = run(MaskGIT(steps=8, choice_temperature=0.0), model, x, temperature=0.0)
    assert torch.equal(res.tokens, ref) and res.stats.target_forwards == 8


def test_mask_predict_matches_reference_transcription(model):
    x = torch.tensor([[1, 2] + [MASK] * 30, [MASK] * 20 + [3, 4] + [MASK] * 10])
    with torch.inference_mode():
        ref = reference_mask_predict(model, x, 10)
    res = run(MaskPredict(), model, x, temperature=0.0)
    assert torch.equal(res.tokens, ref)


# ------------------------------------------------------------------------------------------
# MAGNeT-shaped configuration from the same parts


def test_magnet_shaped_configuration_codebook_stages_by_spans_with_annealed_cfg():
    k, seq, prompt, span = 4, 14, 4, 3
    net = TinyMaskedNet(codebooks=k, seed=5)
    m = TorchMaskedLM(net, mask_id=MASK, vocab_size=V, num_codebooks=k, null_cond=None)
    magnet = MaskedSampler(
        region="codebook_stages",
        steps_per_stage=[4, 2, 2, 2],
        span_len=span,
        scorer="prob",
        span_score="max",
        schedule="cosine",
        guidance="cfg",
        cfg_scale=10.0,
        cfg_min_scale=1.0,
        cfg_anneal="mask_rate",
        temperature_anneal="linear",
        hooks=("trajectory",),
    )
    g = torch.Generator().manual_seed(0)
    tokens = torch.full((3, k, seq), MASK)
    tokens[:, :, :prompt] = torch.randint(0, V, (3, k, prompt), generator=g)  # prompt frames, all codebooks
    inputs = MaskedInputs(tokens, cond=torch.tensor([0, 1, 2]))
    res = magnet.generate({"model": m}, inputs, DecodeConfig(temperature=3.0, top_p=0.9), gen(1))

    assert res.tokens.shape == (3, k, seq)
    assert torch.equal(res.tokens[:, :, :prompt], tokens[:, :, :prompt])
    assert not bool((res.tokens == MASK).any())
    # 10 decode steps (4 spans per codebook >= every stage's budget), each cond + null forward
    assert res.stats.extra["steps"] == 10 and res.stats.target_forwards == 20
    assert res.stats.extra["stages"] == k
    assert net.stages_seen[-20:] == [c for c, n in enumerate([4, 2, 2, 2]) for _ in range(2 * n)]
    # codebook c+1 starts only after codebook c is complete; spans are committed whole
    traj = res.trajectory
    span_id = torch.arange(seq) // span
    for prev, cur in zip(traj, traj[1:]):
        newly = (prev == MASK) & (cur != MASK)  # [B, K, L]
        for b in range(3):
            touched = newly[b].any(1).nonzero().flatten().tolist()
            assert len(touched) == 1, "one codebook per step"
            c = touched[0]
            assert not bool((cur[b, :c] == MASK).any())
            for s in span_id[newly[b, c]].unique().tolist():
                in_span = (span_id == s) & (tokens[b, c] == MASK)
                assert bool(newly[b, c][in_span].all()), "a span was committed partially"
    assert sum(res.stats.accepted_per_step[0]) >= 3  # first step reveals whole spans


# ------------------------------------------------------------------------------------------
# guidance and hooks


def test_context_guidance_runs_a_second_forward_and_reproduces(model):
    rows = [[1, 2, 3, 4, 5, 6] + [MASK] * 10, [7, 8, 9, 10] + [MASK] * 12]
    smp = GenMol(guidance="context", context_gamma=0.5, context_weight=2.0, context_special_ids=(1,))
    a, b = run(smp, model, rows, seed=3), run(smp, model, rows, seed=3)
    assert torch.equal(a.tokens, b.tokens)
    assert a.stats.target_forwards == 2 * a.stats.extra["steps"] == 24
    plain = run(GenMol(guidance="context", context_gamma=0.0), model, rows, seed=3)
    assert plain.stats.target_forwards == plain.stats.extra["steps"]


def test_cfg_scale_one_equals_no_guidance(model):
    x = MaskedInputs(torch.tensor([[1] + [MASK] * 15] * 2), cond=torch.tensor([0, 2]))
    guided = run(MaskGIT(guidance="cfg", cfg_scale=1.0, steps=5), model, x, seed=4)
    plain = run(MaskGIT(steps=5), model, x, seed=4)
    assert torch.equal(guided.tokens, plain.tokens)
    assert guided.stats.target_forwards == 2 * plain.stats.target_forwards


def test_eos_truncate_fills_after_the_first_end_token(model):
    eos = 3
    rows = [[1] + [MASK] * 30 for _ in range(4)]
    res = run(MaskGIT(hooks=("eos_truncate", "trajectory"), steps=10), model, rows, seed=0, eos_token_id=eos)
    check_trajectory(res, rows, commit_only=True)
    # the step at which each position was settled
    settled = torch.stack([(t != MASK) for t in res.trajectory]).int().argmax(0)  # [B, L]
    for b, seq in enumerate(res.sequences):
        if eos in seq[1:]:
            p = seq.index(eos, 1)
            for q in range(p + 1, len(seq)):  # later positions: end tokens, or committed no later than it
                assert seq[q] == eos or settled[b, q] <= settled[b, p]
    assert res.stats.extra["hook_filled"] > 0
    with pytest.raises(ConfigError, match="end token"):
        run(MaskGIT(hooks=("eos_truncate",)), model, rows)


def test_early_exit_goes_all_in(model):
    rows = [[1] + [MASK] * 30, [2] + [MASK] * 20]
    res = run(MaskGIT(hooks=("early_exit",), early_exit_thresholds=(0.0, 0.0, 0.0)), model, rows)
    assert res.stats.target_forwards == 1 and res.stats.extra["early_exit_rows"] == 2
    assert not bool((res.tokens == MASK).any())


def test_schedules_invariants():
    n0 = torch.tensor([1, 7, 64, 1000])
    for name in SCHEDULES.names():
        s = SCHEDULES.build(name)
        total = s.total_steps(12, n0)
        prev = n0
        for i in range(int(total.max())):
            cur = s.num_masked(i, total, n0)
            assert bool((cur <= prev).all()) and bool((cur >= 0).all()), name
            prev = cur
        last = s.num_masked(int(total.max()) - 1, total, n0)
        assert bool((last == 0).all()), name
    per_block = SCHEDULES.build("per_block")
    n0 = torch.tensor([32, 10])
    counts = [32, 10]
    for i in range(4):
        counts_i = per_block.num_masked(i, torch.tensor([4, 4]), n0)
        assert (torch.tensor(counts) - counts_i).tolist() == [8, 3 if i < 2 else 2]
        counts = counts_i.tolist()


# ------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "params, match",
    [
        ({"steps": 0}, "steps must be a positive integer"),
        ({"steps": -3}, "steps must be a positive integer"),
        ({"steps": 2.5}, "steps must be a positive integer"),
        ({"steps": None}, "needs steps"),
        ({"schedule": "cosinus"}, "unknown schedule 'cosinus'; registered schedules: cosine"),
        ({"scorer": "vibes"}, "unknown scorer"),
        ({"policy": "yolo"}, "unknown policy"),
        ({"region": "everywhere"}, "unknown region"),
        ({"guidance": "cgf"}, "unknown guidance"),
        ({"hooks": ("nope",)}, "unknown hook"),
        ({"choice_temperature": -1.0}, "choice_temperature"),
        ({"noise_anneal": "cosine"}, "noise_anneal"),
        ({"policy": "threshold", "threshold": float("nan")}, "threshold"),
        ({"threshold": 0.5}, r"\['threshold'\] have no effect"),
        ({"scorer": "prob", "noise_anneal": "genmol"}, "no effect"),
        ({"span_len": 0}, "span_len"),
        ({"region": "spans"}, "span_len >= 2"),
        ({"span_len": 3, "span_score": "median"}, "span_score"),
        ({"block_length": 0, "region": "blocks"}, "block_length"),
        ({"steps_per_stage": [4, 0], "region": "codebook_stages"}, "steps_per_stage"),
        ({"guidance": "cfg", "cfg_anneal": "mask_rate"}, "cfg_min_scale"),
        ({"guidance": "context", "context_gamma": 1.5}, "context_gamma"),
        ({"temperature_anneal": "cosine"}, "temperature_anneal"),
        ({"early_exit_thresholds": (1.0,), "hooks": ("early_exit",)}, "early_exit_thresholds"),
        ({"stepz": 3}, "unknown parameter"),
    ],
)
def test_bad_parameters_raise_config_error(params, match):
    with pytest.raises(ConfigError, match=match):
        MaskGIT(**params)


def test_bad_inputs_raise_clear_errors(model):
    smp = MaskGIT()
    with pytest.raises(InputError, match="row 1 has no masked positions"):
        run(smp, model, [[1, MASK, 2], [1, 2, 3]])
    with pytest.raises(InputError, match="no masked positions"):
        run(smp, model, torch.tensor([[1, 2, 3]]))
    with pytest.raises(InputError, match="outside the vocabulary"):
        run(smp, model, [[1, MASK, V + 3]])
    with pytest.raises(InputError, match="empty"):
        run(smp, model, [[1, MASK], []])
    with pytest.raises(InputError, match="codebook"):
        run(smp, model, torch.full((1, 4, 6), MASK))
    with pytest.raises(InputError, match="needs a condition"):
        run(MaskGIT(guidance="cfg"), model, [[1, MASK]])
    with pytest.raises(ConfigError, match="MaskedTokenModel"):
        smp.generate({"model": object()}, [[1, MASK]], DecodeConfig(), gen())
    with pytest.raises(ConfigError, match="needs model"):
        smp.generate({}, [[1, MASK]], DecodeConfig(), gen())
    with pytest.raises(ConfigError, match="repetition_penalty"):
        run(smp, model, [[1, MASK]], repetition_penalty=1.2)
    m4 = TorchMaskedLM(TinyMaskedNet(codebooks=2), mask_id=MASK, vocab_size=V, num_codebooks=2)
    with pytest.raises(ConfigError, match="one per codebook"):
        run(MaskedSampler(region="codebook_stages", steps_per_stage=[2, 2, 2]), m4, torch.full((1, 2, 6), MASK))


@pytest.mark.parametrize("params", [{"cache": True}, {"schedule": 3}, {"scorer": None}, {"policy": ["topk"]}])
def test_a_part_given_as_a_value_is_refused_naming_the_registered_ones(params):
    from leapgen.errors import ConfigError
    from leapgen.samplers.base import get_sampler

    with pytest.raises(ConfigError, match="must be one of the registered names"):
        get_sampler("genmol", **params)
