"""duet.pipeline / tools/pipeline.py: bad input, silence, long-audio splitting, JSON output.

The models here are stand-ins that record what they are given, so the pipeline's own logic is tested
in seconds; the end-to-end run with the demo's real models is in test_demo.py (slow tier).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile

import duet.pipeline as pipeline_module
import duet.speech_out as speech_out
from duet.asr.decoding import BeamLmSettings
from duet.asr.words import TimedTranscript, Word
from duet.asr.confidence import NOT_UNDERSTOOD_REPLY
from duet.foundation import python_command
from duet.asr.batching import PIPELINE_BATCHING
from duet.cli.cli_args import model_decoding_from_args, pipeline_settings_from_args, resolve_asr_decoding
from duet.pipeline import PipelineSettings, VoicePipeline, is_silent, split_at_pauses
from duet.synth.conversation import room_noise, speech_range
from slm.tool_calls import ExecutedText
from tests.script_helpers import load_script

SAMPLES = Path(__file__).resolve().parent.parent / "samples"

SR = 16000


def speechlike(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Noise bursts shaped like syllables: loud enough to count as speech."""
    n = int(seconds * SR)
    envelope = (np.sin(np.linspace(0, seconds * 4 * np.pi, n)) > 0).astype(np.float32)
    return (0.3 * envelope * rng.standard_normal(n)).astype(np.float32)


def utterance_with_pauses(segments: list[float], pause_s: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = []
    for seconds in segments:
        parts += [speechlike(seconds, rng), np.zeros(int(pause_s * SR), dtype=np.float32)]
    return np.concatenate(parts)


@functools.lru_cache(maxsize=1)
def sample_speech() -> np.ndarray:
    """Six bundled train-clean utterances, each cut to its sound, back to back: continuous speech the VAD hears."""
    paths = sorted((SAMPLES / "LibriSpeech" / "train-clean").rglob("*.flac"))[:6]
    if len(paths) < 6:
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    clips = [soundfile.read(path, dtype="float32")[0] for path in paths]
    return np.concatenate([clip[slice(*speech_range(clip))] for clip in clips])


def speech_with_pauses(segments: list[float], pause_s: float = 0.6) -> np.ndarray:
    """Stretches of real (sample) speech of the given lengths with ``pause_s`` of silence after each: where the
    pipeline may cut (Silero VAD hears the pauses; ``utterance_with_pauses``' noise bursts it does not call speech)."""
    speech, parts, at = sample_speech(), [], 0
    for seconds in segments:
        n = int(seconds * SR)
        parts += [np.resize(np.roll(speech, -at), n), np.zeros(int(pause_s * SR), dtype=np.float32)]
        at = (at + n) % len(speech)
    return np.concatenate(parts)


class FakeAsr:
    def __init__(self, text: str = "set a timer for five minutes"):
        self.cfg = SimpleNamespace(sample_rate=SR)
        self.text = text
        self.calls: list[list[int]] = []
        self.audios: list[np.ndarray] = []


@pytest.fixture
def make_pipeline(monkeypatch):
    responses = []

    def fake_transcribe(model, audios, batch_size, decoder):
        """The stand-in's text for each piece, its words spread evenly over the piece (times from its start)."""
        model.calls.append([len(a) for a in audios])
        model.audios += list(audios)
        transcripts = []
        for audio in audios:
            names, seconds = model.text.split(), len(audio) / SR
            step = seconds / max(1, len(names))
            transcripts.append(TimedTranscript(model.text, [
                Word(name, round(i * step, 3), round((i + 1) * step, 3), model.confidence)
                for i, name in enumerate(names)]))
        return transcripts

    monkeypatch.setattr(pipeline_module, "transcribe_with_words", fake_transcribe)
    monkeypatch.setattr(VoicePipeline, "respond_with_calls",
                        lambda self, text: responses.append(text) or ExecutedText(f"ok: {text}"))

    def build(text="set a timer for five minutes", confidence=0.9, **settings):
        asr = FakeAsr(text)
        asr.confidence = confidence  # every word's
        return VoicePipeline(asr, slm_model=None, slm_tokenizer=None, settings=PipelineSettings(**settings),
                             asr_decoder=SimpleNamespace()), responses
    return build


def test_answers_a_clip_and_times_each_stage(make_pipeline, tmp_path):
    pipe, responses = make_pipeline()
    path = tmp_path / "a.flac"
    soundfile.write(path, utterance_with_pauses([1.0]), SR)
    result = pipe.run(path)
    assert result.error is None and result.transcript == "set a timer for five minutes"
    assert result.response == "ok: set a timer for five minutes" and responses == [result.transcript]
    assert set(result.latency_s) == {"audio_load", "asr", "slm", "total"}
    assert result.latency_s["total"] >= result.latency_s["asr"]


def test_any_rate_and_channel_count_reaches_the_model_as_16k_mono(make_pipeline, tmp_path):
    import librosa

    pipe, _ = make_pipeline()
    rng = np.random.default_rng(3)
    t = np.arange(int(1.5 * SR)) / SR
    speech = (0.3 * np.sin(2 * np.pi * 440 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32)
    left = librosa.resample(speech, orig_sr=SR, target_sr=44100)
    right = 0.001 * rng.standard_normal(len(left)).astype(np.float32)  # a near-silent second channel
    path = tmp_path / "stereo.wav"
    soundfile.write(path, np.stack([left, right], axis=1), 44100)
    result = pipe.run(path)
    assert result.error is None
    heard = pipe.asr_model.audios[0]
    assert heard.ndim == 1 and abs(len(heard) - len(speech)) < 2  # one channel, at 16 kHz
    n = min(len(heard), len(speech))
    # the mean of the two channels: the 16 kHz speech at half its level
    assert np.corrcoef(heard[:n], speech[:n])[0, 1] > 0.99
    assert np.std(heard[:n]) / np.std(speech[:n]) == pytest.approx(0.5, abs=0.03)


@pytest.mark.parametrize("kind", ["missing", "empty", "corrupt"])
def test_bad_files_are_reported_by_name(make_pipeline, tmp_path, kind):
    pipe, responses = make_pipeline()
    path = tmp_path / f"{kind}.flac"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "corrupt":
        path.write_bytes(b"not audio at all" * 100)
    result = pipe.run(path)
    assert result.error and str(path) in result.error
    assert result.transcript is None and responses == []


def test_silence_skips_both_models(make_pipeline, tmp_path):
    pipe, responses = make_pipeline()
    path = tmp_path / "quiet.wav"
    soundfile.write(path, 0.0005 * np.random.default_rng(1).standard_normal(SR * 2), SR)
    result = pipe.run(path)
    assert result.error is None and result.transcript == "" and "silence" in result.note
    assert pipe.asr_model.calls == [] and responses == []


def test_empty_transcript_skips_the_language_model(make_pipeline, tmp_path):
    pipe, responses = make_pipeline(text="")
    path = tmp_path / "mumble.flac"
    soundfile.write(path, utterance_with_pauses([1.0]), SR)
    result = pipe.run(path)
    assert result.transcript == "" and "empty transcript" in result.note and responses == []


def test_long_audio_is_cut_at_pauses_into_bounded_chunks():
    audio = speech_with_pauses([3.0, 4.0, 2.5, 5.0, 3.5, 4.0])
    chunks = split_at_pauses(audio, SR, max_chunk_seconds=8.0)
    assert len(chunks) > 1 and sum(len(c) for c in chunks) == len(audio)
    assert all(len(c) <= 8 * SR for c in chunks)
    for chunk in chunks[:-1]:  # every cut fell in a pause, not inside a burst
        assert np.abs(chunk[-int(0.05 * SR):]).max() == 0.0


def test_speech_without_pauses_is_cut_hard_at_the_limit():
    audio = (0.3 * np.random.default_rng(2).standard_normal(25 * SR)).astype(np.float32)  # no gap at all
    chunks = split_at_pauses(audio, SR, max_chunk_seconds=10.0)
    assert [len(c) for c in chunks] == [10 * SR, 10 * SR, 5 * SR]


def test_trim_silence_cuts_the_silence_around_a_recording_and_keeps_file_times(make_pipeline, tmp_path):
    rng = np.random.default_rng(5)
    speech = sample_speech()[:SR]  # 1 s of the sample's speech
    hiss = lambda seconds: (1e-4 * rng.standard_normal(int(seconds * SR))).astype(np.float32)  # about -80 dBFS
    path = tmp_path / "padded.wav"
    soundfile.write(path, np.concatenate([hiss(2.0), speech, hiss(3.0)]), SR)
    whole, _ = make_pipeline()
    trimmed, _ = make_pipeline(trim_silence_s=0.2)
    kept = whole.run(path), trimmed.run(path)
    assert len(whole.asr_model.audios[0]) == 6 * SR  # all of it, by default
    heard = len(trimmed.asr_model.audios[0]) / SR
    assert 1.3 <= heard <= 1.55, heard  # the 1 s of speech and 0.2 s either side (give or take a 32 ms window)
    words = kept[1].words
    assert 1.7 <= words[0]["start"] <= 1.9 and words[-1]["end"] <= 3.3  # still seconds from the file's start
    assert kept[0].transcript == kept[1].transcript
    with pytest.raises(ValueError, match="trim_silence_s must be >= 0"):
        make_pipeline(trim_silence_s=-1)


def test_trim_silence_cuts_room_noise_that_an_energy_threshold_keeps(make_pipeline, tmp_path):
    """Fan, hum and key clicks 30 dB under the speech's peak: all 'sound' to an energy threshold, no speech to the
    VAD."""
    speech = sample_speech()[:2 * SR]
    peak_db = 20 * np.log10(np.abs(speech).max())
    quiet = np.zeros(int(1.5 * SR), dtype=np.float32)
    audio = np.concatenate([quiet, speech, quiet, quiet[:SR // 2]])
    path = tmp_path / "room.wav"
    soundfile.write(path, audio + room_noise(len(audio) / SR, SR, 1, peak_db - 30), SR)
    trimmed, _ = make_pipeline(trim_silence_s=0.2)
    trimmed.run(path)
    heard = len(trimmed.asr_model.audios[0]) / SR
    assert 2.3 <= heard <= 2.6, heard
    from duet.vad import energy_speech_bounds

    audio = soundfile.read(path, dtype="float32")[0]
    first, last = energy_speech_bounds(audio, SR, 0.2)
    assert (last - first) / SR > 5.0  # the fallback hears the noise as sound and keeps nearly all of it


def test_trim_silence_keeps_a_recording_without_speech_whole(make_pipeline, tmp_path):
    """A loud tone is not silence, but no speech either: trimming never throws a recording away."""
    t = np.arange(3 * SR) / SR
    path = tmp_path / "tone.wav"
    soundfile.write(path, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), SR)
    trimmed, _ = make_pipeline(trim_silence_s=0.2)
    trimmed.run(path)
    assert len(trimmed.asr_model.audios[0]) == 3 * SR


def test_a_long_file_is_transcribed_in_chunks(make_pipeline, tmp_path):
    pipe, _ = make_pipeline(batching=replace(PIPELINE_BATCHING, max_chunk_seconds=8.0))
    path = tmp_path / "long.flac"
    soundfile.write(path, speech_with_pauses([3.0, 4.0, 2.5, 5.0, 3.5, 4.0]), SR)
    result = pipe.run(path)
    assert result.chunks == len(pipe.asr_model.calls[0]) > 1
    assert result.transcript == " ".join(["set a timer for five minutes"] * result.chunks)


def test_minutes_of_audio_reach_the_model_in_pieces_of_at_most_the_limit(make_pipeline, tmp_path):
    pipe, _ = make_pipeline()  # the CLI's default limit, 20 s
    path = tmp_path / "meeting.flac"
    sentences = [3.0 + (i % 5) for i in range(40)]  # about 3.6 minutes of speech with pauses
    soundfile.write(path, speech_with_pauses(sentences), SR)
    result = pipe.run(path)
    lengths = pipe.asr_model.calls[0]
    assert result.audio_seconds > 180 and result.chunks == len(lengths) >= 11
    assert max(lengths) <= 20 * SR and sum(lengths) == soundfile.info(path).frames


def test_is_silent_threshold():
    assert is_silent(np.zeros(SR, dtype=np.float32), SR)
    assert not is_silent(utterance_with_pauses([0.5]), SR)


@pytest.fixture
def cli():
    """tools/pipeline.py as a module (its main() runs in this process)."""
    return load_script(Path(__file__).parent.parent / "tools/pipeline.py", "pipeline_cli")


@pytest.fixture
def model_args(tmp_path) -> list[str]:
    """--asr-model/--slm-model paths that exist (for CLI tests whose model loading is replaced)."""
    (tmp_path / "asr.nemo").write_bytes(b"x")
    (tmp_path / "slm").mkdir()
    return ["--asr-model", str(tmp_path / "asr.nemo"), "--slm-model", str(tmp_path / "slm")]


def stand_in_load(monkeypatch, pipe) -> list[int]:
    """VoicePipeline.load returns ``pipe``; the list it returns counts the loads."""
    loads = []

    def chatty_load(cls, *args, **kwargs):
        loads.append(1)
        os.write(1, b"[NeMo I] model restored\n")  # NeMo logs to the process's stdout: must not reach the JSON
        return pipe, 0.5
    monkeypatch.setattr(VoicePipeline, "load", classmethod(chatty_load))
    return loads


def test_cli_keeps_going_after_bad_files_and_writes_json_lines(cli, make_pipeline, model_args, monkeypatch,
                                                               tmp_path, capfd):
    pipe, _ = make_pipeline()
    loads = stand_in_load(monkeypatch, pipe)
    good = tmp_path / "good.flac"
    soundfile.write(good, utterance_with_pauses([1.0]), SR)
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "corrupt.flac").write_bytes(b"not audio at all" * 100)
    files = [tmp_path / name for name in ("missing.flac", "good.flac", "empty.wav", "corrupt.flac")]
    code = cli.main([*map(str, files), str(good), "--json", *model_args])
    assert code == 1 and loads == [1]  # the models load once for all the files
    lines = [json.loads(line) for line in capfd.readouterr().out.strip().splitlines()]
    assert [Path(r["file"]).name for r in lines] == ["missing.flac", "good.flac", "empty.wav", "corrupt.flac",
                                                     "good.flac"]
    for line, path in zip(lines, files + [good]):
        if path.name == "good.flac":
            assert line["error"] is None and line["response"].startswith("ok:")
            assert line["latency_s"]["model_load"] == 0.5
        else:
            assert str(path) in line["error"] and line["transcript"] is None
    assert "no such file" in lines[0]["error"] and "empty file" in lines[2]["error"]


def test_cli_text_output_names_the_bad_file_and_counts_failures(cli, make_pipeline, model_args, monkeypatch,
                                                                tmp_path, capsys):
    pipe, _ = make_pipeline()
    stand_in_load(monkeypatch, pipe)
    good = tmp_path / "good.flac"
    soundfile.write(good, utterance_with_pauses([1.0]), SR)
    assert cli.main([str(tmp_path / "missing.flac"), str(good), *model_args]) == 1
    out, err = capsys.readouterr()
    assert f"{tmp_path / 'missing.flac'}: error: no such file" in err
    assert "  response:   ok: set a timer for five minutes" in out and "2 file(s), 1 failed" in out


def test_cli_text_output_shows_a_withheld_answer_under_its_replacement(cli, make_pipeline, model_args, monkeypatch,
                                                                        tmp_path, capsys):
    pipe, _ = make_pipeline()
    stand_in_load(monkeypatch, pipe)
    monkeypatch.setattr(VoicePipeline, "respond_with_calls", lambda self, text: ExecutedText(
        "Sorry, I can't call grandma.", withheld="Calling Chloe."))
    good = tmp_path / "good.flac"
    soundfile.write(good, utterance_with_pauses([1.0]), SR)
    assert cli.main([str(good), *model_args]) == 0
    out = capsys.readouterr().out
    assert "  response:   Sorry, I can't call grandma.\n  withheld:   Calling Chloe. (the model was unsure of it)\n" in out
    # an answer that was not withheld prints no such line
    monkeypatch.setattr(VoicePipeline, "respond_with_calls", lambda self, text: ExecutedText("Calling grandma."))
    assert cli.main([str(good), *model_args]) == 0
    assert "withheld" not in capsys.readouterr().out


@pytest.mark.parametrize("option, message", [
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["--strategy", "beam", "--num-beams", "1"], "--num-beams >= 2"),
    (["--strategy", "sample", "--temperature", "0"], "--temperature > 0"),
    (["--repetition-penalty", "0"], "--repetition-penalty must be > 0"),
    (["--top-p", "2"], "--top-p must be in (0, 1]"),
    (["--top-k", "-1"], "--top-k must be >= 0"),
])
def test_cli_refuses_bad_language_model_options_before_loading(cli, model_args, monkeypatch, tmp_path, capsys,
                                                                option, message):
    loads = stand_in_load(monkeypatch, None)
    assert cli.main([str(tmp_path / "a.flac"), *model_args, *option]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pipeline: error: language model decoding:") and message in err and loads == []


def test_cli_names_every_missing_input_in_one_line_before_loading(cli, monkeypatch, tmp_path, capsys):
    """python tools/pipeline.py audio.flac on a fresh clone: the file and the demo's models in one line, nothing
    loaded."""
    loads = stand_in_load(monkeypatch, None)
    import duet.cli.cli_args

    # no model made by the recipes to suggest instead
    monkeypatch.setattr(duet.cli.cli_args, "EXPERIMENTS", tmp_path / "empty")
    missing_asr, missing_slm = tmp_path / "none.nemo", tmp_path / "no_slm"
    code = cli.main([str(tmp_path / "audio.flac"), "--asr-model", str(missing_asr), "--slm-model", str(missing_slm)])
    out, err = capsys.readouterr()
    assert code == 2 and loads == [] and out == ""
    demo = python_command("tools/demo.py")  # as typed in this shell
    assert err.splitlines() == [f"pipeline: error: no such file: {tmp_path / 'audio.flac'}; --asr-model {missing_asr} "
                                f"does not exist (run {demo} first, or pass --asr-model); --slm-model "
                                f"{missing_slm} does not exist (run {demo} first, or pass --slm-model)"]


def test_cli_names_the_bad_files_before_loading_and_answers_the_others(cli, make_pipeline, model_args, monkeypatch,
                                                                      tmp_path, capsys):
    pipe, _ = make_pipeline()
    said_before_loading = []

    def load(cls, *args, **kwargs):
        said_before_loading.append(capsys.readouterr().err)
        return pipe, 0.5
    monkeypatch.setattr(VoicePipeline, "load", classmethod(load))
    good, empty = tmp_path / "good.flac", tmp_path / "empty.wav"
    soundfile.write(good, utterance_with_pauses([1.0]), SR)
    empty.write_bytes(b"")
    assert cli.main([str(tmp_path / "missing.flac"), str(good), str(empty), *model_args]) == 1
    missing = tmp_path / "missing.flac"
    assert said_before_loading[0].splitlines() == [f"{missing}: error: no such file: {missing}",
                                                   f"{empty}: error: empty file: {empty}"]
    out, err = capsys.readouterr()
    assert err == ""  # not said twice
    assert "  response:   ok: set a timer for five minutes" in out and "3 file(s), 2 failed" in out


@pytest.mark.parametrize("verbose", [False, True])
def test_library_log_lines_go_to_the_log_unless_verbose(cli, make_pipeline, model_args, monkeypatch, tmp_path, capfd,
                                                        verbose):
    """NeMo prints to the process's standard output and error: the console keeps the answers only."""
    pipe, _ = make_pipeline()
    stand_in_load(monkeypatch, pipe)  # writes "[NeMo I] model restored" to file descriptor 1
    good, log = tmp_path / "good.flac", tmp_path / "logs" / "pipeline.log"
    soundfile.write(good, utterance_with_pauses([1.0]), SR)
    assert cli.main([str(good), *model_args, "--log", str(log), *(["--verbose"] if verbose else [])]) == 0
    out, err = capfd.readouterr()
    assert "[NeMo I]" not in out and "response:   ok: set a timer" in out and out.startswith("decoding: greedy")
    if verbose:
        assert "[NeMo I] model restored" in err and not log.exists()
    else:
        assert "[NeMo I]" not in err and "[NeMo I] model restored" in log.read_text()


def test_the_decoding_line_says_where_the_decoding_came_from(cli, saved_decoding):
    model, _ = saved_decoding
    saved_file = model.parent / "decoding.json"

    def line(*argv):
        return pipeline_settings_from_args(cli.get_parser().parse_args(["a.flac", "--asr-model", str(model),
                                                                        *argv]))[1]
    assert line() == f"decoding: beam16+LM(a=0.8,b=4) from {saved_file}"
    assert line("--beam-size", "8") == f"decoding: beam8+LM(a=0.8,b=4) from {saved_file}, --beam-size given"
    assert line("--asr-decoding", "greedy") == "decoding: greedy (given: --asr-decoding greedy)"
    assert line("--asr-decoding", "beam") == "decoding: beam4 (given: --asr-decoding beam)"
    assert line("--stream") == "decoding: greedy (--stream decodes greedily)"
    saved_file.unlink()
    assert line() == f"decoding: greedy (default: no {saved_file})"


def test_cli_refuses_a_wav_path_that_is_a_folder_before_loading(cli, model_args, monkeypatch, tmp_path, capsys):
    loads = stand_in_load(monkeypatch, None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(tmp_path / "a.flac"), *model_args, "--speak", "."])
    assert exit_info.value.code == 2 and "is a folder" in capsys.readouterr().err and loads == []


@pytest.mark.parametrize("option, message", [
    (["--max-chunk-seconds", "0"], "--max-chunk-seconds must be > 0, got 0"),
    (["--asr-batch-size", "0"], "--asr-batch-size must be 1 or more, got 0"),
])
def test_cli_refuses_bad_batching_options_before_loading(cli, model_args, monkeypatch, tmp_path, capsys, option,
                                                         message):
    loads = stand_in_load(monkeypatch, None)
    assert cli.main([str(tmp_path / "a.flac"), *model_args, *option]) == 2
    assert message in capsys.readouterr().err and loads == []


@pytest.mark.parametrize("option, message", [
    (["--trim-silence", "-0.1"], "--trim-silence -0.1: must be >= 0"),
    (["--trim-silence", "0.2", "--stream"], "--trim-silence 0.2: not used with --stream"),
])
def test_cli_refuses_a_bad_trim_silence_before_loading(cli, model_args, monkeypatch, tmp_path, capsys, option,
                                                       message):
    loads = stand_in_load(monkeypatch, None)
    assert cli.main([str(tmp_path / "a.flac"), *model_args, *option]) == 2
    assert message in capsys.readouterr().err and loads == []


@pytest.mark.parametrize("audio, option", [(["-"], []), (["-", "a.flac"], ["--stream"])])
def test_cli_stdin_needs_stream_and_no_other_audio(cli, model_args, monkeypatch, capsys, audio, option):
    loads = stand_in_load(monkeypatch, None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*audio, *model_args, *option])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "- (raw PCM from standard input) needs --stream" in err and loads == []


def test_split_at_pauses_refuses_an_empty_chunk_length():
    with pytest.raises(ValueError, match="max_chunk_seconds must be > 0"):
        split_at_pauses(utterance_with_pauses([1.0, 1.0]), SR, max_chunk_seconds=0.0)


@pytest.mark.parametrize("damage, message", [
    ("truncated weights", "cannot load the model folder"),
    ("no weights", "cannot load the model folder"),
    ("no tokenizer", "no tokenizer files"),
    ("no config", "not a model folder (no config.json)"),
])
def test_a_language_model_folder_that_does_not_load_is_named(tiny_slm_folder, tmp_path, damage, message):
    import shutil

    from slm.generation import SlmModelError, load_model

    folder = tmp_path / "slm"
    shutil.copytree(tiny_slm_folder, folder)
    assert load_model(folder)[1] is not None  # the undamaged copy loads
    weights = folder / "model.safetensors"
    if damage == "truncated weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "no weights":
        weights.unlink()
    elif damage == "no tokenizer":
        for name in ("tokenizer.json", "vocab.json"):
            (folder / name).unlink(missing_ok=True)
    else:
        (folder / "config.json").unlink()
    with pytest.raises(SlmModelError) as error:
        load_model(folder)
    assert str(error.value).startswith(f"{folder}: {message}")


def test_cli_names_a_model_that_does_not_load(cli, monkeypatch, tiny_slm_folder, tmp_path, capsys):
    """A corrupt .nemo, or a language-model folder with corrupt weights: one line naming it."""
    import shutil

    slm = tmp_path / "slm"
    shutil.copytree(tiny_slm_folder, slm)
    broken_asr = tmp_path / "broken.nemo"
    broken_asr.write_bytes(b"not a tar archive" * 50)
    soundfile.write(tmp_path / "a.flac", utterance_with_pauses([1.0]), SR)  # a missing one would be named first
    argv = [str(tmp_path / "a.flac"), "--asr-model", str(broken_asr), "--slm-model", str(slm), "--asr-decoding",
            "greedy"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"pipeline: error: {broken_asr}: cannot load it as a NeMo .nemo checkpoint")

    monkeypatch.setattr(pipeline_module, "load_asr_model", lambda path: SimpleNamespace())  # the ASR side loads
    monkeypatch.setattr(pipeline_module, "build_decoder", lambda model, settings: None)
    (slm / "model.safetensors").write_bytes(b"\0" * 100)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"pipeline: error: {slm}: cannot load the model folder")


# ---------------------------------------------------------------- --speak


def test_speak_writes_a_wav_of_the_answer(cli, tmp_path):
    if cli.shutil.which(cli.SPEAK_ENGINE) is None:
        pytest.skip("espeak-ng not installed (bash tools/setup.sh installs it)")
    out = tmp_path / "answers" / "answer.wav"
    assert cli.speak("Setting a timer for five minutes.", out) is None
    info = soundfile.info(out)
    assert info.duration > 1.0 and info.frames > 0
    assert list(out.parent.iterdir()) == [out]  # no partial file left beside it


def test_a_failed_speak_leaves_no_file(cli, monkeypatch, tmp_path):
    engine = tmp_path / "bin" / "fake-espeak"
    engine.parent.mkdir()
    engine.write_text('#!/bin/sh\necho half a wav\necho "no voice" >&2\nexit 1\n')
    engine.chmod(0o755)
    monkeypatch.setattr(cli.shutil, "which", lambda name: str(engine))
    out_dir = tmp_path / "answers"
    out_dir.mkdir()
    error = cli.speak("hello", out_dir / "answer.wav")
    assert error == f"{cli.SPEAK_ENGINE} failed: no voice (nothing written to {out_dir / 'answer.wav'})"
    assert list(out_dir.iterdir()) == []
    (out_dir / "taken.wav").mkdir()  # a folder where the WAV should go
    monkeypatch.setattr(cli.shutil, "which", lambda name: "espeak-ng-that-is-not-run")
    wav = tmp_path / "said.wav"
    soundfile.write(wav, np.zeros(2205, dtype=np.float32), 22050, subtype="PCM_16")
    monkeypatch.setattr(speech_out.subprocess, "run",
                        lambda cmd, **kw: SimpleNamespace(returncode=0, stdout=wav.read_bytes(), stderr=b""))
    assert cli.speak("hello", out_dir / "taken.wav").startswith(f"cannot write {out_dir / 'taken.wav'}")
    assert sorted(p.name for p in out_dir.iterdir()) == ["taken.wav"]
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert cli.speak("hello", tmp_path / "x.wav") == cli.SPEAK_ENGINE_MISSING


def test_speak_says_an_answer_that_starts_with_a_dash(cli, tmp_path):
    if cli.shutil.which(cli.SPEAK_ENGINE) is None:
        pytest.skip("espeak-ng not installed (bash tools/setup.sh installs it)")
    out = tmp_path / "answer.wav"
    assert cli.speak("-w buy milk", out) is None and soundfile.info(out).duration > 0.5
    assert not Path("buy").exists()  # "-w" was said, not taken as espeak-ng's output option


def test_speak_paths_stay_apart(cli, tmp_path):
    out = tmp_path / "answer.wav"
    assert cli.speak_paths([Path("a/x.flac")], out) == [out]
    assert cli.speak_paths([Path("a/x.flac"), Path("a/y.flac")], out) == [tmp_path / "x_answer.wav",
                                                                          tmp_path / "y_answer.wav"]
    same_stem = cli.speak_paths([Path("a/x.flac"), Path("b/x.wav")], out)
    assert same_stem == [tmp_path / "0000_x_answer.wav", tmp_path / "0001_x_answer.wav"]


def test_cli_speak_without_espeak_fails_before_loading(cli, model_args, monkeypatch, tmp_path, capsys):
    loads = stand_in_load(monkeypatch, None)
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert cli.main([str(tmp_path / "a.flac"), *model_args, "--speak", str(tmp_path / "out.wav")]) == 2
    assert "--speak needs espeak-ng, which is not installed" in capsys.readouterr().err and loads == []


def test_cli_speaks_each_answer_and_still_prints_it_when_speaking_fails(cli, make_pipeline, model_args,
                                                                        monkeypatch, tmp_path, capsys):
    pipe, _ = make_pipeline()
    stand_in_load(monkeypatch, pipe)
    spoken = []
    monkeypatch.setattr(cli, "speak", lambda text, out: spoken.append((text, out)) or None)
    files = []
    for name in ("one.flac", "two.flac"):
        files.append(tmp_path / name)
        soundfile.write(files[-1], utterance_with_pauses([1.0]), SR)
    assert cli.main([*map(str, files), *model_args, "--speak", str(tmp_path / "a.wav")]) == 0
    assert spoken == [("ok: set a timer for five minutes", tmp_path / "one_a.wav"),
                      ("ok: set a timer for five minutes", tmp_path / "two_a.wav")]
    assert f"spoken answer: {tmp_path / 'one_a.wav'}" in capsys.readouterr().out

    monkeypatch.setattr(cli, "speak", lambda text, out: "espeak-ng failed: no voice")
    assert cli.main([str(files[0]), *model_args, "--speak", str(tmp_path / "a.wav")]) == 1
    out, err = capsys.readouterr()
    assert "  response:   ok: set a timer for five minutes" in out
    assert f"{files[0]}: error: espeak-ng failed: no voice" in err


def test_cli_names_a_missing_model(cli, tmp_path, capsys):
    assert cli.main([str(tmp_path / "a.flac"), "--asr-model", str(tmp_path / "none.nemo")]) == 2
    assert "--asr-model" in capsys.readouterr().err


# ---------------------------------------------------------------- real NeMo models: --stream, --asr-decoding


@pytest.fixture
def fake_slm(monkeypatch, tmp_path):
    """The language model replaced by an echo (the ASR is real); returns the --slm-model arguments."""
    monkeypatch.setattr(pipeline_module, "load_model", lambda path: (None, None))
    monkeypatch.setattr(VoicePipeline, "respond_with_calls", lambda self, text: ExecutedText(f"ok: {text}"))
    (tmp_path / "slm").mkdir()
    return ["--slm-model", str(tmp_path / "slm")]


@pytest.fixture(scope="module")
def speech_file() -> str:
    from tests.asr_helpers import sample_utterances

    found = sample_utterances(1)
    if not found:
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    return found[0]["audio_filepath"]


def test_cli_stream_prints_partials_and_ends_on_the_offline_transcript(cli, fake_slm, tiny_streaming_model,
                                                                        tiny_streaming_nemo, speech_file, capsys):
    from duet.asr.inference import transcribe_files

    code = cli.main([speech_file, "--asr-model", str(tiny_streaming_nemo), *fake_slm, "--stream"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    offline = transcribe_files(tiny_streaming_model, [speech_file])[0].strip()
    assert offline, "random weights should emit some tokens"
    assert f"  transcript: {offline}\n" in out and f"  response:   ok: {offline}\n" in out
    assert "streaming: chunk 560 ms, look-ahead 480 ms" in out
    partials = [line.split(": ", 1)[1] for line in out.splitlines() if " partial @ " in line]
    assert len(partials) >= 2 and all(offline.startswith(p) for p in partials)  # frames are never revised
    assert out.index(" partial @ ") < out.index("  transcript: ")  # printed as they arrive, before the answer
    assert "partials, first after" in out


def test_cli_stream_json_has_partial_count_first_partial_and_chunk_compute(cli, fake_slm, tiny_streaming_model,
                                                                           tiny_streaming_nemo, speech_file, capfd):
    code = cli.main([speech_file, "--asr-model", str(tiny_streaming_nemo), *fake_slm, "--stream", "--json"])
    lines = capfd.readouterr().out.strip().splitlines()
    assert code == 0 and len(lines) == 1, lines  # nothing but the JSON line on stdout
    result = json.loads(lines[0])
    st = result["streaming"]
    duration = soundfile.info(speech_file).duration
    assert st["partials"] == result["chunks"] and abs(st["partials"] - duration / 0.56) <= 2
    assert (st["lookahead_ms"], st["chunk_ms"]) == (480.0, 560.0)
    assert 0 < st["first_partial_s"] <= result["latency_s"]["asr"] and st["first_partial_audio_s"] <= 0.6
    assert 0 < st["chunk_compute_ms_median"] <= st["chunk_compute_ms_max"]
    assert result["asr_decoding"] == "greedy" and result["transcript"]


class LiveSource:
    """A stand-in for ``sys.stdin.buffer`` fed by a live recorder: prints a marker each time it is read."""

    def __init__(self, data: bytes):
        self.data = data

    def read(self, n: int) -> bytes:
        piece, self.data = self.data[:n], self.data[n:]
        print("<stdin read>", flush=True)
        return piece


def test_cli_stream_reads_raw_pcm_from_stdin_and_prints_partials_while_it_arrives(cli, fake_slm, monkeypatch,
                                                                                  tiny_streaming_model,
                                                                                  tiny_streaming_nemo, speech_file,
                                                                                  capsys):
    from duet.asr.inference import load_audio, transcribe_audio

    pcm = np.round(load_audio(speech_file, SR) * 32767).astype("<i2")
    monkeypatch.setattr("sys.stdin", SimpleNamespace(buffer=LiveSource(pcm.tobytes())))
    code = cli.main(["-", "--asr-model", str(tiny_streaming_nemo), *fake_slm, "--stream"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    # what the source sent, decoded offline: the streamed transcript equals it (a normalize: NA model)
    offline = transcribe_audio(tiny_streaming_model, [pcm.astype(np.float32) / 32768.0])[0].strip()
    assert offline and f"  transcript: {offline}\n" in out and f"  response:   ok: {offline}\n" in out
    assert f"stdin ({len(pcm) / SR:.1f} s)" in out
    assert out.index("stdin partial @ ") < out.rindex("<stdin read>"), "partials must come while input arrives"


def test_cli_stream_refuses_batch_options_it_would_ignore(cli, fake_slm, tiny_streaming_nemo, speech_file, capsys):
    code = cli.main([speech_file, "--asr-model", str(tiny_streaming_nemo), *fake_slm, "--stream",
                     "--asr-batch-size", "4", "--max-chunk-seconds", "10"])
    err = capsys.readouterr().err
    assert code == 2 and "--asr-batch-size, --max-chunk-seconds not used with --stream" in err


def test_cli_stream_with_an_offline_model_is_a_one_line_error(cli, fake_slm, micro_model_and_manifest, speech_file,
                                                              capsys):
    _, offline_nemo, _, _ = micro_model_and_manifest
    assert cli.main([speech_file, "--asr-model", str(offline_nemo), *fake_slm, "--stream"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("pipeline: error: model was not trained for streaming")
    assert "configs/fastconformer_small_streaming.yaml" in last


def test_cli_asr_beam_lm_decodes_with_the_lm(cli, fake_slm, micro_model_and_manifest, micro_token_lm, capfd):
    from duet.asr.decoding import decoding_settings
    from tests.asr_helpers import transcripts_with

    model, model_path, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries[:2]]
    code = cli.main([*paths, "--asr-model", str(model_path), *fake_slm, "--json", "--asr-decoding", "beam_lm",
                     "--lm", str(micro_token_lm), "--alpha", "0.8", "--beta", "1.5", "--beam-size", "6"])
    results = [json.loads(line) for line in capfd.readouterr().out.strip().splitlines()]
    assert code == 0 and [r["error"] for r in results] == [None, None]
    assert {r["asr_decoding"] for r in results} == {"beam6+LM(a=0.8,b=1.5)"}
    fused = transcripts_with(model, decoding_settings("beam_lm", beam_size=6, ngram_lm=str(micro_token_lm),
                                                     alpha=0.8, beta=1.5), paths)
    assert [r["transcript"] for r in results] == [t.strip() for t in fused]
    assert fused != transcripts_with(model, decoding_settings("beam", beam_size=6, beta=1.5), paths), \
        "the LM should change this random model's output: otherwise the test cannot tell it was used"


def test_cli_beam_lm_without_lm_is_a_one_line_error(cli, tmp_path, capsys):
    (tmp_path / "asr.nemo").write_bytes(b"x")
    (tmp_path / "slm").mkdir()
    code = cli.main([str(tmp_path / "a.flac"), "--asr-model", str(tmp_path / "asr.nemo"), "--slm-model",
                     str(tmp_path / "slm"), "--asr-decoding", "beam_lm"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "pipeline: error: --asr-decoding beam_lm needs --lm <token ARPA> " \
                                "(tools/train_ngram_lm.py --unit token)"


SAVED = dict(beam_size=16, alpha=0.8, beta=4.0)


@pytest.fixture
def saved_decoding(tmp_path):
    """A model (an empty file: only paths matter here) with an LM and a decoding.json naming it beside it."""
    from duet.asr.decoding import decoding_settings
    from duet.asr.decoding.file import decoding_file_for, write_decoding_file

    model, lm = tmp_path / "models" / "mine.nemo", tmp_path / "lms" / "mine.arpa"
    for path in (model, lm):
        path.parent.mkdir()
        path.write_bytes(b"x")
    write_decoding_file(decoding_file_for(model), decoding_settings("beam_lm", ngram_lm=str(lm), **SAVED))
    assert '"lm": "../lms/mine.arpa"' in decoding_file_for(model).read_text()  # relative to the file's folder
    return model, lm


def test_an_onnx_export_folder_shares_the_nemo_decoding_json_unless_it_holds_its_own(saved_decoding):
    from duet.asr.decoding.file import DECODING_FILE_NAME, decoding_file_for

    model, _ = saved_decoding
    export = model.with_name("mine_onnx")  # tools/export_onnx.py's default place, beside the .nemo
    export.mkdir()
    assert decoding_file_for(export) == decoding_file_for(model) == model.parent / DECODING_FILE_NAME
    (export / DECODING_FILE_NAME).write_text("{}")
    assert decoding_file_for(export) == export / DECODING_FILE_NAME


def test_a_nemo_sharing_its_folder_may_have_its_own_decoding_file_and_threshold(saved_decoding):
    from duet.asr.decoding import decoding_settings
    from duet.asr.decoding.file import DECODING_FILE_NAME, decoding_file_for, write_decoding_file

    model, _ = saved_decoding
    other = model.with_name("other.nemo")  # a second model in the same folder
    other.write_bytes(b"x")
    assert decoding_file_for(other) == model.parent / DECODING_FILE_NAME  # no file of its own: the folder's
    write_decoding_file(model.with_name("other.decoding.json"), decoding_settings(), min_confidence=0.5)
    assert decoding_file_for(other) == model.with_name("other.decoding.json")
    assert decoding_file_for(model) == model.parent / DECODING_FILE_NAME  # the first model keeps the folder's
    export = model.with_name("other_onnx")  # the second model's ONNX export shares that model's own file
    export.mkdir()
    assert decoding_file_for(export) == model.with_name("other.decoding.json")
    # its own file says greedy with its own threshold: used when nothing else is said
    decoding = resolve_asr_decoding(other, None, {})
    assert decoding.settings.strategy == "greedy" and decoding.min_confidence == 0.5
    assert resolve_asr_decoding(model, None, {}).settings.strategy == "beam_lm"


def test_the_bundled_whisper_base_has_its_own_threshold():
    from duet.asr.confidence import DEFAULT_MIN_CONFIDENCE
    from duet.asr.decoding.file import read_decoding_file
    from duet.foundation import REPO_ROOT

    checkpoints = REPO_ROOT / "samples" / "checkpoints"
    whisper = resolve_asr_decoding(checkpoints / "whisper_tiny_ctc.nemo", None, {})
    fastconformer = resolve_asr_decoding(checkpoints / "fastconformer_tiny_base.nemo", None, {})
    assert whisper.settings.strategy == fastconformer.settings.strategy == "greedy"
    assert fastconformer.min_confidence == DEFAULT_MIN_CONFIDENCE
    # bases v4's and v5's, chosen for each (RESULTS.md, "Low-confidence turns"); by chance the FastConformer's default
    # too, so the file itself is checked: a base bundled without one would fall back to that default unnoticed
    assert read_decoding_file(checkpoints / "whisper_tiny_ctc.decoding.json").min_confidence == \
        whisper.min_confidence == 0.55


def resolved(cli, argv):
    args = cli.get_parser().parse_args(["a.flac", *argv])
    decoding = model_decoding_from_args(args, args.asr_model, args.stream)
    s = decoding.settings.used_values()  # a strategy's own options only
    lm = s.get("ngram_lm") and str(Path(s["ngram_lm"]).resolve())
    return decoding.settings.strategy, s.get("beam_size"), lm, s.get("alpha"), s.get("beta"), decoding.source


# beam size, LM, alpha and beta when neither an option nor a decoding.json gives them: the library's
UNSAID = (BeamLmSettings.beam_size, None, BeamLmSettings.alpha, BeamLmSettings.beta)
# greedy reads none of them
GREEDY = (None, None, None, None)


def test_default_decoding_is_the_model_folders_decoding_json(cli, saved_decoding, monkeypatch, tmp_path):
    model, lm = saved_decoding
    saved_file = str(model.parent / "decoding.json")
    saved = ("beam_lm", 16, str(lm), 0.8, 4.0, saved_file)
    assert resolved(cli, ["--asr-model", str(model)]) == saved
    assert resolved(cli, ["--asr-model", str(model), "--asr-decoding", "beam_lm"]) == saved
    # found by a relative path too
    monkeypatch.chdir(model.parent)
    assert resolved(cli, ["--asr-model", "mine.nemo"])[:5] == saved[:5]
    # options given replace the file's values, and the source says so
    assert resolved(cli, ["--asr-model", str(model), "--beam-size", "8"]) == ("beam_lm", 8, *saved[2:5],
                                                                                f"{saved_file}, --beam-size given")
    assert resolved(cli, ["--asr-model", str(model), "--alpha", "0.3", "--beta", "1"])[:5] == (*saved[:3], 0.3, 1.0)
    # another LM is the user's choice, at the library's weights unless given
    other_lm = str(tmp_path / "my.arpa")
    assert resolved(cli, ["--asr-model", str(model), "--lm", other_lm]) == ("beam_lm", UNSAID[0], other_lm,
                                                                           *UNSAID[2:], None)
    # greedy: streaming, or asked for; another strategy asked for sets the file aside
    assert resolved(cli, ["--asr-model", str(model), "--stream"])[0] == "greedy"
    assert resolved(cli, ["--asr-model", str(model), "--asr-decoding", "greedy"]) == ("greedy", *GREEDY, None)
    assert resolved(cli, ["--asr-model", str(model), "--asr-decoding", "beam"]) == ("beam", UNSAID[0], None, None,
                                                                                    UNSAID[3], None)


def test_default_decoding_is_greedy_without_a_decoding_json(cli, saved_decoding, tmp_path):
    model, _ = saved_decoding
    (model.parent / "decoding.json").unlink()
    assert resolved(cli, ["--asr-model", str(model)]) == ("greedy", *GREEDY, None)
    # options only beam search reads are refused, saying why greedy is the default here
    from duet.asr.decoding import DecodingInputError

    with pytest.raises(DecodingInputError, match=r"--alpha needs --asr-decoding beam or beam_lm or joint: .* greedily by "
                                                 r"default \(there is no .*decoding.json\)"):
        resolved(cli, ["--asr-model", str(model), "--alpha", "0.5"])


@pytest.mark.parametrize("content, message", [
    ('{"strategy": "beam_lm", "beam_size": 16, "lm": "../lms/none.arpa"}', "its lm ../lms/none.arpa is not there"),
    ('{"strategy": "beam_lm", "beem_size": 16, "lm": "../lms/mine.arpa"}', "unknown key 'beem_size'"),
    ('{"strategy": "beam", "alpha": 0.5}', "'alpha' not used by strategy beam"),
    ('{"strategy": "beam", "beam_size": 0}', "'beam_size' must be an integer >= 1, got 0"),
    ('{"strategy": "viterbi"}', "'strategy' must be one of greedy, beam, beam_lm, joint, got 'viterbi'"),
    ('{"strategy": "beam_lm",', "not valid JSON"),
    ('{"strategy": "greedy", "min_confidence": 2}', "'min_confidence' must be a number in 0..1, got 2"),
])
def test_a_broken_decoding_json_is_a_one_line_error_naming_it(cli, saved_decoding, capsys, content, message):
    model, _ = saved_decoding
    saved_file = model.parent / "decoding.json"
    saved_file.write_text(content)
    (model.parent / "slm").mkdir()
    assert cli.main([str(model.parent / "a.flac"), "--asr-model", str(model), "--slm-model",
                     str(model.parent / "slm")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pipeline: error: {saved_file}: {message}") and "\n" not in err, err


def test_the_model_folders_threshold_goes_with_its_decoding(cli, saved_decoding):
    """A decoding.json's min_confidence was chosen for that decoding: used when the model decodes as the file says,
    replaced by --min-confidence, and set aside (for the default) with the file's decoding."""
    from duet.asr.confidence import DEFAULT_MIN_CONFIDENCE
    from duet.asr.decoding.file import decoding_file_for, read_decoding_file, write_decoding_file

    model, lm = saved_decoding
    saved = decoding_file_for(model)
    assert read_decoding_file(saved).min_confidence is None
    write_decoding_file(saved, read_decoding_file(saved).settings, min_confidence=0.3)
    assert read_decoding_file(saved).min_confidence == 0.3
    assert read_decoding_file(saved).settings.beam_size == SAVED["beam_size"]

    def threshold(*argv):
        args = cli.get_parser().parse_args(["a.flac", "--asr-model", str(model), *argv])
        return model_decoding_from_args(args, args.asr_model, args.stream, args.min_confidence).min_confidence
    assert threshold() == 0.3 and threshold("--beam-size", "8") == 0.3  # its decoding, a value given over it
    assert threshold("--min-confidence", "0.5") == 0.5 and threshold("--min-confidence", "0") == 0.0
    for other in (["--asr-decoding", "greedy"], ["--asr-decoding", "beam"], ["--lm", str(lm)], ["--stream"]):
        assert threshold(*other) == DEFAULT_MIN_CONFIDENCE, other
    saved.unlink()
    assert threshold() == DEFAULT_MIN_CONFIDENCE


def test_cli_hands_the_resolved_decoding_to_the_pipeline(cli, saved_decoding, monkeypatch, capsys):
    model, lm = saved_decoding
    seen = {}

    def fake_load(cls, settings):
        seen["decoding"], seen["source"] = settings.asr_decoding, settings.asr_decoding_source
        raise AsrInputError("stop here")  # reported as a one-line error: nothing else to run

    from duet.errors import AsrInputError
    from duet.pipeline import VoicePipeline

    monkeypatch.setattr(VoicePipeline, "load", classmethod(fake_load))
    (model.parent / "slm").mkdir()
    slm = str(model.parent / "slm")
    soundfile.write(model.parent / "a.flac", utterance_with_pauses([1.0]), SR)  # a missing one would be named first
    assert cli.main([str(model.parent / "a.flac"), "--asr-model", str(model), "--slm-model", slm]) == 2
    assert seen["decoding"].describe() == "beam16+LM(a=0.8,b=4)"
    assert Path(seen["decoding"].ngram_lm).resolve() == lm and seen["source"] == str(model.parent / "decoding.json")
    assert capsys.readouterr().err.strip() == "pipeline: error: stop here"


def test_cli_decodes_any_model_as_its_decoding_json_says_unless_told_otherwise(cli, fake_slm, micro_model_and_manifest,
                                                                              micro_token_lm, tmp_path, capfd):
    """A real model copied anywhere, with its LM and decoding.json: the file is used; options override it."""
    import shutil

    from duet.asr.decoding import decoding_settings
    from duet.asr.decoding.file import write_decoding_file
    from tests.asr_helpers import transcripts_with

    model, model_path, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries[:2]]
    folder = tmp_path / "anywhere" / "asr"
    folder.mkdir(parents=True)
    copy, lm = folder / "model.nemo", folder / "token.arpa"
    shutil.copy(model_path, copy)
    shutil.copy(micro_token_lm, lm)
    fused = decoding_settings("beam_lm", beam_size=6, ngram_lm=str(micro_token_lm), alpha=0.8, beta=1.5)
    write_decoding_file(folder / "decoding.json", replace(fused, ngram_lm=str(lm)))

    def run(*options):
        code = cli.main([*paths, "--asr-model", str(copy), *fake_slm, "--json", *options])
        results = [json.loads(line) for line in capfd.readouterr().out.strip().splitlines()]
        assert code == 0 and [r["error"] for r in results] == [None, None]
        return {r["asr_decoding"] for r in results}, [r["transcript"] for r in results]

    assert run() == ({f"beam6+LM(a=0.8,b=1.5) from {folder / 'decoding.json'}"},
                     [t.strip() for t in transcripts_with(model, fused, paths)])
    greedy = [t.strip() for t in transcripts_with(model, decoding_settings(), paths)]
    assert greedy != run()[1], "the LM should change this random model's output: otherwise the test cannot tell"
    assert run("--asr-decoding", "greedy") == ({"greedy"}, greedy)


# ---------------------------------------------------------------- word times and folders (tools/pipeline.py)


def test_pipeline_json_words_are_timed_from_the_start_of_the_file(cli, fake_slm, bundled_base_model,
                                                                  micro_model_and_manifest, tmp_path, capfd):
    from duet.asr import inference
    from duet.asr.inference import transcribe_with_words
    from tests.asr_helpers import check_words

    model, model_path = bundled_base_model
    _, _, _, entries = micro_model_and_manifest
    # two utterances with a second of silence between them: cut there into two pieces
    first, second = (inference.load_audio(e["audio_filepath"], SR) for e in entries[:2])
    audio = np.concatenate([first, np.zeros(SR, dtype=np.float32), second])
    path = tmp_path / "two.flac"
    soundfile.write(path, audio, SR)
    limit = (len(audio) - SR // 4) / SR  # just too short for the whole file
    pieces = split_at_pauses(audio, SR, limit)
    assert len(pieces) == 2
    cut_s = len(pieces[0]) / SR
    code = cli.main([str(path), "--asr-model", str(model_path), *fake_slm, "--json", "--max-chunk-seconds",
                     str(limit)])
    lines = capfd.readouterr().out.strip().splitlines()
    assert code == 0 and len(lines) == 1, lines
    result = json.loads(lines[0])
    assert result["chunks"] == 2 and result["asr_decoding"] == "greedy"
    timed = TimedTranscript(result["transcript"], [Word(**w) for w in result["words"]])
    check_words(timed, len(audio) / SR, 0.08)
    # the second piece's words, as that piece alone gives them, shifted by where it starts in the file
    alone = transcribe_with_words(model, pieces, workers=1)
    assert len(alone[0].words) > 2 and len(alone[1].words) > 2
    tail = timed.words[len(alone[0].words):]
    assert tail == alone[1].shifted(cut_s).words and tail[0].start >= cut_s


def test_pipeline_json_has_words_under_beam_lm(cli, fake_slm, bundled_base_model, bundled_token_lm, tmp_path,
                                              capfd):
    """The demo's decoding is beam_lm: its words come from the forced alignment of the beam's transcript."""
    from tests.asr_helpers import check_words, sample_utterances

    _, model_path = bundled_base_model
    entry = sample_utterances(1)[0]
    code = cli.main([entry["audio_filepath"], "--asr-model", str(model_path), *fake_slm, "--json",
                     "--asr-decoding", "beam_lm", "--lm", str(bundled_token_lm), "--beam-size", "4"])
    lines = capfd.readouterr().out.strip().splitlines()
    assert code == 0 and len(lines) == 1, lines
    result = json.loads(lines[0])
    assert result["asr_decoding"].startswith("beam4+LM") and result["words"], result
    check_words(TimedTranscript(result["transcript"], [Word(**w) for w in result["words"]]), entry["duration"], 0.08)


def test_pipeline_takes_a_folder(cli, fake_slm, micro_model_and_manifest, tmp_path, capfd):
    from duet.io import expand_audio_paths
    from tests.asr_helpers import touch

    _, model_path, _, entries = micro_model_and_manifest
    folder = tmp_path / "in"
    copies = [touch(folder / sub / "same.flac", Path(e["audio_filepath"]).read_bytes())
              for sub, e in zip(("b", "a"), entries)]
    touch(folder / "a" / "transcript.txt")
    code = cli.main([str(folder), "--asr-model", str(model_path), *fake_slm, "--json"])
    results = [json.loads(line) for line in capfd.readouterr().out.strip().splitlines()]
    assert code == 0 and [r["file"] for r in results] == [str(p) for p in sorted(copies)]
    assert all(r["error"] is None and r["words"] is not None for r in results)
    # spoken answers of same-named files in two subfolders go to two files
    spoken = cli.speak_paths(expand_audio_paths([folder]), tmp_path / "answer.wav")
    assert len(set(spoken)) == 2


def test_pipeline_with_an_empty_folder_is_a_one_line_error(cli, tmp_path, capsys):
    (tmp_path / "none").mkdir()
    assert cli.main([str(tmp_path / "none"), "--asr-model", str(tmp_path / "m.nemo")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pipeline: error: no audio files in folder {tmp_path / 'none'}") and "\n" not in err


# ---------------------------------------------------------------- low confidence: not understood


def test_a_transcript_heard_unsurely_gets_the_apology_without_asking_the_language_model(make_pipeline, tmp_path):
    pipe, responses = make_pipeline(confidence=0.4, min_confidence=0.5)
    path = tmp_path / "unsure.flac"
    soundfile.write(path, utterance_with_pauses([1.0]), SR)
    result = pipe.run(path)
    assert result.transcript == "set a timer for five minutes" and responses == []  # heard, but the LM not asked
    assert result.response == NOT_UNDERSTOOD_REPLY and result.understood is False
    assert result.confidence == 0.4 and "below 0.5" in result.note and "slm" not in result.latency_s
    body = result.to_json()
    assert body["confidence"] == 0.4 and body["understood"] is False


def test_a_transcript_at_the_threshold_is_answered_and_zero_turns_the_check_off(make_pipeline, tmp_path):
    path = tmp_path / "sure.flac"
    soundfile.write(path, utterance_with_pauses([1.0]), SR)
    for confidence, threshold in ((0.5, 0.5), (0.05, 0.0)):
        pipe, responses = make_pipeline(confidence=confidence, min_confidence=threshold)
        result = pipe.run(path)
        assert result.understood is True and result.confidence == confidence
        assert result.response == "ok: set a timer for five minutes" and responses[-1] == result.transcript


def test_the_default_threshold_applies_when_none_is_given(make_pipeline):
    from duet.asr.confidence import DEFAULT_MIN_CONFIDENCE

    pipe, _ = make_pipeline()
    assert pipe.settings.min_confidence == DEFAULT_MIN_CONFIDENCE > 0


def test_cli_json_carries_confidence_and_the_flag_and_the_console_says_not_understood(cli, make_pipeline, model_args,
                                                                                      monkeypatch, tmp_path, capfd):
    pipe, responses = make_pipeline(confidence=0.3)
    loads = []

    def load(cls, settings):
        loads.append(settings.min_confidence)
        return pipe.with_settings(replace(pipe.settings, min_confidence=settings.min_confidence)), 0.5
    monkeypatch.setattr(VoicePipeline, "load", classmethod(load))
    good = tmp_path / "good.flac"
    soundfile.write(good, utterance_with_pauses([1.0]), SR)
    assert cli.main([str(good), "--json", "--min-confidence", "0.35", *model_args]) == 0
    line = json.loads(capfd.readouterr().out)
    assert (line["confidence"], line["understood"], line["response"]) == (0.3, False, NOT_UNDERSTOOD_REPLY)
    assert cli.main([str(good), "--min-confidence", "0.35", *model_args]) == 0
    out = capfd.readouterr().out
    assert "  confidence: 0.30 (below 0.35: NOT UNDERSTOOD" in out and f"  response:   {NOT_UNDERSTOOD_REPLY}" in out
    assert cli.main([str(good), "--json", "--min-confidence", "0", *model_args]) == 0
    line = json.loads(capfd.readouterr().out)
    assert line["understood"] is True and line["response"] == "ok: set a timer for five minutes"
    assert loads == [0.35, 0.35, 0.0] and responses == [line["transcript"]]


@pytest.mark.parametrize("value", ["-0.1", "1.5"])
def test_cli_refuses_a_threshold_outside_0_1_before_loading(cli, model_args, monkeypatch, tmp_path, capsys, value):
    loads = stand_in_load(monkeypatch, None)
    assert cli.main([str(tmp_path / "a.flac"), *model_args, "--min-confidence", value]) == 2
    assert f"--min-confidence must be in 0..1 (0 turns the check off), got {float(value):g}" in capsys.readouterr().err
    assert loads == []


def test_the_default_language_model_is_the_whisper_start_preset_once_it_exists(tmp_path, monkeypatch):
    from duet.demo import models as demo_models
    from duet.pipeline import PipelineSettings

    monkeypatch.setattr(demo_models, "WHISPER_SLM_MODEL", tmp_path / "slm_whisper")
    assert PipelineSettings().slm_model == demo_models.DEMO_SLM_MODEL  # not trained: the demo's
    (tmp_path / "slm_whisper").mkdir()
    assert PipelineSettings().slm_model == demo_models.DEMO_SLM_MODEL  # an unfinished run's folder: still the demo's
    (tmp_path / "slm_whisper" / "config.json").write_text("{}")
    assert PipelineSettings().slm_model == tmp_path / "slm_whisper"


def test_the_language_model_is_given_the_transcript_in_its_request_form(monkeypatch):
    # Whisper's "What is 64 degrees Celsius?" and the CTC model's "what is sixty four degrees celsius" reach the
    # model alike, in the form of the Alpaca sample's spoken requests (duet.text.request_text)
    given = []
    monkeypatch.setattr(pipeline_module, "respond_with_calls",
                        lambda model, tokenizer, instruction, settings: given.append(instruction) or ExecutedText("ok"))
    pipe = VoicePipeline(FakeAsr(), slm_model=None, slm_tokenizer=None, asr_decoder=SimpleNamespace())
    pipe.respond("What is 64 degrees Celsius in Fahrenheit?")
    pipe.respond("what is sixty four degrees celsius in fahrenheit")
    assert given == ["what is 64 degrees celsius in fahrenheit"] * 2
