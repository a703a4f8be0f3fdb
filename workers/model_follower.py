"""Following the promoted model between batches: one rule for both workers.

The nightly job promotes a model by writing the promotion record (:mod:`newsmon.shared.promotion`: the model's
version, where it lies, the version it replaced). Between batches each worker asks its :class:`ModelFollower`
whether the record names a model other than the one it serves (``encoder.follow_promoted`` on); if so the worker
switches (its own step: the classifier loads the model and catches its memories up,
:meth:`newsmon.workers.pipeline.ArticlePipeline.follow_promotion`; the memory updater writes to the promoted
version's collections and keeps the replaced ones, :meth:`newsmon.workers.decisions.DecisionService.follow_promotion`).
A record is switched to once: a process that switched, or whose model already is the promoted one, does not
reload for the same record. A process started after the promotion (no live switch) catches up from the version
the record says was replaced, once, at its first check.
"""

from __future__ import annotations

from collections.abc import Callable

from newsmon.shared.config import Settings
from newsmon.shared.promotion import read_promoted

__all__ = ["ModelFollower"]


class ModelFollower:
    """When to switch to the promoted model, and when to catch up from the replaced one.

    Args:
        settings: all settings (``encoder.follow_promoted``; the promotion record is read from ``home``).
        in_use: the model version the worker serves now (called at each check).
        switch: moves the worker onto the promoted model, given the promotion record; returns whether it
            switched (False: the model the settings resolve is the one in use, nothing to do).
        replaced: called once per process, at the first check that switched nothing, with the promotion record
            (None without one): carries over what the replaced version holds.
    """

    def __init__(self, settings: Settings, in_use: Callable[[], str], switch: Callable[[dict], bool],
                 replaced: Callable[[dict | None], None]) -> None:
        self.settings = settings
        self.in_use = in_use
        self.switch = switch
        self.replaced = replaced
        self.seen: str | None = None  # the promoted version last switched to, or found in use
        self._replaced_checked = False

    def follow(self) -> bool:
        """Between batches: switch when the promotion record names a version that is neither in use nor switched
        to already; else (once per process) catch up from the replaced version. Returns whether the model
        changed.

        Raises:
            Exception: what ``switch`` or ``replaced`` raise (the workers run this as a dependency call:
                :func:`newsmon.workers.policy.switch_model`).
        """
        if not self.settings.encoder.follow_promoted:
            return False
        rec = read_promoted(self.settings)
        version = rec.get("model_version") if rec else None
        if rec is not None and version is not None and version != self.seen and version != self.in_use():
            if self.switch(rec):
                self.seen = version
                return True
        else:
            self.seen = version
        if not self._replaced_checked:
            self._replaced_checked = True
            self.replaced(rec)
        return False
