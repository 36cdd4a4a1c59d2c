r"""Choose a language model's answer floor (answer.min_token_prob): below which token probability an answer is
withheld, and what that does to the answers on requests it was not chosen on.

Usage:
    # the demo's preset, four seeds (slm/finetune.py --config-name slm_whisper_demo seed=N output_dir=...)
    python bench/slm_answer_floor.py experiments/slm_s123 experiments/slm_s7 experiments/slm_s11 experiments/slm_s5 \
        --json experiments/answer_floor.json

Every request is answered once per model, greedily with no repetition penalty (as the fine-tune's own evaluation;
the pipeline's 1.1 changed no answer's withholding on 58 requests), with the probability the model gave the least
likely token of its answer (``generate_scored_texts``). An answer is withheld at a floor when that probability is
below it, and replaced by what ``slm.tool_calls.unsure_answer`` says instead: the decline of the action by name, or
"I don't know that." for a question.

The tune sets choose the floor; the held-out sets are only scored, at 0 (off) and at the chosen floor:

* --fresh N (default 300): requests of the sample's own generator (``duet.synth.alpaca_sample.make_examples``, seed
  --fresh-seed) that are not rows of samples/alpaca_sample.json, each right when ``slm.metrics.check_answer`` accepts
  it against the generator's answer (the right kind, every slot word, every value worked out);
* --tune FILE...: requests in samples/open_requests.json's form (default samples/unseen_requests.json, written
  without the templates), right when the answer names every keyword group (``slm.metrics.names_keywords``) and,
  where a request says what a right answer does (``expect``), performs it (no decline) or declines it;
* --held-out FILE... (default samples/open_requests.json): scored by the issue's rule (keywords only), never used to
  choose.

The rule: of 0 (off) and --floors, the floor of the largest gain over the models together: the wrong answers it
withholds (a user no longer misled) less --right-cost (2) for each right answer it loses (a wrong answer is often of
use, the right action with one slot wrong; a decline never is); a tie goes to the lower floor. The table shows, per floor, the right answers of each tune set once the withheld ones are
replaced, the right answers lost, the wrong ones withheld and the gain. Prints the chosen floor and, per model and
held-out set, the right answers, the actions on topic and the questions answered with an invented fact, before ->
after; --json writes everything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from duet.errors import DuetError
from duet.foundation import SAMPLES_DIR
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.synth.alpaca_sample import make_examples
from slm.generation import GenerationSettings, generate_scored_texts, load_model
from slm.metrics import OPEN_REQUESTS, check_answer, is_refusal, load_open_requests, names_keywords
from slm.tool_calls import DECLINE, execute_calls, unsure_answer

UNSEEN_REQUESTS = SAMPLES_DIR / "unseen_requests.json"
FLOORS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6)
#: a right answer lost weighs as much as this many wrong ones withheld: a wrong answer is often of use (the right
#: action with one slot wrong, a.m. for p.m.), a decline never is
RIGHT_COST = 2.0


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path, help="model folders (slm/finetune.py outputs)")
    parser.add_argument("--fresh", type=int, default=300, help="generator requests outside the sample (0 = none)")
    parser.add_argument("--fresh-seed", type=int, default=99, help="the generator's seed for them (the sample's: 0)")
    parser.add_argument("--tune", nargs="*", type=Path, default=[UNSEEN_REQUESTS], help="keyword request files")
    parser.add_argument("--held-out", nargs="*", type=Path, default=[OPEN_REQUESTS], help="keyword request files")
    parser.add_argument("--floors", nargs="+", type=float, default=list(FLOORS), help="floors to try (0 always)")
    parser.add_argument("--right-cost", type=float, default=RIGHT_COST,
                        help=f"wrong answers withheld that one right answer lost weighs (default: {RIGHT_COST:g})")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="as the presets' eval.max_new_tokens (64)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the answers and the table here")
    return parser


def fresh_requests(n: int, seed: int) -> list[dict]:
    """``n`` rows of the sample's generator (seed ``seed``) whose instruction no row of the bundled sample has."""
    sample = {row["instruction"] for row in json.loads((SAMPLES_DIR / "alpaca_sample.json").read_text())}
    rows = [row for row in make_examples(max(4000, 3 * n), seed) if row["instruction"] not in sample][:n]
    if len(rows) < n:
        raise DuetError(f"--fresh {n}: only {len(rows)} generator rows outside the sample")
    return [{"set": f"fresh (seed {seed})", "instruction": r["instruction"], "input": r["input"],
             "reference": r["output"]} for r in rows]


def keyword_requests(path: Path) -> list[dict]:
    try:
        requests = [{"set": path.name, "instruction": r["request"], "input": "", "kind": r["kind"],
                     "keywords": r["keywords"], **({"expect": r["expect"]} if "expect" in r else {})}
                    for r in load_open_requests(path)]
    except (OSError, ValueError, KeyError) as e:
        raise DuetError(f"{path}: not a request file like {OPEN_REQUESTS.name} ({e})") from None
    for request in requests:
        if request.get("expect", "do") not in ("do", "decline"):
            raise DuetError(f"{path}: {request['instruction']!r}: expect must be do or decline, got "
                            f"{request['expect']!r}")
    return requests


def declines(answer: str) -> bool:
    return answer.startswith(DECLINE.split("<<")[0]) or is_refusal(answer)


def is_right(request: dict, answer: str) -> bool:
    """A generator row: ``check_answer`` against its answer. A keyword request: it names every keyword group, and,
    where the file says what a right answer does (``expect``), performs it (no decline) or declines it."""
    if "keywords" not in request:
        return check_answer(request["instruction"], request["reference"], answer).correct
    if not names_keywords(answer, request["keywords"]):
        return False
    expect = request.get("expect")
    return expect is None or (expect == "decline") == declines(answer)


def shown(request: dict, answer: dict, floor: float) -> str:
    """What the user reads at ``floor``: the answer, or what replaces it when withheld."""
    return unsure_answer(request["instruction"], answer["text"]).text if answer["least"] < floor else answer["text"]


def floor_table(requests: list[dict], answers: dict[str, list[dict]], floors: list[float],
                right_cost: float = RIGHT_COST) -> list[dict]:
    """Per floor, over every model: the answers right once the withheld ones are replaced, per set and in all; the
    right answers lost (right before, not after); the wrong ones withheld (a user no longer misled by them); the
    gain, wrong ones withheld less ``right_cost`` for each right one lost."""
    table = []
    for floor in floors:
        right: dict[str, int] = {}
        lost = withheld_wrong = 0
        for model_answers in answers.values():
            for request, answer in zip(requests, model_answers):
                text = shown(request, answer, floor)
                was, now = is_right(request, answer["text"]), is_right(request, text)
                right[request["set"]] = right.get(request["set"], 0) + now
                lost += was and not now
                withheld_wrong += not was and text != answer["text"]  # the user reads another
        table.append({"floor": floor, "right": sum(right.values()), "right_per_set": right, "right_lost": lost,
                      "wrong_withheld": withheld_wrong, "gain": withheld_wrong - right_cost * lost})
    return table


def choose_floor(table: list[dict]) -> dict:
    """The row of the largest gain (:func:`floor_table`); a tie goes to the lower floor, and 0 (off, a gain of 0)
    wins when no floor gains."""
    return max(table, key=lambda row: (row["gain"], -row["floor"]))


def held_out_summary(requests: list[dict], answers: list[dict], floor: float) -> dict:
    texts = [shown(r, a, floor) for r, a in zip(requests, answers)]
    actions = [is_right(r, t) for r, t in zip(requests, texts) if r.get("kind") == "action"]
    questions = [(is_right(r, t), is_refusal(t)) for r, t in zip(requests, texts) if r.get("kind") == "knowledge"]
    return {"right": sum(is_right(r, t) for r, t in zip(requests, texts)), "requests": len(requests),
            "actions_on_topic": sum(actions), "actions": len(actions),
            "invented": sum(not right and not refused for right, refused in questions), "questions": len(questions),
            "answers": texts}


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    tune = (fresh_requests(args.fresh, args.fresh_seed) if args.fresh else []) + \
        [r for path in args.tune for r in keyword_requests(path)]
    held_out = {path.name: keyword_requests(path) for path in args.held_out}
    if not tune:
        raise DuetError("nothing to choose the floor on: give --fresh N or --tune FILE")
    every = tune + [r for rows in held_out.values() for r in rows]
    greedy = GenerationSettings(strategy="greedy", max_new_tokens=args.max_new_tokens, repetition_penalty=1.0)
    answers: dict[str, list[dict]] = {}
    for folder in args.models:
        started = time.time()
        tokenizer, model = load_model(folder, device="cpu")
        scored = generate_scored_texts(model, tokenizer, every, greedy, batch_size=16)
        answers[str(folder)] = [{"text": execute_calls(s.text, request=r["instruction"]).text,
                                 "least": s.least_token_prob} for s, r in zip(scored, every)]
        print(f"{folder}: {len(every)} requests answered ({time.time() - started:.0f} s)", flush=True)
    tune_answers = {name: rows[:len(tune)] for name, rows in answers.items()}
    table = floor_table(tune, tune_answers, sorted({0.0, *args.floors}), args.right_cost)
    best = choose_floor(table)
    sets = list(table[0]["right_per_set"])
    print(f"\ntune: {len(tune)} requests x {len(answers)} model(s); right answers per set, once the withheld ones "
          "are replaced")
    print(f"{'floor':>6} " + " ".join(f"{name[:18]:>18}" for name in sets) + f" {'right lost':>11} "
          f"{'wrong withheld':>15} {'gain':>5}")
    for row in table:
        print(f"{row['floor']:>6g} " + " ".join(f"{row['right_per_set'][name]:>18}" for name in sets)
              + f" {row['right_lost']:>11} {row['wrong_withheld']:>15} {row['gain']:>5g}"
              + ("   <- chosen" if row is best else ""))
    results = {"tune": [r["set"] for r in tune], "table": table, "chosen": best["floor"], "held_out": {}}
    offset = len(tune)
    for name, requests in held_out.items():
        for folder, rows in answers.items():
            mine = rows[offset:offset + len(requests)]
            before, after = held_out_summary(requests, mine, 0.0), held_out_summary(requests, mine, best["floor"])
            results["held_out"].setdefault(name, {})[folder] = {"off": before, "chosen": after}
            print(f"{name} {folder}: right {before['right']} -> {after['right']} of {len(requests)}, actions on topic "
                  f"{before['actions_on_topic']} -> {after['actions_on_topic']} of {after['actions']}, questions "
                  f"invented {before['invented']} -> {after['invented']} of {after['questions']}")
        offset += len(requests)
    print(f"chosen floor: {best['floor']:g} (tune right {table[0]['right']} -> {best['right']}; "
          f"{best['right_lost']} right answers lost, {best['wrong_withheld']} wrong ones withheld)")
    if args.json:
        results["answers"] = {folder: [{**r, **a} for r, a in zip(every, rows)] for folder, rows in answers.items()}
        write_text_atomic(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
