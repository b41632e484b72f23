"""The lexicon's tokenization rules and key extraction, on the real Kiwi model."""

from __future__ import annotations

import pytest

from keymem.services.lexicon.keys import extract_keys
from keymem.services.lexicon.tokenizer import Tokenizer, cjk_terms, run_terms, shared_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return shared_tokenizer()


def test_korean_inflection_reduces_to_content_morphemes(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.tokenize("어제 부산에서 회의를 했다")
    assert "부산" in tokens and "회의" in tokens
    assert "부산에서" not in tokens and "회의를" not in tokens  # particles are stripped
    assert "에서" not in tokens and "를" not in tokens


def test_verb_and_adjective_stems_are_kept(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.tokenize("사용자는 딸기를 좋아한다. 아름다운 꽃이 피었다")
    assert {"사용자", "딸기", "좋아하", "아름답", "꽃", "피"} <= set(tokens)


def test_japanese_runs_become_bigrams_so_prefixes_meet(tokenizer: Tokenizer) -> None:
    long_form = tokenizer.tokenize("東京都に住んでいます")
    short_form = tokenizer.tokenize("東京")
    assert short_form == ["東京"]
    assert "東京" in long_form and "京都" in long_form
    assert cjk_terms("東") == ["東"]


def test_mixed_korean_english_and_versions(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.tokenize("keymem에서 Python 3.11.2를 썼다")
    assert tokens[:2] == ["keymem", "python"]  # Latin lower-cased, particle dropped
    assert "3.11.2" in tokens  # kept whole ...
    assert {"3", "11", "2"} <= set(tokens)  # ... and split
    assert "쓰" in tokens


@pytest.mark.parametrize(
    ("text", "whole", "parts"),
    [
        ("see #123 now", "#123", ["123"]),
        ("commit a1b2c3d4e5f6", "a1b2c3d4e5f6", []),
        ("edit src/keymem/lexicon.py today", "src/keymem/lexicon.py", ["src", "lexicon", "py"]),
        ("cat ~/.bashrc", "~/.bashrc", ["bashrc"]),
        # a run's word parts are stemmed like any word ("examples" in a query meets them)
        ("open https://example.com/a?b=1", "https://example.com/a?b=1", ["exampl", "com"]),
        ("v1.2.3-rc1 release", "v1.2.3-rc1", ["v1", "rc1"]),
    ],
)
def test_structured_tokens_are_kept_whole_and_split(
    tokenizer: Tokenizer, text: str, whole: str, parts: list[str]
) -> None:
    tokens = tokenizer.tokenize(text)
    assert whole in tokens
    assert set(parts) <= set(tokens)


def test_english_inflections_of_one_word_share_a_term(tokenizer: Tokenizer) -> None:
    asked = tokenizer.tokenize("What did Melanie paint?")
    held = tokenizer.tokenize("Melanie loves painting; she paints sunsets")
    assert asked[-1] == "paint" and held.count("paint") == 2
    assert tokenizer.tokenize("Camping trips") == tokenizer.tokenize("camp trip")
    # structured runs stay verbatim; words outside ASCII are not run through English rules
    assert "v0.6.2" in tokenizer.tokenize("pinned v0.6.2")
    assert tokenizer.tokenize("naïve café") == ["naïve", "café"]


def test_content_only_drops_function_words_before_stemming(tokenizer: Tokenizer) -> None:
    # "does" would stem to "doe", which no function-word list holds
    assert tokenizer.tokenize("What does Donggyun drink at night?", content_only=True) == [
        "donggyun",
        "drink",
        "night",
    ]
    assert "doe" in tokenizer.tokenize("What does Donggyun drink?")  # BM25 keeps every term


def test_runs_end_before_sentence_punctuation() -> None:
    assert run_terms("Python") == ["python"]
    assert run_terms("e.g") == ["e.g", "e", "g"]


def test_nfkc_and_control_characters(tokenizer: Tokenizer) -> None:
    assert tokenizer.tokenize("\uff21\uff22\uff23") == ["abc"]  # fullwidth Latin folds to ASCII
    assert tokenizer.tokenize("ｶﾀｶﾅ") == ["カタ", "タカ", "カナ"]  # halfwidth kana folds too
    assert tokenizer.tokenize("부산\x00회의\x07") == ["부산", "회의"]
    assert tokenizer.tokenize("") == []
    assert tokenizer.tokenize(" \t\n ") == []


def test_hanja_in_korean_text(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.tokenize("大韓民國 헌법")
    assert "大韓" in tokens and "헌법" in tokens


def test_extract_keys_finds_names_nouns_and_terms(tokenizer: Tokenizer) -> None:
    text = (
        "서울대학교 김철수 교수가 New York Times에 기고했다. "
        "We moved keymem to DuckDB 2.0.1 with Claude Code and Python. Python is great."
    )
    found = {c.key: c for c in extract_keys(text, tokenizer.analyse(text), limit=50)}
    assert found["New York Times"].kind.name == "NAME"
    assert found["Claude Code"].kind.name == "NAME"
    assert found["서울대학교"].kind.name == "PROPER"
    assert found["김철수"].kind.name == "PROPER"
    assert found["DuckDB"].kind.name == "PROPER"
    assert found["2.0.1"].kind.name == "TERM"
    assert "교수" in found
    assert found["Python"].count == 2
    assert "We" not in found and "The" not in found


def test_extract_keys_takes_speaker_labels_and_skips_question_words(
    tokenizer: Tokenizer,
) -> None:
    """A transcript's turns start with their speaker ("Jon: Thanks!" has nothing else to be
    filed under); "How" starting a question or a list item names nothing."""

    def keys_of(text: str) -> list[str]:
        return [c.key for c in extract_keys(text, tokenizer.analyse(text))]

    assert keys_of("Jon: Thanks!") == ["Jon"]
    assert {"Gina", "Jon"} <= set(keys_of("Gina: Sure, see ya.\nJon: Bye!"))
    assert not {"How", "Did"} & set(keys_of("- **How** to plant tomatoes. How deep? Did you?"))
    assert keys_of("Thanks!") == []


def test_extract_keys_joins_nouns_inside_one_word(tokenizer: Tokenizer) -> None:
    text = "부산지검 회의록을 정리했다"
    morphs = tokenizer.analyse(text)
    keys = [c.key for c in extract_keys(text, morphs)]
    nouns_in_first_word = [m.form for m in morphs if m.end <= 4 and m.tag in {"NNG", "NNP"}]
    if len(nouns_in_first_word) > 1:  # Kiwi split the word: the compound is offered too
        assert "".join(nouns_in_first_word) in keys
    assert any(k.startswith("회의") for k in keys)


def test_extract_keys_cjk_runs(tokenizer: Tokenizer) -> None:
    text = "東京タワーに行きました"
    keys = [c.key for c in extract_keys(text, tokenizer.analyse(text))]
    assert "東京" in keys and "タワー" in keys


def test_extract_keys_limit(tokenizer: Tokenizer) -> None:
    text = ", ".join(f"Name{i} Thing{i}" for i in range(40))
    assert len(extract_keys(text, tokenizer.analyse(text), limit=5)) == 5
    long_run = " ".join(f"Word{i}" for i in range(10))  # too long to be one name
    keys = [c.key for c in extract_keys(long_run, tokenizer.analyse(long_run), limit=50)]
    assert "Word3" in keys and long_run not in keys


def test_plain_english_without_names_still_offers_its_content_words(
    tokenizer: Tokenizer,
) -> None:
    text = "the user usually drinks oolong tea after lunch and dislikes coffee"
    keys = [c.key for c in extract_keys(text, tokenizer.analyse(text))]
    assert {"oolong", "drinks", "lunch", "coffee"} <= set(keys)
    assert not {"the", "after", "and"} & set(keys)
    named = "Ada Lovelace wrote the first program with Charles Babbage"
    found = [c.key for c in extract_keys(named, tokenizer.analyse(named))]
    assert found[:2] == ["Ada Lovelace", "Charles Babbage"]  # names outrank plain words
    assert "lovelace" not in found


def test_extract_keys_offers_a_querys_content_words_when_asked(tokenizer: Tokenizer) -> None:
    text = "Did Alice, Bob and Carol vote in the Berlin election?"
    named = [c.key for c in extract_keys(text, tokenizer.analyse(text))]
    assert "election" not in named  # three names: plain extraction stops there
    asked = [c.key for c in extract_keys(text, tokenizer.analyse(text), content_words=True)]
    assert {"Bob", "Berlin", "vote", "election"} <= set(asked)
