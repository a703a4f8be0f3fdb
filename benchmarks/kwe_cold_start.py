"""Cold start of client topics defined by keyword Boolean expressions, on sentinews_sl (issue 11, item 5).

The rules: ``tests/data/kwe_sentinews_rules.jsonl``, KwEs for 20 labels of sentinews_sl (3 persons, 6
organisations, 5 places, 6 general concepts; 5-34 train articles each), written as an analyst would, from the
label's meaning and the train split only (variants and inflections: ``pahor*``, ``telekom OR telekoma OR ...``;
the other senses excluded: the river Mura, ``-"rek* mur*"``); the test and validation articles were not read.

Part 1 (this script): rule-only proposals. Every article of a split is matched against all 20 rules
(:class:`shared.kwe.LabelRuleIndex`, with the article's language and source as metadata); a label is proposed when
its rule matches. Per label and split: support (articles carrying the label), TP, FP, FN, precision, recall;
micro totals (sums over the 20 labels) and macro averages. The train split is printed too: it is the split the
rules were written on, so its figures are optimistic.

How to read the figures: sentinews_sl labels are editors' keywords, given to the few articles *about* a subject,
not to every article that names it (``pahor`` is on 7 train articles, the name is in 41). A rule matches every
mention, so many "false positives" are articles that do speak of the label's subject (the company Mura in a list
of insolvent firms, Luka Koper's share price in a market report); precision against these labels understates what
a moderator would accept, while recall is the meaningful figure for "a new client topic works from its first
article".

TODO part 2 (rule + retrieval after 3 confirmations): replay the test split in time order through the classifier
with the 20 labels hidden from the knowledge memory (train articles indexed without them); each label is proposed
from its rule alone (``source: rule``) until 3 of its articles have been confirmed (the moderator's decision
replayed from the gold labels), then from its rule and from RAE-XMC retrieval over the memory that now holds the
confirmed examples; report per-label precision/recall of both phases. Missing for that: the label registry holding
``LabelRule`` definitions (a ``LabelEvent`` with the ``defined`` / ``updated`` actions and its schema version), the
classifier merging rule matches into its proposals with ``source: rule`` and the matched KwE as evidence, the
"fewer than N confirmed examples" setting (default 3) and the per-label ``require_rule_match`` filter, and a replay
harness that feeds confirmations back into the memory as the stream does.

Usage (repository root)::

    python benchmarks/kwe_cold_start.py --data ../shared/data/sentinews_sl
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path


from newsmon.shared.data import Article, load_corpus  # noqa: E402
from newsmon.shared.kwe import ArticleMeta, LabelRule, LabelRuleIndex, load_rules  # noqa: E402

RULES = Path(__file__).resolve().parents[1] / "tests" / "data" / "kwe_sentinews_rules.jsonl"
KIND = {
    "pahor": "person", "križanič": "person", "alenka bratušek": "person",
    "nlb": "organisation", "telekom": "organisation", "vegrad": "organisation", "mercator": "organisation",
    "istrabenz": "organisation", "mura": "organisation",
    "ljubljana": "place", "maribor": "place", "koper": "place", "hrvaška": "place", "zda": "place",
}


def evaluate(rules: list[LabelRule], articles: list[Article]) -> dict[str, Counter]:
    """Per label: Counter with ``tp``, ``fp``, ``fn``, ``support`` of rule-only proposals over ``articles``."""
    index = LabelRuleIndex(rules)
    counts = {rule.label: Counter() for rule in rules}
    for article in articles:
        meta = ArticleMeta(lang=article.lang, source=article.source)
        proposed = {m.label for m in index.match(article.text, meta)}
        for label, c in counts.items():
            gold = label in article.labels
            c["support"] += gold
            c["tp"] += gold and label in proposed
            c["fp"] += (not gold) and label in proposed
            c["fn"] += gold and label not in proposed
    return counts


def ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def cell(num: int, den: int) -> str:
    """``num/den`` with 2 decimals, or an en dash when undefined (no proposal / no support)."""
    return f"{num / den:.2f}" if den else "–"


def table(split: str, counts: dict[str, Counter]) -> None:
    """Print one split's per-label table with micro totals and macro averages."""
    print(f"\n### {split}: rule-only proposals, {len(counts)} labels\n")
    print("| label | kind | support | TP | FP | FN | precision | recall |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, c in counts.items():
        print(f"| {label} | {KIND.get(label, 'concept')} | {c['support']} | {c['tp']} | {c['fp']} | {c['fn']} | "
              f"{cell(c['tp'], c['tp'] + c['fp'])} | {cell(c['tp'], c['support'])} |")
    total = sum(counts.values(), Counter())
    p, r = ratio(total["tp"], total["tp"] + total["fp"]), ratio(total["tp"], total["support"])
    print(f"| **micro** | | {total['support']} | {total['tp']} | {total['fp']} | {total['fn']} | {p:.2f} | {r:.2f} |")
    with_support = [c for c in counts.values() if c["support"]]
    macro_p = sum(ratio(c["tp"], c["tp"] + c["fp"]) for c in with_support) / max(1, len(with_support))
    macro_r = sum(ratio(c["tp"], c["support"]) for c in with_support) / max(1, len(with_support))
    print(f"| macro over the {len(with_support)} labels with support | | | | | | {macro_p:.2f} | {macro_r:.2f} |")
    print(f"\nmicro-F1 {ratio(2 * p * r, p + r):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--rules", default=str(RULES))
    ap.add_argument("--splits", nargs="+", default=["test", "validation", "train"],
                    choices=["train", "validation", "test"])
    args = ap.parse_args()
    corpus = load_corpus(args.data)
    rules = load_rules(args.rules)
    print(f"{len(rules)} label rules from {args.rules}; corpus {corpus.summary()}")
    for split in args.splits:
        table(split, evaluate(rules, corpus.split(split)))


if __name__ == "__main__":
    main()
