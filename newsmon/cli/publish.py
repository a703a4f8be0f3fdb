"""``newsmon publish``: articles from a JSONL file to the ``articles`` topic, where the classifier proposes their
labels (and the console's queue shows the proposals).

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load the Kafka client and the demo's helpers for every ``newsmon`` call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from newsmon.cli.common import err, fail, settings_from_env

if TYPE_CHECKING:
    from newsmon.schemas import ArticleEvent

#: Bad lines reported one by one (then a count).
REPORTED = 50


def publish_cmd(
    path: Annotated[Path, typer.Argument(help="JSONL file (or a folder holding articles.jsonl): one article a line, "
                                              "a corpus line ({\"id\", \"text\", \"lang\", ...}) or an ArticleEvent "
                                              "({\"article_id\", \"body\", ...}).")],
    split: Annotated[str | None, typer.Option(help="Publish only the corpus lines of this split (train, validation, "
                                                      "test); ArticleEvents have none and are all published.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Publish at most N articles.")] = None,
) -> None:
    """Publish articles to the articles topic: the classifier proposes their labels, and the console's queue shows
    each proposal as it arrives.

    The broker is NEWSMON_KAFKA__BOOTSTRAP_SERVERS, or without it the embedded broker of the `newsmon serve`
    (`worker all`, `demo --serve`) running with the same NEWSMON_HOME. A corpus line becomes the ArticleEvent the
    demo publishes (its title split from its text); an ArticleEvent line is validated as the classifier validates
    it. A bad line is reported with its number and reason and skipped; the counts are printed as JSON once the
    broker acknowledged every article (and, for the embedded broker of `newsmon serve`, once its journal has them
    on disk, so a restart or a kill of it loses none)."""
    from newsmon.shared.data import resolve_corpus_file  # deferred: see the module docstring

    s = settings_from_env()
    if split is not None and split not in ("train", "validation", "test"):
        fail(f"--split {split}: choose train, validation or test")
    try:
        file = resolve_corpus_file(path)
    except FileNotFoundError as exc:
        fail(str(exc))
    events, bad = read_articles(file, split, limit)
    for line, reason in bad[:REPORTED]:
        err.print(f"skipped line {line}: {reason}", markup=False, soft_wrap=True)
    if len(bad) > REPORTED:
        err.print(f"... and {len(bad) - REPORTED} more bad lines", markup=False)
    if not events:
        fail(f"no article to publish in {file}" + (f" (split {split})" if split else "") + f": {len(bad)} bad lines")
    where, journal = broker_of(s)
    acknowledged, failures, last = produce(s, events)
    kept = journal is not None and not failures and journalled(s, journal, last)
    print(json.dumps({"published": acknowledged, "bad_lines": len(bad), "topic": s.kafka.topic_articles,
                      "broker": where, **({"journal": journal} if journal is not None else {})}))
    if failures:
        fail(f"the broker did not acknowledge {len(failures)} of {len(events)} articles: {failures[0]}", 1)
    if journal is not None and not kept:
        fail(f"the broker acknowledged the articles but its journal ({journal}) did not have them on disk within "
             f"api.publish_timeout_s = {s.api.publish_timeout_s:g} s: a restart of the `newsmon serve` may lose "
             "them; publish them again (the classifier proposes an article again for the same id)", 1)


def read_articles(file: Path, split: str | None, limit: int | None) -> tuple[list[ArticleEvent], list[tuple[int, str]]]:
    """The article events of ``file``'s lines (corpus lines converted as the demo does, ArticleEvent lines parsed as
    the classifier parses them), in order, and the bad lines ``(1-based line number, reason)``: not UTF-8, not a
    JSON object, invalid, or an id seen on an earlier line."""
    from pydantic import ValidationError

    from newsmon.demo import article_event  # deferred: see the module docstring
    from newsmon.schemas import ArticleEvent, InvalidEvent, parse_event
    from newsmon.shared.data import Article

    events: list[ArticleEvent] = []
    bad: list[tuple[int, str]] = []
    seen: set[str] = set()
    with file.open("rb") as fh:
        for no, raw in enumerate(fh, start=1):
            raw = raw.removeprefix(b"\xef\xbb\xbf") if no == 1 else raw
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                bad.append((no, f"invalid JSON: {exc}"))
                continue
            if not isinstance(obj, dict):
                bad.append((no, "not a JSON object"))
                continue
            try:
                if "article_id" in obj or "body" in obj:
                    ev = cast(ArticleEvent, parse_event(ArticleEvent, raw))
                else:
                    article = Article.model_validate(obj)
                    if split is not None and article.split != split:
                        continue
                    ev = article_event(article)
            except InvalidEvent as exc:
                bad.append((no, exc.reason))
                continue
            except ValidationError as exc:
                bad.append((no, "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}"
                                          for e in exc.errors())))
                continue
            if ev.article_id in seen:
                bad.append((no, f"duplicate id {ev.article_id!r}"))
                continue
            seen.add(ev.article_id)
            events.append(ev)
            if limit is not None and len(events) >= limit:
                break
    return events, bad


def broker_of(s) -> tuple[str, str | None]:
    """Point ``s.kafka`` at the broker to publish to and say which: the configured one, or the embedded broker of
    the standalone process running in the home (:mod:`newsmon.standalone`); exits with the reason otherwise. Also
    the embedded broker's journal file, when it keeps one (else None)."""
    from newsmon.standalone import standalone_broker

    if s.kafka.bootstrap_servers:
        return s.kafka.bootstrap_servers, None
    rec, why = standalone_broker(s)
    if rec is None:
        fail(f"no broker to publish to: NEWSMON_KAFKA__BOOTSTRAP_SERVERS is not set and {why}. Start `newsmon serve` "
             "(it starts an embedded broker and records it in NEWSMON_HOME), or set NEWSMON_KAFKA__BOOTSTRAP_SERVERS")
    s.kafka.bootstrap_servers = rec["bootstrap"]
    return (f"{rec['bootstrap']} (the embedded broker of `newsmon {rec.get('command', 'serve')}`, pid {rec['pid']})",
            rec.get("journal") or None)


def journalled(s, journal: str, last: dict[int, int]) -> bool:
    """Whether the embedded broker's journal has every article produced (``last``: partition -> last offset) on
    disk within ``api.publish_timeout_s`` (kept, or handled by the classifier already)."""
    from newsmon.journal import wait_journalled

    return wait_journalled(Path(journal), s.kafka.topic_articles, s.kafka.classifier_group, last,
                           s.api.publish_timeout_s)


def produce(s, events: list[ArticleEvent]) -> tuple[int, list[str], dict[int, int]]:
    """Produce ``events`` to ``kafka.topic_articles`` (key: the article id) and wait for the broker; returns (the
    articles acknowledged, the errors of the others, partition -> the offset of the last one acknowledged there)."""
    from newsmon.workers.kafka_io import make_producer

    producer = make_producer(s, "newsmon-publish")
    done: list[int] = [0]
    failures: list[str] = []
    last: dict[int, int] = {}

    def delivered(error, msg) -> None:
        if error is None:
            done[0] += 1
            last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())
        else:
            failures.append(f"{msg.key().decode(errors='replace')}: {error}")

    for ev in events:
        try:
            producer.produce(s.kafka.topic_articles, key=ev.kafka_key(), value=ev.to_bytes(), on_delivery=delivered)
        except BufferError:
            producer.flush(30)
            producer.produce(s.kafka.topic_articles, key=ev.kafka_key(), value=ev.to_bytes(), on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(s.api.publish_timeout_s + 30)
    if left:
        failures.append(f"{left} not acknowledged within {s.api.publish_timeout_s + 30:g} s (is the broker up?)")
    return done[0], failures, last
