"""sacreBLEU as an `evaluate` metric module that loads from this folder, offline.

`evaluate.load("sacrebleu")` fetches its module from the Hub; `evaluate.load(<path of this folder>)` does not.
The score is `sacrebleu.metrics.BLEU(...).corpus_score`, so it equals `sacrebleu.corpus_bleu`, and the result
carries the sacreBLEU signature that makes a BLEU figure reproducible.
"""

import datasets
import evaluate
import sacrebleu


class SacreBleuMetric(evaluate.Metric):
    """Corpus BLEU of detokenized hypotheses against one or more references each ("" where a prediction has fewer
    references than others), with sacreBLEU's tokenizer `tokenize` (default 13a; "zh", "char", ...)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=__doc__,
            citation="Post, 2018. A Call for Clarity in Reporting BLEU Scores.",
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions: list[str], references: list[list[str]], tokenize: str = "13a") -> dict:
        if len({len(refs) for refs in references}) > 1:
            raise ValueError("every prediction needs the same number of references ('' where one is missing)")
        bleu = sacrebleu.metrics.BLEU(tokenize=tokenize)
        streams = [[ref or "" for ref in stream] for stream in zip(*references, strict=True)]
        score = bleu.corpus_score(predictions, streams)
        return {
            "score": score.score,
            "precisions": score.precisions,
            "bp": score.bp,
            "sys_len": score.sys_len,
            "ref_len": score.ref_len,
            "signature": str(bleu.get_signature()),
        }
