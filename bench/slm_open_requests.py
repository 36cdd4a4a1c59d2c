"""On-topic share of SLM answers to 20 spoken requests outside the sample's templates (samples/open_requests.json).

Usage:
    python bench/slm_open_requests.py experiments/slm_tiny experiments/slm_whisper
    python bench/slm_open_requests.py experiments/slm_whisper --json experiments/open_requests.json

Each request is answered as the fine-tune's own evaluation answers the test rows (greedy, no repetition penalty,
--max-new-tokens 64, the Alpaca prompt; an answer the model was unsure of withheld as the model folder says, or as
--min-token-prob) and counted on topic when it names every keyword group of its request
(slm.metrics.names_keywords). The requests and keywords were committed before any model answered them; no
request is a row of samples/alpaca_sample.json and no answer there satisfies any request's keywords
(tests/test_slm_open_requests.py). Answers are shown as a user sees them: tool calls executed (slm.generation).
A knowledge question is answered right (on topic), refused (slm.metrics.is_refusal: "I don't know that.") or
answered with an invented fact (neither); every answer is also checked for being well-formed
(slm.metrics.well_formed: English words, no loop). Prints each answer with a mark (+ on topic, ? refused,
- otherwise; ~ when not well-formed), then per model: the share on topic (overall, actions, knowledge), the actions
on topic, the questions answered with an invented fact, the well-formed share; --json writes the answers too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from duet.foundation.errors import cli
from duet.errors import DuetError
from duet.data.lexicon import answer_words
from duet.foundation.files import write_text_atomic
from slm.generation import GenerationSettings, answer_floor, generate_responses, load_model
from slm.metrics import OPEN_REQUESTS, is_refusal, load_open_requests, names_keywords, well_formed, well_formed_share


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path, help="model folders (slm/finetune.py outputs)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="as the presets' eval.max_new_tokens (64)")
    parser.add_argument("--min-token-prob", type=float, default=None,
                        help="withhold answers below this token probability (default: each model folder's own "
                             "answer.min_token_prob; 0 = off)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the answers and shares here")
    return parser


def share(hits: list[bool]) -> float:
    return 100.0 * sum(hits) / len(hits) if hits else 0.0


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    requests = load_open_requests()
    lexicon = answer_words()
    if lexicon is None:
        raise DuetError("WordNet is not installed (tools/setup.sh): no lexicon to check the answers' words against")
    greedy = GenerationSettings(strategy="greedy", max_new_tokens=args.max_new_tokens, repetition_penalty=1.0,
                                min_token_prob=args.min_token_prob).validate()
    results = {"requests": str(OPEN_REQUESTS.name), "decoding": f"greedy, max_new_tokens={args.max_new_tokens}",
               "models": {}}
    for folder in args.models:
        started = time.time()
        tokenizer, model = load_model(folder, device="cpu")
        answers = generate_responses(model, tokenizer, [{"instruction": r["request"], "input": ""} for r in requests],
                                     greedy, batch_size=len(requests))
        rows = [{**r, "answer": a, "on_topic": names_keywords(a, r["keywords"]), "refused": is_refusal(a),
                 "well_formed": well_formed(a, lexicon, r["request"]).ok} for r, a in zip(requests, answers)]
        for row in rows:
            mark = "+" if row["on_topic"] else "?" if row["refused"] else "-"
            print(f"  {mark}{' ' if row['well_formed'] else '~'} {row['request']!r} -> {row['answer']!r}")
        actions = [r for r in rows if r["kind"] == "action"]
        questions = [r for r in rows if r["kind"] == "knowledge"]
        summary = {"on_topic": share([r["on_topic"] for r in rows]),
                   **{kind: share([r["on_topic"] for r in rows if r["kind"] == kind]) for kind in ("action", "knowledge")},
                   "min_token_prob": answer_floor(model, greedy),
                   "actions_on_topic": sum(r["on_topic"] for r in actions), "actions": len(actions),
                   "invented": sum(not r["on_topic"] and not r["refused"] for r in questions),
                   "refused": sum(r["refused"] and not r["on_topic"] for r in questions), "questions": len(questions),
                   "well_formed": well_formed_share(answers, lexicon, [r["request"] for r in requests])}
        results["models"][str(folder)] = {**summary, "answers": rows}
        print(f"{folder}: on topic {summary['on_topic']:.0f} % of {len(rows)} (actions {summary['actions_on_topic']} of "
              f"{len(actions)}, knowledge {summary['knowledge']:.0f} %); questions answered with an invented fact "
              f"{summary['invented']} of {len(questions)} ({summary['refused']} refused); well-formed "
              f"{summary['well_formed']:.0f} % ({time.time() - started:.0f} s)", flush=True)
    if args.json:
        write_text_atomic(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
