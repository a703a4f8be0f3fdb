"""A :class:`~newsmon.schemas.LabelProposal` as a moderator reads it, for the demo and ``newsmon suggest``.

Per label: its score, source and why it is proposed (or, for a label not proposed, why not): the proposal's own
``reason`` (version 7), or for an older proposal words made from its decision rule and threshold; then the
evidence: the rule that matched (the KwE and the words it found), the original of a near-copy, or the top neighbours
with their similarity and title. The labels below the threshold
(``candidates``) follow the same way. Built as rich :class:`~rich.text.Text` (titles are never read as markup)
and printed through a rich console, so a live progress display on the same console is redrawn around it.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from newsmon.schemas import LabelProposal, ProposedLabel

__all__ = ["print_proposal", "reason_in_words", "render_proposal", "thresholds_in_words"]

_MARK = {True: ("✓", "green"), False: ("✗", "red"), None: ("•", "cyan")}


def _evidence(x: ProposedLabel, neighbours: int) -> list[Text]:
    """The lines of evidence under one label (indented)."""
    lines = []
    if x.rule is not None:
        found = ", ".join(f"“{w}”" for w in x.rule.matched) or "(no positive word recorded)"
        lines.append(Text.assemble("      rule ", (x.rule.kwe, "magenta"), f" matched {found}"))
    if x.source == "duplicate":
        for n in x.neighbours[:1]:
            line = Text(f"      near-copy of {n.article_id} (estimated Jaccard {n.similarity:.2f})")
            if n.title:
                line.append("  " + n.title, style="italic")
            lines.append(line)
        return lines
    for n in x.neighbours[:neighbours]:
        line = Text(f"      {n.similarity:.3f}  {n.article_id}")
        if n.title:
            line.append("  " + n.title, style="italic")
        lines.append(line)
    if len(x.neighbours) > neighbours:
        lines.append(Text(f"      … and {len(x.neighbours) - neighbours} more in the proposal", style="dim"))
    return lines


#: How a moderator reads the wire's ``decided_by``.
_RULE_WORDS = {"threshold": "above its threshold", "set_vote": "label-set vote", "tail_support": "tail support",
               "new_label_support": "new-label support", "floor": "floor (the article's best label)",
               "label_count": "label count: among the article's best labels, as many as its neighbours carry"}


def _why(x: ProposedLabel, proposed: bool, support: dict[str, int], count_rule: bool = False) -> str:
    """Why a label was proposed or not, from its ``decided_by`` and ``threshold`` (version 3; "" before): "above
    its threshold 0.65", "label-set vote (below its threshold 0.65)", "tail support: 3 close neighbours carry it
    (below its threshold 0.2)", "below its threshold 0.25", "above its threshold 0.65, outside the label-set
    vote's set"; with the label-count rule (``count_rule``) "label count: among the article's best labels, as many as
    its neighbours carry (at or above 0.3)" and "at or above its minimum 0.3, beyond the article's label count".
    ``support``: the scoring's ``tail_support`` and ``new_label_support``."""
    t = x.threshold
    if not proposed:
        if t is None:
            return ""
        if count_rule and x.score >= t:  # the label-count rule stops at the article's label count
            return f"at or above its minimum {t:g}, beyond the article's label count"
        if x.score > t:  # otherwise only the label-set vote takes a label above its threshold out
            return f"above its threshold {t:g}, outside the label-set vote's set"
        return f"below its threshold {t:g}"
    if x.decided_by is None:
        return ""
    words = _RULE_WORDS.get(x.decided_by, x.decided_by.replace("_", " "))
    if support.get(x.decided_by):
        words += f": {support[x.decided_by]} close neighbours carry it"
    if x.decided_by == "threshold":
        return f"{words} {t:g}" if t is not None else words
    if x.decided_by == "label_count":
        return f"{words} (at or above {t:g})" if t is not None else words
    return f"{words} (below its threshold {t:g})" if t is not None and x.score <= t else words


def reason_in_words(x: ProposedLabel, proposed: bool = True, support: dict[str, int] | None = None,
                    count_rule: bool = False) -> str:
    """Why ``x`` is proposed (or not), for people: its ``reason`` (version 7), else, for an older proposal, words made
    from its decision rule and threshold ("" when it carries neither)."""
    return x.reason or _why(x, proposed, support or {}, count_rule)


def _label_line(x: ProposedLabel, gold: set[str] | None, width: int, proposed: bool = True,
                support: dict[str, int] | None = None, count_rule: bool = False) -> Text:
    """``  ✓ label  0.577  retrieval  its score 0.58 is above its threshold 0.50; 3 of the 50 nearest memory
    articles carry it, ...`` (✓ / ✗ against the gold labels when known, • otherwise; then why:
    :func:`reason_in_words`)."""
    mark, style = _MARK[None if gold is None else x.label in gold]
    why = reason_in_words(x, proposed, support, count_rule)
    return Text.assemble(f"  {mark} ", (x.label.ljust(width), f"bold {style}"), f"  {x.score:.3f}  ",
                         (x.source, "dim"), (f"  {why}" if why else "", "dim"))


def thresholds_in_words(p: LabelProposal) -> str | None:
    """The thresholds that decided ``p``, in words: "the threshold 0.25", or with frequency-bucket and per-label
    thresholds "their thresholds (0.65 / 0.6 / 0.25 / 0.35 by label frequency, 13 labels their own)"; None
    without scoring information."""
    sc = p.scoring
    if sc is None:
        return None
    count = sc.options_of("label_count")
    if count is not None:
        return f"the label-count rule's minimum {count['minimum']:g}"
    if not sc.bucket_thresholds and not sc.label_thresholds:
        return f"the threshold {sc.threshold}"
    parts = [" / ".join(f"{t:g}" for t in sc.bucket_thresholds) + " by label frequency"] if sc.bucket_thresholds \
        else [f"{sc.threshold:g}"]
    if sc.label_thresholds:
        parts.append(f"{sc.label_thresholds} labels their own")
    return f"their thresholds ({', '.join(parts)})"


def render_proposal(p: LabelProposal, gold: Sequence[str] | None = None, neighbours: int = 3,
                    candidates: int = 3, header: str | None = None) -> Text:
    """The proposal as lines of text.

    Args:
        p: the proposal; gold: the right labels when known (the demo): each label is marked ✓ or ✗, and the
            gold labels not proposed are listed; neighbours: neighbours shown per label; candidates: labels
            below the threshold shown (0: none); header: the first line (default: the article id, and with
            ``gold`` how many labels are right).
    """
    gold_set = set(gold) if gold is not None else None
    shown_candidates = p.candidates[:candidates]
    width = max((len(x.label) for x in [*p.labels, *shown_candidates]), default=0)
    threshold = thresholds_in_words(p)
    if header is None:
        header = p.article_id
        if gold_set is not None:
            header += f": {labels_right(p, gold_set)}, {len(gold_set)} gold"
        if p.duplicate_of:
            header += f" (near-copy of {p.duplicate_of})"
    lines = [Text(header, style="bold")]
    if not p.labels:
        lines.append(Text(f"  no label above {threshold}" if threshold is not None else
                          "  no label proposed", style="yellow"))
    sc = p.scoring
    support = {r.name: r.options["support"] for r in sc.rules if "support" in r.options} if sc else {}
    for x in p.labels:
        lines += [_label_line(x, gold_set, width, support=support), *_evidence(x, neighbours)]
    if shown_candidates:
        own = any(x.threshold is not None for x in shown_candidates)  # each says its threshold (version 3)
        by_frequency = " (thresholds by the label's frequency in the memory)" if sc and sc.bucket_thresholds else ""
        lines.append(Text(f"  not proposed{by_frequency}:" if own else f"  below {threshold}:"
                          if threshold is not None else "  candidates:", style="dim"))
        count_rule = bool(sc and sc.options_of("label_count") is not None)
        for x in shown_candidates:
            lines += [_label_line(x, gold_set, width, proposed=False, count_rule=count_rule), *_evidence(x, neighbours)]
    if gold_set is not None:
        missed = [lb for lb in gold or () if lb not in {x.label for x in p.labels}]
        if missed:
            lines.append(Text(f"  missed (gold, not proposed): {', '.join(missed)}", style="yellow"))
    return Text("\n").join(lines)


def print_proposal(console: Console, p: LabelProposal, **kwargs) -> None:
    """Print :func:`render_proposal` (``p`` and ``kwargs``) on ``console``: wrapped at its width on a terminal, each
    line whole anywhere else (a file, a pipe, a log collector), so that a label, its rule and each neighbour stay on
    one line there (rich wraps output that is not a terminal at 80 columns)."""
    console.print(render_proposal(p, **kwargs), soft_wrap=not console.is_terminal)


def labels_right(p: LabelProposal, gold: set[str] | list[str]) -> str:
    """How many proposed labels the gold labels confirm, in words: ``2 of 3 proposed labels right``, ``the
    proposed label right`` / ``wrong`` for one, ``no label proposed`` for none (never "0 of 0")."""
    gold = set(gold)
    right, n = sum(1 for x in p.labels if x.label in gold), len(p.labels)
    if n == 0:
        return "no label proposed"
    if n == 1:
        return f"the proposed label {'right' if right else 'wrong'}"
    return f"{right} of {n} proposed labels right"
