"""Cold start of client topics defined by keyword Boolean expressions, on sentinews_sl (issue 11, item 5).

The rules: ``tests/data/kwe_sentinews_rules.jsonl``, KwEs for 20 labels of sentinews_sl (3 persons, 6
organisations, 5 places, 6 general concepts; 5-34 train articles each), written as an analyst would, from the
label's meaning and the train split only (variants and inflections: ``pahor*``, ``telekom OR telekoma OR ...``;
the other senses excluded: the river Mura, ``-"rek* mur*"``); the test and validation articles were not read.

Part 1: rule-only proposals on each split. Every article of a split is matched against all 20 rules
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

Part 2: the cold start, through the classifier's own stages. The knowledge memory holds the train split with the
20 labels removed from every article (hidden: the memory has no example of them); the label registry holds the 20
definitions (as ``LabelEvent``s with action ``defined`` would leave it). The test split is replayed in corpus
order, one article at a time, through ``ArticlePipeline`` (validate, near-duplicates, embed, retrieve and score,
match the label rules, store the pending point, emit), and each proposal is answered at once with the article's
gold labels as a moderator decision (``DecisionService.apply_decision``, as the memory updater does), so confirmed
examples of the 20 labels enter the memory as they arrive. Two phases of a label (its state before the article):

* **rule-only**: fewer than 3 confirmed examples (``labels.min_examples``), so the label is proposed from its KwE
  alone (``source: rule``). Measured by the replay above, over the test articles met before a label's 3rd
  confirmation (nearly all of them: the 20 labels have 0-5 test articles each).
* **rule + retrieval**: 3 confirmations have arrived: RAE-XMC proposes the label from the memory, the KwE is its
  evidence. The test split holds too few articles of each label for this phase to show after 3 confirmations
  *within* it, so it is measured by a second replay that starts with 3 confirmed examples per label in the memory
  (the first 3 train articles carrying it keep the label; the other train articles still have it hidden), over
  the whole test split. Run once per ``--top-k``: the default k = 50, and a small k (5), at which 3 confirmed
  neighbours can carry a label past the threshold (see docs/explanation/method.md, "Decide"). A KwE match
  of such a label that retrieval did not propose is listed among the proposal's candidates (counted apart), and
  one more replay (k = 5) keeps proposing every KwE match (``labels.min_examples`` above any count): rule and
  retrieval together.

Usage (repository root)::

    python benchmarks/kwe_cold_start.py --data ../shared/data/sentinews_sl             # both parts
    python benchmarks/kwe_cold_start.py --part 2 --top-k 50 5   # part 2 only
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Message

from newsmon.demo import article_event, decision_for
from newsmon.schemas import LabelDefinition, LabelFilters
from newsmon.shared.classifier import Classifier
from newsmon.shared.config import Settings
from newsmon.shared.data import Article, load_corpus
from newsmon.shared.dedup import NearDuplicateIndex
from newsmon.shared.encoder import Encoder
from newsmon.shared.kwe import ArticleMeta, LabelRule, LabelRuleIndex, load_rules
from newsmon.shared.memory import MemoryRouter
from newsmon.workers.decisions import DecisionService
from newsmon.workers.labels import LabelRegistry
from newsmon.workers.pipeline import ArticlePipeline
from record import BenchmarkRecord

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


def table(split: str, counts: dict[str, Counter], rec: BenchmarkRecord) -> None:
    """One split's per-label table with micro totals and macro averages, printed and added to ``rec``."""
    rows = [[label, KIND.get(label, "concept"), c["support"], c["tp"], c["fp"], c["fn"],
             cell(c["tp"], c["tp"] + c["fp"]), cell(c["tp"], c["support"])] for label, c in counts.items()]
    total = sum(counts.values(), Counter())
    p, r = ratio(total["tp"], total["tp"] + total["fp"]), ratio(total["tp"], total["support"])
    rows.append(["**micro**", "", total["support"], total["tp"], total["fp"], total["fn"], f"{p:.2f}", f"{r:.2f}"])
    with_support = [c for c in counts.values() if c["support"]]
    macro_p = sum(ratio(c["tp"], c["tp"] + c["fp"]) for c in with_support) / max(1, len(with_support))
    macro_r = sum(ratio(c["tp"], c["support"]) for c in with_support) / max(1, len(with_support))
    rows.append([f"macro over the {len(with_support)} labels with support", "", "", "", "", "", f"{macro_p:.2f}",
                 f"{macro_r:.2f}"])
    rec.table(f"{split}: rule-only proposals, {len(counts)} labels",
              ["label", "kind", "support", "TP", "FP", "FN", "precision", "recall"], rows,
              note=f"micro-F1 {ratio(2 * p * r, p + r):.3f}")


def definition_of(rule: LabelRule) -> LabelDefinition:
    """The wire definition of a rule-file line (what a ``defined`` LabelEvent carries)."""
    f = rule.filters
    return LabelDefinition(kwes=list(rule.kwes), require_rule_match=rule.require_rule_match,
                           filters=LabelFilters(languages=list(f.languages), countries=list(f.countries),
                                                sources=list(f.sources), sections=list(f.sections)))


PHASES = ("rule-only", "rule + retrieval")


CONFIRMATIONS = 3  # the phase boundary measured (the default labels.min_examples)


def replay(corpus, rules: list[LabelRule], encoder: Encoder, top_k: int, workdir: Path, seeded: int = 0,
           min_examples: int = CONFIRMATIONS) -> dict[str, dict]:
    """One replay of the test split (see the module docstring): per label, per phase (before / from its 3rd
    confirmation), a Counter of ``support``, ``tp``, ``fp``, ``fn`` and ``rule`` (true positives proposed from the
    KwE alone). ``seeded``: how many train articles per label keep it in the memory (confirmed examples before
    the replay); ``min_examples``: the setting ``labels.min_examples`` of the run."""
    hidden = {r.label for r in rules}
    s = Settings(home=workdir / "home")
    s.memory.path, s.scoring.top_k = workdir / f"memory-k{top_k}-s{seeded}-m{min_examples}", top_k
    s.labels.min_examples = min_examples
    clf = Classifier(s, encoder=encoder, router=MemoryRouter(s, encoder.model_id, encoder.dim))
    confirmed: Counter = Counter()
    train = []
    for a in corpus.split("train"):
        keep = [lb for lb in a.labels if lb not in hidden or confirmed[lb] < seeded]
        confirmed.update(lb for lb in keep if lb in hidden)
        train.append(a.model_copy(update={"labels": tuple(keep)}))
    clf.add_articles(train)
    registry = LabelRegistry()
    for rule in rules:
        registry.define(rule.label, definition_of(rule))
    pipeline = ArticlePipeline(s, clf, NearDuplicateIndex(threshold=s.worker.dedup_threshold), registry)
    moderator = DecisionService(s, clf.router, registry)
    counts = {r.label: {ph: Counter() for ph in PHASES} for r in rules}
    for n, a in enumerate(corpus.split("test")):
        ev = article_event(a)
        batch, rejected = pipeline.validate([Message(topic="articles", partition=0, offset=n, value=ev.to_bytes(),
                                                     timestamp=(1, int(time.time() * 1000)))])
        assert not rejected, rejected
        pipeline.propose(batch)
        (_, proposal), = pipeline.emit(batch)
        proposed = {x.label: x for x in proposal.labels}
        for label, phases in counts.items():
            c = phases[PHASES[confirmed[label] >= CONFIRMATIONS]]
            gold, got = label in a.labels, label in proposed
            c["support"] += gold
            c["tp"] += gold and got
            c["fp"] += got and not gold
            c["fn"] += gold and not got
            c["rule"] += gold and got and proposed[label].source == "rule"
            c["candidate"] += gold and label in {x.label for x in proposal.candidates}
        moderator.apply_decision(decision_for(a.id, list(proposed), list(a.labels)))
        confirmed.update(lb for lb in a.labels if lb in hidden)
    clf.router.close()
    return counts


def _cells(c: Counter, support: bool = False) -> list[str]:
    out = [str(c["support"])] if support else []
    return out + [str(c["tp"]), str(c["fp"]), cell(c["tp"], c["tp"] + c["fp"]), cell(c["tp"], c["support"])]


def replay_table(columns: list[tuple[str, dict[str, dict], str]], rec: BenchmarkRecord) -> None:
    """Part 2's table: per label, one block per ``(title, counts, phase)`` column, with micro totals; printed and
    added to ``rec``."""
    head = ["label", "kind"] + [f"{title}: {x}" for title, _c, _p in columns for x in ("support", "TP", "FP", "P",
                                                                                       "R")]
    totals = [Counter() for _ in columns]
    rows = []
    for label in columns[0][1]:
        row = [label, KIND.get(label, "concept")]
        for total, (_title, counts, phase) in zip(totals, columns):
            total.update(counts[label][phase])
            row += _cells(counts[label][phase], support=True)
        rows.append(row)
    row = ["**micro**", ""]
    for total in totals:
        row += _cells(total, support=True)
    rows.append(row)
    note = ("True positives proposed from the KwE alone: " + ", ".join(
        f"{title}: {t['rule']} of {t['tp']}" for (title, _c, _p), t in zip(columns, totals))
        + ". Gold labels among the candidates instead (a KwE match of a label with 3 examples that retrieval did "
          "not propose): " + ", ".join(f"{title}: {t['candidate']} of {t['support']}"
                                       for (title, _c, _p), t in zip(columns, totals)) + ".")
    rec.table("Cold start on the test split: rule-only, then rule + retrieval once 3 confirmations arrived", head,
              rows, note=note)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--rules", default=str(RULES))
    ap.add_argument("--splits", nargs="+", default=["test", "validation", "train"],
                    choices=["train", "validation", "test"])
    ap.add_argument("--part", choices=["1", "2", "both"], default="both")
    ap.add_argument("--top-k", nargs="+", type=int, default=[50, 5],
                    help="part 2: k of the replays (the rule-only replay uses the first)")
    args = ap.parse_args()
    with BenchmarkRecord("kwe_cold_start") as rec:
        measure(args, rec)


def measure(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """Part 1 and / or part 2 (``--part``), into ``rec``."""
    corpus = load_corpus(args.data)
    rules = load_rules(args.rules)
    print(f"{len(rules)} label rules from {args.rules}; corpus {corpus.summary()}")
    if args.part in ("1", "both"):
        for split in args.splits:
            table(split, evaluate(rules, corpus.split(split)), rec)
    if args.part in ("2", "both"):
        settings = Settings()
        encoder = Encoder(settings.encoder, settings.home)
        with tempfile.TemporaryDirectory(prefix="kwe-cold-start-") as tmp:
            started = time.perf_counter()
            cold = replay(corpus, rules, encoder, args.top_k[0], Path(tmp))
            columns = [("rule-only (0 examples)", cold, PHASES[0])]
            for k in args.top_k:
                warm = replay(corpus, rules, encoder, k, Path(tmp), seeded=CONFIRMATIONS)
                columns.append((f"rule + retrieval, k={k}", warm, PHASES[1]))
            union = replay(corpus, rules, encoder, args.top_k[-1], Path(tmp), seeded=CONFIRMATIONS,
                           min_examples=10**9)
            columns.append((f"rule ∪ retrieval, k={args.top_k[-1]}, rules never stop", union, PHASES[1]))
            replay_table(columns, rec)
            print(f"({len(columns)} replays in {time.perf_counter() - started:.0f} s)")
        encoder.close()


if __name__ == "__main__":
    main()
