"""Multi-reference and per-source-wording scores on a built-in test split (a tiny bible.db, a fake translator)."""

from pathlib import Path

import pytest
import sacrebleu
from test_corpus import ACTS, JOHN, SCRIPT_VERSES, script_db, script_texts  # noqa: F401  (script_db: a fixture)

from vanilla_training.corpus import build_corpus
from vanilla_training.wordings import print_wording_scores, rounded_wording_scores, wording_scores


def test_wording_scores(tmp_path: Path, script_db: Path) -> None:  # noqa: F811
    """A translator that knows the Tagalog of the WEB and KJV wordings only: perfect from those, empty from the
    Basic English Bible; multi-reference scores against the Ang Dating Biblia and the ULB equal sacreBLEU's."""
    build_corpus("en-tl", tmp_path, db_path=script_db)
    test_keys = [key for key in SCRIPT_VERSES if key[0] in (JOHN, ACTS)]
    known = {script_texts(key)[bb]: script_texts(key)["f"] for key in test_keys for bb in ("4", "k")}
    calls = []

    def translate(sentences: list[str]) -> list[str]:
        calls.append(sentences)
        return [known.get(sentence, "") for sentence in sentences]

    scores = wording_scores(translate, "en-tl", tmp_path)
    assert [len(call) for call in calls] == [3, 3, 2]  # WEB (the headline's), KJV, BBE (it lacks Acts 1:1)
    rows = scores["sources"]
    assert list(rows) == ["4", "k", "3"] and rows["3"]["verses"] == 2
    assert rows["4"]["bleu"]["score"] == pytest.approx(100) and rows["k"]["chrf"]["score"] == pytest.approx(100)
    assert rows["3"]["bleu"]["score"] == 0 and rows["k"]["name"] == "King James Version 1611/1769"
    multi = scores["multi_reference"]
    hypotheses = [script_texts(key)["f"] for key in test_keys]
    streams = [[script_texts(key)[bb] for key in test_keys] for bb in ("f", "g")]
    assert multi["references"] == ["f", "g"] and multi["bleu"]["signature"].startswith("nrefs:2|")
    assert multi["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, streams).score)

    calls.clear()
    wording_scores(translate, "en-tl", tmp_path, predictions=hypotheses)
    assert [len(call) for call in calls] == [3, 2]  # the headline's translations are reused
    with pytest.raises(ValueError, match="2 predictions for the 3 test verses of en-tl"):
        wording_scores(translate, "en-tl", tmp_path, predictions=hypotheses[:2])


def test_rounded_and_printed(tmp_path: Path, script_db: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    build_corpus("en-tl", tmp_path, db_path=script_db)
    rounded = rounded_wording_scores(wording_scores(lambda texts: ["x"] * len(texts), "en-tl", tmp_path))
    assert set(rounded["multi_reference"]) == {"references", "bleu", "signature", "chrf", "chrf_signature"}
    assert rounded["sources"]["3"]["verses"] == 2 and rounded["sources"]["4"]["signature"].startswith("nrefs:1|")
    print_wording_scores(rounded)
    out = capsys.readouterr().out
    assert "against 2 references (Ang Dating Biblia 1905, Tagalog Unlocked Literal Bible 2018)" in out
    assert "source worded as the Bible in Basic English 1949/1964: BLEU 0.00" in out and "(2 verses)" in out
