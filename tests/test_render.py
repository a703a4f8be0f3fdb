"""How a proposal reads for a moderator (newsmon/render.py), on the schema's example proposals: each label with
score, source and evidence (neighbours with titles, the rule and its words, a near-copy's original)."""

from __future__ import annotations

from rich.console import Console

from newsmon.render import render_proposal
from newsmon.schemas import LabelProposal, ScoringInfo


def _text(p: LabelProposal, **kw) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_proposal(p, **kw))
    return console.export_text()


def _examples() -> list[LabelProposal]:
    return [LabelProposal.model_validate(e) for e in LabelProposal.json_examples]


def test_retrieval_labels_show_score_source_and_titled_neighbours():
    sl = _examples()[0]
    out = _text(sl, neighbours=2, candidates=1).splitlines()
    assert out[0] == "sta-2024-05-06-0412"
    # the proposal's own reason (version 7)
    assert out[1] == ("  • bencin     0.830  retrieval  its score 0.83 is above its threshold 0.60; 9 of the 75 "
                      "nearest memory articles carry it, the closest at 0.91")
    assert out[2] == "      0.912  sl-test-707  Bencin cenejši, dizel dražji"
    assert out[4] == "      … and 1 more in the proposal"
    assert "  not proposed (thresholds by the label's frequency in the memory):" in out
    assert ("  • trošarine  0.340  retrieval  its score 0.34 is below its threshold 0.60; 2 of the 75 nearest memory "
            "articles carry it, the closest at 0.88") in out
    assert "nafta" not in "\n".join(out)  # one candidate asked for


def test_gold_marks_rule_evidence_and_missed_labels():
    sr = _examples()[1]
    out = _text(sr, gold=["нис", "енергетика"]).splitlines()
    assert out[0] == "rts-2024-5391207: 1 of 2 proposed labels right, 2 gold"
    assert out[1] == "  ✓ нис       1.000  rule"
    assert out[2] == ('      rule НИС OR "Нафтна индустрија Србије" -"НИС Петрол Бугарска" matched “НИС”, '
                      '“Нафтна индустрија Србије”')
    assert "  ✗ nafta     0.570  retrieval" in out
    assert out[-1] == "  missed (gold, not proposed): енергетика"


def test_nothing_above_the_threshold_and_a_near_copy():
    empty, copy = _examples()[2], _examples()[3]
    out = _text(empty)
    assert "  no label above the threshold 0.5" in out and "  • stavka  0.460  retrieval" in out
    out = _text(copy).splitlines()
    assert out[0] == "delo-2024-05-06-8812 (near-copy of sta-2024-05-06-0412)"
    assert out[2] == "      near-copy of sta-2024-05-06-0412 (estimated Jaccard 0.94)"


def test_bucket_and_label_thresholds_are_named_where_they_decided():
    sl = _examples()[0]  # as a proposal that does not say each label's threshold (before version 3) reads
    bare = {f: [x.model_copy(update={"decided_by": None, "threshold": None}) for x in getattr(sl, f)]
            for f in ("labels", "candidates")}
    scored = sl.model_copy(update={**bare, "scoring": sl.scoring.model_copy(update={
        "bucket_thresholds": [0.65, 0.6, 0.25, 0.35], "label_thresholds": 13})})
    out = _text(scored, candidates=1)
    assert "  below their thresholds (0.65 / 0.6 / 0.25 / 0.35 by label frequency, 13 labels their own):" in out
    assert "below the threshold 0.5" not in out  # not the single threshold: it did not decide here


def test_each_label_says_the_rule_that_proposed_it_and_its_threshold():
    """A label the label-set vote proposed below its threshold, and a candidate, each with its own threshold (a
    newcomer saw labels at 0.208 proposed above a line 'below their thresholds (0.65 / ...)')."""
    voted = _examples()[-1]
    assert voted.schema_version == 6
    out = _text(voted, candidates=3).splitlines()
    assert out[1] == "  • odpuščanje  0.208  retrieval  label-set vote (below its threshold 0.65)"
    assert "  not proposed (thresholds by the label's frequency in the memory):" in out
    assert "  • sindikat    0.181  retrieval  below its threshold 0.25" in out
    assert not any("below their thresholds" in line for line in out)
    above = voted.model_copy(update={"labels": [voted.labels[0].model_copy(update={
        "decided_by": "threshold", "score": 0.71})], "candidates": [voted.candidates[0].model_copy(update={
            "score": 0.3})]})
    out = _text(above)
    assert "odpuščanje  0.710  retrieval  above its threshold 0.65" in out
    assert "sindikat    0.300  retrieval  above its threshold 0.25, outside the label-set vote's set" in out
    rules = [*voted.scoring.rules, {"name": "tail_support", "options": {"support": 3}}]
    tail = voted.model_copy(update={"labels": [voted.labels[0].model_copy(update={"decided_by": "tail_support"})],
                                    "scoring": voted.scoring.model_copy(update={"rules": ScoringInfo(
                                        rules=rules, source="defaults").rules})})
    assert "odpuščanje  0.208  retrieval  tail support: 3 close neighbours carry it (below its threshold 0.65)" \
        in _text(tail)


def test_the_label_count_rule_is_named_with_its_minimum():
    """With the label-count rule a label is proposed as one of the article's best labels, and a label at or above
    the rule's minimum that was not proposed is beyond the article's label count (not 'outside the label-set
    vote's set')."""
    voted = _examples()[-1]
    rules = ScoringInfo(rules=[{"name": "label_count", "options": {"minimum": 0.2}}], source="defaults").rules
    counted = voted.model_copy(update={
        "labels": [voted.labels[0].model_copy(update={"decided_by": "label_count", "threshold": 0.2})],
        "candidates": [voted.candidates[0].model_copy(update={"score": 0.2, "threshold": 0.2})],
        "scoring": voted.scoring.model_copy(update={"rules": rules, "bucket_thresholds": None})})
    out = _text(counted, candidates=3)
    assert ("  • odpuščanje  0.208  retrieval  label count: among the article's best labels, as many as its "
            "neighbours carry (at or above 0.2)") in out.splitlines()
    assert "sindikat    0.200  retrieval  at or above its minimum 0.2, beyond the article's label count" in out


def test_a_proposal_printed_to_a_file_keeps_each_line_whole():
    """The demo's and ``suggest``'s output in a file or a pipe (not a terminal: rich wraps it at 80 columns) keeps
    each line of the proposal whole, a long header and a label with its rule's reason included; a terminal of 80
    columns still wraps."""
    import io

    from newsmon.render import print_proposal

    p = _examples()[-1]
    header = "sl-test-41: 1 of 4 proposed labels right, gold " + ", ".join(["secop", "pogajanja"] * 8)
    want = render_proposal(p, ["odpuščanje"], neighbours=2, candidates=2, header=header).plain.splitlines()
    assert max(len(x) for x in want) > 80
    to_file = Console(file=io.StringIO(), width=80)
    assert not to_file.is_terminal
    print_proposal(to_file, p, gold=["odpuščanje"], neighbours=2, candidates=2, header=header)
    assert to_file.file.getvalue().splitlines() == want
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    print_proposal(terminal, p, gold=["odpuščanje"], neighbours=2, candidates=2, header=header)
    assert max(len(x) for x in terminal.file.getvalue().splitlines()) <= 80


def test_the_header_never_says_0_of_0():
    """Issue 28 item 6: a proposal with no label says so; one label is right or wrong, never "1 of 1"."""
    from newsmon.render import labels_right

    sr = _examples()[1]
    empty = sr.model_copy(update={"labels": []})
    assert _text(empty, gold=["нис"]).splitlines()[0] == "rts-2024-5391207: no label proposed, 1 gold"
    one = sr.model_copy(update={"labels": sr.labels[:1]})
    assert labels_right(one, ["нис"]) == "the proposed label right" and labels_right(one, []) == \
        "the proposed label wrong"
    assert labels_right(sr, ["нис"]) == "1 of 2 proposed labels right"
