"""The decision rules' interface and registry: a rule is a small class (name, options, ``apply``) registered by
name; :attr:`ScoringParams.rules <newsmon.schemas.scoring.ScoringCore.rules>` lists the rules that run, in
order, each with its options. A rule reads the scores and the neighbours of ``m`` articles and changes what is
proposed (:class:`DecisionState`); the calibration tries each registered rule's options (:meth:`DecisionRule.grid`)
and keeps it where it lifts (:meth:`DecisionRule.keeps`).

A new rule is one module: a subclass of :class:`DecisionRule` decorated with :func:`register_rule` (registered in
:data:`RULES`, the registry the wire reads its options model from, so it is stored in calibration records and
written in proposals' ``scoring`` and ``decided_by`` without a new message version), plus one test. Rules outside
the package register the same way when their module is imported; a deployment names its modules in the entry-point
group ``newsmon.scoring``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from newsmon.schemas import scoring
from newsmon.schemas.registry import Registry
from newsmon.schemas.scoring import Options, ScoringParams, registered
from newsmon.shared.scoring.retrieval import LabelVocab, Retrieval

__all__ = ["RULES", "DecisionRule", "DecisionState", "code_of", "get_rule", "register_rule", "rules"]


@dataclass
class DecisionState:
    """What the rules decide for ``m`` articles over ``L`` labels, changed in place by each rule in turn.

    Attributes:
        retrieval: the articles' neighbours (after hybrid retrieval's fusion); vocab: the ``L`` labels.
        scores: ``(m, L)`` float32 scores (RAE-XMC with the components mixed in).
        params: the parameters the rules run under (k, tau, thresholds).
        proposed: ``(m, L)`` bool, the proposals so far (all False before the first rule).
        thresholds: ``(L,)`` float64, each label's threshold (the threshold rule sets them; 1.0 before).
        why: ``(m, L)`` int8 code of the rule that proposed each label (:func:`code_of`; -1: none), None when the
            caller wants no reasons.
        label_counts: memory articles per label (None: unknown); known_labels: the labels the calibration saw
            (None: no record, every label counts as known).
        texts: the ``m`` article texts (None offline where a rule needs none).
        abstained: per article, why the rules proposed nothing on purpose (None: they did not abstain).
    """

    retrieval: Retrieval
    vocab: LabelVocab
    scores: np.ndarray
    params: ScoringParams
    proposed: np.ndarray
    thresholds: np.ndarray
    why: np.ndarray | None = None
    label_counts: Mapping[str, int] | None = None
    known_labels: Collection[str] | None = None
    texts: Sequence[str] | None = None
    abstained: list[str | None] = field(default_factory=list)

    @classmethod
    def start(cls, retrieval: Retrieval, vocab: LabelVocab, scores: np.ndarray, params: ScoringParams,
              reasons: bool = False, **context: Any) -> DecisionState:
        """The state before the first rule: nothing proposed."""
        m, L = scores.shape
        return cls(retrieval, vocab, scores, params, np.zeros((m, L), dtype=bool), np.ones(L, dtype=np.float64),
                   np.full((m, L), -1, dtype=np.int8) if reasons else None, abstained=[None] * m, **context)

    def propose(self, extra: np.ndarray, rule: str) -> None:
        """Add the ``(m, L)`` bool proposals ``extra`` of ``rule`` (a label already proposed keeps its rule)."""
        if self.why is not None:
            self.why[extra & ~self.proposed] = code_of(rule)
        self.proposed |= extra

    def replace_rows(self, rows: np.ndarray, chosen: np.ndarray, rule: str) -> None:
        """In the articles ``rows`` (int indices), ``chosen`` ``(len(rows), L)`` bool replaces the proposals, all
        by ``rule``."""
        self.proposed[rows] = chosen
        if self.why is not None:
            self.why[rows] = np.where(chosen, code_of(rule), np.int8(-1))


class DecisionRule(ABC):
    """A decision rule (see the module docstring).

    Class attributes:
        name: the registry name, also the rule's code on the wire (``decided_by``).
        Options: its options model (a subclass of :class:`newsmon.schemas.scoring.Options`).
        GRID: the options the calibration tries, in order (empty: the calibration does not try the rule).
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[Options]] = Options
    GRID: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: Where the rule runs among the rules a calibration keeps (ascending; a rule that replaces proposals runs
    #: before the rules that add to them): threshold 0, label_count 10, set_vote 20, tail_support 30,
    #: new_label_support 40, floor 50, abstain 90; others 60 unless they say.
    ORDER: ClassVar[int] = 60
    #: When the calibration tries the rule (ascending): threshold 0, floor 10, set_vote 20, label_count 30,
    #: tail_support 40, others 50, abstain 70, new_label_support 80.
    CALIBRATE_AT: ClassVar[int] = 50
    #: How the calibration keeps the rule (:mod:`newsmon.shared.scoring.calibration.selection`): ``"holds"``, it
    #: must lift the objective beyond the noise; ``"not_worse"``, it may not lower it (a safety rule, one that
    #: serves labels the calibration articles hardly hold). Neither may lower a protected figure beyond the noise.
    KEEP: ClassVar[str] = "holds"
    #: Whether the calibration judges the rule by a replay of its own instead of the calibration articles' figures
    #: (left out of a calibration asked for no replay).
    REPLAY: ClassVar[bool] = False
    #: Whether the rule decides the proposals in place of the thresholds (an explicit threshold setting then
    #: replaces it with the rule that applies the thresholds: :func:`newsmon.shared.scoring.records.effective_scoring`).
    REPLACES_THRESHOLDS: ClassVar[bool] = False
    #: Whether the rule is the one that applies the thresholds (``threshold``, ``bucket_thresholds``,
    #: ``label_thresholds``).
    APPLIES_THRESHOLDS: ClassVar[bool] = False

    @abstractmethod
    def apply(self, state: DecisionState, options: Any) -> None:
        """Change ``state`` (proposals, thresholds, reasons, abstentions) by this rule with ``options``."""

    def neighbours_needed(self, options: Any) -> int:
        """Neighbours per article the rule reads (beyond ``top_k``); 1 for none."""
        return 1

    def grid(self, calibration: Any = None) -> list[Any]:
        """The options the calibration tries (``calibration``: the calibration set, for rules whose options
        depend on the data)."""
        return [self.Options(**g) for g in self.GRID]

    def calibrate(self, run: Any) -> None:
        """The calibration's step for this rule (``run``: a
        :class:`~newsmon.shared.scoring.calibration.run.CalibrationRun`): one of its options (:meth:`grid`), its
        default options when within the noise of the best, else the centre of those within it
        (:mod:`newsmon.shared.scoring.calibration.choice`), on top of
        the rules kept before it, on the scores so far, offered to the run and kept as :attr:`KEEP` says. Override
        it for a rule calibrated another way (a replay, thresholds of its own)."""
        options = self.grid(run.cal)
        if not options:
            return
        scores, choice = run.scores(), run.choice(prior=self.Options.defaults())  # taken when within the noise
        for option in options:
            trial = run.with_rule(self.name, option)
            choice.add_proposals(run.Y, run.decide(trial, scores=scores), option.model_dump(), trial)
        trial = choice.pick()[2]
        run.offer(f"+ {self.name}", trial, run.decide(trial, scores=scores), rule=self.KEEP)


#: The registered rules (the wire's registry of rules, :data:`newsmon.schemas.scoring.RULES`): ``@register_rule``
#: registers one (an instance of the class, under ``cls.name``; ValueError for no name, one that is not snake case
#: or one taken by another class), ``get_rule(name)`` finds it (KeyError for an unknown name, listing the
#: registered ones), ``rules()`` lists them in registration order (the built-ins first), ``unregister_rule(name)``
#: forgets one (a test that registered its own).
RULES: Registry[DecisionRule] = scoring.RULES
register_rule = RULES.register
get_rule = RULES.get
rules = RULES.values
unregister_rule = RULES.remove


def code_of(name: str) -> np.int8:
    """A rule's code in :attr:`DecisionState.why`: its index among the registered rule names."""
    return np.int8(registered("rule").index(name))
