"""Linear time of every function that reads untrusted text (issue 27): seconds on 200,000 characters of the worst
inputs, and how the time grows from 100,000 to 200,000 characters.

An article's body is the producer's: whatever it holds, no stage may take time that grows faster than its length
(a word pattern that was quadratic on zero-width spaces held a partition for 466 s on one article of 600,000 of
them). The functions (:data:`FUNCTIONS`) are every one that reads an article's or a label's text: cleaning
(``clean_text``, ``strip_html``), tokenising (``tokenize``), keyword-rule matching (``KweIndex.match`` with
phrases and prefixes, and the direct matcher), the near-duplicate check (``strip_boilerplate``, the recurring-line
split, ``shingle_form``, the MinHash signature via ``NearDuplicateIndex.find``), the lexical vectors
(``term_rows``, ``sparse_terms``, the fusion's ``TermVectors`` and local TF-IDF cosine), the abstention's word
count, the label policy (``check_label`` on a long label, refused), the long-article windows
(``long_text.windows`` over one token id per character) and, when the model is in ``$NEWSMON_HOME``, the encoder's
tokenizer (what ``Encoder.encode`` runs on the whole text before cutting it into windows). The inputs (:data:`INPUTS`)
are the worst found: runs of one format character (U+200B, U+FEFF, U+2060) or of mixed ones, combining marks in an
order NFC has to sort, U+FF9E half-width sound marks between them (NFKC makes those combining marks), one repeated
letter (as one word, and as 100,000 one-letter words: every phrase position and shingle alike), one repeated word
without spaces, markup (entities, tags, unclosed comments and ``<script``), and a mix of all.

Each cell is the CPU time of this thread (the machine is shared: a wall clock counts the other processes' turns),
the best of ``--repeat`` runs at ``--chars`` characters; "growth" is the largest ratio, over the
inputs, of the time at ``--chars`` to the time at half of it (2 for linear, 4 for quadratic; noisy below a few
milliseconds). ``clean_text`` forgets the texts it cleaned before each call (it remembers its latest outputs,
so that the stages after the first clean them at the cost of a lookup): each figure includes the cleaning. The
issue's own example (an article of 600,000 zero-width spaces) is timed through
``clean_text`` and ``tokenize`` at its full length. ``tests/test_text_linearity.py`` checks the growth of the
same functions on the same inputs.

Usage (repository root)::

    python benchmarks/text_linearity.py            # 200,000 characters, best of 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from newsmon.schemas.base import check_label  # noqa: E402
from newsmon.shared.dedup import NearDuplicateIndex, RecurringLines, shingle_form, strip_boilerplate  # noqa: E402
from newsmon.shared.kwe import KweIndex, parse_kwe  # noqa: E402
from newsmon.shared.long_text import windows  # noqa: E402
from newsmon.shared.scoring.lexical import TermVectors, local_tfidf_cosine  # noqa: E402
from newsmon.shared.scoring.rules.abstain import real_words  # noqa: E402
from newsmon.shared.terms import sparse_terms, term_rows  # noqa: E402
from newsmon.shared.text import clean_text, forget_cleaned, strip_html, tokenize  # noqa: E402

ARTICLE = ("Krka je objavila polletne rezultate. Delnice Krke so zrasle za tri odstotke, "
           "poroča Delo. Sprejmi vse piškotke za nadaljevanje branja.\n")


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


#: Worst inputs: name -> a function of the length in characters.
INPUTS: dict[str, Callable[[int], str]] = {
    "U+200B run": _repeat("\u200b"),
    "U+FEFF run": _repeat("\ufeff"),
    "U+2060 run": _repeat("\u2060"),
    "format mix": _repeat("\u200b\ufeff\u2060\u00ad\u200e"),
    "marks to sort": lambda n: "a" + _repeat("\u0301\u0316")(n - 1),
    "marks + U+FF9E": lambda n: "a" + _repeat("\u0301\uff9e")(n - 1),
    "one letter": _repeat("a"),
    "one-letter words": _repeat("a "),
    "one word, no spaces": _repeat("soglaš"),
    "markup": _repeat("&amp;<b><!--&#269;<script"),
    "mixed": _repeat("k\u200b\u0301r\ufeff&#269;<p>a\u2060 \u0316.\n"),
    "news text": _repeat(ARTICLE),
}

_KWES = ['krka OR krk* OR "delnice krke" -"reka krk*"', '"a a a" OR aa*', 'soglaš* OR "k r a"', "ka OR ša*"]
_INDEX = KweIndex((i, k) for i, k in enumerate(_KWES))
_EXPRESSION = parse_kwe(_KWES[0])
_DEDUP = NearDuplicateIndex()
_DEDUP.add("original", ARTICLE * 4)
_LINES = RecurringLines(min_docs=2, width=1 << 12)
_QUERY = term_rows([ARTICLE])


def _label(text: str) -> None:
    try:
        check_label(text)
    except ValueError:
        pass  # too long, or a control character: refused, which is what is timed


#: The functions that read untrusted text: name -> a call on one text.
FUNCTIONS: dict[str, Callable[[str], object]] = {
    "clean_text": clean_text,
    "strip_html": strip_html,
    "tokenize": tokenize,
    "KweIndex.match": _INDEX.match,
    "KeywordExpression.match": _EXPRESSION.match,
    "strip_boilerplate": strip_boilerplate,
    "RecurringLines.split": lambda t: _LINES.split(clean_text(t)),
    "dedup shingle_form": shingle_form,
    "NearDuplicateIndex.find": _DEDUP.find,
    "term_rows": lambda t: term_rows([t]),
    "sparse_terms": lambda t: sparse_terms([t]),
    "lexical TermVectors + cosine": lambda t: local_tfidf_cosine(_QUERY, TermVectors().rows([t, ARTICLE])),
    "real_words (abstain)": real_words,
    "check_label": _label,
    "long_text.windows": lambda t: windows(list(map(ord, t)), [0, 1], 512, 4),
}


def _encoder_tokenizer() -> Callable[[str], object] | None:
    """The bundled encoder's tokenizer (what ``Encoder.encode`` runs on a long text before cutting it into
    windows), when the model was imported into ``$NEWSMON_HOME`` (``newsmon setup``); else None."""
    import os

    from tokenizers import Tokenizer

    home = Path(os.environ.get("NEWSMON_HOME", Path.home() / ".cache" / "newsmon"))
    path = home / "models" / "multilingual-e5-small" / "tokenizer.json"
    return Tokenizer.from_file(str(path)).encode if path.is_file() else None


if (_tokenizer := _encoder_tokenizer()) is not None:
    FUNCTIONS["encoder tokenizer (e5-small)"] = _tokenizer


def best_seconds(fn: Callable[[str], object], text: str, repeat: int) -> float:
    """The fewest CPU seconds (this thread's) of ``repeat`` calls of ``fn(text)``, each on a text ``clean_text``
    has not seen. CPU time, not wall clock: the machine is shared, and a wall clock would count the other
    processes' turns."""
    best = float("inf")
    for _ in range(repeat):
        forget_cleaned()
        t0 = time.thread_time()
        fn(text)
        best = min(best, time.thread_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chars", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from record import BenchmarkRecord

    with BenchmarkRecord("text_linearity") as rec:
        texts = {name: make(args.chars) for name, make in INPUTS.items()}
        halves = {name: make(args.chars // 2) for name, make in INPUTS.items()}
        rows, worst = [], 0.0
        for fname, fn in FUNCTIONS.items():
            cells, growth = [], 0.0
            for iname in INPUTS:
                full = best_seconds(fn, texts[iname], args.repeat)
                half = best_seconds(fn, halves[iname], args.repeat)
                cells.append(round(full, 4))
                if full >= 0.005:  # below a few ms the ratio is noise
                    growth = max(growth, full / max(half, 1e-9))
            worst = max(worst, *cells)
            rows.append([fname, *cells, round(growth, 2) if growth else "-"])
        rec.table(f"CPU seconds on {args.chars:,} characters of each input (best of {args.repeat})",
                  ["function", *INPUTS, "growth x2"], rows,
                  note="growth x2: the largest ratio of the time at the full length to the time at half of it "
                       "(2 linear, 4 quadratic), over the inputs taking >= 5 ms; '-' none did.")
        zwsp = "\u200b" * 600_000
        issue = [[name, round(best_seconds(fn, zwsp, 1), 3)] for name, fn in
                 (("clean_text", clean_text), ("tokenize", tokenize), ("KweIndex.match", _INDEX.match))]
        rec.table("The issue's article: 600,000 zero-width spaces (1.8 MB)", ["function", "CPU seconds"], issue)
        rec.data.update(chars=args.chars, max_seconds=worst, within_one_second=worst <= 1.0)
        print(f"\nslowest cell: {worst:.3f} s ({'<=' if worst <= 1.0 else '>'} 1 s)")


if __name__ == "__main__":
    main()
