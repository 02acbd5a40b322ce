"""Tables and picture of ``leapgen bench asr`` (``bench_asr.md``, ``bench_asr.png``) from its results dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPLIT_TITLES = {"test_seen": "unseen sentences, seen voices", "test_unseen_voice": "unseen sentences, unseen voices",
                "timing": "word-timing split (held-out half)"}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def accuracy_table(res: dict[str, Any]) -> list[str]:
    lines = []
    for split, per in res["accuracy"].items():
        n = next(iter(per.values()))["utterances"] if per else 0
        lines += [f"### {split} ({SPLIT_TITLES.get(split, split)}; {n} utterances)", "",
                  "| sampler | WER % | CER % | SER % | S | D | I | length acc. % | identical to ar |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, a in per.items():
            ident = f"{a['identical_to_ar']}/{a['utterances']}" if "identical_to_ar" in a else "-"
            lines.append(f"| {name} | {_pct(a['wer'])} | {_pct(a['cer'])} | {_pct(a['ser'])} | {a['substitutions']} | "
                         f"{a['deletions']} | {a['insertions']} | {_pct(a['length_accuracy'])} | {ident} |")
        lines.append("")
    return lines


def speed_table(res: dict[str, Any]) -> list[str]:
    sp = res["speed"]
    audio = next(iter(sp.values()))["audio_s"] if sp else 0
    lines = [f"### Speed (batch 1 medians over {res['speed_utterances']} utterances of >= 5 s, mean {audio:.1f} s; "
             f"{res['environment']['threads']} CPU thread)", "",
             "| sampler | front end ms | encoder ms | decoder ms | total ms | decoder speed-up vs ar | end-to-end speed-up vs ar | RTF | batch-16 utt/s | target / draft forwards |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in sp.items():
        fw = f"{s['target_forwards']:.1f} / {s['draft_forwards']:.1f}" if "target_forwards" in s else "-"
        lines.append(f"| {name} | {s['frontend_ms']:.1f} | {s['encoder_ms']:.1f} | {s['decoder_ms']:.1f} | "
                     f"{s['total_ms']:.1f} | {s.get('decoder_speedup_vs_ar', float('nan')):.2f}x | "
                     f"{s.get('e2e_speedup_vs_ar', float('nan')):.2f}x | {s['rtf']:.4f} | {s['throughput_b16_utt_s']:.1f} | {fw} |")
    return lines + [""]


def write_report(res: dict[str, Any], out: Path) -> None:
    lines = ["# ASR bench (`leapgen bench asr`)", "",
             f"Pipeline `{res['pipeline']}`, corpus `speech-en` (espeak-ng voices; see docs/asr.md). "
             "All numbers below are written by the bench itself; regenerate with `make bench-asr`.", ""]
    tr = res.get("training")
    if tr:
        lines += [f"Shipped model: {tr.get('parameters', {}).get('total', '?')} parameters, trained "
                  f"{tr.get('train_minutes')} min ({tr.get('steps')} steps, {tr.get('epochs')} epochs) on "
                  f"{tr.get('train_utterances')} utterances ({tr.get('train_hours')} h), {tr.get('vocab_words')} words"
                  + (f", continuing a run of {tr['previous'].get('train_minutes')} min ({tr['previous'].get('steps')} steps)"
                     if tr.get("previous") else "") + ".", ""]
    if "cif_tail" in res:
        lines += [f"Paraformer fires `floor(sum(alpha) + tail)` tokens with tail **{res['cif_tail']:g}** (FunASR: 0.45; "
                  "the recipe calibrates it on training utterances, `leapgen.train.asr_en.calibrate_tail`).", ""]
    timing = res["accuracy"].get("timing", {}).get("paraformer", {})
    if "timestamp_mae_ms" in timing:
        lines += [f"Word timestamps (paraformer, CIF weights): mean absolute boundary error "
                  f"**{timing['timestamp_mae_ms']:.0f} ms** (p90 {timing['timestamp_p90_ms']:.0f} ms) over "
                  f"{timing['timestamp_boundaries']} boundaries of correctly recognised words.", ""]
    lines += accuracy_table(res) + speed_table(res)
    lines += ["S / D / I: substituted, deleted, inserted words. Length acc.: the output has as many words as the "
              "reference (for paraformer: CIF's token count). `gad` verifies the whole Paraformer hypothesis with "
              "the AR decoder (`gad[ctc]`: the CTC hypothesis); `speculative` is the registry's draft-model sampler "
              "with the Paraformer hypothesis as its draft model (position-indexed: at T=0 its greedy drafts and confidences are read "
              "once per utterance, one draft call, each step's chain is cut at confidence 0.6 and re-aligned after an inserted or "
              "dropped word; no prefill step); "
              "`specdec` is `gad` with top-3 / tau 1.0 relaxed acceptance (lossy). 'identical to ar' counts "
              "utterances whose tokens equal greedy `ar`'s. Speed-ups are ratios of medians measured in the same process, interleaved. Forwards: mean decoder calls per utterance at batch 1 (a NAR pass counts as one; `gad`'s hypothesis pass is a draft forward).", ""]
    (out / "bench_asr.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    seen = res["accuracy"].get("test_seen", {})
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in res["speed"].items():
        if name in seen:
            ax.scatter(s["decoder_ms"], 100 * seen[name]["wer"])
            ax.annotate(name, (s["decoder_ms"], 100 * seen[name]["wer"]), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("decoder ms per utterance (batch 1, log)")
    ax.set_ylabel("WER % (test_seen)")
    ax.set_title("ASR samplers: accuracy vs decoder latency")
    fig.tight_layout()
    fig.savefig(out / "bench_asr.png", dpi=100)
    plt.close(fig)
