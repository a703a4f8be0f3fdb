"""Same inputs, same record (issue 38): calibrating the same memory on the same validation articles twice, once
with one and once with two OpenMP / BLAS threads, in two processes, gives byte-identical calibration folders (the
record, its ablation and selection report, every stored model archive). Real weights, the real embedded engine, a
real slice of sentinews_sl; the home's calibration cache is not used (``reuse=False``), so both are computed, and
the runs get a home of their own (the session home's encoder artefacts and embedding cache linked in, not its
calibration cache, which the other modules' calibrations read)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
from pathlib import Path
from newsmon.shared.classifier import Classifier
from newsmon.shared.config import EncoderSettings, Settings
from newsmon.shared.data import load_corpus
from newsmon.shared.encoder import Encoder
from newsmon.shared.memory import MemoryRouter
from newsmon.training_jobs.calibrate_memory import calibrate_memory

home, memory, data = (Path(a) for a in sys.argv[1:4])
s = Settings(home=home)
s.memory.path = memory
enc = Encoder(EncoderSettings(), home)
clf = Classifier(s, encoder=enc, router=MemoryRouter(s, enc.model_id, enc.dim))
corpus = load_corpus(data)
clf.add_articles(corpus.split("train"))
[made] = calibrate_memory(clf, corpus.split("validation"), written_by="test", reuse=False).values()
assert not made.reused
clf.router.close()
enc.close()
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # two processes, each builds a memory with the real encoder and calibrates it
def test_one_and_two_threads_give_byte_identical_calibrations(newsmon_home, encoder, sentinews_slice, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    for entry in Path(newsmon_home).iterdir():  # the encoder (built by the fixture) and the embeddings, shared
        if entry.name != "calibrations":
            (home / entry.name).symlink_to(entry)
    got = {}
    for threads in (1, 2):
        env = dict(os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")})
        memory = tmp_path / f"memory-{threads}"
        subprocess.run([sys.executable, "-c", SCRIPT, str(home), str(memory), str(sentinews_slice)],
                       env=env, check=True, timeout=900)
        got[threads] = _files(memory / "calibration")
    one, two = got[1], got[2]
    assert any(name.endswith(".json") for name in one), sorted(one)  # a record was written
    assert sorted(one) == sorted(two)
    differ = [name for name in one if one[name] != two[name]]
    assert not differ, differ
