"""duet.vad and duet.serving.turns: Silero VAD's segments of a recording, the streaming detector, and turns cut from a stream.

The audio is the bundled sample's speech (each utterance cut to its sound by an energy threshold, fine on these
clean recordings), digital silence and numpy-made room noise (``duet.synth.conversation``); the model is the real
Silero VAD from the silero-vad wheel.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile

from duet.synth.conversation import compose, room_noise, speech_range
from duet.serving.turns import TurnTaker
from duet.vad import (WINDOW, SileroVad, SpeechDecider, SpeechDetector, VadSettings, VadSettingsError,
                      energy_speech_bounds, silero_model_path, speech_segments)

SR = 16000
TEST_CLEAN = Path(__file__).resolve().parent.parent / "samples" / "LibriSpeech" / "test-clean"


@pytest.fixture(scope="module")
def utterances() -> list[np.ndarray]:
    paths = sorted(TEST_CLEAN.rglob("*.flac"))[:6]
    if len(paths) < 6:
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    return [soundfile.read(path, dtype="float32")[0] for path in paths]


def near(got: int, want: int, tolerance_s: float) -> bool:
    return abs(got - want) <= tolerance_s * SR


def feed_in_pieces(detector, audio: np.ndarray, sizes: list[int]) -> list:
    events, at, i = [], 0, 0
    while at < len(audio):
        size = sizes[i % len(sizes)]
        events += detector.feed(audio[at:at + size])
        at, i = at + size, i + 1
    return events


# ---------------------------------------------------------------- segments of a recording


def test_segments_find_each_utterance_between_silence_and_room_noise(utterances):
    talk = compose(utterances[:3], [1.0, 1.5, 2.0, 1.0], noise_dbfs=-45.0, seed=3)
    settings = VadSettings(min_silence_s=0.3, pad_s=0.0)
    segments = speech_segments(talk.audio, SR, settings)
    assert len(segments) == 3, (segments, talk.speech)
    for (start, end), (want_start, want_end) in zip(segments, talk.speech):
        # 0.2 s at the end: a fading last sound sinks below the noise (where the level no longer tells it apart)
        assert near(start, want_start, 0.1) and near(end, want_end, 0.2), ((start, end), (want_start, want_end))
    padded = speech_segments(talk.audio, SR, replace(settings, pad_s=0.2))
    assert [(a + int(0.2 * SR), b - int(0.2 * SR)) for a, b in padded] == segments  # the padding, either side


def test_segments_at_another_rate_are_in_that_rates_samples(utterances):
    import librosa

    talk = compose(utterances[:2], [0.8, 1.2, 0.8])
    at_16k = speech_segments(talk.audio, SR, VadSettings(pad_s=0.0))
    at_8k = speech_segments(librosa.resample(talk.audio, orig_sr=SR, target_sr=8000), 8000, VadSettings(pad_s=0.0))
    assert len(at_8k) == len(at_16k) == 2
    for (a, b), (c, d) in zip(at_16k, at_8k):
        assert abs(a / SR - c / 8000) <= 0.07 and abs(b / SR - d / 8000) <= 0.07


@pytest.mark.parametrize("seed, level", [(0, -50.0), (1, -40.0), (2, -30.0), (3, -20.0)])
def test_room_noise_holds_no_speech(seed, level):
    noise = room_noise(10.0, SR, seed, level)
    assert speech_segments(noise, SR) == []
    detector = SpeechDetector(VadSettings())
    assert feed_in_pieces(detector, noise, [1600]) + detector.flush() == []


def test_a_click_is_shorter_than_speech(utterances):
    """A burst shorter than min_speech_s is dropped; the same burst made long enough is speech."""
    start, end = speech_range(utterances[0])
    word = utterances[0][start:end]
    quiet = np.zeros(SR, dtype=np.float32)
    short = np.concatenate([quiet, word[: int(0.12 * SR)], quiet])
    assert speech_segments(short, SR, VadSettings(min_speech_s=0.25)) == []
    assert len(speech_segments(np.concatenate([quiet, word, quiet]), SR, VadSettings(min_speech_s=0.25))) == 1


def test_an_empty_recording_has_no_segments():
    assert speech_segments(np.zeros(0, dtype=np.float32), SR) == []


# ---------------------------------------------------------------- the decisions themselves


def test_decider_hysteresis_minimum_speech_and_silence():
    settings = VadSettings(threshold=0.5, min_silence_s=0.096, min_speech_s=0.064)  # 3 and 2 windows of 32 ms
    decider = SpeechDecider(settings)
    probabilities = ([0.0] * 3 + [0.9]        # 3: one speech window, a candidate never confirmed ...
                     + [0.0] * 3              # 4-6: ... dropped by the silence after it, without an event
                     + [0.05, 0.2, 0.9, 0.9]  # 7-10: rose above 0.1 at 8, speech from 9, confirmed at 10
                     + [0.4] * 5              # 11-15: between the thresholds after speech: no silence has begun
                     + [0.0] * 4              # 16-19: silence, 6 windows after the speech stopped (11): the end
                     + [0.9, 0.9]             # 20-21: speech again
                     + [0.3, 0.42, 0.42])     # 22-24: a silence begun at 22 goes on between the thresholds
    events = [(i, event) for i, p in enumerate(probabilities) for event in decider.push(p)]
    assert events == [(10, ("speech_start", 8)), (16, ("speech_end", 11)),
                      (21, ("speech_start", 20)), (24, ("speech_end", 22))]
    assert decider.flush() == []
    decider.push(0.9), decider.push(0.9), decider.push(0.9)
    assert decider.flush() == [("speech_end", 28)]  # the input ended during speech: it ends there


def test_decider_level_moves_the_boundaries_to_the_sound():
    """With levels, speech begins where the sound rose above the floor and stops where it fell, though the
    probability rose late and decays slowly."""
    settings = VadSettings(min_silence_s=0.096, min_speech_s=0.064)
    decider = SpeechDecider(settings)
    quiet, loud = -80.0, -30.0
    windows = ([(0.0, quiet)] * 6 + [(0.02, loud)] * 3   # sound from window 6, the model unsure
               + [(0.9, loud)] * 4                       # speech from window 9
               + [(0.8, quiet)] * 2                      # the probability decays after the sound stopped (13)
               + [(0.0, quiet)] * 6)
    events = [event for p, level in windows for event in decider.push(p, level)]
    assert events == [("speech_start", 6), ("speech_end", 13)]


def test_settings_are_checked_and_name_the_field():
    for field, value in (("threshold", 1.0), ("min_silence_s", 0.0), ("min_speech_s", -1.0), ("pad_s", -0.1),
                         ("onset_threshold", 0.9)):
        with pytest.raises(VadSettingsError, match=field):
            replace(VadSettings(), **{field: value}).validate()
    with pytest.raises(VadSettingsError, match="pad_s"):
        TurnTaker(VadSettings(min_silence_s=0.3, pad_s=0.4))


def test_the_model_ships_in_the_wheel_and_its_session_is_shared():
    assert silero_model_path().name == "silero_vad.onnx" and silero_model_path().is_file()
    assert SileroVad.shared() is SileroVad.shared()


# ---------------------------------------------------------------- the streaming detector


def test_detector_starts_and_ends_each_utterance_whatever_the_piece_sizes(utterances):
    talk = compose(utterances[:2], [1.0, 1.5, 1.5])
    settings = VadSettings(min_silence_s=0.5)
    runs = []
    for sizes in ([512], [1600], [4000, 37, 999], [len(talk.audio)]):
        detector = SpeechDetector(settings)
        runs.append(feed_in_pieces(detector, talk.audio, sizes) + detector.flush())
    assert all(run == runs[0] for run in runs), runs  # the same windows, the same decisions
    events = runs[0]
    assert [e.kind for e in events] == ["speech_start", "speech_end"] * 2
    for (start, end), (want_start, want_end) in zip(zip(events[::2], events[1::2]), talk.speech):
        assert near(start.sample, want_start, 0.1) and near(end.sample, want_end, 0.15)
        # the start is decided once min_speech_s of speech was heard, the end min_silence_s after the speech stopped
        assert start.decided_at >= start.sample + 0.25 * SR
        assert end.sample + 0.5 * SR <= end.decided_at <= end.sample + 0.5 * SR + 0.3 * SR


def test_pauses_inside_a_sentence_do_not_end_it(utterances):
    """Words 0.3 s apart (the longest pause the issue allows inside a sentence) are one stretch of speech."""
    talk = compose(utterances[:4], [0.8, 0.3, 0.3, 0.3, 1.0])
    detector = SpeechDetector(VadSettings(min_silence_s=0.5))
    events = feed_in_pieces(detector, talk.audio, [1600]) + detector.flush()
    assert [e.kind for e in events] == ["speech_start", "speech_end"]
    assert near(events[0].sample, talk.speech[0][0], 0.1) and near(events[1].sample, talk.speech[-1][1], 0.15)


# ---------------------------------------------------------------- turns


def run_turns(taker: TurnTaker, audio: np.ndarray, piece: int = 1600) -> list:
    events = []
    for at in range(0, len(audio), piece):
        events += taker.feed(audio[at:at + piece])
    return events + taker.finish()


def test_turns_carry_their_audio_and_a_pause_foretells_the_end(utterances):
    talk = compose(utterances[:2], [1.0, 1.5, 1.5], noise_dbfs=-50.0)
    taker = TurnTaker(VadSettings(min_silence_s=0.5, pad_s=0.2))
    events = run_turns(taker, talk.audio)
    ends = [e for e in events if e.kind == "speech_end"]
    assert [e.turn for e in events if e.kind == "speech_start"] == [1, 2] and [e.turn for e in ends] == [1, 2]
    for end, (want_start, want_end) in zip(ends, talk.speech):
        first, last = end.bounds
        assert np.array_equal(end.audio, talk.audio[first:last])  # the turn's audio is the stream's samples
        assert near(first, want_start - 0.2 * SR, 0.12) and near(last, want_end + 0.2 * SR, 0.15)
        pauses = [e for e in events if e.kind == "pause" and e.turn == end.turn]
        assert pauses and pauses[-1].bounds == end.bounds and np.array_equal(pauses[-1].audio, end.audio)
    # the audio events of a turn are its samples, in order, from its first on
    for end in ends:
        pieces = [e for e in events if e.kind == "audio" and e.turn == end.turn]
        joined = np.concatenate([e.audio for e in pieces])
        assert pieces[0].bounds[0] == end.bounds[0] and np.array_equal(joined[:len(end.audio)], end.audio)


def test_a_pause_shorter_than_the_turn_silence_resumes_the_turn(utterances):
    talk = compose(utterances[:2], [0.8, 0.4, 1.0])
    events = run_turns(TurnTaker(VadSettings(min_silence_s=0.6, pad_s=0.2)), talk.audio)
    kinds = [e.kind for e in events if e.kind != "audio"]
    assert kinds.count("speech_end") == 1 and "resume" in kinds
    assert kinds.index("pause") < kinds.index("resume") < kinds.index("speech_end")


def test_turns_hold_bounded_memory_and_a_long_turn_is_cut(utterances):
    taker = TurnTaker(VadSettings(), max_turn_s=2.0)
    for seed in range(3):  # 30 s of room noise: only the pre-roll is kept
        assert run_turns(taker, room_noise(10.0, SR, seed, -40.0)) == []
        assert len(taker.kept) <= taker.pad + 2 * WINDOW
    speech = np.concatenate(utterances[:3])  # about 7 s of speech without a pause long enough to end a turn
    events = run_turns(TurnTaker(VadSettings(), max_turn_s=2.0), speech)
    ends = [e for e in events if e.kind == "speech_end"]
    assert len(ends) >= 3 and all(len(e.audio) <= 2.0 * SR + 1600 for e in ends)
    assert any(e.forced for e in ends) and len({e.turn for e in ends}) == len(ends)


def test_energy_fallback_keeps_its_behaviour():
    audio = np.concatenate([np.zeros(SR, dtype=np.float32), 0.3 * np.ones(SR, dtype=np.float32),
                            np.zeros(SR, dtype=np.float32)])
    first, last = energy_speech_bounds(audio, SR, 0.2)
    assert near(first, int(0.8 * SR), 0.05) and near(last, int(2.2 * SR), 0.05)
    assert energy_speech_bounds(np.zeros(0, dtype=np.float32), SR, 0.2) == (0, 0)
