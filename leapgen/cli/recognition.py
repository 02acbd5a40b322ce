"""CLI of the recognition families beyond speech: ``leapgen bench ocr`` and ``leapgen bench peptide``."""

from __future__ import annotations

from typing import Any

from .common import declare_outputs, print_json


def cmd_bench_ocr(args: Any) -> int:
    from ..bench.recognition import bench_ocr

    res = bench_ocr(args.pipeline, args.corpus, args.out, tuple(args.samplers.split(",")), args.max_images,
                    args.speed_images, args.repeats)
    print_json(res["latency"], indent=1)
    return 0


def cmd_bench_peptide(args: Any) -> int:
    from ..bench.recognition import bench_peptide

    res = bench_peptide(args.pipeline, args.corpus, args.out, tuple(args.samplers.split(",")), args.max_spectra,
                        args.speed_spectra, args.repeats)
    print_json({k: {m: v[m] for m in ("aa_precision", "peptide_recall", "within_tolerance", "batch1_ms")}
                for k, v in res["samplers"].items()}, indent=1)
    return 0


def register_cli(parsers: Any) -> None:
    b = parsers.bench.add_parser("ocr", help="OCR bench: word accuracy on held-out fonts/words, latency per sampler",
                                 description="Benchmark cppd / ar / speculative; writes bench_ocr.md/.json/_samples.png.")
    b.add_argument("--pipeline", default="leapgen/ocr-en", help="OCR pipeline name or folder (default: %(default)s)")
    b.add_argument("--corpus", default=None, help="ocr-en corpus folder (default: the cache)")
    b.add_argument("--out", default="docs", help="folder for bench_ocr.md/.json and bench_ocr_samples.png (default: %(default)s)")
    b.add_argument("--samplers", default="cppd,ar,speculative", help="comma-separated samplers (default: %(default)s)")
    b.add_argument("--max-images", type=int, default=300, help="images per held-out split (default: %(default)s)")
    b.add_argument("--speed-images", type=int, default=20, help="images timed one per call at batch 1 (default: %(default)s)")
    b.add_argument("--repeats", type=int, default=2, help="interleaved timing rounds; medians (default: %(default)s)")
    b.set_defaults(func=cmd_bench_ocr)
    declare_outputs(b, out="dir")
    p = parsers.bench.add_parser("peptide", help="peptide bench: AA precision, peptide recall, precursor rate, latency",
                                 description="Benchmark ar / ar_bidirectional / ctc_pmc; writes bench_peptide.md/.json.")
    p.add_argument("--pipeline", default="leapgen/peptide", help="peptide pipeline name or folder (default: %(default)s)")
    p.add_argument("--corpus", default=None, help="peptide corpus folder (default: the cache)")
    p.add_argument("--out", default="docs", help="folder for bench_peptide.md/.json (default: %(default)s)")
    p.add_argument("--samplers", default="ar,ar_bidirectional,ctc_pmc", help="comma-separated samplers (default: %(default)s)")
    p.add_argument("--max-spectra", type=int, default=300, help="held-out spectra of the quality run (default: %(default)s)")
    p.add_argument("--speed-spectra", type=int, default=10, help="spectra timed one per call at batch 1 (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=2, help="interleaved timing rounds; medians (default: %(default)s)")
    p.set_defaults(func=cmd_bench_peptide)
    declare_outputs(p, out="dir")
