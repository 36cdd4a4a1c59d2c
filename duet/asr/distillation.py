"""Knowledge distillation for the CTC recipe: a frozen teacher model's term added to NeMo's CTC loss.

The recipe (``distillation.teacher=<.nemo>`` in ``nemo_recipes/finetune_ctc.py``) replaces the student's
``model.loss`` by :class:`TeacherCTCLoss` for the length of ``fit`` and adds the :class:`TeacherCallback`, which
runs the teacher on every training batch (the same augmented audio the student hears) before NeMo's
``training_step``. The training loss becomes ``CTC(reference) + weight x teacher term``; validation and test
losses stay plain CTC (no teacher targets are pending there), so ``val_loss`` compares with runs without a teacher.

What the teacher term is depends on how teacher and student differ (``targets``):

* ``transcript`` -- sequence-level distillation: the teacher's greedy transcript of each utterance, re-tokenized
  with the student's tokenizer, is a second CTC target for the student's output (same CTC loss, same
  reduction). Works whatever the two vocabularies and frame rates are.
* ``posterior`` -- frame-level distillation: KL(teacher || student) of the per-frame token posteriors, both
  softened by ``temperature`` and scaled by its square (Hinton et al.), averaged over the student's frames.
  Needs the same vocabulary (same pieces in the same order). When the teacher has ``k`` times the student's frame
  rate (``k`` a whole number, e.g. a Whisper encoder's 50 frames/s over FastConformer's 12.5), each student frame's
  target is the mean of the teacher's ``k`` distributions over the same 1/12.5 s; a slower teacher's frames are
  repeated. A non-integer ratio is refused.
* ``auto`` -- ``posterior`` where it applies, else ``transcript``.

The teacher is restored on its own, kept in eval mode with ``requires_grad`` off and run under ``no_grad``; it is
an attribute of the callback, never of the student, so it is in neither the student's ``.nemo`` nor Lightning's
checkpoints. ``cache`` keeps the teacher's targets per utterance, keyed by the utterance's audio samples: a batch
that repeats an utterance's exact audio (an epoch without augmentation) skips the teacher for it; audio the
loader augmented on the fly is new every time, so the cache then only costs memory (the hit rate is logged).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from duet.asr.decoding.nemo_decoding import hypothesis_text
from duet.errors import DuetError

log = logging.getLogger(__name__)

TARGET_KINDS = ("auto", "transcript", "posterior")


class DistillationError(DuetError, ValueError):
    """A teacher that cannot teach this student (vocabulary, frame rate, sample rate); the message names why."""


@dataclass(frozen=True)
class DistillationSettings:
    """The recipe's ``distillation`` keys (configs/ctc_base.yaml)."""

    teacher: str | None
    weight: float = 0.5
    temperature: float = 1.0
    targets: str = "auto"
    cache: bool = False

    def __post_init__(self):
        if self.weight < 0 or self.temperature <= 0:
            raise DistillationError(f"distillation: weight must be >= 0 and temperature > 0, got {self.weight}, "
                                    f"{self.temperature}")
        if self.targets not in TARGET_KINDS:
            raise DistillationError(f"distillation.targets={self.targets}: expected one of {', '.join(TARGET_KINDS)}")


@dataclass
class TeacherTargets:
    """What the teacher says about one batch: token ids to use as a CTC target (``kind`` transcript) or per-frame
    probabilities at the student's frame rate (``kind`` posterior), padded, with each row's length."""

    kind: str
    values: torch.Tensor  # transcript: [B, U] token ids; posterior: [B, T, V] probabilities
    lengths: torch.Tensor  # [B]


def same_vocabulary(teacher, student) -> bool:
    return list(teacher.tokenizer.vocab) == list(student.tokenizer.vocab)


@torch.no_grad()
def frames_per_second(model, sample_rate: int) -> float:
    """The model's CTC output frame rate, read from its encoder's output length for 20 s of silence."""
    seconds = 20
    signal = torch.zeros(1, seconds * sample_rate, device=next(model.parameters()).device)
    length = torch.tensor([signal.shape[1]], device=signal.device)
    was_training = model.training
    model.eval()
    try:
        _, encoded_len, _ = model.forward(input_signal=signal, input_signal_length=length)
    finally:
        model.train(was_training)
    return float(encoded_len[0]) / seconds


def frame_ratio(teacher_fps: float, student_fps: float) -> int | None:
    """Teacher frames per student frame as a whole number (negative: student frames per teacher frame); None when
    neither rate is a whole multiple of the other (within 2 %: encoders round an utterance's length by a frame)."""
    ratio, sign = (teacher_fps / student_fps, 1) if teacher_fps >= student_fps else (student_fps / teacher_fps, -1)
    if abs(ratio - round(ratio)) > 0.02 * ratio:
        return None
    return 1 if round(ratio) == 1 else sign * round(ratio)


def resample_posteriors(probs: torch.Tensor, lengths: torch.Tensor, ratio: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher probabilities ``[B, T, V]`` at the student's frame rate: the mean of each ``ratio`` consecutive frames
    (``ratio`` > 1: a faster teacher; a last partial group is averaged over the frames it has), or each frame
    repeated ``-ratio`` times (a slower teacher)."""
    if ratio == 1:
        return probs, lengths
    if ratio < 0:
        return probs.repeat_interleave(-ratio, dim=1), lengths * -ratio
    batch, frames, vocab = probs.shape
    mask = (torch.arange(frames, device=probs.device)[None, :] < lengths[:, None]).to(probs.dtype)
    groups = -(-frames // ratio)
    pad = groups * ratio - frames
    summed = F.pad(probs * mask[..., None], (0, 0, 0, pad)).view(batch, groups, ratio, vocab).sum(dim=2)
    counts = F.pad(mask, (0, pad)).view(batch, groups, ratio).sum(dim=2)
    return summed / counts.clamp(min=1)[..., None], -(-lengths // ratio)


def posterior_kl(student_log_probs: torch.Tensor, student_lengths: torch.Tensor, targets: TeacherTargets,
                 temperature: float) -> torch.Tensor:
    """Mean over the student's frames of KL(teacher || student), both at ``temperature``, times its square.

    Only frames that both sides have count (the two encoders may round an utterance's length apart by a frame).
    """
    frames = min(student_log_probs.shape[1], targets.values.shape[1])
    valid = torch.minimum(student_lengths, targets.lengths)
    mask = torch.arange(frames, device=student_log_probs.device)[None, :] < valid[:, None]
    student = F.log_softmax(student_log_probs[:, :frames].float() / temperature, dim=-1)
    teacher = targets.values[:, :frames].float()
    per_frame = (teacher * (teacher.clamp(min=1e-10).log() - student)).sum(dim=-1)
    return (per_frame * mask).sum() / mask.sum().clamp(min=1) * temperature ** 2


class TeacherCTCLoss(nn.Module):
    """NeMo's CTC loss plus ``weight`` x the teacher term of the batch whose ``teacher_targets`` are set.

    Called like NeMo's ``CTCLoss`` (keyword arguments), so NeMo's own ``training_step`` uses it unchanged. With no
    targets pending (validation, test) it is exactly the wrapped CTC loss. ``last_teacher_term`` keeps the term of
    the last call, detached, for logging.
    """

    def __init__(self, ctc: nn.Module, weight: float, temperature: float):
        super().__init__()
        self.ctc, self.weight, self.temperature = ctc, weight, temperature
        self.teacher_targets: TeacherTargets | None = None
        self.last_teacher_term: torch.Tensor | None = None

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        loss = self.ctc(log_probs=log_probs, targets=targets, input_lengths=input_lengths, target_lengths=target_lengths)
        taught = self.teacher_targets
        if taught is None:
            return loss
        if taught.kind == "transcript":
            term = self.ctc(log_probs=log_probs, targets=taught.values, input_lengths=input_lengths,
                            target_lengths=taught.lengths)
        else:
            term = posterior_kl(log_probs, input_lengths, taught, self.temperature)
        self.last_teacher_term = term.detach()
        return loss + self.weight * term


def pad_rows(rows: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths (first dimension) as one zero-padded tensor, at least one wide (a batch whose
    transcripts are all empty is still a valid CTC target), and their lengths."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long, device=device)
    padded = nn.utils.rnn.pad_sequence(rows, batch_first=True)
    if padded.shape[1] == 0:
        padded = padded.new_zeros(len(rows), 1, *padded.shape[2:])
    return padded.to(device), lengths


class TeacherCallback(pl.Callback):
    """Runs the teacher on each training batch and hands its targets to the student's :class:`TeacherCTCLoss`.

    Installed by :func:`use_distillation`; at the end of ``fit`` it puts the student's plain CTC loss back, so the
    saved ``.nemo`` and any later evaluation see the student alone.
    """

    def __init__(self, teacher, loss: TeacherCTCLoss, student_tokenizer, settings: DistillationSettings, kind: str,
                 ratio: int | None):
        self.teacher, self.loss, self.student_tokenizer = teacher, loss, student_tokenizer
        self.settings, self.kind, self.ratio = settings, kind, ratio
        self.cache: dict[bytes, torch.Tensor] = {}
        self.cache_hits = self.cache_lookups = 0
        self.teacher_seconds = 0.0

    def on_fit_start(self, trainer, pl_module):
        self.teacher.to(pl_module.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        signal, signal_len = batch[0], batch[1]
        start = time.perf_counter()
        with trainer.strategy.precision_plugin.forward_context():
            rows = self.targets_per_utterance(signal, signal_len)
        values, lengths = pad_rows(rows, signal.device)
        self.loss.teacher_targets = TeacherTargets(self.kind, values, lengths)
        self.teacher_seconds = time.perf_counter() - start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.loss.teacher_targets = None
        if self.loss.last_teacher_term is not None:
            pl_module.log("train_teacher_term", self.loss.last_teacher_term, on_step=True, on_epoch=True)
        # what the teacher (or the cache) cost this step: the price of distillation in training time
        pl_module.log("train_teacher_seconds", self.teacher_seconds, on_step=True)
        if self.settings.cache and self.cache_lookups:
            pl_module.log("teacher_cache_hit_rate", self.cache_hits / self.cache_lookups, on_step=True)

    def on_fit_end(self, trainer, pl_module):
        pl_module.loss = self.loss.ctc
        self.teacher.to("cpu")

    def targets_per_utterance(self, signal: torch.Tensor, signal_len: torch.Tensor) -> list[torch.Tensor]:
        """The teacher's target for each utterance of the batch (from the cache where it holds that audio)."""
        keys = [hashlib.blake2b(signal[i, :n].detach().cpu().numpy().tobytes(), digest_size=16).digest()
                for i, n in enumerate(signal_len.tolist())] if self.settings.cache else [None] * len(signal)
        rows: list[torch.Tensor | None] = [self.cache.get(k) if k is not None else None for k in keys]
        missing = [i for i, row in enumerate(rows) if row is None]
        if self.settings.cache:
            self.cache_lookups += len(rows)
            self.cache_hits += len(rows) - len(missing)
        if missing:
            index = torch.tensor(missing, device=signal.device)
            lengths = signal_len[index]
            fresh = self.run_teacher(signal[index, : int(lengths.max())], lengths)
            for i, row in zip(missing, fresh):
                rows[i] = row
                if keys[i] is not None:
                    self.cache[keys[i]] = row.cpu() if self.kind == "transcript" else row.half().cpu()
        # posteriors are cached in float16 (half the memory): back to float32 beside the rows computed just now
        dtype = torch.long if self.kind == "transcript" else torch.float32
        return [row.to(signal.device, dtype) for row in rows]

    @torch.no_grad()
    def run_teacher(self, signal: torch.Tensor, signal_len: torch.Tensor) -> list[torch.Tensor]:
        log_probs, encoded_len, _ = self.teacher.forward(input_signal=signal, input_signal_length=signal_len)
        if self.kind == "transcript":
            hypotheses = self.teacher.decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=encoded_len)
            return [torch.tensor(self.student_tokenizer.text_to_ids(hypothesis_text(h)), dtype=torch.long)
                    for h in hypotheses]
        probs = F.softmax(log_probs.float() / self.settings.temperature, dim=-1)
        probs, lengths = resample_posteriors(probs, encoded_len, self.ratio)
        return [probs[i, :n] for i, n in enumerate(lengths.tolist())]


def choose_targets(teacher, student, settings: DistillationSettings, sample_rate: int) -> tuple[str, int | None, dict]:
    """``(kind, frame ratio, facts)`` for this pair: which term :class:`TeacherCTCLoss` adds, the teacher frames per
    student frame (posteriors only) and what decided it (for the run summary). Posteriors asked for where they
    cannot apply are a :class:`DistillationError` naming why."""
    facts = {"teacher_pieces": teacher.tokenizer.vocab_size, "student_pieces": student.tokenizer.vocab_size,
             "same_vocabulary": same_vocabulary(teacher, student),
             "teacher_frames_per_second": frames_per_second(teacher, sample_rate),
             "student_frames_per_second": frames_per_second(student, sample_rate)}
    ratio = frame_ratio(facts["teacher_frames_per_second"], facts["student_frames_per_second"])
    if settings.targets == "posterior":
        if not facts["same_vocabulary"]:
            raise DistillationError(f"distillation.targets=posterior needs the teacher's vocabulary; {settings.teacher} "
                                    f"has {facts['teacher_pieces']} pieces, the student {facts['student_pieces']} "
                                    "(or another order): use targets=transcript")
        if ratio is None:
            raise DistillationError(f"distillation.targets=posterior: the teacher's {facts['teacher_frames_per_second']:g} "
                                    f"frames/s and the student's {facts['student_frames_per_second']:g} are not whole "
                                    "multiples of each other: use targets=transcript")
    posterior = settings.targets == "posterior" or (settings.targets == "auto" and facts["same_vocabulary"]
                                                     and ratio is not None)
    return ("posterior", ratio, facts) if posterior else ("transcript", None, facts)


def use_distillation(student, trainer, teacher, settings: DistillationSettings) -> dict:
    """Freeze ``teacher``, wrap the student's CTC loss and add the :class:`TeacherCallback` to ``trainer``; returns
    what was applied (for the run summary). Call after the student's vocabulary is final (``change_vocabulary``
    rebuilds ``model.loss``)."""
    sample_rate = student.cfg.get("sample_rate")
    if teacher.cfg.get("sample_rate") != sample_rate:
        raise DistillationError(f"distillation.teacher={settings.teacher} hears {teacher.cfg.get('sample_rate')} Hz "
                                f"audio, the student {sample_rate} Hz")
    teacher.eval()
    teacher.requires_grad_(False)
    kind, ratio, facts = choose_targets(teacher, student, settings, sample_rate)
    student.loss = TeacherCTCLoss(student.loss, settings.weight, settings.temperature)
    trainer.callbacks.append(TeacherCallback(teacher, student.loss, student.tokenizer, settings, kind, ratio))
    log.info("Distillation from %s: %s targets, weight %g%s", settings.teacher, kind, settings.weight,
             f", temperature {settings.temperature:g}, {ratio} teacher frames per student frame" if kind == "posterior"
             else " (the teacher's greedy transcripts, re-tokenized with the student's tokenizer)")
    return {"teacher": settings.teacher, "targets": kind, "weight": settings.weight,
            "temperature": settings.temperature, "frame_ratio": ratio, "cache": settings.cache, **facts}
