"""The original Transformer (Vaswani et al., 2017) for Hugging Face transformers.

Importing the package registers the model with transformers' Auto classes, and marks the classes so that
`save_pretrained` writes their code and an `auto_map` beside the weights (for `trust_remote_code=True` loading where
this package is not installed). `TranslationPipeline` is `pipeline("translation")` for these models (see
`pipeline_vanilla.py`); `VanillaTokenizer` is the tokenizer of a multilingual model (see `tokenization_vanilla.py`).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.models.auto.tokenization_auto import REGISTERED_TOKENIZER_CLASSES

from .configuration_vanilla import PRESETS, VanillaConfig
from .gnmt_beam_search import gnmt_beam_search, gnmt_length_penalty
from .modeling_vanilla import (
    EXTRA_OUTPUT_LENGTH,
    LENGTH_PENALTY,
    VanillaForConditionalGeneration,
    VanillaModel,
    VanillaPreTrainedModel,
    paper_generation_config,
    sinusoidal_positional_encoding,
)
from .pipeline_vanilla import TranslationPipeline
from .tokenization_vanilla import VanillaTokenizer, language_token

# The weight types a CTranslate2 export stores (`export_ctranslate2`); CTranslate2's `compute_type` converts on load.
# Declared here, not in the exporter, so that code without the ctranslate2 extra can offer them as choices.
QUANTIZATIONS = ("float32", "int8")

AutoConfig.register(VanillaConfig.model_type, VanillaConfig)
AutoModel.register(VanillaConfig, VanillaModel)
AutoModelForSeq2SeqLM.register(VanillaConfig, VanillaForConditionalGeneration)
# AutoTokenizer finds VanillaTokenizer by the name a multilingual folder's tokenizer_config.json gives
# (`tokenizer_class`), as `AutoTokenizer.register` would make it; VanillaConfig itself is mapped to no tokenizer
# class, so that a folder that names none gets transformers' default (a tokenizer of one direction), not this one.
REGISTERED_TOKENIZER_CLASSES[VanillaTokenizer.__name__] = VanillaTokenizer
VanillaConfig.register_for_auto_class()
VanillaModel.register_for_auto_class("AutoModel")
VanillaForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
VanillaTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = [
    "EXTRA_OUTPUT_LENGTH",
    "LENGTH_PENALTY",
    "PRESETS",
    "QUANTIZATIONS",
    "TranslationPipeline",
    "VanillaConfig",
    "VanillaForConditionalGeneration",
    "VanillaModel",
    "VanillaPreTrainedModel",
    "VanillaTokenizer",
    "gnmt_beam_search",
    "gnmt_length_penalty",
    "language_token",
    "paper_generation_config",
    "sinusoidal_positional_encoding",
]
