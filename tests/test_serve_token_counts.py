"""vanilla-serve counts a request's tokens (the length check of each sentence in its layout, the token budget of
the batcher) on its own `TokenCounter`: a fast tokenizer's backend called directly, a sentencepiece tokenizer through
transformers. The oracle: `Translator.token_counts`, transformers' call on the translator's own tokenizer."""

import io
import json
from pathlib import Path

import pytest
from test_user_text import TEXTS
from tiny_folders import LANGUAGES, save_tiny_folder

from vanilla_training.serving.service import TokenCounter
from vanilla_training.translator import Translator, load_translator


@pytest.mark.parametrize("languages", [LANGUAGES, None], ids=["multilingual", "pair"])
def test_the_servers_token_counts_are_the_translators(languages, tmp_path: Path) -> None:
    """Special tokens' spellings read as text, texts of different lengths not padded to the longest (the model's
    thread leaves its tokenizer padding), and the same verdict on what fits the model."""
    folder = save_tiny_folder(tmp_path, languages)
    translator = load_translator(folder)
    translator.tokenizer(TEXTS, padding=True)  # as the model's thread calls it: its backend keeps padding on
    counter = TokenCounter(translator)
    texts = [*TEXTS, "", "the house " * translator.max_length]
    assert counter.token_counts(texts) == translator.token_counts(texts)
    assert [counter.fits(text) for text in texts] == [translator.fits(text) for text in texts] == [True] * 5 + [False]


def test_a_sentencepiece_tokenizer_is_counted_through_transformers(tmp_path: Path) -> None:
    """A converted OPUS-MT model's tokenizer (`MarianTokenizer`, sentencepiece: no fast backend to call)."""
    spm = pytest.importorskip("sentencepiece")
    from transformers import MarianTokenizer

    model = io.BytesIO()
    lines = ["the house is big", "the small house", "a big garden and a house", "das Haus ist groß"] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=30,
        hard_vocab_limit=False,
        minloglevel=2,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
    )
    for name in ("source.spm", "target.spm"):
        (tmp_path / name).write_bytes(model.getvalue())
    pieces = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = {pieces.id_to_piece(index): index for index in range(pieces.get_piece_size())} | {"<pad>": 0}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    files = [str(tmp_path / name) for name in ("source.spm", "target.spm", "vocab.json")]
    tokenizer = MarianTokenizer(*files, source_lang="en", target_lang="de")
    translator = Translator(None, tokenizer, str(tmp_path), ("en", "de"))
    texts = ["the house is big", "ein kleines Haus im Garten", "", "the house " * 300]
    assert not tokenizer.is_fast
    assert TokenCounter(translator).token_counts(texts) == translator.token_counts(texts)
    assert [TokenCounter(translator).fits(text) for text in texts] == [True, True, True, False]
