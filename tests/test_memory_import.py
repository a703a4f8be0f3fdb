"""``newsmon memory import`` (shared/memory/bulk.py, archive.py): a Parquet archive embedded elsewhere into a real
embedded memory (qdrant-edge on a temp dir), on real sentinews_sl articles with seeded vectors: the points equal
what ``memory build`` stores, a wrong model version or dimension is refused, an interrupted import resumes, bad
rows are reported, and the command end to end."""

from __future__ import annotations

import inspect
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from newsmon.cli import app
from newsmon.shared.config import Settings
from newsmon.shared.data import Article, load_corpus
from newsmon.shared.memory import MemoryRouter, collection_name
from newsmon.shared.memory.archive import ArchiveError, open_archive
from newsmon.shared.memory.bulk import DEFAULT_BATCH, BadRowError, import_parquet, write_parquet
from newsmon.shared.memory.common import TEXT_PAYLOAD_CHARS
from newsmon.shared.text import clean_text

DIM = 16
VERSION = "test-model@1"
runner = CliRunner()


class Interrupted(Exception):
    pass


class TableEncoder:
    """An encoder whose ``passage`` vectors are given: ``memory build`` then stores exactly the archive's vectors."""

    model_id, dim = VERSION, DIM

    def __init__(self, by_text: dict[str, np.ndarray]):
        self.by_text = by_text

    def encode(self, texts, role="passage"):
        return np.stack([self.by_text[t] for t in texts]).astype(np.float32)

    def close(self):
        pass


def _unit(rng: np.random.Generator, n: int, d: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def raw(shared_data) -> list[dict]:
    """300 labelled train articles of sentinews_sl as corpus lines, the first five with markup, an entity and a
    soft hyphen in their text (so the import's cleaning is exercised: the corpus loader cleans them too)."""
    arts = [a for a in load_corpus(shared_data / "sentinews_sl", limit=400).split("train") if a.labels][:300]
    rows = [a.model_dump() for a in arts]
    for r in rows[:5]:
        r["text"] = "<p>" + r["text"].replace("š", "&scaron;", 1) + "</p> kon\u00adec"
    return rows


@pytest.fixture(scope="module")
def articles(raw) -> list[Article]:
    return [Article.model_validate(r) for r in raw]


def _router(tmp_path, name: str, version: str = VERSION, dim: int = DIM) -> MemoryRouter:
    return MemoryRouter(Settings(home=tmp_path / name), version, dim)


def _archive(tmp_path, articles, vectors, name="a.parquet", **kw):
    return write_parquet(tmp_path / name, [a.id for a in articles], [a.lang for a in articles], vectors,
                         [list(a.labels) for a in articles], kw.pop("texts", None) or [a.text for a in articles],
                         model_version=kw.pop("model_version", VERSION), **kw)


def test_import_stores_what_memory_build_stores(tmp_path, raw, articles):
    from newsmon.shared.classifier import Classifier

    vectors = _unit(np.random.default_rng(1), len(articles))
    built = _router(tmp_path, "built")
    clf = Classifier(built.settings, encoder=TableEncoder({a.text: v for a, v in zip(articles, vectors, strict=True)}),
                     router=built)
    clf.add_articles(articles)
    path = _archive(tmp_path, articles, vectors, texts=[r["text"] for r in raw], titles=[a.title for a in articles],
                    sources=[a.source for a in articles], row_group_rows=64)
    imported = _router(tmp_path, "imported")
    try:
        report = import_parquet(path, imported, batch=100)
        assert (report.imported, report.bad, report.skipped_done) == (len(articles), 0, 0)
        ids = [a.id for a in articles]
        a, b = built.memory("sl"), imported.memory("sl")
        assert a.count() == b.count() == len(articles)
        for pa_, pb in zip(a.get(ids, with_vectors=True), b.get(ids, with_vectors=True), strict=True):
            assert pa_.labels == pb.labels and pa_.payload == pb.payload
            np.testing.assert_allclose(pa_.vector, pb.vector, atol=1e-6)
        assert raw[0]["text"].startswith("<p>") and "<p>" not in b.get(ids[:1])[0].payload["text"]  # cleaned
        # the lexical vectors are the same: a hybrid search with an article's text finds the same neighbours
        queries = _unit(np.random.default_rng(2), 10)
        texts = [articles[i].text for i in range(0, 300, 30)]
        hits_a = a.search(queries, 1, texts=texts, lexical_k=3)
        hits_b = b.search(queries, 1, texts=texts, lexical_k=3)
        for ha, hb, i in zip(hits_a, hits_b, range(0, 300, 30), strict=True):
            assert [(n.article_id, round(n.similarity, 5)) for n in ha] == \
                [(n.article_id, round(n.similarity, 5)) for n in hb]
            assert articles[i].id in {n.article_id for n in hb}
    finally:
        clf.close()
        imported.close()


def test_published_at_is_stored_in_utc_as_the_stream_stores_it(tmp_path, articles):
    arts = articles[:3]
    cet = timezone(timedelta(hours=2))
    path = _archive(tmp_path, arts, _unit(np.random.default_rng(3), 3),
                    published_at=[datetime(2024, 5, 6, 13, 5, tzinfo=cet), None, datetime(2024, 5, 7, tzinfo=cet)])
    router = _router(tmp_path, "m")
    try:
        import_parquet(path, router)
        got = [p.payload.get("published_at") for p in router.memory("sl").get([a.id for a in arts])]
        assert got == ["2024-05-06T11:05:00+00:00", None, "2024-05-06T22:00:00+00:00"]
    finally:
        router.close()


def test_a_dimension_other_than_the_memorys_is_refused(tmp_path, articles):
    path = _archive(tmp_path, articles[:10], _unit(np.random.default_rng(4), 10))
    router = _router(tmp_path, "m", dim=32)
    try:
        with pytest.raises(ArchiveError, match=r"newsmon.dim is 16, the memory's dimension is 32"):
            import_parquet(path, router)
        # a variable-length vector column without newsmon.dim: the length of its first vectors
        table = pa.table({"id": ["x1", "x2", "x3", "x4"], "language": ["sl"] * 4,
                          "labels": [["a"], ["b"], ["c"], ["d"]], "text": ["ena", "dve", "tri", "štiri"],
                          "vector": pa.array([None, [1.0] * 16, [2.0] * 16, [3.0] * 15], type=pa.list_(pa.float64()))})
        pq.write_table(table, tmp_path / "var.parquet")
        with pytest.raises(ArchiveError, match=r"the vectors' length is 16, the memory's dimension is 32"):
            import_parquet(tmp_path / "var.parquet", router, model_version=VERSION)
        assert router.languages() == []
    finally:
        router.close()
    # the same file into a memory of its dimension: read as float32; a null vector, a short one are bad rows
    router = _router(tmp_path, "m16")
    try:
        report = import_parquet(tmp_path / "var.parquet", router, model_version=VERSION)
        assert (report.imported, report.bad) == (2, 2)
        assert [b.reason for b in report.bad_rows] == ["vector is null", "vector has 15 values, expected 16"]
        np.testing.assert_allclose(router.memory("sl").get(["x2"], with_vectors=True)[0].vector, [0.25] * 16)
    finally:
        router.close()


def test_a_model_version_other_than_the_memorys_is_refused(tmp_path, articles):
    vectors = _unit(np.random.default_rng(5), 10)
    router = _router(tmp_path, "m")
    try:
        other = _archive(tmp_path, articles[:10], vectors, name="other.parquet", model_version="other-model@2")
        with pytest.raises(ArchiveError, match=r"'other-model@2' .* not the memory's 'test-model@1'"):
            import_parquet(other, router)
        with pytest.raises(ArchiveError, match=r"'other-model@2' but --model-version says 'test-model@1'"):
            import_parquet(other, router, model_version=VERSION)
        bare = tmp_path / "bare.parquet"
        table = pq.read_table(other)
        pq.write_table(table.replace_schema_metadata({}), bare)
        with pytest.raises(ArchiveError, match=r"no newsmon.model_version .* give .* --model-version .*"
                                               r"'test-model@1'"):
            import_parquet(bare, router)
        with pytest.raises(ArchiveError, match=r"'other-model@2' .* not the memory's"):
            import_parquet(bare, router, model_version="other-model@2")
        assert router.languages() == []  # nothing written, no collection made
        assert import_parquet(bare, router, model_version=VERSION).imported == 10  # vouched for
    finally:
        router.close()


def test_an_interrupted_import_resumes_without_rewriting_the_rows_done(tmp_path, articles):
    vectors = _unit(np.random.default_rng(6), len(articles))
    path = _archive(tmp_path, articles, vectors, row_group_rows=64)
    ids = [a.id for a in articles]
    router = _router(tmp_path, "m")
    mem = router.memory("sl")

    def stop_after_three(done):
        if done >= 150:
            raise Interrupted(done)

    try:
        with pytest.raises(Interrupted):
            import_parquet(path, router, batch=50, on_batch=stop_after_three)
        assert mem.count() == 150
        mem.set_labels(ids[:150], [["marker"]] * 150)  # a rewrite of a row done would undo this
        report = import_parquet(path, router, batch=50)
        assert (report.skipped_done, report.imported) == (150, 150)
        assert mem.count() == len(articles)
        stored = [p.article_id for p in mem.scroll(filter=None)]
        assert sorted(stored) == sorted(ids)  # every row once, no duplicates
        assert all(p.labels == ("marker",) for p in mem.get(ids[:150]))  # the rows done were not written again
        assert [p.labels for p in mem.get(ids[150:])] == [a.labels for a in articles[150:]]
        again = import_parquet(path, router, batch=50)
        assert (again.skipped_done, again.imported) == (len(articles), 0)
        fresh = import_parquet(path, router, batch=50, restart=True)
        assert (fresh.skipped_done, fresh.imported) == (0, len(articles))
        assert mem.count() == len(articles) and mem.get(ids[:1])[0].labels == articles[0].labels
        # a batch that does not end on a row group boundary: skipped groups are not read, the rest sliced
        with pytest.raises(Interrupted):
            import_parquet(path, router, batch=70, restart=True, on_batch=stop_after_three)
        assert import_parquet(path, router, batch=70).skipped_done == 210
    finally:
        router.close()


def test_bad_rows_are_counted_reported_and_left_out(tmp_path, articles):
    n = 12
    arts = articles[:n]
    vectors = _unit(np.random.default_rng(7), n)
    vectors[3] = 0.0
    vectors[4, 0] = np.nan
    ids = [a.id for a in arts]
    ids[1] = "Delo 2019 #12"
    ids[6] = ids[5]
    langs = ["sl"] * n
    langs[2] = "xx"
    langs[10] = "hr"
    labels = [list(a.labels) for a in arts]
    labels[7] = ["  ", ""]
    texts = [a.text for a in arts]
    texts[8] = "<p>\u200b</p>"
    table = pa.table({"id": ids, "language": langs, "vector": pa.FixedSizeListArray.from_arrays(
        pa.array(vectors.reshape(-1)), DIM), "labels": labels, "text": texts,
        "published_at": [None] * 9 + ["2024-05-06T13:05:00", None, None]})
    path = tmp_path / "bad.parquet"
    pq.write_table(table.replace_schema_metadata({"newsmon.model_version": VERSION, "newsmon.dim": str(DIM)}), path)
    router = _router(tmp_path, "m")
    try:
        report = import_parquet(path, router, languages=["sl"])
        reasons = {b.row: b.reason for b in report.bad_rows}
        assert sorted(reasons) == [1, 2, 3, 4, 6, 7, 8, 9] and report.bad == 8
        assert "is not valid" in reasons[1] and "not an ISO 639-1 code" in reasons[2]
        assert reasons[3] == "vector is all zeros" and reasons[4] == "vector holds NaN or inf"
        assert "repeated in the batch (row 5" in reasons[6] and reasons[7].startswith("no labels")
        assert reasons[8].startswith("text is blank") and "no UTC offset" in reasons[9]
        assert report.other_language == 1 and report.imported == 3 == router.memory("sl").count()
        assert report.bad_rows[0].id == "Delo 2019 #12"
        with pytest.raises(BadRowError, match=r"row 1 \(id 'Delo 2019 #12'\)"):
            import_parquet(path, router, strict=True, restart=True, batch=4)
    finally:
        router.close()


def test_a_missing_column_or_a_naive_timestamp_is_refused(tmp_path):
    base = {"id": ["a"], "language": ["sl"], "vector": pa.array([[1.0] * DIM], type=pa.list_(pa.float32(), DIM)),
            "labels": [["x"]]}
    pq.write_table(pa.table(base), tmp_path / "no-text.parquet")
    with pytest.raises(ArchiveError, match=r"missing column\(s\) \['text'\]"):
        open_archive(tmp_path / "no-text.parquet")
    naive = pa.table({**base, "text": ["t"], "published_at": pa.array([datetime(2024, 1, 1)], pa.timestamp("us"))})
    pq.write_table(naive, tmp_path / "naive.parquet")
    with pytest.raises(ArchiveError, match="without a time zone"):
        open_archive(tmp_path / "naive.parquet")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(ArchiveError, match="not a readable Parquet file"):
        open_archive(tmp_path / "text.parquet")


@pytest.fixture
def cli_env(monkeypatch, newsmon_home, tmp_path):
    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    monkeypatch.setenv("NEWSMON_MEMORY__PATH", str(tmp_path / "memory"))
    return tmp_path


def _json_line(output: str) -> dict:
    lines = [x[x.index("{"):] for x in output.splitlines() if x.lstrip().startswith("{")]
    assert lines, output
    return json.loads(lines[-1])


def test_the_command_imports_resumes_and_refuses_another_model(cli_env, articles):
    from newsmon.shared.classifier import model_identity

    version, dim = model_identity(Settings())
    arts = articles[:120]
    vectors = _unit(np.random.default_rng(8), len(arts), dim)
    path = _archive(cli_env, arts, vectors, model_version=version)
    res = runner.invoke(app, ["memory", "import", str(path), "--batch", "50"])
    assert res.exit_code == 0, res.output
    out = _json_line(res.output)
    assert (out["imported"], out["bad"], out["skipped_done"]) == (120, 0, 0)
    assert out["memory_counts"] == {"sl": 120} and out["rows_per_s"] > 0
    assert "imported 120 rows, skipped 0 (done before), 0 bad" in res.output
    again = runner.invoke(app, ["memory", "import", str(path)])
    assert again.exit_code == 0 and _json_line(again.output)["skipped_done"] == 120, again.output
    stats = runner.invoke(app, ["memory", "stats"])
    assert json.loads(stats.stdout) == {collection_name("newsmon", "sl", version): {"labelled": 120, "pending": 0}}
    other = _archive(cli_env, arts, vectors, name="other.parquet", model_version="another-model@9")
    refused = runner.invoke(app, ["memory", "import", str(other)])
    assert refused.exit_code == 2
    assert "'another-model@9'" in refused.output and repr(version) in refused.output
    assert runner.invoke(app, ["memory", "import", str(cli_env / "missing.parquet")]).exit_code == 2


def test_the_commands_default_batch_is_the_librarys():
    from newsmon.cli.memory_import import memory_import

    assert inspect.signature(memory_import).parameters["batch"].default == DEFAULT_BATCH


def test_invisible_and_combining_runs_of_200k_characters(tmp_path, articles):
    """An archive row of 200,000 zero-width spaces is blank once cleaned (a bad row); one word followed by 200,000
    combining marks is imported with the run capped, as every other path cleans it."""
    arts = articles[:3]
    texts = [arts[0].text, "\u200b" * 200_000, "Ljubljana" + "\u0301" * 200_000 + " " + arts[2].text]
    table = pa.table({"id": [a.id for a in arts], "language": ["sl"] * 3, "vector": pa.FixedSizeListArray.from_arrays(
        pa.array(_unit(np.random.default_rng(3), 3).reshape(-1)), DIM), "labels": [list(a.labels) for a in arts],
        "text": texts, "published_at": [None] * 3})
    path = tmp_path / "invisible.parquet"
    pq.write_table(table.replace_schema_metadata({"newsmon.model_version": VERSION, "newsmon.dim": str(DIM)}), path)
    router = _router(tmp_path, "m")
    try:
        report = import_parquet(path, router)
        assert [b.row for b in report.bad_rows] == [1] and report.bad_rows[0].reason.startswith("text is blank")
        stored = router.memory("sl").get([arts[2].id])[0]
        assert stored is not None and stored.payload["text"] == clean_text(texts[2])[:TEXT_PAYLOAD_CHARS]
        assert len(stored.payload["text"]) < 1000 + len(arts[2].text)
    finally:
        router.close()
