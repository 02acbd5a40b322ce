"""Stop strings, finish reasons and streaming of the text pipeline (``leapgen.pipelines.text_stop``).

The samplers come from the registry (``pipe.runnable_samplers()``): every one must stop at the token
that completes a stop string; the exact ones must give greedy ``ar``'s tokens cut there, the
relaxed ones a cut of their own output. Streaming is checked with a recording streamer and with
transformers' own ``TextStreamer`` / ``TextIteratorStreamer``.
"""

from __future__ import annotations

import threading

import pytest
import torch
from transformers import TextIteratorStreamer, TextStreamer

from leapgen import Pipeline
from leapgen.errors import InputError
from leapgen.pipelines.text_stop import StopStrings, check_stop, finish_reason
from leapgen.samplers import list_samplers

torch.set_num_threads(1)

PROMPT = "def parse_args(argv):\n"
NEW = 48
EXACT = {s.name for s in list_samplers() if s.guarantee in ("greedy-exact", "distribution-exact")}


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.from_pretrained("leapgen/text-code")


@pytest.fixture(scope="module")
def reference(pipe):
    """Greedy ``ar`` without stops, and a stop string taken from the middle of its text."""
    out = pipe(PROMPT, max_new_tokens=NEW)
    ids = out.token_ids[0]
    assert len(ids) == NEW and out.finish_reasons == ["length"]
    # the text of tokens 20..22, stripped to a string that first occurs there
    head = pipe.tokenizer.decode(ids[:20], skip_special_tokens=True)
    piece = pipe.tokenizer.decode(ids[:23], skip_special_tokens=True)[len(head):].strip()
    assert piece and piece not in head, "pick another slice: the stop string must first occur late"
    return ids, piece


class Recorder:
    """A streamer that records what it is given."""

    def __init__(self):
        self.puts, self.ends = [], 0

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        self.ends += 1


def expected_cut(tokenizer, ids, stop):
    """The shortest prefix of ``ids`` whose text holds ``stop``, found by walking token by token."""
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        if stop in text:
            return ids[:k], text[: text.find(stop)]
    return ids, tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("name", sorted(set(Pipeline.from_pretrained("leapgen/text-code").runnable_samplers())))
def test_every_sampler_stops_at_the_completing_token(pipe, reference, name):
    ids, stop = reference
    out = pipe(PROMPT, sampler=name, max_new_tokens=NEW, stop=[stop, "\x00never"], seed=0)
    got = out.token_ids[0]
    if name in EXACT:  # greedy: ar's tokens, cut after the token that completes the stop string
        want, text = expected_cut(pipe.tokenizer, ids, stop)
        assert got == want, f"{name}: {got} != {want}"
        assert out.texts[0] == text and out.finish_reasons == ["stop"] and out.stop_reasons == [stop]
    else:  # a relaxed sampler has its own tokens: whatever they are, they are cut at the first stop
        full = pipe.tokenizer.decode(got, skip_special_tokens=True)
        assert stop not in out.texts[0]
        if out.finish_reasons == ["stop"]:
            assert stop in full and stop not in pipe.tokenizer.decode(got[:-1], skip_special_tokens=True)
            assert out.texts[0] == full[: full.find(stop)]
        else:
            assert out.finish_reasons[0] in ("stop", "length") and out.stop_reasons[0] != stop and stop not in full


def test_stop_saves_target_forwards(pipe, reference):
    _, stop = reference
    full = pipe(PROMPT, max_new_tokens=NEW)
    cut = pipe(PROMPT, max_new_tokens=NEW, stop=stop)
    assert cut.stats.target_forwards < full.stats.target_forwards
    assert cut.stats.new_tokens == len(cut.token_ids[0]) < NEW


def test_batch_rows_stop_on_their_own(pipe, reference):
    ids, stop = reference
    out = pipe([PROMPT, "import os\n"], sampler="speculative", max_new_tokens=NEW, stop=stop)
    assert out.token_ids[0] == expected_cut(pipe.tokenizer, ids, stop)[0]
    alone = pipe("import os\n", sampler="speculative", max_new_tokens=NEW, stop=stop)
    assert out.token_ids[1] == alone.token_ids[0] and out.finish_reasons[1] == alone.finish_reasons[0]


def test_finish_cuts_by_bisection_without_the_loop(pipe, reference):
    """``StopStrings.finish`` alone (a sampler that does not commit through Rows) gives the same cut."""
    ids, stop = reference
    stops = StopStrings(pipe.tokenizer, [stop])
    kept, text, matched = stops.finish(list(ids))
    assert matched == stop and (kept, text) == expected_cut(pipe.tokenizer, ids, stop)
    assert stops.finish(list(ids[:5])) == (list(ids[:5]), pipe.tokenizer.decode(ids[:5]), None)
    assert stops.reached(kept) and not stops.reached(kept[:-1])


def test_finish_reason_and_bad_stop_values(pipe):
    assert finish_reason([3, 0], None, (0,)) == ("stop", 0)          # an end-of-sequence token
    assert finish_reason([3, 4], None, (0,)) == ("length", None)
    assert finish_reason([3, 0], "\n\n", (0,)) == ("stop", "\n\n")  # a stop string
    assert check_stop(None) == () and check_stop("x") == ("x",) and check_stop(["a", "a", "b"]) == ("a", "b")
    for bad, match in (("", "empty"), ([""], "empty"), (3, "string or a list"), ([b"x"], "must be strings")):
        with pytest.raises(InputError, match=match):
            pipe(PROMPT, max_new_tokens=2, stop=bad)


def test_streaming_sends_the_prompt_then_each_step(pipe):
    rec = Recorder()
    out = pipe(PROMPT, sampler="speculative", max_new_tokens=NEW, streamer=rec)
    prompt, *steps = rec.puts
    assert prompt == [out.prompt_token_ids[0]] and rec.ends == 1
    assert [t for s in steps for t in s] == out.token_ids[0]
    assert any(len(s) > 1 for s in steps), "speculative commits several tokens in a step: one put each"


def test_streaming_stops_with_the_stop_string(pipe, reference):
    _, stop = reference
    rec = Recorder()
    out = pipe(PROMPT, max_new_tokens=NEW, streamer=rec, stop=stop)
    assert [t for s in rec.puts[1:] for t in s] == out.token_ids[0] and out.finish_reasons == ["stop"]


def test_transformers_streamers(pipe, capsys):
    out = pipe(PROMPT, sampler="prompt_lookup", max_new_tokens=24, streamer=TextStreamer(pipe.tokenizer, skip_prompt=True))
    assert capsys.readouterr().out.strip() == out.texts[0].strip()
    it = TextIteratorStreamer(pipe.tokenizer, skip_prompt=True, timeout=60)
    worker = threading.Thread(target=lambda: results.append(pipe(PROMPT, sampler="speculative", max_new_tokens=24, streamer=it)))
    results: list = []
    worker.start()
    chunks = list(it)
    worker.join(60)
    assert "".join(chunks) == results[0].texts[0]


def test_streamer_misuse_is_refused_and_never_leaves_a_reader_waiting(pipe):
    with pytest.raises(InputError, match="put"):
        pipe(PROMPT, max_new_tokens=2, streamer=object())
    for bad_call in (lambda s: pipe([PROMPT, PROMPT], max_new_tokens=2, streamer=s),   # a batch
                     lambda s: pipe("", max_new_tokens=2, streamer=s)):                 # a bad prompt
        rec = Recorder()
        with pytest.raises(InputError):
            bad_call(rec)
        assert rec.ends == 1


class FailingEnd(Recorder):
    """A streamer whose end() raises (after recording the call); put() raises too with ``bad_put``."""

    def __init__(self, bad_put: bool = False):
        super().__init__()
        self.bad_put = bad_put

    def put(self, value):
        if self.bad_put and self.puts:  # the prompt goes through; the first generated tokens fail
            raise KeyError("put failed")
        super().put(value)

    def end(self):
        super().end()
        raise RuntimeError("end failed")


def test_a_streamer_whose_end_raises_surfaces_without_masking_the_decoding_error(pipe, caplog):
    # the call succeeded: the end() error surfaces, named, with the streamer's own error as its cause
    ok = FailingEnd()
    with pytest.raises(InputError, match=r"streamer's end\(\) raised RuntimeError: end failed") as err:
        pipe(PROMPT, max_new_tokens=3, streamer=ok)
    assert isinstance(err.value.__cause__, RuntimeError) and ok.ends == 1 and len(ok.puts) > 1
    # the call failed first (put raised during decoding): that error is the one raised; end() ran once,
    # and its failure is logged and noted on the decoding error instead of replacing it
    bad = FailingEnd(bad_put=True)
    with caplog.at_level("ERROR", logger="leapgen.pipelines.text_stop"), pytest.raises(KeyError, match="put failed") as err:
        pipe(PROMPT, max_new_tokens=3, streamer=bad)
    assert bad.ends == 1
    assert any("end() raised RuntimeError: end failed" in n for n in getattr(err.value, "__notes__", []))
    assert "end failed" in caplog.text


def test_diffusion_pipeline_cuts_at_stop_strings():
    """The masked (diffusion) text pipeline does not write left to right: ``stop`` cuts after decoding."""
    dpipe = Pipeline.from_pretrained("leapgen/text-code-diffusion")
    prompt = "class Stack:\n    def push(self, item):\n        "
    full = dpipe(prompt, max_new_tokens=16, seed=0)
    ids = full.token_ids[0]
    assert full.finish_reasons[0] in ("stop", "length") and len(ids) >= 6
    stop = None
    for start in range(3, len(ids) - 1):  # a piece of the text that first occurs after a few tokens
        head = dpipe.tokenizer.decode(ids[:start], skip_special_tokens=True)
        piece = dpipe.tokenizer.decode(ids[: start + 2], skip_special_tokens=True)[len(head):]
        if piece.strip() and piece not in head:
            stop = piece
            break
    if stop is None:
        pytest.fail(f"the shipped diffusion model's text {full.texts[0]!r} repeats itself; use another prompt")
    cut = dpipe(prompt, max_new_tokens=16, seed=0, stop=stop)
    want, text = expected_cut(dpipe.tokenizer, ids, stop)
    assert cut.token_ids[0] == want and cut.texts[0] == text and cut.finish_reasons == ["stop"]
    assert cut.stop_reasons == [stop]


def test_cli_stop_and_stream(pipe, reference, capsys):
    from leapgen.cli import main
    from leapgen.cli.generate import unescape

    assert unescape(r"a\nb\tc\\n") == "a\nb\tc\\n" and unescape("é") == "é"
    ids, stop = reference
    want = expected_cut(pipe.tokenizer, ids, stop)[1]
    assert main(["generate", "text", PROMPT, "--max-new-tokens", str(NEW), "--stop", stop]) == 0
    text, stats = capsys.readouterr().out.rstrip("\n").rsplit("\n", 1)
    assert text == want and stats.startswith("sampler=ar ") and stats.endswith("finish=stop")
    assert main(["generate", "text", PROMPT, "--sampler", "speculative", "--max-new-tokens", str(NEW), "--stream"]) == 0
    streamed = capsys.readouterr().out
    assert streamed.startswith(pipe(PROMPT, max_new_tokens=NEW).texts[0]) and "finish=length" in streamed
    assert main(["generate", "text", PROMPT, "--pipeline", "leapgen/text-code-diffusion", "--stream"]) == 2
    assert "does not write left to right" in capsys.readouterr().err
