"""De novo peptide sequencing network: one spectrum encoder, a NAR CTC decoder, an AR decoder and a
bidirectional-augmented AR decoder (CrossNovo).

* **Spectrum encoder** (Casanovo-style): every peak is a token, ``sinusoid(m/z)`` over wavelengths
  0.001..10,000 plus a linear intensity embedding; a precursor token (``sinusoid(mass)`` + a charge
  embedding) is prepended; ``enc_layers`` Transformer encoder layers.
* **NAR decoder** (PrimeNovo): ``ctc_slots`` learned slot queries, a non-causal Transformer decoder
  over the encoder memory; its hidden states ``H [B, S, d]`` go to a CTC head (blank = 0). Decoded
  by ``ctc_pmc`` (precise mass control) or plain CTC.
* **AR decoder**: the ASR family's causal decoder layer (self-attention KV cache, cross-attention
  to the spectrum) — the baseline. With ``mass_inputs`` (the recipe's default) every input token
  also carries ``Linear([sinusoid(prefix mass); sinusoid(precursor mass - H2O - prefix mass)])``,
  the masses of the residues decoded so far and of those still to come (ContraNovo's prefix /
  suffix mass encoding, Jin et al., AAAI 2024): the decoder then looks for the b / y ion of the
  next residue at a known offset instead of summing residue masses in attention. The residue
  mass of every cached slot is a KV-shaped extra layer of the cache (``[B, 1, T, 1]``, float64),
  so rollback, row selection and tree compaction move it with the keys, and a token's prefix mass
  is the sum over the slots its attention mask lets it see. With ``ion_inputs`` the decoder also
  reads an **ion lookup** (DeepNovo's ion features, Tran et al., PNAS 2017): for every candidate
  next residue ``a`` and every fragment ion of :data:`IONS` (b, y, doubly charged, water /
  ammonia losses, a), the best Gaussian match (sigma ``ion_sigma``) of a peak at the m/z that ion
  would have, and that match times the peak's intensity: ``[19 x 9 x 2]`` numbers, projected to
  ``d``. It is a function of the prefix mass, the precursor and the peaks, so it needs no cache.
* **Bidirectional-augmented AR decoder** (CrossNovo, "Bidirectional Representations Augmented
  Autoregressive Biological Sequence Generation", NeurIPS 2025): the same layer plus a second
  cross-attention to the NAR decoder's hidden states. **Gradient blocking**: it reads
  ``H.detach()``, so its loss never updates the NAR features; **importance annealing**: the
  recipe moves the loss weights from the NAR side to the AR side over training
  (``losses(weights=...)``).

Ids: 0 = blank / padding, 1 = ``</s>`` (also the AR start token), 2.. = residues of
``config.alphabet`` with masses ``config.masses`` (I merged into L; C carbamidomethylated).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..configuration import ComponentConfig, PretrainedMixin
from .asr import _ARLayer, _Attention
from .speech_encoder import LayerKV, ctc_loss, decoder_self_mask, key_padding_bias, sinusoid
from .torch_lean import decoder_forward, encoder_forward

BLANK, EOS = 0, 1
H2O = 18.010565
PROTON = 1.007276
NH3 = 17.026549
CO = 27.994915
#: fragment ions looked up for every candidate residue (``ion_inputs``): name -> (uses the
#: complementary y side, charge, neutral loss)
IONS = (("b", False, 1, 0.0), ("y", True, 1, 0.0), ("b2+", False, 2, 0.0), ("y2+", True, 2, 0.0),
        ("b-H2O", False, 1, H2O), ("y-H2O", True, 1, H2O), ("b-NH3", False, 1, NH3), ("y-NH3", True, 1, NH3),
        ("a", False, 1, CO))
ALPHABET = "GASPVTCLNDQKEMHFRYW"
MASSES = (57.02146, 71.03711, 87.03203, 97.05276, 99.06841, 101.04768, 160.03065, 113.08406, 114.04293, 115.02694,
          128.05858, 128.09496, 129.04259, 131.04049, 137.05891, 147.06841, 156.10111, 163.06333, 186.07931)


@dataclasses.dataclass
class PeptideConfig(ComponentConfig):
    alphabet: str = ALPHABET
    masses: tuple = MASSES
    d_model: int = 128
    heads: int = 4
    ff: int = 256
    enc_layers: int = 2
    nar_layers: int = 2
    ar_layers: int = 2
    max_len: int = 16
    ctc_slots: int = 24
    max_charge: int = 4
    dropout: float = 0.1
    #: the AR decoders also read the prefix and suffix masses of their inputs (see the module docstring)
    mass_inputs: bool = False
    #: ... and, per candidate residue, the peaks found at its fragment ions' m/z (``IONS``; needs mass_inputs)
    ion_inputs: bool = False
    #: m/z width (Da, Gaussian sigma) of the ion lookup
    ion_sigma: float = 0.02

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 2


def mass_embedding(values: Tensor, dim: int) -> Tensor:
    """Sinusoids of masses / m/z over wavelengths 0.001 .. 10,000 (Casanovo's peak encoder)."""
    half = dim // 2
    lo, hi = 0.001, 10000.0
    wav = lo * (hi / lo) ** (torch.arange(half, device=values.device, dtype=torch.float64) / max(1, half - 1))
    ang = values.double()[..., None] / wav * 2 * math.pi
    return torch.cat([ang.sin(), ang.cos()], -1).float()


class _BiARLayer(_ARLayer):
    """:class:`~leapgen.models.asr._ARLayer` plus a cross-attention to the NAR hidden states."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__(d, heads, ff, dropout)
        self.n_nar = nn.LayerNorm(d)
        self.cross_nar = _Attention(d, heads)

    def forward(self, x: Tensor, kv: LayerKV | None, cross: tuple[Tensor, Tensor], self_mask: Tensor | None,
                cross_mask: Tensor | None, nar: tuple[Tensor, Tensor] | None = None) -> Tensor:
        x = self.attend(x, kv, cross, self_mask, cross_mask)
        cn = self.cross_nar
        x = x + self.drop(cn.attend(cn.split(cn.q(self.n_nar(x))), nar[0], nar[1], None))
        return x + self.drop(self.ff(self.n3(x)))


class _ARStack(nn.Module):
    """Embedding + AR layers + output head (plain or bidirectional-augmented)."""

    def __init__(self, c: PeptideConfig, bidirectional: bool) -> None:
        super().__init__()
        d = c.d_model
        layer = _BiARLayer if bidirectional else _ARLayer
        self.embed = nn.Embedding(c.vocab_size, d)
        self.layers = nn.ModuleList(layer(d, c.heads, c.ff, c.dropout) for _ in range(c.ar_layers))
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, c.vocab_size)
        self.bidirectional = bidirectional
        self.mass_in = nn.Linear(2 * d, d) if c.mass_inputs else None
        if c.ion_inputs and not c.mass_inputs:
            raise ValueError("ion_inputs needs mass_inputs (the lookup starts from the prefix mass)")
        self.ion_in = nn.Linear(len(c.masses) * len(IONS) * 2, d) if c.ion_inputs else None
        self.ion_sigma = float(c.ion_sigma)
        # float64 residue masses per id, kept out of the buffers so that a dtype cast never rounds them
        self._masses = (0.0, 0.0, *c.masses)
        self._mass_table: dict[torch.device, Tensor] = {}

    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [(la.cross.split(la.cross.k(memory)), la.cross.split(la.cross.v(memory))) for la in self.layers]

    def nar_kv(self, hidden: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [(la.cross_nar.split(la.cross_nar.k(hidden)), la.cross_nar.split(la.cross_nar.v(hidden)))
                for la in self.layers]

    def _masses_on(self, device: torch.device) -> Tensor:
        """float64 mass of every id (0 for blank and ``</s>``) on ``device``, made once per device."""
        table = self._mass_table.get(device)
        if table is None:
            table = self._mass_table[device] = torch.tensor(self._masses, dtype=torch.float64, device=device)
        return table

    def mass_features(self, tokens: Tensor, self_mask: Tensor | None, past: int, precursor_mass: Tensor | None,
                      mass_kv: LayerKV | None) -> tuple[Tensor, Tensor]:
        """``([B, n, d] prefix / suffix mass inputs, [B, n] prefix masses)`` of ``n`` new tokens (see
        the module docstring); appends their residue masses to ``mass_kv`` (the cache's extra layer)
        when given."""
        if precursor_mass is None:
            raise ValueError("this decoder reads prefix / suffix masses: pass precursor_mass [B]")
        n = tokens.shape[1]
        m = self._masses_on(tokens.device)[tokens]  # [B, n] float64: the mass of every new token (0 for </s>)
        if mass_kv is not None:  # the cache's extra layer: the mass of every slot, [B, 1, T, 1]
            mass_kv.keys = mass_kv.values = torch.cat([mass_kv.keys, m[:, None, :, None]], 2)
            m = mass_kv.keys[:, 0, :, 0]
        # prefix mass = the masses of every slot the token attends to (its valid past, its ancestors
        # among the new tokens, itself): holes, trees and rollbacks need no special case
        if self_mask is not None:
            allowed = (self_mask[:, 0] == 0).double()
        else:
            allowed = torch.ones(n, past + n, dtype=torch.float64, device=tokens.device).tril(past)[None]
        prefix = (allowed @ m[..., None]).squeeze(-1)
        suffix = precursor_mass.to(prefix.device, torch.float64)[:, None] - H2O - prefix
        d = self.embed.embedding_dim
        feats = torch.cat([mass_embedding(prefix, d), mass_embedding(suffix, d)], -1)
        return self.mass_in(feats.to(self.mass_in.weight.dtype)), prefix

    def ion_matches(self, prefix: Tensor, precursor_mass: Tensor, peaks: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """``[B, n, A, K, 2]`` ion lookup (see the module docstring): for every candidate next residue
        ``A`` and ion ``K`` of :data:`IONS`, the best Gaussian match of a peak at that ion's m/z and
        that match times the peak's intensity; ``peaks``: ``(mz [B, P], intensity [B, P], mask [B, P])``."""
        mz, inten, mask = peaks
        q = prefix[..., None] + self._masses_on(prefix.device)[2:]  # [B, n, A]: prefix mass after each residue
        total = precursor_mass.to(prefix.device, torch.float64)[:, None, None]
        ions = []
        for _, y_side, z, loss in IONS:
            neutral = (total - q if y_side else q) - loss  # b: sum(prefix); y: sum(suffix) + H2O = M - prefix
            ions.append((neutral + z * PROTON) / z)
        expect = torch.stack(ions, -1).float()  # [B, n, A, K]
        diff = expect[..., None] - mz.float()[:, None, None, None, :]  # [B, n, A, K, P]
        match = torch.exp(-0.5 * (diff / self.ion_sigma) ** 2) * mask[:, None, None, None, :]
        return torch.stack([match.amax(-1), (match * inten.float()[:, None, None, None, :]).amax(-1)], -1)

    def forward(self, tokens: Tensor, positions: Tensor, cross: list, cross_mask: Tensor, self_kv: list | None = None,
                self_mask: Tensor | None = None, nar: list | None = None, precursor_mass: Tensor | None = None,
                mass_kv: LayerKV | None = None, peaks: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        d = self.embed.embedding_dim
        x = self.embed(tokens) * d**0.5 + sinusoid(positions, d).to(self.embed.weight.dtype)
        n = tokens.shape[1]
        past = self_kv[0].keys.shape[2] if self_kv else 0
        self_mask = decoder_self_mask(self_mask, n, past, x)
        if self.mass_in is not None:
            feats, prefix = self.mass_features(tokens, self_mask, past, precursor_mass, mass_kv)
            x = x + feats.to(x.dtype)
            if self.ion_in is not None:
                if peaks is None:
                    raise ValueError("this decoder reads an ion lookup: pass peaks=(mz, intensity, mask)")
                ions = self.ion_matches(prefix, precursor_mass, peaks).flatten(2)
                x = x + self.ion_in(ions.to(self.ion_in.weight.dtype)).to(x.dtype)
        cm = key_padding_bias(cross_mask, x)
        for i, layer in enumerate(self.layers):
            args = (x, self_kv[i] if self_kv else None, cross[i], self_mask, cm)
            x = layer(*args, nar[i]) if self.bidirectional else layer(*args)
        logits = self.out(self.norm(x)).float()
        if not self.training:  # blank / padding is never an AR output
            logits = torch.cat([torch.full_like(logits[..., :1], -1e4), logits[..., 1:]], -1)
        return logits


class PeptideModel(nn.Module, PretrainedMixin):
    """Spectrum encoder + NAR CTC decoder + AR decoder + bidirectional-augmented AR decoder."""

    config_class = PeptideConfig

    def __init__(self, config: PeptideConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or PeptideConfig()
        c.masses = tuple(c.masses)
        d = c.d_model
        self.int_embed = nn.Linear(1, d)
        self.charge_embed = nn.Embedding(c.max_charge + 1, d)
        enc = nn.TransformerEncoderLayer(d, c.heads, c.ff, c.dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc, c.enc_layers, enable_nested_tensor=False)
        self.enc_norm = nn.LayerNorm(d)
        self.slots = nn.Parameter(torch.randn(1, c.ctc_slots, d) * 0.02)
        dec = nn.TransformerDecoderLayer(d, c.heads, c.ff, c.dropout, batch_first=True, norm_first=True)
        self.nar = nn.TransformerDecoder(dec, c.nar_layers)
        self.nar_norm = nn.LayerNorm(d)
        self.ctc_out = nn.Linear(d, c.vocab_size)
        self.ar = _ARStack(c, bidirectional=False)
        self.bi = _ARStack(c, bidirectional=True)

    def residue_masses(self) -> list[float]:
        """Mass of every id (0 for blank and ``</s>``)."""
        return [0.0, 0.0, *self.config.masses]

    # ------------------------------------------------------------------------------ encoder / NAR
    def encode(self, mz: Tensor, intensity: Tensor, mask: Tensor, precursor_mass: Tensor, charge: Tensor
               ) -> tuple[Tensor, Tensor]:
        """``(memory [B, 1 + P, d], mask [B, 1 + P])``: the precursor token, then the peaks."""
        d = self.config.d_model
        w = self.int_embed.weight.dtype  # float32 unless the pipeline was cast (pipe.to(torch.bfloat16))
        peaks = mass_embedding(mz, d).to(w) + self.int_embed(intensity[..., None].to(w))
        prec = mass_embedding(precursor_mass, d).to(w) + self.charge_embed(charge.clamp(0, self.config.max_charge))
        x = torch.cat([prec[:, None], peaks], 1)
        full = torch.cat([torch.ones_like(mask[:, :1]), mask], 1)
        x = encoder_forward(self.encoder, x, ~full)
        return self.enc_norm(x) * full[..., None], full

    def nar_hidden(self, memory: Tensor, mask: Tensor) -> Tensor:
        """The NAR decoder's hidden states ``[B, ctc_slots, d]`` (one non-causal pass)."""
        q = self.slots.expand(memory.shape[0], -1, -1) + sinusoid(
            torch.arange(self.config.ctc_slots, device=memory.device), self.config.d_model)[None].to(self.slots.dtype)
        return self.nar_norm(decoder_forward(self.nar, q, memory, None, ~mask))

    def ctc_logprobs(self, hidden: Tensor) -> Tensor:
        """CTC log-probabilities ``[B, S, V]`` (``</s>`` is never a CTC output)."""
        logits = self.ctc_out(hidden).float()
        logits = torch.cat([logits[..., :1], torch.full_like(logits[..., 1:2], -1e4), logits[..., 2:]], -1)
        return logits.log_softmax(-1)

    # ------------------------------------------------------------------------------ training
    def losses(self, batch: dict[str, Tensor], targets: list[list[int]], weights: dict[str, float] | None = None,
               label_smoothing: float = 0.05) -> dict[str, Tensor]:
        """``loss = w_ctc * ctc + w_ar * ar + w_bi * bi`` (targets: residue ids >= 2, no ``</s>``)."""
        w = {"ctc": 1.0, "ar": 1.0, "bi": 1.0, **(weights or {})}
        memory, mask = self.encode(batch["mz"], batch["intensity"], batch["mask"], batch["precursor_mass"],
                                   batch["charge"])
        dev = memory.device
        hidden = self.nar_hidden(memory, mask)
        tl = torch.tensor([len(t) for t in targets], device=dev)
        y = torch.zeros(len(targets), max(1, int(tl.max())), dtype=torch.long, device=dev)
        for r, t in enumerate(targets):
            y[r, : len(t)] = torch.tensor(t, device=dev)
        frames = torch.full((len(targets),), self.config.ctc_slots, device=dev)
        out = {"ctc": ctc_loss(self.ctc_logprobs(hidden), frames, y, tl)}
        b = y.shape[0]
        gold = torch.cat([y, y.new_zeros(b, 1)], 1).scatter(1, tl[:, None], EOS)
        gold = gold.masked_fill(torch.arange(gold.shape[1], device=dev)[None] > tl[:, None], -100)
        inp = torch.cat([y.new_full((b, 1), EOS), y], 1)
        pos = torch.arange(inp.shape[1], device=dev)[None].expand(b, -1)
        prec = batch["precursor_mass"]
        peaks = (batch["mz"], batch["intensity"], batch["mask"])
        ar = self.ar(inp, pos, self.ar.cross_kv(memory), mask, precursor_mass=prec, peaks=peaks)
        out["ar"] = F.cross_entropy(ar.flatten(0, 1), gold.flatten(), ignore_index=-100, label_smoothing=label_smoothing)
        nar = self.bi.nar_kv(hidden.detach())  # gradient blocking: the AR loss never updates the NAR features
        bi = self.bi(inp, pos, self.bi.cross_kv(memory), mask, nar=nar, precursor_mass=prec, peaks=peaks)
        out["bi"] = F.cross_entropy(bi.flatten(0, 1), gold.flatten(), ignore_index=-100, label_smoothing=label_smoothing)
        out["loss"] = w["ctc"] * out["ctc"] + w["ar"] * out["ar"] + w["bi"] * out["bi"]
        return out

    def num_parameters(self) -> dict[str, int]:
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        enc = count(self.encoder) + count(self.int_embed) + count(self.charge_embed) + count(self.enc_norm)
        return {"encoder": enc, "nar": count(self.nar) + count(self.ctc_out) + self.slots.numel() + count(self.nar_norm),
                "ar": count(self.ar), "bidirectional_ar": count(self.bi), "total": count(self)}

    # ------------------------------------------------------------------------------ text <-> ids
    def encode_peptide(self, seq: str) -> list[int]:
        idx = {a: i + 2 for i, a in enumerate(self.config.alphabet)}
        return [idx[a] for a in seq.replace("I", "L")]

    def decode_ids(self, ids: list[int]) -> str:
        al = self.config.alphabet
        return "".join(al[i - 2] for i in ids if 2 <= i < len(al) + 2)

    def sequence_mass(self, ids: list[int]) -> float:
        """Neutral mass ``sum(residues) + H2O`` of residue ids."""
        m = self.residue_masses()
        return sum(m[i] for i in ids) + H2O


__all__ = ["ALPHABET", "BLANK", "EOS", "H2O", "IONS", "MASSES", "PROTON", "PeptideConfig", "PeptideModel", "mass_embedding"]
