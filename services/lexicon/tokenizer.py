"""Text to index terms: Kiwi morphology for Korean, plain rules for everything Kiwi is bad at.

Why not hand the whole text to Kiwi: it analyses Korean very well, but it splits a hex hash
into single letters and digits, cuts ``lexicon.py`` into ``le`` + ``xicon.py``, and leaves
Japanese and Chinese as one opaque token per run (so "東京" never meets "東京都"). So each
character span has exactly one owner:

* Latin/Greek/Cyrillic letters and digits (with internal joiners such as ``.``, ``/``, ``-``)
  are *runs*: each run yields its lower-cased alphanumeric parts, and a run with joiners or a
  ``#``/``@``/path prefix is also kept whole (``3.11.2`` -> ``3.11.2``, ``3``, ``11``, ``2``).
* Han, Hiragana and Katakana runs yield character bigrams (a lone character yields itself).
* Kiwi sees the rest, with runs masked by ``x`` (so a particle after a run still reads as a
  particle) and CJK runs blanked; we keep its content morphemes: nouns (NNG, NNP, NNB),
  numerals (NR), verb and adjective stems (VV*, VA*), roots (XR) and Korean hashtags/mentions.

As Kiwi reduces a Korean word to its morphemes ("부산에서" -> 부산), an index term of a plain ASCII
word is its English Snowball stem ("painting", "paints" -> paint), so a question and a memory
that inflect one word differently share it; structured runs (``3.11.2``) are kept verbatim.

Text is NFKC-normalised first and control characters become spaces. docs/LEXICON.md lists the
rules with examples. ``TOKENIZER_VERSION`` names the rules: persisted token caches made under
another version are discarded.
"""

from __future__ import annotations

import re
import threading
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import Stemmer

from keymem.services.lexicon.function_words import ENGLISH_FUNCTION_WORDS

TOKENIZER_VERSION = "kiwi-0.24/nomulti/rules-3/snowball-en"

# Kiwi part-of-speech tags (after dropping a "-R"/"-I" regularity suffix) whose forms we index.
CONTENT_TAGS = frozenset({"NNG", "NNP", "NNB", "NR", "VV", "VA", "XR"})
# Kiwi's pattern tokens that only Hangul text can still produce (runs are masked): kept whole.
PATTERN_TAGS = frozenset({"W_HASHTAG", "W_MENTION"})
NOUN_TAGS = frozenset({"NNG", "NNP"})

_LETTERS = "A-Za-z0-9\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u0400-\u04ff"
_JOINERS = r"._\-/\\:@+#~?=&%"
# An optional URL scheme, path start ("/", "~/", "./", "../", "/.") or #/@/$ sigil, then letters
# and digits with single joiners between them (a trailing "." ends a sentence, not the run).
_RUN = re.compile(
    rf"(?:[A-Za-z][A-Za-z0-9+.\-]*://|(?:~|\.{{1,2}})?/\.?|[#@$])?"
    rf"[{_LETTERS}](?:[{_LETTERS}]|[{_JOINERS}](?=[{_LETTERS}]))*"
)
_PART = re.compile(f"[{_LETTERS}]+")
_CJK = re.compile(
    "[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0002ffff]+"
)
_HANGUL = re.compile("[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_RUN_MASK = "x"
STEM_LANGUAGE = "english"


@dataclass(frozen=True, slots=True)
class Morph:
    """One analysed token: its index form, where it starts in the normalised text, its kind."""

    form: str
    start: int
    end: int
    tag: str  # a Kiwi tag, or "RUN" (a Latin/digit run part), "RUN_WHOLE", "CJK"


def normalise(text: str) -> str:
    return _CONTROL.sub(" ", unicodedata.normalize("NFKC", text))


def run_terms(run: str) -> list[str]:
    """A Latin/digit run's terms: the whole run (when it is structured) and its parts."""
    lowered = run.lower()
    parts = _PART.findall(lowered)
    if len(parts) == 1 and parts[0] == lowered:
        return parts
    return [lowered, *parts]


def cjk_terms(run: str) -> list[str]:
    """Character bigrams of a Han/Kana run, so "東京" and "東京都" share the term "東京"."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


class Tokenizer:
    """Kiwi plus the run and CJK rules. One instance per process (Kiwi costs ~0.5 GB)."""

    def __init__(self) -> None:
        started = time.perf_counter()
        from kiwipiepy import Kiwi

        # Without the multi-word dictionary: it merges a few phrases into one token containing a
        # space ("자연어 처리"), which a query for either word then misses, and it roughly
        # doubles the load and warm-up time (docs/LEXICON.md).
        self._kiwi: Any = Kiwi(load_multi_dict=False)
        # Kiwi's analyser is not documented as thread-safe; tests run several services in one
        # process, production one per process, so an uncontended lock costs nothing.
        self._lock = threading.Lock()
        # PyStemmer's stemmer keeps a cache and is not thread-safe: its own lock.
        self._stemmer: Any = Stemmer.Stemmer(STEM_LANGUAGE)
        self._stem_lock = threading.Lock()
        self.load_s = time.perf_counter() - started
        self.warm()
        self.warm_s = time.perf_counter() - started - self.load_s

    def warm(self) -> None:
        """Kiwi loads its model lazily on the first call (~2.5 s): pay that before serving."""
        self.tokenize("사용자는 어제 부산에서 회의를 했다 (keymem 3.11.2, 東京)")

    def analyse(self, text: str) -> list[Morph]:
        """Every indexable token of ``text`` with its position, in text order."""
        return self._morphs(normalise(text))

    def _morphs(self, text: str) -> list[Morph]:
        morphs: list[Morph] = []
        masked = list(text) if _HANGUL.search(text) else None
        for match in _RUN.finditer(text):
            start, end = match.span()
            terms = run_terms(match.group())
            whole = len(terms) > 1
            for i, term in enumerate(terms):
                tag = "RUN_WHOLE" if whole and i == 0 else "RUN"
                morphs.append(Morph(term, start, end, tag))
            if masked is not None:
                masked[start:end] = _RUN_MASK * (end - start)
        for match in _CJK.finditer(text):
            start, end = match.span()
            for i, term in enumerate(cjk_terms(match.group())):
                morphs.append(Morph(term, start + i, min(end, start + i + 2), "CJK"))
            if masked is not None:
                masked[start:end] = " " * (end - start)
        if masked is not None:
            morphs.extend(self._kiwi_morphs("".join(masked)))
        morphs.sort(key=lambda m: m.start)
        return morphs

    def _kiwi_morphs(self, text: str) -> Iterator[Morph]:
        with self._lock:
            analysed = self._kiwi.tokenize(text)
        for token in analysed:
            tag = str(token.tag)
            base = tag.split("-", 1)[0]
            if base in CONTENT_TAGS:
                yield Morph(token.form, token.start, token.start + token.len, base)
            elif tag in PATTERN_TAGS:
                whole = token.form.lower()
                yield Morph(whole, token.start, token.start + token.len, tag)
                if len(whole) > 1:
                    yield Morph(whole[1:], token.start + 1, token.start + token.len, tag)

    def tokenize(self, text: str, *, content_only: bool = False) -> list[str]:
        """The index terms of ``text``, in order, with repeats (BM25 counts them): a plain ASCII
        word by its English stem. ``content_only`` first leaves out English function words
        (matched on the word itself: a stem such as "doe" for "does" would not be listed)."""
        text = normalise(text)
        if not _HANGUL.search(text) and not _CJK.search(text):
            return self._tokenize_runs(text, content_only)
        morphs = self._morphs(text)
        if content_only:
            morphs = [m for m in morphs if m.form not in ENGLISH_FUNCTION_WORDS]
        words = [m.form for m in morphs if _stemmable(m)]
        with self._stem_lock:
            stems = iter(self._stemmer.stemWords(words))
        return [next(stems) if _stemmable(m) else m.form for m in morphs]

    def _tokenize_runs(self, text: str, content_only: bool) -> list[str]:
        """``tokenize`` of normalised text that holds only runs (no Hangul, no CJK), without a
        ``Morph`` per token: the same terms at a third of the CPU (a snapshot of a large
        store tokenizes every memory)."""
        terms: list[str] = []
        stem_at: list[int] = []
        for match in _RUN.finditer(text):
            parts = run_terms(match.group())
            for i, term in enumerate(parts):
                if content_only and term in ENGLISH_FUNCTION_WORDS:
                    continue
                if (i or len(parts) == 1) and term.isascii() and term.isalpha():
                    stem_at.append(len(terms))
                terms.append(term)
        if stem_at:
            with self._stem_lock:
                stems = self._stemmer.stemWords([terms[i] for i in stem_at])
            for i, stem in zip(stem_at, stems, strict=True):
                terms[i] = stem
        return terms


def _stemmable(morph: Morph) -> bool:
    """A plain ASCII word of a Latin run (not a structured run kept whole, not a number)."""
    return morph.tag == "RUN" and morph.form.isascii() and morph.form.isalpha()


_shared: Tokenizer | None = None
_shared_lock = threading.Lock()


def shared_tokenizer() -> Tokenizer:
    """The process's tokenizer, loaded and warmed on first use (tests load Kiwi only once)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Tokenizer()
        return _shared
