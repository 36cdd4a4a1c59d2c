"""duet.asr.words (word times and confidences from NeMo's decoding) and duet.io.expand_audio_paths (folders of
audio), with the entry points that use them: evaluate_ctc's per-utterance JSONL and --audio, tools/pipeline.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from duet.asr import inference
from duet.asr.decoding import build_decoder, decoding_settings
from duet.asr.inference import transcribe_files_with_words, transcribe_with_words
from duet.asr.words import TimedTranscript, Word
from duet.errors import AsrInputError
from duet.io import AUDIO_EXTENSIONS, expand_audio_paths
from tests.asr_helpers import check_words, sample_utterances, touch

SR = 16000


# ---------------------------------------------------------------- duet.asr.words on the micro model


def test_word_times_are_ordered_inside_the_audio_and_spell_the_transcript(bundled_base_model):
    model, _ = bundled_base_model
    entries = sample_utterances(7)
    audios = [inference.load_audio(e["audio_filepath"], SR) for e in entries]
    timed = transcribe_with_words(model, audios, batch_size=3, workers=1)
    assert [t.text for t in timed] == inference.transcribe_audio(model, audios, batch_size=3, workers=1)
    frame_s = model.encoder.subsampling_factor * model.cfg.preprocessor.window_stride
    assert sum(len(t.words) for t in timed) > 30
    for t, audio in zip(timed, audios):
        check_words(t, len(audio) / SR, frame_s)
    assert len({w.start for t in timed for w in t.words}) > 3  # real times, not one value for all
    # forked decoding processes send the same transcripts back, in input order; their one thread sums in another
    # order than this process's two, so a confidence may differ in its last rounded digit
    forked = transcribe_with_words(model, audios, batch_size=3, workers=2)
    assert [(t.text, [(w.word, w.start, w.end) for w in t.words]) for t in forked] == \
        [(t.text, [(w.word, w.start, w.end) for w in t.words]) for t in timed]
    assert [w.confidence for t in forked for w in t.words] == pytest.approx(
        [w.confidence for t in timed for w in t.words], abs=2e-4)
    # the model's own decoding is left as it was: no timestamps, text only
    assert not model.decoding.compute_timestamps and not model.decoding.preserve_frame_confidence


def test_files_give_the_same_words_as_arrays(bundled_base_model):
    model, _ = bundled_base_model
    entries = sample_utterances(3)
    paths = [e["audio_filepath"] for e in entries[:3]]
    from_files = transcribe_files_with_words(model, paths, batch_size=2, workers=1)
    assert from_files == transcribe_with_words(model, [inference.load_audio(p, SR) for p in paths], workers=1)


def timed_with(model, settings, audios) -> tuple[list[TimedTranscript], list[str]]:
    """``audios``' transcripts with words under ``settings``, and the plain transcripts of the same decoder."""
    decoder = build_decoder(model, settings)
    return (transcribe_with_words(model, audios, batch_size=4, workers=1, decoder=decoder),
            inference.transcribe_audio(model, audios, batch_size=4, workers=1, decoder=decoder))


@pytest.mark.parametrize("strategy", ["beam", "beam_lm"])
def test_beam_search_words_are_force_aligned_and_keep_the_beams_text(bundled_base_model, bundled_token_lm,
                                                                      strategy):
    model, _ = bundled_base_model
    audios = [inference.load_audio(e["audio_filepath"], SR) for e in sample_utterances(8)]
    # a heavy LM weight, so that beam_lm writes words the acoustic model did not prefer
    settings = decoding_settings(strategy, beam_size=4, ngram_lm=str(bundled_token_lm), alpha=2.0, beta=2.0) \
        if strategy == "beam_lm" else decoding_settings("beam", beam_size=4)
    timed, plain = timed_with(model, settings, audios)
    assert [t.text for t in timed] == plain
    frame_s = model.encoder.subsampling_factor * model.cfg.preprocessor.window_stride
    for t, audio in zip(timed, audios):
        check_words(t, len(audio) / SR, frame_s)
    assert sum(len(t.words) for t in timed) > 20 and len({w.start for t in timed for w in t.words}) > 3
    if strategy == "beam_lm":
        greedy = transcribe_with_words(model, audios, batch_size=4, workers=1)
        assert [t.text for t in timed] != [g.text for g in greedy], "the LM should change some words"


def test_forced_alignment_gives_greedys_times_where_the_beam_agrees_with_greedy(bundled_base_model):
    """Where beam search writes greedy's tokens, the best CTC path that spells them is greedy's own (the
    frame-by-frame argmax, the best of all paths, spells them), so NeMo's timestamps and confidences come out the
    same. Allowed: one encoder frame (80 ms), for a path that ties with greedy's; where the times are the same the
    confidence is the same."""
    model, _ = bundled_base_model
    audios = [inference.load_audio(e["audio_filepath"], SR) for e in sample_utterances(12)]
    greedy = transcribe_with_words(model, audios, batch_size=4, workers=1)
    beam, _ = timed_with(model, decoding_settings("beam", beam_size=4), audios)
    frame_s = model.encoder.subsampling_factor * model.cfg.preprocessor.window_stride
    same = [(g, b) for g, b in zip(greedy, beam) if g.text == b.text]
    assert len(same) >= 8 and sum(len(g.words) for g, _ in same) > 30
    for g, b in same:
        assert [w.word for w in g.words] == [w.word for w in b.words]
        for gw, bw in zip(g.words, b.words):
            assert abs(gw.start - bw.start) <= frame_s + 1e-6 and abs(gw.end - bw.end) <= frame_s + 1e-6, (gw, bw)
            if (gw.start, gw.end) == (bw.start, bw.end):
                assert bw.confidence == pytest.approx(gw.confidence, abs=1e-3), (gw, bw)


def test_aligned_log_probs_leave_the_forced_path_as_the_argmax():
    """A path the frame-by-frame argmax would not take (token 2 where 1 is likelier) is what greedy then reads,
    each frame keeping the aligned label's own log-prob."""
    from duet.asr.words import aligned_log_probs

    blank = 3
    probs = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.1, 0.1, 0.1, 0.7], [0.1, 0.2, 0.6, 0.1], [0.1, 0.1, 0.1, 0.7],
                          [0.1, 0.1, 0.1, 0.7]])
    log_probs = torch.stack([probs.log(), probs.log()])
    lengths = torch.tensor([5, 3])  # the second utterance's last two frames are padding
    masked = aligned_log_probs(log_probs, lengths, [torch.tensor([2, 2]), [1]], blank)
    labels = masked.argmax(-1)
    assert labels[0].tolist() == [2, blank, 2, blank, blank]  # a repeated token needs a blank between
    assert labels[1, :3].tolist() in ([1, blank, blank], [blank, 1, blank])
    kept = log_probs.gather(2, labels[:, :, None])
    assert torch.equal(masked.gather(2, labels[:, :, None]), kept)
    assert torch.isinf(masked).sum() == 2 * 5 * 3  # everything else is out


def test_shifted_moves_every_word_and_keeps_none():
    timed = TimedTranscript("a b", [Word("a", 0.0, 0.2, 0.5), Word("b", 0.3, 0.5, 1.0)])
    assert timed.shifted(2.5).words == [Word("a", 2.5, 2.7, 0.5), Word("b", 2.8, 3.0, 1.0)]
    assert TimedTranscript("a", None).shifted(3.0).words is None
    assert timed.words_json()[1] == {"word": "b", "start": 0.3, "end": 0.5, "confidence": 1.0}


# ---------------------------------------------------------------- evaluate_ctc


def run_evaluate(argv, capsys) -> tuple[int, str, str]:
    from nemo_recipes.evaluate_ctc import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_evaluate_jsonl_has_words_unless_turned_off(bundled_base_model, micro_model_and_manifest, tmp_path, capsys):
    _, model_path = bundled_base_model
    _, _, manifest, entries = micro_model_and_manifest
    code, _, err = run_evaluate(["--model", model_path, "--manifest", manifest, "--out-dir", tmp_path / "on",
                                 "--workers", "1"], capsys)
    assert code == 0, err[-3000:]
    records = [json.loads(line) for line in (tmp_path / "on" / "eval_utterances.jsonl").read_text().splitlines()]
    assert len(records) == len(entries) and all(r["words"] for r in records)
    for record, entry in zip(records, entries):
        timed = TimedTranscript(record["hyp"], [Word(**w) for w in record["words"]])
        check_words(timed, entry["duration"], 0.08)
    code, _, err = run_evaluate(["--model", model_path, "--manifest", manifest, "--out-dir", tmp_path / "off",
                                 "--workers", "1", "--no-word-timestamps"], capsys)
    assert code == 0, err[-3000:]
    off = [json.loads(line) for line in (tmp_path / "off" / "eval_utterances.jsonl").read_text().splitlines()]
    assert "words" not in off[0] and [r["hyp"] for r in off] == [r["hyp"] for r in records]


def test_evaluate_jsonl_has_words_under_beam_lm(bundled_base_model, bundled_token_lm, micro_model_and_manifest,
                                                tmp_path, capsys):
    _, model_path = bundled_base_model
    _, _, manifest, entries = micro_model_and_manifest
    code, _, err = run_evaluate(["--model", model_path, "--manifest", manifest, "--out-dir", tmp_path, "--workers",
                                 "1", "--decoding", "beam_lm", "--lm", bundled_token_lm, "--beam-size", "4"], capsys)
    assert code == 0, err[-3000:]
    assert json.loads((tmp_path / "eval_summary.json").read_text())["decoding"].startswith("beam4+LM")
    records = [json.loads(line) for line in (tmp_path / "eval_utterances.jsonl").read_text().splitlines()]
    assert len(records) == len(entries) and all(r["words"] for r in records)
    for record, entry in zip(records, entries):
        check_words(TimedTranscript(record["hyp"], [Word(**w) for w in record["words"]]), entry["duration"], 0.08)


def test_evaluate_word_timestamps_with_stream_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_evaluate(["--model", tmp_path / "m.nemo", "--manifest", tmp_path / "m.json", "--stream",
                                 "--word-timestamps"], capsys)
    assert code == 2 and err.strip() == ("evaluate_ctc: error: --word-timestamps is not available with --stream "
                                         "(the streaming path gives no word times)")


def test_evaluate_audio_takes_a_folder(micro_model_and_manifest, tmp_path, capsys):
    _, model_path, _, entries = micro_model_and_manifest
    folder = tmp_path / "audio"
    for i, entry in enumerate(entries[:3]):
        (folder / f"spk{i % 2}").mkdir(parents=True, exist_ok=True)
        (folder / f"spk{i % 2}" / f"utt{i}.FLAC").write_bytes(Path(entry["audio_filepath"]).read_bytes())
    (folder / "notes.txt").write_text("not audio")
    code, out, err = run_evaluate(["--model", model_path, "--audio", folder, "--workers", "1"], capsys)
    assert code == 0, err[-3000:]
    names = [Path(line.split("\t")[0]).relative_to(folder).as_posix() for line in out.strip().splitlines()]
    assert names == ["spk0/utt0.FLAC", "spk0/utt2.FLAC", "spk1/utt1.FLAC"]


# ---------------------------------------------------------------- folders of audio


def test_a_folder_becomes_its_audio_files_recursively_sorted(tmp_path):
    root = tmp_path / "rec"
    wanted = [touch(root / "b" / "deep" / "z.Mp3"), touch(root / "a.WAV"), touch(root / "b" / "c.flac"),
              touch(root / "b" / "d.opus")]
    touch(root / "readme.txt"), touch(root / "b" / "c.trans.txt"), touch(root / ".hidden" / "x.flac")
    touch(root / "b" / ".partial.wav")
    (root / "folder.flac").mkdir()  # a folder named like audio is no file
    single = touch(tmp_path / "single.flac")
    missing = tmp_path / "missing.flac"
    got = expand_audio_paths([single, root, str(missing)])
    assert got == [single, *sorted(wanted), missing]  # files and missing paths stay, in place


@pytest.mark.parametrize("content", [[], ["notes.txt", "sub/image.png"]])
def test_a_folder_without_audio_is_an_error_naming_it(tmp_path, content):
    root = tmp_path / "empty"
    root.mkdir()
    for name in content:
        touch(root / name)
    with pytest.raises(AsrInputError, match=f"no audio files in folder {root} "):
        expand_audio_paths([root])


# how soundfile writes each ending a folder is searched for: every one of them must be readable by load_audio
WRITE_AS = {".flac": ("FLAC", None), ".wav": ("WAV", None), ".mp3": ("MP3", None), ".ogg": ("OGG", "VORBIS"),
            ".oga": ("OGG", "VORBIS"), ".opus": ("OGG", "OPUS"), ".aiff": ("AIFF", None), ".aif": ("AIFF", None),
            ".aifc": ("AIFF", None), ".au": ("AU", None), ".snd": ("AU", None), ".caf": ("CAF", None),
            ".w64": ("W64", None), ".rf64": ("RF64", None)}


def test_every_audio_extension_searched_for_is_one_load_audio_reads(tmp_path):
    assert set(WRITE_AS) == AUDIO_EXTENSIONS
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(SR) / SR)).astype(np.float32)
    for ext, (fmt, subtype) in WRITE_AS.items():
        path = tmp_path / f"tone{ext}"
        soundfile.write(path, tone, SR, format=fmt, subtype=subtype)
        audio = inference.load_audio(path, SR)
        assert abs(len(audio) - SR) < 0.1 * SR and np.abs(audio).max() > 0.1, ext


def test_token_runs_collapse_repeats_and_split_at_blanks():
    from duet.asr.words import token_runs

    assert token_runs(torch.tensor([0, 5, 5, 0, 0, 5, 7, 7, 0]), blank_id=0) == [(1, 2), (5, 5), (6, 7)]
    assert token_runs(torch.tensor([0, 0]), blank_id=0) == []


def test_a_word_after_a_pause_starts_where_its_first_token_is_emitted(bundled_base_model):
    """Constructed posteriors of two words with a long pause between (each token certain on its frames, blank
    elsewhere): each word spans the frames its tokens are emitted on, not the pause before it (NeMo's own
    convention starts a word where the one before it ended)."""
    from duet.asr.decoding.nemo_decoding import word_decoding
    from duet.asr.words import timed_transcripts

    model, _ = bundled_base_model
    tokenizer, blank = model.tokenizer, int(model.decoding.blank_id)
    first, second = tokenizer.text_to_ids("the"), tokenizer.text_to_ids("sun")
    frames, emitted = 80, {}
    for start, ids in ((5, first), (60, second)):  # the second word 55 frames after the first
        for k, token in enumerate(ids):
            emitted[start + 2 * k] = emitted[start + 2 * k + 1] = token  # two frames a token, no blank within
    probs = torch.full((1, frames, model.tokenizer.vocab_size + 1), 1e-4)
    for t in range(frames):
        probs[0, t, emitted.get(t, blank)] = 1.0
    log_probs = (probs / probs.sum(-1, keepdim=True)).log()
    lengths = torch.tensor([frames])
    frame_s = float(model.encoder.subsampling_factor) * float(model.cfg.preprocessor.window_stride)
    for texts, tokens in ((None, None), (["the sun"], [first + second])):  # greedy's path, then a forced one
        (timed,) = timed_transcripts(model, word_decoding(model), log_probs, lengths, texts, tokens)
        assert [w.word for w in timed.words] == ["the", "sun"]
        the, sun = timed.words
        assert (the.start, the.end) == pytest.approx((5 * frame_s, (5 + 2 * len(first)) * frame_s))
        assert (sun.start, sun.end) == pytest.approx((60 * frame_s, (60 + 2 * len(second)) * frame_s))
