"""Synthetic corpus: sentence generation, speaker partition, the committed samples/LibriSpeech tree,
and (integration) a tiny corpus synthesised by the real entry point."""

import re
import runpy
import shutil
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile

from duet.synth import corpus, tts
from duet.synth.corpus_text import (ASSISTANT_TEMPLATES, READ_TEMPLATES, assistant_requests, fill_template,
                              generate_sentences, number_to_words, ordinal_to_words, to_transcript)

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "LibriSpeech"
SPLIT_ROLE = {"train-clean": {"train"}, "dev-clean": {"dev"}, "test-clean": {"test"}}
HOURS_SPLIT_ROLE = {"train-clean": {"train"}, "dev-clean": {"pool-dev"}}
ENTRY = Path(__file__).resolve().parent.parent / "tools" / "make_sample_corpus.py"


# ---------------------------------------------------------------------------------------------- text

@pytest.mark.parametrize("n, words", [
    (0, "zero"), (13, "thirteen"), (25, "twenty five"), (40, "forty"), (105, "one hundred and five"),
    (360, "three hundred and sixty"), (1000, "one thousand"), (2024, "two thousand and twenty four"),
    (12500, "twelve thousand five hundred"),
])
def test_number_to_words(n, words):
    assert number_to_words(n) == words


@pytest.mark.parametrize("n, words", [(1, "first"), (2, "second"), (12, "twelfth"), (21, "twenty first"),
                                      (30, "thirtieth"), (23, "twenty third"), (15, "fifteenth")])
def test_ordinal_to_words(n, words):
    assert ordinal_to_words(n) == words


def test_sentences_are_deterministic_per_seed():
    first = [s.text for s in generate_sentences(300, seed=3)]
    assert first == [s.text for s in generate_sentences(300, seed=3)]
    assert first != [s.text for s in generate_sentences(300, seed=4)]


def test_sentences_are_unique_clean_and_mixed():
    sentences = generate_sentences(3000, seed=0, max_words=8)
    texts = [s.text for s in sentences]
    assert len(set(texts)) == len(texts)
    for text in texts:
        assert re.fullmatch(r"[a-z']+( [a-z']+)*", text), text
        assert len(text.split()) <= 8
    share = sum(s.kind == "assistant" for s in sentences) / len(sentences)
    assert 0.6 < share < 0.7
    assert {s.intent for s in sentences} >= set(ASSISTANT_TEMPLATES)


def test_exclude_is_respected():
    first = [s.text for s in generate_sentences(200, seed=1)]
    again = [s.text for s in generate_sentences(200, seed=1, exclude=first[:100])]
    assert not set(again) & set(first[:100])


def test_every_template_fills_with_words_only():
    import random
    rng = random.Random(0)
    for template in [t for ts in ASSISTANT_TEMPLATES.values() for t in ts] + list(READ_TEMPLATES):
        for _ in range(20):
            text, slots = fill_template(template, rng)
            assert re.fullmatch(r"[a-z']+( [a-z']+)*", text), (template, text)


def test_assistant_requests_keep_raw_slot_values():
    requests = assistant_requests(400, seed=0)
    assert all(r.kind == "assistant" for r in requests)
    sums = [r for r in requests if r.template == "what is {number} plus {number2}"]
    assert sums, "expected at least one addition request in 400 draws"
    for r in sums:
        assert r.text == f"what is {number_to_words(r.slots['number'])} plus {number_to_words(r.slots['number2'])}"


def test_to_transcript_is_librispeech_style():
    assert to_transcript("Set a timer, please! It's twenty-five") == "SET A TIMER PLEASE IT'S TWENTY FIVE"
    with pytest.raises(ValueError, match="spell numbers"):
        to_transcript("set a timer for 25 minutes")


# ---------------------------------------------------------------------------------------------- speakers

def test_speaker_catalogue_is_a_fixed_disjoint_partition():
    catalogue = tts.speaker_catalogue()
    assert catalogue == tts.speaker_catalogue()
    assert len({s.id for s in catalogue}) == len(catalogue)
    by_role = {role: [s for s in catalogue if s.role == role] for role in ("train", "pool-dev", "dev", "test")}
    assert all(by_role.values())
    pool = by_role["train"] + by_role["pool-dev"]
    settings = lambda speakers: {(s.engine, s.voice, s.rate, s.pitch) for s in speakers}  # noqa: E731
    for held_out in ("dev", "test"):
        assert not settings(by_role[held_out]) & settings(pool)
        # espeak-ng held-out voices (accent+variant) never occur in the pool at any rate or pitch
        espeak_pool = {s.voice for s in pool if s.engine == "espeak-ng"}
        assert not {s.voice for s in by_role[held_out] if s.engine == "espeak-ng"} & espeak_pool
        assert {s.engine for s in by_role[held_out]} == {"espeak-ng", "flite", "festival"}
    assert not settings(by_role["dev"]) & settings(by_role["test"])
    for s in catalogue:
        if s.engine == "espeak-ng":
            assert 130 <= s.rate <= 190 and 0 <= s.pitch <= 99, s
        else:
            assert 0.85 <= s.rate <= 1.2, s


def test_sample_plan_is_deterministic_and_split_disjoint():
    counts = {"train-clean": 60, "dev-clean": 10, "test-clean": 12}
    plan = corpus.plan_sample(0, counts)
    assert [(u.utt_id, u.text) for u in plan] == [(u.utt_id, u.text) for u in corpus.plan_sample(0, counts)]
    speakers = {split: {u.speaker.id for u in plan if u.split == split} for split in counts}
    texts = {split: {u.text for u in plan if u.split == split} for split in counts}
    for split, n in counts.items():
        assert len(texts[split]) == n
        assert {u.speaker.role for u in plan if u.split == split} <= SPLIT_ROLE[split]
    assert not speakers["train-clean"] & (speakers["dev-clean"] | speakers["test-clean"])
    assert not speakers["dev-clean"] & speakers["test-clean"]
    assert not texts["train-clean"] & (texts["dev-clean"] | texts["test-clean"])
    # the test split does not depend on the size of the training split
    bigger = corpus.plan_sample(0, {**counts, "train-clean": 200})
    assert [u.text for u in bigger if u.split == "test-clean"] == [u.text for u in plan if u.split == "test-clean"]


def test_missing_engine_is_one_line_error(monkeypatch, capsys):
    real_which = shutil.which
    monkeypatch.setattr(tts.shutil, "which", lambda name: None if name == "espeak-ng" else real_which(name))
    module = runpy.run_path(str(ENTRY))
    assert module["main"](["--out", "/nonexistent/never-written"]) == 2
    err = capsys.readouterr().err.strip()
    assert "espeak-ng not installed" in err and "\n" not in err


def out_of_band_fraction(flac: Path) -> float:
    """Share of a clip's energy outside the telephone band (below 250 Hz or above 3.8 kHz)."""
    audio, rate = soundfile.read(flac)
    power = np.abs(np.fft.rfft(audio)) ** 2
    hz = np.fft.rfftfreq(len(audio), 1 / rate)
    return float(power[(hz < 250) | (hz > 3800)].sum() / power.sum())


def test_unknown_channel_is_an_error(tmp_path):
    speaker = tts.speaker_catalogue()[0]
    with pytest.raises(ValueError, match="unknown channel 'radio'"):
        tts.synthesize(speaker, "hello", tmp_path / "x.flac", channel="radio")
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------- corpus tree

def check_corpus_tree(root: Path, split_roles: dict[str, set] = SPLIT_ROLE) -> dict[str, dict]:
    """Assert the LibriSpeech layout and audio format of ``root``; return per-split facts."""
    facts = {}
    splits = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert splits and set(splits) <= set(split_roles), splits
    speakers_txt = (root / "SPEAKERS.txt").read_text()
    roles = {}
    for line in speakers_txt.splitlines():
        if not line.startswith(";"):
            fields = [f.strip() for f in line.split("|")]
            roles[(int(fields[0]), fields[1])] = fields[-1]
    for split in splits:
        flacs, lines = {}, {}
        for flac in (root / split).glob("*/*/*.flac"):
            speaker, chapter = flac.parent.parent.name, flac.parent.name
            assert re.fullmatch(rf"{speaker}-{chapter}-\d{{4}}\.flac", flac.name), flac
            flacs[flac.stem] = flac
        for trans in (root / split).glob("*/*/*.trans.txt"):
            assert trans.name == f"{trans.parent.parent.name}-{trans.parent.name}.trans.txt", trans
            for line in trans.read_text().splitlines():
                utt_id, text = line.split(" ", 1)
                assert re.fullmatch(r"[A-Z']+( [A-Z']+)*", text), line
                assert (trans.parent / f"{utt_id}.flac").exists(), f"{trans}: no audio for {utt_id}"
                lines[utt_id] = text
        assert set(flacs) == set(lines), f"{split}: audio without transcript or vice versa"
        assert len(set(lines.values())) == len(lines), f"{split}: repeated transcripts"
        seconds = 0.0
        for flac in flacs.values():
            info = soundfile.info(flac)
            assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16"), flac
            assert 0.6 < info.duration < 20, flac
            seconds += info.duration
        speakers = {int(u.split("-")[0]) for u in flacs}
        for speaker in speakers:
            assert (speaker, split) in roles, f"{split}: speaker {speaker} missing from SPEAKERS.txt"
            assert roles[(speaker, split)] in split_roles[split], (split, speaker)
        facts[split] = {"utts": len(flacs), "speakers": speakers, "texts": set(lines.values()), "seconds": seconds}
    for a in facts:
        for b in facts:
            if a < b:
                assert not facts[a]["speakers"] & facts[b]["speakers"], (a, b)
    return facts


@pytest.mark.skipif(not SAMPLE.exists(), reason="samples/LibriSpeech not generated")
def test_committed_sample_tree():
    facts = check_corpus_tree(SAMPLE)
    assert set(facts) == {"train-clean", "dev-clean", "test-clean"}
    assert facts["train-clean"]["utts"] >= 500
    assert facts["dev-clean"]["utts"] >= 50 and facts["test-clean"]["utts"] >= 70
    assert not facts["test-clean"]["texts"] & facts["train-clean"]["texts"]
    assert not facts["dev-clean"]["texts"] & facts["train-clean"]["texts"]
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size <= 30e6, f"samples/LibriSpeech is {size / 1e6:.1f} MB"
    # the sample is telephone speech, unlike the wideband corpora the base checkpoint learnt from
    assert f"; CHANNEL of every clip: {corpus.SAMPLE_CHANNEL}" in (SAMPLE / "SPEAKERS.txt").read_text()
    for split in facts:
        flac = sorted((SAMPLE / split).glob("*/*/*.flac"))[0]
        assert out_of_band_fraction(flac) < 0.01, flac


def test_committed_sample_bpe_1024_trains(tmp_path):
    sentencepiece = pytest.importorskip("sentencepiece")
    if not SAMPLE.exists():
        pytest.skip("samples/LibriSpeech not generated")
    lines = [line.split(" ", 1)[1] for t in (SAMPLE / "train-clean").glob("*/*/*.trans.txt")
             for line in t.read_text().splitlines()]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    sentencepiece.SentencePieceTrainer.train(input=str(tmp_path / "train.txt"), model_prefix=str(tmp_path / "bpe"),
                                             vocab_size=1024, model_type="bpe", minloglevel=2)
    assert sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "bpe.model")).vocab_size() == 1024


# ---------------------------------------------------------------------------------------------- integration

needs_engines = pytest.mark.skipif(bool(tts.missing_engines()[0]),
                                   reason="espeak-ng, flite and sox are needed to synthesise")


@pytest.mark.integration
@needs_engines
def test_tiny_corpus_from_entry_point(tmp_path, python):
    out = tmp_path / "LibriSpeech"
    cmd = [python, str(ENTRY), "--out", str(out), "--train-utts", "4", "--dev-utts", "1", "--test-utts", "1",
           "--jobs", "2"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert result.stdout.startswith(f"wrote {out}")
    facts = check_corpus_tree(out)
    assert {split: f["utts"] for split, f in facts.items()} == {"train-clean": 4, "dev-clean": 1, "test-clean": 1}
    assert not list(tmp_path.glob(".*partial*"))
    transcripts = sorted(p.read_text() for p in out.rglob("*.trans.txt"))
    subprocess.run(cmd, capture_output=True, text=True, check=True)  # replaces the corpus in place
    assert sorted(p.read_text() for p in out.rglob("*.trans.txt")) == transcripts


@needs_engines
def test_telephone_channel_keeps_only_the_telephone_band(tmp_path):
    # flite slt at 180 Hz: its fundamental lies below 250 Hz, so much of its energy is outside the band
    speaker = next(s for s in tts.speaker_catalogue() if s.engine == "flite")
    fractions = {}
    for channel in ("wideband", "telephone"):
        seconds = tts.synthesize(speaker, "what is the weather in paris", tmp_path / f"{channel}.flac", channel)
        info = soundfile.info(tmp_path / f"{channel}.flac")
        assert (info.samplerate, info.channels) == (16000, 1) and seconds > 1
        fractions[channel] = out_of_band_fraction(tmp_path / f"{channel}.flac")
    assert fractions["telephone"] < 0.01 < 0.1 < fractions["wideband"], fractions


@pytest.mark.integration
@needs_engines
def test_tiny_hours_corpus_uses_only_training_pool(tmp_path):
    out = tmp_path / "LibriSpeech"
    skip = tts.missing_engines()[1]
    corpus.build_hours(out, hours=20 / 3600, seed=0, sample_counts={"train-clean": 520, "dev-clean": 60,
                       "test-clean": 80}, jobs=2, skip_engines=skip, batch=8, dev_utts=2)
    facts = check_corpus_tree(out, HOURS_SPLIT_ROLE)
    assert "; CHANNEL of every clip: wideband" in (out / "SPEAKERS.txt").read_text()  # the base's conditions
    assert 20 <= facts["train-clean"]["seconds"] < 30  # stops at the utterance that crosses the target
    roles = {s.id: s.role for s in tts.speaker_catalogue()}
    assert {roles[s] for s in facts["train-clean"]["speakers"]} == {"train"}
    assert {roles[s] for s in facts["dev-clean"]["speakers"]} == {"pool-dev"}
    sample = corpus.sample_sentences(0, {"train-clean": 520, "dev-clean": 60, "test-clean": 80})
    held_out = {to_transcript(s.text) for split in ("dev-clean", "test-clean") for s in sample[split]}
    assert not held_out & (facts["train-clean"]["texts"] | facts["dev-clean"]["texts"])


@needs_engines
def test_a_voice_case_scores_utterances_it_never_adapts_on(tmp_path):
    from duet.synth.voices import ADAPTATION_VOICE

    out = tmp_path / "voice"
    corpus.build_voice_case(out, ADAPTATION_VOICE, adapt_minutes=6 / 60, scored=2)
    splits = {}
    for split in ("dev-clean", "train-clean"):
        lines = dict(line.split(" ", 1) for trans in (out / split).rglob("*.trans.txt")
                     for line in trans.read_text().splitlines())
        assert {f.stem for f in (out / split).rglob("*.flac")} == set(lines), split
        seconds = sum(soundfile.info(f).duration for f in (out / split).rglob("*.flac"))
        splits[split] = (lines, seconds)
    (scored, _), (adapt_on, adapt_seconds) = splits["dev-clean"], splits["train-clean"]
    assert len(scored) == 2 and 6 <= adapt_seconds < 6 + 6  # stops at the utterance that crosses the minutes
    assert not set(scored) & set(adapt_on) and not set(scored.values()) & set(adapt_on.values())
    sample = {to_transcript(s.text) for split in corpus.sample_sentences(0, corpus.SAMPLE_COUNTS).values()
              for s in split}
    assert not sample & (set(scored.values()) | set(adapt_on.values()))
    assert {int(u.split("-")[0]) for u in {**scored, **adapt_on}} == {ADAPTATION_VOICE.id}


def test_committed_sample_is_what_the_generator_plans():
    """The bundled transcripts must be reproducible from the code: a changed template or word list
    without regenerating samples/ would make this fail (and the demo's domain split wrong)."""
    from duet.synth.corpus import SAMPLE_COUNTS, bundled_sample_kinds

    root = Path(__file__).resolve().parent.parent / "samples" / "LibriSpeech"
    for split in SAMPLE_COUNTS:
        committed = {line.split(" ", 1)[1].strip().lower()
                     for trans in (root / split).rglob("*.trans.txt")
                     for line in trans.read_text(encoding="utf-8").splitlines()}
        assert committed == set(bundled_sample_kinds(split)), split


def test_lm_text_never_holds_a_held_out_sentence(tmp_path, python):
    held_out = set(corpus.held_out_texts())
    assert len(held_out) == corpus.SAMPLE_COUNTS["dev-clean"] + corpus.SAMPLE_COUNTS["test-clean"]
    # enough sentences that, without the exclusion, some of the 140 held-out ones would be drawn again
    texts = corpus.lm_text(20_000)
    assert len(set(texts)) == 20_000 and not held_out & set(texts)
    assert corpus.lm_text(50) == texts[:50]  # deterministic, and a prefix of a longer run
    out = tmp_path / "lm.txt"
    result = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--sentences", "300", "--out", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines() == corpus.lm_text(300)
    to_folder = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--sentences", "3", "--out", str(tmp_path)],
                               capture_output=True, text=True)
    assert to_folder.returncode == 2 and f"--out {tmp_path} is a folder" in to_folder.stderr


def test_wordnet_lm_text_adds_training_transcripts_and_never_a_held_out_or_excluded_sentence(tmp_path, python):
    from duet.synth.wordnet_text import wordnet_sentences

    training, held_out = wordnet_sentences(held_out=False), wordnet_sentences(held_out=True)
    train, dev = tmp_path / "train.json", tmp_path / "dev.json"
    train.write_text(json.dumps({"audio_filepath": "a.flac", "duration": 1.0, "text": "Mary Is Going To See Monkey"}) + "\n")
    dev.write_text(json.dumps({"audio_filepath": "b.flac", "duration": 1.0, "text": training[5]}) + "\n")
    out = tmp_path / "lm.txt"
    result = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--source", "wordnet", "--manifest",
                             str(train), "--exclude", str(dev), "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines[-1] == "mary is going to see monkey"  # the manifest's transcript, normalised, after WordNet's
    assert training[5] not in lines and training[4] in lines and not set(held_out) & set(lines)
    assert len(lines) == len(training)  # all of WordNet's training part but the excluded one, plus the transcript
    missing = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--source", "wordnet", "--manifest",
                              str(tmp_path / "none.json"), "--out", str(out)], capture_output=True, text=True)
    assert missing.returncode == 2 and f"manifest not found: {tmp_path / 'none.json'}" in missing.stderr


def test_manifest_times_repeats_the_transcripts_only(tmp_path, python):
    """--manifest-times weighs the transcripts against the generated text; an excluded sentence stays out."""
    train, dev = tmp_path / "train.json", tmp_path / "dev.json"
    train.write_text("".join(json.dumps({"audio_filepath": f"{i}.flac", "duration": 1.0, "text": text}) + "\n"
                             for i, text in enumerate(["The Orange Kite Flew Over Our School", "the dev sentence"])))
    dev.write_text(json.dumps({"audio_filepath": "d.flac", "duration": 1.0, "text": "the dev sentence"}) + "\n")
    out = tmp_path / "lm.txt"
    result = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--sentences", "20", "--manifest",
                             str(train), "--manifest-times", "3", "--exclude", str(dev), "--out", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines() == corpus.lm_text(20) + ["the orange kite flew over our school"] * 3
    zero = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--manifest", str(train), "--manifest-times",
                           "0", "--out", str(out)], capture_output=True, text=True)
    assert zero.returncode == 2 and "--manifest-times must be positive, got 0" in zero.stderr


def test_english_text_for_replay_is_wordnets_estimate_part_as_written(tmp_path, python):
    """tools/make_english_text.py: never a sentence of the dev or test tenths the SLM's perplexity is scored on."""
    from duet.data.english_text import part_of, wordnet_examples

    out = tmp_path / "english.txt"
    result = subprocess.run([python, str(ENTRY.parent / "make_english_text.py"), "--sentences", "40", "--out", str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines == wordnet_examples("estimate", limit=40) and {part_of(line) for line in lines} == {"estimate"}
    assert any(line != line.lower() for line in wordnet_examples("estimate"))  # case kept, unlike the LM's transcripts
    to_folder = subprocess.run([python, str(ENTRY.parent / "make_english_text.py"), "--out", str(tmp_path)],
                               capture_output=True, text=True)
    assert to_folder.returncode == 2 and f"--out {tmp_path} is a folder" in to_folder.stderr


def test_both_sources_write_the_corpus_sentences_then_wordnets(tmp_path, python):
    from duet.synth.wordnet_text import wordnet_sentences

    out = tmp_path / "lm.txt"
    result = subprocess.run([python, str(ENTRY.parent / "make_lm_text.py"), "--source", "corpus", "wordnet",
                             "--sentences", "50", "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines, generated = out.read_text().splitlines(), corpus.lm_text(50)
    assert lines[:50] == generated
    assert lines[50:] == [t for t in wordnet_sentences(held_out=False) if t not in set(generated)]


def test_another_seed_still_excludes_the_bundled_samples_held_out_sentences():
    # a base corpus or LM text made with --seed 1 (for fresh sentences) must not train on what the bundled
    # sample (seed 0) tests on; before, only seed 1's own sample's dev/test sentences were excluded
    bundled = set(corpus.held_out_texts())
    other = corpus.held_out_texts(seed=1)
    assert bundled <= set(other) and len(other) > len(bundled) and len(set(other)) == len(other)
    assert not bundled & set(corpus.lm_text(20_000, seed=1))
