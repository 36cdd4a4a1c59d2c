"""Pieces of tools/demo.py: stages that run the toolkit's own entry scripts, skipped when unchanged.

A stage with declared ``inputs`` and ``outputs`` is skipped when its outputs exist and a stamp file
records the same command and the same inputs (path, size, modification time). Stages without them
(manifests, realmix) rely on the tool's own up-to-date check.

A stage's command writes everything it prints (NeMo's, Lightning's and transformers' logs included) to
``experiments/<stage name>/log.txt``, which holds the latest run; with ``verbose`` it is shown live as well. (The
ASR fine-tune, ``nemo_recipes/finetune_ctc.py``, prints its own lines only and names the log that NeMo's and
Lightning's go to; the commands run unbuffered, so a log's lines are in the order they were printed.)
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, TextIO

import jiwer

from duet.asr.decoding import DecodingSettings, JointSettings
from duet.asr.confidence import NOT_UNDERSTOOD_REPLY
from duet.asr.decoding.file import decoding_file_for, write_decoding_file
from duet.demo.models import DEMO_ASR_MODEL, DEMO_SLM_MODEL
from duet.synth.alpaca_sample import CORPUS_ANSWERS
from duet.text import normalize_spoken
from duet.synth.corpus import SAMPLE_COUNTS, SAMPLE_SEED, sample_sentences
from duet.foundation import EXPERIMENTS, REPO_ROOT, python_command, usable_cores
from duet.foundation.files import atomic_path, read_jsonl, write_text_atomic
from duet.data.lexicon import answer_words
from slm.metrics import assistant_scores, check_answer, well_formed_share

STAMP_DIR = EXPERIMENTS / ".demo_stamps"
# The LM's text (tools/make_lm_text.py --source corpus wordnet): 100k sentences of the corpus's own generator (the
# sample's domain, never one of its dev/test sentences), then WordNet's ~37,000 usage examples (everyday English, for
# the real speech a user brings); where ../shared/real_speech exists, then the transcripts of speechocean762/train's
# speakers outside its 8 dev speakers (the base's real training speech; tools/demo.py's stage "realtext"), each
# LM_TRANSCRIPT_TIMES times, so that a few thousand sentences of how people talk weigh against the generated ones
# (1, 4 and 8 times compared on the held-in data the weights below are chosen on; higher orders than 6 gained
# nothing: RESULTS.md, "Demo fine-tune from the Whisper base"). ~10 s to write, ~20 s for the token 6-gram.
LM_SENTENCES, LM_ORDER, LM_TRANSCRIPT_TIMES = 100_000, 6, 4
DEMO_LM_TEXT = EXPERIMENTS / "demo_lm" / "lm_text.txt"
DEMO_LM = EXPERIMENTS / "demo_lm" / f"lm_text_token{LM_ORDER}.arpa"
# Beam width, LM weight and per-token bonus of the pipeline's beam search with DEMO_LM, for the demo's fine-tune of
# the Whisper base, and the weight of Whisper tiny.en's decoder rescoring the beam's candidates (duet.asr.whisper_rescoring,
# each utterance's audio at its own length). The LM weights: chosen by bench/decoding_ab.py (beam 8, alpha 0.5-1.4 x
# beta 1-6) on held-in data of both kinds the pipeline hears, together: the sample's dev-clean (60) and the 86
# utterances of the 8 dev speakers of speechocean762/train that the fine-tune's real mix does not hold; alpha 1.1,
# beta 4 for the fine-tunes of bases v4, v5 and v6 and for the LM with speechocean762/train's transcripts. The width
# and Whisper's weight: chosen by bench/whisper_rescoring.py on the same held-in data. Without rescoring beam 8 was
# as good as 16 (16 only adds candidates the LM ranks lower); with it, 16 gives Whisper more to choose from:
# beam 8 at 0.25 (0-3 tried) 21.38 %, beam 16 at 0.5 (0-1 tried) 20.13 %. Whisper writes numbers in digits and so
# scores the sample's spelled-out numbers poorly: a higher weight trades them away. The cost: a 5 s clip's transcript
# in about 0.4 s on one thread against beam 8's 0.25 s without Whisper (bench/pipeline_latency.py).
# Held out, evaluation only: RESULTS.md, "Whisper's decoder rescoring the beam's n-best".
PIPELINE_BEAM, PIPELINE_ALPHA, PIPELINE_BETA = 16, 1.1, 4.0
# The pipeline decodes jointly (duet.asr.decoding.joint): that beam's n-best and Whisper tiny.en's beam-5 n-best are the
# candidates, the CTC model judges. The judge's weights: chosen by bench/joint_decoding.py on the same held-in data
# (the dev speakers' utterances the fine-tune never trained on), by the one-standard-error rule: the lowest dev WER,
# 17.19 %, leant on the CTC judge (1.0 / LM 1.5) and lost to Whisper on native speech; within one standard error
# (1.85 points) the weighting that leaves the most to Whisper, 18.76 % (RESULTS.md, "Joint decoding").
JOINT_WHISPER_BEAM, JOINT_CTC_WEIGHT, JOINT_LM_WEIGHT, JOINT_TOKEN_BONUS, JOINT_WHISPER_SURE = 5, 0.5, 0.2, 2.0, -0.3
# How many of the beam's candidates (those Whisper did not propose) are judged: on the same held-in data at those
# weights, 5 gave the lowest WER of 2-16 (18.45 % against all 16's 18.76 %), and each candidate left out saves a
# teacher-forced Whisper pass and an LM score
JOINT_CTC_CANDIDATES = 5
# Where two candidates spell the same letters with other word breaks ("fire fox", "firefox"), Whisper, the LM and
# the length choose, not the CTC judge (ctc_spacing 0): the held-in dev WER is the same either way, and the
# one-standard-error rule then leaves the choice to Whisper (RESULTS.md, "Joint decoding")
JOINT_CTC_SPACING = 0.0
# Whisper's encoder reads the utterance padded to 15 s, not 30 (most of the encoder's cost on short utterances), and
# the beam reads each run of sure blank as one frame (a third of the frames, nearly always the same candidates). On
# the same held-in data at the weights above: 20.13 % for 15 s and for 20 s against 18.45 % for 30 s, within one
# standard error (1.97 points): the cheapest window within it (RESULTS.md, "Joint decoding")
JOINT_WHISPER_WINDOW, BEAM_BLANK_SKIP = 15.0, 0.999
# The low-confidence threshold of the demo's model under that decoding (duet.asr.confidence: words outside the
# lexicon count 0; beam search + LM gives lower word confidences than greedy, so the base's own threshold does not
# fit it). Chosen by bench/confidence_threshold.py on the same held-in data as the weights: the highest threshold
# flagging at most 10 % of the utterances it heard right (WER <= 0.25); for the fine-tune of base v6 with the LM of
# speechocean762/train's transcripts under beam 16 + LM + Whisper rescoring, 0.45 (held out: speechocean762/test
# 20.7 % flagged, read_sentences 17.0 %, common_voice 44.0 %; RESULTS.md, "Low-confidence turns"); under the joint
# decoding, on the dev-clean 60 and the 86 held-in dev-speaker utterances, 0.40 flags 6.9 % of the rightly heard and
# 22.2 % of the badly heard (0.45 would flag 12.9 % of the rightly heard); chosen again with Whisper's 15 s window
# and the beam's blank_skip, 0.40 again: 6.1 % and 19.1 % (0.45: 11.1 %). Re-choose it when the base checkpoint,
# the recipe, the LM or the decoding changes.
DEMO_MIN_CONFIDENCE = 0.40
# ... both saved as decoding.json beside the model, where tools/pipeline.py finds them whatever path names the model
DEMO_DECODING = decoding_file_for(DEMO_ASR_MODEL)
# Before/after WER of the fine-tune on every set of bench/asr_generalisation.py (base, then the demo's model)
DEMO_GENERALISATION = EXPERIMENTS / "demo_generalisation"
#: How much worse (WER points) the fine-tune may make a real-speech set before the demo flags it.
REAL_SET_TOLERANCE = 2.0


@dataclass(frozen=True)
class AsrFineTune:
    """How the demo fine-tunes the base (tools/demo.py's stage "asr"): passes over the sample's 520 training
    utterances + the mixes, the CTC head's learning rate, and how fast Whisper's pretrained weights move beside it
    (a share of the head's rate)."""

    epochs: int
    head_lr: float
    encoder_lr_scale: float


@dataclass
class Stage:
    name: str
    command: list[str]
    summarize: Callable[[], str]
    inputs: list[Path] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)
    stdout_to: Path | None = None  # capture the command's standard output into this file (atomically)
    prepare: Callable[[], None] | None = None  # writes files the command reads, right before it runs
    # Values the command reads from files that ``prepare`` writes (they are not on the command line): part of
    # the fingerprint, so that changing one reruns the stage.
    settings: dict = field(default_factory=dict)
    # A run folder the command resumes from (NeMo's exp_manager, slm/finetune.py's .partial folder): kept when the
    # stage was interrupted with the same command and inputs, deleted when they changed, so a new base checkpoint,
    # tokenizer or step count never "resumes" the previous run's training.
    run_dir: Path | None = None
    # trainer.max_epochs of a Lightning training command: the progress line (duet.demo.progress) counts the
    # steps of all of them, not just the current epoch's
    epochs: int | None = None
    # Started at the beginning of a run and left to run beside the stages before it in the list (BackgroundRun):
    # only for a stage that reads none of their outputs and leaves cores to them (one thread)
    background: bool = False

    def shown(self) -> str:
        """The command as the user would type it in the shell that runs the demo (``duet.foundation.python_command``),
        paths inside the repository relative to it."""
        root = f"{REPO_ROOT}/"
        # quoted where the shell would split or read a word ("--sets 'sample test-clean'"), so that the line typed
        # runs the same command
        command = python_command(*(shlex.quote(str(c).replace(root, "")) for c in self.command[1:]))
        return command + (f" > {str(self.stdout_to).replace(root, '')}" if self.stdout_to else "")

    def fingerprint(self) -> str:
        digest = hashlib.sha256(json.dumps(self.command[1:]).encode())
        if self.settings:  # only then: the stamps of stages without settings stay valid
            digest.update(json.dumps(self.settings, sort_keys=True).encode())
        for path in self.inputs:
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for f in files:
                stat = f.stat()
                digest.update(f"{f}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()

    def up_to_date(self) -> bool:
        stamp = STAMP_DIR / self.name
        return (bool(self.outputs) and all(p.exists() for p in self.outputs) and stamp.exists()
                and stamp.read_text().strip() == self.fingerprint())

    @property
    def log_path(self) -> Path:
        return EXPERIMENTS / self.name / "log.txt"

    def run(self, verbose: bool = False, on_tick: Callable[[float], None] | None = None,
            stop: threading.Event | None = None, env: dict[str, str] | None = None) -> int:
        """Run the command, its output to :attr:`log_path` (and the console with ``verbose``); ``on_tick`` gets
        the seconds elapsed about once a second while it runs; setting ``stop`` ends the command; ``env`` is added
        to its environment. Returns its exit code."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            log.write(f"$ {self.shown()}\n".encode())
            missing = [p for p in self.inputs if not p.exists()]
            if missing:
                message = f"demo: {self.name}: missing input {missing[0]}"
                log.write(f"{message}\n".encode())
                print(message, file=sys.stderr)
                return 2
            if self.prepare:
                self.prepare()
            # the inputs as this run sees them: what the resume check compares and what the stamp records
            fingerprint = self.fingerprint()
            if self.run_dir is not None:
                started = STAMP_DIR / f"{self.name}.started"
                if self.run_dir.exists() and (not started.exists() or started.read_text().strip() != fingerprint):
                    print(f"demo: {self.name}: inputs changed since {self.run_dir} was made; starting it afresh")
                    shutil.rmtree(self.run_dir)
                write_text_atomic(started, fingerprint + "\n")
            log.flush()
            if self.stdout_to is None:
                code = run_logged(self.command, log, verbose=verbose, on_tick=on_tick, stop=stop, env=env)
            else:  # the output file gets standard output alone, exactly as the command printed it
                with atomic_path(self.stdout_to) as partial, open(partial, "wb") as out:
                    code = run_logged(self.command, log, stdout_to=out, verbose=verbose, on_tick=on_tick, stop=stop,
                                      env=env)
        if code == 0 and self.outputs:
            write_text_atomic(STAMP_DIR / self.name, fingerprint + "\n")
        return code


class BackgroundRun:
    """A stage running in a thread while the demo goes on with others: started at once, waited for when its turn
    in the list comes (:meth:`wait`, with the usual progress line), stopped if the demo ends before that."""

    def __init__(self, stage: Stage):
        self.stage, self.started, self.code = stage, time.time(), None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"demo-{stage.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.code = self.stage.run(stop=self._stop)
        except BaseException as e:  # reported where the demo waits for it, like a failing command
            print(f"demo: {self.stage.name}: {type(e).__name__}: {e}", file=sys.stderr)
            self.code = 1

    def wait(self, on_tick: Callable[[float], None] | None = None) -> int:
        """The stage's exit code, once it has finished; ``on_tick`` gets the seconds since it started meanwhile."""
        while self._thread.is_alive():
            self._thread.join(timeout=1.0)
            if on_tick is not None and self._thread.is_alive():
                on_tick(time.time() - self.started)
        return self.code

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def threads_beside(runs: Iterable[BackgroundRun]) -> dict[str, str]:
    """The environment of a stage that starts while background stages run: ``OMP_NUM_THREADS`` = the cores they
    leave (one thread each), so that no core is asked for two threads (a training's threads then wait on each
    other: the ASR fine-tune at two threads beside the SLM's one took over twice its time alone). Nothing when
    none runs, or when the user set ``OMP_NUM_THREADS``."""
    running = sum(run.running for run in runs)
    if not running or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, usable_cores() - running))}


def run_logged(command: list[str], log: BinaryIO, stdout_to: BinaryIO | None = None, verbose: bool = False,
               on_tick: Callable[[float], None] | None = None, stop: threading.Event | None = None,
               env: dict[str, str] | None = None) -> int:
    """Run ``command`` in the repository: its standard error, and its standard output unless ``stdout_to`` takes
    it, go to ``log``, and with ``verbose`` to this process's console too; ``stop``, once set, terminates it;
    ``env`` is added to its environment (which always holds ``PYTHONUNBUFFERED=1``). Returns the exit code."""
    start = time.time()
    # unbuffered: a Python command's standard output reaches the log as it prints, in order with its standard error
    # (buffered, a failing command's last prints would land after its traceback, and the progress line would lag)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    if verbose:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=stdout_to or subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env)
        lock = threading.Lock()  # one log, two streams
        copiers = [threading.Thread(target=copy_stream, args=(pipe, log, console, lock))
                   for pipe, console in ((process.stdout, sys.stdout), (process.stderr, sys.stderr)) if pipe]
        for copier in copiers:
            copier.start()
    else:
        process, copiers = subprocess.Popen(command, cwd=REPO_ROOT, stdout=stdout_to or log, stderr=log, env=env), []
    while True:
        try:
            code = process.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                process.terminate()
                try:
                    code = process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    code = process.wait()
                break
            if on_tick is not None:
                on_tick(time.time() - start)
    for copier in copiers:
        copier.join()
    return code


def copy_stream(pipe: BinaryIO, log: BinaryIO, console: TextIO, lock: threading.Lock) -> None:
    """Copy a child's output to its log and the console as it arrives (progress bars redraw in place)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := os.read(pipe.fileno(), 65536):
        with lock:
            log.write(chunk)
            log.flush()
        console.write(decoder.decode(chunk))
        console.flush()
    pipe.close()


def log_tail(path: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log, a progress bar (redrawn with carriage returns) as it was last drawn."""
    text = path.read_text(encoding="utf-8", errors="replace")
    drawn = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")]
    while drawn and not drawn[-1].strip():
        drawn.pop()
    return drawn[-lines:]


def add_demo_beam_arguments(parser) -> None:
    """The options of a bench that decodes the demo's model with a CTC beam + LM (``--model --lm --alpha --beta
    --beam-size``), each defaulting to the demo pipeline's."""
    parser.add_argument("--model", type=Path, default=DEMO_ASR_MODEL, help=".nemo CTC model (default: the demo's)")
    parser.add_argument("--lm", type=Path, default=DEMO_LM, help="token ARPA (default: the demo's)")
    parser.add_argument("--alpha", type=float, default=PIPELINE_ALPHA, help="the beam's LM weight (default: the pipeline's)")
    parser.add_argument("--beta", type=float, default=PIPELINE_BETA,
                        help="the beam's bonus per token (default: the pipeline's)")
    parser.add_argument("--beam-size", type=int, default=PIPELINE_BEAM, help="CTC beams (default: the pipeline's)")


def demo_decoding() -> DecodingSettings:
    """The pipeline's ASR decoding for the demo's model: joint decoding, the beam search with DEMO_LM at the tuned
    width and weights proposing beside Whisper's, the CTC model judging at the tuned weights."""
    return JointSettings(beam_size=PIPELINE_BEAM, ngram_lm=str(DEMO_LM), alpha=PIPELINE_ALPHA, beta=PIPELINE_BETA,
                         whisper_beam=JOINT_WHISPER_BEAM, ctc_weight=JOINT_CTC_WEIGHT, lm_weight=JOINT_LM_WEIGHT,
                         token_bonus=JOINT_TOKEN_BONUS, whisper_sure=JOINT_WHISPER_SURE,
                         ctc_candidates=JOINT_CTC_CANDIDATES, whisper_window=JOINT_WHISPER_WINDOW,
                         ctc_spacing=JOINT_CTC_SPACING, blank_skip=BEAM_BLANK_SKIP)


def write_demo_decoding() -> None:
    """Save :func:`demo_decoding` and DEMO_MIN_CONFIDENCE as the demo model's decoding.json (untouched when it
    already says the same)."""
    write_decoding_file(DEMO_DECODING, demo_decoding(), min_confidence=DEMO_MIN_CONFIDENCE)


def asr_summary(summary_json: Path) -> str:
    summary = json.loads(summary_json.read_text())
    before, after = summary.get("test_before", {}), summary["test_after"]
    return (f"test-clean (held-out voices) WER {100 * before.get('wer', float('nan')):.1f}% -> "
            f"{100 * after['wer']:.1f}%, {summary['global_step']} steps")


def slm_summary(metrics_json: Path) -> str:
    """Validation loss on answer tokens (what the model is trained on), BLEU-4/ROUGE-L and the well-formed share of
    the test rows' answers, before -> after (after alone when the starting model was not scored)."""
    metrics = json.loads(metrics_json.read_text())
    after = metrics["after"]
    before = metrics.get("before")
    shown = lambda key, spec: (f"{format(before[key], spec)} -> " if before and before.get(key) is not None else "") \
        + format(after[key], spec)  # noqa: E731
    # slm.metrics.well_formed of the test rows' answers beside metrics.json (slm/ cannot read duet.data.lexicon's words)
    generations = metrics_json.parent / "generations_after.jsonl"
    records = read_jsonl(generations) if generations.is_file() else []
    share = well_formed_share([r["generation"] for r in records], answer_words(),
                              [f"{r['instruction']} {r['input']}" for r in records])
    well_formed = f", well-formed {share:.0f}%" if share is not None else ""
    return (f"val answer loss {shown('masked_loss', '.2f')} (ppl {shown('perplexity', '.1f')}), "
            f"BLEU-4 {shown('bleu4', '.1f')}, ROUGE-L {shown('rougeL', '.1f')}{well_formed}")


def reference_answers(split: str = "test-clean") -> dict[str, str]:
    """{request text: the answer the Alpaca sample's generator gives it} for the bundled sample's requests
    whose template has a computed answer (``duet.synth.alpaca_sample.CORPUS_ANSWERS``)."""
    return {s.text: CORPUS_ANSWERS[s.template](s.slots) for s in sample_sentences(SAMPLE_SEED, SAMPLE_COUNTS)[split]
            if s.template in CORPUS_ANSWERS}


def answer_scores(answers: list[dict], texts: dict[str, str]) -> dict:
    """``slm.metrics.assistant_scores`` of the pipeline's responses against the reference answers of what
    was actually said (``texts``: file -> spoken text), over the requests that have a reference answer."""
    references = reference_answers()
    scored = [(texts[a["file"]], a["response"] or "") for a in answers if texts[a["file"]] in references]
    rows = [{"instruction": text, "input": "", "output": references[text]} for text, _ in scored]
    return assistant_scores(rows, [response for _, response in scored])


def judged_answers(rows: list[dict], said: dict[str, str]) -> list[dict]:
    """The pipeline's answers (``rows``, tools/pipeline.py's JSON lines) to the requests that have a reference answer,
    each judged by ``slm.metrics.check_answer`` against what was actually said (``said``: file -> spoken text), in
    their order: the row with ``said``, ``correct`` and ``why`` (what is wrong; a transcript the pipeline did not
    understand says so, with its confidence)."""
    references = reference_answers()
    judged = []
    for row in rows:
        text = said[row["file"]]
        if text not in references:
            continue
        verdict = check_answer(text, references[text], row["response"] or "")
        why = verdict.why
        if row.get("understood") is False and row.get("confidence") is not None:
            why = f"not understood (confidence {row['confidence']:.2f})"
        judged.append({**row, "said": text, "correct": verdict.correct, "why": why})
    return judged


def pipeline_summary(answers_jsonl: Path, requests_manifest: Path, right: int = 3, wrong: int = 2) -> str:
    """Transcript WER of the pipeline's answers against the requests manifest's texts, how many it did not
    understand, how well the answers fit the requests (:func:`answer_scores`) and how many are correct
    (:func:`judged_answers`); then examples chosen by that judgement, never by hand: the first ``right`` correct
    answers, then the first ``wrong`` wrong ones, labelled with what is wrong."""
    references = {e["audio_filepath"]: e["text"] for e in read_jsonl(requests_manifest)}
    rows = read_jsonl(answers_jsonl)
    ok = [r for r in rows if not r.get("error")]
    refs = [references[r["file"]] for r in ok]
    # scored as spoken (a joint decoding's transcript keeps Whisper's casing, punctuation and digits)
    wer = jiwer.wer([normalize_spoken(t) or "<empty>" for t in refs],
                    [normalize_spoken(r["transcript"] or "") for r in ok]) if ok else float("nan")
    scores = answer_scores(ok, references)
    judged = judged_answers(ok, references)
    correct = [r for r in judged if r["correct"]]
    unsure = [r for r in ok if r.get("understood") is False and r["transcript"]]
    withheld = [r for r in ok if r.get("withheld")]
    lines = [f"{len(ok)}/{len(rows)} held-out assistant requests, transcript WER {100 * wer:.1f}%; "
             f"{len(unsure)} not understood (confidence below the threshold: answered {NOT_UNDERSTOOD_REPLY!r}); "
             f"{len(withheld)} answer(s) withheld (the language model unsure of a word: declined or \"I don't know\")",
             f"    answers to the {scores['assistant_rows']} with a reference answer: right kind "
             f"{scores['assistant_kind']:.0f}%, on topic (right kind + all slot words) "
             f"{scores['assistant_on_topic']:.0f}%",
             f"    correct (on topic, and any sum, conversion or temperature worked out right: slm.metrics."
             f"check_answer): {len(correct)} of {len(judged)}"]
    well_formed = well_formed_share([r["response"] or "" for r in ok], answer_words(), [r["transcript"] or "" for r in ok])
    if well_formed is not None:
        lines.append(f"    well-formed (every word English, no loop: slm.metrics.well_formed): {well_formed:.0f}% of all "
                     f"{len(ok)} answers")
    for r in correct[:right]:
        lines.append(f"    right: said {r['said']!r}, heard {r['transcript']!r} -> {r['response']!r}")
    if not correct:
        lines.append(f"    right: none of the {len(judged)}")
    for r in [r for r in judged if not r["correct"]][:wrong]:
        lines.append(f"    WRONG, {r['why']}: said {r['said']!r}, heard {r['transcript']!r} -> {r['response']!r}")
    return "\n".join(lines)


def next_steps(requests_manifest: Path) -> str:
    """The demo's closing line: the commands that answer with the models it trained (a held-out request to try)."""
    models = f"--asr-model {shown(DEMO_ASR_MODEL)} --slm-model {shown(DEMO_SLM_MODEL)}"
    if not (DEMO_ASR_MODEL.is_file() and (DEMO_SLM_MODEL / "config.json").is_file()):
        return (f"next: {python_command('tools/demo.py', '--from', 'asr')} (tools/pipeline.py and tools/serve.py "
                "answer with the models of its asr and slm stages)")
    requests = read_jsonl(requests_manifest) if requests_manifest.is_file() else []
    audio = Path(requests[0]["audio_filepath"]) if requests else sorted(
        (REPO_ROOT / "samples" / "LibriSpeech" / "test-clean").rglob("*.flac"))[0]
    return (f"next: try {python_command('tools/pipeline.py', shown(audio), models)}\n"
            f"      or  {python_command('tools/serve.py', models)}   (then open http://127.0.0.1:8000 and record a "
            "question)")


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it, as the stage commands are shown."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def generalisation_table(report_json: Path) -> str:
    """The WER table of one bench/asr_generalisation.py report, one set a line."""
    rows = json.loads(report_json.read_text())["rows"]
    return "\n".join(f"    {r['set']:<22} {r['utterances']:>5} utts  WER {100 * r['wer']:6.2f}%" for r in rows)


def generalisation_summary(before_json: Path, after_json: Path, decoding: str = "greedy",
                           real_sets: bool = True) -> str:
    """WER before (the base) -> after (the demo's fine-tune) on every set both reports scored, both decoded as
    ``decoding`` says; a real-speech set that got worse by more than REAL_SET_TOLERANCE points is flagged, and
    their absence is said when ``real_sets`` were asked for."""
    before = {r["set"]: r for r in json.loads(before_json.read_text())["rows"]}
    lines, any_real = [], False
    for r in json.loads(after_json.read_text())["rows"]:
        if r["set"] not in before:
            continue
        old, new = 100 * before[r["set"]]["wer"], 100 * r["wer"]
        real = r["distance"].startswith("real")
        any_real |= real
        flag = f"  << worse by more than {REAL_SET_TOLERANCE:g} points" if real and new - old > REAL_SET_TOLERANCE else ""
        lines.append(f"    {r['set']:<22} WER {old:6.2f}% -> {new:6.2f}% ({new - old:+.2f}){flag}")
    if real_sets and not any_real:
        lines.append("    (no real-speech set: ../shared/real_speech not found)")
    return f"base -> demo fine-tune, {decoding}:\n" + "\n".join(lines)
