"""BLEU and chrF, as the paper evaluates (section 6.1): corpus BLEU by sacreBLEU through `evaluate` (a local metric
module, so nothing is fetched from the Hub), chrF by sacreBLEU. (Its decoding, beam 4 and an output of at most the
input + 50 tokens, is `translator.translate`'s.)"""

from pathlib import Path
from typing import NamedTuple

import evaluate
import sacrebleu
from sacrebleu.significance import PairedTest

from .corpus import Direction

METRIC_PATH = Path(__file__).resolve().parent / "sacrebleu_metric"


def load_bleu() -> evaluate.EvaluationModule:
    """sacreBLEU as an `evaluate` module, loaded from this package (works offline)."""
    return evaluate.load(str(METRIC_PATH))


# sacreBLEU's tokenizer for BLEU by target language: "zh" for Chinese; "char" for Japanese and Korean (sacreBLEU's
# "ja-mecab" and "ko-mecab" need MeCab and a dictionary, which this package does not install); "13a" otherwise.
BLEU_TOKENIZERS = {"zh": "zh", "ja": "char", "ko": "char"}


def bleu_tokenizer(target_lang: str | None) -> str:
    """The sacreBLEU tokenizer that fits ``target_lang`` (an ISO 639-1 code; None or unknown: "13a")."""
    return BLEU_TOKENIZERS.get(target_lang or "", "13a")


def _reference_streams(references: list[str] | list[list[str | None]]) -> list[list[str]]:
    """sacreBLEU's reference streams: one stream for plain strings; for a list of references per prediction, one
    stream per position (a missing reference, None or "", is skipped by sacreBLEU for that prediction)."""
    if all(isinstance(reference, str) for reference in references):
        return [list(references)]
    counts = {len(refs) for refs in references}
    if len(counts) != 1:
        raise ValueError(f"every prediction needs the same number of references (got {sorted(counts)})")
    streams = [[reference or "" for reference in stream] for stream in zip(*references, strict=True)]
    if any(not any(refs) for refs in references):
        raise ValueError("a prediction has no reference (all of its references are empty)")
    return streams


def corpus_bleu(
    predictions: list[str], references: list[str] | list[list[str | None]], target_lang: str | None = None
) -> dict:
    """sacreBLEU's corpus BLEU with its signature, e.g. {"score": 27.3, "signature": "nrefs:1|case:mixed|...", ...}.

    ``references`` holds one reference per prediction, or a list of several per prediction (multi-reference
    BLEU; None or "" where a prediction lacks one). The tokenizer is :func:`bleu_tokenizer` of ``target_lang``.
    """
    streams = _reference_streams(references)
    per_prediction = [list(refs) for refs in zip(*streams, strict=True)]
    return load_bleu().compute(predictions=predictions, references=per_prediction, tokenize=bleu_tokenizer(target_lang))


def corpus_chrf(predictions: list[str], references: list[str] | list[list[str | None]]) -> dict:
    """sacreBLEU's corpus chrF (character 6-grams, beta 2) with its signature, against one reference per prediction
    or several (as :func:`corpus_bleu` takes them)."""
    chrf = sacrebleu.metrics.CHRF()
    score = chrf.corpus_score(predictions, _reference_streams(references))
    return {"score": score.score, "signature": str(chrf.get_signature())}


def score_directions(rows: dict[str, list], predictions: list[str]) -> dict[str, dict]:
    """BLEU (with the target's tokenizer, `evaluation.bleu_tokenizer`) and chrF of `predictions` of `rows`, by
    direction ("de-fr"), in the order of the directions' first rows."""
    by_direction: dict[Direction, list[int]] = {}
    for i, (source, target) in enumerate(zip(rows["source_lang"], rows["target_lang"], strict=True)):
        by_direction.setdefault(Direction(source, target), []).append(i)
    scores = {}
    for direction, indices in by_direction.items():
        predicted, references = [predictions[i] for i in indices], [rows["target"][i] for i in indices]
        bleu, chrf = corpus_bleu(predicted, references, direction.target), corpus_chrf(predicted, references)
        scores[str(direction)] = {
            "bleu": round(bleu["score"], 2),
            "signature": bleu["signature"],
            "chrf": round(chrf["score"], 2),
            "chrf_signature": chrf["signature"],
            "sentences": len(indices),
        }
    return scores


def off_target_rate(predictions: list[str], target_lang: str, languages: list[str] | None = None) -> float:
    """The share of `predictions` whose language, as py3langid detects it (among `languages`, e.g. a multilingual
    model's, where given; else among all it knows), is not `target_lang`: the off-target rate of zero-shot
    translation (Zhang et al. 2020). A prediction with no letter or digit counts as off target. py3langid comes
    with the serve extra."""
    from .serving.detect import Detector, translatable

    if not predictions:
        raise ValueError("the off-target rate of no predictions is undefined")
    detector = Detector() if languages is None else Detector().among(list(languages))
    detected = [detector.detect(text)[0]["language"] if translatable(text) else None for text in predictions]
    return sum(language != target_lang for language in detected) / len(predictions)


SIGNIFICANCE = 0.05  # the p-value under which a paired test's difference counts


class PairedBootstrap(NamedTuple):
    """Two systems' BLEU on the same references and the p-value of their difference (`paired_bootstrap`)."""

    baseline_bleu: float
    system_bleu: float
    p_value: float
    signature: str

    @property
    def significant(self) -> bool:
        """Whether the difference counts (p < `SIGNIFICANCE`)."""
        return self.p_value < SIGNIFICANCE

    @property
    def win(self) -> bool:
        """Whether the system beats the baseline: a higher BLEU, and a difference that counts."""
        return self.system_bleu > self.baseline_bleu and self.significant


def paired_bootstrap(
    baseline: list[str], system: list[str], references: list[str], target_lang: str | None = None
) -> PairedBootstrap:
    """sacreBLEU's paired bootstrap resampling test (`sacrebleu REF -i BASELINE SYSTEM --paired-bs`: Koehn 2004, 1,000
    resamples, seed 12345 unless SACREBLEU_SEED says otherwise) of `system` against `baseline`, translations of the
    same sentences, with the BLEU tokenizer of `target_lang`. Its p-value is two-sided (how often a resample's
    difference, centred, exceeds the real one, plus one, over the resamples plus one): two identical systems get
    1/1001, since sacreBLEU never attributes a zero difference to chance, so a win needs a higher BLEU as well."""
    if not len(baseline) == len(system) == len(references):
        raise ValueError(
            f"a paired test needs a translation of every reference by each system: {len(baseline):,} and "
            f"{len(system):,} translations of {len(references):,} references"
        )
    bleu = sacrebleu.metrics.BLEU(tokenize=bleu_tokenizer(target_lang))
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": bleu}, [references], test_type="bs")
    signatures, scores = test()
    baseline_result, system_result = scores["BLEU"]
    return PairedBootstrap(baseline_result.score, system_result.score, system_result.p_value, str(signatures["BLEU"]))
