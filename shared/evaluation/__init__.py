"""Offline evaluation of the registered predictors on a labelled corpus (``newsmon eval``)."""

from newsmon.shared.evaluation.report import (LOW_SAMPLE_ARTICLES, format_ratios, markdown_table, table_notes,
                                              table_rows, write_outputs)
from newsmon.shared.evaluation.run import TUNE_TOP_K_MAX, EvalInputError, label_matrices, run_eval

__all__ = ["LOW_SAMPLE_ARTICLES", "TUNE_TOP_K_MAX", "EvalInputError", "format_ratios", "label_matrices",
           "markdown_table", "run_eval", "table_notes", "table_rows", "write_outputs"]
