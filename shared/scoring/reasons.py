"""Why a label is proposed (or, for a candidate, why not), in words a moderator reads: the wire's
``ProposedLabel.reason``, filled where each kind of label is made, so every path that proposes (the classifier worker,
``POST /v1/suggest``, ``newsmon suggest``, the demo) says the same thing, and the console and the command line only
show it.

* a label from retrieval (:func:`retrieval_reason`): the decision rule that proposed it and the score it was held to,
  then the evidence: how many of the nearest memory articles carry it, or, when none of them does, the score
  components that brought it (its name in the text, the head model, ...) and the memory's closest articles that
  carry it;
* a label from a label rule alone (:func:`rule_reason`): the words its keyword expression matched, and why the rule
  alone decides;
* a near-copy's label (:func:`duplicate_reason`): the decision on the original it was taken from.

The rules' and components' names are the registered ones; a rule or component a deployment adds is named as it is
registered (``my_rule`` -> "the rule “my rule”").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["COMPONENT_WORDS", "duplicate_reason", "quoted", "retrieval_reason", "rule_reason"]

#: What a score component says when it brings a label no near neighbour carries.
COMPONENT_WORDS = {
    "label_names": "its name occurs in the text",
    "head_model": "the head model (a classifier trained on the memory's articles) finds it likely",
    "label_keys": "the memory's articles that carry it, taken together, are close to this one (label keys)",
    "label_tree": "the label tree (a classifier trained on the memory's words) finds it likely",
}


def quoted(words: Sequence[str], limit: int = 5) -> str:
    """``“a”, “b”`` for the first ``limit`` words (``, …`` after them when there are more)."""
    shown = ", ".join(f"“{w}”" for w in words[:limit])
    return shown + (", …" if len(words) > limit else "")


def _score(score: float, threshold: float | None, above: str = "above") -> str:
    return f"its score {score:.2f}" + (f" is {above} its threshold {threshold:.2f}" if threshold is not None else "")


def _rule_words(rule: str, score: float, threshold: float | None, params: Any) -> str:
    """What the decision rule ``rule`` that proposed a label did, with the label's score and threshold."""
    options = params.options_of(rule) if params is not None else None
    options = options or {}
    below = threshold is not None and score <= threshold
    if rule == "threshold":
        return _score(score, threshold)
    if rule == "label_count":
        return (f"it is among the article's best labels, as many as its nearest memory articles usually carry, and "
                f"its score {score:.2f} reaches the minimum {options.get('minimum', threshold or 0):.2f}")
    if rule == "set_vote":
        words = "the nearest memory articles agree on a label set that holds it (label-set vote)"
    elif rule in ("tail_support", "new_label_support"):
        new = "it is new since the calibration, and " if rule == "new_label_support" else ""
        first = f"the {options['neighbours']} nearest" if "neighbours" in options else "the nearest"
        close = f" at similarity {options['similarity']:.2f} or more" if "similarity" in options else ""
        words = f"{new}{options.get('support', 'enough')} or more of {first} memory articles carry it{close}"
    elif rule == "floor":
        words = (f"it is the article's best label, and no other rule proposed anything for the article (the floor "
                 f"{options.get('score', 0):.2f})")
    else:
        words = f"the rule “{rule.replace('_', ' ')}” proposed it"
    return words + (f", although {_score(score, threshold, 'below')}" if below else "")


def _candidate_words(score: float, threshold: float | None, label_count: bool) -> str:
    """Why a label scored but not proposed was left out."""
    if threshold is None:
        return f"its score {score:.2f} proposed nothing"
    if label_count and score >= threshold:
        return (f"its score {score:.2f} reaches the minimum {threshold:.2f}, but the article already has as many "
                "labels as its nearest memory articles usually carry")
    if score > threshold:
        return f"{_score(score, threshold)}, but it is outside the label set the nearest memory articles agree on"
    return _score(score, threshold, "below")


def _evidence(carriers: int, window: int, neighbours: Sequence[tuple[str, float]], beyond: bool, searched: bool,
              components: Sequence[str], proposed: bool) -> str:
    """The evidence of a retrieval label in words (see :func:`retrieval_reason`)."""
    closest = max((s for _i, s in neighbours), default=None)
    at = f", the closest at {closest:.2f}" if closest is not None else ""
    if carriers:
        return f"{carriers} of the {window} nearest memory articles {'carries' if carriers == 1 else 'carry'} it{at}"
    parts = [f"none of the {window} nearest memory articles carries it"]
    if components:
        parts.append(" and ".join(COMPONENT_WORDS.get(c, f"the score component “{c.replace('_', ' ')}” brings it")
                                  for c in components))
    if neighbours and beyond:
        parts.append(f"the next nearest that carry it are shown{at}")
    elif neighbours and searched:
        parts.append(f"the memory's closest articles that carry it are shown{at}")
    elif not neighbours and proposed:
        parts.append("no memory article carries it under this name")
    elif not neighbours and not components:
        parts.append("a score component brought it")
    return "; ".join(parts)


def retrieval_reason(score: float, threshold: float | None, decided_by: str | None, proposed: bool,
                     carriers: int, window: int, neighbours: Sequence[tuple[str, float]], params: Any = None,
                     beyond: bool = False, searched: bool = False, components: Sequence[str] = ()) -> str:
    """Why a retrieval label is proposed (or not), e.g. "its score 0.83 is above its threshold 0.60; 3 of the 75
    nearest memory articles carry it, the closest at 0.91".

    Args:
        score / threshold: the label's score and its own threshold (None: not known); decided_by: the decision rule
            that proposed it (None: not proposed); proposed: whether it is proposed (else a candidate).
        carriers: how many of the article's first ``window`` neighbours (k) carry it; neighbours: the evidence
            shown, ``(article id, cosine)``; beyond: they are neighbours after the first k; searched: they are the
            memory's closest articles carrying it, found for it; components: the score components that gave it a
            share when no near neighbour carries it; params: the scoring parameters (the rules' options).
    """
    if proposed:
        head = _rule_words(decided_by, score, threshold, params) if decided_by else _score(score, threshold)
    else:
        head = _candidate_words(score, threshold, params is not None and params.options_of("label_count") is not None)
    return f"{head}; {_evidence(carriers, window, neighbours, beyond, searched, components, proposed)}"


def rule_reason(matched: Sequence[str], examples: int, min_examples: int, proposed: bool) -> str:
    """Why a label rule's label is proposed from its keyword expression alone (it has fewer than ``min_examples``
    confirmed ``examples``), or offered as a candidate (it has enough, so retrieval decides, and did not propose
    it); ``matched``: the article's words the expression matched."""
    words = f"its rule matched the text ({quoted(matched)})" if matched else "its rule matched the text"
    if proposed:
        return (f"{words}; the label has {examples} confirmed example{'' if examples == 1 else 's'} in the memory, "
                f"fewer than {min_examples}, so its rule alone proposes it")
    return (f"{words}, but with {examples} confirmed examples in the memory retrieval decides it, and did not "
            "propose it")


def duplicate_reason(original_id: str, title: str | None, jaccard: float, moderated: bool) -> str:
    """Why a near-copy's label is proposed: the original's decided label (a moderator's decision, or the archive's
    label of a corpus article), taken over by a copy whose text is a near-copy at estimated Jaccard ``jaccard``."""
    original = f"{original_id} (“{title}”)" if title else original_id
    how = f"which this article nearly copies (estimated Jaccard {jaccard:.2f})"
    if moderated:
        return f"a moderator decided it on {original}, {how}"
    return f"the memory's article {original} carries it, {how}"
