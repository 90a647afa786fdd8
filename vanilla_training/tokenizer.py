"""One joint BPE vocabulary over source and target language (or over every language of a multilingual model), as
a Hugging Face fast tokenizer.

Special tokens and their ids: ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3, then, for a multilingual model, one
language token per language (``__de__``, ...; see ``modeling_vanilla.tokenization_vanilla``). Every encoded
sequence ends with ``</s>``. The result survives ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` unchanged.
"""

import json
from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from modeling_vanilla.tokenization_vanilla import VanillaTokenizer, language_token

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # their position is their id
BYTE_TOKENS = tuple(f"<0x{value:02X}>" for value in range(256))  # spell a character that training never saw
BYTE_FALLBACK_MIN_VOCAB = 1000  # smaller (toy) vocabularies have no room for the byte tokens


def with_byte_fallback(tokenizer: Tokenizer, byte_tokens: Sequence[str]) -> Tokenizer:
    """The trained BPE `tokenizer` with `byte_tokens` added after its vocabulary and byte fallback on: a character
    it never saw encodes as its UTF-8 bytes and decodes back."""
    trained = json.loads(tokenizer.to_str())["model"]
    vocab = dict(trained["vocab"])
    for token in byte_tokens:
        vocab.setdefault(token, len(vocab))
    merges = [tuple(merge) for merge in trained["merges"]]
    fallback = Tokenizer(models.BPE(vocab, merges, unk_token=UNK, byte_fallback=True))
    fallback.normalizer, fallback.pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    fallback.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return fallback


def train_joint_bpe(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 1024, languages: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer (NFKC, Metaspace) with at most ``vocab_size`` entries on ``texts``.

    With ``languages`` (two or more), the tokenizer is a ``VanillaTokenizer`` with a language token for each,
    right after the special tokens (ids 4, 5, ...), and encodes targets with their language's token first.

    Every distinct character of ``texts`` is in the vocabulary. From ``BYTE_FALLBACK_MIN_VOCAB`` entries on, 256
    of them are byte tokens: a character that training never saw is encoded as its UTF-8 bytes and decoded back
    (byte fallback), so no text of any script encodes to ``<unk>``; smaller vocabularies map such a character to
    ``<unk>``. ``vocab_size`` counts the special tokens and is an upper bound: a small corpus may yield fewer
    merges. ValueError if it cannot hold the special tokens, the byte tokens and every distinct character.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: it must exceed the {len(SPECIAL_TOKENS)} special tokens"
        )
    if model_max_length < 1:
        raise ValueError(f"model_max_length={model_max_length} must be positive")
    if len(languages) == 1 or len(set(languages)) != len(languages):
        raise ValueError(f"languages={list(languages)}: a multilingual tokenizer needs two or more distinct languages")
    language_tokens = [language_token(language) for language in languages]
    byte_tokens = BYTE_TOKENS if vocab_size >= BYTE_FALLBACK_MIN_VOCAB else ()
    budget = vocab_size - len(byte_tokens)
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    special_tokens = [*SPECIAL_TOKENS, *language_tokens]
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=budget, special_tokens=special_tokens))
    if tokenizer.get_vocab_size() > budget:
        reserved = "the special tokens" + (" and language tokens" if languages else "")
        reserved += " and the 256 byte tokens" if byte_tokens else ""
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than {reserved} plus the distinct characters of the texts "
            f"({tokenizer.get_vocab_size() + len(byte_tokens)} entries before any merge)"
        )
    if byte_tokens:
        tokenizer = with_byte_fallback(tokenizer, byte_tokens)
    else:
        tokenizer.decoder = decoders.Metaspace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, SPECIAL_TOKENS.index(EOS))]
    )
    special = {"pad_token": PAD, "unk_token": UNK, "bos_token": BOS, "eos_token": EOS}
    if not languages:
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length, **special)
    return VanillaTokenizer(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        extra_special_tokens=language_tokens,
        languages=list(languages),
        src_lang=None,
        tgt_lang=None,
        **special,
    )
