"""Glossaries: `generate(force_words_ids=...)` decoded offline by the model's constrained beam search
(modeling_vanilla/constrained_beam_search.py), the glossary helper (vanilla_training/glossary.py) and
`vanilla-translate --glossary`, on tiny models: without constraints the search is transformers' beam search to the
last bit; every constraint appears in the output; a word-for-word toy model trained here, whose unconstrained output
is the toy dictionary's, gets its glossary terms in every translation whose source holds them and nowhere else; bad
glossaries are refused by name."""

import json
import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from modeling_vanilla import VanillaConfig, VanillaForConditionalGeneration, paper_generation_config
from modeling_vanilla.constrained_beam_search import allocate, as_constraints
from vanilla_training.cli import translate as translate_command
from vanilla_training.glossary import (
    Glossary,
    GlossaryError,
    Term,
    glossary_terms,
    load_glossary,
    translate_with_glossary,
)
from vanilla_training.tokenizer import train_joint_bpe
from vanilla_training.translator import load_translator

from helpers import padded_batch, tiny_model

WORDS = {"the": "das", "big": "große", "red": "rote", "house": "Haus", "one": "eins", "two": "zwei", "car": "Auto"}
UNSEEN = "Gebäude Feuer Wagen"  # target words the tokenizer knows and the toy never translates into
GLOSSARY = {"house": "Gebäude", "red car": "Feuer Wagen"}
SENTENCES = ["the big house", "one two car", "red house two", "two red car", "the big one", "house"]
SIZE = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "dropout": 0.0,
    "max_position_embeddings": 64,
}


def word_for_word(sentence: str) -> str:
    return " ".join(WORDS[word] for word in sentence.split())


def train_toy(folder: Path) -> Path:
    """A word-for-word en-de toy model (whole words are tokens), trained for 300 Adam steps on one thread (about
    15 s), saved in `folder` with the paper's beam search."""
    rng = random.Random(0)
    sources = [" ".join(rng.choice(list(WORDS)) for _ in range(rng.randint(1, 5))) for _ in range(400)]
    pairs = [(source, word_for_word(source)) for source in sources]
    tokenizer = train_joint_bpe(
        [text for pair in pairs for text in pair] + [UNSEEN], vocab_size=999, model_max_length=64
    )
    config = VanillaConfig(
        **SIZE,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    model = VanillaForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.train()
        for _ in range(300):
            batch = rng.sample(pairs, 32)
            encoded = tokenizer(
                [s for s, _ in batch], text_target=[t for _, t in batch], padding=True, return_tensors="pt"
            )
            labels = encoded["labels"].masked_fill(encoded["labels"] == tokenizer.pad_token_id, -100)
            model(
                input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], labels=labels
            ).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval().generation_config = paper_generation_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return train_toy(tmp_path_factory.mktemp("glossary") / "toy")


@pytest.fixture(scope="module")
def translator(toy):
    return load_translator(toy)


def write_tsv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# The search itself, on tiny random models: its oracle is transformers' beam search.


def ending_model(eos_bias: float = 1.0):
    """A tiny random model whose logits favour </s> (id 3) by `eos_bias`, so that hypotheses end at different
    lengths (early, with a large bias)."""
    model = tiny_model(std=0.4, add_final_logits_bias=True)
    with torch.no_grad():
        model.final_logits_bias[0, 3] = eos_bias
    return model


def beam_search(model, seed: int = 0, **options):
    ids, mask = padded_batch(seed=seed, lengths=(9, 6, 3, 7))
    options = {"num_beams": 4, "max_new_tokens": 12, "length_penalty": 0.6, **options}
    return model.generate(
        input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **options
    )


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
def test_without_constraints_it_is_transformers_beam_search_exactly(early_stopping):
    """Sentences without constraints go through the constrained search as through transformers' beam search: one
    bank, the same candidates, ranking and stopping, so the same sequences and scores to the last bit."""
    model = ending_model()
    for seed in range(3):
        options = {"early_stopping": early_stopping, "num_return_sequences": 2, "no_repeat_ngram_size": 1}
        ours = beam_search(model, seed, force_words_ids_per_sentence=[[]] * 4, **options)
        theirs = beam_search(model, seed, **options)
        assert torch.equal(ours.sequences, theirs.sequences)
        assert torch.equal(ours.sequences_scores, theirs.sequences_scores)


def contains(row: list[int], form: list[int]) -> bool:
    return any(row[i : i + len(form)] == form for i in range(len(row) - len(form) + 1))


def test_every_constraint_appears_and_a_disjunction_needs_one_form():
    """transformers' meaning of force_words_ids: each listed sequence appears in every output; of a list of lists
    (a disjunctive constraint) one form does. Constraints per sentence add to the shared ones. The unconstrained
    output (which ends within 3 tokens) holds none of them, so the search placed them."""
    model = ending_model(eos_bias=4.0)
    shared = [[10, 11], [[20, 21, 22], [23]]]
    own = [[[40, 41, 42]], [], [[5]], [[50], [51, 52]]]
    plain = beam_search(model, 1).sequences.tolist()
    assert all(3 in row[:4] for row in plain)
    options = {"force_words_ids": shared, "force_words_ids_per_sentence": own, "early_stopping": True}
    output = beam_search(model, 1, **options).sequences.tolist()
    for row, plain_row, constraints in zip(output, plain, own, strict=True):
        for constraint in as_constraints(shared + constraints):
            assert any(contains(row, list(form)) for form in constraint)
            assert not any(contains(plain_row, list(form)) for form in constraint)


def test_a_constraint_that_cannot_fit_is_left_out_and_seen_missing():
    """Three forced tokens cannot fit in two: the search returns its best hypothesis at the length limit."""
    model = ending_model()
    output = beam_search(model, 0, max_new_tokens=2, force_words_ids=[[10, 11, 12]]).sequences.tolist()
    assert all(not contains(row, [10, 11, 12]) for row in output)


def test_beam_allocation_shares_the_beam_among_banks():
    """Post & Vilar's allocation by hand: 4 places, 3 banks: 1, 1 and 2 places (the rest to the fullest bank), a
    bank's unfilled places to the others, fullest first; returned best first."""

    class Candidate:
        def __init__(self, bank, score):
            self.bank, self.score = bank, score

    scores = {0: [-1.0, -1.5, -2.0], 1: [-5.0], 2: [-9.0, -10.0]}
    candidates = [Candidate(bank, score) for bank, these in scores.items() for score in these]
    chosen = allocate(candidates, num_beams=4, num_banks=3)
    assert [(c.bank, c.score) for c in chosen] == [(0, -1.0), (1, -5.0), (2, -9.0), (2, -10.0)]
    everyone = [Candidate(2, -3.0), Candidate(2, -4.0), Candidate(2, -6.0), Candidate(0, -1.0)]
    assert [c.score for c in allocate(everyone, num_beams=3, num_banks=3)] == [-1.0, -3.0, -4.0]


def test_bad_constraints_are_refused_by_name():
    model = ending_model()
    with pytest.raises(ValueError, match="neither a list of token ids"):
        beam_search(model, force_words_ids=[[]])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        beam_search(model, force_words_ids=[[64]])
    with pytest.raises(ValueError, match="end-of-sequence"):
        beam_search(model, force_words_ids=[[3]])
    with pytest.raises(ValueError, match="2 lists of constraints for 4 sentences"):
        beam_search(model, force_words_ids_per_sentence=[[], []])


# The glossary on the toy model: its unconstrained output is the toy dictionary's.


def test_the_toy_translates_word_for_word(translator):
    assert translator.translate(SENTENCES, progress=False) == [word_for_word(s) for s in SENTENCES]


def test_glossary_terms_appear_where_their_source_term_is_and_nowhere_else(translator):
    """ "house" must become "Gebäude" (a word the toy never produces), "red car" the two words "Feuer Wagen": each
    output whose source holds the term has it, the others are the unconstrained translations (which lack both)."""
    glossary = Glossary.build(GLOSSARY, translator.tokenizer)
    plain = translator.translate(SENTENCES, progress=False)
    results = translate_with_glossary(translator, SENTENCES, glossary, progress=False)
    for sentence, result, unconstrained in zip(SENTENCES, results, plain, strict=True):
        expected = [Term(s, t) for s, t in GLOSSARY.items() if f" {s} " in f" {sentence} "]
        assert result.terms == expected and result.missing == []
        for source, target in GLOSSARY.items():
            assert target not in unconstrained
            assert (target in result.text) == (Term(source, target) in expected)
        if not expected:
            assert result.text == unconstrained


def test_only_translations_that_miss_a_term_are_decoded_again_with_constraints(translator, monkeypatch):
    """ "house" -> "Haus" is what the toy says anyway: the sentences holding only that term keep their translation
    without the glossary, and only "two red car" (whose "Feuer Wagen" the toy never says) is constrained, with a
    beam of 4 for each bank of the constrained search (one for each number of the term's tokens placed)."""
    glossary = Glossary.build({"house": "Haus", "red car": "Feuer Wagen"}, translator.tokenizer)
    plain = translator.translate(SENTENCES, progress=False)
    constrained: list[tuple[str, int]] = []
    translate = translator.translate

    def spy(sentences, **options):
        if options.get("constraints") is not None:
            constrained.extend((sentence, options["num_beams"]) for sentence in sentences)
        return translate(sentences, **options)

    monkeypatch.setattr(translator, "translate", spy)
    results = translate_with_glossary(translator, SENTENCES, glossary, progress=False)
    term_tokens = len(translator.tokenizer("Feuer Wagen", add_special_tokens=False)["input_ids"])
    assert translator.model.generation_config.num_beams == 4 and term_tokens >= 2
    assert constrained == [("two red car", 4 * (1 + term_tokens))]
    for sentence, result, unconstrained in zip(SENTENCES, results, plain, strict=True):
        assert result.missing == []
        assert (result.text == unconstrained) == (sentence != "two red car")
    assert "Feuer Wagen" in results[SENTENCES.index("two red car")].text


def test_source_terms_match_whole_words_whatever_their_case_longest_first(translator):
    glossary = Glossary.build({"house": "Gebäude", "red": "rot", "red car": "Feuer Wagen"}, translator.tokenizer)
    assert glossary.terms_in("The HOUSE, a house; red.") == [Term("house", "Gebäude"), Term("red", "rot")]
    assert glossary.terms_in("household redcar housed") == []
    assert glossary.terms_in("a Red Car and a red house") == [
        Term("red car", "Feuer Wagen"),
        Term("red", "rot"),
        Term("house", "Gebäude"),
    ]
    ids = translator.tokenizer("rot", add_special_tokens=False)["input_ids"]
    capitalised = translator.tokenizer("Rot", add_special_tokens=False)["input_ids"]
    assert glossary.constraints([Term("red", "rot")]) == [[ids, capitalised]]  # a sentence may open with it


def test_generate_with_force_words_ids_is_the_glossary_command(toy, translator, tmp_path, capsys):
    """The command's output for a line equals `generate(force_words_ids=<the target term's ids>)` on that line."""
    tsv = write_tsv(tmp_path / "terms.tsv", "en\tde\n" + "".join(f"{s}\t{t}\n" for s, t in GLOSSARY.items()))
    tokenizer, model = translator.tokenizer, translator.model
    for sentence in ("red house two", "two red car"):
        (tmp_path / "in.txt").write_text(sentence + "\n", encoding="utf-8")
        translate_command.main([str(toy), "--glossary", str(tsv), "--input", str(tmp_path / "in.txt")])
        command = capsys.readouterr().out
        target = next(t for s, t in GLOSSARY.items() if s in sentence)
        inputs = tokenizer([sentence], return_tensors="pt")
        forced = [tokenizer(target, add_special_tokens=False)["input_ids"]]
        output = model.generate(**inputs, force_words_ids=forced)
        assert command == tokenizer.decode(output[0], skip_special_tokens=True) + "\n"
        assert target in command


def test_a_term_that_cannot_fit_is_named(translator, tmp_path):
    """With room for one new token the two-token term cannot be placed: the answer names it."""
    glossary = Glossary.build(GLOSSARY, translator.tokenizer)
    (result,) = translate_with_glossary(translator, ["two red car"], glossary, progress=False, max_new_tokens=1)
    assert result.missing == [Term("red car", "Feuer Wagen")]


def test_the_command_names_a_term_it_could_not_place(toy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("vanilla_training.translator.EXTRA_OUTPUT_LENGTH", -3)  # "two red car </s>": 1 new token
    tsv = write_tsv(tmp_path / "terms.tsv", "en\tde\nred car\tFeuer Wagen\n")
    (tmp_path / "in.txt").write_text("two red car\n", encoding="utf-8")
    translate_command.main([str(toy), "--glossary", str(tsv), "--input", str(tmp_path / "in.txt")])
    assert "glossary term 'red car' -> 'Feuer Wagen' not placed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("en\tde\nhouse\tGebäude\nred car Feuer Wagen\n", "line 3: 1 tab-separated column"),
        ("en\tde\nhouse\tGebäude\tHaus\n", "line 2: 3 tab-separated column"),
        ("house\tGebäude\n", "line 1: the header must name the two languages"),
        ("en\tde\nhouse\t \n", "line 2: the target term is empty"),
        ("en\tde\n\tHaus\n", "line 2: the source term is empty"),
        ("en\tde\nhouse\tGebäude\nHouse\tHaus\n", "line 3: source term 'House' is given twice with different targets"),
        ("en\tde\nhouse\t" + "Haus " * 70 + "\n", "line 2: the target term 'Haus Haus"),
    ],
)
def test_bad_glossary_files_are_refused_by_name(toy, tmp_path, capsys, text, message):
    tsv = write_tsv(tmp_path / "terms.tsv", text)
    (tmp_path / "in.txt").write_text("house\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        translate_command.main([str(toy), "--glossary", str(tsv), "--input", str(tmp_path / "in.txt")])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_glossary_that_is_not_utf8_names_its_line(translator, tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes(b"en\tde\nhouse\tGeb\xe4ude\n")
    with pytest.raises(GlossaryError, match="line 2: not UTF-8"):
        load_glossary(path, translator)


def test_a_header_naming_other_languages_is_refused(tmp_path):
    path = write_tsv(tmp_path / "terms.tsv", "en\tfr\nhouse\tmaison\n")
    with pytest.raises(GlossaryError, match="line 1: the glossary is en-fr, the model translates en-de"):
        load_glossary(path, type("Translator", (), {"languages": ("en", "de"), "tokenizer": None})())


def test_too_many_terms_and_unknown_terms_are_refused_by_name(translator):
    with pytest.raises(GlossaryError, match="3 terms, over the limit of 2"):
        Glossary.build({"one": "eins", "two": "zwei", "car": "Auto"}, translator.tokenizer, max_terms=2)
    with pytest.raises(GlossaryError, match="3 terms, over the limit of 2"):
        glossary_terms({"one": "eins", "two": "zwei", "car": "Auto"}, max_terms=2)
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "house": 1, "Haus": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    words = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", model_max_length=8)
    with pytest.raises(GlossaryError, match="term 1: the target term 'Gebäude' is unknown to the model"):
        Glossary.build({"house": "Gebäude"}, words)
    assert Glossary.build({"house": "Haus"}, words).terms == {"house": Term("house", "Haus")}


def test_a_request_glossary_must_be_an_object_of_strings():
    assert glossary_terms(json.dumps({"house": "Haus"}), 5) == {"house": "Haus"}
    for bad in ([["house", "Haus"]], {"house": 1}, "house=Haus"):
        with pytest.raises(GlossaryError, match="glossary: not"):
            glossary_terms(bad, 5)
