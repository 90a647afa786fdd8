"""Language identification by py3langid (langid.py's naive Bayes model over byte n-grams: offline, 97 languages, a
few MB), over every language it knows: what a text is written in, whether or not the server translates it."""

import copy

from py3langid.langid import MODEL_FILE, LanguageIdentifier

TOP = 3  # languages in an answer of /detect, as LibreTranslate gives


class Detector:
    """Ranks the languages py3langid knows (ISO 639-1 codes) for a text; `fallback` is the answer, with confidence
    0, where nothing can be told (no letter or digit in the text)."""

    def __init__(self, fallback: str = "en"):
        self.model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.fallback = fallback
        self.languages = [str(code) for code in self.model.nb_classes]  # those it may answer

    def detect(self, text: str) -> list[dict]:
        """LibreTranslate's answer: [{"confidence": 0-100 (a whole number), "language": code}], the `TOP` most
        likely first, with the model's own probabilities (over all its languages)."""
        if not translatable(text):
            return [{"confidence": 0, "language": self.fallback}]
        return [{"confidence": round(float(p) * 100), "language": str(code)} for code, p in self.model.rank(text)[:TOP]]

    def among(self, languages: list[str]) -> "Detector":
        """A detector choosing only among `languages` (those py3langid knows; all it knows if it knows none of
        them), its probabilities normalised over them, and answering `languages[0]` where nothing can be told; it
        shares this one's model."""
        known = [code for code in languages if code in self.languages]
        restricted = copy.copy(self)
        restricted.model = copy.copy(self.model)
        restricted.model.set_languages(known or None)
        restricted.fallback = languages[0]
        restricted.languages = known or self.languages
        return restricted


def translatable(text: str) -> bool:
    """Whether `text` holds anything to translate: a letter or a digit (not only whitespace, punctuation, symbols
    or emoji, which LibreTranslate gives back as they are)."""
    return any(character.isalnum() for character in text)
