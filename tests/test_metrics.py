"""BLEU and chrF per target language and against several references, checked against sacreBLEU itself."""

import pytest
import sacrebleu

from vanilla_training.evaluation import bleu_tokenizer, corpus_bleu, corpus_chrf

HYPOTHESES = ["the cat sat on the mat", "a dog barked loudly at night"]
FIRST = ["the cat sat on a mat", "the dog barked loudly at night"]
SECOND = ["a cat was sitting on the mat", "a dog barked at night"]


@pytest.mark.parametrize(
    ("language", "tokenizer"),
    [("zh", "zh"), ("ja", "char"), ("ko", "char"), ("de", "13a"), ("ar", "13a"), (None, "13a")],
)
def test_bleu_tokenizer_by_target_language(language: str | None, tokenizer: str) -> None:
    assert bleu_tokenizer(language) == tokenizer
    signature = corpus_bleu(["起初神创造天地"], ["起初,神创造天地。"], language)["signature"]
    assert f"|tok:{tokenizer}|" in signature and signature.startswith("nrefs:1|")


def test_chinese_bleu_equals_sacrebleu_zh() -> None:
    hypotheses, references = ["神爱世人,甚至把他的独生子赐给他们。"], ["神爱世人,甚至将他的独生子赐给他们。"]
    expected = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="zh").score
    assert corpus_bleu(hypotheses, references, "zh")["score"] == pytest.approx(expected)
    assert expected != pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)  # 13a differs here


def test_two_references_equal_sacrebleu() -> None:
    """Two references per hypothesis, hand-made: the score is sacreBLEU's with two reference streams, and above
    the score against either reference alone."""
    both = [[first, second] for first, second in zip(FIRST, SECOND, strict=True)]
    bleu = corpus_bleu(HYPOTHESES, both)
    assert bleu["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [FIRST, SECOND]).score)
    assert bleu["signature"].startswith("nrefs:2|")
    assert bleu["score"] > max(corpus_bleu(HYPOTHESES, refs)["score"] for refs in (FIRST, SECOND))
    chrf = corpus_chrf(HYPOTHESES, both)
    assert chrf["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [FIRST, SECOND]).score)
    assert chrf["signature"].startswith("nrefs:2|")


def test_missing_reference_is_skipped() -> None:
    """A hypothesis without its second reference (None) is scored on the first one, as sacreBLEU does with ''."""
    partial = [[FIRST[0], SECOND[0]], [FIRST[1], None]]
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [FIRST, [SECOND[0], ""]]).score
    assert corpus_bleu(HYPOTHESES, partial)["score"] == pytest.approx(expected)
    assert corpus_chrf(HYPOTHESES, partial)["score"] == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [FIRST, [SECOND[0], ""]]).score
    )


def test_bad_references() -> None:
    with pytest.raises(ValueError, match="same number of references"):
        corpus_bleu(HYPOTHESES, [[FIRST[0], SECOND[0]], [FIRST[1]]])
    with pytest.raises(ValueError, match="has no reference"):
        corpus_chrf(HYPOTHESES, [[FIRST[0], SECOND[0]], [None, ""]])
