"""The label registry's invariants for every sequence of label events, in any order (issue 27 item 5), as
hypothesis property tests over random sequences of define / retire / add / rename on a few names, run on the
in-process registry and on the real Redis one side by side.

The issue's example: ``luka`` renamed to ``luka koper`` (4 examples); then ``pristanisce`` defined and renamed to
``luka`` was accepted (202) and dropped the first rename: ``GET /v1/labels/luka koper`` answered 404 and the 4 old
examples counted for the new ``luka``. A rename into a name that was renamed away is now refused, as a definition
of it was (409 in the API, the event dead-lettered with its reason), except the undo of that rename.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from newsmon.schemas import LabelDefinition
from newsmon.workers.labels import LabelConflict, LabelRegistry, RedisLabelRegistry, RegistryState, conflict

NAMES = ["luka", "luka koper", "pristanisce", "koper", "Luka"]  # "Luka" is "luka" in canonical form
CANON = sorted({n.lower() for n in NAMES})

action = st.one_of(
    st.tuples(st.just("defined"), st.sampled_from(NAMES), st.sampled_from(["kw1", "kw2", "kw3"])),
    st.tuples(st.just("retired"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("added"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("renamed"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
)


def run(reg: LabelRegistry, act: tuple) -> str | None:
    """Apply one action; the refusal's message, or None when applied."""
    kind, label, arg = act
    try:
        if kind == "defined":
            reg.define(label, LabelDefinition(kwes=[f"{arg} OR {label.replace(' ', '')}x"]))
        elif kind == "retired":
            reg.retire(label)
        elif kind == "added":
            reg.add(label)
        else:
            reg.rename(label, arg)
    except LabelConflict as exc:
        return str(exc)
    return None


def resolve(state: RegistryState, name: str) -> str:
    return state.renamed.get(name, name)


def view(state: RegistryState) -> tuple:
    return (state.renamed, state.retired, {k: d.kwes for k, d in state.definitions.items()})


def check_invariants(state: RegistryState, together: set[frozenset[str]], reg: LabelRegistry) -> None:
    renamed = state.renamed
    for old, new in renamed.items():  # no chains, no name renamed to itself
        assert new not in renamed and new != old, renamed
    assert not set(state.definitions) & set(renamed), "a definition on a name renamed away"
    assert not set(state.retired) & set(renamed), "a retirement on a name renamed away"
    for pair in together:  # a rename never loses history: names once one label stay one label
        a, b = sorted(pair)
        assert resolve(state, a) == resolve(state, b), (pair, renamed)
    for name in CANON:
        assert name in state.names_of(resolve(state, name))
    applied = reg.apply(CANON, state)
    assert len(set(applied)) == len(applied)
    assert all(x not in renamed and x not in state.retired for x in applied)
    assert set(applied) == {resolve(state, n) for n in CANON} - set(state.retired)


def check_sequence(registries: list[LabelRegistry], actions: list[tuple]) -> None:
    together: set[frozenset[str]] = set()
    before = [r.snapshot() for r in registries]
    for act in actions:
        kinds = {act[0]}
        refused = [run(r, act) for r in registries]
        after = [r.snapshot() for r in registries]
        assert len({why is None for why in refused}) == 1, (act, refused)  # both stores agree
        assert all(view(a) == view(after[0]) for a in after), act
        state, prior = after[0], before[0]
        # the one check of both stores and the API says the same beforehand
        expected = conflict(act[0], act[1], prior.renamed, prior.retired, act[2] if "renamed" in kinds else None)
        assert expected == refused[0], (act, expected, refused[0])
        for b, a, why in zip(before, after, refused, strict=True):
            if why is None:
                assert a.version > b.version
            else:
                assert view(a) == view(b) and a.version == b.version  # a refused event changes nothing
        if refused[0] is None and act[0] == "renamed":
            old, new = act[1].lower(), act[2].lower()
            together.add(frozenset((old, new)))
            moved = prior.definitions.get(old)
            if moved is not None:  # the old name's KwEs move to the new one
                assert set(moved.kwes) <= set(state.definitions[new].kwes)
        together = {p for p in together if len(p) == 2}
        check_invariants(state, together, registries[0])
        before = after


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(action, max_size=25))
def test_invariants_hold_for_every_sequence_in_process(actions):
    check_sequence([LabelRegistry()], actions)


@pytest.fixture(scope="module")
def redis_registry(redis_url):
    reg = RedisLabelRegistry(redis_url, f"newsmon-test-{uuid.uuid4().hex[:8]}:labels")
    yield reg
    reg.clear()


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(action, max_size=20))
def test_both_stores_agree_and_hold_the_invariants(redis_registry, actions):
    redis_registry.clear()
    check_sequence([LabelRegistry(), redis_registry], actions)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_the_issue_sequence_keeps_the_first_rename(store, request):
    """luka -> luka koper, then pristanisce defined and renamed to luka: refused, luka koper keeps luka's history;
    the undo of a rename (luka koper -> luka) is allowed and keeps both names' history too."""
    if store == "memory":
        reg = LabelRegistry()
    else:
        reg = RedisLabelRegistry(request.getfixturevalue("redis_url"), f"newsmon-test-{uuid.uuid4().hex[:8]}:labels")
    try:
        reg.define("luka", LabelDefinition(kwes=["luka*"]))
        reg.rename("luka", "luka koper")
        reg.define("pristanisce", LabelDefinition(kwes=["pristanišč*"]))
        with pytest.raises(LabelConflict, match="'luka' was renamed to 'luka koper'"):
            reg.rename("pristanisce", "luka")
        s = reg.snapshot()
        assert s.renamed == {"luka": "luka koper"} and s.names_of("luka koper") == ("luka koper", "luka")
        assert reg.apply(["luka", "pristanisce"], s) == ("luka koper", "pristanisce")
        for refused in (lambda: reg.retire("luka"), lambda: reg.add("luka"), lambda: reg.rename("luka", "x"),
                        lambda: reg.define("luka", LabelDefinition(kwes=["x"]))):
            with pytest.raises(LabelConflict, match="renamed to 'luka koper'"):
                refused()
        reg.retire("pristanisce")
        with pytest.raises(LabelConflict, match="retired"):
            reg.rename("pristanisce", "koper")
        reg.rename("luka koper", "luka")  # the undo
        s = reg.snapshot()
        assert s.renamed == {"luka koper": "luka"} and s.names_of("luka") == ("luka", "luka koper")
        assert s.definitions["luka"].kwes == ["luka*"]
    finally:
        if store == "redis":
            reg.clear()
