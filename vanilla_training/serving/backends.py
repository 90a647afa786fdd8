"""What runs a model for the server: the torch backend (the model as `vanilla-translate` runs it, in float32,
bfloat16 or, on a GPU, float16) and the CTranslate2 backend (the model exported by `vanilla-export-ct2`, float32 or
int8).

Both take a batch of sentences and a number of hypotheses `n` and give, for each sentence, its `n` best
translations from the beam, best first. Models are loaded through `vanilla_training.translator.load_translator`.
"""

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Protocol

import torch

from modeling_vanilla import EXTRA_OUTPUT_LENGTH

from ..precision import DTYPES, cpu_flags, precision_problem, resolve_precision
from ..translator import Translator, local_folder
from .continuous import ContinuousDecoder, unsupported_settings

CPU_BATCH = 8  # sentences of a CTranslate2 batch on a CPU
# x86 flags of int8 dot products (AVX512-VNNI, AVX-VNNI, AMX-INT8): without them CTranslate2's int8 is slower than its
# float32 (the demo model's 1,866 test verses on the 2-core EPYC without VNNI: 38-44 s int8, 16-18 s float32).
NATIVE_INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
LANES_PER_WORKER = 2  # batches in flight for each CTranslate2 worker: one translated, the next queued behind it


def fastest_backend(backend: str, quantization: str) -> tuple[str, str, str]:
    """`auto` made concrete (the backend, the CTranslate2 weight type) and why: CTranslate2 where it is installed
    (several times faster than torch on a CPU: docs/serving.md), else torch; int8 where the CPU computes int8 dot
    products natively (`NATIVE_INT8_FLAGS`), else float32; float32 on a GPU."""
    reasons = []
    if backend == "auto":
        backend = "ctranslate2" if importlib.util.find_spec("ctranslate2") else "torch"
        reasons.append("CTranslate2 is installed" if backend == "ctranslate2" else "CTranslate2 is not installed")
    if quantization == "auto":
        native = bool(cpu_flags() & NATIVE_INT8_FLAGS)
        quantization = "int8" if native and not torch.cuda.is_available() else "float32"
        if backend == "ctranslate2":
            cpu = f"this CPU {'has' if native else 'lacks'} VNNI/AMX"
            reasons.append("a GPU" if torch.cuda.is_available() else cpu)
    return backend, quantization, f" (auto: {', '.join(reasons)})" if reasons else ""


class Backend(Protocol):
    """A model that translates batches of sentences."""

    translator: Translator
    description: str
    decoder: ContinuousDecoder | None  # sentences join and leave its running batch step by step (torch only)
    lanes: int  # batches it translates side by side, each called from a thread of its own
    workers: int  # batches it computes at the same time, at most `lanes` (the batcher spreads a batch over idle ones)
    batch_sentences: int | None  # the most sentences a batch should hold (None: as many as the token budget)

    def translate(
        self, sentences: list[str], hypotheses: int = 1, beams: int | None = None, target_lang: str | None = None
    ) -> list[list[str]]:
        """The `hypotheses` best translations of each sentence, best first (with a beam of `beams`, if given), into
        `target_lang` (a multilingual model's; None for a model of one direction)."""
        ...


def beam_size(translator: Translator, hypotheses: int, beams: int | None) -> int:
    """The beam: `beams` or the model's own, widened to `hypotheses` where it is narrower."""
    return max(beams or translator.model.generation_config.num_beams or 1, hypotheses)


class TorchBackend:
    """The model in torch. With `batching="continuous"` (where the model's generation config has no setting that
    `ContinuousDecoder` does not apply) the server decodes through `decoder`, each sentence by the beam search of
    `generate` for it alone; `translate` decodes whole batches: one best translation exactly as `vanilla-translate`
    (`Translator.translate`) computes it, or, with more hypotheses, the beam's `n` best (`num_return_sequences`).
    A multilingual model decodes batch by batch, each batch into one target language (its `forced_bos_token_id`):
    the continuous decoder does not force a first token."""

    def __init__(
        self, translator: Translator, precision: str = "auto", beams: int | None = None, batching: str = "continuous"
    ):
        self.translator = translator
        self.precision = resolve_precision(precision)
        if problem := precision_problem(self.precision):
            raise ValueError(problem)
        self.beams = beams
        self.lanes, self.workers, self.batch_sentences = 1, 1, None
        translator.model.to(DTYPES[self.precision])
        config = translator.model.generation_config
        continuous = batching == "continuous" and not unsupported_settings(config) and not translator.all_languages
        self.decoder = ContinuousDecoder(translator.model, translator.tokenizer, beams) if continuous else None
        batches = "continuous batching" if continuous else "batch by batch"
        self.description = f"torch {self.precision} on {translator.model.device}, {batches}"

    def translate(
        self, sentences: list[str], hypotheses: int = 1, beams: int | None = None, target_lang: str | None = None
    ) -> list[list[str]]:
        beams = beams or self.beams
        if hypotheses == 1:
            options = {} if beams is None else {"num_beams": beams}
            if target_lang is not None:
                options["target_lang"] = target_lang
            texts = self.translator.translate(sentences, max_tokens=10**9, progress=False, **options)
            return [[text] for text in texts]
        model, tokenizer = self.translator.model, self.translator.tokenizer
        inputs = tokenizer(sentences, return_tensors="pt", padding=True).to(model.device)
        output = model.generate(
            **inputs,
            **self.translator.target_options(target_lang),
            max_new_tokens=inputs["input_ids"].shape[1] + EXTRA_OUTPUT_LENGTH,
            num_beams=beam_size(self.translator, hypotheses, beams),
            num_return_sequences=hypotheses,
        )
        texts = tokenizer.batch_decode(output, skip_special_tokens=True)
        return [texts[i : i + hypotheses] for i in range(0, len(texts), hypotheses)]


def ct2_model_folder(translator: Translator, quantization: str, cache: Path) -> Path:
    """The CTranslate2 export of the translator's model in `cache`, made on first use and reused while its folder
    (for a Hub id, the revision's snapshot) and weights files stay the same (the files they lead to, with their
    sizes and modification times)."""
    folder = local_folder(translator.folder)
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    identity = json.dumps(
        [
            str(folder.resolve()),
            quantization,
            [(str(w.resolve()), w.stat().st_size, w.stat().st_mtime_ns) for w in weights],
        ]
    )
    destination = cache / hashlib.sha256(identity.encode()).hexdigest()[:16] / quantization
    if not (destination / "model.bin").is_file():
        from modeling_vanilla.export_ctranslate2 import export_ctranslate2

        export_ctranslate2(folder, destination, quantization=quantization, force=True)
    return destination


class CTranslate2Backend:
    """The model exported to CTranslate2 (on the fly into `cache`, see `ct2_model_folder`), decoding with the
    model's beam size and length penalty, at most the longest source + 50 tokens, as `generate` does. On a CPU,
    CTranslate2 runs a worker of one thread per core, each translating batches of `CPU_BATCH` sentences: the server
    keeps `LANES_PER_WORKER` batches in flight for each (`lanes`), so that a worker that ends a batch starts the one
    queued behind it at once, and a longer batch is sorted by length and cut into such batches, which the workers
    translate side by side (docs/serving.md says why)."""

    def __init__(self, translator: Translator, quantization: str = "int8", cache: Path | None = None, beams=None):
        import ctranslate2

        self.translator = translator
        self.beams = beams
        self.decoder = None
        cache = cache or Path.home() / ".cache" / "vanilla-serve" / "ctranslate2"
        self.folder = ct2_model_folder(translator, quantization, cache)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        threads = torch.get_num_threads()
        self.workers = threads if self.device == "cpu" else 1
        self.lanes = LANES_PER_WORKER * self.workers if self.device == "cpu" else 1
        self.batch_sentences = CPU_BATCH if self.device == "cpu" else None
        self.model = ctranslate2.Translator(
            str(self.folder), device=self.device, compute_type=quantization, inter_threads=self.workers, intra_threads=1
        )
        torch.set_num_threads(threads)  # CTranslate2 set the OpenMP threads of this thread (torch's) to intra_threads
        config = translator.model.generation_config
        self.length_penalty = config.length_penalty if config.length_penalty is not None else 1.0
        tokenizer = translator.tokenizer
        self.suppressed = [tokenizer.convert_ids_to_tokens(ids) for ids in (config.bad_words_ids or [])]
        self.description = f"ctranslate2 {quantization} on {self.device}"
        translator.model = translator.model.to("meta")  # the torch weights are not used again: free them

    def target_prefix(self, target_lang: str | None) -> list[str]:
        """What starts each hypothesis into `target_lang`: a multilingual model's language token (as the
        `forced_bos_token_id` of `Translator.target_options`), nothing for a model of one direction."""
        options = self.translator.target_options(target_lang)
        if not options:
            return []
        return [self.translator.tokenizer.convert_ids_to_tokens(options["forced_bos_token_id"])]

    def translate(
        self, sentences: list[str], hypotheses: int = 1, beams: int | None = None, target_lang: str | None = None
    ) -> list[list[str]]:
        tokenizer = self.translator.tokenizer
        ids = tokenizer(sentences)["input_ids"]
        prefix = self.target_prefix(target_lang)
        results = self.model.translate_batch(
            [tokenizer.convert_ids_to_tokens(row) for row in ids],
            **({"target_prefix": [prefix] * len(ids)} if prefix else {}),
            beam_size=beam_size(self.translator, hypotheses, beams or self.beams),
            num_hypotheses=hypotheses,
            length_penalty=self.length_penalty,
            min_decoding_length=0,
            max_decoding_length=max(map(len, ids)) + EXTRA_OUTPUT_LENGTH,
            max_batch_size=CPU_BATCH if self.device == "cpu" else len(sentences),  # sorted by length, then cut
            **({"suppress_sequences": self.suppressed} if self.suppressed else {}),
        )
        return [
            [
                tokenizer.decode(tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True)
                for tokens in result.hypotheses
            ]
            for result in results
        ]
