"""The model follower (:mod:`newsmon.workers.model_follower`): the one rule by which both workers follow the
promotion record between batches. The workers' own switching steps (loading the model, catching the memories up)
are tested end to end in ``tests/test_model_switch.py``; here the rule itself, with a real promotion record."""

from __future__ import annotations

from newsmon.shared.config import Settings
from newsmon.shared.promotion import atomic_write_json, promoted_file
from newsmon.workers.model_follower import ModelFollower


class Worker:
    """What a worker gives its follower: the version it serves, its switching step, its catch-up step."""

    def __init__(self, settings: Settings, version: str, accepts: bool = True) -> None:
        self.version, self.accepts = version, accepts
        self.switched: list[dict] = []
        self.replaced: list[dict | None] = []
        self.follower = ModelFollower(settings, lambda: self.version, self.switch, self.replaced.append)

    def switch(self, rec: dict) -> bool:
        self.switched.append(rec)
        if self.accepts:
            self.version = rec["model_version"]
        return self.accepts


def promote(s: Settings, version: str, replaces: str) -> dict:
    rec = {"model_path": f"/models/{version}", "model_version": version, "replaces": {"model_version": replaces,
                                                                                       "dim": 384}}
    atomic_write_json(promoted_file(s), rec)
    return rec


def test_without_a_promotion_nothing_switches_and_the_replaced_version_is_looked_for_once(tmp_path):
    w = Worker(Settings(home=tmp_path), "base")
    assert [w.follower.follow() for _ in range(3)] == [False, False, False]
    assert w.switched == [] and w.replaced == [None]


def test_a_promotion_is_switched_to_once_and_the_replaced_version_checked_after_it(tmp_path):
    s = Settings(home=tmp_path)
    w = Worker(s, "base")
    rec = promote(s, "tuned-1", "base")
    assert w.follower.follow()
    assert w.switched == [rec] and w.version == "tuned-1" and w.replaced == []
    assert not w.follower.follow()  # the same record: no reload
    assert w.switched == [rec] and w.replaced == [rec]
    rec2 = promote(s, "tuned-2", "tuned-1")  # the next night's promotion
    assert w.follower.follow() and w.version == "tuned-2"
    assert not w.follower.follow()
    assert w.switched == [rec, rec2] and w.replaced == [rec]  # the replaced version: once per process


def test_a_process_started_on_the_promoted_model_only_catches_up_from_the_replaced_one(tmp_path):
    s = Settings(home=tmp_path)
    rec = promote(s, "tuned-1", "base")
    w = Worker(s, "tuned-1")
    assert not w.follower.follow() and not w.follower.follow()
    assert w.switched == [] and w.replaced == [rec]


def test_a_switch_the_worker_declines_is_asked_again_at_the_next_check(tmp_path):
    """The memory updater declines when the settings resolve the model in use (its collections are the
    promoted ones already): nothing is marked seen, so it is asked again; the replaced version is still looked
    for once."""
    s = Settings(home=tmp_path)
    rec = promote(s, "tuned-1", "base")
    w = Worker(s, "base", accepts=False)
    assert not w.follower.follow() and not w.follower.follow()
    assert w.switched == [rec, rec] and w.replaced == [rec]


def test_following_off_reads_no_record(tmp_path):
    s = Settings(home=tmp_path, encoder={"follow_promoted": False})
    promote(s, "tuned-1", "base")
    w = Worker(s, "base")
    assert not w.follower.follow()
    assert w.switched == [] and w.replaced == [] and w.version == "base"
