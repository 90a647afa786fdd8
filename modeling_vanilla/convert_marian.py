"""Convert a MarianMT (OPUS-MT) checkpoint into a `VanillaForConditionalGeneration` with identical output, or refuse.

transformers' `MarianMTModel` is the paper's post-LN Transformer with a shared vocabulary and a few changed
conventions, each of which `VanillaConfig` can express: the FFN activation (OPUS-MT: swish), the sinusoidal
layout (all sines, then all cosines), a final logits bias, the decoder start token (pad), and an output projection
of its own (`tie_word_embeddings=False`). The converted model computes the same function as `MarianMTModel` from
token ids. Its generation config is Marian's with the paper's decoding on top (beam 4, length penalty 0.6, early
stopping, at most input length + 50 tokens), as for every model this project saves; Marian's banned tokens and
token ids are kept. Pass Marian's own settings to `generate` to decode exactly as Marian's checkpoint does.

Refused, with a ValueError naming the setting, because the result would not compute what Marian computes:
separate source and target embeddings (`share_encoder_decoder_embeddings=False`, `decoder_vocab_size !=
vocab_size`, or encoder and decoder embedding weights that differ; keeping them apart would give the model two
vocabularies, which the paper's shared-vocabulary design leaves out), an output projection whose weights differ
from the embedding matrix although the config ties them, an activation `VanillaConfig` lacks, several
end-of-sequence ids, and the flags of BART-era configs that mark a variant (pre-LN `normalize_before`,
`layernorm_embedding`/`normalize_embedding`, `add_final_layer_norm`, learned positions
`static_position_embeddings=False`, `add_bias_logits`): `MarianMTModel` ignores them, so weights trained for such a
variant do not mean what the file says. Other values are checked by `VanillaConfig`.

Accepted with a warning: LayerDrop (`encoder_layerdrop`, `decoder_layerdrop`) skips layers only in training, so
outputs are identical, but fine-tuning the converted model trains without it. Two other training-only differences
remain: Marian's embedding does not update the pad row, and Marian's encoder does not scale `inputs_embeds` (ours
does, as for ids); outputs from token ids are unaffected.

Usage: `python -m modeling_vanilla.convert_marian Helsinki-NLP/opus-mt-en-de opus-mt-en-de-vanilla` (a local
folder works too). The model files never import this module.
"""

import argparse
import json
import re
import shutil
import warnings
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from transformers import AutoConfig, MarianMTModel, PreTrainedConfig

from .configuration_vanilla import ACTIVATIONS, VanillaConfig
from .modeling_vanilla import VanillaForConditionalGeneration, paper_generation_config

# Marian module name -> ours, inside `model.{encoder,decoder}.layers.{i}.` (the cross-attention is decoder-only).
LAYER_MODULES = {
    "self_attn.q_proj": "self_attn.q_proj",
    "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj",
    "self_attn.out_proj": "self_attn.out_proj",
    "self_attn_layer_norm": "self_attn_norm",
    "encoder_attn.q_proj": "cross_attn.q_proj",
    "encoder_attn.k_proj": "cross_attn.k_proj",
    "encoder_attn.v_proj": "cross_attn.v_proj",
    "encoder_attn.out_proj": "cross_attn.out_proj",
    "encoder_attn_layer_norm": "cross_attn_norm",
    "fc1": "feed_forward.fc1",
    "fc2": "feed_forward.fc2",
    "final_layer_norm": "feed_forward_norm",
}
LAYER_PARAMETER = re.compile(
    r"model\.(?P<stack>encoder|decoder)\.layers\.(?P<index>\d+)\.(?P<module>.+)\.(?P<kind>weight|bias)"
)
# Marian weights that are not copied: the embeddings of both stacks (ours are `model.shared.weight`), or the
# sinusoidal tables we compute.
STACK_EMBEDDINGS = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
COMPUTED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")

# Flags of BART-era configs (old OPUS-MT config.json files carry them) and the value meaning "the paper's model".
VARIANT_FLAGS = {
    "normalize_before": False,
    "encoder_normalize_before": False,
    "decoder_normalize_before": False,
    "normalize_embedding": False,
    "layernorm_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
}
# Tokenizer files of MarianTokenizer and of tokenizers-based tokenizers, copied as they are.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
)
WEIGHT_FILES = ("config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json")
PICKLED_WEIGHT_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*.bin")


def check_marian_config(config: PreTrainedConfig) -> None:
    """Raises a ValueError listing every setting of a Marian config that cannot be represented exactly."""
    problems = []
    if config.model_type != "marian":
        problems.append(f"model_type={config.model_type!r} is not a Marian checkpoint")
    if not config.share_encoder_decoder_embeddings:
        problems.append("share_encoder_decoder_embeddings=False: separate source and target embeddings")
    if config.decoder_vocab_size != config.vocab_size:
        problems.append(
            f"decoder_vocab_size={config.decoder_vocab_size} != vocab_size={config.vocab_size}: "
            "a separate target vocabulary"
        )
    if config.activation_function not in ACTIVATIONS:
        problems.append(f"activation_function={config.activation_function!r} is not one of {ACTIVATIONS}")
    if not isinstance(config.eos_token_id, int):
        problems.append(f"eos_token_id={config.eos_token_id!r}: exactly one end-of-sequence id is needed")
    for flag, paper_value in VARIANT_FLAGS.items():
        value = getattr(config, flag, paper_value)
        if value != paper_value:
            problems.append(
                f"{flag}={value!r} marks a variant that MarianMTModel ignores (the paper's value is {paper_value})"
            )
    if problems:
        raise ValueError("cannot convert this Marian checkpoint exactly: " + "; ".join(problems))


def vanilla_config_from_marian(config: PreTrainedConfig, add_final_logits_bias: bool) -> VanillaConfig:
    """The `VanillaConfig` of a Marian config (checked by `check_marian_config`); warns that LayerDrop is dropped."""
    check_marian_config(config)
    if config.encoder_layerdrop or config.decoder_layerdrop:
        warnings.warn(
            f"encoder_layerdrop={config.encoder_layerdrop}, decoder_layerdrop={config.decoder_layerdrop} are "
            "dropped: outputs are identical, but fine-tuning the converted model trains without LayerDrop",
            stacklevel=2,
        )
    return VanillaConfig(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        scale_embedding=config.scale_embedding,
        positional_encoding_layout="sin_then_cos",
        add_final_logits_bias=add_final_logits_bias,
        tie_word_embeddings=config.tie_word_embeddings,
        max_position_embeddings=config.max_position_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )


def vanilla_name(marian_name: str) -> str:
    """Our parameter name for a Marian parameter name (see `LAYER_MODULES`); a ValueError for one we cannot place."""
    if marian_name in ("model.shared.weight", "final_logits_bias", "lm_head.weight"):
        return marian_name
    match = LAYER_PARAMETER.fullmatch(marian_name)
    if match is None or match["module"] not in LAYER_MODULES:
        raise ValueError(f"cannot convert this Marian checkpoint exactly: no place for weight {marian_name!r}")
    return f"model.{match['stack']}.layers.{match['index']}.{LAYER_MODULES[match['module']]}.{match['kind']}"


def convert_marian(marian: MarianMTModel) -> VanillaForConditionalGeneration:
    """A `VanillaForConditionalGeneration` computing what `marian` computes, decoding as the paper does."""
    if not isinstance(marian, MarianMTModel):
        raise TypeError(f"expected a MarianMTModel, got {type(marian).__name__}")
    check_marian_config(marian.config)
    weights = marian.state_dict()
    shared = weights["model.shared.weight"]
    tied = STACK_EMBEDDINGS + (("lm_head.weight",) if marian.config.tie_word_embeddings else ())
    for name in tied:
        if not torch.equal(weights[name], shared):
            what = "an untied output layer" if name == "lm_head.weight" else "separate source and target embeddings"
            raise ValueError(
                f"cannot convert this Marian checkpoint exactly: {name} differs from model.shared.weight ({what})"
            )
    bias = weights["final_logits_bias"]
    config = vanilla_config_from_marian(marian.config, add_final_logits_bias=bool(bias.any()))
    mapped = {
        vanilla_name(name): tensor
        for name, tensor in weights.items()
        if name not in tied + COMPUTED and not (name == "final_logits_bias" and not bias.any())
    }
    vanilla = VanillaForConditionalGeneration(config).to(shared.dtype)
    missing, unexpected = vanilla.load_state_dict(mapped, strict=False)
    untied_missing = [name for name in missing if name not in vanilla.all_tied_weights_keys]
    if untied_missing or unexpected:
        raise ValueError(f"weights do not match: missing {untied_missing}, unexpected {unexpected}")
    vanilla.generation_config = paper_generation_config(config, base=marian.generation_config)
    vanilla.set_attn_implementation(marian.config._attn_implementation)
    return vanilla.train(marian.training)


def copy_tokenizer_files(source: Path, destination: Path) -> list[str]:
    """Copies the tokenizer files of `source`; returns their names.

    A Marian sentencepiece tokenizer whose `tokenizer_config.json` names no class was found by AutoTokenizer through
    `model_type="marian"`, which the converted config no longer has: the class is written in, so that
    `AutoTokenizer.from_pretrained(destination)` still loads it.
    """
    copied = [name for name in TOKENIZER_FILES if (source / name).is_file()]
    for name in copied:
        shutil.copyfile(source / name, destination / name)
    if "source.spm" in copied:
        path = destination / "tokenizer_config.json"
        settings = json.loads(path.read_text()) if path.is_file() else {}
        settings.setdefault("tokenizer_class", "MarianTokenizer")
        path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    return copied


def convert_marian_folder(
    source: str | Path, destination: str | Path, allow_pickle: bool = False
) -> VanillaForConditionalGeneration:
    """Converts a saved Marian model (a folder or a Hub id) and saves it, with its tokenizer files, to `destination`.

    Weights are read from safetensors only, as everywhere in this package: a checkpoint whose only weights are a
    pickled `pytorch_model.bin`, which can run code while loading, is refused unless `allow_pickle` says the caller
    trusts it. The configuration is checked before any weight is read, or for a Hub id downloaded (its
    `config.json` is fetched alone first); a checkpoint that lacks weights is refused.
    """
    check_marian_config(AutoConfig.from_pretrained(source))
    folder = Path(source)
    if not folder.is_dir():
        patterns = [*WEIGHT_FILES, *TOKENIZER_FILES, *(PICKLED_WEIGHT_FILES if allow_pickle else ())]
        folder = Path(snapshot_download(str(source), allow_patterns=patterns))
    if not allow_pickle and not any(folder.glob("*.safetensors")):
        raise ValueError(
            f"{source} holds no safetensors weights; its pickled weights (pytorch_model.bin) can run code while "
            "loading: convert them only if you trust their origin, with allow_pickle=True (--allow-pickle)"
        )
    use_safetensors = None if allow_pickle else True  # None: safetensors if present, else the pickle
    marian, loading = MarianMTModel.from_pretrained(folder, output_loading_info=True, use_safetensors=use_safetensors)
    if loading["missing_keys"] or loading["mismatched_keys"]:
        raise ValueError(
            f"{source} is not a complete MarianMTModel: missing {sorted(loading['missing_keys'])}, "
            f"mismatched {sorted(loading['mismatched_keys'])}"
        )
    vanilla = convert_marian(marian)
    vanilla.save_pretrained(destination)
    copy_tokenizer_files(folder, Path(destination))
    return vanilla


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-convert-marian",
        description="Convert a MarianMT / OPUS-MT checkpoint into a vanilla Transformer folder with identical "
        "output (refuses, naming the setting, what it cannot represent exactly).",
    )
    parser.add_argument("source", help="folder saved by MarianMTModel.save_pretrained, or a Hub id")
    parser.add_argument("destination", help="folder to write (model, generation config, tokenizer files)")
    parser.add_argument(
        "--allow-pickle", action="store_true", help="read pickled pytorch_model.bin weights (trusted sources only)"
    )
    args = parser.parse_args(argv)
    convert_marian_folder(args.source, args.destination, allow_pickle=args.allow_pickle)
    print(f"converted {args.source} -> {args.destination}")


if __name__ == "__main__":
    main()
