"""The joint BPE tokenizer: special tokens, </s>, lossless round trips on every script of the corpus, save/reload."""

from pathlib import Path

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from vanilla_training.tokenizer import BYTE_FALLBACK_MIN_VOCAB, BYTE_TOKENS, SPECIAL_TOKENS, train_joint_bpe

PAIRS = [
    (
        "In the beginning God created the heavens and the earth.",
        "Im Anfang schuf Gott die Himmel und die Erde.",
    ),
    ("The earth was formless and empty.", "Und die Erde war wüst und leer."),
    ("Darkness was on the surface of the deep.", "Finsternis war über der Tiefe."),
    ("God's Spirit was hovering over the waters.", "Der Geist Gottes schwebte über den Wassern."),
    ("God said, Let there be light, and there was light.", "Gott sprach: Es werde Licht! und es ward Licht."),
    ("The street is beautiful, so that I thank him.", "Die Straße ist schön, daß ich ihm danke."),
    ("Oil, fire and bread are great gifts.", "Öl, Feuer und Brot sind große Gaben; Ärger und Übel weichen."),
]
ENGLISH = "God said, let there be light in the street."
GERMAN = "Gott sprach: Es werde Licht über der großen Straße, daß Öl fließe!"
VOCAB_SIZE = 120


def training_texts() -> list[str]:
    return [text for pair in PAIRS for text in pair] * 5


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return train_joint_bpe(training_texts(), vocab_size=VOCAB_SIZE, model_max_length=64)


def test_special_token_ids(tok: PreTrainedTokenizerFast) -> None:
    assert [tok.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2, 3)
    assert tok.model_max_length == 64


def test_eos_appended(tok: PreTrainedTokenizerFast) -> None:
    for text in (ENGLISH, GERMAN):
        ids = tok(text)["input_ids"]
        assert ids[-1] == tok.eos_token_id and tok.eos_token_id not in ids[:-1]
        assert tok.bos_token_id not in ids


@pytest.mark.parametrize("text", [ENGLISH, GERMAN, "Ärger, Übel und Größe: ß!"])
def test_round_trip(tok: PreTrainedTokenizerFast, text: str) -> None:
    ids = tok(text)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_vocab_size_honoured(tok: PreTrainedTokenizerFast) -> None:
    assert len(tok) == VOCAB_SIZE
    assert len(train_joint_bpe(training_texts(), vocab_size=10_000)) < 10_000  # an upper bound, not padded


@pytest.mark.parametrize("vocab_size", [0, 4, 20])
def test_vocab_size_too_small(vocab_size: int) -> None:
    with pytest.raises(ValueError, match=f"vocab_size={vocab_size}"):
        train_joint_bpe(training_texts(), vocab_size=vocab_size)


def test_model_max_length_validated() -> None:
    with pytest.raises(ValueError, match="model_max_length=0"):
        train_joint_bpe(training_texts(), vocab_size=VOCAB_SIZE, model_max_length=0)


def test_save_and_auto_reload(tok: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert (reloaded.pad_token, reloaded.unk_token, reloaded.bos_token, reloaded.eos_token) == SPECIAL_TOKENS
    assert (reloaded.pad_token_id, reloaded.eos_token_id) == (0, 3)
    assert reloaded.model_max_length == 64
    for text in (ENGLISH, GERMAN):
        assert reloaded(text)["input_ids"] == tok(text)["input_ids"]


def test_text_target_gives_labels(tok: PreTrainedTokenizerFast) -> None:
    encoded = tok([ENGLISH], text_target=[GERMAN])
    assert encoded["input_ids"] == [tok(ENGLISH)["input_ids"]]
    assert encoded["labels"] == [tok(GERMAN)["input_ids"]]


# Verses in the style of the corpus's versions (cleaned: NFKC, single spaces), one per script, each beside English.
SCRIPT_VERSES = {
    "ru": "Ибо так возлюбил Бог мир, что отдал Сына Своего Единородного.",
    "uk": "Так бо Бог полюбив світ, що дав Сина Свого Однородженого.",
    "ar": "لانه هكذا احب الله العالم حتى بذل ابنه الوحيد.",
    "fa": "زیرا خدا جهان را اینقدر محبت نمود که پسر یگانه خود را داد.",
    "hi": "क्योंकि परमेश्\u200dवर ने जगत से ऐसा प्रेम रखा कि उसने अपना एकलौता पुत्र दे दिया।",
    "bn": "ঈশ্বর জগতকে এত ভালবেসেছিলেন যে তাঁর অনন্য পুত্রকে দান করলেন।",
    "ko": "하나님이 세상을 이처럼 사랑하사 독생자를 주셨으니",
    "vi": "Vì Đức Chúa Trời yêu thương thế gian, đến nỗi đã ban Con một của Ngài.",
    "zh": "神爱世人,甚至把他的独生子赐给他们,叫一切信他的,不至灭亡,反得永生。",
    "ja": "神は、実に、そのひとり子をお与えになったほどに、世を愛された。",
    "tl": "Sapagka't gayon na lamang ang pagsinta ng Dios sa sanglibutan.",
}
ENGLISH_VERSE = "For God so loved the world, that he gave his one and only Son."


@pytest.mark.parametrize("language", sorted(SCRIPT_VERSES))
def test_round_trip_every_script(language: str) -> None:
    """A joint tokenizer trained on English and one script gives back each verse exactly, with no <unk>."""
    verse = SCRIPT_VERSES[language]
    tok = train_joint_bpe([ENGLISH_VERSE, verse] * 3, vocab_size=400)
    for text in (verse, ENGLISH_VERSE):
        ids = tok(text)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text


@pytest.fixture(scope="module")
def byte_tok() -> PreTrainedTokenizerFast:
    """A vocabulary large enough for byte fallback, trained on English and German only."""
    return train_joint_bpe(training_texts(), vocab_size=BYTE_FALLBACK_MIN_VOCAB)


@pytest.mark.parametrize("language", sorted(SCRIPT_VERSES))
def test_byte_fallback_spells_unseen_characters(byte_tok: PreTrainedTokenizerFast, language: str) -> None:
    """Characters never seen in training (all but Latin letters here) encode as UTF-8 bytes, never <unk>, and
    decode back exactly; text made of seen characters encodes without bytes."""
    verse = SCRIPT_VERSES[language]
    ids = byte_tok(verse)["input_ids"]
    assert byte_tok.unk_token_id not in ids
    assert byte_tok.decode(ids, skip_special_tokens=True) == verse
    byte_ids = {byte_tok.convert_tokens_to_ids(token) for token in BYTE_TOKENS}
    unseen = set(verse) - set("".join(training_texts())) - {" "}
    assert bool(byte_ids & set(ids)) == bool(unseen)
    assert not byte_ids & set(byte_tok(GERMAN)["input_ids"])


def test_byte_fallback_survives_save_and_reload(byte_tok: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    assert len(byte_tok) <= BYTE_FALLBACK_MIN_VOCAB
    byte_tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in (SCRIPT_VERSES["zh"], SCRIPT_VERSES["ko"], GERMAN):
        assert reloaded(text)["input_ids"] == byte_tok(text)["input_ids"]
        assert reloaded.decode(reloaded(text)["input_ids"], skip_special_tokens=True) == text


def test_toy_vocabulary_has_no_byte_tokens(tok: PreTrainedTokenizerFast) -> None:
    """Below BYTE_FALLBACK_MIN_VOCAB entries there is no room for bytes: an unseen character is <unk>."""
    assert not set(BYTE_TOKENS) & set(tok.get_vocab())
    assert tok.unk_token_id in tok(SCRIPT_VERSES["zh"])["input_ids"]
