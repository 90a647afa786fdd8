"""Teach a tiny Transformer to reverse digit strings with `Seq2SeqTrainer`, then decode with beam search.

A one-minute sanity check of the whole stack on CPU (tokenizer, model, loss, label smoothing, Trainer, generate):

    python examples/reverse_digits.py

The strings it is tested on are never trained on: a fixed tenth of all digit strings (chosen by a hash of the
string) is held out of training.
"""

import argparse
import random
import tempfile
import zlib

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config
from vanilla_training.recipe import ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON, LABEL_SMOOTHING

SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")  # ids 0-3, as the joint BPE of vanilla_training/ has them
HELD_OUT = 10  # one digit string in HELD_OUT is a test string


def digit_tokenizer() -> PreTrainedTokenizerFast:
    """One token per digit (ids 4-13) and `</s>` at the end of every sequence."""
    vocabulary = {token: index for index, token in enumerate((*SPECIAL_TOKENS, *"0123456789"))}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\d"), behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 3)])
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def is_test_string(digits: str) -> bool:
    """Whether `digits` is held out of training: a fixed tenth of all strings, by their CRC-32, so that training
    and test strings are disjoint by construction."""
    return zlib.crc32(digits.encode()) % HELD_OUT == 0


def digit_strings(count: int, seed: int, test: bool) -> list[str]:
    """`count` random strings of 3 to 8 digits, all test strings or none."""
    rng = random.Random(seed)
    strings = []
    while len(strings) < count:
        digits = "".join(rng.choices("0123456789", k=rng.randint(3, 8)))
        if is_test_string(digits) == test:
            strings.append(digits)
    return strings


def make_examples(tokenizer: PreTrainedTokenizerFast, count: int, seed: int) -> list[dict]:
    """`count` training strings and their reversal, as token ids."""
    strings = digit_strings(count, seed, test=False)
    encoded = tokenizer(strings, text_target=[digits[::-1] for digits in strings])
    pairs = zip(encoded["input_ids"], encoded["labels"], strict=True)
    return [{"input_ids": ids, "labels": labels} for ids, labels in pairs]


def train(steps: int = 400, seed: int = 0, output_dir: str | None = None) -> VanillaForConditionalGeneration:
    """A 2+2-layer model trained with the paper's optimiser and schedule shape, and label smoothing 0.1."""
    torch.manual_seed(seed)
    tokenizer = digit_tokenizer()
    config = VanillaConfig(
        vocab_size=len(tokenizer),
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        dropout=0.0,
    )
    model = VanillaForConditionalGeneration(config)
    with tempfile.TemporaryDirectory() as scratch:
        args = Seq2SeqTrainingArguments(
            output_dir=output_dir or scratch,
            max_steps=steps,
            per_device_train_batch_size=64,
            learning_rate=3e-3,
            lr_scheduler_type="inverse_sqrt",
            warmup_steps=50,
            adam_beta1=ADAM_BETA1,
            adam_beta2=ADAM_BETA2,
            adam_epsilon=ADAM_EPSILON,
            weight_decay=0.0,
            label_smoothing_factor=LABEL_SMOOTHING,
            save_strategy="no",
            logging_steps=100,
            report_to="none",
            use_cpu=True,
            seed=seed,
            disable_tqdm=True,
        )
        trainer = Seq2SeqTrainer(
            model=model,
            args=args,
            train_dataset=make_examples(tokenizer, steps * 64, seed=seed),
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        )
        trainer.train()
    model.generation_config = paper_generation_config(config)  # decode as the paper does: beam 4, penalty 0.6
    return model.eval()


def exact_match(model: VanillaForConditionalGeneration, sources: list[str], num_beams: int = 4) -> float:
    """Share of digit strings whose beam-search output is their exact reversal."""
    tokenizer = digit_tokenizer()
    with torch.no_grad():
        generated = model.generate(**tokenizer(sources, return_tensors="pt", padding=True), num_beams=num_beams)
    outputs = tokenizer.batch_decode(generated, skip_special_tokens=True)
    return sum(output == source[::-1] for output, source in zip(outputs, sources, strict=True)) / len(sources)


def unseen_strings(count: int = 200, seed: int = 12345) -> list[str]:
    """Test strings: held out of training (`is_test_string`)."""
    return digit_strings(count, seed, test=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    model, tokenizer = train(args.steps), digit_tokenizer()
    test = unseen_strings()
    print(f"beam-4 exact match on {len(test)} unseen strings: {exact_match(model, test):.1%}")
    for source in test[:3]:
        with torch.no_grad():
            output = model.generate(**tokenizer(source, return_tensors="pt"))[0]
        print(f"{source} -> {tokenizer.decode(output, skip_special_tokens=True)}")


if __name__ == "__main__":
    main()
