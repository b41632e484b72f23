"""The not-found gate: say "nothing relevant" when even the best passage scores too low.

Unset by default (no threshold is safe for every model). A cross-encoder's logit for a query
in one script against a passage in another (Hangul question, Latin memory) is unreliable, so
the gate steps aside for such pairs rather than hide a correct cross-lingual hit.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any

# Unicode name prefixes of the scripts we tell apart; anything else counts as "other".
SCRIPTS = {
    "HANGUL": "hangul",
    "LATIN": "latin",
    "CJK": "han",
    "HIRAGANA": "kana",
    "KATAKANA": "kana",
    "CYRILLIC": "cyrillic",
}


def dominant_script(text: str) -> str | None:
    """The script most letters of ``text`` are written in; ``None`` when it has no letters."""
    counts: Counter[str] = Counter()
    for char in text:
        if not char.isalpha():
            continue
        name = unicodedata.name(char, "")
        counts[next((s for p, s in SCRIPTS.items() if name.startswith(p)), "other")] += 1
    return counts.most_common(1)[0][0] if counts else None


@dataclass(frozen=True)
class Gate:
    min_score: float | None

    def judge(self, query: str, passages: list[str], scores: list[float]) -> dict[str, Any]:
        top = max(range(len(scores)), key=scores.__getitem__)
        verdict: dict[str, Any] = {
            "min_score": self.min_score,
            "top_index": top,
            "top_score": scores[top],
            "passed": True,
            "bypassed": False,
        }
        if self.min_score is None:
            verdict["reason"] = "no gate set (KEYMEM_RERANK_MIN_SCORE)"
            return verdict
        query_script, passage_script = dominant_script(query), dominant_script(passages[top])
        if query_script and passage_script and query_script != passage_script:
            verdict["bypassed"] = True
            verdict["reason"] = f"scripts differ ({query_script} query, {passage_script} passage)"
        elif scores[top] < self.min_score:
            verdict["passed"] = False
            verdict["reason"] = f"top score {scores[top]:.4f} is below {self.min_score}"
        else:
            verdict["reason"] = f"top score {scores[top]:.4f} reaches {self.min_score}"
        return verdict
