"""Speed of the keyword Boolean expression term index (shared/kwe/index.py): one article against N expressions.

Expressions are generated the way analysts write client topics, from the words of sentinews_sl (train split). Each
expression is about 1-3 concepts (60% one, 30% two, 10% three), and lists the spellings of each (at most 8 items,
joined by OR):

* a name (45%): two capitalised words inside a sentence, as a phrase, exact or with the endings cut (``"mark*
  petrović*"``), sometimes the surname's stem alone;
* a content word (55%): the word itself or its stem with ``*`` (cut to 4-8 letters: inflected forms), sometimes
  with other corpus words of the same stem;
* exclusions (on 35% of the expressions, 1-2): a phrase of the concept with a word that precedes it in the corpus
  (the other sense: ``"reki krk*"``), or a random content word;
* ``--cyrillic`` (default 15%) of the expressions are written in Serbian Cyrillic (transliterated letter by letter).

Content words have at least 4 letters and occur in at most ``--max-df`` (default 5%) of the articles (an analyst
does not key a topic on "danes" or "evrov"), drawn weighted towards rarer words; a stem is used only if the words
it covers are as rare.

Timing, on one core (the process is pinned with ``sched_setaffinity`` where available): parse of all expressions,
index build from the parsed expressions, then for every article of the corpus: ``tokenize`` once (reported on its
own) and ``KweIndex.match`` (median, p95, p99, max ms per article, wall clock and the thread's CPU time; the best
of ``--repeat`` passes by median). ``uptime`` load is printed before and after: the machine is shared, so wall
figures are noisy; CPU time is less so, but still suffers from shared caches. After the build the benchmark calls
``gc.freeze()``, as a worker should after building its rule index: without it, a full cyclic-GC pass over the
~10^5 objects of the index lands inside some match call (about 100 ms once every few hundred articles here;
``--no-gc-freeze`` shows it). A sample of articles is checked against the direct matcher
(``KeywordExpression.match`` on every expression), which must give the same result.

Usage (repository root)::

    python benchmarks/kwe_match.py --data ../shared/data/sentinews_sl --n 10000
"""

from __future__ import annotations

import argparse
import bisect
import gc
import os
import random
import statistics
import subprocess
import time
from collections import Counter


from newsmon.shared.data import load_corpus  # noqa: E402
from record import BenchmarkRecord, run_name  # noqa: E402
from newsmon.shared.kwe import KweIndex, parse_kwe  # noqa: E402
from newsmon.shared.text import tokenize  # noqa: E402

_LAT_TO_CYR = {"lj": "љ", "nj": "њ", "dž": "џ", "a": "а", "b": "б", "v": "в", "g": "г", "d": "д", "đ": "ђ",
               "e": "е", "ž": "ж", "z": "з", "i": "и", "j": "ј", "k": "к", "l": "л", "m": "м", "n": "н", "o": "о",
               "p": "п", "r": "р", "s": "с", "t": "т", "ć": "ћ", "u": "у", "f": "ф", "h": "х", "c": "ц", "č": "ч",
               "š": "ш"}


def to_cyrillic(text: str) -> str:
    """Serbian Latin -> Cyrillic, lower case, digraphs first (q, w, x, y and other characters stay)."""
    out, i, text = [], 0, text.lower()
    while i < len(text):
        pair = text[i:i + 2]
        if pair in _LAT_TO_CYR:
            out.append(_LAT_TO_CYR[pair])
            i += 2
        else:
            out.append(_LAT_TO_CYR.get(text[i], text[i]))
            i += 1
    return "".join(out)


class Generator:
    """Draws analyst-like expressions: each is about 1-3 concepts (a name or a rare content word) and lists
    their spellings (exact, stem with ``*``, inflections, phrases), with exclusions for the senses not meant."""

    def __init__(self, texts: list[str], max_df: float, rng: random.Random):
        self.rng = rng
        self.df: Counter[str] = Counter()
        self.left: dict[str, list[str]] = {}
        names: list[tuple[str, str]] = []
        for text in texts:
            tokens = tokenize(text)
            self.df.update(set(tokens.words))
            surface = [text[s:e] for s, e in tokens.spans]
            names.extend(_capitalised_pairs(surface, tokens.words))
            for prev, word in zip(tokens.words, tokens.words[1:]):
                if prev.isalpha() and len(prev) >= 3 and len(self.left.setdefault(word, [])) < 20:
                    self.left[word].append(prev)
        self.limit = max_df * len(texts)
        self.content = [w for w, c in self.df.items() if len(w) >= 4 and w.isalpha() and c <= self.limit]
        self.weights = [1.0 / self.df[w] ** 0.5 for w in self.content]
        self.vocab = sorted(self.df)
        ok = set(self.content)
        self.names = [n for n in names if n[0] in ok or n[1] in ok]

    def with_prefix(self, stem: str) -> list[str]:
        """The corpus words that start with ``stem``."""
        lo = bisect.bisect_left(self.vocab, stem)
        return self.vocab[lo:bisect.bisect_left(self.vocab, stem + "\U0010ffff")]

    def stem(self, word: str) -> str | None:
        """``word`` cut to 4-8 letters, if that prefix is as rare as a content word (else None)."""
        stem = word[:max(4, min(len(word) - 1, self.rng.randint(4, 8)))]
        return stem if sum(self.df[w] for w in self.with_prefix(stem)) <= self.limit else None

    def name_items(self) -> tuple[list[str], list[str]]:
        first, last = self.rng.choice(self.names)
        options = [f'"{first} {last}"', f'"{_cut(first)} {_cut(last)}"', f'"{first} {_cut(last)}"']
        items = self.rng.sample(options, self.rng.randint(1, 2))
        stem = self.stem(last) if self.rng.random() < 0.3 else None
        return items + ([stem + "*"] if stem else []), self._contexts(first)

    def word_items(self) -> tuple[list[str], list[str]]:
        word = self.rng.choices(self.content, self.weights)[0]
        stem = self.stem(word)
        items = [word] if stem is None or self.rng.random() < 0.3 else [stem + "*"]
        if stem is not None and self.rng.random() < 0.4:
            items += [w for w in self.with_prefix(stem) if w != word and w.isalpha()][:2]
        return items, self._contexts(word)

    def _contexts(self, word: str) -> list[str]:
        return [f'"{prev} {word}"' for prev in self.left.get(word, [])]

    def expression(self, cyrillic: float) -> str:
        while True:
            positives: list[str] = []
            contexts: list[str] = []
            for _ in range(self.rng.choices([1, 2, 3], [0.6, 0.3, 0.1])[0]):
                items, ctx = self.name_items() if self.names and self.rng.random() < 0.45 else self.word_items()
                positives += items
                contexts += ctx
            text = " OR ".join(dict.fromkeys(positives[:8]))
            if self.rng.random() < 0.35:
                excluded = [self.rng.choice(contexts) if contexts and self.rng.random() < 0.7
                            else self.rng.choice(self.content) for _ in range(self.rng.randint(1, 2))]
                text += " " + " ".join("-" + x for x in dict.fromkeys(excluded))
            if self.rng.random() < cyrillic:
                text = to_cyrillic(text).replace(" ор ", " OR ")
            try:
                parse_kwe(text)
            except ValueError:  # a word drawn both wanted and excluded: draw again
                continue
            return text


def _cut(word: str) -> str:
    """A name's ending replaced by ``*`` (``petrović`` -> ``petrovi*``), short names kept whole."""
    return word[:-1] + "*" if len(word) >= 5 else word


def _capitalised_pairs(surface: list[str], words: tuple[str, ...]) -> list[tuple[str, str]]:
    """Two capitalised words inside a sentence (names of people, firms, places), as normalised words."""
    out = []
    for i in range(1, len(surface) - 1):
        if surface[i][:1].isupper() and surface[i + 1][:1].isupper() and surface[i - 1][-1:].isalpha() \
                and words[i].isalpha() and words[i + 1].isalpha() and min(len(words[i]), len(words[i + 1])) > 2:
            out.append((words[i], words[i + 1]))
    return out


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def quantiles(values: list[float]) -> list[float]:
    """Median, p95, p99 and max of ``values``, rounded to 3 decimals."""
    ordered = sorted(values)
    at = [statistics.median(ordered)] + [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.95, 0.99)]
    return [round(v, 3) for v in (*at, ordered[-1])]


def percentiles(values: list[float]) -> str:
    median, p95, p99, top = quantiles(values)
    return f"median {median:.3f}  p95 {p95:.3f}  p99 {p99:.3f}  max {top:.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/sentinews_sl")
    ap.add_argument("--n", type=int, default=10_000, help="expressions")
    ap.add_argument("--cyrillic", type=float, default=0.15, help="share of expressions written in Cyrillic")
    ap.add_argument("--max-df", type=float, default=0.05, help="content words: at most this share of articles")
    ap.add_argument("--repeat", type=int, default=2, help="match passes over the corpus (the best is kept)")
    ap.add_argument("--check", type=int, default=20, help="articles checked against the direct matcher")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-gc-freeze", action="store_true", help="leave the built index to the cyclic GC")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with BenchmarkRecord(run_name("kwe_match", args.data)) as rec:
        measure(args, rec)


def measure(args: argparse.Namespace, rec: BenchmarkRecord) -> None:
    """Generate, parse and index the expressions, time the matching and check it; figures into ``rec``."""
    print("before:", uptime())
    corpus = load_corpus(args.data)
    rng = random.Random(args.seed)
    gen = Generator([a.text for a in corpus.split("train")], args.max_df, rng)
    sources = [gen.expression(args.cyrillic) for _ in range(args.n)]
    print(f"{len(sources)} expressions from {len(gen.content)} content words, {len(gen.names)} name pairs; e.g.")
    for s in sources[:6]:
        print("   ", s)
    t0 = time.perf_counter()
    parsed = [parse_kwe(s) for s in sources]
    t1 = time.perf_counter()
    index = KweIndex((i, e) for i, e in enumerate(parsed))
    t2 = time.perf_counter()
    terms = sum(len(e.terms) for e in parsed)
    print(f"parse {1000 * (t1 - t0):.0f} ms ({1e6 * (t1 - t0) / len(parsed):.0f} us/expression); index build "
          f"{1000 * (t2 - t1):.0f} ms ({terms} terms, {len(index._pattern_id)} distinct patterns)")
    texts = [a.text for a in corpus.articles]
    if not args.no_gc_freeze:
        gc.collect()
        gc.freeze()  # what a worker does after building its rules: full collections skip the index
    print(f"gc.freeze() after the build: {not args.no_gc_freeze}")
    rec.data.update(expressions=len(sources), examples=sources[:6], parse_s=round(t1 - t0, 3),
                    index_build_s=round(t2 - t1, 3), terms=terms, patterns=len(index._pattern_id),
                    gc_freeze=not args.no_gc_freeze)
    run_passes(index, texts, args.repeat, rec)
    check(index, texts, args.check, rng)
    print("after:", uptime())


def run_passes(index: KweIndex, texts: list[str], repeat: int, rec: BenchmarkRecord) -> None:
    """Time tokenize and match per article (wall clock and this thread's CPU time); print the best pass and add
    it to ``rec``."""
    best = None
    for _ in range(repeat):
        tok_ms, match_ms, cpu_ms, counts = [], [], [], []
        for text in texts:
            t0 = time.perf_counter()
            tokens = tokenize(text)
            t1, c1 = time.perf_counter(), time.thread_time()
            found = index.match(tokens)
            t2, c2 = time.perf_counter(), time.thread_time()
            tok_ms.append(1000 * (t1 - t0))
            match_ms.append(1000 * (t2 - t1))
            cpu_ms.append(1000 * (c2 - c1))
            counts.append(len(found))
        if best is None or statistics.median(match_ms) < statistics.median(best[1]):
            best = (tok_ms, match_ms, cpu_ms, counts)
    tok_ms, match_ms, cpu_ms, counts = best
    words = statistics.mean(len(tokenize(t)) for t in texts)
    print(f"{len(texts)} articles, {words:.0f} words on average, {len(index)} expressions, one core:")
    print(f"  match    per article, wall: {percentiles(match_ms)}")
    print(f"  match    per article, CPU:  {percentiles(cpu_ms)}")
    print(f"  tokenize per article, wall: {percentiles(tok_ms)}")
    print(f"  matching expressions per article: mean {statistics.mean(counts):.1f}, median "
          f"{statistics.median(counts):.0f}, max {max(counts)}; articles with none: {counts.count(0)}")
    rows = [[name, *quantiles(values)] for name, values in (
        ("match, CPU time", cpu_ms), ("match, wall clock", match_ms),
        ("tokenize (once per article), wall clock", tok_ms))]
    rec.table(f"One article against {len(index):,} expressions (ms per article, one core)",
              ["measure", "median", "p95", "p99", "max"], rows,
              note=f"{len(texts):,} articles, {words:.0f} words on average; the best of {repeat} passes by median. "
                   "On a shared machine the wall figures are noisy; CPU time is the better measure.")
    rec.data.update(articles=len(texts), mean_words=round(words, 1), mean_matches=round(statistics.mean(counts), 1),
                    articles_without_match=counts.count(0))


def check(index: KweIndex, texts: list[str], n: int, rng: random.Random) -> None:
    """The index must return what the direct matcher returns on every expression."""
    sample = rng.sample(texts, min(n, len(texts)))
    for text in sample:
        tokens = tokenize(text)
        want = [m for key, e in index if (m := e.match(tokens, key)) is not None]
        if index.match(tokens) != want:
            raise SystemExit(f"MISMATCH between the index and the direct matcher on: {text[:200]!r}")
    print(f"check: the index equals the direct matcher on {len(sample)} articles")


if __name__ == "__main__":
    main()
