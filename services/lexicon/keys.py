"""Candidate keys from free text, for memories saved without good keys (the recall issue's
auto-keys).

A key in keymem is a concept a memory is reached through, so candidates are the naming parts of
the text: Korean nouns and proper nouns (Kiwi), compounds Kiwi split inside one word
("데이터베이스마이그레이션"), capitalised Latin names and multi-word names ("Claude Code"),
structured tokens (versions, paths, ``#123``), and Han or Katakana runs in Japanese/Chinese.
Ranked by how often they occur, then by kind, then by first position. This is a proposal for
the graph to filter, not a decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

from keymem.services.lexicon.tokenizer import NOUN_TAGS, Morph, normalise

# Capitalised words (a mixed-case word like "DuckDB" or an acronym counts too); consecutive ones
# separated by single spaces form a multi-word name.
_CAPITALISED = r"[A-Z][A-Za-z0-9]*(?:[.+#-][A-Za-z0-9]+)*[+#]*"
_LATIN_NAME = re.compile(rf"(?<![A-Za-z0-9]){_CAPITALISED}(?: {_CAPITALISED})*(?![A-Za-z0-9])")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|[\"'(\[]\s*)$")
_KANJI = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
_KATAKANA = re.compile("[\u30a0-\u30ff\u31f0-\u31ff]{2,}")
# Frequent capitalised function words that start English sentences and name nothing.
_LATIN_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
MAX_NAME_WORDS = 4  # a longer run of capitalised words is a title or a list, not one name
DEFAULT_LIMIT = 20
# Plain English has no POS tagger here: when the text names fewer than this many things, its
# content words (4+ letters, not among the commonest words) are offered as nouns.
MIN_CANDIDATES = 3
_LATIN_WORD = re.compile(r"(?<![A-Za-z0-9])[a-z]{4,}(?![A-Za-z0-9])")  # names are found above
_COMMON_WORDS = frozenset(
    {
        "about",
        "after",
        "again",
        "also",
        "always",
        "another",
        "because",
        "been",
        "before",
        "being",
        "both",
        "could",
        "didn",
        "does",
        "doing",
        "done",
        "down",
        "each",
        "even",
        "every",
        "from",
        "going",
        "good",
        "have",
        "having",
        "here",
        "into",
        "just",
        "know",
        "like",
        "made",
        "make",
        "many",
        "more",
        "most",
        "much",
        "must",
        "never",
        "only",
        "other",
        "over",
        "really",
        "said",
        "same",
        "should",
        "some",
        "still",
        "such",
        "take",
        "than",
        "that",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "thing",
        "things",
        "think",
        "this",
        "those",
        "through",
        "time",
        "very",
        "want",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "will",
        "with",
        "would",
        "your",
        "yours",
        "yeah",
        "okay",
        "sure",
        "thanks",
        "thank",
    }
)
MAX_LIMIT = 200


class Kind(IntEnum):
    """Candidate kinds, the higher the more key-like on equal counts."""

    NOUN = 1
    TERM = 2
    PROPER = 3
    COMPOUND = 4
    NAME = 5


@dataclass(slots=True)
class Candidate:
    key: str
    kind: Kind
    count: int
    first: int

    def to_wire(self) -> dict[str, object]:
        return {"key": self.key, "kind": self.kind.name.lower(), "count": self.count}


class _Collector:
    def __init__(self) -> None:
        self.found: dict[str, Candidate] = {}

    def __contains__(self, folded: object) -> bool:
        return folded in self.found

    def add(self, key: str, kind: Kind, at: int) -> None:
        key = key.strip()
        if not key:
            return
        folded = key.casefold()
        seen = self.found.get(folded)
        if seen is None:
            self.found[folded] = Candidate(key, kind, 1, at)
        else:
            seen.count += 1
            seen.kind = max(seen.kind, kind)

    def ranked(self, limit: int) -> list[Candidate]:
        ordered = sorted(self.found.values(), key=lambda c: (-c.count, -c.kind, c.first))
        return ordered[:limit]


def _korean(morphs: list[Morph], out: _Collector) -> None:
    group: list[Morph] = []

    def flush() -> None:
        if len(group) > 1:
            out.add("".join(m.form for m in group), Kind.COMPOUND, group[0].start)
        for m in group:
            if m.tag == "NNP":
                out.add(m.form, Kind.PROPER, m.start)
            elif len(m.form) > 1:  # one-syllable common nouns (일, 때, 말) name too little
                out.add(m.form, Kind.NOUN, m.start)
        group.clear()

    for m in morphs:
        if m.tag not in NOUN_TAGS:
            continue
        if group and m.start != group[-1].end:
            flush()
        group.append(m)
    flush()


def _latin(text: str, out: _Collector) -> None:
    for match in _LATIN_NAME.finditer(text):
        words = match.group().split(" ")
        at = match.start()
        # "Gina: Wow!" — a label before a colon (a transcript's speaker) names someone, though
        # it starts a sentence
        speaker = text.startswith(":", match.end())
        at_sentence_start = not speaker and bool(_SENTENCE_START.search(text[max(0, at - 3) : at]))
        if at_sentence_start and words[0].casefold() in _LATIN_STOPWORDS:
            words = words[1:]
            at = text.index(words[0], at) if words else at
        if not words:
            continue
        if len(words) > MAX_NAME_WORDS:
            for word in words:
                if word.casefold() not in _LATIN_STOPWORDS:
                    out.add(word, Kind.PROPER, text.index(word, at))
        elif len(words) > 1:
            out.add(" ".join(words), Kind.NAME, at)
        elif words[0].casefold() in _LATIN_STOPWORDS:
            continue
        elif not at_sentence_start or not words[0][1:].islower() or words[0].casefold() in out:
            # a lone capitalised word starting a sentence counts only if it is known otherwise
            out.add(words[0], Kind.PROPER, at)


def _content_words(text: str, out: _Collector) -> None:
    for match in _LATIN_WORD.finditer(text):
        word = match.group().casefold()
        if word not in _COMMON_WORDS and word not in _LATIN_STOPWORDS:
            out.add(word, Kind.NOUN, match.start())


def _structured(morphs: list[Morph], out: _Collector) -> None:
    for m in morphs:
        if m.tag == "RUN_WHOLE":
            out.add(m.form, Kind.TERM, m.start)


def _cjk(text: str, out: _Collector) -> None:
    for pattern, kind in ((_KANJI, Kind.NOUN), (_KATAKANA, Kind.PROPER)):
        for match in pattern.finditer(text):
            out.add(match.group(), kind, match.start())


def extract_keys(
    text: str, morphs: list[Morph], limit: int = DEFAULT_LIMIT, content_words: bool = False
) -> list[Candidate]:
    """Rank key candidates in ``text``, given its ``Tokenizer.analyse`` morphs.

    ``content_words`` offers plain English content words however many names the text has: a
    query's phrases are matched against keys by similarity, so its topic words matter as much
    as its names.
    """
    normalised = normalise(text)
    out = _Collector()
    _korean(morphs, out)
    _latin(normalised, out)
    _structured(morphs, out)
    _cjk(normalised, out)
    if content_words or len(out.found) < MIN_CANDIDATES:
        _content_words(normalised, out)
    return out.ranked(limit)
