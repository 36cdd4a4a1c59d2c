"""tools/adapt.py and duet/asr/adaptation.py: the carve, replay mixing, early stopping that keeps the best step (or
the base), and the one command end to end on the bundled sample's generated speech with a micro .nemo."""

import json
import random
import shutil

import pytest
import torch

from duet.asr import adaptation
from duet.asr.adaptation import AdaptationError, AdaptationSettings, carve, mix_replay
from tests.asr_helpers import REPO
from tests.script_helpers import load_script


def entries(n, prefix="u"):
    return [{"audio_filepath": f"/data/{prefix}{i:03d}.flac", "duration": 2.0, "text": f"word {i}"} for i in range(n)]


def test_the_carve_is_deterministic_disjoint_and_independent_of_order():
    items = entries(40)
    train, held = carve(items, 0.25, seed=3)
    assert len(held) == 10 and len(train) == 30
    paths = lambda part: {e["audio_filepath"] for e in part}  # noqa: E731
    assert not paths(train) & paths(held) and paths(train) | paths(held) == paths(items)
    shuffled = items[:]
    random.Random(0).shuffle(shuffled)
    train2, held2 = carve(shuffled, 0.25, seed=3)
    assert paths(held2) == paths(held) and paths(train2) == paths(train)
    assert paths(carve(items, 0.25, seed=4)[1]) != paths(held)  # the seed chooses another part
    assert [e for e in items if e in train] == train  # input order kept


def test_the_carve_keeps_two_on_each_side_and_refuses_too_little():
    train, held = carve(entries(5), 0.1)
    assert len(held) == 2 and len(train) == 3
    train, held = carve(entries(5), 0.9)
    assert len(train) == 2 and len(held) == 3
    with pytest.raises(AdaptationError, match="3 usable utterances"):
        carve(entries(3), 0.5)


def test_replay_makes_its_share_of_the_mix():
    own, replay = entries(30), entries(100, "r")
    mixed = mix_replay(own, replay, 0.25, seed=1)
    replayed = [e for e in mixed if "/r" in e["audio_filepath"]]
    assert mixed[:30] == own and len(replayed) == 10 and len(replayed) / len(mixed) == 0.25
    assert len({e["audio_filepath"] for e in replayed}) == 10  # no repeats while the replay lasts
    assert mix_replay(own, replay, 0.25, seed=1) == mixed
    assert mix_replay(own, replay, 0.0) == own
    small = mix_replay(own, entries(4, "r"), 0.5)  # 30 wanted from 4: each drawn again
    assert len(small) == 60


def test_settings_refuse_what_cannot_run(tmp_path):
    ok = AdaptationSettings(source=tmp_path, out=tmp_path / "out")
    for bad, message in (({"moving": "encoder"}, "--moving"), ({"held_out_share": 1.0}, "--held-out-share"),
                         ({"replay_share": 1.0}, "--replay-share"), ({"lr": 0.0}, "--lr"),
                         ({"source": tmp_path / "missing"}, "source: not found")):
        with pytest.raises(AdaptationError, match=message):
            AdaptationSettings(**{**ok.__dict__, **bad}).validate()


def scripted_validation(model, scores):
    """Make the model's validation log ``scores`` in turn as val_wer, snapshotting its weights at each one."""
    snapshots, pending = [], list(scores)

    def epoch_end(outputs, dataloader_idx=0):
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return {"log": {"val_wer": torch.tensor(pending.pop(0))}}

    model.multi_validation_epoch_end = epoch_end
    return snapshots


def same_weights(model, state):
    return all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


@pytest.fixture()
def micro(micro_model_and_manifest, tmp_path):
    """A fresh copy of the micro model (fine_tune changes it in place) and its 7-utterance manifest."""
    from duet.asr.inference import load_asr_model

    _, path, manifest, _ = micro_model_and_manifest
    return load_asr_model(path, device="cpu"), manifest


def test_early_stopping_hands_back_the_best_step_when_validation_worsens(micro, tmp_path):
    model, manifest = micro
    # the base scores 0.7; step 2 is the best (0.4); two worse validations stop the run at step 4
    snapshots = scripted_validation(model, [0.7, 0.8, 0.4, 0.6, 0.9, 0.95, 0.95])
    settings = AdaptationSettings(source=manifest, out=tmp_path, lr=1e-2, max_steps=20, validate_every=1,
                                  patience=2, batch_size=4, moving="all")
    result = adaptation.fine_tune(model, manifest, manifest, settings, tmp_path, say=lambda line: None)
    assert result.steps_run == 4 and result.best_step == 2
    assert (result.base_wer, result.best_wer) == (pytest.approx(0.7), pytest.approx(0.4))
    assert same_weights(result.model, snapshots[2])
    assert not same_weights(result.model, snapshots[0]) and not same_weights(result.model, snapshots[4])


def test_no_step_better_than_the_base_hands_back_the_base(micro, tmp_path):
    model, manifest = micro
    snapshots = scripted_validation(model, [0.3, 0.5, 0.4, 0.6, 0.7])
    settings = AdaptationSettings(source=manifest, out=tmp_path, lr=1e-2, max_steps=20, validate_every=1,
                                  patience=2, batch_size=4, moving="all")
    result = adaptation.fine_tune(model, manifest, manifest, settings, tmp_path, say=lambda line: None)
    assert result.best_step is None and result.best_wer == pytest.approx(0.3)
    assert same_weights(result.model, snapshots[0])  # the weights validated before training
    assert not (tmp_path / "checkpoints").exists()


def test_what_moves(micro):
    model, _ = micro
    total = sum(p.numel() for p in model.parameters())
    head = adaptation.set_moving_parameters(model, "head")
    assert {id(p) for p in head} == {id(p) for p in model.decoder.parameters()}
    assert all(p.requires_grad == (id(p) in {id(q) for q in head}) for p in model.parameters())
    block = adaptation.set_moving_parameters(model, "block")  # no added block: the encoder's last layer
    assert sum(p.numel() for p in head) < sum(p.numel() for p in block) < total
    assert len(adaptation.set_moving_parameters(model, "all")) == len(list(model.parameters()))


def test_the_command_adapts_a_folder_of_speech_end_to_end(micro_model_and_manifest, tmp_path, capsys):
    """The bundled sample's generated speech as the user's recordings, the micro .nemo as the pseudo-labeller (every
    transcript kept) and as the base, with a decoding.json of its own to pass on."""
    from duet.asr.inference import load_asr_model
    from tests.asr_helpers import sample_utterances

    _, micro_path, _, _ = micro_model_and_manifest
    base = tmp_path / "base" / "micro.nemo"
    base.parent.mkdir()
    shutil.copy(micro_path, base)
    (base.parent / "micro.decoding.json").write_text('{"strategy": "greedy", "min_confidence": 0.4}\n')
    recordings = tmp_path / "my_recordings"
    recordings.mkdir()
    for entry in sample_utterances(12):
        shutil.copy(entry["audio_filepath"], recordings)
    out = tmp_path / "mine"
    tool = load_script(REPO / "tools" / "adapt.py")
    code = tool.main([str(recordings), "--out", str(out), "--base", str(base), "--teacher", str(base),
                      "--min-confidence", "0", "--max-steps", "4", "--validate-every", "2", "--batch-size", "4",
                      "--lr", "1e-3"])
    assert code == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("adapt: held-out WER ") and str(out / "model.nemo") in summary
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["held_out_wer_after"] <= metrics["held_out_wer_before"]
    held = {e["audio_filepath"] for e in map(json.loads, (out / "held_out.json").read_text().splitlines())}
    train = {e["audio_filepath"] for e in map(json.loads, (out / "train.json").read_text().splitlines())}
    assert held and train and not held & train and metrics["held_out"] == len(held)
    assert json.loads((out / "decoding.json").read_text()) == {"strategy": "greedy", "min_confidence": 0.4}
    assert json.loads((out / "settings.json").read_text())["max_steps"] == 4
    log = (out / "adapt.log").read_text()
    assert summary in log and "  step 2: held-out WER " in log and "  step 4: held-out WER " in log
    assert load_asr_model(out / "model.nemo", device="cpu").cfg.decoder.num_classes > 0
    assert not list(out.glob("*.partial"))


def test_too_few_recordings_is_one_line(tmp_path, capsys):
    manifest = tmp_path / "three.json"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries(3)))
    code = load_script(REPO / "tools" / "adapt.py").main([str(manifest), "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("adapt: error: ") and "3 usable utterances" in err and len(err.splitlines()) == 1


def test_a_replay_share_without_a_manifest_replays_the_bundled_sample(tmp_path):
    settings = AdaptationSettings(source=tmp_path, out=tmp_path, replay_share=0.3)
    if not adaptation.SAMPLE_REPLAY.is_dir():
        pytest.skip("bundled sample missing")
    replay = adaptation.replay_entries(settings)
    assert replay and all(str(adaptation.SAMPLE_REPLAY) in e["audio_filepath"] for e in replay)


def test_a_folder_without_audio_is_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = load_script(REPO / "tools" / "adapt.py").main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")])
    assert code == 2 and "no audio files in folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
