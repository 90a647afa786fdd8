"""Our tokenizer (`vanilla_training.tokenizer`: NFKC, Metaspace, BPE with byte fallback) as a SentencePiece BPE model.

Argos Translate and LibreTranslate tokenize with SentencePiece (or subword-nmt), not with a `tokenizers`
tokenizer.json. The SentencePiece model built here has the same pieces, id for id; each piece made by a merge is
scored by minus the rank of the first merge that makes it, so that SentencePiece's BPE (which joins, at each step,
the adjacent pair whose join is the best-scored piece) replays our merges in their order; the normalisation is NFKC
(SentencePiece's "nfkc" rule), a "▁" is put before the text and in place of every space, and repeated spaces are
kept (as Metaspace does). The byte tokens are SentencePiece's byte pieces, so a character outside the vocabulary is
spelt in UTF-8 bytes by both.

The two can still differ: SentencePiece joins any two adjacent pieces whose join is a piece, where our BPE joins
only the pairs of its merge list (pieces `a`, `bc`, `abc` made by the merges `b c`, `a b`, `ab c`: "abc" is `a`
`bc` for ours, `abc` for SentencePiece). `differences` finds the texts where that happens; the exporter refuses a
tokenizer that disagrees on the texts it checks. The end token `</s>` is not added by SentencePiece: a CTranslate2
model given these pieces adds it itself (`add_source_eos`).
"""

import json
from pathlib import Path

import sentencepiece
from sentencepiece import sentencepiece_model_pb2 as model_pb2

BYTE_PIECE = "<0x{:02X}>"
METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}


def _check_convertible(tokenizer: dict) -> None:
    """ValueError naming the first part of a tokenizer.json that no SentencePiece BPE model reproduces."""
    model = tokenizer["model"]
    reasons = {
        "normalizer": (tokenizer.get("normalizer") or {}).get("type") == "NFKC",
        "pre_tokenizer": {k: (tokenizer.get("pre_tokenizer") or {}).get(k) for k in METASPACE} == METASPACE,
        "model type": model.get("type") == "BPE",
        "model dropout": model.get("dropout") is None,
        "continuing_subword_prefix": not model.get("continuing_subword_prefix"),
        "end_of_word_suffix": not model.get("end_of_word_suffix"),
        "ignore_merges": not model.get("ignore_merges"),
        # without byte fallback SentencePiece joins consecutive unknown characters into one <unk>; ours does not
        "byte_fallback": model.get("byte_fallback") is True,
    }
    wrong = [name for name, ok in reasons.items() if not ok]
    if wrong:
        raise ValueError(
            f"this tokenizer has no SentencePiece equivalent: its {wrong[0]} is not that of vanilla_training's "
            "tokenizer (NFKC, Metaspace always prepending and splitting, BPE with byte fallback and no dropout)"
        )


def sentencepiece_model(tokenizer_file: str | Path) -> bytes:
    """The serialized SentencePiece BPE model equivalent to `tokenizer_file` (a tokenizer.json written by
    `vanilla_training.tokenizer.train_joint_bpe`); ValueError saying why for a tokenizer that has none."""
    tokenizer = json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))
    _check_convertible(tokenizer)
    vocab: dict[str, int] = {**tokenizer["model"]["vocab"]}
    for added in tokenizer.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[token] for token in tokens] != list(range(len(tokens))):
        raise ValueError("the tokenizer's ids are not 0..N-1, one token each: SentencePiece numbers its pieces so")
    special = {added["content"] for added in tokenizer.get("added_tokens", []) if added.get("special")}
    unk = tokenizer["model"]["unk_token"]
    scores = {}
    for rank, merge in enumerate(tokenizer["model"]["merges"]):
        left, right = merge if isinstance(merge, list) else merge.split(" ")
        scores.setdefault(left + right, -float(rank + 1))
    bytes_ = {BYTE_PIECE.format(value) for value in range(256)}

    proto = model_pb2.ModelProto()
    for token in tokens:
        piece = proto.pieces.add(piece=token, score=0.0)
        if token == unk:
            piece.type = model_pb2.ModelProto.SentencePiece.UNKNOWN
        elif token in special:
            piece.type = model_pb2.ModelProto.SentencePiece.CONTROL
        elif token in bytes_:
            piece.type = model_pb2.ModelProto.SentencePiece.BYTE
        elif len(token) == 1 or token in scores:
            piece.score = scores.get(token, 0.0)
        else:
            raise ValueError(f"the vocabulary's {token!r} is made by no merge: our BPE never produces it")
    missing = bytes_ - set(tokens)
    if missing:
        raise ValueError(f"the vocabulary lacks {len(missing)} of the 256 byte tokens, e.g. {min(missing)}")
    ids = {name: vocab.get(token, -1) for name, token in (("unk", unk), ("bos", "<s>"), ("eos", "</s>"))}
    proto.trainer_spec.model_type = model_pb2.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(tokens)
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.unk_id, proto.trainer_spec.unk_piece = ids["unk"], unk
    proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = ids["bos"], ids["eos"]
    proto.trainer_spec.pad_id = vocab.get("<pad>", -1)
    normalizer = sentencepiece.SentencePieceNormalizer(rule_name="nfkc").serialized_normalizer_spec()
    proto.normalizer_spec.ParseFromString(normalizer)
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.escape_whitespaces = True
    proto.normalizer_spec.remove_extra_whitespaces = False
    return proto.SerializeToString()


def differences(tokenizer, processor: sentencepiece.SentencePieceProcessor, texts: list[str]) -> list[tuple]:
    """(text, our pieces, SentencePiece's pieces) for each of `texts` that `tokenizer` (a transformers tokenizer,
    whose end token is left out) and `processor` split differently."""
    ours = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    theirs = processor.encode(texts, out_type=str)
    return [(text, a, b) for text, a, b in zip(texts, ours, theirs, strict=True) if a != b]
