"""English function words: the closed classes that carry grammar, not topic.

Kiwi tags Korean morphemes, so Korean function words never become terms; English passes
through as foreign words (``SL``) with no part of speech, so "did", "what" and "my" arrive as
terms. Where a measure must count only what a text is *about* (coverage, below), these are
left out. Closed classes can be listed completely — determiners, pronouns, prepositions,
conjunctions, auxiliaries and wh-words — so a fixed list is the right tool, not a heuristic.
"""

from __future__ import annotations

_LISTED = """
    a an the this that these those some any each every either neither no all both
    i me my mine myself you your yours yourself yourselves he him his himself she her hers
    herself it its itself we us our ours ourselves they them their theirs themselves
    who whom whose which what whatever whoever when where why how
    am is are was were be been being do does did doing done have has had having
    will would shall should can could may might must ought
    to of in on at by for from with without about above below over under into onto upon
    out off up down through during before after since until till between among against
    toward towards across along around behind beyond near within via per
    and or but nor so yet if then than because although though while whereas unless whether
    as not also just very too only such there here s t d ll m re ve don didn doesn isn wasn
"""
ENGLISH_FUNCTION_WORDS = frozenset(_LISTED.split())
