"""Compile-ready decoding and training (issue 25): a static cache decodes as the dynamic one; the decoding step
compiles as one graph (`fullgraph=True`) that is reused at every step and by a later, shorter call; custom 4-D masks
mean what the equivalent 2-D masks mean; flex attention computes what sdpa computes; training under torch.compile
gives the eager losses; and `generate` takes embeddings or a tuple of encoder outputs instead of ids.

Compiling on the CPU calls a C++ compiler and takes tens of seconds, so the compiled tests share one compiled model
(a module fixture) and are marked slow."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import CompileConfig, EncoderDecoderCache, StaticCache

from modeling_vanilla import VanillaForConditionalGeneration
from vanilla_training.cli.train import main

from helpers import padded_batch, tiny_model, toy_run_args, write_toy_corpus


def generate(model: VanillaForConditionalGeneration, ids: torch.Tensor, mask: torch.Tensor, **options):
    with torch.no_grad():
        return model.generate(
            input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **options
        )


@pytest.mark.parametrize("beams", [1, 4])
def test_a_static_cache_gives_the_dynamic_caches_tokens_and_scores(beams):
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    options = {"num_beams": beams, "max_new_tokens": 10, "no_repeat_ngram_size": 1}
    dynamic = generate(model, ids, mask, **options)
    static = generate(model, ids, mask, cache_implementation="static", **options)
    assert isinstance(static.cache.self_attention_cache, StaticCache)
    assert torch.equal(static.sequences, dynamic.sequences)
    for static_scores, dynamic_scores in zip(static.scores, dynamic.scores, strict=True):
        assert torch.allclose(static_scores, dynamic_scores, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# The compiled decoding step
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_runs():
    """One tiny model whose positional-encoding table (4 rows) is shorter than its static cache, decoded by
    transformers' compiled path (static cache, `fullgraph=True`, static shapes), 8 new tokens for one batch, then 3
    for another batch of the same shape, counting the graphs dynamo compiled after each call; then the same two
    calls eagerly, with the dynamic cache."""
    model = tiny_model(std=0.4, max_position_embeddings=4)
    first, first_mask = padded_batch(seed=0, lengths=(9, 6, 3))
    second, second_mask = padded_batch(seed=1, lengths=(5, 9, 7))
    calls = [(first, first_mask, 8), (second, second_mask, 3)]
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True  # transformers compiles on accelerators only, unless told
    torch._dynamo.reset()
    counters.clear()
    compiled, graphs = [], []
    for ids, mask, new in calls:
        options = {"cache_implementation": "static", "compile_config": compile_config}
        compiled.append(generate(model, ids, mask, max_new_tokens=new, **options))
        graphs.append(counters["stats"]["unique_graphs"])
    table_rows = model.model.decoder.positional_encoding.table.shape[0]
    eager = [generate(model, ids, mask, max_new_tokens=new) for ids, mask, new in calls]
    return {"model": model, "eager": eager, "compiled": compiled, "graphs": graphs, "table_rows": table_rows}


@pytest.mark.slow
def test_the_compiled_decoding_step_equals_the_eager_one(compiled_runs):
    assert hasattr(compiled_runs["model"], "_compiled_call")  # transformers' compiled forward was used
    for eager, compiled in zip(compiled_runs["eager"], compiled_runs["compiled"], strict=True):
        assert isinstance(compiled.cache.self_attention_cache, StaticCache)
        assert torch.equal(compiled.sequences, eager.sequences)
        for compiled_scores, eager_scores in zip(compiled.scores, eager.scores, strict=True):
            assert torch.allclose(compiled_scores, eager_scores, atol=1e-5)


@pytest.mark.slow
def test_one_graph_serves_every_step_and_a_later_shorter_call(compiled_runs):
    """The first call compiles its second step (the first, which fills the cache, runs eagerly) and reuses the
    graph for steps 3 to 8; the second call, shorter, reuses the static cache's shape and the same graph."""
    assert compiled_runs["graphs"] == [1, 1]


@pytest.mark.slow
def test_the_positional_encoding_grows_before_the_compiled_steps(compiled_runs):
    """The static cache of the first call holds 8 target positions (the start token and the new tokens but the
    last, which is never fed back), more than the 4 rows of the decoder's table: its first step, eager, reserved
    them (with the formula's values), so that the compiled steps read positions up to the cache's size."""
    cache_size = compiled_runs["compiled"][0].cache.get_max_length()
    assert cache_size == 8 and compiled_runs["table_rows"] >= cache_size
    positional_encoding = compiled_runs["model"].model.decoder.positional_encoding
    assert torch.equal(positional_encoding.table, positional_encoding.formula(positional_encoding.table.shape[0]))


def test_a_decoding_step_with_a_static_cache_reads_nothing_back_from_the_device():
    """The graph dynamo captures of a decoding step (after the first, eager, step filled the static cache) holds no
    `item()` or other read of a tensor's value into Python, which on a GPU would wait for the device every step:
    positions come from the cache's length tensor, and the input checks are skipped inside the graph."""
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    config = model.config
    cache = EncoderDecoderCache(StaticCache(config, max_cache_len=6), StaticCache(config, max_cache_len=ids.shape[1]))
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        step = {"encoder_outputs": encoder_outputs, "attention_mask": mask, "cache": cache, "use_cache": True}
        model(decoder_input_ids=torch.full((3, 1), 2), **step)  # the first step, eager
        graphs = []

        def capture(graph: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
            graphs.append(graph)
            return graph.forward

        torch._dynamo.reset()
        torch.compile(model, backend=capture, fullgraph=True)(decoder_input_ids=torch.full((3, 1), 7), **step)
    reads = {"item", "tolist", "__bool__", "__int__", "__index__"}
    calls = [node.target for node in graphs[0].graph.nodes if node.op in ("call_method", "call_function")]
    assert len(graphs) == 1 and calls
    assert not [target for target in calls if getattr(target, "__name__", target) in reads | {"_local_scalar_dense"}]


@pytest.mark.slow
def test_a_compiled_forward_refuses_positions_past_the_table_by_name():
    model = tiny_model(max_position_embeddings=4)
    ids, mask = padded_batch(lengths=(3, 2))
    forward = torch.compile(model, fullgraph=True)
    with torch.no_grad(), pytest.raises(Exception, match="position 5 is past the positional-encoding table"):
        forward(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((2, 6), 5))
    with torch.no_grad():  # eager code grows the table instead
        assert model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((2, 6), 5)).logits.shape[1] == 6


# ---------------------------------------------------------------------------------------------------------------
# Custom 4-D attention masks
# ---------------------------------------------------------------------------------------------------------------


def additive(keep: torch.Tensor) -> torch.Tensor:
    """transformers' form of a prepared 4-D mask: 0 where a query may attend, the most negative float elsewhere."""
    return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_custom_4d_masks_give_the_logits_of_the_equivalent_2d_masks(attn_implementation):
    """A source mask (batch, 1, source, source) for the encoder and a decoder mask (batch, 1, target, target) that
    holds the causal part and the target padding, left and inside: the 2-D masks' logits at every kept position."""
    model = tiny_model(std=0.3, attn_implementation=attn_implementation)
    ids, mask = padded_batch()
    decoder_ids = torch.randint(4, 64, (3, 6), generator=torch.Generator().manual_seed(2))
    decoder_mask = torch.ones(3, 6, dtype=torch.long)
    decoder_mask[1, :2] = 0  # left padding
    decoder_mask[2, 3] = 0  # a masked position inside
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    decoder_4d = additive(causal & decoder_mask.bool()[:, None, None, :])
    source_4d = additive(mask.bool()[:, None, None, :].expand(3, 1, 9, 9))
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        encoded_4d = model.get_encoder()(input_ids=ids, attention_mask=source_4d).last_hidden_state
        expected = model(
            encoder_outputs=(encoded,),
            attention_mask=mask,
            decoder_input_ids=decoder_ids,
            decoder_attention_mask=decoder_mask,
        ).logits
        actual = model(
            encoder_outputs=(encoded_4d,),
            attention_mask=mask,
            decoder_input_ids=decoder_ids,
            decoder_attention_mask=decoder_4d,
        ).logits
        unmasked = model(encoder_outputs=(encoded,), attention_mask=mask, decoder_input_ids=decoder_ids).logits
    tokens = mask.bool()
    assert torch.allclose(encoded_4d[tokens], encoded[tokens], atol=1e-5)
    kept = decoder_mask.bool()
    assert torch.allclose(actual[kept], expected[kept], atol=1e-5)
    assert not torch.allclose(actual[2, 4:], unmasked[2, 4:], atol=1e-3)  # the masked position mattered


# ---------------------------------------------------------------------------------------------------------------
# Flex attention (declared supported; on the CPU it runs only without gradients and compiles its kernels slowly)
# ---------------------------------------------------------------------------------------------------------------


# The comparison runs in a fresh process. torch 2.13's compiled CPU flex-attention kernel crashes the process
# (segmentation fault) when CTranslate2 has translated in it before (tests/test_export_ctranslate2.py does, and
# pytest-xdist may run it first on the same worker): reproduced with `pytest -n 0 "tests/test_export_ctranslate2.py::
# test_greedy_and_beam_translations_equal_generate[tied]"` followed by this test in one process.
FLEX_AGAINST_SDPA = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from helpers import padded_batch, tiny_model
sdpa = tiny_model(std=0.4, encoder_layers=1, decoder_layers=1)
flex = tiny_model(std=0.4, encoder_layers=1, decoder_layers=1, attn_implementation="flex_attention")
ids, mask = padded_batch()
decoder_ids = torch.randint(4, 64, (3, 5), generator=torch.Generator().manual_seed(1))
decoder_mask = torch.ones_like(decoder_ids)
decoder_mask[2, 3:] = 0
batch = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder_ids}
with torch.no_grad():
    expected = sdpa(**batch, decoder_attention_mask=decoder_mask).logits
    actual = flex(**batch, decoder_attention_mask=decoder_mask).logits
    unmasked = sdpa(**batch).logits
print(json.dumps({
    "implementation": flex.config._attn_implementation,
    "flex_vs_sdpa": (actual - expected).abs().max().item(),
    "decoder_mask_effect": (expected - unmasked).abs().max().item(),
}))
"""


@pytest.mark.slow
def test_flex_attention_on_the_cpu_gives_the_sdpa_logits():
    tests = Path(__file__).parent
    run = subprocess.run(
        [sys.executable, "-c", FLEX_AGAINST_SDPA, str(tests)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tests.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["implementation"] == "flex_attention"
    assert result["flex_vs_sdpa"] < 1e-5
    assert result["decoder_mask_effect"] > 1e-3  # the decoder mask matters here


# ---------------------------------------------------------------------------------------------------------------
# generate from embeddings, or from encoder outputs given as a tuple
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("beams", [1, 4])
def test_generate_from_embeddings_or_a_tuple_of_encoder_outputs_gives_the_ids_tokens(beams):
    """Embeddings (the raw lookup, as `get_input_embeddings()` gives) and the encoder output as a plain tuple both
    decode as the ids do, under the paper's default length limit (source length + 50, read from either input)."""
    model = tiny_model(std=0.4)
    ids, mask = padded_batch()
    options = {"num_beams": beams, "no_repeat_ngram_size": 1, "eos_token_id": -1}  # never stops: the limit decides
    with torch.no_grad():
        by_ids = model.generate(input_ids=ids, attention_mask=mask, **options)
        embeddings = model.get_input_embeddings()(ids)
        by_embeddings = model.generate(inputs_embeds=embeddings, attention_mask=mask, **options)
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        by_tuple = model.generate(encoder_outputs=(encoded,), attention_mask=mask, **options)
    assert by_ids.shape[1] == 1 + ids.shape[1] + 50
    assert torch.equal(by_embeddings, by_ids)
    assert torch.equal(by_tuple, by_ids)


# ---------------------------------------------------------------------------------------------------------------
# Training under torch.compile
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_training_under_torch_compile_gives_the_eager_losses(tmp_path):
    """`--torch-compile` (the Trainer's `torch_compile=True`) on a toy run of a 1+1-layer model: the same losses as
    eager, step by step, and dynamo compiled the model once (every step is one batch of the whole corpus, so the
    shapes never change). Dropout is off: compiled kernels draw other random masks."""
    files = write_toy_corpus(tmp_path, {"train": 20, "validation": 4})
    model = '{"dropout": 0.0, "encoder_layers": 1, "decoder_layers": 1}'
    tiny = {"size": "tiny", "model_config": model, "max_tokens": 100_000, "max_steps": 3, "eval_steps": 5}
    tiny["bleu_sentences"] = 0
    losses = {}
    for mode, flags in (("eager", {}), ("compiled", {"torch_compile": True})):
        torch._dynamo.reset()
        counters.clear()
        results = main(toy_run_args(files, tmp_path / mode, **tiny, **flags))
        losses[mode] = [entry["loss"] for entry in results["log_history"] if "loss" in entry]
        graphs = counters["stats"]["unique_graphs"]
        assert graphs == (1 if mode == "compiled" else 0), (mode, graphs)
    assert len(losses["compiled"]) == 3
    assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-4)
