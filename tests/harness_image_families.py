"""Registry-harness benches and checks for the image families that decode many tokens per step
(merged into ``tests/registry_harness.py``): ``next-neighbour`` (NAR), ``next-scale`` (VAR),
``next-frequency`` (NFIG) and ``coarse-fine`` (CTF).

Every bench is a tiny random model with a **teacher-forced, uncached** reference of the same
factorisation (``full_logits(tokens)``: the logits every token is drawn from, computed in one forward
without a KV cache). ``distribution-exact`` is checked twice: greedy decoding equals filling the order
step by step with the reference's argmax (batch 1 and 4), and 20,000 samples at T=1 lie within the
TV bound of the exact joint enumerated from the reference (a 2x2 grid / scales (1, 2), tiny
vocabularies).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import torch
from registry_harness import Bench, generator
from test_distribution import BATCH, N_SAMPLES, tv, tv_bound

from leapgen.models.condition import ClassCondition
from leapgen.models.ctf import CoarseFineLM, CTFFineConfig, CTFFineGPT
from leapgen.models.image_orders import diagonal_order
from leapgen.models.llamagen import GPTConfig, LlamaGenGPT
from leapgen.models.nar import NARGPT, NARLM, NARConfig
from leapgen.models.var import ScaleGPT, ScaleGPTConfig, ScaleLM
from leapgen.samplers import DecodeConfig, SamplerInfo, get_sampler
from leapgen.tokenizers.multiscale_vq import MultiScaleVQ, MultiScaleVQConfig

TINY = dict(dim=32, n_layer=2, n_head=2, multiple_of=16, num_classes=3, token_dropout_p=0.0, resid_dropout_p=0.0,
            ffn_dropout_p=0.0, cond_qk_zero=False)


def randomise(module: torch.nn.Module, seed: int, std: float = 0.4) -> torch.nn.Module:
    """Large random weights, so that distributions are far from uniform and orders matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.is_floating_point():
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return module.eval()


class ImageFamilyBench(Bench):
    """Shared run/valid logic: empty prompts, the condition carries the class labels."""

    batches = (1, 4)
    vocab: int
    grid: int = 4

    def cond(self, batch: int) -> ClassCondition:
        return ClassCondition(labels=torch.arange(batch) % 3)

    def cond_ids(self, batch: int) -> torch.Tensor:
        return (torch.arange(batch) % 3)[:, None]

    def inputs(self, batch: int) -> tuple[Any, Any]:
        return [[] for _ in range(batch)], self.cond(batch)

    def assert_valid(self, res, batch: int, models: dict[str, Any]) -> None:
        assert len(res.sequences) == batch
        for s in res.sequences:
            assert len(s) == self.max_new_tokens and all(0 <= t < self.vocab for t in s)
        st = res.stats
        assert st.batch_size == batch and st.new_tokens == batch * self.max_new_tokens
        assert st.target_forwards > 0 and sum(n for step in st.accepted_per_step for n in step) == st.new_tokens

    # the reference factorisation -----------------------------------------------------------
    def order(self) -> list[list[int]]:
        raise NotImplementedError

    def full_logits(self, tokens: torch.Tensor, cond_ids: torch.Tensor) -> torch.Tensor:
        """Uncached logits ``[B, T, V]`` every token is drawn from, given all tokens (teacher forcing)."""
        raise NotImplementedError

    def enumeration(self) -> ImageFamilyBench:
        """The tiny variant whose joint is enumerated."""
        raise NotImplementedError

    def log_probs(self, tokens: torch.Tensor, cond_ids: torch.Tensor) -> torch.Tensor:
        """``[B, T, V]`` log-probabilities of every token's factor (teacher forcing)."""
        return self.full_logits(tokens, cond_ids).log_softmax(-1)

    @torch.no_grad()
    def greedy_reference(self, batch: int) -> list[list[int]]:
        tokens = torch.zeros(batch, self.max_new_tokens, dtype=torch.long)
        for cells in self.order():
            logits = self.full_logits(tokens, self.cond_ids(batch))
            tokens[:, cells] = logits[:, cells].argmax(-1)
        return tokens.tolist()

    @torch.no_grad()
    def exact_joint(self) -> np.ndarray:
        outcomes = torch.tensor(list(itertools.product(range(self.vocab), repeat=self.max_new_tokens)))
        logp = self.log_probs(outcomes, torch.zeros(len(outcomes), 1, dtype=torch.long))
        lp = logp.gather(-1, outcomes[..., None]).squeeze(-1).sum(1)
        p = lp.exp().double().numpy()
        return p / p.sum()


class NeighbourBench(ImageFamilyBench):
    contract = "next-neighbour"
    vocab = 8

    def __init__(self, device: str, grid: int = 4) -> None:
        super().__init__(device)
        self.grid = grid
        self.max_new_tokens = grid * grid
        self.gpt = randomise(NARGPT(NARConfig(vocab_size=self.vocab, grid_size=grid, **TINY)), seed=11).to(device)

    def models(self) -> dict[str, Any]:
        return {"model": NARLM(self.gpt)}

    def order(self) -> list[list[int]]:
        return [c.tolist() for c in diagonal_order(self.grid, self.grid)]

    def full_logits(self, tokens: torch.Tensor, cond_ids: torch.Tensor) -> torch.Tensor:
        return self.gpt.neighbour_logits(cond_ids.to(self.device), tokens.to(self.device)).cpu()

    @functools.cache  # noqa: B019
    def enumeration(self) -> NeighbourBench:
        b = NeighbourBench(self.device, grid=2)
        b.vocab = 3
        b.gpt = randomise(NARGPT(NARConfig(vocab_size=3, grid_size=2, **TINY)), seed=12).to(self.device)
        return b


class ScaleBench(ImageFamilyBench):
    contract = "next-scale"
    band = "spatial"
    vocab = 8

    def __init__(self, device: str, scales: tuple[int, ...] = (1, 2, 4), vocab: int = 8) -> None:
        super().__init__(device)
        self.vocab, self.scales = vocab, scales
        self.max_new_tokens = sum(p * p for p in scales)
        torch.manual_seed(0)
        down = 2 ** (len((1, 2)) - 1)
        self.tok = MultiScaleVQ(MultiScaleVQConfig(codebook_size=vocab, codebook_embed_dim=4, ch=8, ch_mult=(1, 2), z_channels=8,
                                                   norm_groups=4, image_size=scales[-1] * down, scales=scales, band=self.band))
        randomise(self.tok, seed=21, std=1.0).to(device)
        self.gpt = randomise(ScaleGPT(ScaleGPTConfig(vocab_size=vocab, grid_size=scales[-1], scales=scales, latent_dim=4, **TINY)),
                             seed=22).to(device)

    def models(self) -> dict[str, Any]:
        return {"model": ScaleLM(self.gpt, self.tok)}

    def order(self) -> list[list[int]]:
        out, start = [], 0
        for p in self.scales:
            out.append(list(range(start, start + p * p)))
            start += p * p
        return out

    def full_logits(self, tokens: torch.Tensor, cond_ids: torch.Tensor) -> torch.Tensor:
        maps = self.tok.split(tokens.to(self.device))
        return self.gpt.teacher_logits(cond_ids.to(self.device), self.tok.teacher_inputs(maps)).cpu()

    @functools.cache  # noqa: B019
    def enumeration(self) -> ScaleBench:
        return type(self)(self.device, scales=(1, 2), vocab=3)


class FrequencyBench(ScaleBench):
    contract = "next-frequency"
    band = "frequency"


class CoarseFineBench(ImageFamilyBench):
    contract = "coarse-fine"

    def __init__(self, device: str, grid: int = 4, clusters: int = 3, vocab: int = 8) -> None:
        super().__init__(device)
        self.grid, self.vocab, self.clusters = grid, vocab, clusters
        self.max_new_tokens = grid * grid
        self.coarse = randomise(LlamaGenGPT(GPTConfig(vocab_size=clusters, grid_size=grid, **TINY)), seed=31).to(device)
        self.fine = randomise(CTFFineGPT(CTFFineConfig(vocab_size=clusters, fine_vocab_size=vocab, grid_size=grid, **TINY)),
                              seed=32).to(device)
        self.fine.set_clusters(torch.arange(vocab) % clusters)

    def models(self) -> dict[str, Any]:
        return {"model": CoarseFineLM(self.coarse, self.fine)}

    def order(self) -> list[list[int]]:  # the coarse labels one by one, then every fine code at once
        raise NotImplementedError

    @torch.no_grad()
    def greedy_reference(self, batch: int) -> list[list[int]]:
        cond = self.cond_ids(batch).to(self.device)
        c = torch.zeros(batch, self.max_new_tokens, dtype=torch.long, device=self.device)
        for k in range(self.max_new_tokens):
            c[:, k] = self.coarse.training_logits(cond, c)[:, k].argmax(-1)
        return self.fine.training_fine_logits(cond, c).argmax(-1).cpu().tolist()

    def log_probs(self, tokens: torch.Tensor, cond_ids: torch.Tensor) -> torch.Tensor:
        """Per cell: log P(coarse label) + log P(fine | coarse grid), for every fine code."""
        tokens, cond_ids = tokens.to(self.device), cond_ids.to(self.device)
        coarse = self.fine.cluster_of[tokens]
        lc = self.coarse.training_logits(cond_ids, coarse).log_softmax(-1)  # [B, T, K]
        lf = self.fine.training_fine_logits(cond_ids, coarse).log_softmax(-1)  # [B, T, V]
        return (lf + lc.gather(-1, self.fine.cluster_of[None, None, :].expand(*tokens.shape, -1))).cpu()

    @functools.cache  # noqa: B019
    def enumeration(self) -> CoarseFineBench:
        return CoarseFineBench(self.device, grid=2, clusters=2, vocab=4)


def greedy_identity(info: SamplerInfo, b: ImageFamilyBench) -> None:
    """Greedy decoding == the order filled step by step with the uncached reference's argmax."""
    for batch in b.batches:
        got = b.run(info.name, batch)
        assert got.sequences == b.greedy_reference(batch), f"{info.name}: greedy output differs from the reference"
        b.assert_valid(got, batch, {})


def enumeration_exact(info: SamplerInfo, b: ImageFamilyBench) -> None:
    """20,000 samples (T=1) within the TV bound of the enumerated exact joint."""
    e = b.enumeration()
    exact = e.exact_joint()
    smp = get_sampler(info.name)
    gen = generator(b.device, 4242 + len(info.name))
    counts = np.zeros(len(exact), dtype=np.int64)
    weights = e.vocab ** np.arange(e.max_new_tokens - 1, -1, -1)
    config = DecodeConfig(max_new_tokens=e.max_new_tokens, temperature=1.0)
    cond = ClassCondition(labels=torch.zeros(BATCH, dtype=torch.long))
    for _ in range(N_SAMPLES // BATCH):
        res = smp.generate(e.models(), [[] for _ in range(BATCH)], config, gen, cond=cond)
        counts += np.bincount(np.array(res.sequences) @ weights, minlength=len(exact))
    dist, bound = tv(counts / counts.sum(), exact), tv_bound(exact, N_SAMPLES)
    assert dist < bound, f"{info.name}: TV {dist:.4f} >= bound {bound:.4f}"


BENCHES = {"next-neighbour": NeighbourBench, "next-scale": ScaleBench, "next-frequency": FrequencyBench,
           "coarse-fine": CoarseFineBench}
CHECKS = {("distribution-exact", c): (greedy_identity, enumeration_exact) for c in BENCHES}
