"""Transcribing a manifest holds a few batches of audio, never the whole list (issue 19 item 13): a fake CTC
model and a synthetic 200-file manifest, fast."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile
import torch

from duet.asr import inference


class EchoCtc(torch.nn.Module):
    """Stands in for a NeMo CTC model: its "transcript" of a row is the row's sum, padded width and length, so
    equal transcripts mean equal audio, equal batches and equal order."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.cfg = SimpleNamespace(sample_rate=16000)

    def forward(self, input_signal, input_signal_length):
        # "log-probs" with one label: the padded batch's audio itself
        return input_signal[:, :, None], input_signal_length, None


class EchoDecoder:
    """Stands in for a decoder (duet.asr.decoding.CtcDecoder): a row's text is its sum, padded width and length."""

    forkable, reads_audio = True, False

    def texts(self, log_probs, lengths, audios=None):
        return [f"{float(row.sum()):.5f}/{log_probs.shape[1]}/{int(n)}" for row, n in zip(log_probs, lengths)]


@pytest.fixture(scope="module")
def manifest_audio(tmp_path_factory) -> list[str]:
    """200 short noise clips of 60 lengths (ties included); every tenth at 8 kHz, resampled when read."""
    folder = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(200):
        rate = 8000 if i % 10 == 0 else 16000
        path = folder / f"{i:03d}.wav"
        soundfile.write(path, rng.uniform(-0.5, 0.5, rate * (20 + i % 60) // 100).astype(np.float32), rate)
        paths.append(str(path))
    return paths


def test_audio_is_read_per_batch_and_the_transcripts_are_the_old_ones(manifest_audio, monkeypatch):
    model = EchoCtc()
    # the old path: every file read first, then transcribed from memory
    everything = [inference.load_audio(path, 16000) for path in manifest_audio]
    assert [inference.audio_length(path, 16000) for path in manifest_audio] == [len(a) for a in everything]
    expected = inference.transcribe_audio(model, everything, batch_size=4, workers=1, decoder=EchoDecoder())
    del everything

    held, peak = [0], [0]

    def counting_load_audio(path, sample_rate):
        audio = inference.load_audio.__wrapped__(path, sample_rate)
        held[0] += 1
        peak[0] = max(peak[0], held[0])
        weakref.finalize(audio, lambda: held.__setitem__(0, held[0] - 1))
        return audio

    counting_load_audio.__wrapped__ = inference.load_audio
    monkeypatch.setattr(inference, "load_audio", counting_load_audio)
    texts = inference.transcribe_files(model, manifest_audio, batch_size=4, workers=1, decoder=EchoDecoder())
    assert texts == expected
    assert peak[0] <= 2 * 4, f"{peak[0]} clips held at once; the decoded batch and the one read ahead are 8"
    assert held[0] == 0
