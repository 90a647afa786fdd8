"""MarianMT / OPUS-MT conversion: the Marian options of VanillaConfig, exact equality with MarianMTModel, refusals."""

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    MarianConfig,
    MarianForCausalLM,
    MarianMTModel,
    PreTrainedTokenizerFast,
)
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

from modeling_vanilla import VanillaForConditionalGeneration, sinusoidal_positional_encoding
from modeling_vanilla.convert_marian import (
    check_marian_config,
    convert_marian,
    convert_marian_folder,
    copy_tokenizer_files,
    main,
)
from vanilla_training.cli.train import main as train_main

from helpers import (
    EOS,
    OPUS_MT,
    PAD,
    WORDS,
    fine_tune_args,
    opus_batch,
    opus_mt_like,
    padded_batch,
    tiny_model,
    write_toy_corpus,
)
from hub_server import FakeHub

# One beam search setup for both models (the converted one otherwise decodes as the paper does, Marian as it is).
BEAM = {
    "num_beams": 4,
    "length_penalty": 0.6,
    "early_stopping": True,
    "max_new_tokens": 20,
    "return_dict_in_generate": True,
    "output_scores": True,
}


def _logits(model, ids, mask) -> torch.Tensor:
    """Logits of random targets starting from pad (OPUS-MT's decoder start), the first left-padded by two, the second
    with a masked token inside, the third right-padded: the two models agree only if both honour the decoder mask
    (padding at the end alone is hidden by the causal mask from every position before it)."""
    decoder_ids = torch.randint(1, PAD, (ids.shape[0], 7), generator=torch.Generator().manual_seed(1))
    decoder_ids[:, 0] = PAD
    decoder_ids[0, :3] = PAD
    decoder_mask = torch.ones_like(decoder_ids)
    decoder_mask[0, :2] = 0
    decoder_mask[1, 3] = 0
    decoder_mask[2, 5:] = 0
    with torch.no_grad():
        return model(
            input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask
        ).logits


def _beam(model, ids, mask):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, **BEAM)


def _assert_same_translations(expected, actual) -> None:
    assert torch.equal(actual.sequences, expected.sequences)
    assert torch.allclose(actual.sequences_scores, expected.sequences_scores, atol=1e-4)


@pytest.fixture(scope="module")
def marian() -> MarianMTModel:
    return opus_mt_like()


@pytest.fixture(scope="module")
def reference(marian):
    """Marian's logits and beam-4 translations of the padded batch."""
    ids, mask = opus_batch()
    return _logits(marian, ids, mask), _beam(marian, ids, mask)


# ---------------------------------------------------------------------------------------------------------------
# The Marian options of VanillaConfig (each defaults to the paper)
# ---------------------------------------------------------------------------------------------------------------


def test_sin_then_cos_layout_is_marians_table_and_the_papers_values_permuted():
    d_model = 16
    encoding = sinusoidal_positional_encoding(torch.arange(60), d_model, "sin_then_cos")
    for pos in (0, 1, 7, 59):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert encoding[pos, i].item() == pytest.approx(math.sin(angle), abs=2e-6)
            assert encoding[pos, d_model // 2 + i].item() == pytest.approx(math.cos(angle), abs=2e-6)
    interleaved = sinusoidal_positional_encoding(torch.arange(60), d_model)
    assert torch.equal(encoding, torch.cat((interleaved[:, 0::2], interleaved[:, 1::2]), dim=1))
    marian_table = MarianSinusoidalPositionalEmbedding(60, d_model).create_weight()
    assert torch.allclose(encoding, marian_table, atol=1e-5)
    with pytest.raises(ValueError, match="unknown positional encoding layout 'cos_then_sin'"):
        sinusoidal_positional_encoding(torch.arange(3), d_model, "cos_then_sin")


def test_final_logits_bias_is_added_saved_and_zeroed_when_not_loaded(tmp_path):
    assert not hasattr(tiny_model(), "final_logits_bias")  # the paper's model has none
    model = tiny_model(std=0.3, add_final_logits_bias=True)
    assert torch.equal(model.final_logits_bias, torch.zeros(1, 64))
    assert "final_logits_bias" in model.state_dict()
    ids, mask = padded_batch()
    decoder_ids = torch.full((3, 2), 2)
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        model.final_logits_bias.normal_()
        after = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    assert torch.allclose(after - before, model.final_logits_bias.expand_as(after), atol=1e-5)
    model.save_pretrained(tmp_path / "with_bias")
    loaded = VanillaForConditionalGeneration.from_pretrained(tmp_path / "with_bias")
    assert torch.equal(loaded.final_logits_bias, model.final_logits_bias)
    tiny_model().save_pretrained(tmp_path / "without_bias")
    added = VanillaForConditionalGeneration.from_pretrained(tmp_path / "without_bias", add_final_logits_bias=True)
    assert torch.equal(added.final_logits_bias, torch.zeros(1, 64))  # not the garbage of a meta-device buffer


def test_resize_token_embeddings_resizes_the_final_logits_bias():
    model = tiny_model(add_final_logits_bias=True)
    with torch.no_grad():
        model.final_logits_bias.normal_()
    bias = model.final_logits_bias.clone()
    model.resize_token_embeddings(80)
    assert model.final_logits_bias.shape == (1, 80)
    assert torch.equal(model.final_logits_bias[:, :64], bias) and not model.final_logits_bias[:, 64:].any()
    assert "final_logits_bias" in model.state_dict()  # still a persistent buffer
    ids, mask = padded_batch(vocab_size=80)
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 2), 2)).logits.shape[-1] == 80
    model.resize_token_embeddings(50)
    assert torch.equal(model.final_logits_bias, bias[:, :50])
    assert model.lm_head.weight is model.model.shared.weight


def test_decoder_can_start_from_pad():
    model = tiny_model(std=0.3, decoder_start_token_id=0)
    ids, mask = padded_batch()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_new_tokens=3)
    assert out[:, 0].eq(0).all()
    assert model.prepare_decoder_input_ids_from_labels(torch.tensor([[5, 6, 3]])).tolist() == [[0, 5, 6]]


# ---------------------------------------------------------------------------------------------------------------
# Conversion: identical output
# ---------------------------------------------------------------------------------------------------------------


def test_converted_config_and_weights(marian):
    vanilla = convert_marian(marian)
    config = vanilla.config
    assert (config.activation_function, config.positional_encoding_layout) == ("swish", "sin_then_cos")
    assert config.add_final_logits_bias and config.scale_embedding
    assert (config.pad_token_id, config.decoder_start_token_id, config.eos_token_id) == (PAD, PAD, EOS)
    generation = vanilla.generation_config
    assert (generation.num_beams, generation.length_penalty, generation.early_stopping) == (4, 0.6, True)
    assert (generation.decoder_start_token_id, generation.pad_token_id, generation.eos_token_id) == (PAD, PAD, EOS)
    shared = vanilla.model.shared.weight
    assert torch.equal(shared, marian.model.shared.weight)
    assert vanilla.lm_head.weight is shared and vanilla.model.encoder.embed_tokens.weight is shared
    assert torch.equal(vanilla.final_logits_bias, marian.final_logits_bias)
    layer, marian_layer = vanilla.model.decoder.layers[1], marian.model.decoder.layers[1]
    assert torch.equal(layer.cross_attn.v_proj.bias, marian_layer.encoder_attn.v_proj.bias)
    assert torch.equal(layer.feed_forward.fc2.weight, marian_layer.fc2.weight)
    assert torch.equal(layer.feed_forward_norm.weight, marian_layer.final_layer_norm.weight)
    assert not vanilla.training


def test_converted_model_gives_marians_logits_and_beam_search(marian, reference):
    logits, translations = reference
    assert len({tuple(row) for row in translations.sequences.tolist()}) == 3  # not degenerate: rows differ
    vanilla = convert_marian(marian)
    ids, mask = opus_batch()
    assert torch.allclose(_logits(vanilla, ids, mask), logits, atol=1e-5)
    _assert_same_translations(translations, _beam(vanilla, ids, mask))


def untied_opus_mt_like(seed: int = 4) -> MarianMTModel:
    """A Marian model with its own output layer, as OPUS-MT checkpoints converted with an untied output layer are:
    one embedding matrix for both stacks (`share_encoder_decoder_embeddings`), a separate `lm_head`."""
    marian = opus_mt_like(seed=seed, tie_word_embeddings=False)
    with torch.no_grad():
        for embedding in (marian.model.encoder.embed_tokens, marian.model.decoder.embed_tokens):
            embedding.weight.copy_(marian.model.shared.weight)
    assert not torch.equal(marian.lm_head.weight, marian.model.shared.weight)
    return marian


def test_untied_output_layer_is_converted_exactly(tmp_path):
    marian = untied_opus_mt_like()
    ids, mask = opus_batch()
    vanilla = convert_marian(marian)
    assert vanilla.config.tie_word_embeddings is False
    assert torch.equal(vanilla.lm_head.weight, marian.lm_head.weight)
    assert torch.equal(vanilla.model.shared.weight, marian.model.shared.weight)
    translations = _beam(marian, ids, mask)
    assert len({tuple(row) for row in translations.sequences.tolist()}) == 3
    for model in (vanilla, _saved_and_loaded(vanilla, tmp_path)):
        assert torch.allclose(_logits(model, ids, mask), _logits(marian, ids, mask), atol=1e-5)
        _assert_same_translations(translations, _beam(model, ids, mask))


def _saved_and_loaded(model, folder):
    model.save_pretrained(folder)
    return VanillaForConditionalGeneration.from_pretrained(folder)


def test_separate_source_and_target_embeddings_are_refused_by_name():
    marian = untied_opus_mt_like()
    with torch.no_grad():
        marian.model.encoder.embed_tokens.weight.add_(1.0)
    with pytest.raises(ValueError, match="encoder.embed_tokens.weight differs .*separate source and target embeddings"):
        convert_marian(marian)


def test_zero_final_logits_bias_gives_the_papers_head():
    marian = opus_mt_like(seed=1)
    with torch.no_grad():
        marian.final_logits_bias.zero_()
    vanilla = convert_marian(marian)
    assert not vanilla.config.add_final_logits_bias and not hasattr(vanilla, "final_logits_bias")
    ids, mask = opus_batch()
    assert torch.allclose(_logits(vanilla, ids, mask), _logits(marian, ids, mask), atol=1e-5)


def test_layerdrop_is_dropped_with_a_warning_and_outputs_stay_equal():
    marian = opus_mt_like(seed=2, encoder_layerdrop=0.1, decoder_layerdrop=0.2)
    with pytest.warns(UserWarning, match="fine-tuning the converted model trains without LayerDrop"):
        vanilla = convert_marian(marian)
    ids, mask = opus_batch()
    assert torch.allclose(_logits(vanilla, ids, mask), _logits(marian, ids, mask), atol=1e-5)


def _tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the tiny vocabulary: `</s>`=0, `<unk>`=1, `w2`..`w62`, `<pad>`=63."""
    vocab = {"</s>": 0, "<unk>": 1, **{f"w{i}": i for i in range(2, PAD)}, "<pad>": PAD}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>", pad_token="<pad>")


def test_saved_folder_round_trip_and_command_line(marian, reference, tmp_path):
    logits, translations = reference
    source, destination = tmp_path / "marian", tmp_path / "vanilla"
    marian.save_pretrained(source)
    _tokenizer().save_pretrained(source)
    main([str(source), str(destination)])

    files = sorted(path.name for path in destination.iterdir())
    assert "tokenizer.json" in files and "tokenizer_config.json" in files and "modeling_vanilla.py" in files
    assert "convert_marian.py" not in files
    with safe_open(destination / "model.safetensors", "pt") as weights:
        assert "final_logits_bias" in set(weights.keys())
    assert AutoTokenizer.from_pretrained(destination)("w5 w9 w17").input_ids == [5, 9, 17]
    ids, mask = opus_batch()
    for loaded in (
        VanillaForConditionalGeneration.from_pretrained(destination),
        AutoModelForSeq2SeqLM.from_pretrained(destination),
    ):
        assert type(loaded) is VanillaForConditionalGeneration
        assert torch.allclose(_logits(loaded, ids, mask), logits, atol=1e-5)
        _assert_same_translations(translations, _beam(loaded, ids, mask))


def test_marian_sentencepiece_tokenizer_files_are_copied_and_keep_their_class(tmp_path):
    source, destination = tmp_path / "source", tmp_path / "destination"
    source.mkdir()
    destination.mkdir()
    for name in ("source.spm", "target.spm", "vocab.json"):
        (source / name).write_text("dummy")
    (source / "tokenizer_config.json").write_text('{"source_lang": "en", "target_lang": "de"}')
    (source / "README.md").write_text("not a tokenizer file")
    copied = copy_tokenizer_files(source, destination)
    assert sorted(copied) == ["source.spm", "target.spm", "tokenizer_config.json", "vocab.json"]
    settings = json.loads((destination / "tokenizer_config.json").read_text())
    assert settings == {"source_lang": "en", "target_lang": "de", "tokenizer_class": "MarianTokenizer"}
    assert not (destination / "README.md").exists()


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for option in ("source", "destination", "--allow-pickle", "identical output"):
        assert option in text, option


# ---------------------------------------------------------------------------------------------------------------
# Refusals: every setting that cannot be represented exactly is named
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings=False"),
        ({"decoder_vocab_size": 80}, "decoder_vocab_size=80 != vocab_size=64"),
        ({"activation_function": "gelu_new"}, "activation_function='gelu_new' is not one of"),
        ({"eos_token_id": [0, 1]}, r"eos_token_id=\[0, 1\]: exactly one end-of-sequence id"),
        ({"normalize_before": True}, "normalize_before=True marks a variant"),
        ({"normalize_embedding": True}, "normalize_embedding=True marks a variant"),
        ({"layernorm_embedding": True}, "layernorm_embedding=True marks a variant"),
        ({"add_final_layer_norm": True}, "add_final_layer_norm=True marks a variant"),
        ({"static_position_embeddings": False}, "static_position_embeddings=False marks a variant"),
        ({"add_bias_logits": True}, "add_bias_logits=True marks a variant"),
    ],
)
def test_unrepresentable_settings_are_refused_by_name(overrides, message):
    config = MarianConfig(**{**OPUS_MT, **overrides})
    with pytest.raises(ValueError, match=f"cannot convert this Marian checkpoint exactly: .*{message}"):
        check_marian_config(config)


def test_paper_values_of_bart_era_flags_are_accepted():
    """Old OPUS-MT config.json files carry these flags with the paper's values."""
    flags = {"normalize_before": False, "normalize_embedding": False, "static_position_embeddings": True}
    check_marian_config(MarianConfig(**OPUS_MT, **flags, add_final_layer_norm=False, add_bias_logits=False))


def test_models_that_cannot_be_represented_are_refused():
    with pytest.raises(ValueError, match="share_encoder_decoder_embeddings=False"):
        convert_marian(MarianMTModel(MarianConfig(**OPUS_MT, share_encoder_decoder_embeddings=False)))
    untied = opus_mt_like(seed=3)
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach() + 1.0)
    with pytest.raises(ValueError, match=r"lm_head.weight differs from model.shared.weight \(an untied output layer\)"):
        convert_marian(untied)
    with pytest.raises(ValueError, match="d_model must be even"):
        odd = {"d_model": 33, "encoder_attention_heads": 3, "decoder_attention_heads": 3}
        convert_marian(MarianMTModel(MarianConfig(**{**OPUS_MT, **odd})))
    with pytest.raises(TypeError, match="expected a MarianMTModel, got VanillaForConditionalGeneration"):
        convert_marian(tiny_model())


def test_pickled_weights_are_refused_unless_allowed(marian, reference, tmp_path):
    source = tmp_path / "pickled"
    marian.save_pretrained(source)
    (source / "model.safetensors").unlink()
    torch.save(marian.state_dict(), source / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"holds no safetensors weights; its pickled weights .* \(--allow-pickle\)"):
        convert_marian_folder(source, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    main([str(source), str(tmp_path / "allowed"), "--allow-pickle"])
    ids, mask = opus_batch()
    converted = VanillaForConditionalGeneration.from_pretrained(tmp_path / "allowed")
    assert torch.allclose(_logits(converted, ids, mask), reference[0], atol=1e-5)


def test_folder_without_the_encoder_weights_is_refused(tmp_path):
    MarianForCausalLM(MarianConfig(**OPUS_MT)).save_pretrained(tmp_path / "decoder_only")
    with pytest.raises(ValueError, match="is not a complete MarianMTModel: missing .*model.encoder.layers.0"):
        convert_marian_folder(tmp_path / "decoder_only", tmp_path / "out")
    assert not (tmp_path / "out").exists()


HUB_SCRIPT = """
import json, os, sys
import torch
from huggingface_hub import HfApi
from transformers import AutoTokenizer
from modeling_vanilla import VanillaForConditionalGeneration
from modeling_vanilla.convert_marian import main
marian_folder, destination = sys.argv[1:]
HfApi().create_repo("user/tiny-opus-mt")
HfApi().upload_folder(repo_id="user/tiny-opus-mt", folder_path=marian_folder)
main(["user/tiny-opus-mt", destination])
ids, mask = torch.load(os.path.join(marian_folder, "batch.pt"))
model = VanillaForConditionalGeneration.from_pretrained(destination)
with torch.no_grad():
    sequences = model.generate(input_ids=ids, attention_mask=mask, num_beams=4, length_penalty=0.6, max_new_tokens=20)
tokens = AutoTokenizer.from_pretrained(destination)("w5 w9").input_ids
print(json.dumps({"sequences": sequences.tolist(), "tokens": tokens}), flush=True)
os._exit(0)
"""


@pytest.mark.slow
def test_hub_id_is_downloaded_and_converted(marian, reference, tmp_path):
    """`python -m modeling_vanilla.convert_marian Helsinki-NLP/opus-mt-xx-yy DST` on a loopback Hub."""
    source = tmp_path / "marian"
    marian.save_pretrained(source)
    _tokenizer().save_pretrained(source)
    (source / "tf_model.h5").write_bytes(b"not downloaded")
    torch.save(opus_batch(), source / "batch.pt")
    with FakeHub(tmp_path / "hub") as hub:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(HUB_SCRIPT), str(source), str(tmp_path / "vanilla")],
            env=hub.env(tmp_path / "hf_home"),
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=300,
        )
        downloaded = [r["path"] for r in hub.requests if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["sequences"] == reference[1].sequences.tolist()
    assert report["tokens"] == [5, 9]
    assert not any(path.endswith(("tf_model.h5", "batch.pt")) for path in downloaded)


def test_fine_tuning_a_converted_model_keeps_its_generation_settings(tmp_path):
    """OPUS-MT's generation config bans `<pad>` and forces `</s>` at the length limit; a converted model keeps both,
    and so does the model `vanilla-train --model-name-or-path` fine-tunes from it, decoding as the paper does (with the
    length penalty of the recipe that fine-tuned it: the demo's 1.0)."""
    words = [word for pair in WORDS.items() for word in pair]
    vocab = {"</s>": EOS, "<unk>": 1, **{word: i for i, word in enumerate(words, 2)}, "<pad>": PAD}
    vocab.update({f"w{i}": i for i in range(len(words) + 2, PAD)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="</s>", pad_token="<pad>"
    )
    marian = opus_mt_like()
    marian.generation_config.update(bad_words_ids=[[PAD]], forced_eos_token_id=EOS, num_beams=6, max_length=512)
    source, converted = tmp_path / "marian", tmp_path / "converted"
    marian.save_pretrained(source)
    tokenizer.save_pretrained(source)
    main([str(source), str(converted)])
    files = write_toy_corpus(tmp_path, {"train": 40, "validation": 4})
    options = {"bleu_sentences": 0, "max_steps": 2, "save_steps": 2, "eval_steps": 2, "show": 0}
    train_main(fine_tune_args(files, tmp_path / "tuned", converted, **options))

    for folder, penalty in ((converted, 0.6), (tmp_path / "tuned" / "final", 1.0)):
        generation = json.loads((folder / "generation_config.json").read_text())
        assert (generation["bad_words_ids"], generation["forced_eos_token_id"]) == ([[PAD]], EOS), folder
        decoding = (generation["num_beams"], generation["length_penalty"], generation["early_stopping"])
        assert decoding == (4, penalty, True), folder
        assert "max_length" not in generation  # the paper's limit, input length + 50
        assert (generation["pad_token_id"], generation["decoder_start_token_id"]) == (PAD, PAD)
