"""Text rules of the graph: namespaces, key sanitising, dedup normalisation, literal matching.

Literal key matching is word-bounded (a key "name" must not fire inside "namespace") and
tolerates a Korean particle glued to the end of a word ("파이썬을" still names 파이썬), because
Korean writes particles without a space. Matching works on token n-grams looked up in a dict,
so its cost depends on the query's length, not on the number of keys.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator

from keymem.services.scope import DEFAULT_NAMESPACE

MIN_KEY_CHARS = 2
MAX_LITERAL_NGRAM_TOKENS = 6
SHORT_CONCEPT_MAX_TOKENS = 2
SHORT_CONCEPT_MAX_CHARS = 15

_CJK_SINGLE = re.compile(r"^[\u1100-\u11ff\u3130-\u318f\uac00-\ud7a3\u3040-\u30ff\u3400-\u9fff]$")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_TOKEN = re.compile(r"\w+(?:[+#]+)?")
_SPACE = re.compile(r"\s+")
# Korean particles (josa) and the copula endings most often glued to a noun, longest first.
KOREAN_PARTICLES = tuple(
    sorted(
        {
            "은",
            "는",
            "이",
            "가",
            "을",
            "를",
            "에",
            "의",
            "와",
            "과",
            "도",
            "만",
            "로",
            "으로",
            "에서",
            "에게",
            "께",
            "께서",
            "한테",
            "랑",
            "이랑",
            "하고",
            "까지",
            "부터",
            "처럼",
            "보다",
            "이나",
            "나",
            "이든",
            "든",
            "요",
            "이요",
            "야",
            "이야",
            "이다",
            "입니다",
            "에는",
            "에서는",
            "으로는",
            "로는",
            "와는",
            "과는",
            "이라",
            "라",
            "이라고",
            "라고",
            "조차",
            "마저",
            "밖에",
            "이며",
            "며",
            "에도",
            "에서도",
            "으로도",
            "로도",
            "이고",
            "고",
        },
        key=len,
        reverse=True,
    )
)


def normalize_namespace(raw: str | None) -> str:
    if raw is None:
        return DEFAULT_NAMESPACE
    trimmed = raw.strip().lower()
    return trimmed or DEFAULT_NAMESPACE


def usable_key(text: str) -> bool:
    """Keys of at least two characters, or a single CJK character (집, 돈, 車), are kept."""
    stripped = text.strip()
    return len(stripped) >= MIN_KEY_CHARS or bool(_CJK_SINGLE.match(stripped))


def normalize_content(content: str) -> str:
    """What exact dedup compares: NFKC, case-folded, whitespace collapsed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", content).casefold()).strip()


def surface_norm(text: str) -> str:
    """A key surface as literal matching sees it: lower-cased word tokens joined by spaces."""
    return " ".join(_TOKEN.findall(unicodedata.normalize("NFKC", text).lower()))


def is_short_concept(text: str) -> bool:
    stripped = text.strip()
    return (
        len(stripped.split()) <= SHORT_CONCEPT_MAX_TOKENS
        or len(stripped) <= SHORT_CONCEPT_MAX_CHARS
    )


def has_hangul(text: str) -> bool:
    return bool(_HANGUL.search(text))


def _variants(token: str) -> Iterator[str]:
    yield token
    if has_hangul(token):
        for particle in KOREAN_PARTICLES:
            if len(token) > len(particle) and token.endswith(particle):
                yield token[: -len(particle)]


def query_phrases(text: str) -> set[str]:
    """Every word n-gram of the query (up to six words), with a trailing particle stripped.

    A key surface matches literally when its ``surface_norm`` is one of these phrases; like the
    original, a literal match needs at least two characters.
    """
    return set(ordered_phrases(text))


def ordered_phrases(text: str) -> list[str]:
    """``query_phrases`` in the order they end in the text, each once: a write's auto-keys take
    the keys its text names first, the same ones however often the text is written."""
    tokens = _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())
    phrases: dict[str, None] = {}
    for end in range(len(tokens)):
        last_variants = list(_variants(tokens[end]))
        for size in range(1, min(MAX_LITERAL_NGRAM_TOKENS, end + 1) + 1):
            head = tokens[end - size + 1 : end]
            for last in last_variants:
                phrase = " ".join([*head, last])
                if len(phrase) >= MIN_KEY_CHARS:
                    phrases[phrase] = None
    return list(phrases)


# A key word and a text word name the same thing when they share a prefix this long, and at
# most STEM_SLACK characters of the longer one are left over ("peanut"/"peanuts",
# "allergy"/"allergic", "strawberry"/"strawberries"; not "cat"/"category").
STEM_MIN_CHARS = 4
STEM_SLACK_CHARS = 3


def _same_word(key_word: str, text_word: str) -> bool:
    if key_word in _variants(text_word):
        return True
    if min(len(key_word), len(text_word)) < STEM_MIN_CHARS:
        return False
    shared = next(
        (i for i, (a, b) in enumerate(zip(key_word, text_word, strict=False)) if a != b),
        min(len(key_word), len(text_word)),
    )
    return shared >= max(STEM_MIN_CHARS, max(len(key_word), len(text_word)) - STEM_SLACK_CHARS)


def text_names(text: str, surface: str) -> bool:
    """Whether ``text`` names a key surface: every word of it appears in the text, up to a
    particle or an inflection. Looser than literal matching (which recall uses to pick keys):
    it judges whether a key still fits a text that was rewritten."""
    words = set(_TOKEN.findall(unicodedata.normalize("NFKC", text).lower()))
    wanted = _TOKEN.findall(unicodedata.normalize("NFKC", surface).lower())
    return bool(wanted) and all(any(_same_word(w, t) for t in words) for w in wanted)


_SCRIPTS = (
    ("hangul", re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7a3]")),
    ("kana", re.compile(r"[\u3040-\u30ff]")),
    ("han", re.compile(r"[\u3400-\u9fff]")),
    ("cyrillic", re.compile(r"[\u0400-\u04ff]")),
    ("latin", re.compile(r"[A-Za-z\u00c0-\u024f]")),
)


def script_of(text: str) -> str | None:
    """The writing system of a key's first letter (None for digits and symbols only): what
    the single-language hint compares, since a key's language shows in its script."""
    for char in text:
        if char.isalpha():
            return _letter_script(char)
    return None


@functools.lru_cache(maxsize=4096)
def _letter_script(letter: str) -> str:
    """Cached: the graph's start asks it of every key's first letter (353k keys at 1M), and
    a text's letters come from few scripts."""
    return next((name for name, pattern in _SCRIPTS if pattern.match(letter)), "other")


def key_words(text: str) -> list[str]:
    """A key's words, as literal matching splits them."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text))


@functools.lru_cache(maxsize=4096)
def name_pattern(surface: str) -> re.Pattern[str]:
    """A name as a word of a text, in any case, where it is Latin ("Jon" is not in "Jonathan",
    "Tim" not in "time"); elsewhere as a substring (a Korean name takes its particle: "갑은")."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(surface)}(?![A-Za-z0-9])", re.IGNORECASE)


def first_named(content: str, people: Iterable[tuple[str, Iterable[str | None]]]) -> str | None:
    """Of ``people`` (a key id and the surfaces that name it), the one ``content`` names first:
    whom a memory is about. None when it names none of them."""
    first: tuple[int, str] | None = None
    for key_id, surfaces in people:
        for surface in surfaces:
            found = name_pattern(surface).search(content) if surface else None
            if found and (first is None or found.start() < first[0]):
                first = (found.start(), key_id)
    return None if first is None else first[1]
