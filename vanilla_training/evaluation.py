"""Translation and BLEU, as the paper evaluates (section 6.1): beam search with beam size 4 and length penalty 0.6,
maximum output length = input length + 50, corpus BLEU by sacreBLEU through `evaluate` (a local metric module,
so nothing is fetched from the Hub)."""

from pathlib import Path

import evaluate
import numpy as np
import sacrebleu
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from modeling_vanilla import EXTRA_OUTPUT_LENGTH

from .batching import TokenBudgetBatchSampler

METRIC_PATH = Path(__file__).resolve().parent / "sacrebleu_metric"


def load_bleu() -> evaluate.EvaluationModule:
    """sacreBLEU as an `evaluate` module, loaded from this package (works offline)."""
    return evaluate.load(str(METRIC_PATH))


@torch.no_grad()
def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    max_tokens: int = 4096,
    progress: bool = True,
    **generate_kwargs,
) -> list[str]:
    """Translate `sentences`, in their order, decoding as `model.generation_config` says unless `generate_kwargs`
    (e.g. `num_beams=1`) say otherwise. Sentences of similar length are batched up to `max_tokens` source tokens,
    padding included (a sentence longer than that goes alone; the batch size can change a translation, rarely:
    padding changes floating-point sums), and each batch may produce up to its longest input + 50 tokens (section
    6.1; given explicitly, so that any seq2seq model is held to it). The model is left in the mode (training or
    evaluation) it was in."""
    was_training = model.training
    model.eval()
    lengths = np.array([len(ids) for ids in tokenizer(sentences)["input_ids"]], dtype=np.int64)
    alone = np.flatnonzero(lengths > max_tokens)
    rest = np.flatnonzero(lengths <= max_tokens)
    batches = [[int(i)] for i in alone]
    batches += [rest[batch].tolist() for batch in TokenBudgetBatchSampler(lengths[rest], max_tokens, shuffle=False)]
    translations: list[str] = [""] * len(sentences)
    beams = generate_kwargs.get("num_beams", model.generation_config.num_beams) or 1
    for batch in tqdm(batches, desc=f"translating (beam {beams})", disable=not progress, unit="batch"):
        inputs = tokenizer([sentences[i] for i in batch], return_tensors="pt", padding=True).to(model.device)
        limit = inputs["input_ids"].shape[1] + EXTRA_OUTPUT_LENGTH
        output = model.generate(**inputs, **{"max_new_tokens": limit, **generate_kwargs})
        for i, text in zip(batch, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True):
            translations[i] = text
    model.train(was_training)
    return translations


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
