"""Language identification of articles that arrive without a language (:mod:`newsmon.shared.languages`, py3langid):
accuracy on the shared corpora's articles against their ``lang``, on the whole text and on the headline alone,
choosing among the six languages of the monitoring company's memories (sl, hr, sr, sq, mk, en) and among every
language the identifier knows, with the time per article.

Usage (repository root)::

    python benchmarks/languages.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from record import BenchmarkRecord

from newsmon.shared.data import load_corpus
from newsmon.shared.languages import _model, detect

PRODUCTION = ("sl", "hr", "sr", "sq", "mk", "en")


def measure(texts: list[str], truth: list[str], candidates: tuple[str, ...]) -> tuple[float, float]:
    """(accuracy, milliseconds per article) of :func:`detect` over ``candidates``."""
    t0 = time.perf_counter()
    got = [detect(t, candidates) for t in texts]
    ms = 1000 * (time.perf_counter() - t0) / max(1, len(texts))
    return sum(g == t for g, t in zip(got, truth)) / max(1, len(texts)), ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    args = ap.parse_args()
    everything = tuple(sorted(set(_model().nb_classes)))
    with BenchmarkRecord("languages") as rec:
        rows = []
        for folder in sorted(p for p in Path(args.data).iterdir() if (p / "articles.jsonl").exists()):
            arts = load_corpus(folder).articles
            truth = [a.lang for a in arts]
            for part, texts in (("text", [a.text for a in arts]),
                                ("headline", [a.title or a.text[:80] for a in arts])):
                for name, cands in (("the 6 production languages", PRODUCTION), ("all 97", everything)):
                    acc, ms = measure(texts, truth, cands)
                    rows.append([folder.name, len(arts), part, name, round(100 * acc, 2), round(ms, 3)])
        rec.table("Language identification (py3langid) of the corpora's articles",
                  ["corpus", "articles", "input", "candidates", "accuracy %", "ms per article"], rows,
                  note="newsmon chooses among the languages that have a knowledge memory (the first rows).")
        rec.data["rows"] = rows


if __name__ == "__main__":
    main()
