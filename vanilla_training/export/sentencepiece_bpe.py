"""Our tokenizer (`vanilla_training.tokenizer`: NFKC, Metaspace, BPE with byte fallback) as a SentencePiece BPE model.

Argos Translate and LibreTranslate tokenize with SentencePiece (or subword-nmt), not with a `tokenizers`
tokenizer.json. The SentencePiece model built here has the same pieces, id for id; each piece made by a merge is
scored by minus the rank of the first merge that makes it, so that SentencePiece's BPE (which joins, at each step,
the adjacent pair whose join is the best-scored piece) replays our merges in their order. A "▁" is put before the
text and in place of every space, and repeated spaces are kept (as Metaspace does). The byte tokens are
SentencePiece's byte pieces, so a character outside the vocabulary is spelt in UTF-8 bytes by both. The special
tokens are control pieces, which SentencePiece never reads in a text: "</s>" or "__fr__" typed by a user is text to
both (our commands tokenize user text with `split_special_tokens`).

The normalisation is not SentencePiece's own "nfkc" table, which is of another Unicode version than our NFKC (171
code points differ, e.g. U+32FF "㋿") and lacks the precomposed letter followed by a combining mark (Vietnamese
typed as "ê" + U+0301 is "ế" to NFKC): it is a table of rules written from our tokenizer's own normaliser, one for
every code point that it changes and one for every spelling of a precomposed character as a shorter precomposed
one or its base followed by its combining marks (`normalization_rules`). SentencePiece applies such rules by
longest match, so a sequence of several combining marks that no precomposed character spells can still differ.

The two still differ in two ways:

- SentencePiece joins any two adjacent pieces whose join is a piece, where our BPE joins only the pairs of its merge
  list (pieces `a`, `bc`, `abc` made by the merges `b c`, `a b`, `ab c`: "abc" is `a` `bc` for ours, `abc` for
  SentencePiece). `differences` finds the texts where that happens; the exporter refuses a tokenizer that
  disagrees on the texts it checks.
- A text that starts with whitespace (" word", "\u00a0word"): Metaspace puts no "▁" before a text that starts
  with one, SentencePiece always does, so SentencePiece's pieces begin with one "▁" more. No SentencePiece model
  can do otherwise.

The end token `</s>` is not added by SentencePiece: a CTranslate2 model given these pieces adds it itself
(`add_source_eos`).
"""

import itertools
import json
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import sentencepiece
from sentencepiece import sentencepiece_model_pb2 as model_pb2
from tokenizers import Tokenizer

BYTE_PIECE = "<0x{:02X}>"
METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
# Text as users type it, where a SentencePiece model easily splits otherwise than ours (none starts with whitespace,
# see above): Vietnamese typed with combining tone marks after precomposed letters, and fully decomposed; a dot
# below typed after a circumflex; non-breaking, ideographic and en spaces; fullwidth, ligature and compatibility
# characters; code points whose NFKC mapping changed between Unicode versions (U+32FF, U+A7F2); text spelling our
# special and language tokens; a tab; the "▁" character itself; conjoining Hangul jamo.
RAW_TEXTS = (
    "Vi\u0300 \u0110u\u031b\u0301c Chu\u0301a Tr\u01a1\u0300i y\u00eau th\u01b0\u01a1ng th\u00ea\u0301 gian, "
    "\u0111\u00ea\u0301n n\u00f4\u0303i \u0111a\u0303 ban Con m\u00f4\u0323t cu\u0309a Nga\u0300i.",
    "Vi\u0300 \u0110u\u031b\u0301c Chu\u0301a Tro\u031b\u0300i ye\u0302u thu\u031bo\u031bng the\u0302\u0301 gian",
    "Nguy\u00ea\u0323n ca\u0302\u0323u",
    "a\u00a0b 10\u00a0km, x\u3000y z\u2002w",
    "\uff21\uff22\uff23 \ufb01ne \u2460 \u00bd \u2126 \u212b \u0149 \u1e9b\u0323",
    "\u32ff \ua7f2 \U0001d400",
    "a </s> b <unk> <pad> <s> __fr__ la maison",
    "tab\there, \u2581under and trailing ",
    "\u1100\u1161\u11a8 \uac00\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",
)


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


def _spellings(character: str) -> Iterator[str]:
    """The spellings of `character` that are canonically equivalent to it: its base followed by its combining marks
    in any order, or a precomposed character made of the base and some of the marks followed by the others."""
    decomposed = unicodedata.normalize("NFD", character)
    base, marks = decomposed[0], decomposed[1:]
    for order in itertools.permutations(marks):
        for cut in range(len(order)):
            head = unicodedata.normalize("NFC", base + "".join(order[:cut]))
            if len(head) == 1:
                yield head + "".join(order[cut:])


def normalization_rules(normalizer) -> dict[str, str]:
    """What `normalizer` (a `tokenizers` normaliser) makes of every code point it changes, of every spelling
    (`_spellings`) of a precomposed character that it changes, and of the pairs where a code point it changes meets
    a combining mark ("ẛ" + U+0323 is "ṩ"; "a" + U+0341 is "á"): the rules of a SentencePiece normalisation."""
    rules, bases, marks = {}, set(), set()
    for code_point in range(1, 0x110000):
        if 0xD800 <= code_point < 0xE000:  # surrogates are no text
            continue
        character = chr(code_point)
        if (normalized := normalizer.normalize_str(character)) != character:
            rules[character] = normalized
        if len(decomposed := unicodedata.normalize("NFD", character)) > 1:
            bases.add(decomposed[0])
            marks.update(decomposed[1:])
            for spelling in _spellings(character):
                if (normalized := normalizer.normalize_str(spelling)) != spelling:
                    rules[spelling] = normalized
    changed = [character for character in rules if len(character) == 1]
    pairs = [(character, mark) for character in changed for mark in marks]
    pairs += [(base, character) for base in bases for character in changed if unicodedata.combining(character)]
    for first, second in pairs:
        if (joined := normalizer.normalize_str(first + second)) != rules.get(first, first) + rules.get(second, second):
            rules[first + second] = joined
    return rules


def _code_points(text: str) -> str:
    """`text` as SentencePiece's rule files spell it: "ế" -> "1EBF"."""
    return " ".join(f"{ord(character):X}" for character in text)


def normalizer_spec(normalizer) -> bytes:
    """The serialized SentencePiece NormalizerSpec that applies `normalization_rules(normalizer)`, then puts a "▁"
    before the text and in place of every space, keeping repeated spaces."""
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.tsv"  # SentencePiece reads its rules from a file
        lines = [f"{_code_points(a)}\t{_code_points(b)}\n" for a, b in normalization_rules(normalizer).items()]
        rules.write_text("".join(lines), encoding="utf-8")
        compiled = sentencepiece.SentencePieceNormalizer(
            rule_tsv=str(rules), add_dummy_prefix=True, escape_whitespaces=True, remove_extra_whitespaces=False
        )
        return compiled.serialized_normalizer_spec()


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
    proto.normalizer_spec.ParseFromString(normalizer_spec(Tokenizer.from_file(str(tokenizer_file)).normalizer))
    return proto.SerializeToString()


def differences(tokenizer, processor: sentencepiece.SentencePieceProcessor, texts: list[str]) -> list[tuple]:
    """(text, our pieces, SentencePiece's pieces) for each of `texts` that `tokenizer` (a transformers tokenizer,
    whose end token is left out, and which reads special-token text as text, as argos does) and `processor` split
    differently."""
    encoded = tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ours = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded]
    theirs = processor.encode(texts, out_type=str)
    return [(text, a, b) for text, a, b in zip(texts, ours, theirs, strict=True) if a != b]
