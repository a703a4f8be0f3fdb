"""The rollout gate: the candidate's calibrated ``newsmon`` row against production's, on the same held-out articles.

Each side is calibrated by the one calibration (:func:`newsmon.training_jobs.calibrate_memory.calibrate_memory`: what
``memory build --calibrate`` and ``newsmon tune`` run) on its own collections of the knowledge memory plus the
corpus's validation split, and then measured by the scorer the workers run (:meth:`Classifier.propose
<newsmon.shared.classifier.Classifier.propose>`, with the record just written) on the corpus's test split, whose
articles are never used as neighbours. That measurement is the ``newsmon`` row (:data:`GATED`); the gate
(:func:`judge`) reads that row alone: a baseline's row (``rae``) may stand beside it in a report but never decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from newsmon.shared.classifier import Classifier
from newsmon.shared.data import Article
from newsmon.shared.metrics import classification_metrics
from newsmon.shared.scoring import LabelVocab
from newsmon.shared.scoring.records import record_id
from newsmon.training_jobs.calibrate_memory import calibrate_memory

#: The row the gate judges: the calibrated scorer, the one that serves.
GATED = "newsmon"
#: The figures of that row that must not fall beyond ``training.tolerance``: micro-F1 and subset accuracy.
JUDGED = ("uF1", "Acc")
#: Test articles proposed for per call of the scorer (bounds the memory of one call).
BATCH = 256


def judge(current: Mapping[str, Mapping[str, Any]], candidate: Mapping[str, Mapping[str, Any]],
          tolerance: float) -> tuple[bool, str]:
    """Promote or refuse, on the calibrated ``newsmon`` rows only.

    Args:
        current, candidate: rows per method, as in ``eval``'s report (``{"newsmon": {"uF1": 0.51, "Acc": 0.43,
            ...}, "rae": {...}}``; figures are fractions in [0, 1]), measured on the same articles; every row but
            ``newsmon`` is ignored.
        tolerance: how much micro-F1 or subset accuracy may fall (a fraction, ``training.tolerance``).

    Returns:
        (promoted, reason): promoted unless the candidate's micro-F1 or subset accuracy is below production's by
        more than ``tolerance``; the reason names the row and both figures, e.g. ``refused: calibrated newsmon
        uF1 33.7 < current 44.5 - tolerance 0.5``.

    Raises:
        ValueError: a side without a ``newsmon`` row, or a row without micro-F1 or subset accuracy.
    """
    for side, rows in (("current", current), ("candidate", candidate)):
        row = rows.get(GATED)
        if row is None or any(m not in row for m in JUDGED):
            raise ValueError(f"the {side} model has no calibrated {GATED} row with {' and '.join(JUDGED)} "
                             f"(rows: {sorted(rows)}): the gate judges that row only")
    cur, cand = current[GATED], candidate[GATED]
    worse = [m for m in JUDGED if cand[m] < cur[m] - tolerance]
    if worse:
        return False, "refused: " + ", ".join(f"calibrated {GATED} {m} {100 * cand[m]:.1f} < current "
                                              f"{100 * cur[m]:.1f} - tolerance {100 * tolerance:.1f}"
                                              for m in worse)
    return True, (f"promoted: calibrated {GATED} " + ", ".join(f"{m} {100 * cand[m]:.1f} vs {100 * cur[m]:.1f}"
                                                               for m in JUDGED)
                  + f" (tolerance {100 * tolerance:.1f})")


def calibrated_row(clf: Classifier, validation: Sequence[Article], test: Sequence[Article],
                   corpus: str | None = None) -> dict[str, Any]:
    """Calibrate ``clf``'s model version (every language memory, :func:`calibrate_memory` with ``written_by=
    "nightly"``; an earlier calibration of the same inputs is reused) and measure its scorer on ``test``.

    Args:
        clf: the classifier of one model version (its memory filled).
        validation: labelled articles not in the memory (the corpus's validation split), for the calibration.
        test: labelled held-out articles (the corpus's test split); never neighbours of one another.
        corpus: the corpus path, recorded in the calibration records.

    Returns:
        the row: :func:`newsmon.shared.metrics.classification_metrics` of the proposals (``uF1``, ``Acc``, ...,
        fractions in [0, 1]), ``model_version``, ``records`` (language -> the id of the calibration record written,
        :func:`newsmon.shared.scoring.records.record_id`), ``scored_with`` (the record ids the proposals name) and
        ``articles``.

    Raises:
        ValueError: no language memory holds labelled articles, or ``test`` is empty.
    """
    if not test:
        raise ValueError("the gate needs labelled held-out (test) articles")
    done = calibrate_memory(clf, validation, written_by="nightly", corpus=corpus)
    exclude = [a.id for a in test]
    props = []
    for i in range(0, len(test), BATCH):
        part = test[i:i + BATCH]
        props += clf.propose([a.text for a in part], [a.lang for a in part], exclude=exclude)[0]
    vocab = LabelVocab()
    gold = vocab.encode([a.labels for a in test])
    proposed = vocab.encode([sorted(p.label_set) for p in props])
    gold.resize(proposed.shape)  # labels only proposed widen the vocabulary after gold was encoded
    used = sorted({p.scoring.calibration for p in props if p.scoring is not None and p.scoring.calibration})
    return {**classification_metrics(gold, proposed), "model_version": clf.model_version,
            "records": {lang: record_id(c.record) for lang, c in done.items()}, "scored_with": used,
            "articles": len(test)}
