"""Transcribe audio with a NeMo CTC model: load a ``.nemo``, read audio, quantise, batch, decode.

The transcription path is ours, not ``model.transcribe()``: utterances are sorted by duration so each
batch carries little padding, the forward pass runs under ``torch.inference_mode``, and on CPU the
convolution front end runs channels-last two utterances at a time (``set_front_end_chunking``), whole
batches go to one-thread worker processes (``cpu_workers``) instead of splitting every small operation
between threads, and the Linear layers can be quantised to int8 (``quantize_linear_int8``).
Everything else — features, encoder, CTC decoding (the ``decoder`` a caller passes, built by
``duet.asr.decoding``; greedy when none is) — is NeMo's own code; where the decoder rescores the beam's n-best with
the audio (``CtcDecoder.reads_audio``), each batch's audio goes to it beside its log-probabilities. An ONNX
export (``duet.asr.onnx_engine``) goes through the same batching, its whole batches shared among ``workers``
threads of this process, each running a one-thread ONNX Runtime session (smaller batches where each thread would
get fewer than ``BATCHES_PER_THREAD``); one batch, or ``workers`` 1, runs on the engine's own session (torch's
thread count of intra-op threads).
Scoring the transcripts: ``duet.asr.scoring``.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import tarfile
import warnings
from dataclasses import dataclass
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, as_completed, wait
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import soundfile as sf
import torch
from tqdm import tqdm

from duet.asr.batching import OfflineBatching, check_workers
from duet.asr.decoding.decoder import CtcDecoder
from duet.asr.decoding.greedy import greedy_decoder
from duet.asr.words import TimedTranscript
from duet.errors import AsrInputError
from duet.foundation.errors import first_line
from duet.io import read_mono

__all__ = ["AsrInputError", "CachedLogProbs", "audio_length", "check_workers", "compute_log_probs", "cpu_budget",
           "cpu_workers", "decode_log_probs", "decoding_processes", "load_asr_model", "load_audio", "pad_batch",
           "quantize_linear_int8", "set_front_end_chunking", "transcribe_audio", "transcribe_files",
           "transcribe_files_with_words", "transcribe_with_words"]

#: Turns one padded batch's CTC log-probabilities ``(log_probs [B, T, V], lengths [B], audios)`` into one result per
#: utterance (picklable: forked workers send them back): a decoder's texts, or its transcripts with word times.
BatchDecode = Callable[["torch.Tensor", "torch.Tensor", "Sequence[np.ndarray]"], list]

#: An exported engine's decoding threads get at least this many batches each (smaller batches where needed), so
#: that they finish together: the last batch of one is otherwise the other's idle time.
BATCHES_PER_THREAD = 4


def load_asr_model(path_or_name: str | Path, device: str | None = None):
    """Load an ``EncDecCTCModelBPE`` (or any NeMo ASR model) from a ``.nemo`` file, in eval mode."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import ASRModel

    path = Path(path_or_name)
    if not path.is_file():
        raise AsrInputError(f"model file not found: {path}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model = ASRModel.restore_from(str(path), map_location=torch.device(device))
    # not a tar archive, one without model_config.yaml, or truncated weights (torch's reader raises RuntimeError)
    except (tarfile.TarError, FileNotFoundError, RuntimeError) as e:
        raise AsrInputError(f"{path}: cannot load it as a NeMo .nemo checkpoint ({first_line(e)})") from e
    model.eval()
    return model


def quantize_linear_int8(model):
    """Dynamic int8 quantisation of every ``nn.Linear`` (weights int8, activations quantised per batch).

    CPU only. In place; returns the model. Costs a little accuracy (measure it with ``duet.asr.evaluation.evaluate_manifest``).
    """
    with warnings.catch_warnings():
        # torch marks torch.ao.quantization deprecated in favour of torchao, which is not installed here.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    return model


def load_audio(path: str | Path, sample_rate: int) -> np.ndarray:
    """Read an audio file as mono float32 at ``sample_rate`` (resampled with librosa when it differs)."""
    try:
        return read_mono(str(path), sample_rate)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise AsrInputError(f"cannot read audio {path}: {e}") from None


#: Utterances per chunk of the convolution front end on CPU (:func:`set_front_end_chunking`).
CPU_FRONT_END_CHUNK = 2


def set_front_end_chunking(model, batch_size: int | None) -> None:
    """Run the subsampling convolutions ``CPU_FRONT_END_CHUNK`` utterances at a time (None: the model's setting).

    Uses NeMo's own ``subsampling_conv_chunking_factor`` (meant against running out of GPU memory): on
    CPU the front end's 256-channel maps are memory-bound and run much faster in chunks that stay in
    cache, while the encoder layers still see the whole batch (bench/asr_speed.py).
    """
    encoder = getattr(model, "encoder", None)
    if not hasattr(encoder, "change_subsampling_conv_chunking_factor"):
        return
    if batch_size is None:
        factor = model.cfg.encoder.get("subsampling_conv_chunking_factor", 1)
    else:
        # NeMo takes 1 (no chunks) or an even factor, and cuts the batch into chunks of batch // factor.
        factor = max(1, batch_size // CPU_FRONT_END_CHUNK // 2 * 2)
    encoder.change_subsampling_conv_chunking_factor(factor)


def audio_length(path: str | Path, sample_rate: int) -> int:
    """Samples :func:`load_audio` will return for ``path``, from the file's header (no decoding)."""
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise AsrInputError(f"cannot read audio {path}: {e}") from None
    if info.samplerate == sample_rate:
        return info.frames
    return int(np.ceil(info.frames * (float(sample_rate) / info.samplerate)))  # librosa.resample's own formula


def transcribe_files(model, paths: Sequence[str | Path], batch_size: int = OfflineBatching.batch_size, progress: bool = False,
                     workers: int | None = None, decoder: CtcDecoder | None = None, words: bool = False) -> list:
    """CTC transcripts of ``paths``, in input order, by ``decoder`` (``duet.asr.decoding.build_decoder``; greedy when
    None); with ``words``, :class:`~duet.asr.words.TimedTranscript` s with word times and confidences.

    Files are decoded longest first in batches of ``batch_size`` (an exported engine's threads: at most that),
    so padding stays small and the largest batch (the one that would run out of memory) comes first. Lengths come from the file headers and
    each batch's audio is read when the batch is decoded, so memory holds a few batches, never the whole list
    (a train-clean-100 manifest is ~23 GB of float32 audio). Reading: ``workers`` (default :func:`cpu_workers`)
    threads a batch ahead of decoding on one process, or each decoding process reading its own batches
    (:func:`transcribe_audio`).
    """
    check_workers(workers)
    sample_rate = int(model.cfg.sample_rate)
    paths = list(paths)
    lengths = [audio_length(path, sample_rate) for path in paths]
    decoder = decoder or greedy_decoder(model)
    return _transcribe(model, lengths, lambda index: load_audio(paths[index], sample_rate), batch_size, progress,
                       workers, readers=cpu_workers() if workers is None else workers,
                       decode=batch_decode(decoder, words), forkable=decoder.forkable, keep_audio=decoder.reads_audio)


def transcribe_files_with_words(model, paths: Sequence[str | Path], batch_size: int = OfflineBatching.batch_size,
                                progress: bool = False, workers: int | None = None,
                                decoder: CtcDecoder | None = None) -> list[TimedTranscript]:
    """:func:`transcribe_files` with word times and confidences."""
    return transcribe_files(model, paths, batch_size, progress, workers, decoder, words=True)


def batch_decode(decoder: CtcDecoder, words: bool) -> BatchDecode:
    """What each batch's log-probabilities become: ``decoder``'s texts, or (``words``) its timed transcripts."""
    if words:
        return lambda log_probs, lengths, audios: decoder.decode(log_probs, lengths, audios, words=True)
    return decoder.texts


def cpu_workers() -> int:
    """Default ``workers``: the decoding processes of :func:`transcribe_audio` on CPU (one torch thread
    each) and the file-reading threads of :func:`transcribe_files`.

    ``torch.get_num_threads()`` is what the user allowed (all physical cores unless ``OMP_NUM_THREADS`` or
    ``torch.set_num_threads`` said otherwise), so the budget stays the same; it is just spent on whole
    batches instead of splitting every small matrix product between threads. While a process group is
    up (a caller scoring inside a DDP run) there is one: the other ranks already use the cores. (The
    recipe itself scores outside the process group, before ``fit`` and after ``leave_distributed``.)
    """
    if "fork" not in mp.get_all_start_methods():  # workers inherit the loaded model; without fork, reload it
        return 1
    return cpu_budget()


def cpu_budget() -> int:
    """The CPU threads transcription may keep busy: ``torch.get_num_threads()``, or 1 while a process group is up
    (see :func:`cpu_workers`). An exported engine's default decoding threads."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return 1
    return max(1, torch.get_num_threads())


def decoding_processes(n_batches: int, workers: int | None = None) -> int:
    """Processes :func:`transcribe_audio` decodes ``n_batches`` CPU batches with: ``workers`` (default
    :func:`cpu_workers`), never more than there are batches; 1 means in the calling process."""
    return max(1, min(cpu_workers() if workers is None else workers, n_batches))


def transcribe_audio(model, audios: Sequence[np.ndarray], batch_size: int = OfflineBatching.batch_size, progress: bool = False,
                     workers: int | None = None, decoder: CtcDecoder | None = None, words: bool = False) -> list:
    """CTC transcripts (by ``decoder``, greedy when None; with ``words``, timed transcripts) of mono float32 arrays at
    the model's sample rate, in input order.

    Same batching as :func:`transcribe_files`; for audio already in memory (e.g. chunks of a long file).
    On CPU, with more than one batch, ``workers`` forked processes (default :func:`cpu_workers`) decode
    whole batches at one torch thread each; the transcripts are the same as with one process. An exported
    engine's batches go to ``workers`` threads instead (default :func:`cpu_budget`), each running a one-thread
    session, in smaller batches where needed (see the module docstring). A worker
    that dies (e.g. killed for memory) is an error here, not a hang. The model leaves in the default
    (contiguous) layout and its previous train/eval mode.
    """
    check_workers(workers)
    decoder = decoder or greedy_decoder(model)
    return _transcribe(model, [len(a) for a in audios], audios.__getitem__, batch_size, progress, workers, readers=1,
                       decode=batch_decode(decoder, words), forkable=decoder.forkable, keep_audio=decoder.reads_audio)


def transcribe_with_words(model, audios: Sequence[np.ndarray], batch_size: int = OfflineBatching.batch_size,
                          progress: bool = False, workers: int | None = None,
                          decoder: CtcDecoder | None = None) -> list[TimedTranscript]:
    """:func:`transcribe_audio` with word times and confidences (``duet.asr.words``)."""
    return transcribe_audio(model, audios, batch_size, progress, workers, decoder, words=True)


def _transcribe(model, lengths: Sequence[int], read: Callable[[int], np.ndarray], batch_size: int, progress: bool,
                workers: int | None, readers: int, decode: BatchDecode, forkable: bool = True,
                keep_audio: bool = True) -> list:
    """Batches of ``read(i)`` (the audio of item ``i``, ``lengths[i]`` samples) longest first through the model.

    In one process, ``readers`` threads read the next batch while the current one is decoded (libsndfile
    decodes outside the GIL), so at most two batches of audio are held; forked workers (or an exported engine's
    decoding threads) read their own batches.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    texts: list = [""] * len(lengths)
    if not order:
        return texts
    if not isinstance(model, torch.nn.Module):
        # an exported engine (duet.asr.onnx_engine.OnnxCtcModel): no torch module to put in eval mode or lay out.
        # Whole batches go to threads each running a one-thread session (ONNX Runtime releases the GIL), not to
        # one session splitting every operator over its intra-op threads: 1.07 vs 1.37 s for 140 files on 2
        # cores; forked processes were slower than either (1.45 s: RESULTS.md)
        threads = cpu_budget() if workers is None else workers
        if threads > 1 and len(order) > 1:
            # a thread's last batch is the other's idle time: 5 batches of 32 over 2 threads took 1.34 s, 18 of 8
            # took 1.07 s (and one thread alone runs batches of 8 faster than batches of 32: 2.09 vs 2.35 s)
            batch_size = min(batch_size, -(-len(order) // (BATCHES_PER_THREAD * threads)))
        batches = _split(order, batch_size)
        threads = min(threads, len(batches))
        if threads == 1:
            _decode_batches(model, batches, read, readers, 1, decode, texts, progress)
        else:
            _decode_in_threads(model, batches, read, threads, decode, texts, progress, keep_audio)
        return texts
    batches = _split(order, batch_size)
    device = next(model.parameters()).device
    on_cpu = device.type == "cpu"
    # a decoder that cannot be forked (CTranslate2's thread pool, in joint decoding) runs here on its own threads
    workers = decoding_processes(len(batches), workers) if on_cpu and forkable else 1
    was_training = model.training
    model.eval()
    if on_cpu:
        # oneDNN runs the 2-D convolutions of FastConformer's subsampling front end far faster on NHWC
        # tensors (bench/asr_speed.py); only 4-D weights change layout, the transcripts are identical.
        model.to(memory_format=torch.channels_last)
    try:
        _decode_batches(model, batches, read, readers, workers, decode, texts, progress)
    finally:
        if on_cpu:
            set_front_end_chunking(model, None)
            # back to the default layout, whatever it was: a model that goes on to train must match its
            # other DDP ranks (gloo broadcasts the weights of rank 0, which alone transcribes the test set
            # before fitting); recipe.training_layout sets the training layout inside fit
            model.to(memory_format=torch.contiguous_format)
        model.train(was_training)
    return texts


def _decode_batches(model, batches: list[list[int]], read: Callable[[int], np.ndarray], readers: int, workers: int,
                    decode: BatchDecode, texts: list, progress: bool) -> None:
    """``texts[i]`` for every item of ``batches``: in ``workers`` forked processes, or in this one (``workers`` 1)."""
    if workers == 1:
        _decode_in_order(batches, read, readers, lambda audios: _decode_batch(model, audios, decode), texts, progress)
        return
    # forked children inherit the model and the reader as they are (nothing is pickled but batch indices and
    # texts); leaving the block joins them, so their CPU time shows in os.times()
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_init_worker,
                             initargs=(model, read, decode)) as pool:
        done = as_completed([pool.submit(_decode_in_worker, batch) for batch in batches])
        for future in tqdm(done, total=len(batches), desc="transcribe", unit="batch", disable=not progress):
            batch, hyps = future.result()  # a worker's exception (or death) is raised here
            for i, text in zip(batch, hyps):
                texts[i] = text


def _split(order: list[int], batch_size: int) -> list[list[int]]:
    """``order`` in consecutive batches of ``batch_size`` (the last one shorter)."""
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _decode_in_threads(model, batches: list[list[int]], read: Callable[[int], np.ndarray], threads: int,
                       decode: BatchDecode, texts: list, progress: bool, keep_audio: bool) -> None:
    """``texts[i]`` for every item of ``batches`` with an exported engine: ``threads`` threads each read a batch and
    run it through the engine's one-thread session (``OnnxCtcModel.one_thread``); this thread decodes the
    log-probs as they come, so NeMo's decoding objects (beam search, an LM) are only ever used by one thread.
    At most two batches per thread are in flight, so memory holds a few batches of log-probs, never all."""
    engine = model.one_thread()

    def log_probs(batch):  # the audio stays with its log-probs only where the decoder reads it (keep_audio)
        audios = [read(i) for i in batch]
        return batch, *engine.log_probs(audios), audios if keep_audio else None

    pending_batches = iter(batches)
    with ThreadPoolExecutor(threads) as pool, tqdm(total=len(batches), desc="transcribe", unit="batch",
                                                   disable=not progress) as bar:
        running = {pool.submit(log_probs, batch) for batch in itertools.islice(pending_batches, 2 * threads)}
        try:
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    batch, batch_log_probs, lengths, audios = future.result()  # a thread's exception is raised here
                    for i, result in zip(batch, decode(batch_log_probs, lengths, audios)):
                        texts[i] = result
                    bar.update()
                    running |= {pool.submit(log_probs, batch) for batch in itertools.islice(pending_batches, 1)}
        except BaseException:
            for future in running:  # an error ends the call: the batches not started yet are not run
                future.cancel()
            raise


def _decode_in_order(batches: list[list[int]], read: Callable[[int], np.ndarray], readers: int,
                     decode: Callable[[list[np.ndarray]], list], texts: list, progress: bool) -> None:
    """``texts[i]`` (the result ``decode`` gives item ``i``) for every item of ``batches``, decoded batch by batch
    in this process while the next is read."""
    for batch, audios in tqdm(_read_ahead(batches, read, readers), total=len(batches), desc="transcribe",
                              unit="batch", disable=not progress):
        for i, text in zip(batch, decode(audios)):
            texts[i] = text
        del audios  # before the generator reads the batch after next


def pad_batch(audios: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """``audios`` zero-padded into one [B, T] float tensor, and their lengths."""
    lengths = torch.tensor([len(a) for a in audios], dtype=torch.long)
    signal = torch.zeros(len(audios), int(lengths.max()))
    for row, audio in enumerate(audios):
        signal[row, : len(audio)] = torch.from_numpy(audio)
    return signal, lengths


def _read_ahead(batches: list[list[int]], read: Callable[[int], np.ndarray], readers: int
                ) -> Iterator[tuple[list[int], list[np.ndarray]]]:
    """Each batch with its audio, the next batch being read by ``readers`` threads while this one is used."""
    if not batches:
        return
    with ThreadPoolExecutor(readers) as pool:
        pending = [pool.submit(read, i) for i in batches[0]]
        for k, batch in enumerate(batches):
            audios = [future.result() for future in pending]
            pending = [pool.submit(read, i) for i in batches[k + 1]] if k + 1 < len(batches) else []
            yield batch, audios
            del audios


def _decode_batch(model, audios: Sequence[np.ndarray], decode: BatchDecode) -> list:
    """One padded batch through the model (or an exported engine's ``log_probs``) and ``decode``."""
    if not isinstance(model, torch.nn.Module):  # an exported engine (duet.asr.onnx_engine.OnnxCtcModel)
        return decode(*model.log_probs(audios), audios)
    device = next(model.parameters()).device
    with torch.inference_mode():
        if device.type == "cpu":
            set_front_end_chunking(model, len(audios))
        signal, lengths = pad_batch(audios)
        log_probs, encoded_len, _ = model.forward(input_signal=signal.to(device),
                                                  input_signal_length=lengths.to(device))
        return decode(log_probs, encoded_len, audios)


# A forked worker's model and audio reader, inherited from the parent (never pickled).
_worker_state: dict = {}


def _init_worker(model, read, decode: BatchDecode) -> None:
    torch.set_num_threads(1)
    _worker_state.update(model=model, read=read, decode=decode)


def _decode_in_worker(batch: list[int]) -> tuple[list[int], list]:
    read = _worker_state["read"]
    return batch, _decode_batch(_worker_state["model"], [read(i) for i in batch], _worker_state["decode"])


@dataclass
class CachedLogProbs:
    """CTC log-probabilities of a set of files, in length-sorted padded batches, for decoding again and again
    without the encoder (the benches' weight grids)."""

    batches: list[tuple[list[int], torch.Tensor, torch.Tensor]]  # (file indices, log_probs [B, T, V], lengths [B])
    n_files: int
    paths: list[str]  # the files, read again where a decoder rescores with the audio
    sample_rate: int


def compute_log_probs(model, paths, batch_size: int = OfflineBatching.batch_size) -> CachedLogProbs:
    """Run the model once over ``paths`` (:func:`transcribe_files`' batching, in this process) and keep each
    utterance's log-probabilities, re-padded into batches of ``batch_size`` longest first."""
    sample_rate = int(model.cfg.sample_rate)
    paths = [str(p) for p in paths]
    lengths = [audio_length(p, sample_rate) for p in paths]
    kept = _transcribe(model, lengths, lambda i: load_audio(paths[i], sample_rate), batch_size, False, 1, readers=1,
                       decode=_own_log_probs, keep_audio=False)
    order = sorted(range(len(paths)), key=lambda i: lengths[i], reverse=True)
    batches = []
    for batch in _split(order, batch_size):
        frames = torch.tensor([len(kept[i]) for i in batch])
        padded = torch.zeros(len(batch), int(frames.max()), kept[batch[0]].shape[1])
        for row, i in enumerate(batch):
            padded[row, : len(kept[i])] = kept[i]
        batches.append((batch, padded, frames))
    return CachedLogProbs(batches=batches, n_files=len(paths), paths=paths, sample_rate=sample_rate)


def _own_log_probs(log_probs: torch.Tensor, lengths: torch.Tensor, audios) -> list[torch.Tensor]:
    """Each utterance's own frames of a batch's log-probabilities."""
    return [log_probs[i, : int(lengths[i])].clone() for i in range(len(lengths))]


def decode_log_probs(decoder: CtcDecoder, cached: CachedLogProbs) -> list[str]:
    """Transcripts of cached log-probabilities by ``decoder``, in input order (a decoder that rescores with the audio
    reads each batch's files again)."""
    texts = [""] * cached.n_files
    for batch, log_probs, lengths in cached.batches:
        audios = [load_audio(cached.paths[i], cached.sample_rate) for i in batch] if decoder.reads_audio else None
        for i, text in zip(batch, decoder.texts(log_probs, lengths, audios)):
            texts[i] = text
    return texts
