"""Joint decoding (duet.asr.decoding.joint): the CTC judge's likelihood, the union of candidates, the choice, and the
veto of text Whisper invents on silence, on constructed log-probabilities with stand-ins for Whisper (no weights
read, no audio)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from duet.asr.decoding import DecodingInputError, decoding_settings
from duet.asr.decoding.joint import (IMPOSSIBLE, JointDecoding, Judged, JointWeights, WhisperProposer, best_judged,
                                     ctc_log_likelihoods, max_whisper_tokens, window_frames)
from duet.asr.decoding.rescoring import NOTHING_HEARD, BeamNbest, Candidate, nbest_candidates

BLANK = 0


def test_ctc_log_likelihood_sums_every_alignment_as_by_hand():
    p = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])  # 2 frames, labels blank/a/b
    log_probs = p.log()
    a_by_hand = p[0, 1] * p[1, 1] + p[0, 1] * p[1, 0] + p[0, 0] * p[1, 1]  # aa, a-, -a
    ab_by_hand = p[0, 1] * p[1, 2]
    nothing_by_hand = p[0, 0] * p[1, 0]
    got = ctc_log_likelihoods(log_probs, [(1,), (1, 2), ()], BLANK)
    assert got == pytest.approx([math.log(a_by_hand), math.log(ab_by_hand), math.log(nothing_by_hand)], abs=1e-5)


def test_a_text_the_frames_cannot_spell_is_impossible_not_infinite():
    log_probs = torch.full((2, 3), math.log(1 / 3))
    assert ctc_log_likelihoods(log_probs, [(1, 1, 1)], BLANK) == [IMPOSSIBLE]  # "aa" a needs a blank between: 3+ frames


def judged(text, whisper, ctc, lm=0.0, tokens=3, from_whisper=True):
    return Judged(text, text.lower().strip("."), tuple(range(1, tokens + 1)), whisper, whisper, ctc, lm, from_whisper)


def test_the_weights_decide_between_whisper_and_the_ctc_judge():
    whisper_likes = judged("What is fifty?", whisper=-2.0, ctc=-40.0)
    ctc_likes = judged("what is fifteen", whisper=-9.0, ctc=-5.0, from_whisper=False)
    assert best_judged([whisper_likes, ctc_likes], JointWeights(ctc=0.1)) is whisper_likes  # -6.0 against -9.5
    assert best_judged([whisper_likes, ctc_likes], JointWeights(ctc=0.5)) is ctc_likes  # -22 against -11.5
    assert best_judged([], JointWeights(ctc=0.5)) is None


def test_ctc_spacing_leaves_word_breaks_to_whisper_and_nothing_else():
    whisper_likes = Judged("Firefox.", "firefox", (1, 2), -1.8, -1.8, ctc=-14.0, lm=0.0, from_whisper=True)
    ctc_likes = Judged("fire fox", "fire fox", (1, 3, 2), -3.5, -3.5, ctc=-2.0, lm=0.0, from_whisper=False)
    other_word = Judged("fire fix", "fire fix", (1, 3, 4), -3.0, -3.0, ctc=-1.0, lm=0.0, from_whisper=False)
    both = [whisper_likes, ctc_likes]
    assert best_judged(both, JointWeights(ctc=0.5)) is ctc_likes  # -2.8 against -8.8: the judge's word break
    chosen = best_judged(both, JointWeights(ctc=0.5, ctc_spacing=0))  # both count the best spelling's -2.0
    assert chosen.text == "Firefox." and chosen.ctc == -2.0
    assert best_judged(both, JointWeights(ctc=0.5, ctc_spacing=0.5)).text == "fire fox"  # -1.8-4 against -3.5-1
    # other letters are still the judge's to weigh: "fire fix" keeps its own -1.0 and wins
    assert best_judged([*both, other_word], JointWeights(ctc=2, ctc_spacing=0)) is other_word
    with pytest.raises(DecodingInputError, match="ctc_spacing"):
        decoding_settings("joint", ctc_spacing=1.5).validate()


def test_lm_and_token_bonus_count():
    short = judged("a", whisper=-1.0, ctc=-1.0, lm=-1.0, tokens=1)
    long = judged("a b c", whisper=-1.0, ctc=-1.0, lm=-3.0, tokens=3)
    assert best_judged([short, long], JointWeights(ctc=1, lm=1)) is short
    assert best_judged([short, long], JointWeights(ctc=1, lm=1, token_bonus=2)) is long  # -2 + 6 against -2 + 2


class StubTokenizer:
    """A letter per token: 'a' -> 1, 'b' -> 2, ' ' -> 3 (a word boundary)."""

    ids = {"a": 1, "b": 2, " ": 3}

    def text_to_ids(self, text):
        return [self.ids[c] for c in text]


def stub_beam(beam_texts):
    """A NeMo beam decoding keeping its n-best: ``beam_texts`` for every utterance."""
    def predictions(log_probs, decoder_lengths):
        return [[SimpleNamespace(text=t, score=-1.0, y_sequence=StubTokenizer().text_to_ids(t)) for t in beam_texts]
                for _ in range(log_probs.shape[0])]
    return SimpleNamespace(blank_id=BLANK, ctc_decoder_predictions_tensor=predictions)


def judge(decoder, beam, log_probs, lengths, audios):
    return decoder.judge(nbest_candidates(beam, log_probs, lengths), log_probs, lengths, audios)


def best(decoder, beam, log_probs, lengths, audios):
    return decoder.best(BeamNbest(beam, log_probs, lengths), log_probs, lengths, audios)


class StubProposer:
    beam_size = 5

    def __init__(self, texts):
        self.texts = texts

    def propose(self, audios, frames):
        return [list(self.texts) for _ in audios], [torch.zeros(1, 4, 8) for _ in audios]


class StubRescorer:
    """Whisper's teacher-forced score: it likes its own formatting best."""

    def encoded_log_likelihoods(self, encoding, texts):
        return [-1.0 if t[:1].isupper() else -6.0 for t in texts]


def frames(*labels, sure=0.9):
    """Log-probabilities [1, T, 4] whose best label at each frame is ``labels[t]``."""
    p = torch.full((1, len(labels), 4), (1 - sure) / 3)
    for t, label in enumerate(labels):
        p[0, t, label] = sure
    return p.log()


def joint(proposals, beam_texts, ctc=0.3):
    return (JointDecoding(StubProposer(proposals), StubRescorer(), JointWeights(ctc=ctc), StubTokenizer(), BLANK),
            stub_beam(beam_texts))


def test_the_union_keeps_one_candidate_per_spoken_form_in_whisper_formatting():
    decoder, model = joint(["Ab.", "Ba."], ["ab", "aa"])
    log_probs = frames(1, 0, 2, 0)
    [candidates] = judge(decoder, model, log_probs, torch.tensor([4]), [np.zeros(16000, dtype=np.float32)])
    assert [(c.text, c.spoken, c.from_whisper) for c in candidates] == [
        ("Ab.", "ab", True), ("Ba.", "ba", True), ("aa", "aa", False), ("", "", False)]  # nothing said: always judged
    assert [c.veto_only for c in candidates] == [False, False, False, True]  # ... for the veto, not to be chosen
    assert candidates[0].tokens == (1, 2)


def test_the_chosen_text_keeps_whisper_formatting_and_the_ctc_tokens():
    decoder, model = joint(["Ab.", "Ba."], ["ab"])
    [chosen] = best(decoder, model, frames(1, 0, 2, 0), torch.tensor([4]), [np.zeros(16000, dtype=np.float32)])
    assert (chosen.text, chosen.tokens) == ("Ab.", (1, 2))  # the audio spells a-b: Ba. loses on the CTC score


def test_the_ctc_judge_vetoes_text_whisper_invents_on_silence():
    decoder, model = joint(["Ab ab.", "Ba."], [""], ctc=1.0)
    silence = frames(0, 0, 0, 0, 0, 0, sure=0.99)
    [chosen] = best(decoder, model, silence, torch.tensor([6]), [np.zeros(16000, dtype=np.float32)])
    assert chosen == NOTHING_HEARD
    # the veto holds whatever the weights: the CTC model gives "nothing said" most of its probability
    decoder.weights = JointWeights(ctc=0.0, whisper_sure=-5.0)
    [alone] = best(decoder, model, silence, torch.tensor([6]), [np.zeros(16000, dtype=np.float32)])
    assert alone == NOTHING_HEARD
    # on speech ("ab" said surely) it does not fire, and Whisper's sure hypothesis is kept
    [spoken] = best(decoder, model, frames(1, 0, 2, 0, 0, 0), torch.tensor([6]), [np.zeros(16000, dtype=np.float32)])
    assert spoken.text == "Ab ab."


class LoopLovingRescorer:
    """Whisper sure of its repetition loop (its failure on unclear audio) and unsure of the real text."""

    def encoded_log_likelihoods(self, encoding, texts):
        return [-0.5 if t.count("ab") > 1 else -3.0 for t in texts]


def test_a_repetition_loop_whisper_prefers_loses_to_the_text_the_frames_spell():
    loop = "Ab ab ab ab ab."
    decoder = JointDecoding(StubProposer([loop, "Ab."]), LoopLovingRescorer(), JointWeights(ctc=0.3), StubTokenizer(),
                            BLANK)
    said_once = frames(1, 0, 2, *[0] * 15)  # "ab", then blank: frames enough to spell the loop, but unlikely
    [candidates] = judge(decoder, stub_beam(["ab"]), said_once, torch.tensor([18]), [np.zeros(16000, dtype=np.float32)])
    by_text = {c.text: c for c in candidates}
    assert by_text[loop].whisper > by_text["Ab."].whisper and by_text[loop].ctc > -1e3  # spellable, Whisper's pick
    [chosen] = best(decoder, stub_beam(["ab"]), said_once, torch.tensor([18]), [np.zeros(16000, dtype=np.float32)])
    assert chosen.text == "Ab."
    # on frames that do say it five times, the same weights keep the loop: the judge reads the audio, not the form
    said_five_times = frames(*([1, 0, 2, 3] * 4), 1, 0, 2, 0)
    [kept] = best(decoder, stub_beam(["ab"]), said_five_times, torch.tensor([20]), [np.zeros(16000, dtype=np.float32)])
    assert kept.text == loop


def test_audio_longer_than_whisper_window_is_judged_among_the_beam_alone():
    decoder, model = joint(["Ab."], ["ba"])
    long_audio = np.zeros(31 * 16000, dtype=np.float32)
    [candidates] = judge(decoder, model, frames(2, 0, 1, 0), torch.tensor([4]), [long_audio])
    assert [c.text for c in candidates] == ["ba", ""]


def test_joint_settings_are_checked():
    with pytest.raises(DecodingInputError, match="ctc_weight"):
        decoding_settings("joint", ctc_weight=float("nan")).validate()
    with pytest.raises(DecodingInputError, match="whisper_beam"):
        decoding_settings("joint", whisper_beam=0).validate()
    with pytest.raises(DecodingInputError, match="lm_weight"):
        decoding_settings("joint", lm_weight=0.2).validate()  # no LM to score with
    assert decoding_settings("joint", ngram_lm="x.arpa", lm_weight=0.2).describe().startswith("joint(Whisper beam5")


def test_written_words_take_the_times_of_the_words_they_read_as():
    from duet.asr.words import Word, formatted_words

    spoken = [Word("it", 0.0, 0.2, 0.9), Word("costs", 0.2, 0.5, 0.8), Word("five", 0.5, 0.8, 0.7),
              Word("dollars", 0.8, 1.2, 0.95)]
    words = formatted_words("It costs $5.", spoken)
    assert [(w.word, w.start, w.end, w.confidence) for w in words] == [
        ("It", 0.0, 0.2, 0.9), ("costs", 0.2, 0.5, 0.8), ("$5.", 0.5, 1.2, 0.7)]
    assert formatted_words("it costs five dollars", spoken) is spoken  # already the spoken form
    assert formatted_words("It costs $6.", spoken) is spoken  # does not line up: the spoken words stay


def test_joint_is_reachable_from_the_command_line_and_decoding_json(tmp_path):
    import argparse
    import json

    from duet.cli.cli_args import add_decoding_arguments, decoding_settings_from_args
    from duet.asr.decoding.file import DecodingFileError, read_decoding_file, write_decoding_file

    parser = argparse.ArgumentParser()
    add_decoding_arguments(parser)
    lm = tmp_path / "lm.arpa"
    lm.write_text("\\data\\\n")
    args = parser.parse_args(["--decoding", "joint", "--lm", str(lm), "--ctc-weight", "0.2", "--lm-weight", "0.1",
                              "--token-bonus", "0.5", "--whisper-beam", "3"])
    settings = decoding_settings_from_args(args)
    assert (settings.strategy, settings.ctc_weight, settings.lm_weight, settings.token_bonus, settings.whisper_beam) == (
        "joint", 0.2, 0.1, 0.5, 3)
    with pytest.raises(DecodingInputError, match="--ctc-weight not used by --decoding beam"):
        decoding_settings_from_args(parser.parse_args(["--decoding", "beam", "--ctc-weight", "0.2"]))
    saved = tmp_path / "decoding.json"
    write_decoding_file(saved, settings, min_confidence=0.4)
    assert json.loads(saved.read_text())["lm"] == "lm.arpa"
    assert read_decoding_file(saved).settings == settings
    saved.write_text(json.dumps({"strategy": "joint", "ctc_weight": -1}))
    with pytest.raises(DecodingFileError, match="'ctc_weight' must be a finite number >= 0"):
        read_decoding_file(saved)
    saved.write_text(json.dumps({"strategy": "joint"}))  # no LM: the beam alone proposes beside Whisper
    assert read_decoding_file(saved).settings == decoding_settings("joint")


def test_whisper_sure_keeps_whisper_first_hypothesis_unjudged():
    sure = judged("What is fifty?", whisper=-0.6, ctc=-40.0)  # -0.2 a written word
    ctc_likes = judged("what is fifteen", whisper=-9.0, ctc=-5.0, from_whisper=False)
    assert best_judged([sure, ctc_likes], JointWeights(ctc=0.5)) is ctc_likes
    assert best_judged([sure, ctc_likes], JointWeights(ctc=0.5, whisper_sure=-0.3)) is sure
    assert best_judged([sure, ctc_likes], JointWeights(ctc=0.5, whisper_sure=-0.1)) is ctc_likes  # not sure enough
    with pytest.raises(DecodingInputError, match="whisper_sure"):
        decoding_settings("joint", whisper_sure=0.5).validate()


def test_nothing_said_added_for_the_veto_is_never_chosen_by_score():
    said = judged("Ab.", whisper=-50.0, ctc=-300.0)
    nothing = Judged("", "", (), whisper=-1.0, whisper_spoken=-1.0, ctc=-20.0, lm=0.0, from_whisper=False,
                     veto_only=True)
    assert best_judged([said, nothing], JointWeights(ctc=0.1)) is said  # -80 against -3: speech is never emptied
    assert best_judged([said, replace(nothing, veto_only=False)], JointWeights(ctc=0.1)).text == ""  # proposed: it competes


def test_the_veto_fires_where_blank_is_likeliest_on_every_frame_though_nothing_said_is_unlikely():
    # ten frames of blank at 0.6: the all-blank reading has 0.6^10 = 0.6 % (under the 5 % of the first half), while
    # Whisper's invented text is cheap for the CTC model to spell in a frame or two
    decoder, model = joint(["A."], [""], ctc=0.1)
    tones = frames(*[0] * 10, sure=0.6)
    assert math.exp(ctc_log_likelihoods(tones[0], [()], BLANK)[0]) < 0.05
    audio = [np.zeros(16000, dtype=np.float32)]
    [chosen] = best(decoder, model, tones, torch.tensor([10]), audio)
    assert chosen == NOTHING_HEARD
    # what the score alone would choose: Whisper's text (so the veto, not the weights, refused it)
    [candidates] = judge(decoder, model, tones, torch.tensor([10]), audio)
    assert best_judged(candidates, decoder.weights).text == "A."


class RecordingBeam:
    """A beam n-best that records which utterances it was asked to search."""

    def __init__(self, texts, size):
        self.texts, self.size, self.asked = texts, size, []

    def of(self, rows):
        self.asked.append(list(rows))
        return [[Candidate(t, -1.0, tuple(StubTokenizer().text_to_ids(t))) for t in self.texts] for _ in rows]

    def all(self):
        return self.of(range(self.size))


def test_the_beam_is_searched_only_where_neither_the_veto_nor_whisper_sureness_settles_the_choice():
    decoder, _ = joint(["Ab."], ["ba"])
    decoder.weights = JointWeights(ctc=0.3, whisper_sure=-2.0)  # the stub Whisper gives "Ab." -1.0 a word: sure
    silence, speech = frames(0, 0, 0, 0, sure=0.99), frames(1, 0, 2, 0)
    log_probs = torch.cat([silence, speech])
    audios = [np.zeros(16000, dtype=np.float32)] * 2
    beam = RecordingBeam(["ba"], 2)
    assert [c.text for c in decoder.best(beam, log_probs, torch.tensor([4, 4]), audios)] == ["", "Ab."]
    assert beam.asked == [[]]  # silence vetoed, Whisper sure of the speech: no search
    decoder.weights = JointWeights(ctc=0.3, whisper_sure=-0.5)  # now unsure: the speech alone is searched
    beam = RecordingBeam(["ba"], 2)
    chosen = decoder.best(beam, log_probs, torch.tensor([4, 4]), audios)
    assert beam.asked == [[1]]
    everything = decoder.judge(RecordingBeam(["ba"], 2).all(), log_probs, torch.tensor([4, 4]), audios)
    assert chosen[1].text == best_judged(everything[1], decoder.weights).text == "Ab."


def test_ctc_candidates_judges_the_beams_best_that_whisper_did_not_propose():
    decoder, model = joint(["Ab."], ["ab", "aa", "", "ba", "bb"])
    decoder.weights = JointWeights(ctc=0.3, ctc_candidates=2)
    [candidates] = judge(decoder, model, frames(1, 0, 2, 0), torch.tensor([4]), [np.zeros(16000, dtype=np.float32)])
    # "ab" is Whisper's already; then the beam's first two that say something; its empty one kept for the veto
    assert [(c.spoken, c.from_whisper, c.veto_only) for c in candidates] == [
        ("ab", True, False), ("aa", False, False), ("", False, False), ("ba", False, False)]


def test_a_shortened_whisper_window_pads_the_utterance_and_never_passes_30_s():
    assert window_frames(501, 30.0) == 3000  # Whisper's own window: always 30 s
    assert window_frames(501, 10.0) == 1000  # a 5 s utterance in a 10 s window
    assert window_frames(951, 10.0) == 1052  # 9.5 s: the tail of padding after the speech, the length made even
    assert window_frames(2950, 10.0) == 3000  # never past 30 s


def test_whisper_hypotheses_are_bounded_by_the_window_length():
    assert max_whisper_tokens(5.0, 3) == 3 + 60 + 16  # five seconds: room for far more than anyone says
    assert max_whisper_tokens(30.0, 3) == 3 + 360 + 16
    assert max_whisper_tokens(60.0, 3) == 448  # never past Whisper's own limit


def test_a_shortened_window_is_exactly_its_frames_of_speech_then_silence():
    from types import SimpleNamespace

    from faster_whisper.feature_extractor import FeatureExtractor

    proposer = WhisperProposer.__new__(WhisperProposer)  # the front end alone: no CTranslate2 model read
    proposer.model, proposer.window = SimpleNamespace(feature_extractor=FeatureExtractor()), 10.0
    loud = 0.3 * np.sin(np.arange(16000 * 4) / 5.0).astype(np.float32)  # 4 s of a tone
    for samples in (16000 * 4, 16000 * 4 - 1, 16000 * 12 + 7):
        (features,) = proposer._features([loud[:samples] if samples <= len(loud) else np.resize(loud, samples)])
        assert features.shape[-1] == window_frames(samples // 160 + 1, 10.0)
        assert features[:, -1].max() < features[:, 10].max()  # the end is silence, the start the tone


class CountingRescorer(StubRescorer):
    def __init__(self):
        self.asked = []

    def encoded_log_likelihoods(self, encoding, texts):
        self.asked.extend(texts)
        return super().encoded_log_likelihoods(encoding, texts)


def test_whisper_first_hypothesis_is_scored_once_and_the_sureness_check_asks_no_lm():
    rescorer, lm_asked = CountingRescorer(), []
    # Whisper's -1 a word is below whisper_sure: not sure of "Ab.", so every candidate is judged after the check
    decoder = JointDecoding(StubProposer(["Ab.", "Ba."]), rescorer, JointWeights(ctc=0.3, lm=0.1, whisper_sure=-0.5),
                            StubTokenizer(), BLANK, lm=object())
    decoder._lm_scores = lambda spoken: lm_asked.append(list(spoken)) or [0.0] * len(spoken)
    (chosen,) = best(decoder, stub_beam(["ab", "aa"]), frames(1, 0, 2, 0), torch.tensor([4]),
                     [np.zeros(16000, np.float32)])
    assert chosen.text == "Ab."
    assert rescorer.asked.count("Ab.") == 1  # the sureness check's score, kept for the judging
    assert lm_asked == [["ab", "ba", "aa", ""]]  # the LM read once, when every candidate was judged


def test_whisper_searches_each_utterance_with_the_same_bound_alone_or_in_a_batch():
    from faster_whisper.feature_extractor import FeatureExtractor

    class StubCTranslate2:
        def __init__(self):
            self.bounds = []

        def generate(self, encoded, prompts, max_length, **kwargs):
            self.bounds.append((len(prompts), max_length))
            return [SimpleNamespace(sequences_ids=[[7]]) for _ in prompts]

    search = StubCTranslate2()
    proposer = WhisperProposer.__new__(WhisperProposer)  # no weights read: the front end and stand-ins
    proposer.model = SimpleNamespace(feature_extractor=FeatureExtractor(), model=search,
                                     encode=lambda features: np.zeros((len(features), features.shape[-1] // 2, 4)))
    proposer.tokenizer, proposer.prompt, proposer.suppressed = SimpleNamespace(decode=lambda ids: "Hi."), [1, 2, 3], []
    proposer.beam_size, proposer.n_best, proposer.window = 5, 5, 15.0
    short, longer = np.zeros(16000 * 3, np.float32), np.zeros(16000 * 12, np.float32)
    proposer.propose([short], [None])
    alone = search.bounds[-1]
    texts, encodings = proposer.propose([short, longer, short], [None] * 3)
    assert alone == (1, max_whisper_tokens(5.0, 3))  # 3 s of audio: bounded as 5 s, the length in whole steps
    assert sorted(search.bounds[-2:]) == [(1, max_whisper_tokens(15.0, 3)), (2, max_whisper_tokens(5.0, 3))]
    assert texts == [["Hi."]] * 3 and [e.shape[1] for e in encodings] == [750, 750, 750]
