"""Language identification restricted to the languages a server translates, by py3langid (langid.py's
naive Bayes model over byte n-grams: offline, 97 languages, a few MB)."""

from py3langid.langid import MODEL_FILE, LanguageIdentifier


class Detector:
    """Ranks the `languages` that py3langid knows (ISO 639-1 codes) for a text; other languages are never guessed."""

    def __init__(self, languages: list[str]):
        self.model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.known = sorted(set(languages) & set(self.model.nb_classes))
        self.fallback = sorted(languages)[0] if languages else "en"
        if len(self.known) > 1:
            self.model.set_languages(self.known)

    def detect(self, text: str, among: set[str] | None = None) -> list[dict]:
        """LibreTranslate's answer: [{"confidence": 0-100, "language": code}], most likely first, over the known
        languages (those in `among`, if given); the first language with confidence 0 if none can be told (no
        text, or no language known to the model)."""
        known = [code for code in self.known if among is None or code in among]
        if not text.strip() or not known:
            return [{"confidence": 0.0, "language": known[0] if known else self.fallback}]
        if len(self.known) == 1:
            return [{"confidence": 100.0, "language": known[0]}]
        ranking = [(code, float(p)) for code, p in self.model.rank(text) if code in known]
        total = sum(p for _, p in ranking) or 1.0
        return [{"confidence": round(p / total * 100, 1), "language": str(code)} for code, p in ranking]
