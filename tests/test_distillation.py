"""Distillation in the CTC recipe (duet/asr/distillation.py): the teacher term, the frozen teacher, the config keys,
and a 1-layer student learning from a 1-layer teacher on generated audio."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo.collections.asr")

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from duet.asr import distillation, recipe  # noqa: E402
from duet.asr.distillation import DistillationError, DistillationSettings, TeacherTargets  # noqa: E402
from tests.asr_helpers import build_micro_model, compose_config, train_tokenizer, write_manifest  # noqa: E402
from tests.audio_fixtures import write_tone  # noqa: E402
from tests.script_helpers import load_script  # noqa: E402

TEXTS = ["turn on the light", "play some music", "what time is it", "set a timer", "call my mother", "stop"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Six generated utterances (tones with noise, 1-2 s) in a manifest, two tokenizers of their text, a 1-layer
    teacher saved as .nemo and the manifest: ``{"manifest", "tok", "other_tok", "teacher_nemo"}``."""
    root = tmp_path_factory.mktemp("distil")
    entries = []
    for i, text in enumerate(TEXTS):
        path = root / f"utt{i}.flac"
        n = write_tone(path, 1.0 + 0.2 * i)
        entries.append({"audio_filepath": str(path), "duration": n / 16000, "text": text})
    tok = train_tokenizer(TEXTS, root / "tok", 30)
    other_tok = train_tokenizer(TEXTS + ["another text makes another tokenizer"], root / "other_tok", 36)
    teacher = build_micro_model(tok, seed=3)
    teacher_nemo = root / "teacher.nemo"
    teacher.save_to(str(teacher_nemo))
    return {"manifest": write_manifest(root / "train.json", entries), "tok": tok, "other_tok": other_tok,
            "teacher_nemo": teacher_nemo}


def ctc():
    from nemo.collections.asr.losses.ctc import CTCLoss

    return CTCLoss(num_classes=4, zero_infinity=True, reduction="mean_volume")


def tiny_batch(seed: int = 0):
    torch.manual_seed(seed)
    log_probs = torch.randn(2, 12, 5).log_softmax(-1).requires_grad_()
    return dict(log_probs=log_probs, targets=torch.tensor([[1, 2, 3], [2, 2, 0]]), input_lengths=torch.tensor([12, 9]),
                target_lengths=torch.tensor([3, 2]))


# ---------------------------------------------------------------- the loss on tiny tensors


@pytest.mark.parametrize("kind", ["transcript", "posterior"])
def test_at_weight_zero_the_loss_is_plain_ctc_and_otherwise_adds_the_teacher_term(kind):
    batch = tiny_batch()
    plain = ctc()(**batch)
    if kind == "transcript":
        taught = TeacherTargets(kind, torch.tensor([[3, 1], [2, 0]]), torch.tensor([2, 1]))
    else:
        taught = TeacherTargets(kind, torch.randn(2, 12, 5).softmax(-1), torch.tensor([12, 9]))
    for weight in (0.0, 0.7):
        loss = distillation.TeacherCTCLoss(ctc(), weight=weight, temperature=2.0)
        assert torch.equal(loss(**batch), plain)  # nothing pending (validation): plain CTC
        loss.teacher_targets = taught
        total = loss(**batch)
        assert loss.last_teacher_term > 0
        assert torch.allclose(total, plain + weight * loss.last_teacher_term)
        if weight == 0.0:
            assert torch.equal(total, plain)


def test_the_transcript_term_is_ctc_on_the_teachers_tokens():
    batch = tiny_batch()
    loss = distillation.TeacherCTCLoss(ctc(), weight=1.0, temperature=1.0)
    loss.teacher_targets = TeacherTargets("transcript", torch.tensor([[3, 1], [2, 0]]), torch.tensor([2, 1]))
    loss(**batch)
    expected = ctc()(log_probs=batch["log_probs"], targets=torch.tensor([[3, 1], [2, 0]]),
                     input_lengths=batch["input_lengths"], target_lengths=torch.tensor([2, 1]))
    assert torch.allclose(loss.last_teacher_term, expected)


def test_the_posterior_term_is_zero_for_the_students_own_distribution_and_counts_only_valid_frames():
    batch = tiny_batch()
    own = TeacherTargets("posterior", batch["log_probs"].detach().exp(), batch["input_lengths"])
    assert distillation.posterior_kl(batch["log_probs"], batch["input_lengths"], own, 1.0).abs() < 1e-6
    # what lies past each utterance's end does not count
    noisy = own.values.clone()
    noisy[1, 9:] = torch.tensor([1.0, 0, 0, 0, 0])
    assert distillation.posterior_kl(batch["log_probs"], batch["input_lengths"],
                                     TeacherTargets("posterior", noisy, own.lengths), 1.0).abs() < 1e-6


def test_a_four_times_faster_teacher_is_averaged_over_each_student_frame():
    probs = torch.zeros(1, 10, 3)
    probs[0, :, 0] = 1.0
    probs[0, 1, :] = torch.tensor([0.0, 1.0, 0.0])  # one token spike in the first group of four
    pooled, lengths = distillation.resample_posteriors(probs, torch.tensor([10]), 4)
    assert lengths.tolist() == [3] and pooled.shape == (1, 3, 3)
    assert torch.allclose(pooled[0, 0], torch.tensor([0.75, 0.25, 0.0]))
    assert torch.allclose(pooled[0, 2], torch.tensor([1.0, 0.0, 0.0]))  # 2 real frames, not 2 of 4
    assert torch.allclose(pooled.sum(-1), torch.ones(1, 3))
    slower, slower_lengths = distillation.resample_posteriors(probs, torch.tensor([10]), -2)
    assert slower.shape == (1, 20, 3) and slower_lengths.tolist() == [20]
    assert (distillation.frame_ratio(50.0, 12.55), distillation.frame_ratio(12.5, 25.0),
            distillation.frame_ratio(50.0, 15.0)) == (4, -2, None)


def test_bad_settings_are_named():
    with pytest.raises(DistillationError, match="weight must be >= 0 and temperature > 0"):
        DistillationSettings(teacher="t.nemo", weight=-1)
    with pytest.raises(DistillationError, match="distillation.targets=frames: expected one of auto, transcript"):
        DistillationSettings(teacher="t.nemo", targets="frames")


# ---------------------------------------------------------------- the teacher: frozen, outside the student


def test_the_gradient_reaches_the_student_only_and_the_teacher_stays_frozen(generated):
    from duet.asr.inference import load_asr_model

    student, teacher = build_micro_model(generated["tok"], seed=1), load_asr_model(generated["teacher_nemo"], "cpu")
    teacher.train()  # as a careless caller might leave it: use_distillation must put it in eval mode
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student_keys = set(student.state_dict())
    trainer = type("Trainer", (), {"callbacks": []})()
    applied = distillation.use_distillation(student, trainer, teacher, DistillationSettings(
        teacher=str(generated["teacher_nemo"]), weight=1.0))
    assert applied["targets"] == "posterior" and applied["frame_ratio"] == 1  # same tokenizer, same encoder
    (callback,) = trainer.callbacks
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert set(student.state_dict()) == student_keys  # the teacher is not a part of the student
    signal, lengths = torch.randn(2, 16000) * 0.1, torch.tensor([16000, 12000])
    values, target_lengths = distillation.pad_rows(callback.targets_per_utterance(signal, lengths), "cpu")
    student.loss.teacher_targets = TeacherTargets("posterior", values, target_lengths)
    student.train()
    log_probs, encoded_len, _ = student.forward(input_signal=signal, input_signal_length=lengths)
    total = student.loss(log_probs=log_probs, targets=torch.tensor([[1, 2], [3, 0]]), input_lengths=encoded_len,
                         target_lengths=torch.tensor([2, 1]))
    total.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert student.encoder.layers[0].feed_forward1.linear1.weight.grad.abs().sum() > 0
    torch.optim.SGD(student.parameters(), lr=0.1).step()
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())
    assert not teacher.training


def test_cached_and_fresh_targets_share_a_batch(generated):
    """A batch mixing audio the cache holds (float16 posteriors) with new audio gets one float32 tensor, and the
    cached rows are what the teacher said of that audio."""
    from duet.asr.inference import load_asr_model

    student, teacher = build_micro_model(generated["tok"], seed=1), load_asr_model(generated["teacher_nemo"], "cpu")
    trainer = type("Trainer", (), {"callbacks": []})()
    distillation.use_distillation(student, trainer, teacher, DistillationSettings(
        teacher=str(generated["teacher_nemo"]), cache=True))
    (callback,) = trainer.callbacks
    torch.manual_seed(0)
    signal, lengths = torch.randn(2, 16000) * 0.1, torch.tensor([16000, 12000])
    first = callback.targets_per_utterance(signal[:1], lengths[:1])
    values, _ = distillation.pad_rows(callback.targets_per_utterance(signal, lengths), "cpu")
    assert values.dtype == torch.float32 and (callback.cache_hits, callback.cache_lookups) == (1, 3)
    assert torch.allclose(values[0, :len(first[0])], first[0], atol=1e-3)


def test_posteriors_between_different_vocabularies_are_refused_naming_both(generated):
    from duet.asr.inference import load_asr_model

    student, teacher = build_micro_model(generated["other_tok"], seed=1), load_asr_model(generated["teacher_nemo"], "cpu")
    settings = DistillationSettings(teacher=str(generated["teacher_nemo"]), targets="posterior")
    with pytest.raises(DistillationError, match=r"needs the teacher's vocabulary; .*teacher.nemo has 30 pieces, "
                                                r"the student 36"):
        distillation.use_distillation(student, type("Trainer", (), {"callbacks": []})(), teacher, settings)
    auto = distillation.use_distillation(student, type("Trainer", (), {"callbacks": []})(), teacher,
                                         DistillationSettings(teacher=settings.teacher))
    assert auto["targets"] == "transcript" and not auto["same_vocabulary"]


def test_the_config_refuses_a_teacher_whose_file_is_missing(generated, tmp_path):
    missing = tmp_path / "no_teacher.nemo"
    cfg = compose_config("fastconformer_tiny", [f"model.train_ds.manifest_filepath={generated['manifest']}",
                                                f"model.validation_ds.manifest_filepath={generated['manifest']}",
                                                f"model.tokenizer.dir={generated['tok']}",
                                                f"distillation.teacher={missing}"])
    with pytest.raises(recipe.RecipeError, match=rf"^distillation.teacher: file not found: {missing}$"):
        recipe.check_inputs(cfg)
    cfg.distillation.targets = "frames"
    with pytest.raises(DistillationError, match="distillation.targets=frames"):
        recipe.check_inputs(cfg)
    assert compose_config("fastconformer_tiny", []).distillation.teacher is None  # off by default


# ---------------------------------------------------------------- learning from the teacher


class TeacherTermLog(pl.Callback):
    def __init__(self, loss):
        self.loss, self.terms = loss, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.terms.append(float(self.loss.last_teacher_term))


@pytest.mark.parametrize("student_tok, targets", [("tok", "posterior"), ("other_tok", "transcript")])
def test_a_one_layer_student_learns_from_a_one_layer_teacher(generated, student_tok, targets):
    cfg = compose_config("fastconformer_tiny", [
        f"model.train_ds.manifest_filepath={generated['manifest']}", "model.train_ds.batch_size=3",
        "model.train_ds.num_workers=0", "model.train_ds.use_semi_sorted_batching=false",
        f"distillation.teacher={generated['teacher_nemo']}", "distillation.weight=1.0",
        f"distillation.targets={targets}", "distillation.cache=true",
        "model.spec_augment.freq_masks=0", "model.spec_augment.time_masks=0",
        "asr_optim=finetune", "model.optim.lr=1e-2", "model.optim.sched.warmup_ratio=0.0"])
    student = build_micro_model(generated[student_tok], seed=1)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=24, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1)
    student.set_trainer(trainer)
    recipe.setup_data_and_training(student, OmegaConf.merge(cfg.model, {"validation_ds": {"manifest_filepath": None}}))
    student_keys = set(student.state_dict())
    applied = recipe.use_teacher(student, trainer, cfg.distillation)
    assert applied["targets"] == targets
    terms = TeacherTermLog(student.loss)
    trainer.callbacks.append(terms)
    trainer.fit(student)
    assert len(terms.terms) == 24
    first, last = sum(terms.terms[:4]) / 4, sum(terms.terms[-4:]) / 4
    assert last < 0.7 * first, terms.terms
    cache_callback = next(c for c in trainer.callbacks if isinstance(c, distillation.TeacherCallback))
    assert len(cache_callback.cache) == len(TEXTS) and cache_callback.cache_hits == 24 * 3 - len(TEXTS)
    # after fit the student is itself again: plain CTC loss, no teacher weights in what it saves
    assert type(student.loss).__name__ == "CTCLoss" and set(student.state_dict()) == student_keys


# ---------------------------------------------------------------- bench/distillation_ab.py


def test_the_ab_bench_gives_both_arms_one_config_but_the_teacher(repo_root, tmp_path):
    """What bench/distillation_ab.py passes the recipe: the same student, steps and data for both arms (its --train
    manifests as the Lhotse sources with their shares), only distillation.teacher differs."""
    bench = load_script(repo_root / "bench" / "distillation_ab.py")
    train = [tmp_path / "a.json", tmp_path / "b.json"]
    args = bench.get_parser().parse_args(["--steps", "7", "--train", *map(str, train), "--train-weights", "0.7", "0.3",
                                          "--out", str(tmp_path / "ab"), "--", "distillation.weight=1.0"])
    common = bench.train_overrides(args)
    config_name = common[0].split("=", 1)[1]
    cfg = compose_config(config_name, common[1:] + ["name=x", "distillation.teacher=null"])
    with_teacher = compose_config(config_name, common[1:] + ["name=x", f"distillation.teacher={args.teacher}"])
    arms = [OmegaConf.to_container(c, resolve=True) for c in (cfg, with_teacher)]
    assert arms[1]["distillation"].pop("teacher") == str(args.teacher) and arms[0]["distillation"].pop("teacher") is None
    assert arms[0] == arms[1]  # nothing else differs between the arms
    sources = [(s.manifest_filepath, s.weight) for s in cfg.model.train_ds.input_cfg]
    assert sources == [(str(train[0]), 0.7), (str(train[1]), 0.3)]
    assert (cfg.trainer.max_steps, cfg.distillation.weight, cfg.init_from_nemo_model) == (7, 1.0, str(args.student))
    assert cfg.distillation.teacher is None
