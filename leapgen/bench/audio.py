"""``leapgen bench audio``: quality and speed of the audio samplers on the shipped ``audio-music`` pipeline, one process.

Quality (an attribute classifier trained on real clips, :mod:`leapgen.data.audio_classifier`):

* **accuracy**: for ``num_prompts`` held-out test clips (parameter combinations never seen in
  training) the clip's first description is the prompt; the classifier's prediction on the
  generation is compared with the clip's labels (instrument family, tempo bucket, mode; their mean);
* **Frechet distance** between Gaussians of classifier embeddings of the generations and of the real
  test clips (an FAD analogue in this classifier's space, not VGGish);
* **KL**: mean over prompts and labels of ``KL(p_real || p_generated)`` of the classifier's label
  distributions on the real clip and on the clip generated from its description (AudioCraft's KL).

Reference rows: the real clips (upper bound) and their codec reconstructions (what the codec
keeps; the issue's target: accuracy within 5 points of the originals).

Speed (interleaved runs, medians): latency per clip, model forwards (target + other) and real-time
factor (wall time / audio seconds; < 1 is faster than real time) at batch 1 (``repeats`` runs) and
batch 8, for ``ar``, ``speculative``, ``magnet``, ``magnet_rescored`` and ``magnet_hybrid`` at
``duration`` seconds (5 s default), and ``magnet`` with 25 and 12 steps instead of 50
(:data:`STEP_SWEEP`). Quality also has the generated codes' NLL under the AR model
(:func:`ar_code_nll`), which moves with the step count where the classifier does not.

Writes ``bench_audio.md`` / ``bench_audio.json``, ``audio_spectrograms.png`` and a few short wavs
(``audio/``) into ``out_dir`` (docs/ by default).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data.audio_classifier import HEADS, load_or_train
from ..data.audio_music import DEFAULT_DIR, load_corpus
from ..errors import ConfigError, LeapgenError
from ..models.musicgen import cell_log_probs
from ..pipelines import Pipeline
from .common import (
    device_line,
    fmt,
    machine_info,
    markdown_table,
    median,
    parse_entry,
    split_entries,
    write_json,
    write_text,
)
from .fid import fid as frechet_distance

logger = logging.getLogger(__name__)

ALL_SAMPLERS = ("ar", "speculative", "magnet", "magnet_rescored", "magnet_hybrid")
#: MAGNeT with fewer steps than its paper default (20/10/10/10): the speed-quality trade-off
STEP_SWEEP = ("magnet[steps_per_stage=[10,5,5,5]]", "magnet[steps_per_stage=[6,2,2,2]]")
DEFAULT_SAMPLERS = ",".join(ALL_SAMPLERS + STEP_SWEEP)
#: timed only (no quality run): MAGNeT with its guidance pass as a second forward per step
SPEED_ONLY = "magnet[cfg_batch=false]"


def label_scores(probs: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict[str, float]:
    acc = {k: float((probs[k].argmax(1) == labels[k]).mean()) for k in HEADS}
    acc["mean"] = float(np.mean([acc[k] for k in HEADS]))
    return acc


def kl_pairs(p_real: dict[str, np.ndarray], p_gen: dict[str, np.ndarray]) -> float:
    eps = 1e-8
    return float(np.mean([np.mean(np.sum(p_real[k] * (np.log(p_real[k] + eps) - np.log(p_gen[k] + eps)), 1)) for k in HEADS]))


def generate_all(pipe: Any, entry: str, prompts: list[str], duration: float, seed: int,
                 batch: int = 8) -> tuple[list[np.ndarray], list[Any], list[Any]]:
    """Every prompt through ``entry`` (a sampler name, optionally ``name[key=json;...]``) in batches:
    ``(audios, stats per batch, codes)``."""
    sampler, params = parse_entry(entry)
    audios, stats, codes = [], [], []
    for i in range(0, len(prompts), batch):
        out = pipe(prompts[i : i + batch], sampler=sampler, duration=duration, seed=seed + i, **params)
        audios += out.audios
        stats.append(out.stats)
        codes += out.codes
    return audios, stats, codes


@torch.inference_mode()
def ar_code_nll(pipe: Any, prompts: list[str], codes: list[torch.Tensor], batch: int = 8) -> float | None:
    """Mean negative log-likelihood (nats per code) of generated codes ``[K, T]`` under the pipeline's
    AR model, teacher-forced over its codebook-pattern stream with the prompt's text condition and no
    guidance (the image bench's "mean NLL"): it sees what the attribute classifier does not, e.g. codes
    that a few decoding steps left improbable. None without an AR model."""
    ar = getattr(pipe, "_ar", None)
    if ar is None:
        return None
    total, count = 0.0, 0
    for i in range(0, len(prompts), batch):
        grid = torch.stack([x.to(ar.device) for x in codes[i : i + batch]])  # [B, K, T]
        total -= float(cell_log_probs(ar, grid, pipe.encode(prompts[i : i + batch])).sum())
        count += grid.numel()
    return total / max(count, 1)


def spectrogram_png(clips: dict[str, np.ndarray], path: Path, title: str) -> None:
    from PIL import Image, ImageDraw

    from ..data.audio_classifier import AttributeClassifier

    feat = AttributeClassifier()
    rows = []
    for name, clip in clips.items():
        m = feat.features(torch.from_numpy(clip[None].astype(np.float32)))[0].numpy()  # [mels, frames]
        m = np.clip((m - m.max() + 10.0) / 10.0, 0.0, 1.0)[::-1]
        img = Image.fromarray((m * 255).astype(np.uint8)).resize((m.shape[1] * 2, m.shape[0] * 2))
        canvas = Image.new("L", (img.width + 150, img.height), 255)
        canvas.paste(img, (150, 0))
        ImageDraw.Draw(canvas).text((4, img.height // 2 - 6), name, fill=0)
        rows.append(canvas)
    w = max(r.width for r in rows)
    sheet = Image.new("L", (w, sum(r.height + 4 for r in rows) + 20), 255)
    ImageDraw.Draw(sheet).text((4, 4), title, fill=0)
    y = 20
    for r in rows:
        sheet.paste(r, (0, y))
        y += r.height + 4
    sheet.save(path)


def run_audio_bench(pipeline: str = "leapgen/audio-music", out_dir: str = "docs", corpus_dir: str | None = None, num_prompts: int = 32,
                    duration: float = 5.0, samplers: str | list[str] = DEFAULT_SAMPLERS, repeats: int = 3, seed: int = 0,
                    quick: bool = False, speed_only: str | list[str] = SPEED_ONLY) -> dict[str, Any]:
    """Run the benchmark (see the module docstring) and write its files; returns the JSON record.
    ``speed_only``: entries (``name[key=json;...]``) timed beside the samplers, without a quality run."""
    import soundfile as sf

    torch.set_num_threads(1)
    names = split_entries(samplers)
    timed_only = split_entries(speed_only)
    entries = {e: parse_entry(e) for e in names + timed_only}  # checked before the long parts run
    if quick:
        num_prompts, repeats, duration = min(num_prompts, 4), 1, min(duration, 1.0)
    out = Path(out_dir)
    info = machine_info()
    t_start = time.perf_counter()
    pipe = Pipeline.from_pretrained(pipeline)
    for entry, (sampler, params) in entries.items():  # a bad sampler or parameter fails now, not minutes in
        try:
            pipe.make_sampler(sampler, dict(params))
        except LeapgenError as err:
            raise ConfigError(f"bench entry {entry!r}: {err}") from err
    root = Path(corpus_dir) if corpus_dir else DEFAULT_DIR
    test = load_corpus(root, "test")

    # 1. the classifier (trained once on real training clips, cached beside the corpus)
    cls_path = root / "attribute_classifier.safetensors"
    if cls_path.is_file():
        clf = load_or_train(cls_path)
    else:
        train = load_corpus(root, "train")
        labels = {k: train.labels(k) for k in HEADS}
        clf = load_or_train(cls_path, train.audio, labels, minutes=0.3 if quick else 5.0)
        del train
    idx = list(range(min(num_prompts, len(test))))
    prompts = [test.meta[i]["descriptions"][0] for i in idx]
    labels = {k: test.labels(k)[idx] for k in HEADS}
    real = [test.audio[i] for i in idx]
    emb_real_all, _ = clf.predict(test.audio)
    emb_real, p_real = clf.predict(real)

    quality: dict[str, dict[str, Any]] = {"real clips": {**label_scores(p_real, labels), "frechet": frechet_distance(emb_real, emb_real_all), "kl": 0.0}}
    with torch.inference_mode():
        recon = [pipe.codec.decode(pipe.codec.encode(a))[0, : a.size].numpy() for a in real]
    emb_rec, p_rec = clf.predict(recon)
    from ..tokenizers.audio_codec import log_mel, si_snr

    pairs = [(torch.from_numpy(np.asarray(r, dtype=np.float32))[None], torch.from_numpy(np.asarray(a, dtype=np.float32))[None]) for r, a in zip(recon, real)]
    codec_metrics = {
        "mel_distance": float(np.mean([float((log_mel(r) - log_mel(a)).abs().mean()) for r, a in pairs])),
        "si_snr_db": float(np.mean([float(si_snr(r, a).mean()) for r, a in pairs])),
        "clips": len(pairs),
    }
    quality["codec reconstructions"] = {**label_scores(p_rec, labels), "frechet": frechet_distance(emb_rec, emb_real_all), "kl": kl_pairs(p_real, p_rec)}

    # 2. generations per sampler (batch 8)
    gens: dict[str, list[np.ndarray]] = {}
    first_batch: dict[str, Any] = {}
    for name in names:
        t = time.perf_counter()
        audios, stats, codes = generate_all(pipe, name, prompts, duration, seed)
        gens[name] = audios
        first_batch[name] = stats[0]
        emb, p = clf.predict(audios)
        quality[name] = {**label_scores(p, labels), "frechet": frechet_distance(emb, emb_real_all), "kl": kl_pairs(p_real, p),
                         "ar_nll": ar_code_nll(pipe, prompts, codes),
                         "seconds": time.perf_counter() - t}
        logger.info("%s: %s", name, quality[name])

    # 3. speed: batch 1 (repeats, interleaved) and batch 8
    timed = names + timed_only
    speed: dict[str, dict[str, Any]] = {n: {"b1": [], "b8": None} for n in timed}

    def call(name: str, batch: list[str], s: int) -> Any:
        smp, params = entries.get(name, (name, {}))
        return pipe(batch, sampler=smp, duration=duration, seed=s, **params)

    for r in range(repeats):
        for name in timed[r % len(timed):] + timed[: r % len(timed)]:
            speed[name]["b1"].append(call(name, prompts[r % len(prompts)], seed + 100 + r).stats)
    for name in timed:  # batch 8: the first batch of the quality run when it had 8 prompts
        if len(prompts) >= 8 and name in first_batch:
            speed[name]["b8"] = first_batch[name]
        else:
            speed[name]["b8"] = call(name, (prompts * 8)[:8], seed + (0 if name in timed_only else 200)).stats
    rows_speed, record_speed = [], {}
    ar_latency = None
    for name in timed:
        b1 = speed[name]["b1"]
        lat = median([s.wall_time for s in b1])
        st = b1[0]
        b8 = speed[name]["b8"]
        rec = {"latency_b1_s": lat, "rtf_b1": lat / duration, "target_forwards_b1": st.target_forwards,
               "other_forwards_b1": st.other_forwards + st.draft_forwards, "latency_b8_s": b8.wall_time,
               "per_clip_b8_s": b8.wall_time / 8, "rtf_b8": b8.wall_time / (8 * duration), "target_forwards_b8": b8.target_forwards}
        if name == "ar":
            ar_latency = lat
        record_speed[name] = rec
    for name in timed:
        rec = record_speed[name]
        rec["speedup_vs_ar_b1"] = (ar_latency / rec["latency_b1_s"]) if ar_latency else float("nan")
        rows_speed.append([name, rec["latency_b1_s"], rec["rtf_b1"], rec["target_forwards_b1"], rec["other_forwards_b1"],
                           f"{rec['speedup_vs_ar_b1']:.2f}x", rec["per_clip_b8_s"], rec["rtf_b8"], rec["target_forwards_b8"]])

    # 4. files
    out.mkdir(parents=True, exist_ok=True)
    wav_dir = out / "audio"
    wav_dir.mkdir(exist_ok=True)
    n_show = int(duration * 16000)
    pics = {"real": real[0][:n_show], "codec": recon[0][:n_show], **{n: gens[n][0] for n in names}}
    spectrogram_png(pics, out / "audio_spectrograms.png", f"prompt: {prompts[0]}")
    short = int(min(3.0, duration) * 16000)
    written = []
    for name in ("real", "magnet", "ar"):
        clip = pics.get(name)
        if clip is not None:
            p = wav_dir / f"{name}.wav"
            sf.write(str(p), clip[:short], 16000, subtype="PCM_16")
            written.append(p.name)
    rows_q = [[n, q["family"], q["tempo"], q["mode"], q["mean"], q["frechet"], q["kl"], "-" if q.get("ar_nll") is None else f"{q['ar_nll']:.3f}"]
              for n, q in quality.items()]
    settings = {"device": str(pipe.device), "dtype": str(pipe.dtype), "threads": torch.get_num_threads()}
    md = [
        "# Audio benchmark (`leapgen bench audio`)",
        "",
        device_line(info, settings) + ".",
        f"Pipeline `{pipeline}`; {len(prompts)} prompts (first description of held-out test clips), {duration:g} s clips, "
        f"seed {seed}; speed at batch 1 = median of {repeats} interleaved runs. Wall time {time.perf_counter() - t_start:.0f} s.",
        "",
        "## Quality (attribute classifier trained on real clips)",
        "",
        "Accuracy against the prompt's labels (family of 6, tempo bucket of 3, mode of 2); Frechet distance of classifier "
        "embeddings against all real test clips; KL(real || generated) of the label distributions, paired by prompt; "
        "AR NLL: nats per code of the generated codes under the AR model (teacher-forced on its pattern stream, text "
        "condition, no guidance; lower = more probable to it, and `ar` samples from it).",
        "",
        markdown_table(["source", "family acc", "tempo acc", "mode acc", "mean acc", "Frechet", "KL", "AR NLL"], rows_q),
        "",
        f"Codec on the same {codec_metrics['clips']} test clips: log-mel L1 distance {codec_metrics['mel_distance']:.3f}, "
        f"SI-SNR {codec_metrics['si_snr_db']:.1f} dB; classifier mean accuracy on originals {quality['real clips']['mean']:.3f}, "
        f"on reconstructions {quality['codec reconstructions']['mean']:.3f} (target: within 0.05).",
        "",
        "## Speed",
        "",
        "Latency per clip, real-time factor (wall / audio seconds), target-model forwards and other forwards (draft, rescorer, "
        "AR prefix) at batch 1; per-clip time, RTF and forwards at batch 8 (the first batch of 8 prompts of the quality run). "
        "Forwards are machine-independent; on this CPU a forward's cost grows with the positions it covers (a masked "
        "forward covers every frame, an AR forward one cell), so wall-clock ratios differ from GPU ones."
        + (f" Timed only (no quality run): {', '.join('`' + e + '`' for e in timed_only)}." if timed_only else "")
        + (" The guidance pass of `magnet` shares its step's forward (a doubled batch) where `cfg_batch` batches it "
           "(on a CPU: one row); `cfg_batch=false` runs it as a second forward." if SPEED_ONLY in timed_only else ""),
        "",
        markdown_table(["sampler", "latency b1 (s)", "RTF b1", "forwards b1", "other fwd b1", "speed-up vs ar b1",
                        "per clip b8 (s)", "RTF b8", "forwards b8"], rows_speed),
        "",
        f"Spectrograms: `audio_spectrograms.png`; samples: {', '.join('`audio/' + w + '`' for w in written)}.",
    ]
    write_text(out / "bench_audio.md", "\n".join(md))
    record = {"machine": info, "settings": {"pipeline": pipeline, "num_prompts": len(prompts), "duration": duration, "repeats": repeats,
                                            "seed": seed, "samplers": names, "speed_only": timed_only}, "quality": quality, "codec": codec_metrics, "speed": record_speed,
              "wall_seconds": time.perf_counter() - t_start}
    write_json(out / "bench_audio.json", record)
    print("\n".join(md))
    return record


__all__ = ["run_audio_bench", "label_scores", "kl_pairs", "fmt"]
