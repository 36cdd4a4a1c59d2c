"""Build a LibriSpeech-layout synthetic corpus: plan (text + speaker per utterance), synthesise, write.

Layout, as in LibriSpeech::

    <out>/<split>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac
    <out>/<split>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt   # "<utt id> UPPER CASE TEXT"
    <out>/SPEAKERS.txt

Two kinds of corpus:

* the bundled sample (:func:`plan_sample`): ``train-clean`` from the training pool, ``dev-clean`` and
  ``test-clean`` from the dev / test speakers of :func:`duet.synth.tts.speaker_catalogue`;
* a larger corpus of about N hours (:func:`build_hours`): ``train-clean`` from the training pool and
  a small ``dev-clean`` from the pool's held-out ``pool-dev`` speakers; never a dev/test speaker and
  never a sentence of the sample's dev/test splits.

The bundled sample is telephone speech (:data:`SAMPLE_CHANNEL`) while the larger corpora that train the
base checkpoint are wideband: the sample is "the user's own data", which differs from what the base
was trained on, as call-centre audio differs from LibriSpeech. From the same generator, voices pool and
channel, the sample would hold nothing the base has not already learnt from hours more of it (the
fine-tune measurements in RESULTS.md).

Sentences come from :mod:`duet.synth.corpus_text`, each split from its own seed stream, so the test split
stays the same when the training split grows. The corpus is written into a temporary sibling folder
and renamed into place only when complete.
"""

from __future__ import annotations

import itertools
import multiprocessing
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from tqdm import tqdm

from duet.data.real_speech import held_out_transcripts
from duet.synth.corpus_text import Sentence, generate_sentences, iter_sentences, to_transcript
from duet.synth.tts import Speaker, speaker_catalogue, synthesize, usable
from duet.synth.voices import check_exclusion, generalisation_pool, unseen_speakers
from duet.synth.wordnet_text import wordnet_sentences
from duet.foundation.files import write_text_atomic

SAMPLE_SPLITS = ("train-clean", "dev-clean", "test-clean")
#: Seed-stream offsets so each split's sentences are independent of the other splits' sizes.
_STREAM = {"test-clean": 1, "dev-clean": 2, "train-clean": 3, "hours-dev": 5, "hours-train": 4, "lm-text": 6,
           "wordnet": 7, "mix": 8, "unseen": 9, "voice-case": 10}
SAMPLE_MAX_WORDS = 8
# The bundled samples/LibriSpeech was made with these (tools/make_sample_corpus.py defaults).
SAMPLE_SEED = 0
SAMPLE_CHANNEL = "telephone"
HOURS_CHANNEL = "wideband"
SAMPLE_COUNTS = {"train-clean": 520, "dev-clean": 60, "test-clean": 80}
HOURS_UTTS_PER_CHAPTER = 25
HOURS_DEV_UTTS = 100
#: Share of template sentences in a generalisation corpus; the rest are WordNet usage examples.
GENERALISATION_TEMPLATE_FRACTION = 0.35
UNSEEN_SPLIT = "test-unseen"


@dataclass(frozen=True)
class Utterance:
    split: str
    speaker: Speaker
    chapter: int
    index: int
    text: str

    @property
    def utt_id(self) -> str:
        return f"{self.speaker.id}-{self.chapter}-{self.index:04d}"

    def relpath(self) -> Path:
        return Path(self.split, str(self.speaker.id), str(self.chapter), self.utt_id + ".flac")


def speakers_by_role(skip_engines: Iterable[str] = ()) -> dict[str, list[Speaker]]:
    skip = set(skip_engines)
    roles: dict[str, list[Speaker]] = {"train": [], "pool-dev": [], "dev": [], "test": []}
    for speaker in speaker_catalogue():
        if usable(speaker, skip):
            roles[speaker.role].append(speaker)
    return roles


def _stream_seed(seed: int, stream: str) -> int:
    return seed * 10 + _STREAM[stream]


def assign(split: str, sentences: list[Sentence], speakers: list[Speaker], per_chapter: int | None,
           first_index: int = 0) -> list[Utterance]:
    """Deal sentences to speakers round-robin; each speaker's utterances fill chapters of ``per_chapter``."""
    if not speakers:
        raise ValueError(f"{split}: no speakers available")
    utterances = []
    for i, sentence in enumerate(sentences, start=first_index):
        speaker = speakers[i % len(speakers)]
        turn = i // len(speakers)
        chapter_no, index = divmod(turn, per_chapter) if per_chapter else (0, turn)
        utterances.append(Utterance(split, speaker, speaker.id * 100 + chapter_no + 1, index,
                                    to_transcript(sentence.text)))
    return utterances


def sample_sentences(seed: int, counts: dict[str, int], max_words: int = SAMPLE_MAX_WORDS) -> dict[str, list[Sentence]]:
    """Sentences of the bundled sample's splits: test first, then dev, then train, each unique overall."""
    chosen: dict[str, list[Sentence]] = {}
    taken: list[str] = []
    for split in ("test-clean", "dev-clean", "train-clean"):
        chosen[split] = generate_sentences(counts[split], seed=_stream_seed(seed, split), exclude=taken,
                                           max_words=max_words)
        taken += [s.text for s in chosen[split]]
    return chosen


def held_out_texts(seed: int = SAMPLE_SEED, counts: dict[str, int] | None = None) -> list[str]:
    """Dev-clean and test-clean sentences never to be used in training text made here: those of the sample
    that ``seed`` and ``counts`` give, and always those of the bundled sample, so that a corpus or LM text
    made with another seed (for fresh sentences) still never holds a sentence the bundled sample tests on.
    """
    samples = [(SAMPLE_SEED, SAMPLE_COUNTS)]
    if (seed, counts or SAMPLE_COUNTS) != samples[0]:  # the usual call asks for the bundled sample alone
        samples.append((seed, counts or SAMPLE_COUNTS))
    texts = [s.text for sample_seed, sample_counts in samples
             for split in ("dev-clean", "test-clean") for s in sample_sentences(sample_seed, sample_counts)[split]]
    return list(dict.fromkeys(texts))


def lm_text(n: int, seed: int = SAMPLE_SEED) -> list[str]:
    """``n`` sentences from the corpus's own text generator for an in-domain n-gram LM.

    The analogue of LibriSpeech's LM corpus (book text of the same kind as the transcripts, none of the
    test books): the same templates and word lists as the speech, its own seed stream, and none of the
    sample's dev/test sentences nor any transcript of a held-out real-speech set (when that folder exists).
    """
    excluded = held_out_texts(seed) + held_out_transcripts()  # nor a transcript of a held-out real-speech set
    return [s.text for s in generate_sentences(n, seed=_stream_seed(seed, "lm-text"), exclude=excluded)]


def bundled_sample_kinds(split: str) -> dict[str, str]:
    """{transcript (lower case): "assistant" or "read"} for a split of the bundled sample, from its plan."""
    return {s.text: s.kind for s in sample_sentences(SAMPLE_SEED, SAMPLE_COUNTS)[split]}


def plan_sample(seed: int, counts: dict[str, int], skip_engines: Iterable[str] = (),
                max_words: int = SAMPLE_MAX_WORDS) -> list[Utterance]:
    roles = speakers_by_role(skip_engines)
    sentences = sample_sentences(seed, counts, max_words)
    speakers = {"train-clean": roles["train"], "dev-clean": roles["dev"], "test-clean": roles["test"]}
    plan = []
    for split in SAMPLE_SPLITS:
        order = list(speakers[split])
        random.Random(_stream_seed(seed, split)).shuffle(order)
        plan += assign(split, sentences[split], order, per_chapter=None)
    return plan


def _synthesize_one(job: tuple[Utterance, Path, str, bool]) -> float | str:
    utterance, root, channel, skip_failures = job
    path = root / utterance.relpath()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return synthesize(utterance.speaker, utterance.text.lower(), path, channel)
    except RuntimeError as e:
        if not skip_failures:
            raise
        path.unlink(missing_ok=True)
        return str(e)


def _run(utterances: Iterable[Utterance], root: Path, jobs: int, channel: str,
         skip_failures: bool = False) -> Iterator[tuple[Utterance, float | str]]:
    """Synthesise in ``jobs`` worker processes, yielding (utterance, seconds) in plan order. With
    ``skip_failures`` an utterance an engine fails on yields the error's text instead of raising (a voice
    that says nothing for one odd sentence must not cost hours of corpus)."""
    utterances = list(utterances)
    with multiprocessing.Pool(jobs) as pool:
        jobs_list = [(u, root, channel, skip_failures) for u in utterances]
        yield from zip(utterances, pool.imap(_synthesize_one, jobs_list, chunksize=4))


def write_transcripts(root: Path, utterances: list[Utterance]) -> None:
    by_chapter: dict[Path, list[Utterance]] = {}
    for u in utterances:
        by_chapter.setdefault(root / u.relpath().parent, []).append(u)
    for folder, items in by_chapter.items():
        items.sort(key=lambda u: u.index)
        name = f"{items[0].speaker.id}-{items[0].chapter}.trans.txt"
        write_text_atomic(folder / name, "".join(f"{u.utt_id} {u.text}\n" for u in items))


def write_speakers(root: Path, utterances: list[Utterance], seconds: dict[str, float], channel: str) -> None:
    minutes: dict[tuple[int, str], float] = {}
    speakers: dict[int, Speaker] = {}
    for u in utterances:
        key = (u.speaker.id, u.split)
        minutes[key] = minutes.get(key, 0.0) + seconds[u.utt_id] / 60
        speakers[u.speaker.id] = u.speaker
    lines = [
        "; Synthetic speakers of this corpus (tools/make_sample_corpus.py, duet/synth/tts.py).",
        "; RATE: espeak-ng words per minute (-s) | flite duration_stretch | festival Duration_Stretch (>1 slower)",
        "; PITCH: espeak-ng pitch 0-99 (-p) | flite int_f0_target_mean in Hz | festival sox pitch shift in cents",
        "; GAIN: peak level of each clip in dBFS. ROLE: catalogue role (train, pool-dev, dev, test).",
        f"; CHANNEL of every clip: {channel} (duet/synth/tts.py CHANNELS)",
        ";ID   |SUBSET          |MINUTES|ENGINE    |VOICE                 |RATE  |PITCH |GAIN |ROLE",
    ]
    for (spk_id, split), mins in sorted(minutes.items()):
        s = speakers[spk_id]
        lines.append(f"{spk_id:<6}|{split:<16}|{mins:7.2f}|{s.engine:<10}|{s.voice:<22}|{s.rate:<6g}|"
                     f"{s.pitch:<6g}|{s.gain_db:<5g}|{s.role}")
    write_text_atomic(root / "SPEAKERS.txt", "\n".join(lines) + "\n")


def _replace_dir(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` tree to ``out``; an existing corpus there is replaced."""
    if out.exists():
        if not (out / "SPEAKERS.txt").exists():
            raise FileExistsError(f"{out} exists and is not a corpus written by this tool; remove it first")
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)


def _temp_root(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)  # leftovers of an interrupted run
    tmp.mkdir()
    return tmp


def summarize(out: Path, utterances: list[Utterance], seconds: dict[str, float], wall: float, channel: str) -> str:
    parts = []
    for split in sorted({u.split for u in utterances}):
        items = [u for u in utterances if u.split == split]
        hours = sum(seconds[u.utt_id] for u in items) / 3600
        parts.append(f"{split} {len(items)} utts {hours:.3f} h {len({u.speaker.id for u in items})} spk")
    size_mb = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6
    return f"wrote {out} ({channel}): " + " | ".join(parts) + f" | {size_mb:.1f} MB in {wall:.0f} s"


def _publish(tmp: Path, out: Path, plan: list[Utterance], seconds: dict[str, float], channel: str) -> None:
    """Write the transcripts and SPEAKERS.txt into the finished temporary tree, then move it into place."""
    write_transcripts(tmp, plan)
    write_speakers(tmp, plan, seconds, channel)
    _replace_dir(tmp, out)


def build_sample(out: Path, seed: int, counts: dict[str, int], jobs: int, skip_engines: Iterable[str] = (),
                 max_words: int = SAMPLE_MAX_WORDS, channel: str = SAMPLE_CHANNEL) -> str:
    start = time.time()
    plan = plan_sample(seed, counts, skip_engines, max_words)
    tmp = _temp_root(out)
    try:
        seconds = {u.utt_id: s for u, s in tqdm(_run(plan, tmp, jobs, channel), total=len(plan),
                                                 desc="synthesising", unit="utt")}
        _publish(tmp, out, plan, seconds, channel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summarize(out, plan, seconds, time.time() - start, channel)


def build_hours(out: Path, hours: float, seed: int, sample_counts: dict[str, int], jobs: int,
                skip_engines: Iterable[str] = (), max_words: int | None = None, batch: int = 200,
                dev_utts: int = HOURS_DEV_UTTS, channel: str = HOURS_CHANNEL) -> str:
    """About ``hours`` of training audio from training-pool speakers, plus a small held-out dev split."""
    roles = speakers_by_role(skip_engines)
    excluded = held_out_texts(seed, sample_counts)
    dev_sentences = generate_sentences(dev_utts, seed=_stream_seed(seed, "hours-dev"), exclude=excluded,
                                       max_words=max_words)
    stream = iter_sentences(_stream_seed(seed, "hours-train"),
                            exclude=excluded + [s.text for s in dev_sentences], max_words=max_words)
    return _build_training_corpus(out, hours, seed, roles["pool-dev"], dev_sentences, roles["train"], stream,
                                  jobs, batch, channel)


def generalisation_sentences(seed: int, template_fraction: float = GENERALISATION_TEMPLATE_FRACTION,
                             exclude: Iterable[str] = ()) -> Iterator[Sentence]:
    """Endless stream for a generalisation corpus: template sentences (the sample's domain) mixed with
    WordNet's training examples (everyday English), never a text in ``exclude``; WordNet's examples are
    dealt out once, in an order given by ``seed``, after which only templates follow."""
    excluded = list(exclude)
    wordnet = wordnet_sentences(held_out=False, exclude=excluded)
    random.Random(_stream_seed(seed, "wordnet")).shuffle(wordnet)
    templates = iter_sentences(_stream_seed(seed, "hours-train"), exclude=excluded + wordnet)
    rng = random.Random(_stream_seed(seed, "mix"))
    wordnet_iter = iter(wordnet)
    while True:
        text = None if rng.random() < template_fraction else next(wordnet_iter, None)
        yield next(templates) if text is None else Sentence(text=text, kind="read", intent="wordnet", template="")


def build_generalisation(out: Path, hours: float, seed: int, jobs: int, skip_engines: tuple[str, ...] = (),
                         batch: int = 200, dev_utts: int = HOURS_DEV_UTTS, channel: str = HOURS_CHANNEL) -> str:
    """About ``hours`` of training audio from :func:`duet.synth.voices.generalisation_pool` speaking
    templates and WordNet examples, plus a dev split from the held-out ``pool-dev`` speakers. Never a
    sentence of the sample's dev/test splits, of WordNet's held-out tenth or of a held-out real-speech set."""
    pool, unseen = generalisation_pool(skip_engines), unseen_speakers(skip_engines)
    check_exclusion(pool, unseen)
    pool = [s for s in pool if usable(s)]  # a voice whose Debian package is missing here is left out
    excluded = held_out_texts(seed) + held_out_transcripts()
    stream = generalisation_sentences(seed, exclude=excluded)
    dev_sentences = [next(stream) for _ in range(dev_utts)]
    dev_speakers = [s for s in speaker_catalogue() if s.role == "pool-dev" and usable(s, skip_engines)]
    return _build_training_corpus(out, hours, seed, dev_speakers, dev_sentences, pool, stream, jobs, batch, channel)


def build_unseen_voices(out: Path, utts: int, jobs: int, skip_engines: tuple[str, ...] = (),
                        channel: str = HOURS_CHANNEL) -> str:
    """The unseen-voices evaluation set: ``utts`` WordNet held-out sentences spoken by held-out voices only
    (:data:`duet.synth.voices.UNSEEN_IDENTITIES`), as split ``test-unseen`` (fixed: no seed)."""
    start = time.time()
    speakers = unseen_speakers(skip_engines)
    check_exclusion(generalisation_pool(skip_engines), speakers)
    speakers = [s for s in speakers if usable(s)]  # a voice whose Debian package is missing here is left out
    sentences = wordnet_sentences(held_out=True, exclude=held_out_transcripts())
    random.Random(_stream_seed(0, "unseen")).shuffle(sentences)
    chosen = [Sentence(text=t, kind="read", intent="wordnet", template="") for t in sentences[:utts]]
    plan = assign(UNSEEN_SPLIT, chosen, speakers, per_chapter=None)
    tmp = _temp_root(out)
    try:
        seconds = {u.utt_id: s for u, s in tqdm(_run(plan, tmp, jobs, channel), total=len(plan),
                                                 desc=UNSEEN_SPLIT, unit="utt")}
        _publish(tmp, out, plan, seconds, channel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summarize(out, plan, seconds, time.time() - start, channel)


def build_voice_case(out: Path, speaker: Speaker, adapt_minutes: float, scored: int, seed: int = SAMPLE_SEED,
                     channel: str = HOURS_CHANNEL) -> str:
    """One voice to adapt to (bench/adaptation_ab.py), in one process: ``scored`` utterances as split ``dev-clean``
    (scored, never adapted on), then ``train-clean`` until just past ``adapt_minutes`` of audio (what the user gives
    the adaptation). Sentences of the sample's kind and length from their own seed stream, none of the bundled
    sample's (any split) nor of a held-out real-speech set; utterance ids numbered on across the two splits."""
    start = time.time()
    sample = [s.text for sentences in sample_sentences(SAMPLE_SEED, SAMPLE_COUNTS).values() for s in sentences]
    stream = iter_sentences(_stream_seed(seed, "voice-case"), exclude=sample + held_out_transcripts(),
                            max_words=SAMPLE_MAX_WORDS)
    plan = assign("dev-clean", [next(stream) for _ in range(scored)], [speaker], per_chapter=None)
    tmp = _temp_root(out)
    try:
        seconds = {u.utt_id: _synthesize_one((u, tmp, channel, False)) for u in plan}
        adapt_seconds = 0.0
        while adapt_seconds < 60 * adapt_minutes:
            utterance = assign("train-clean", [next(stream)], [speaker], per_chapter=None, first_index=len(plan))[0]
            seconds[utterance.utt_id] = _synthesize_one((utterance, tmp, channel, False))
            adapt_seconds += seconds[utterance.utt_id]
            plan.append(utterance)
        _publish(tmp, out, plan, seconds, channel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summarize(out, plan, seconds, time.time() - start, channel)


def _build_training_corpus(out: Path, hours: float, seed: int, dev_speakers: list[Speaker],
                           dev_sentences: list[Sentence], train_speakers: list[Speaker],
                           stream: Iterator[Sentence], jobs: int, batch: int, channel: str) -> str:
    """Synthesise ``dev-clean`` from ``dev_sentences``, then ``train-clean`` from ``stream`` until
    ``hours`` of audio, dealing sentences round-robin to ``train_speakers`` in a seeded order."""
    start = time.time()
    dev_plan = assign("dev-clean", dev_sentences, dev_speakers, per_chapter=HOURS_UTTS_PER_CHAPTER)
    train_speakers = list(train_speakers)
    random.Random(_stream_seed(seed, "hours-train")).shuffle(train_speakers)
    target = hours * 3600
    tmp = _temp_root(out)
    try:
        seconds: dict[str, float] = {}
        train_plan: list[Utterance] = []
        failures: list[str] = []
        total = 0.0
        seconds.update({u.utt_id: s for u, s in tqdm(_run(dev_plan, tmp, jobs, channel), total=len(dev_plan),
                                                      desc="dev-clean", unit="utt")})
        with tqdm(total=round(target), desc="train-clean", unit="s audio") as bar:
            while total < target:
                chunk = assign("train-clean", list(itertools.islice(stream, batch)), train_speakers,
                               HOURS_UTTS_PER_CHAPTER, first_index=len(train_plan))
                for utterance, secs in _run(chunk, tmp, jobs, channel, skip_failures=True):
                    if isinstance(secs, str):
                        failures.append(secs)
                        continue
                    if total >= target:  # overshoot of the last batch: drop its files
                        (tmp / utterance.relpath()).unlink()
                        continue
                    train_plan.append(utterance)
                    seconds[utterance.utt_id] = secs
                    total += secs
                    bar.update(round(min(total, target)) - bar.n)
        for pattern in ("*/*", "*"):  # chapters, then speakers, that only the dropped overshoot created
            for folder in (tmp / "train-clean").glob(pattern):
                if not any(folder.iterdir()):
                    folder.rmdir()
        plan = dev_plan + train_plan
        _publish(tmp, out, plan, seconds, channel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"note: {len(failures)} training utterance(s) skipped where an engine failed, e.g. {failures[0]}",
              file=sys.stderr)
    return summarize(out, plan, seconds, time.time() - start, channel)
