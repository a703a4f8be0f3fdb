"""The CLI end to end on a 100-article slice of sentinews_sl: real weights, real Qdrant engine, real data."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from newsmon.cli import app

runner = CliRunner()



def _one_proposal(stdout: str):
    """The proposal `suggest --json` printed: a list of one LabelProposal, the shape POST /v1/suggest answers."""
    from newsmon.schemas import LabelProposal, parse_event

    (got,) = json.loads(stdout)
    return parse_event(LabelProposal, json.dumps(got).encode("utf-8"))  # exactly the object of the topic

def _last_json_line(output: str) -> dict:
    # progress bars share the captured stream (stderr mixed into output), so the JSON may follow one
    lines = [x[x.index("{"):] for x in output.splitlines() if "{" in x]
    assert lines, output
    return json.loads(lines[-1])


@pytest.fixture
def cli_env(monkeypatch, newsmon_home, tmp_path):
    monkeypatch.setenv("NEWSMON_HOME", str(newsmon_home))
    monkeypatch.setenv("NEWSMON_MEMORY__PATH", str(tmp_path / "memory"))
    return tmp_path


def test_eval_on_slice_writes_table_json_and_plot(cli_env, sentinews_slice):
    out = cli_env / "eval"
    res = runner.invoke(app, ["eval", "--data", str(sentinews_slice), "--methods", "rae,zshot,mlknn,svm,logreg",
                              "--tune", "5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "| RAE-XMC |" in res.output and "| TF-IDF + SVM |" in res.output
    # 10 test articles: every figure and ratio is marked low-sample, none is printed as nan
    assert "nan" not in res.output.lower() and "low-sample: computed from fewer than 100 test articles (all 10" \
        in res.output
    assert "† low-sample: 10 test articles" in res.output
    report = json.loads((out / "results.json").read_text())
    assert set(report["methods"]) == {"rae", "rae_tuned", "zshot", "mlknn", "svm", "logreg"}
    assert report["corpus"]["train"] == 80 and report["corpus"]["test"] == 10
    for m in report["methods"].values():
        for key in ("uF1", "uP", "uR", "Acc"):
            v = m["metrics"]["all"][key]
            assert 0.0 <= v <= 1.0
    # retrieval finds relevant neighbours on real text: the top-ranked label is right more often than a
    # label drawn from the label distribution would be
    rae = report["methods"]["rae"]["metrics"]["ranking"]
    assert rae["P@1"] >= 0.3
    tuned = report["methods"]["rae_tuned"]["params"]
    assert tuned["trials"] == 5 and 1 <= tuned["top_k"] <= 100
    assert (out / "f1_by_frequency.png").stat().st_size > 1000
    assert (out / "results.md").read_text().count("|") > 50


def test_eval_newsmon_row_has_an_ablation_row_per_calibration_step(cli_env, sentinews_slice):
    out = cli_env / "eval-newsmon"
    res = runner.invoke(app, ["eval", "--data", str(sentinews_slice), "--methods", "newsmon,svm", "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "results.json").read_text())
    methods = report["methods"]
    steps = [methods[k]["name"] for k in sorted(methods, key=lambda k: int(k[12:]) if "_step" in k else -1)
             if k.startswith("newsmon_step")]
    # one row per calibration step, in the calibration's order: the base grid, the lexical fusion (over the dense
    # candidates), the lexical search (adding the lexical candidates), each registered score component, then each
    # registered decision rule's own step in the order of its CALIBRATE_AT (the threshold rule's: the bucket and the
    # per-label thresholds; the replayed new-label rule last)
    from newsmon.shared.scoring.components import components
    from newsmon.shared.scoring.rules import DecisionRule, rules
    expected = (["newsmon: base (k, tau, threshold)", "newsmon: + lexical fusion", "newsmon: + lexical search"]
                + [f"newsmon: + {c.name}" for c in components()])
    for r in sorted(rules(), key=lambda r: r.CALIBRATE_AT):
        if r.name == "threshold":
            expected += ["newsmon: + bucket thresholds", "newsmon: + label thresholds"]
        elif r.GRID or type(r).grid is not DecisionRule.grid or type(r).calibrate is not DecisionRule.calibrate:
            expected.append(f"newsmon: + {r.name}")
    assert expected[-1] == "newsmon: + new_label_support"
    assert [x.removesuffix(" (kept)").removesuffix(" (not kept)") for x in steps] == expected
    assert {"newsmon: + head_model", "newsmon: + label_tree", "newsmon: + floor", "newsmon: + set_vote",
            "newsmon: + label_count", "newsmon: + tail_support", "newsmon: + far_from_memory",
            "newsmon: + new_label_support"} <= set(expected)
    assert all(x.endswith(("(kept)", "(not kept)")) for x in steps[1:])
    row = methods["newsmon"]["params"]
    for key in ("top_k", "tau", "threshold", "lexical_weight", "lexical_search", "components", "rules",
                "bucket_thresholds", "label_thresholds"):  # the product row = the last step
        assert row[key] == methods[f"newsmon_step{len(steps) - 1}"]["params"][key], key
    assert "new_label_replay" in methods[f"newsmon_step{len(steps) - 1}"]["params"]
    plain = [x.removesuffix(" (kept)").removesuffix(" (not kept)") for x in steps]
    at = {name: i for i, name in enumerate(plain)}
    assert "new_label_replay" in methods[f"newsmon_step{at['newsmon: + new_label_support']}"]["params"]
    for i, name in enumerate(plain):  # every other lever: the paired lift interval that decided it, and why
        if i == 0 or name == "newsmon: + new_label_support":
            continue
        got = methods[f"newsmon_step{i}"]["params"]
        if "lift" not in got:  # nothing to offer (no label moves its threshold): not kept, and why
            assert steps[i].endswith("(not kept)") and got["why"], steps[i]
            continue
        lo, hi = got["lift_interval"]
        assert lo <= hi and got["why"] and set(got["lift"]) == {"objective", "micro_f1", "subset_accuracy",
                                                                 "macro_f1"}
        if steps[i].endswith("(kept)") and not steps[i].startswith(("newsmon: + tail_support",
                                                                   "newsmon: + far_from_memory")):  # kept unless lower
            assert lo > 0, steps[i]
    assert report["ratio_to_svm"]["newsmon"]["uF1"] is not None
    md = (out / "results.md").read_text()
    assert all(f"| {x} |" in md for x in steps)


def test_memory_build_then_suggest_explains_with_neighbours(cli_env, sentinews_slice):
    from newsmon.schemas import LabelProposal, parse_event
    from newsmon.shared.memory.base import collection_name

    res = runner.invoke(app, ["memory", "build", "--data", str(sentinews_slice)])
    assert res.exit_code == 0, res.output
    built = _last_json_line(res.output)
    assert built["upserted"] == {"sl": 80} and built["memory_counts"] == {"sl": 80}
    # a memory article's own text: it is its own nearest neighbour, and its labels come back with it as support
    rows = [json.loads(x) for x in sentinews_slice.read_text(encoding="utf-8").splitlines()]
    art = next(r for r in rows if r["split"] == "train" and len(r["labels"]) >= 2)
    res = runner.invoke(app, ["suggest", art["text"], "--lang", "sl", "--top-k", "1", "--json"])
    assert res.exit_code == 0, res.output
    got = _one_proposal(res.stdout)  # exactly the object of the topic
    assert {x.label for x in got.labels} == set(art["labels"])
    assert all(x.neighbours[0].article_id == art["id"] for x in got.labels)
    assert got.labels[0].neighbours[0].similarity > 0.99 and got.labels[0].neighbours[0].title == art["title"]
    assert got.scoring.top_k == 1 and got.scoring.threshold == 0.5 and got.scoring.predictor == "newsmon"
    assert got.memory_version == collection_name("newsmon", "sl", got.model_version)  # an ONNX id has '+'
    assert got.timings.total_ms > 0 and got.article_id.startswith("suggest-") and got.schema_version == got.needs_version() >= 3
    assert {(x.decided_by, x.threshold) for x in got.labels} == {("threshold", 0.5)}  # why each label is there
    # nothing above the threshold: still the whole proposal, the labels below it as candidates with their evidence
    test_art = next(r for r in rows if r["split"] == "test")
    res = runner.invoke(app, ["suggest", test_art["text"], "--threshold", "1.0", "--json", "--id", "t-1"])
    assert res.exit_code == 0, res.output
    got = _one_proposal(res.stdout)
    assert got.article_id == "t-1" and got.labels == [] and got.scoring.threshold == 1.0
    assert 1 <= len(got.candidates) <= 20 and got.scoring.top_k == 50
    scores = [x.score for x in got.candidates]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1.0
    assert all(n.title for x in got.candidates for n in x.neighbours)
    best = got.candidates[0]
    # the same article in the readable format: the label, its score and source, its neighbours with titles
    res = runner.invoke(app, ["suggest", test_art["text"], "--threshold", "1.0"], terminal_width=200)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "no label above the threshold 1.0" in out and "not proposed:" in out
    assert best.label in out and f"{best.score:.3f}  retrieval  {best.reason}" in " ".join(out.split("\n"))
    assert f"its score {best.score:.2f} is below its threshold 1.00" in best.reason  # why, in words
    assert f"{best.neighbours[0].similarity:.3f}  {best.neighbours[0].article_id}" in out
    assert best.neighbours[0].title[:40] in out
    res = runner.invoke(app, ["suggest", test_art["text"]], terminal_width=200)
    assert res.exit_code == 0 and "labels above the threshold 0.5 (defaults: no calibration record" in res.stdout



def test_calibration_reaches_suggest_and_explicit_options_win(cli_env, sentinews_slice):
    """memory build --calibrate writes the record; suggest scores with it (the proposal names it); an explicit
    --threshold replaces only that parameter; tune on an empty memory fails with one line."""
    from newsmon.schemas import LabelProposal, parse_event
    from newsmon.shared.memory.base import collection_name

    res = runner.invoke(app, ["tune"])
    assert res.exit_code != 0 and "memory build" in res.output
    # --recalibrate: the test home's calibration cache may hold this slice's calibration from a module run before
    # this one (test_demo.py's demo, same articles and settings), which would be reused with its own written_by
    res = runner.invoke(app, ["memory", "build", "--data", str(sentinews_slice), "--calibrate", "--recalibrate"])
    assert res.exit_code == 0, res.output
    assert "calibration of" in res.output and "set_vote" in res.output and "objective" in res.output
    records = list((cli_env / "memory" / "calibration").glob("newsmon_sl_*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["written_by"] == "memory build"
    text = next(r for r in (json.loads(x) for x in sentinews_slice.read_text(encoding="utf-8").splitlines())
                if r["split"] == "test")["text"]
    res = runner.invoke(app, ["suggest", text, "--lang", "sl", "--json"])
    assert res.exit_code == 0, res.output
    got = _one_proposal(res.stdout)
    assert got.scoring.calibration is not None and got.scoring.calibration.startswith("newsmon_sl_")
    calibrated, calibrated_k = got.scoring, got.scoring.top_k
    # without --lang: the memory's one language, and its record (never the defaults while a calibration exists)
    res = runner.invoke(app, ["suggest", text, "--json"])
    assert res.exit_code == 0, res.output
    got = _one_proposal(res.stdout)
    assert got.scoring == calibrated and got.scoring.source == "calibration" and got.scoring.note is None
    res = runner.invoke(app, ["suggest", text])  # the header names the record too
    assert f"calibration {calibrated.calibration}" in " ".join(res.output.split()), res.output
    res = runner.invoke(app, ["suggest", text, "--lang", "sl", "--json", "--threshold", "0.99"])
    got = _one_proposal(res.stdout)
    assert got.scoring.threshold == 0.99 and got.scoring.top_k == calibrated_k
    assert got.scoring.source == "calibration+settings" and "settings" in got.scoring.note
    res = runner.invoke(app, ["settings"])  # the effective scoring per language memory
    sl = json.loads(res.stdout)["effective_scoring"]["sl"]
    assert (sl["calibration"], sl["source"], sl["scoring"]["top_k"]) == (calibrated.calibration, "calibration",
                                                                         calibrated_k)


def test_eval_reports_bad_lines(cli_env, sentinews_slice):
    path = cli_env / "with_bad.jsonl"
    lines = sentinews_slice.read_text(encoding="utf-8").splitlines()
    lines.insert(5, "{broken")
    lines.insert(9, json.dumps({"id": "empty", "text": "", "labels": ["x"], "lang": "sl", "split": "test"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = runner.invoke(app, ["eval", "--data", str(path), "--methods", "svm", "--out", str(cli_env / "o")])
    assert res.exit_code == 0, res.output
    assert "skipped line 6" in res.output and "invalid JSON" in res.output
    assert "skipped line 10" in res.output
    report = json.loads((cli_env / "o" / "results.json").read_text())
    assert report["corpus"]["bad_lines"] == 2
    assert [b["line"] for b in report["corpus"]["bad_line_details"]] == [6, 10]


def test_errors_are_clear(cli_env):
    res = runner.invoke(app, ["eval", "--data", str(cli_env / "nowhere"), "--methods", "svm"])
    assert res.exit_code == 2 and "no corpus at" in res.output
    res = runner.invoke(app, ["suggest"])
    assert res.exit_code == 2 and "give the article text as an argument or with --file" in res.output
    for empty in ("", "   \n\t "):  # given, but empty: refused as empty, before any model is loaded
        res = runner.invoke(app, ["suggest", empty])
        assert res.exit_code == 2 and "the article text is empty" in res.output, res.output
        assert "as an argument" not in res.output
    blank = cli_env / "blank.txt"
    blank.write_text("  \n", encoding="utf-8")
    res = runner.invoke(app, ["suggest", "--file", str(blank)])
    assert res.exit_code == 2 and f"the article in {blank} is empty" in " ".join(res.output.split())
