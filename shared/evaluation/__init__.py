"""Offline evaluation of the registered predictors on a labelled corpus (``newsmon eval``)."""

from newsmon.shared.evaluation.report import markdown_table, table_rows, write_outputs
from newsmon.shared.evaluation.run import TUNE_TOP_K_MAX, EvalInputError, label_matrices, run_eval

__all__ = ["TUNE_TOP_K_MAX", "EvalInputError", "label_matrices", "markdown_table", "run_eval", "table_rows",
           "write_outputs"]
