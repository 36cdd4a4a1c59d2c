"""N-gram LMs (KenLM lmplz) and beam search with LM fusion (NeMo beam_batch), issue 6."""

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("nemo.collections.asr")

from duet.asr.decoding import DecodingInputError, build_decoder, decoding_settings  # noqa: E402
from duet.asr.decoding.beam import beam_config  # noqa: E402
from duet.asr.ngram import (  # noqa: E402
    find_kenlm_tool,
    load_token_lm,
    load_tokenizer,
    read_lm_info,
    score_token_sentences,
    train_ngram_lm,
)
from duet.data.tokenizer import train_tokenizer  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
needs_lmplz = pytest.mark.skipif(find_kenlm_tool("lmplz") is None, reason="KenLM lmplz not built: run bash tools/setup.sh")

SUBJECTS = ["the old man", "my sister", "the small dog", "a tall teacher", "the farmer", "our neighbour"]
VERBS = ["walked to", "looked at", "painted", "cleaned", "found", "opened"]
OBJECTS = ["the red door", "the wooden gate", "a quiet garden", "the kitchen window", "the blue boat", "a new house"]
# 216 sentences of one small grammar: the "domain" the LM learns
DOMAIN = [f"{s} {v} {o}" for s in SUBJECTS for v in VERBS for o in OBJECTS]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return train_tokenizer(DOMAIN, tmp_path_factory.mktemp("tok") / "spe_bpe_v64", vocab_size=64)


@pytest.fixture(scope="module")
def token_lm(tmp_path_factory, tokenizer_dir):
    if find_kenlm_tool("lmplz") is None:
        pytest.skip("KenLM lmplz not built: run bash tools/setup.sh")
    arpa = tmp_path_factory.mktemp("lm") / "domain_token4.arpa"
    train_ngram_lm(DOMAIN[::2], arpa, order=4, unit="token", tokenizer_dir=tokenizer_dir, text_source="inline")
    return arpa


def scrambled(sentence: str) -> str:
    words = sentence.split()
    return " ".join(words[1::2] + words[::2])  # same words, broken order


@needs_lmplz
def test_token_lm_loads_and_prefers_in_domain_word_order(token_lm, tokenizer_dir):
    info = read_lm_info(token_lm)
    assert info["unit"] == "token" and info["order"] == 4 and info["vocab_size"] == 64
    assert set(info["ngram_counts"]) == {"1", "2", "3", "4"} and info["ngram_counts"]["4"] > 0
    assert Path(info["binary"]).is_file()
    tokenizer = load_tokenizer(tokenizer_dir)
    lm = load_token_lm(token_lm, vocab_size=64)
    held_out = DOMAIN[1::2]  # not in the LM's training text; the same words and grammar
    ok = score_token_sentences(lm, tokenizer, held_out)
    bad = score_token_sentences(lm, tokenizer, [scrambled(s) for s in held_out])
    wins = sum(o > b for o, b in zip(ok, bad))
    assert wins == len(held_out), f"scrambled sentence scored higher in {len(held_out) - wins} of {len(held_out)} pairs"


@needs_lmplz
def test_word_lm_arpa_and_binary(tmp_path):
    arpa = tmp_path / "words3.arpa"
    info = train_ngram_lm(DOMAIN, arpa, order=3, unit="word", text_source="inline")
    assert info.ngram_counts["1"] == len({w for s in DOMAIN for w in s.split()}) + 3  # + <s> </s> <unk>
    lines = arpa.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "\\data\\" and lines[-1] == "\\end\\"
    assert any(line.endswith("\tthe old man") for line in lines)
    assert (tmp_path / "words3.bin").stat().st_size > 0


def run_cli(argv, capsys):
    from tools.train_ngram_lm import main

    code = main(argv)
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("case", ["missing", "empty", "order0", "no_text_key", "no_tokenizer"])
def test_cli_bad_input_gives_one_line_error(case, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("one sentence here\n", encoding="utf-8")
    args = {"missing": ["--text", str(tmp_path / "nope.txt"), "--unit", "word"],
            "empty": ["--text", str(tmp_path / "empty.txt"), "--unit", "word"],
            "order0": ["--text", str(text), "--unit", "word", "--order", "0"],
            "no_text_key": ["--text", str(tmp_path / "m.json"), "--unit", "word"],
            "no_tokenizer": ["--text", str(text), "--unit", "token"]}[case]
    (tmp_path / "empty.txt").write_text("\n  \n", encoding="utf-8")
    (tmp_path / "m.json").write_text(json.dumps({"audio_filepath": "a.flac", "duration": 1.0}) + "\n", encoding="utf-8")
    if case == "no_tokenizer" and find_kenlm_tool("lmplz") is None:
        pytest.skip("KenLM lmplz not built")
    out = tmp_path / "lm.arpa"
    code, err = run_cli([*args, "--out", str(out)], capsys)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("train_ngram_lm: error:")
    assert {"missing": "nope.txt", "empty": "empty.txt", "order0": "order", "no_text_key": "entry 1",
            "no_tokenizer": "--tokenizer"}[case] in err
    assert not out.exists()


@pytest.fixture(scope="module")
def tiny_model(tokenizer_dir):
    """A random-weight FastConformer-CTC with the test tokenizer (decoding wiring only, no accuracy)."""
    from tests.asr_helpers import build_ctc_model

    return build_ctc_model("fastconformer_small", tokenizer_dir, [
        "model.encoder.n_layers=2", "model.encoder.d_model=64", "model.encoder.subsampling_conv_channels=64"])


def decode(model, log_probs, lengths, strategy="greedy", **values):
    """The texts of ``strategy``'s decoder of ``model``, built for this call."""
    return build_decoder(model, decoding_settings(strategy, **values)).texts(log_probs, lengths)


def model_decoding(model):
    """What a decoder must leave untouched: the model's own decoding config strategy and object."""
    return model.cfg.decoding.strategy, model.decoding


def test_beam_of_one_without_lm_equals_greedy(tiny_model):
    torch.manual_seed(1)
    log_probs = torch.randn(3, 40, 65).log_softmax(-1)
    lengths = torch.tensor([40, 31, 17])
    own = model_decoding(tiny_model)
    greedy = decode(tiny_model, log_probs, lengths)
    beam = build_decoder(tiny_model, decoding_settings("beam", beam_size=1))
    assert beam.nemo.cfg.strategy == "beam_batch" and beam.nemo.cfg.beam.beam_size == 1
    assert beam.texts(log_probs, lengths) == greedy
    assert model_decoding(tiny_model) == own


@needs_lmplz
def test_lm_fusion_steers_an_ambiguous_ending_to_the_in_domain_words(tiny_model, token_lm, tokenizer_dir):
    """Acoustics slightly prefer (0.55 : 0.45) an ending the LM has never seen; with the LM the in-domain one wins."""
    tokenizer = load_tokenizer(tokenizer_dir)
    good, bad = "the old man painted the red door", "the old man painted the red man"
    good_ids, bad_ids = tokenizer.text_to_ids(good), tokenizer.text_to_ids(bad)
    assert len(good_ids) == len(bad_ids), "test sentences must tokenize to the same length"
    differ = [i for i, (g, b) in enumerate(zip(good_ids, bad_ids)) if g != b]
    blank = 64
    frames = []
    for i, (g, b) in enumerate(zip(good_ids, bad_ids)):
        token = torch.full((65,), 1e-4)
        token[b] += 0.55 if i in differ else 1.0
        token[g] += 0.45 if i in differ else 0.0
        silence = torch.full((65,), 1e-4)
        silence[blank] = 1.0
        frames += [token / token.sum(), silence / silence.sum()]  # a blank after each token keeps repeats apart
    log_probs = torch.stack(frames).log()[None]
    lengths = torch.tensor([log_probs.shape[1]])
    own = model_decoding(tiny_model)
    assert decode(tiny_model, log_probs, lengths) == [bad]
    beam = decode(tiny_model, log_probs, lengths, "beam", beam_size=8)
    assert beam == [bad], "without the LM the acoustics must decide"
    assert decode(tiny_model, log_probs, lengths, "beam_lm", beam_size=8, ngram_lm=str(token_lm), alpha=1.0,
                  beta=0.0) == [good]
    assert model_decoding(tiny_model) == own


@needs_lmplz
def test_lm_for_another_tokenizer_is_refused(tiny_model, tmp_path):
    arpa = tmp_path / "other.arpa"
    other_tok = train_tokenizer(DOMAIN, tmp_path / "spe_bpe_v48", vocab_size=48)
    train_ngram_lm(DOMAIN, arpa, order=3, unit="token", tokenizer_dir=other_tok, binary=False)
    with pytest.raises(DecodingInputError, match="48-token tokenizer, the model has 64"):
        build_decoder(tiny_model, decoding_settings("beam_lm", ngram_lm=str(arpa)))
    with pytest.raises(DecodingInputError, match="not found"):
        build_decoder(tiny_model, decoding_settings("beam_lm", ngram_lm=str(tmp_path / "none.arpa")))


def bundled_checkpoint() -> Path | None:
    found = sorted((REPO_ROOT / "samples" / "checkpoints").glob("*.nemo"))
    return found[0] if found else None


@pytest.mark.integration
@needs_lmplz
@pytest.mark.skipif(bundled_checkpoint() is None, reason="no bundled base checkpoint in samples/checkpoints/")
def test_beam_lm_not_worse_than_greedy_on_bundled_checkpoint(tmp_path, sample_manifests):
    from duet.asr.evaluation import evaluate_manifest
    from duet.asr.inference import load_asr_model
    from duet.data.manifest import read_manifest
    from duet.asr.ngram import read_training_text

    model = load_asr_model(bundled_checkpoint(), device="cpu")
    arpa = tmp_path / "train_token6.arpa"
    train_ngram_lm(read_training_text(sample_manifests["train-clean"]), arpa, order=6,
                   unit="token", tokenizer=model.tokenizer, binary=False)
    subset = tmp_path / "test_subset.json"
    subset.write_text("".join(json.dumps(e) + "\n" for e in read_manifest(sample_manifests["test-clean"])[:40]))
    greedy = evaluate_manifest(model, subset, progress=False).summary["wer"]
    # weights chosen on dev by bench/decoding_ab.py (an early base checkpoint): LM light, insertion bonus high
    fused_decoder = build_decoder(model, decoding_settings("beam_lm", beam_size=4, ngram_lm=str(arpa), alpha=0.3,
                                                           beta=2.0))
    fused = evaluate_manifest(model, subset, progress=False, decoder=fused_decoder).summary["wer"]
    assert fused <= greedy, f"beam+LM WER {fused:.3f} > greedy {greedy:.3f}"


WHISPER_BASE = REPO_ROOT / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo"


@pytest.mark.integration
@needs_lmplz
@pytest.mark.skipif(not WHISPER_BASE.is_file(), reason="no bundled Whisper base in samples/checkpoints/")
def test_beam_lm_transcribes_an_utterance_alike_alone_and_in_a_padded_batch(tmp_path, sample_manifests):
    """NeMo's batched beam search ranks its beams on a batch's padded frames too;
    duet.asr.decoding.nemo_decoding.blank_past_end makes those frames blank, so a transcript does not depend on the
    batch it was decoded in."""
    from duet.asr.inference import load_asr_model, transcribe_files
    from duet.data.manifest import read_manifest
    from duet.asr.ngram import read_training_text

    model = load_asr_model(WHISPER_BASE, device="cpu")  # 50 frames a second: much padding to rank beams on
    arpa = tmp_path / "train_token6.arpa"
    train_ngram_lm(read_training_text(sample_manifests["train-clean"]), arpa, order=6,
                   unit="token", tokenizer=model.tokenizer, binary=False)
    # the shortest and longest test utterances together: most of the short ones' frames are padding
    entries = sorted(read_manifest(sample_manifests["test-clean"]), key=lambda e: e["duration"])
    paths = [e["audio_filepath"] for e in entries[:12] + entries[-4:]]
    # a light LM and a large insertion bonus: what the padding used to reward
    decoder = build_decoder(model, decoding_settings("beam_lm", beam_size=8, ngram_lm=str(arpa), alpha=1.1, beta=4.0))
    alone = [transcribe_files(model, [path], batch_size=1, decoder=decoder)[0] for path in paths]
    assert transcribe_files(model, paths, batch_size=len(paths), decoder=decoder) == alone


@needs_lmplz
def test_token_lm_is_parsed_once_per_arpa_version(tiny_model, tokenizer_dir, tmp_path, monkeypatch):
    """NeMo parses an ARPA in Python on every decoder built with it; its .nemo form, cached beside it, loads
    instead."""
    import os

    from nemo.collections.asr.parts.submodules.ngram_lm import NGramGPULanguageModel

    from duet.asr import ngram

    arpa = tmp_path / "lm_token3.arpa"
    train_ngram_lm(DOMAIN[:40], arpa, order=3, unit="token", tokenizer_dir=tokenizer_dir, binary=False)
    parsed = []
    from_arpa = NGramGPULanguageModel.from_arpa.__func__
    monkeypatch.setattr(NGramGPULanguageModel, "from_arpa",
                        classmethod(lambda cls, **kw: parsed.append(kw["lm_path"]) or from_arpa(cls, **kw)))
    settings = decoding_settings("beam_lm", beam_size=2, ngram_lm=str(arpa))
    decoders = [build_decoder(tiny_model, settings) for _ in range(2)]
    assert len(parsed) == 1
    cached = sorted(tmp_path.glob("lm_token3.v64.*.nemo"))
    assert len(cached) == 1 and all(d.nemo.cfg.beam.ngram_lm_model == str(cached[0]) for d in decoders)
    monkeypatch.setattr(ngram, "_NEMO_FORM_OF_ARPA", {})  # as in a new process: the file beside the ARPA is reused
    build_decoder(tiny_model, settings)
    assert len(parsed) == 1
    stat = arpa.stat()
    os.utime(arpa, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a rebuilt ARPA is parsed again
    build_decoder(tiny_model, settings)
    assert len(parsed) == 2 and len(list(tmp_path.glob("lm_token3.v64.*.nemo"))) == 1


@pytest.mark.parametrize("cuda", [True, False])
def test_beam_search_keeps_nemo_cuda_graphs_where_cuda_exists(tiny_model, monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    cfg = beam_config(tiny_model, decoding_settings("beam", beam_size=2), None, 0.0, n_best=False)
    assert cfg.beam.get("allow_cuda_graphs", True) is cuda


def test_merged_blank_runs_keep_the_tokens_and_what_separates_a_repeat():
    from duet.asr.decoding.nemo_decoding import merge_blank_runs

    blank, sure, unsure = 0, torch.tensor([0.999, 0.0005, 0.0005]).log(), torch.tensor([0.6, 0.2, 0.2]).log()
    token = torch.tensor([0.001, 0.998, 0.001]).log()
    # blank blank token blank blank blank token unsure blank | padding
    frames = torch.stack([sure, sure, token, sure, sure, sure, token, unsure, sure, sure])
    merged, lengths = merge_blank_runs(frames[None], torch.tensor([9]), blank, 0.99)
    assert lengths.tolist() == [6]  # each sure run kept as its first frame; the padding frame never read
    assert merged[0].argmax(-1).tolist() == [0, 1, 0, 1, 0, 0]  # token 1 twice, a blank between: still two
    assert torch.equal(merged[0, 4], frames[7])  # an unsure blank frame is kept as it is, and starts a new run
    assert merge_blank_runs(frames[None], torch.tensor([9]), blank, 0.0)[1].tolist() == [9]  # 0: off


@pytest.mark.skipif(not WHISPER_BASE.is_file(), reason="no bundled Whisper base in samples/checkpoints/")
def test_the_beam_on_merged_blank_runs_transcribes_as_on_every_frame(tmp_path, sample_manifests):
    """blank_skip reads a run of sure blank as one frame: a shorter search, the same transcripts."""
    from duet.asr.inference import load_asr_model, transcribe_files
    from duet.data.manifest import read_manifest
    from duet.asr.ngram import read_training_text

    model = load_asr_model(WHISPER_BASE, device="cpu")
    arpa = tmp_path / "train_token6.arpa"
    train_ngram_lm(read_training_text(sample_manifests["train-clean"]), arpa, order=6,
                   unit="token", tokenizer=model.tokenizer, binary=False)
    paths = [e["audio_filepath"] for e in read_manifest(sample_manifests["test-clean"])[:12]]
    texts = {skip: transcribe_files(model, paths, batch_size=4, decoder=build_decoder(model, decoding_settings(
        "beam_lm", beam_size=8, ngram_lm=str(arpa), alpha=1.1, beta=4.0, blank_skip=skip))) for skip in (0.0, 0.999)}
    assert texts[0.999] == texts[0.0]
