#!/usr/bin/env python
r"""Joint decoding (Whisper tiny.en proposes, the fine-tuned CTC model judges): its weights chosen on held-in data,
then WER held out beside Whisper's own beam search and the CTC beam alone, from the same candidates.

Usage:
  # the demo's model, LM and beam (after python tools/demo.py); weights chosen on the sample's dev voices and
  # speechocean762/train's 8 dev speakers (those of their utterances the fine-tune's real mix did not hold), then
  # the held-out real sets of ../shared/real_speech
  python bench/joint_decoding.py --dev manifests/dev-clean.json experiments/demo_realtext/train.dev.json \
      --exclude experiments/demo_realmix/train.json --real-speech ../shared/real_speech --test manifests/test-clean.json
  python bench/joint_decoding.py --model my.nemo --lm my_token6.arpa --dev my_dev.json --test my_test.json

  # native speech held in too: LibriSpeech speakers with no reference text, labelled by a stronger teacher than the
  # proposer (Whisper base, beam 5: tools/pseudo_label.py's usage); the weights minimise the geometric mean of the
  # dev WER and the disagreement with those labels
  python bench/joint_decoding.py --dev manifests/dev-clean.json experiments/demo_realtext/train.dev.json \
      --dev-pseudo experiments/native_dev/librispeech_base.json --exclude experiments/demo_realmix/train.json \
      --real-speech ../shared/real_speech --test manifests/test-clean.json --whisper-window 15 --blank-skip 0.999

  # another judge at the demo's own weights beside the ones chosen for it (e.g. a fine-tune with more speakers):
  # every set's WER at the weights of a saved decoding.json, as a column of its own
  python bench/joint_decoding.py --model other.nemo --weights-of experiments/demo_asr/decoding.json --dev ... \
      --out experiments/bench/other/joint_decoding.md

Steps:
  1. Every utterance's candidates (duet/asr/decoding/joint.py): Whisper tiny.en's beam search n-best (--whisper-beam,
     CTranslate2 int8 as faster-whisper runs it) and the CTC beam + LM n-best (the demo pipeline's beam, alpha,
     beta), each with Whisper's teacher-forced log-likelihood, the CTC log-likelihood of its spoken form, the LM's
     and its length. Cached in --out's folder (candidates_<manifest>.json), read again on a later run.
  2. On --dev: every weighting of the grid (Whisper reading the candidate as written, or as written and spoken, x
     --ctc x --lm-weights x --bonus x --sure x --ctc-spacing) picks one candidate per utterance. Its dev error is
     the WER over all --dev utterances together; with --dev-pseudo, the geometric mean of that and of the word error
     rate against the teacher's labels (a disagreement, not a WER: the teacher errs too). The one-standard-error rule
     chooses: among the weightings whose dev error is within one standard error (bootstrap over utterances) of the
     lowest, the one leaving the most to Whisper (least CTC + LM weight, then the judge's least say in where words
     break, then Whisper's sure hypotheses kept) -- without --dev-pseudo the dev sets hold no native speech, where
     Whisper is far the better judge.
  3. On each test manifest: WER of Whisper's own first hypothesis, of the CTC beam's first, of the joint choice at
     the chosen weights, and of the best candidate (the oracle).
Writes a markdown report (--out) and a JSON beside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path

import jiwer
import torch

from duet.asr import decoding, inference
from duet.asr.decoding.beam import beam_config
from duet.asr.decoding.beam_lm import lm_for_beam_batch
from duet.asr.decoding.file import DecodingFileError, read_decoding_file
from duet.asr.decoding.joint import (WHISPER_MAX_LENGTH, WHISPER_WINDOW_SECONDS, JointDecoding, Judged, JointSettings,
                                     JointWeights, WhisperProposer, best_judged, ctc_spelling)
from duet.asr.decoding.synchronous import GuidedWhisperProposer
from duet.asr.decoding.nemo_decoding import merge_blank_runs, nemo_ctc_decoding
from duet.asr.decoding.rescoring import nbest_candidates
from duet.asr.generalisation import build_manifest, real_sets
from duet.asr.scoring import score
from duet.errors import DuetError
from duet.demo.stages import add_demo_beam_arguments
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.data.manifest import read_manifest
from duet.asr.ngram import load_token_lm
from duet.text import normalize_text
from duet.asr.whisper_gpt2 import WHISPER_PREFIX
from duet.asr.whisper_rescoring import WhisperRescorer

REAL_TEST_SETS = ("speechocean762/test", "read_sentences", "common_voice")
# (whisper, whisper_spoken) weights tried: Whisper reading each candidate as written, or as written and as spoken
# halved (as spoken alone lost on every held-in set in the first grid: RESULTS.md, "Joint decoding")
WHISPER_READINGS = ((1.0, 0.0), (0.5, 0.5))
BOOTSTRAP_DRAWS = 200
RATE_FLOOR = 1e-4  # a word error rate of 0 would make every weighting's geometric mean 0


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_demo_beam_arguments(p)
    p.add_argument("--whisper-beam", type=int, default=5, help="Whisper's beam and n-best (default: 5, faster-whisper's)")
    p.add_argument("--whisper-window", type=float, default=WHISPER_WINDOW_SECONDS,
                   help="seconds of audio Whisper's encoder reads, the utterance padded (default: 30, Whisper's own; "
                        "the JointSettings option whisper_window). Give another --out folder: the candidate caches "
                        "are named by manifest only")
    p.add_argument("--dev", type=Path, nargs="+", required=True, help="manifests the weights are chosen on (held in)")
    p.add_argument("--dev-pseudo", type=Path, nargs="+", default=[],
                   help="held-in manifests whose text a teacher wrote (tools/pseudo_label.py): speech with no "
                        "reference, e.g. native speakers; the weights minimise the geometric mean of the --dev WER "
                        "and the disagreement with these labels")
    p.add_argument("--exclude", type=Path, nargs="*", default=[],
                   help="manifests the model trained on: their utterances are dropped from --dev")
    p.add_argument("--test", type=Path, nargs="*", default=[], help="manifests scored at the chosen weights")
    p.add_argument("--real-speech", type=Path, default=None,
                   help=f"../shared/real_speech: adds its held-out sets {', '.join(REAL_TEST_SETS)} to --test")
    p.add_argument("--ctc", default="0,0.1,0.3,0.5,0.7,1,1.5,2", help="CTC weights to try")
    p.add_argument("--lm-weights", default="0,0.2,0.5,1,1.5", help="LM weights to try")
    p.add_argument("--bonus", default="0,1,2,4,6", help="per-token bonuses to try")
    p.add_argument("--sure", default="0,-0.3,-0.5,-0.8",
                   help="whisper_sure values to try (Whisper's first hypothesis kept above this log-likelihood per word)")
    p.add_argument("--ctc-spacing", default="1,0",
                   help="ctc_spacing values to try (how far the CTC judge tells apart the same letters with other "
                        "word breaks; 0: Whisper, the LM and the length do)")
    p.add_argument("--synchronous", type=float, default=0.0,
                   help="label-synchronous search: the CTC prefix score's weight inside Whisper's beam search "
                        "(duet/asr/decoding/synchronous.py; 0: CTranslate2's own beam search). Give another --out "
                        "folder: the candidate caches are named by manifest only")
    p.add_argument("--blank-skip", type=float, default=0.0,
                   help="the CTC beam reads each run of frames where blank is at least this likely as one frame "
                        "(the beam strategies' blank_skip; default 0: every frame). Give another --out folder: the "
                        "candidate caches are named by manifest only")
    p.add_argument("--threads", type=int, default=2, help="torch and CTranslate2 CPU threads")
    p.add_argument("--weights-of", type=Path, default=None, metavar="DECODING_JSON",
                   help="also score every set at the weights of this saved joint decoding (e.g. the demo's "
                        "experiments/demo_asr/decoding.json): another model judging at the same weights")
    p.add_argument("--out", type=Path, default=EXPERIMENTS / "bench" / "joint_decoding.md")
    return p


def candidates_of(joint: JointDecoding, beam, model, manifest: Path, cache: Path, blank_skip: float = 0.0) -> dict:
    """The manifest's references and every utterance's judged candidates (``beam``: NeMo's CTC beam decoding keeping
    its n-best, reading runs of sure blank as one frame where ``blank_skip``; read from ``cache`` when it is there)."""
    entries = read_manifest(manifest)
    if cache.is_file():
        part = json.loads(cache.read_text(encoding="utf-8"))
        if part["ids"] != [Path(e["audio_filepath"]).stem for e in entries]:
            raise DuetError(f"{cache} holds other utterances than {manifest}: delete it to compute them again")
        return part | {"refs": [e["text"] for e in entries]}  # the manifest's text, which may have been relabelled
    paths = [e["audio_filepath"] for e in entries]
    start = time.perf_counter()
    cached = inference.compute_log_probs(model, paths)
    judged: list[list[dict]] = [[] for _ in paths]
    done = 0
    with torch.inference_mode():
        for batch, log_probs, lengths in cached.batches:
            audios = [inference.load_audio(paths[i], cached.sample_rate) for i in batch]
            nbest = nbest_candidates(beam, *merge_blank_runs(log_probs, lengths, beam.blank_id, blank_skip))
            for i, candidates in zip(batch, joint.judge(nbest, log_probs, lengths, audios)):
                judged[i] = [vars(j) | {"tokens": list(j.tokens)} for j in candidates]
            done += len(batch)
            print(f"  {manifest.name}: {done}/{len(paths)}", file=sys.stderr, flush=True)
    part = {"manifest": str(manifest), "ids": [Path(p).stem for p in paths], "refs": [e["text"] for e in entries],
            "durations": [float(e["duration"]) for e in entries], "judged": judged,
            "seconds": round(time.perf_counter() - start, 1)}
    write_text_atomic(cache, json.dumps(part) + "\n")
    return part


def without(part: dict, ids: set[str]) -> dict:
    """``part`` without the utterances named in ``ids``."""
    keep = [k for k, i in enumerate(part["ids"]) if i not in ids]
    return part | {key: [part[key][k] for k in keep] for key in ("ids", "refs", "durations", "judged")}


def _judged(part: dict) -> list[list[Judged]]:
    """The part's candidates as :class:`Judged` (read from its JSON once, kept in the part)."""
    if "_judged" not in part:
        part["_judged"] = [[Judged(**(j | {"tokens": tuple(j["tokens"])})) for j in utterance]
                           for utterance in part["judged"]]
    return part["_judged"]


def wer_of(parts: list[dict], pick) -> float:
    """WER over all ``parts`` together of the spoken forms ``pick(candidates)`` chooses per utterance."""
    ids, refs, hyps, durations = [], [], [], []
    for part in parts:
        for k, candidates in enumerate(_judged(part)):
            chosen = pick(candidates)
            ids.append(part["ids"][k]), refs.append(part["refs"][k]), durations.append(part["durations"][k])
            hyps.append(chosen.spoken if chosen is not None else "")
    return score(ids, refs, hyps, durations).summary["wer"]


def utterance_errors(parts: list[dict], weights: JointWeights) -> list[tuple[int, int]]:
    """(word errors, reference words) of each utterance under ``weights``."""
    out = []
    for part in parts:
        for k, candidates in enumerate(_judged(part)):
            chosen = best_judged(candidates, weights)
            ref = normalize_text(part["refs"][k]).split()
            measures = jiwer.process_words(" ".join(ref) or "<empty>", normalize_text(chosen.spoken if chosen else "")
                                           or "<empty>")
            out.append((measures.substitutions + measures.deletions + measures.insertions, len(ref)))
    return out


def dev_error(groups: list[list[dict]], pick) -> float:
    """The geometric mean over ``groups`` (the labelled dev, then the pseudo-labelled one where given) of each group's
    word error rate over its utterances together: scale-free, so that a tenth fewer errors counts alike in both
    (their rates differ several-fold: RESULTS.md "Native speech held in")."""
    return geometric_mean([wer_of(group, pick) for group in groups])


def geometric_mean(rates: list[float]) -> float:
    """Of rates floored at :data:`RATE_FLOOR`: a group without errors still lets the others rank the weightings."""
    return statistics.geometric_mean([max(rate, RATE_FLOOR) for rate in rates])


def standard_error(groups: list[list[dict]], weights: JointWeights) -> float:
    """The standard error of :func:`dev_error` under ``weights``, by resampling each group's utterances
    (BOOTSTRAP_DRAWS draws)."""
    errors = [utterance_errors(group, weights) for group in groups]
    rng = random.Random(0)
    draws = []
    for _ in range(BOOTSTRAP_DRAWS):
        rates = []
        for group in errors:
            sample = [group[rng.randrange(len(group))] for _ in group]
            rates.append(sum(e for e, _ in sample) / max(1, sum(n for _, n in sample)))
        draws.append(geometric_mean(rates))
    return statistics.pstdev(draws)


def leaning_to_whisper(result: tuple[float, dict]) -> tuple:
    """The one-standard-error rule's order: among weightings the dev set cannot tell apart, the one that leaves the
    most to Whisper (whose English is general; the CTC judge was fitted to ~100 speakers): the least CTC + LM
    weight, then the least of the judge's say in where words break, then the surest-kept Whisper hypotheses, then the
    lower WER."""
    weights = result[1]
    return (weights["ctc"] + weights["lm"], weights["ctc_spacing"], weights["whisper_sure"] == 0,
            weights["whisper_sure"], result[0])


def whisper_first(candidates: list[Judged]) -> Judged | None:
    return next((c for c in candidates if c.from_whisper), None)


def beam_first(candidates: list[Judged]) -> Judged | None:
    return next((c for c in candidates if not c.from_whisper), None)


def oracle_pick(candidates: list[Judged], ref: str) -> Judged | None:
    """The candidate with the fewest word errors against the reference (what no weighting can beat)."""
    if not candidates:
        return None
    ref = normalize_text(ref) or "<empty>"
    return min(candidates, key=lambda c: jiwer.wer(ref, normalize_text(c.spoken) or "<empty>"))


def oracle_wer(parts: list[dict]) -> float:
    pick = oracle_pick
    ids, refs, hyps, durations = [], [], [], []
    for part in parts:
        for k, candidates in enumerate(_judged(part)):
            chosen = pick(candidates, part["refs"][k])
            ids.append(part["ids"][k]), refs.append(part["refs"][k]), durations.append(part["durations"][k])
            hyps.append(chosen.spoken if chosen is not None else "")
    return score(ids, refs, hyps, durations).summary["wer"]


def saved_weights(path: Path) -> JointWeights:
    """The judge's weights of a saved decoding file; a ``DuetError`` naming ``--weights-of`` when it cannot be read or
    is not a joint decoding."""
    try:
        settings = read_decoding_file(path).settings
    except DecodingFileError as e:
        raise DuetError(f"--weights-of {e}") from None
    if not isinstance(settings, JointSettings):
        raise DuetError(f"--weights-of {path}: not a joint decoding (strategy {settings.strategy!r})")
    return settings.weights()


def judged_as_decoded(candidates: list[Judged], ctc_candidates: int) -> list[Judged]:
    """The candidates a decoding with ``ctc_candidates`` judges (``JointDecoding._judged``): Whisper's, the empty
    text, and the beam's first ``ctc_candidates`` of the others (the cache keeps them in the beam's order; 0: all)."""
    if ctc_candidates <= 0:
        return candidates
    kept, from_beam = [], 0
    for candidate in candidates:
        if candidate.from_whisper or not candidate.spoken or from_beam < ctc_candidates:
            kept.append(candidate)
            from_beam += not candidate.from_whisper and bool(candidate.spoken)
    return kept


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    tests = list(args.test)
    if args.real_speech is not None:
        made = args.out.parent / "joint_manifests"
        tests += [build_manifest(s, made) for s in real_sets(args.real_speech, REAL_TEST_SETS)]
    if not 0 <= args.synchronous <= 1:
        raise DuetError(f"--synchronous must be in 0..1, got {args.synchronous:g}")
    if not 0 <= args.blank_skip <= 1:
        raise DuetError(f"--blank-skip must be in 0..1, got {args.blank_skip:g}")
    if not 1 <= args.whisper_window <= WHISPER_WINDOW_SECONDS:
        raise DuetError(f"--whisper-window must be in 1..{WHISPER_WINDOW_SECONDS:g} s, got {args.whisper_window:g}")
    for path in [args.model, args.lm, *args.dev, *args.dev_pseudo, *tests]:
        if not Path(path).is_file():
            raise DuetError(f"no such file: {path}")
    fixed = saved_weights(args.weights_of) if args.weights_of is not None else None
    at_fixed_weights = (lambda c: best_judged(judged_as_decoded(c, fixed.ctc_candidates), fixed)) if fixed else None
    torch.set_num_threads(args.threads)
    model = inference.load_asr_model(args.model, device="cpu")
    settings = decoding.decoding_settings("beam_lm", beam_size=args.beam_size, ngram_lm=str(args.lm),
                                          alpha=args.alpha, beta=args.beta)
    beam = nemo_ctc_decoding(model, beam_config(model, settings, lm_for_beam_batch(settings.ngram_lm, model),
                                                settings.alpha, n_best=True))
    proposer = WhisperProposer(args.whisper_beam, args.whisper_beam, threads=args.threads, window=args.whisper_window)
    scorer = WhisperRescorer()
    if args.synchronous:
        proposer = GuidedWhisperProposer(proposer, scorer.decoder, ctc_spelling(model.tokenizer),
                                         int(model.decoding.blank_id), args.whisper_beam, args.synchronous,
                                         WHISPER_MAX_LENGTH - len(WHISPER_PREFIX))
    joint = JointDecoding(proposer, scorer, JointWeights(ctc=0.1, whisper_spoken=1.0), model.tokenizer,
                          int(model.decoding.blank_id), lm=load_token_lm(args.lm, int(model.tokenizer.vocab_size)))
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def part_of(manifest: Path) -> dict:
        cache = args.out.parent / f"candidates_{manifest.parent.name}_{manifest.stem}.json"
        return candidates_of(joint, beam, model, manifest, cache, args.blank_skip)

    trained_on = {Path(e["audio_filepath"]).stem for m in args.exclude for e in read_manifest(m)}
    dev = [without(part_of(m), trained_on) for m in args.dev]
    pseudo = [without(part_of(m), trained_on) for m in args.dev_pseudo]
    groups = [dev, pseudo] if pseudo else [dev]
    for group, flag in zip(groups, ("--dev", "--dev-pseudo")):
        if not sum(len(part["ids"]) for part in group):
            raise DuetError(f"{flag}: no utterance is left once the model's training utterances (--exclude) are dropped")
    print(f"joint_decoding: dev {sum(len(p['ids']) for p in dev)} utterances "
          f"({len(trained_on)} of the model's training utterances left out)"
          + (f", {sum(len(p['ids']) for p in pseudo)} pseudo-labelled" if pseudo else ""))
    grid = list(itertools.product(WHISPER_READINGS, floats(args.ctc), floats(args.lm_weights), floats(args.bonus),
                                  floats(args.sure), floats(args.ctc_spacing)))
    results = []
    for (whisper, spoken), ctc, lm, bonus, sure, spacing in grid:
        weights = JointWeights(ctc=ctc, lm=lm, token_bonus=bonus, whisper=whisper, whisper_spoken=spoken,
                               whisper_sure=sure, ctc_spacing=spacing)
        results.append((dev_error(groups, lambda c, w=weights: best_judged(c, w)), vars(weights)))
    lowest = min(results, key=lambda r: r[0])
    margin = standard_error(groups, JointWeights(**lowest[1]))
    best = min((r for r in results if r[0] <= lowest[0] + margin), key=leaning_to_whisper)
    weights = JointWeights(**best[1])
    measure = "dev error (geometric mean of the dev WER and the disagreement with the teacher)" if pseudo else "dev WER"
    print(f"joint_decoding: lowest {measure} {100 * lowest[0]:.2f} % at {JointWeights(**lowest[1])}; within one "
          f"standard error ({100 * margin:.2f}) the most Whisper-leaning: {100 * best[0]:.2f} % at {weights} "
          f"(Whisper first {100 * dev_error(groups, whisper_first):.2f} %, beam first "
          f"{100 * dev_error(groups, beam_first):.2f} %, {len(grid)} weightings tried)")
    if fixed is not None:
        print(f"joint_decoding: at {args.weights_of}'s weights ({fixed}): dev WER "
              f"{100 * wer_of(dev, at_fixed_weights):.2f} %"
              + (f", disagreement with the teacher's labels {100 * wer_of(pseudo, at_fixed_weights):.2f} %"
                 if pseudo else ""))
    if pseudo:
        print(f"joint_decoding: at those weights, dev WER {100 * wer_of(dev, lambda c: best_judged(c, weights)):.2f} %, "
              f"disagreement with the teacher's labels "
              f"{100 * wer_of(pseudo, lambda c: best_judged(c, weights)):.2f} % (Whisper first "
              f"{100 * wer_of(dev, whisper_first):.2f} / {100 * wer_of(pseudo, whisper_first):.2f} %)")
    rows = []
    for manifest in tests:
        part = part_of(manifest)
        rows.append({"set": manifest.stem, "utterances": len(part["ids"]),
                     "whisper_first": wer_of([part], whisper_first), "beam_first": wer_of([part], beam_first),
                     "joint": wer_of([part], lambda c: best_judged(c, weights)), "oracle": oracle_wer([part]),
                     **({"fixed": wer_of([part], at_fixed_weights)} if fixed is not None else {}),
                     "seconds": part["seconds"], "audio_seconds": round(sum(part["durations"]), 1)})
    at_fixed = f" at {args.weights_of}'s weights |" if fixed is not None else ""
    lines = ["| set | utterances | Whisper beam first | CTC beam + LM first | joint | oracle | joint / Whisper |"
             + at_fixed, "|---|---|---|---|---|---|---|" + ("---|" if fixed is not None else "")]
    for r in rows:
        ratio = r["joint"] / r["whisper_first"] if r["whisper_first"] else float("nan")
        lines.append(f"| {r['set']} | {r['utterances']} | {100 * r['whisper_first']:.2f} | {100 * r['beam_first']:.2f} | "
                     f"**{100 * r['joint']:.2f}** | {100 * r['oracle']:.2f} | {ratio:.2f} |"
                     + (f" {100 * r['fixed']:.2f} |" if fixed is not None else ""))
    head = (f"Weights chosen on {', '.join(str(m) for m in [*args.dev, *args.dev_pseudo])}: {weights} ({measure} "
            f"{100 * best[0]:.2f} %; the lowest, {100 * lowest[0]:.2f} %, at {JointWeights(**lowest[1])}; one standard "
            f"error {100 * margin:.2f})\n\n")
    write_text_atomic(args.out, head + "\n".join(lines) + "\n")
    write_text_atomic(args.out.with_suffix(".json"), json.dumps(
        {"weights": vars(weights), "dev_error": best[0], "dev_measure": measure, "grid": results, "rows": rows},
        indent=1) + "\n")
    print(head + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
