"""Train a new CTC head (and new adapter blocks) on a pretrained encoder's frozen outputs before fine-tuning.

A randomly initialised CTC head over a pretrained encoder spends hundreds of full training steps emitting only
blanks; on 2 CPU cores each of those steps pays for the encoder's forward and backward pass. Here the encoder's
pretrained layers run once per utterance (no augmentation, no gradient), their outputs are kept in memory as
float16, and what is new on top of them -- the ``WhisperEncoder``'s adapter blocks if it has any, and the head
(NeMo's own decoder module and CTC loss) -- is trained on them for thousands of cheap steps. Batches are neighbours
in the duration-sorted cache, so the adapter's attention pays for little padding. Fine-tuning then
starts from a head that already reads the encoder (linear probing before fine-tuning also keeps more of the
pretrained features than fine-tuning from a random head: Kumar et al., 2022, "Fine-Tuning can Distort Pretrained
Features and Underperform Out-of-Distribution").
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

import jiwer
import soundfile as sf
import torch

from duet.errors import AsrInputError
from duet.data.manifest import read_manifest
from duet.text import normalize_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartSettings:
    """How the head is trained on cached encoder outputs."""

    manifests: tuple[Path, ...]
    dev_manifest: Path | None = None  # scored before and after (greedy WER); never trained on
    steps: int = 2000
    lr: float = 3e-3  # peak of a one-cycle schedule (5 % warm-up, cosine decay)
    batch_utterances: int = 24
    seed: int = 0
    batch_seconds: float = 60.0  # audio per encoder forward while caching
    train_adapter: bool = True  # the encoder's adapter blocks learn too (False: they were trained before, keep them)


@dataclass
class CachedOutputs:
    """The frozen encoder's output per utterance ([T, D] float16) and its transcript."""

    outputs: list[torch.Tensor]
    texts: list[str]
    audio_seconds: float


def new_parameters(model, train_adapter: bool = True) -> list[torch.nn.Parameter]:
    """What the warm start trains: the head, and the encoder's adapter blocks where it has them and they are new."""
    adapter = model.encoder.adapter_parameters() if train_adapter else []
    return list(model.decoder.parameters()) + adapter


@dataclass(frozen=True)
class WarmStartReport:
    audio_seconds: float  # training audio whose encoder outputs were cached
    first_loss: float  # mean over the first 5 % of steps
    last_loss: float  # mean over the last 5 %
    dev_wer_before: float | None
    dev_wer_after: float | None
    elapsed_s: float


def _read_audio(entry: dict, sample_rate: int) -> torch.Tensor:
    path = entry["audio_filepath"]
    try:
        audio, rate = sf.read(path, dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as e:
        raise AsrInputError(f"{path}: cannot read audio ({e})") from None
    if rate != sample_rate:
        raise AsrInputError(f"{path}: {rate} Hz, the model reads {sample_rate} Hz")
    return torch.from_numpy(audio.mean(axis=1))


def cache_encoder_outputs(model, entries: list[dict], batch_seconds: float = 60.0, progress=None) -> CachedOutputs:
    """Run the model's preprocessor and the encoder's pretrained part (eval mode, no gradient) over every entry,
    shortest first."""
    entries = sorted(entries, key=lambda e: e["duration"])
    outputs: list[torch.Tensor] = []
    texts: list[str] = []
    seconds = 0.0
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        start = 0
        while start < len(entries):
            stop, batch_s = start, 0.0
            while stop < len(entries) and (stop == start or batch_s + entries[stop]["duration"] <= batch_seconds):
                batch_s += entries[stop]["duration"]
                stop += 1
            batch = entries[start:stop]
            audio = [_read_audio(e, model.cfg.sample_rate) for e in batch]
            lengths = torch.tensor([len(a) for a in audio])
            padded = torch.nn.utils.rnn.pad_sequence(audio, batch_first=True)
            features, feature_lengths = model.preprocessor(input_signal=padded, length=lengths)
            encoded, encoded_lengths = model.encoder.encode_pretrained(features, feature_lengths)
            for k, entry in enumerate(batch):
                outputs.append(encoded[k, : encoded_lengths[k]].to(torch.float16).clone())
                texts.append(entry["text"])
            seconds += batch_s
            start = stop
            if progress:
                progress(stop, len(entries))
    model.train(was_training)
    return CachedOutputs(outputs, texts, seconds)


def _batch(outputs: list[torch.Tensor], indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([outputs[i].shape[0] for i in indices])
    padded = torch.nn.utils.rnn.pad_sequence([outputs[i].float() for i in indices], batch_first=True)
    return padded, lengths  # [B, T, D]


def _log_probs(model, cached: list[torch.Tensor], indices: list[int],
               train_adapter: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The new part (adapter, then head) over cached frames: CTC log-probabilities [B, T, V] and lengths."""
    frames, lengths = _batch(cached, indices)
    with torch.set_grad_enabled(torch.is_grad_enabled() and train_adapter):  # a kept adapter costs no backward pass
        encoded = model.encoder.apply_adapter(frames, lengths).transpose(1, 2)  # [B, D, T] as NeMo's decoders read it
    return model.decoder(encoder_output=encoded), lengths


def greedy_wer(model, cached: CachedOutputs, batch_utterances: int = 32) -> float:
    """Word error rate of the head's greedy CTC transcripts (NeMo's decoding) against the cached texts."""
    hypotheses: list[str] = []
    was_training = model.decoder.training, model.encoder.adapter.training
    model.decoder.eval(), model.encoder.adapter.eval()
    with torch.inference_mode():
        for start in range(0, len(cached.outputs), batch_utterances):
            indices = list(range(start, min(start + batch_utterances, len(cached.outputs))))
            log_probs, lengths = _log_probs(model, cached.outputs, indices)
            hyps = model.decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=lengths)
            hypotheses += [h.text if hasattr(h, "text") else str(h) for h in hyps]
    model.decoder.train(was_training[0]), model.encoder.adapter.train(was_training[1])
    references = [normalize_text(t) for t in cached.texts]
    return jiwer.wer(references, [normalize_text(h) for h in hypotheses])


def train_head(model, cached: CachedOutputs, settings: WarmStartSettings, progress=None) -> tuple[float, float]:
    """Train the head (and adapter) with ``model.loss`` on the cached outputs; returns the first and last mean loss."""
    if not cached.outputs:
        raise AsrInputError("no utterances to warm the head on")
    generator = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    targets = [torch.tensor(model.tokenizer.text_to_ids(t), dtype=torch.long) for t in cached.texts]
    params = new_parameters(model, settings.train_adapter)
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=settings.lr, total_steps=settings.steps,
                                                   pct_start=0.05)
    window = max(1, settings.steps // 20)
    losses: list[float] = []
    model.decoder.train()
    model.encoder.adapter.train(settings.train_adapter)  # a kept adapter runs as at inference
    # the duration-sorted cache cut into batches of neighbours (little padding), each drawn as often as any other
    size = min(settings.batch_utterances, len(cached.outputs))
    batches = [list(range(first, min(first + size, len(cached.outputs)))) for first in range(0, len(cached.outputs), size)]
    for step in range(settings.steps):
        chosen = generator.choice(batches)
        log_probs, lengths = _log_probs(model, cached.outputs, chosen, settings.train_adapter)
        target = torch.nn.utils.rnn.pad_sequence([targets[i] for i in chosen], batch_first=True)
        target_lengths = torch.tensor([len(targets[i]) for i in chosen])
        loss = model.loss(log_probs=log_probs, targets=target, input_lengths=lengths, target_lengths=target_lengths)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if progress:
            progress(step + 1, settings.steps, sum(losses[-window:]) / len(losses[-window:]))
    return sum(losses[:window]) / window, sum(losses[-window:]) / window


def warm_start_head(model, settings: WarmStartSettings, progress=None) -> WarmStartReport:
    """Cache the frozen encoder's outputs on the manifests, train the head on them, score the dev manifest."""
    start = time.time()
    if settings.steps < 1:
        raise AsrInputError(f"warm-start steps must be >= 1, got {settings.steps}")
    entries = [e for path in settings.manifests for e in read_manifest(path)]
    cached = cache_encoder_outputs(model, entries, settings.batch_seconds,
                                   progress and (lambda done, total: progress("cache", done, total, None)))
    dev = None
    if settings.dev_manifest:
        dev = cache_encoder_outputs(model, read_manifest(settings.dev_manifest), settings.batch_seconds)
    before = greedy_wer(model, dev) if dev else None
    first, last = train_head(model, cached, settings,
                             progress and (lambda done, total, loss: progress("train", done, total, loss)))
    after = greedy_wer(model, dev) if dev else None
    return WarmStartReport(cached.audio_seconds, first, last, before, after, time.time() - start)
