"""``newsmon tune``: calibrate the knowledge memory (the ``newsmon`` predictor's parameters per language memory)
and print what was chosen, with the ablation of each decision rule.

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load the encoder and the Qdrant clients for every ``newsmon`` call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from newsmon.cli.common import console, corpus_or_fail, fail, settings_from_env


def tune_cmd(
    data: Annotated[Optional[Path], typer.Option(
        help="Corpus whose validation split is added to the memory's own articles (default: none; the "
             "memory is scored leave-one-out).")] = None,
    recalibrate: Annotated[bool, typer.Option("--recalibrate", help="Calibrate even when an earlier calibration "
                                              "has the same inputs.")] = False,
) -> None:
    """Calibrate the scoring of every language memory on its own articles (leave-one-out) plus the corpus's
    validation split, and store the calibration record that the workers, `suggest` and `eval` use.

    A language whose inputs (memory articles, model version, validation articles, settings, code) are those of
    an earlier calibration reuses it (in seconds) unless --recalibrate is given."""
    from newsmon.shared.classifier import Classifier  # deferred: see the module docstring

    s = settings_from_env()
    validation = []
    if data is not None:
        s.data = data
        validation = corpus_or_fail(s).split("validation")
    clf = Classifier(s)
    try:
        done = run_calibration(clf, validation, "tune", str(data) if data else None, reuse=not recalibrate)
    finally:
        clf.close()
    print_calibration(done)


def run_calibration(clf, validation, written_by: str, corpus: str | None, reuse: bool = True) -> dict:
    """:func:`newsmon.training_jobs.calibrate_memory.calibrate_memory`, failing with one line when there is nothing
    to calibrate."""
    from newsmon.training_jobs.calibrate_memory import calibrate_memory  # deferred: see the module docstring

    try:
        return calibrate_memory(clf, validation, written_by=written_by, corpus=corpus, reuse=reuse)
    except ValueError as exc:
        fail(str(exc))


def print_calibration(done: dict) -> None:
    """Print each language's chosen parameters and its ablation table (figures on the calibration articles)."""
    from newsmon.shared.scoring.records import record_id  # deferred: see the module docstring

    for lang, cal in done.items():
        r = cal.record
        f = r.figures
        if cal.reused:
            console.print(f"{lang}: reused the calibration {record_id(r)} (by {r.written_by}): "
                          f"memory, model, validation articles, settings and code unchanged (--recalibrate to "
                          "calibrate again)", soft_wrap=True, markup=False)
            if not cal.steps:
                console.print(f"{lang}: {r.params}; objective {f['objective']:.3f}", soft_wrap=True, markup=False)
                continue
        table = Table(title=f"calibration of {r.collection} ({r.fit_on['memory_articles_leave_one_out']} memory "
                            f"articles leave-one-out + {r.fit_on['validation_articles']} validation; "
                            f"{cal.seconds:.1f} s)")
        for col in ("step", "micro-F1", "subset acc.", "macro-F1", "objective", "kept", "why"):
            table.add_column(col)
        for st in cal.steps:
            table.add_row(st["step"] + _step_note(st), f"{100 * st['micro_f1']:.1f}",
                          f"{100 * st['subset_accuracy']:.1f}", f"{100 * st.get('macro_f1', 0.0):.1f}",
                          f"{st['objective']:.3f}", "yes" if st["kept"] else "no", st.get("why", ""))
        console.print(table)
        console.print(f"{lang}: {r.params}; objective {f['objective']:.3f} (bootstrap 90 % "
                      f"{f['objective_lo']:.3f}-{f['objective_hi']:.3f})")


def _step_note(step: dict) -> str:
    """What a step is judged by besides the calibration articles' objective: a lever's paired lift interval (on
    its cross-fitted proposals where it fits parameters on the articles), the new-label step's replay."""
    if "lift_interval" in step:
        lo, hi = step["lift_interval"]
        labels = f"{step['labels']} labels; " if "labels" in step else ""
        return f" ({labels}lift {lo:+.4f} to {hi:+.4f})"
    replay = step.get("replay")
    if not replay:
        return ""
    return (f" (replay of {replay['labels']} new labels: P {replay['precision']:.2f} R {replay['recall']:.2f} "
            f"F1 {replay['f1']:.3f}; 1-NN rule F1 {replay['one_nn_f1']:.3f})")
