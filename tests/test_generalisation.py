"""The generalisation data and its measure: the voice pool and its exclusion rule, WordNet text and its
held-out tenth, the speaker-disjoint dev carve, augmentation settings reaching NeMo's Lhotse loader, and
bench/asr_generalisation.py on tiny generated sets (no ../shared needed)."""

from __future__ import annotations

import json
import threading
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from duet.data import english_text
from duet.data.manifest import hold_out_speakers, speaker_of
from duet.synth import voices, wordnet_text
from duet.synth.tts import speaker_catalogue
from tests.asr_helpers import compose_config
from tests.audio_fixtures import write_chapter, write_tone
from tests.script_helpers import load_script

REPO = Path(__file__).resolve().parent.parent


def _bench_module():
    return load_script(REPO / "bench" / "asr_generalisation.py")


# ---------------------------------------------------------------- voice pool and exclusion rule


def test_pool_and_unseen_are_fixed_and_disjoint():
    pool, unseen = voices.generalisation_pool(), voices.unseen_speakers()
    assert pool == voices.generalisation_pool() and unseen == voices.unseen_speakers()
    voices.check_exclusion(pool, unseen)
    assert {voices.identity(s) for s in unseen} == set(voices.UNSEEN_IDENTITIES)
    assert not {voices.identity(s) for s in pool} & voices.UNSEEN_IDENTITIES
    speakers = set(pool + unseen + speaker_catalogue())
    assert len({s.id for s in speakers}) == len(speakers), "one id, one speaker, across every catalogue"
    # every engine Debian offers is in the pool, and the sample's own training speakers are kept
    assert {s.engine for s in pool} == {"espeak-ng", "flite", "festival", "mbrola", "rhvoice", "pico"}
    assert {s for s in speaker_catalogue() if s.role == "train"} <= set(pool)
    # the sample's dev/test speakers and the pool-dev split never train
    assert not {s.id for s in pool} & {s.id for s in speaker_catalogue() if s.role != "train"}


def test_the_adaptation_voice_is_in_no_pool_sample_or_unseen_set():
    known = voices.generalisation_pool() + voices.unseen_speakers() + speaker_catalogue()
    assert voices.is_new_voice(voices.ADAPTATION_VOICE)
    assert voices.ADAPTATION_VOICE.id not in {s.id for s in known}
    assert not any(voices.is_new_voice(s) for s in (voices.generalisation_pool()[-1], voices.unseen_speakers()[0],
                                                    speaker_catalogue()[-1]))
    # the rule looks at the timbre: a pool variant under a new accent is no new voice
    pooled = next(s for s in voices.generalisation_pool() if s.engine == "espeak-ng")
    assert not voices.is_new_voice(replace(pooled, voice="en-us-nyc+" + pooled.voice.split("+")[1]))


def test_identity_ignores_the_espeak_accent():
    espeak = next(s for s in voices.unseen_speakers() if s.engine == "espeak-ng")
    other_accent = replace(espeak, voice="en-029+" + espeak.voice.split("+")[1])
    assert voices.identity(espeak) == voices.identity(other_accent)
    assert voices.identity(replace(espeak, engine="pico", voice="en-GB")) == ("pico", "en-GB")


@pytest.mark.parametrize("clash", ["accent", "engine voice"])
def test_exclusion_rule_refuses_a_held_out_voice_in_training(clash):
    pool, unseen = voices.generalisation_pool(), voices.unseen_speakers()
    if clash == "accent":  # the same espeak-ng variant under another accent is the same voice
        held = next(s for s in unseen if s.engine == "espeak-ng")
        intruder = replace(held, voice="en-gb-scotland+" + held.voice.split("+")[1], role="mix")
    else:
        intruder = replace(next(s for s in unseen if s.engine == "rhvoice"), role="mix")
    with pytest.raises(ValueError, match="share identities"):
        voices.check_exclusion(pool + [intruder], unseen)


def test_exclusion_rule_refuses_a_sample_voice_in_the_unseen_set():
    sample_voice = next(s for s in speaker_catalogue() if s.role == "test" and s.engine == "flite")
    with pytest.raises(ValueError, match="share identities"):
        voices.check_exclusion(voices.generalisation_pool(), voices.unseen_speakers() + [sample_voice])


# ---------------------------------------------------------------- WordNet text


def _fake_wordnet(folder: Path, examples: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    header = "  1 This software and database is being provided ...\n"
    lines = [f"0000{i} 03 n 01 word 0 000 | a gloss; \"{ex}\"" for i, ex in enumerate(examples)]
    for name in english_text.WORDNET_FILES:
        (folder / name).write_text(header + "\n".join(lines) + "\n", encoding="latin-1")
    return folder


def test_wordnet_examples_become_transcripts_or_are_skipped():
    t = wordnet_text._to_transcript
    assert t("When you have to hiccup, drink a glass of cold water") == "when you have to hiccup drink a glass of cold water"
    assert t("she walked 3 miles in 1990") == "she walked three miles in nineteen ninety"
    assert t("the U.S. army") is None  # an abbreviation cannot be written down as it is spoken
    assert t("NATO met today again") is None
    assert t("it cost $5") is None
    assert t("too short") is None


def test_wordnet_held_out_tenth_never_reaches_training(tmp_path):
    examples = [f"the {w} sat by the window all day" for w in
                ("cat", "dog", "girl", "boy", "teacher", "farmer", "pilot", "doctor", "singer", "baker",
                 "sailor", "tailor", "miner", "judge", "clerk", "nurse", "driver", "painter", "writer", "cook")]
    folder = _fake_wordnet(tmp_path / "wn", examples)
    wordnet_text._all_sentences.cache_clear()
    train = wordnet_text.wordnet_sentences(wordnet_dir=folder)
    held = wordnet_text.wordnet_sentences(held_out=True, wordnet_dir=folder)
    assert held, "a fifth of twenty sentences should hash into the held-out tenth"
    assert set(train).isdisjoint(held) and len(train) + len(held) == len(examples)
    assert all(wordnet_text.is_held_out(s) for s in held)
    dropped = wordnet_text.wordnet_sentences(exclude=[train[0].upper()], wordnet_dir=folder)
    assert train[0] not in dropped and len(dropped) == len(train) - 1


def test_missing_wordnet_is_named(tmp_path):
    wordnet_text._all_sentences.cache_clear()
    with pytest.raises(english_text.WordNetMissing, match="wordnet-base"):
        wordnet_text.wordnet_sentences(wordnet_dir=tmp_path / "none")


# ---------------------------------------------------------------- speaker-disjoint dev carve


def test_dev_carve_holds_out_whole_speakers():
    entries = [{"audio_filepath": f"/x/{spk}/1/{spk}-1-{u}.flac", "duration": 1.0, "text": "a"}
               for spk in range(100, 120) for u in range(3)]
    rest, dev = hold_out_speakers(entries, 4)
    assert len({speaker_of(e) for e in dev}) == 4 and len(dev) == 12
    assert {speaker_of(e) for e in rest}.isdisjoint(speaker_of(e) for e in dev)
    assert hold_out_speakers(entries, 4) == (rest, dev)
    with pytest.raises(ValueError, match="cannot hold out 20 of 20"):
        hold_out_speakers(entries, 20)


# ---------------------------------------------------------------- augmentation reaches the data loader


def test_base_mix_config_augmentations_reach_lhotse_cuts(tmp_path):
    """The recipe's Lhotse settings (speed, noise, impulse responses, band-limiting) are applied by NeMo's
    loader to what a training step receives: the cuts carry each transform and the audio changes."""
    import numpy as np
    from nemo.collections.common.data.lhotse import get_lhotse_dataloader_from_config

    from duet.synth.noise import build_rir_set

    clean = []
    for i in range(4):
        path = tmp_path / "speech" / f"1-1-{i}.flac"
        write_tone(path, 1.0 + 0.1 * i)
        clean.append({"audio_filepath": str(path), "duration": 1.0 + 0.1 * i, "text": "a b c"})
    (tmp_path / "train.json").write_text("".join(json.dumps(e) + "\n" for e in clean))
    noise = tmp_path / "noise" / "n.flac"
    write_tone(noise, 3.0)
    (tmp_path / "noise.json").write_text(json.dumps({"audio_filepath": str(noise), "duration": 3.0, "text": ""}) + "\n")
    rirs = build_rir_set(tmp_path / "rir", count=2)
    cfg = compose_config("base_tiny_mix", [
        f"synthetic_manifest={tmp_path / 'train.json'}", f"real_manifest={tmp_path / 'train.json'}",
        f"noise_manifest={tmp_path / 'noise.json'}", f"rir_manifest={rirs}", "model.tokenizer.dir=unused",
        "model.train_ds.noise_mix_prob=1.0", "model.train_ds.rir_prob=1.0", "model.train_ds.lowpass_prob=1.0",
        "model.train_ds.batch_size=4", "model.train_ds.num_workers=0",
        # a small buffer: the test draws 24 cuts, not the 10,000 a training run buffers from its endless mix
        "+model.train_ds.bucket_buffer_size=64", "model.train_ds.shuffle_buffer_size=64"])
    train_ds = cfg.model.train_ds
    assert train_ds.use_lhotse and train_ds.perturb_speed and train_ds.rir_enabled and train_ds.lowpass_enabled

    class Cuts:  # the dataset hands back the sampled cuts so that the test can look at them
        def __getitem__(self, cuts):
            return cuts

    threads_before = {t for t in threading.enumerate() if not t.daemon}
    loader = get_lhotse_dataloader_from_config(train_ds, global_rank=0, world_size=1, dataset=Cuts())
    seen_speeds, mixed, reverb = set(), 0, 0
    for batch_index, cuts in enumerate(loader):
        for cut in cuts:
            seen_speeds.add(cut.id.split("_sp")[1][:3] if "_sp" in cut.id else "1.0")
            mixed += cut.to_dict()["type"] == "MixedCut"
            description = json.dumps(cut.to_dict())
            reverb += "ReverbWithImpulseResponse" in description
            audio = cut.load_audio()
            assert audio.shape[-1] > 0 and np.isfinite(audio).all()
        if batch_index == 5:
            break
    assert mixed > 0, "noise_mix_prob=1 but no cut was mixed with noise"
    assert reverb > 0, "rir_prob=1 but no cut was convolved with an impulse response"
    assert seen_speeds - {"1.0"}, f"perturb_speed=true but only speeds {seen_speeds} were drawn"
    # a live non-daemon thread left by the loader keeps a finished training process from exiting, and a later
    # fork() in the same process (the evaluation's worker pool) can hang on it
    assert {t for t in threading.enumerate() if not t.daemon} == threads_before


# ---------------------------------------------------------------- the evaluation command


def _tiny_sets(root: Path) -> dict[str, Path]:
    """A sample test split, an unseen-voices corpus and a real-speech folder with every held-out set."""
    sample = root / "sample" / "test-clean"
    write_chapter(sample, 7001, 700101, {0: ("SET A TIMER", 0.9), 1: ("PLAY MUSIC", 0.8)})
    unseen_root = root / "unseen" / "LibriSpeech"
    write_chapter(unseen_root / "test-unseen", 8001, 800101, {0: ("THE CAT SAT", 1.0)})
    (unseen_root / "SPEAKERS.txt").write_text("; fake\n")
    real = root / "real_speech"
    for n, name in enumerate(("speechocean762/test", "read_sentences", "common_voice", "digits", "librispeech_clips")):
        write_chapter(real / name, 100 + n, 1, {0: ("HELLO THERE", 0.7), 1: ("ZERO", 0.5)})
    write_chapter(real / "speechocean762" / "train", 900, 1, {0: ("NEVER READ", 0.5)})
    return {"sample": sample, "unseen_root": unseen_root, "real": real}


def test_generalisation_bench_scores_every_set(micro_model_and_manifest, tmp_path, capsys):
    asr_generalisation = _bench_module()
    _, nemo_path, _, _ = micro_model_and_manifest
    sets = _tiny_sets(tmp_path)
    out = tmp_path / "out"
    rc = asr_generalisation.main(["--model", str(nemo_path), "--sample-test", str(sets["sample"]),
                                  "--unseen-root", str(sets["unseen_root"]), "--real-speech", str(sets["real"]),
                                  "--out-dir", str(out), "--workers", "1"])
    assert rc == 0
    report = json.loads((out / "generalisation.json").read_text())
    names = [r["set"] for r in report["rows"]]
    assert names == ["sample test-clean", "unseen voices", "speechocean762/test", "read_sentences", "common_voice",
                     "digits", "librispeech_clips"], "speechocean762/train must never be scored or read"
    assert [r["utterances"] for r in report["rows"]] == [2, 1, 2, 2, 2, 2, 2]
    for row in report["rows"]:  # a random model is wrong: errors are counted, not assumed
        assert row["wer"] > 0 and row["reference_words"] > 0
        utterances = out / f"{row['set'].replace(' ', '_').replace('/', '_')}_utterances.jsonl"
        assert utterances.is_file()
    table = capsys.readouterr().out
    assert "speechocean762/test" in table and "WER" in table and "CER" in table
    assert report["decoding"] == "greedy"


def test_generalisation_bench_scores_at_most_max_utterances_of_each_set(micro_model_and_manifest, tmp_path):
    asr_generalisation = _bench_module()
    _, nemo_path, _, _ = micro_model_and_manifest
    sets = _tiny_sets(tmp_path)
    out = tmp_path / "out"
    rc = asr_generalisation.main(["--model", str(nemo_path), "--sample-test", str(sets["sample"]),
                                  "--unseen-root", str(sets["unseen_root"]), "--no-real", "--max-utterances", "1",
                                  "--out-dir", str(out), "--workers", "1"])
    assert rc == 0
    rows = json.loads((out / "generalisation.json").read_text())["rows"]
    assert [(r["set"], r["utterances"]) for r in rows] == [("sample test-clean", 1), ("unseen voices", 1)]
    with pytest.raises(SystemExit):
        asr_generalisation.main(["--model", str(nemo_path), "--max-utterances", "0"])


def test_generalisation_bench_names_a_missing_real_folder(micro_model_and_manifest, tmp_path, capsys):
    asr_generalisation = _bench_module()
    _, nemo_path, _, _ = micro_model_and_manifest
    sets = _tiny_sets(tmp_path)
    missing = tmp_path / "no_such_folder"
    rc = asr_generalisation.main(["--model", str(nemo_path), "--sample-test", str(sets["sample"]),
                                  "--unseen-root", str(sets["unseen_root"]), "--real-speech", str(missing),
                                  "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == (f"asr_generalisation: error: real-speech folder not found: {missing} "
                                   "(give its path with --real-speech)")
    assert not (tmp_path / "out" / "generalisation.json").exists()
    shutil.rmtree(sets["real"] / "digits")
    rc = asr_generalisation.main(["--model", str(nemo_path), "--sample-test", str(sets["sample"]),
                                  "--unseen-root", str(sets["unseen_root"]), "--real-speech", str(sets["real"])])
    assert rc == 2 and "real-speech set 'digits' not found" in capsys.readouterr().err
