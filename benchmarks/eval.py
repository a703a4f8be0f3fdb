"""The product row against the baselines and the peer a team would deploy (Annif), in one ``newsmon eval`` run.

Micro-F1, macro-F1 and subset accuracy on the test split of every method and of Annif's tfidf, omikuji Parabel,
omikuji Bonsai and ensemble projects (limit and threshold chosen on validation by micro-F1), with each row's wall
time and peak resident memory, and the ratios of the ``newsmon`` row to the best Annif row. This script is
``newsmon eval --record``; its options are the command's::

    python benchmarks/eval.py --data ../shared/data/sentinews_sl --methods newsmon,svm --peers annif
"""

from __future__ import annotations

import sys

from newsmon.cli import app

if __name__ == "__main__":
    sys.exit(app(["eval", "--record", *sys.argv[1:]]))
