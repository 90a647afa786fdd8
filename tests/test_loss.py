"""The label-smoothed loss computed a slice of positions at a time (vanilla_training/loss.py) against transformers'
own `LabelSmoother` on whole logits: the same value and the same gradients, and the Trainer's CPU steps use it."""

import random

import pytest
import torch
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments
from transformers.trainer_pt_utils import LabelSmoother

import vanilla_training.loss as sliced
import vanilla_training.trainer as trainer_module
from vanilla_training.tokenizer import train_joint_bpe
from vanilla_training.trainer import TranslationTrainer

from helpers import WORDS, tiny_model, toy_pairs


def problem(seed: int = 0, rows: tuple[int, int] = (3, 23), d_model: int = 16, vocab_size: int = 50):
    """Decoder outputs, a projection and labels with padding at the end of two rows; the weights are scaled so that
    the softmax is far from uniform (the smoothing term then differs from the label term)."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(*rows, d_model, generator=generator, requires_grad=True)
    weight = (2 * torch.randn(vocab_size, d_model, generator=generator)).requires_grad_()
    labels = torch.randint(0, vocab_size, rows, generator=generator)
    labels[0, -5:] = labels[2, -1:] = -100
    return hidden, weight, labels


@pytest.mark.parametrize("epsilon", [0.1, 0.0])
@pytest.mark.parametrize("num_items_in_batch", [None, 100])
def test_the_sliced_loss_and_its_gradients_equal_transformers_label_smoother(monkeypatch, epsilon, num_items_in_batch):
    monkeypatch.setattr(sliced, "ROWS_PER_SLICE", 7)  # 69 positions: ten slices, the last one short
    hidden, weight, labels = problem()
    expected = LabelSmoother(epsilon=epsilon)(
        {"logits": hidden @ weight.T}, labels, num_items_in_batch=num_items_in_batch
    )
    expected_grads = torch.autograd.grad(expected, (hidden, weight))
    loss = sliced.label_smoothed_projection_loss(hidden, weight, labels, epsilon, num_items_in_batch)
    grads = torch.autograd.grad(loss, (hidden, weight))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        # summed in another order: equal up to float32 rounding at the gradients' own scale (an absolute 1e-8 failed
        # on an AMX Xeon: gradients up to 0.15, one element 1.9e-8 apart)
        scale = expected_grad.abs().max().item()
        torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6 * scale)
    assert grads[0][0, -5:].abs().max() == 0  # padding positions get no gradient


def test_the_loss_scales_the_gradients_it_hands_back():
    """Autograd multiplies by the loss's own gradient: twice the loss, twice each gradient."""
    hidden, weight, labels = problem()
    once = torch.autograd.grad(sliced.label_smoothed_projection_loss(hidden, weight, labels, 0.1), (hidden, weight))
    twice = torch.autograd.grad(
        2 * sliced.label_smoothed_projection_loss(hidden, weight, labels, 0.1), (hidden, weight)
    )
    for single, double in zip(once, twice, strict=True):
        torch.testing.assert_close(double, 2 * single)


def test_under_bf16_autocast_the_products_run_in_bf16_and_the_loss_stays_near_float32():
    hidden, weight, labels = problem(rows=(4, 64), d_model=32, vocab_size=300)
    exact = sliced.label_smoothed_projection_loss(hidden, weight, labels, 0.1)
    exact_grads = torch.autograd.grad(exact, (hidden, weight))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = sliced.label_smoothed_projection_loss(hidden, weight, labels, 0.1)
    mixed_grads = torch.autograd.grad(mixed, (hidden, weight))
    assert mixed.dtype == torch.float32 and mixed.item() != exact.item()  # rounded somewhere: bf16 was used
    assert mixed.item() == pytest.approx(exact.item(), rel=2e-2)
    for grad, exact_grad in zip(mixed_grads, exact_grads, strict=True):
        assert grad.dtype == torch.float32
        assert torch.nn.functional.cosine_similarity(grad.flatten(), exact_grad.flatten(), dim=0) > 0.99


def test_bad_smoothing_and_misshapen_labels_are_refused_by_name():
    hidden, weight, labels = problem()
    with pytest.raises(ValueError, match=r"label smoothing must lie in \[0, 1\), got 1.0"):
        sliced.label_smoothed_projection_loss(hidden, weight, labels, 1.0)
    with pytest.raises(ValueError, match=r"labels of shape \(3, 22\) for outputs of shape \(3, 23\)"):
        sliced.label_smoothed_projection_loss(hidden, weight, labels[:, :-1], 0.1)


def test_a_cpu_training_step_takes_the_sliced_path_with_the_gradients_of_transformers_path(tmp_path, monkeypatch):
    model = tiny_model(seed=3, std=0.3, dropout=0.0).train()  # no dropout: both passes see one model
    tokenizer = train_joint_bpe([*WORDS, *WORDS.values()], vocab_size=64)
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, report_to="none")
    trainer = TranslationTrainer(
        model=model,
        args=args,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        max_tokens=64,
        bleu_sources=[],
        bleu_references=[],
    )
    pairs = toy_pairs(random.Random(0), 6)
    batch = trainer.data_collator([tokenizer(source, text_target=target) for source, target in pairs])
    assert (batch["labels"] == -100).any()  # the pairs differ in length: padding is in the batch
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return sliced.label_smoothed_projection_loss(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "label_smoothed_projection_loss", counted)
    gradients = {}
    for path, compute_loss in (
        ("sliced", trainer.compute_loss),
        ("transformers", super(TranslationTrainer, trainer).compute_loss),
    ):
        model.zero_grad()
        loss = compute_loss(model, dict(batch))
        loss.backward()
        gradients[path] = (loss.item(), {name: p.grad.clone() for name, p in model.named_parameters()})
    assert calls == [1]  # the TranslationTrainer took the sliced path, transformers' own did not
    assert gradients["sliced"][0] == pytest.approx(gradients["transformers"][0], rel=1e-6)
    for name, grad in gradients["sliced"][1].items():
        torch.testing.assert_close(grad, gradients["transformers"][1][name], rtol=1e-4, atol=1e-7, msg=name)
