"""What tells sibling concepts apart: numbers (versions and dates too), weekdays, months, a
one-letter label. Two surfaces that differ only there ("Room 101" / "Room 102", "v0.6.1" /
"v0.6.2") name different things however close their vectors, so neither a write nor a sleep pass
merges them, and two memories that differ only there may contradict each other.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_WORD = re.compile(r"\w+")
_DIGITS = re.compile(r"\d+")
# Punctuation that is part of a name ("C#", "R&D", "@team", "100%"): a form keeps it.
_FORM_KEPT_PUNCTUATION = frozenset("#&@%")
_NOT = re.compile(r"n't\b")
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Abbreviations that are not also common words ("wed", "sat", "sun", "mar", "may" stay out).
WEEKDAYS = {
    **{day: day for day in _WEEKDAY_NAMES},
    **{"tue": "tuesday", "tues": "tuesday", "thu": "thursday", "thur": "thursday"},
    **{"thurs": "thursday", "fri": "friday"},
}
_MONTH_NAMES = (
    *("january", "february", "march", "april", "may", "june", "july", "august"),
    *("september", "october", "november", "december"),
)
MONTHS = {
    **{month: month for month in _MONTH_NAMES},
    **{month[:3]: month for month in _MONTH_NAMES if month[:3] not in ("mar", "may")},
    "sept": "september",
}
# "one" is left out: it is as often a pronoun.
_NUMBER_NAMES = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
NUMBER_WORDS = {word: str(value) for value, word in enumerate(_NUMBER_NAMES, start=2)}
NEGATIONS = frozenset({"not", "no", "never"})
SIBLING_CLASSES = (("<num>", NUMBER_WORDS), ("<day>", WEEKDAYS), ("<month>", MONTHS))


def words(text: str) -> list[str]:
    """Lower-cased word tokens, "n't" spelled out as "not"."""
    return _WORD.findall(_NOT.sub(" not", unicodedata.normalize("NFKC", text).casefold()))


def _sibling(word: str) -> tuple[str, str] | None:
    """(class, canonical value) of a word that tells siblings apart, or None."""
    if _DIGITS.fullmatch(word):
        return "<num>", str(int(word))
    for label, table in SIBLING_CLASSES:
        if word in table:
            return label, table[word]
    return None


@dataclass(frozen=True, slots=True)
class Shape:
    """A text split into its sentence pattern and the sibling values filled into it."""

    pattern: tuple[str, ...]  # words, sibling values as their class, negations left out
    values: tuple[str, ...]  # numbers (digit runs: versions and dates too), days, months
    negated: bool


def shape_of(text: str) -> Shape:
    pattern: list[str] = []
    values: list[str] = []
    negations = 0
    for word in words(text):
        if word in NEGATIONS:
            negations += 1
            continue
        # digit runs inside a word ("v0", "2024-05-01" splits already) count as numbers
        runs = _DIGITS.findall(word)
        sibling = _sibling(word)
        if sibling is not None:
            pattern.append(sibling[0])
            values.append(sibling[1])
        elif runs:
            pattern.append(_DIGITS.sub("<num>", word))
            values.extend(str(int(run)) for run in runs)
        else:
            pattern.append(word)
    return Shape(tuple(pattern), tuple(values), negations % 2 == 1)


def concept_form(surface: str) -> str:
    """What "the same normalised form" compares: NFKC, case-folded, without spaces,
    separating punctuation or underscores ("E-mail", "e mail" and "email" are one form). Symbols
    and the punctuation of names stay: "C", "C#" and "C++", or "Romeo + Juliet" and "Romeo ×
    Juliet", are different things."""
    return "".join(
        char
        for char in unicodedata.normalize("NFKC", surface).casefold()
        if char.isalnum()
        or char in _FORM_KEPT_PUNCTUATION
        or unicodedata.category(char)[0] in "MS"  # marks and symbols
    )


def siblings(a: str, b: str) -> bool:
    """Two surfaces that differ in what tells siblings apart: numbers (and so versions and
    dates), weekdays, months, or a one-letter label ("Agent A" / "Agent B")."""
    return shape_of(a).values != shape_of(b).values or conflicting_qualifier(a, b)


def conflicting_qualifier(a: str, b: str) -> bool:
    """Sibling labels like "Agent A" / "Agent B" never merge, however close their vectors."""
    left, right = a.lower().split(), b.lower().split()
    if len(left) < 2 or len(left) != len(right) or left[:-1] != right[:-1]:
        return False
    lq, rq = left[-1], right[-1]
    return lq != rq and len(lq) == 1 and len(rq) == 1 and lq.isalnum() and rq.isalnum()
