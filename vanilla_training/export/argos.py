"""Export a model trained by `vanilla-train` as an Argos Translate package (`.argosmodel`) for LibreTranslate.

    vanilla-export-argos runs/demo en_de.argosmodel

The package is a zip of one folder holding what argos-translate (and so LibreTranslate) reads:

- `model/`: the CTranslate2 model (`export_ctranslate2`; int8 weights unless `--quantization float32`), with
  `add_source_eos`, since argos gives CTranslate2 the source pieces without the end token that our tokenizer adds;
- `sentencepiece.model`: our tokenizer as a SentencePiece BPE model (`sentencepiece_bpe`), checked before anything
  is written: it must split exactly as ours every verse of the pair's test split (the built-in corpus), or every
  test example training recorded (a corpus of files or a dataset); a tokenizer that cannot agree is refused, with
  the first text split differently;
- `spacy/`: a blank spaCy pipeline of the source language ("xx", spaCy's multi-language one, where spaCy's own needs
  more packages), to which argos adds spaCy's rule-based sentencizer with `ARGOS_CHUNK_TYPE=SPACY`. Argos's default
  splitter (MiniSBD) downloads a model at the first translation; this one works offline;
- `metadata.json`: the languages training recorded, with their names;
- `README.md`: the decoding argos applies, then the model card of the run (data, licences, scores).

Argos decodes with CTranslate2 at beam `ARGOS_BEAM_SIZE` (4) and length penalty 0.2 (fixed in argos-translate),
where `vanilla-translate` uses the model's generation config (the recipe's 0.6 or 1.0); argos also keeps
CTranslate2's `min_decoding_length=1` and `max_decoding_length=256`, replaces `<unk>` by a source piece, and turns
every "_" of a translation into a space.
"""

import argparse
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from huggingface_hub import snapshot_download
from transformers import AutoTokenizer

from modeling_vanilla.export_ctranslate2 import QUANTIZATIONS, VanillaConverter

from ..card import LOCAL_NOTE, language_name, render_card
from ..corpus import build_corpus
from ..translator import RESULTS, model_folder, trained_languages

PACKAGE_VERSION = "1.0"
ARGOS_VERSION = "1.9"  # the package layout of argos-translate 1.9 on (LibreTranslate's argos-translate-lt 1.12)


class ArgosConverter(VanillaConverter):
    """`VanillaConverter` whose model appends the end token to each source itself."""

    def _load(self):
        spec = super()._load()
        spec.config.add_source_eos = True
        return spec


def local_folder(model: str | Path) -> Path:
    """The folder of `model` (a run folder's `final/`, a model folder, or a Hub id, downloaded);
    FileNotFoundError for a local path that does not exist."""
    folder = Path(model_folder(model))
    if folder.is_dir():
        return folder
    if folder.is_absolute() or str(model).startswith("."):
        raise FileNotFoundError(f"model folder {str(model)!r} does not exist")
    return Path(snapshot_download(str(model)))


def texts_to_check(results: dict, languages: tuple[str, str]) -> list[str]:
    """Both sides of the pair's test split for the built-in corpus (built, offline once bible.db is cached), else
    the sources and references of the test examples training recorded."""
    data = results.get("data", {})
    if data.get("corpus") == "built-in":
        test = build_corpus("-".join(languages), versions=data.get("versions", "one"))["test"]
        rows = [json.loads(line)["translation"] for line in test.read_text(encoding="utf-8").splitlines()]
        return [row[language] for row in rows for language in languages]
    return [text for example in results["test"]["examples"] for text in (example["source"], example["reference"])]


def sentencepiece_of(folder: Path, texts: list[str]) -> bytes:
    """The SentencePiece model of the tokenizer in `folder`, checked to split every one of `texts` as the tokenizer
    does; ValueError naming the first text split otherwise, or why the tokenizer has no SentencePiece equivalent."""
    import sentencepiece  # the argos extra, imported here so that `vanilla-export-argos --help` runs without it

    from .sentencepiece_bpe import differences, sentencepiece_model

    model = sentencepiece_model(folder / "tokenizer.json")
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    differing = differences(AutoTokenizer.from_pretrained(folder), processor, texts)
    if differing:
        text, ours, theirs = differing[0]
        raise ValueError(
            f"the SentencePiece model splits {len(differing)} of {len(texts)} test texts otherwise than the "
            f"tokenizer, e.g. {text!r}: {ours} against {theirs}; no package is written"
        )
    return model


def blank_spacy(language: str, destination: Path) -> str:
    """Writes spaCy's blank pipeline of `language` (or "xx" where spaCy's needs other packages) to `destination`;
    returns the language of the pipeline written."""
    import spacy

    try:
        nlp = spacy.blank(language)
    except (ImportError, LookupError):  # e.g. Korean needs mecab-ko, Vietnamese pyvi; a language spaCy lacks
        nlp = spacy.blank("xx")
    nlp.to_disk(destination)
    return nlp.lang


def readme(folder: Path, languages: tuple[str, str], spacy_language: str, quantization: str) -> str:
    """The package's README.md: what it is, how argos decodes it, and the run's model card without its YAML header
    (and without the note of a local card, which is about the folder)."""
    card = render_card(folder).split("---\n", 2)[2].replace(LOCAL_NOTE, "").lstrip()
    source, target = (language_name(code) for code in languages)
    return (
        f"# {source} to {target}: an Argos Translate package of a vanilla Transformer\n\n"
        f"Written by `vanilla-export-argos` from `{folder}`: the CTranslate2 model ({quantization} weights), "
        "the tokenizer as an equivalent SentencePiece model, and a blank spaCy pipeline "
        f"(`{spacy_language}`) for argos's rule-based sentence splitting: run argos or LibreTranslate with "
        "`ARGOS_CHUNK_TYPE=SPACY` (spaCy installed) to translate offline.\n\n"
        "Argos decodes at beam 4 (`ARGOS_BEAM_SIZE`) with length penalty 0.2; the scores below were measured with "
        "`vanilla-evaluate`'s decoding (the card's beam and length penalty), in float32.\n\n" + card
    )


def build_package(folder: Path, root: Path, languages: tuple[str, str], quantization: str) -> None:
    """Writes the package's files for the model in `folder` into the empty folder `root`."""
    results = json.loads((folder / RESULTS).read_text(encoding="utf-8"))
    tokenizer = sentencepiece_of(folder, texts_to_check(results, languages))
    ArgosConverter(folder).convert(str(root / "model"), quantization=quantization)
    (root / "sentencepiece.model").write_bytes(tokenizer)
    spacy_language = blank_spacy(languages[0], root / "spacy")
    metadata = {
        "package_version": PACKAGE_VERSION,
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "from_code": languages[0],
        "from_name": language_name(languages[0]),
        "to_code": languages[1],
        "to_name": language_name(languages[1]),
    }
    (root / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    (root / "README.md").write_text(readme(folder, languages, spacy_language, quantization), encoding="utf-8")


def export_argos(model: str | Path, destination: str | Path, quantization: str = "int8") -> Path:
    """Writes the `.argosmodel` package of `model` (a run folder, a model folder or a Hub id) to `destination`;
    returns its path. ValueError saying why where the model cannot be packaged (no languages, a tokenizer that
    SentencePiece cannot reproduce); FileExistsError if `destination` exists."""
    destination = Path(destination)
    if destination.exists():
        raise FileExistsError(f"{destination} exists; remove it or choose another name")
    folder = local_folder(model)
    trained = trained_languages(folder)
    if trained.languages:
        raise ValueError(
            f"{model} is a multilingual model ({', '.join(trained.languages)}): packages of one direction each, with "
            "the target-language token as argos's target_prefix, are not written yet"
        )
    languages = trained.direction
    if languages is None:
        raise ValueError(
            f"{model} records no languages (no {RESULTS}): only a model trained by vanilla-train is packaged, "
            "with its languages and its card"
        )
    name = f"translate-{languages[0]}_{languages[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / name
        root.mkdir()
        build_package(folder, root, languages, quantization)
        partial = destination.with_name(destination.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as package:
            for path in sorted(root.rglob("*")):
                package.write(path, path.relative_to(tmp))
        shutil.move(partial, destination)
    return destination


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vanilla-export-argos",
        description="Export a model trained by vanilla-train as an Argos Translate package for LibreTranslate.",
    )
    parser.add_argument("model", metavar="MODEL", help="a run folder (its final/), a model folder, or a Hub id")
    parser.add_argument("destination", metavar="OUT.argosmodel", help="the package file to write")
    parser.add_argument(
        "--quantization", choices=QUANTIZATIONS, default="int8", help="CTranslate2 weight type (default: int8)"
    )
    args = parser.parse_args(argv)
    if not args.destination.endswith(".argosmodel"):
        parser.error(f"{args.destination}: the package's name must end in .argosmodel")
    try:
        print(export_argos(args.model, args.destination, args.quantization))
    except ImportError as error:
        parser.error(f"the argos extra is needed (pip install 'vanilla-transformer[argos]'): {error}")
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        parser.error(str(error))


if __name__ == "__main__":
    main()
