"""The model learns: a tiny Transformer trained with Seq2SeqTrainer reverses digit strings it has never seen."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import reverse_digits  # noqa: E402


def test_seq2seq_trainer_learns_to_reverse_digit_strings():
    model = reverse_digits.train(steps=400, seed=0)
    assert reverse_digits.exact_match(model, reverse_digits.unseen_strings(200), num_beams=4) >= 0.95
