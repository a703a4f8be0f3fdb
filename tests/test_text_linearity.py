"""Every function that reads untrusted text runs in linear time (issue 27): the time of each function of
``benchmarks/text_linearity.py`` on each of its worst inputs grows like the input, not like its square.

No absolute time is asserted (the machine is shared; times are the thread's CPU time): for each function and input,
the length is doubled from 2,000 characters until one call takes at least ``MIN_SECONDS``; the time at twice that
length must then be less than
``MAX_GROWTH`` times it (2 for linear, 4 for quadratic). The quadratic word pattern of issue 27 (``tokenize`` on
zero-width spaces: 0.08 s at 2,000, 1.06 s at 8,000) and NFC on 40,000 combining marks in an order NFC has to
sort (10 s) fail this at once. Plus the issue's example: an article of 600,000 zero-width spaces is cleaned to
nothing and tokenised to no word.
"""

from __future__ import annotations

import importlib.util
import time
import unicodedata
from datetime import UTC
from pathlib import Path

import pytest

from newsmon.shared.text import MAX_COMBINING_RUN, cap_combining, clean_text, tokenize

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "text_linearity.py"
_spec = importlib.util.spec_from_file_location("text_linearity", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

MIN_SECONDS = 0.005
MAX_GROWTH = 3.0
MAX_CHARS = 1 << 19


def _best(fn, text: str, repeat: int = 2) -> float:
    return bench.best_seconds(fn, text, repeat)


def growth(fn, make) -> tuple[int, float]:
    """``(n, t(2n) / t(n))`` at the first doubling length ``n`` where one call takes ``MIN_SECONDS`` (ratio 0 when
    none up to ``MAX_CHARS`` does: then the function is fast enough that growth cannot be told from noise)."""
    n = 2000
    while n <= MAX_CHARS:
        t = _best(fn, make(n))
        if t >= MIN_SECONDS:
            return n, _best(fn, make(2 * n)) / t
        n *= 2
    return n, 0.0


# ours: the encoder's tokenizer (the tokenizers library, in the benchmark when the model is at hand) is not checked here
OURS = [name for name in bench.FUNCTIONS if not name.startswith("encoder tokenizer")]


@pytest.mark.parametrize("function", OURS)
def test_time_grows_linearly_on_every_worst_input(function):
    fn = bench.FUNCTIONS[function]
    slow = {}
    for name, make in bench.INPUTS.items():
        n, ratio = growth(fn, make)
        if ratio >= MAX_GROWTH:  # once more, to tell a quadratic function from a busy machine
            n, ratio = growth(fn, make)
        if ratio >= MAX_GROWTH:
            slow[name] = (n, round(ratio, 2))
    assert not slow, f"{function}: time x{MAX_GROWTH}+ for twice the input (length, ratio): {slow}"


def test_the_quadratic_word_pattern_would_fail_the_bound():
    """The check itself tells a quadratic pattern from a linear one (the old word pattern of shared/text.py)."""
    import regex

    old = regex.compile(r"[\p{Cf}\p{M}]*[\p{L}\p{N}][\p{L}\p{M}\p{N}\p{Cf}]*")
    seen = []
    for _ in range(3):  # a busy machine can flatten one measurement (2.39 seen beside other jobs), not three
        seen.append(growth(lambda t: old.findall(t), lambda k: "\u200b" * k))
        if seen[-1][1] > MAX_GROWTH:
            break
    assert seen[-1][1] > MAX_GROWTH, seen


def test_the_issue_article_of_600000_zero_width_spaces():
    body = "\u200b" * 600_000
    assert len(body.encode("utf-8")) == 1_800_000
    assert clean_text(body) == "" and tokenize(body).words == ()
    assert tokenize(f"Koper\u200b{body}luka").words == ("koperluka",)  # format characters join, never split


def test_long_runs_of_combining_marks_are_cut_before_normalisation():
    text = "a" + "\u0301\u0316" * 50_000
    capped = cap_combining(text)
    assert capped == "a" + ("\u0301\u0316" * MAX_COMBINING_RUN)[:MAX_COMBINING_RUN]
    assert cap_combining("Šport in čevapčiči") == "Šport in čevapčiči"  # a few marks in a row stay
    assert unicodedata.normalize("NFC", clean_text("c\u030c")) == "č"


def test_only_the_half_width_sound_marks_become_combining_marks_under_nfkc():
    """cap_combining's character class is complete for this Python's Unicode: no other character outside the
    marks (category M) starts, under NFKD, with a combining character."""
    found = []
    for cp in range(0x110000):
        c = chr(cp)
        if unicodedata.category(c).startswith("M") or unicodedata.category(c) == "Cs":
            continue
        d = unicodedata.normalize("NFKD", c)
        if d and unicodedata.combining(d[0]):
            found.append(f"U+{cp:04X}")
    assert found == ["U+FF9E", "U+FF9F"]


def test_the_benchmark_covers_the_required_inputs():
    assert {"U+200B run", "U+FEFF run", "U+2060 run", "one letter", "one word, no spaces", "mixed"} <= set(bench.INPUTS)
    start = time.perf_counter()
    for make in bench.INPUTS.values():
        assert len(make(1000)) == 1000
    assert time.perf_counter() - start < 5


def test_the_issue_article_passes_validate_at_once(tmp_path):
    """In the classifier's first stage: the 600,000 zero-width spaces are cleaned away (the title is what is left
    to classify), and without a title the event is dead-lettered as empty, in well under a second of CPU."""
    from datetime import datetime

    from confluent_kafka import Message

    from newsmon.schemas import ArticleEvent, DeadLetterReason
    from newsmon.shared.config import Settings
    from newsmon.workers.pipeline import ArticlePipeline

    pipeline = ArticlePipeline(Settings(home=tmp_path / "home"), None, None, None)
    msgs = []
    for offset, title in enumerate(("Luka Koper", None)):
        ev = ArticleEvent(article_id=f"zwsp-{offset}", title=title, body="\u200b" * 600_000, lang="sl",
                          outlet="Portal", country="SI", published_at=datetime.now(UTC))
        msgs.append(Message(topic="articles", partition=0, offset=offset, value=ev.to_bytes(), timestamp=(1, 0)))
    assert len(msgs[0].value()) < 2_000_000  # under the default worker.max_message_bytes
    start = time.thread_time()
    batch, rejected = pipeline.validate(msgs)
    assert time.thread_time() - start < 1.0
    assert [it.text for it in batch.items] == ["Luka Koper\n"]  # title + "\\n" + the body, cleaned
    [(_m, exc)] = rejected
    assert exc.code is DeadLetterReason.SCHEMA_VIOLATION and "empty text" in exc.reason
