"""One joint BPE vocabulary over source and target language, as a Hugging Face fast tokenizer.

Special tokens and their ids: ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3. Every encoded sequence ends
with ``</s>``. The result survives ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` unchanged.
"""

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # their position is their id


def train_joint_bpe(
    texts: Iterable[str], vocab_size: int = 8000, model_max_length: int = 1024
) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer (NFKC, Metaspace) with at most ``vocab_size`` entries on ``texts``.

    ``vocab_size`` counts the special tokens and is an upper bound: a small corpus may yield fewer merges.
    ValueError if it cannot hold the special tokens plus every distinct character of ``texts``.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: it must exceed the {len(SPECIAL_TOKENS)} special tokens"
        )
    if model_max_length < 1:
        raise ValueError(f"model_max_length={model_max_length} must be positive")
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS))
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.get_vocab_size() > vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than the special tokens plus the distinct characters "
            f"of the texts ({tokenizer.get_vocab_size()} entries before any merge)"
        )
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, SPECIAL_TOKENS.index(EOS))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        model_max_length=model_max_length,
    )
