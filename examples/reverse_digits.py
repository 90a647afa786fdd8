"""Teach a tiny Transformer to reverse digit strings with `Seq2SeqTrainer`, then decode with beam search.

A one-minute sanity check of the whole stack on CPU (model, loss, label smoothing, Trainer, generate):

    python examples/reverse_digits.py
"""

import argparse
import random
import tempfile

import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config
from training.train import Seq2SeqCollator

PAD, UNK, BOS, EOS = 0, 1, 2, 3
DIGIT_OFFSET = 4  # digit d is token d + 4


def encode(digits: str) -> list[int]:
    return [int(d) + DIGIT_OFFSET for d in digits] + [EOS]


def decode(ids: list[int]) -> str:
    return "".join(str(i - DIGIT_OFFSET) for i in ids if i >= DIGIT_OFFSET)


def make_examples(count: int, seed: int, min_length: int = 3, max_length: int = 8) -> list[dict]:
    """Random digit strings and their reversal, as token ids."""
    rng = random.Random(seed)
    examples = []
    for _ in range(count):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(min_length, max_length)))
        examples.append({"input_ids": encode(digits), "labels": encode(digits[::-1])})
    return examples


def train(steps: int = 400, seed: int = 0, output_dir: str | None = None) -> VanillaForConditionalGeneration:
    """A 2+2-layer model trained with the paper's optimiser and schedule shape, and label smoothing 0.1."""
    torch.manual_seed(seed)
    config = VanillaConfig(
        vocab_size=DIGIT_OFFSET + 10,
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
            adam_beta1=0.9,
            adam_beta2=0.98,
            adam_epsilon=1e-9,
            weight_decay=0.0,
            label_smoothing_factor=0.1,
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
            train_dataset=make_examples(steps * 64, seed=seed),
            data_collator=Seq2SeqCollator(model, PAD),
        )
        trainer.train()
    model.generation_config = paper_generation_config(config)  # decode as the paper does: beam 4, penalty 0.6
    return model.eval()


def exact_match(model: VanillaForConditionalGeneration, examples: list[dict], num_beams: int = 4) -> float:
    """Share of examples whose beam-search output equals the reversed string exactly."""
    batch = Seq2SeqCollator(model, PAD)(examples)
    with torch.no_grad():
        generated = model.generate(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=num_beams
        )
    hits = sum(decode(out.tolist()) == decode(ex["labels"]) for out, ex in zip(generated, examples, strict=True))
    return hits / len(examples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    model = train(args.steps)
    test = make_examples(200, seed=12345)
    print(f"beam-4 exact match on 200 unseen strings: {exact_match(model, test):.1%}")
    for example in test[:3]:
        source = torch.tensor([example["input_ids"]])
        output = model.generate(input_ids=source, attention_mask=torch.ones_like(source))[0].tolist()
        print(f"{decode(example['input_ids'])} -> {decode(output)}")


if __name__ == "__main__":
    main()
