"""Where the bm25 baseline's tokens come from: keymem's lexicon tokenizer, or BASELINES.md's.

``keymem`` (the default) is the lexicon service's own tokenizer, imported in-process, so the
bm25 row is keymem's lexical leg run flat: the comparison the eval exists for. ``kiwi`` is
BASELINES.md's tokenization taken literally — raw Kiwi over the whole text, keeping the forms
of nouns, pronouns, numerals, verb and adjective stems, roots, foreign words, Hanja, numbers
and other symbols, Latin lower-cased — and reproduces that file's bm25 figures to the third
decimal. They differ where keymem chose differently on purpose (docs/LEXICON.md): Latin and
digit runs are keymem's, kept whole as well as split ("1995.12.29" also yields 1995, 12, 29)
and masked from Kiwi; Han/Kana become bigrams; symbols (①, ㆍ) are not terms. On Korean
statutes that costs keymem's tokens about 0.02-0.035 (docs/EVAL.md has the numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Tokenize = Callable[[str], list[str]]
KEYMEM = "keymem"
KIWI = "kiwi"
TOKENIZATIONS = (KEYMEM, KIWI)

# Kiwi tags BASELINES.md keeps (a "-R"/"-I" regularity suffix is dropped first). Found by
# reproducing its bm25 rows: SW (other symbols) and NP (pronouns) are in, or koblex_ko's all@5
# lands 0.009-0.018 lower.
BASELINE_KIWI_TAGS = frozenset(
    {"NNG", "NNP", "NNB", "NP", "NR", "VV", "VA", "XR", "SL", "SN", "SH", "SW"}
)
LATIN_TAG = "SL"


def keymem_tokenize() -> Tokenize:
    """The lexicon's tokenizer (Kiwi + keymem's run and CJK rules), loaded in this process."""
    from keymem.services.lexicon.tokenizer import shared_tokenizer

    return shared_tokenizer().tokenize


def kiwi_tokenize() -> Tokenize:
    """BASELINES.md's tokenization: raw Kiwi morphemes of the content tags, Latin lower-cased."""
    from kiwipiepy import Kiwi

    kiwi: Any = Kiwi()

    def tokenize(text: str) -> list[str]:
        terms = []
        for token in kiwi.tokenize(text):
            tag = str(token.tag).split("-", 1)[0]
            if tag in BASELINE_KIWI_TAGS:
                terms.append(token.form.lower() if tag == LATIN_TAG else token.form)
        return terms

    return tokenize


def tokenizer(name: str) -> Tokenize:
    if name == KEYMEM:
        return keymem_tokenize()
    if name == KIWI:
        return kiwi_tokenize()
    raise ValueError(f"unknown tokenization {name!r} (known: {', '.join(TOKENIZATIONS)})")
