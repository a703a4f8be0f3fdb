"""The label names: a label whose name occurs in the article is scored by how often that occurrence meant the label
in the knowledge memory, mixed into the newsmon scores with weight ``weight``::

    s_l = max(s_l(before), weight * q_l * g),
    q_l = (h_l + 1) / (m_l + 2)  where the name of l occurs in the article, else 0,
    g = 1 if max_l' s_l'(before) < unsure_below (or no unsure_below), else 0

``m_l`` is the number of memory articles in which the name of ``l`` occurs and ``h_l`` how many of them carry ``l``
(Laplace's rule of succession: a name never seen in the memory scores 1/2). Client topics and library subjects are
often named after what an article mentions (a company, a place, a strike); a label with a handful of articles has too
few neighbours for the retrieval to propose it, but its name in the text is evidence the memory can weigh: the lexical
matching of Annif's MLLM backend (Suominen, Inkinen and Lehtinen, "Annif and Finto AI: developing and implementing
automated subject indexing", JLIS.it 2022) reduced to one feature with its precision estimated on the memory.

The gate ``g`` lets the names speak only where the neighbours are unsure of the article (its best score before them
below ``unsure_below``): a memory may hold articles indexed with a few broad labels whatever they mention beside
articles indexed by what they mention (sentinews_sl: desk sections beside editors' keywords), and an article its
neighbours place firmly among the first kind keeps its label set.

A label's name is its text after the last ``:`` (``place:japan`` -> ``japan``; codes with a scheme prefix), cut into
words as the lexical index cuts them (:func:`newsmon.shared.terms.index_terms`: ``\\b\\w\\w+\\b``, lower-cased, after
:func:`~newsmon.shared.text.clean_text`). A word of up to 3 characters must occur whole (``usa``); a longer one is cut
to its first ``max(4, min(STEM, length - 1))`` characters and must start a word of the article (``stavka`` in
``stavke``, ``japan`` in ``Japanese``, ``earn`` in ``earnings``: truncation stemming, which serves inflected languages
without a stemmer for each: McNamee, Nicholas and Mayfield, "Addressing morphological variation in alphabetic
languages", SIGIR 2009). The name occurs when all its words do, in any order. Matching is linear in the article's
length: each distinct stem of the article is looked up once in a dictionary of the names' rarest stems (by memory
document frequency), and only those names are checked. The model holds, per memory label, its stems and ``(m_l, h_l)``:
a few dozen bytes a label, nothing per memory article.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring.arrays import load_arrays, save_arrays
from newsmon.shared.scoring.components.base import MemoryArticles, Queries, register_component
from newsmon.shared.scoring.components.label_tree import TopLabels, TopLabelsComponent, top_labels_out_of_fold
from newsmon.shared.scoring.retrieval import LabelVocab
from newsmon.shared.terms import index_terms

#: The longest and the shortest stem of a name's word (truncation stemming).
STEM = 6
SHORT = 4


def stems(text: str) -> set[str]:
    """What a name's stem may match in ``text``: each distinct word and its starts of :data:`SHORT` to :data:`STEM`
    characters that are shorter than the word (at most ``STEM - SHORT + 2`` keys a word)."""
    out: set[str] = set()
    for w in set(index_terms(text)):
        out.add(w)
        out.update(w[:k] for k in range(SHORT, min(STEM, len(w) - 1) + 1))
    return out


def name_stems(label: str) -> tuple[str, ...]:
    """The stems of a label's name (its text after the last ``:``), sorted: a word of up to :data:`SHORT`
    characters whole, a longer one cut to ``max(SHORT, min(STEM, length - 1))``; empty for a name without words."""
    return tuple(sorted({w if len(w) <= SHORT else w[:min(STEM, len(w) - 1)]
                         for w in index_terms(label.rsplit(":", 1)[-1])}))


@dataclass
class LabelNames:
    """The names of a memory's labels and how often each occurrence meant the label.

    Attributes:
        labels: ``L`` labels; names: their stems (``L`` sorted tuples, empty: never matched);
        matched: ``(L,)`` int64 ``m_l``, memory articles the name occurs in; hits: ``(L,)`` int64 ``h_l``, those of
        them that carry the label; key: per label the stem it is looked up by (its rarest), "" without one.
    """

    labels: list[str]
    names: list[tuple[str, ...]]
    matched: np.ndarray
    hits: np.ndarray
    key: list[str]
    _by_key: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {}
        for j, k in enumerate(self.key):
            if k:
                self._by_key.setdefault(k, []).append(j)

    def matches(self, article_stems: set[str]) -> list[int]:
        """The label indices whose names occur among ``article_stems`` (ascending)."""
        out = []
        for s in article_stems:
            for j in self._by_key.get(s, ()):
                if all(x in article_stems for x in self.names[j]):
                    out.append(j)
        return sorted(out)

    def scores(self, texts: Sequence[str]) -> TopLabels:
        """Per text, the labels whose names occur in it with ``q_l = (h_l + 1) / (m_l + 2)``, best first."""
        return self._top([self.matches(stems(t)) for t in texts], lambda i, js: (self.hits[js] + 1.0) /
                         (self.matched[js] + 2.0))

    def _top(self, found: list[list[int]], q: Callable[[int, np.ndarray], np.ndarray]) -> TopLabels:
        width = max((len(js) for js in found), default=0)
        out, labels = np.zeros((len(found), width), dtype=np.float32), []
        for i, js in enumerate(found):
            ix = np.asarray(js, dtype=np.int64)
            p = q(i, ix) if len(ix) else np.zeros(0)
            order = np.argsort(-p, kind="stable")
            labels.append([self.labels[ix[o]] for o in order])
            out[i, :len(order)] = p[order]
        return TopLabels(labels, out)


def fit_names(texts: Sequence[str], label_sets: Sequence[Iterable[str]]) -> LabelNames:
    """The :class:`LabelNames` of ``n`` memory articles (one pass over their texts)."""
    labels = sorted({lb for ls in label_sets for lb in ls})
    names = [name_stems(lb) for lb in labels]
    article_stems = [stems(t) for t in texts]
    df: dict[str, int] = {}
    for st in article_stems:
        for s in st:
            df[s] = df.get(s, 0) + 1
    key = [min(n, key=lambda s: (df.get(s, 0), -len(s), s)) if n else "" for n in names]
    model = LabelNames(labels, names, np.zeros(len(labels), np.int64), np.zeros(len(labels), np.int64), key)
    index = {lb: j for j, lb in enumerate(labels)}
    for st, ls in zip(article_stems, label_sets, strict=True):
        js = model.matches(st)
        model.matched[js] += 1
        carried = {index[lb] for lb in ls if lb in index}
        model.hits[[j for j in js if j in carried]] += 1
    return model


def out_of_fold(texts: Sequence[str], label_sets: Sequence[Sequence[str]]) -> TopLabels:
    """:meth:`LabelNames.scores` of ``n`` memory articles, each fold's from the names fitted on the other folds
    (:func:`~newsmon.shared.scoring.components.label_tree.top_labels_out_of_fold`): a label only the fold carries
    is not there for it, as a label new to the memory is not for an article to come."""
    return top_labels_out_of_fold(texts, label_sets, lambda t, ls, held: fit_names(t, ls).scores(held))


class LabelNamesOptions(Options):
    """The label names' options."""

    weight: float = Field(1.0, gt=0, le=1, allow_inf_nan=False, description="The names' weight in the mix (default "
                          "1: at the default threshold 0.5 a name proposes its label where it meant the label in more "
                          "than half of the memory articles it occurs in).")
    unsure_below: float | None = Field(
        None, gt=0, le=1, allow_inf_nan=False,
        description="The names score only articles whose best score before them is below this (where the "
        "neighbours are unsure); None: every article.")


@register_component
class LabelNamesComponent(TopLabelsComponent):
    """The label names (see the module docstring); its model is a :class:`LabelNames` of the memory's stored
    texts."""

    name = "label_names"
    Options = LabelNamesOptions
    NEEDS = ("texts",)
    RECHOOSES_THRESHOLD = False
    #: A prior in their favour (they only raise a score where the label's name occurs in the article): kept when
    #: their cross-fitted lift is above 0 (:data:`~newsmon.shared.scoring.calibration.selection.LIFTS`).
    KEEP = "lifts"
    GRID = tuple({"weight": w, "unsure_below": g} for g in (None, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
                 for w in (0.3, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0))

    def fit(self, memory: MemoryArticles, options: Any) -> LabelNames:
        return fit_names(memory.texts, memory.labels)

    def evidence(self, model: LabelNames, queries: Queries, options: Any) -> TopLabels:
        return model.scores(queries.texts)

    def held_out_evidence(self, model: LabelNames, memory: MemoryArticles, options: Any) -> TopLabels:
        return out_of_fold(memory.texts, memory.labels)

    def mix(self, scores: np.ndarray, vocab: LabelVocab, evidence: TopLabels, options: LabelNamesOptions
            ) -> np.ndarray:
        """``max(s, weight * q * g)`` for every label (``q = 0`` where the label's name does not occur; ``g = 0`` for
        an article whose best score ``s`` reaches ``unsure_below``): a name that occurs adds its label where
        ``weight * q`` reaches the label's threshold and never lowers a score."""
        before, q = evidence.dense(scores, vocab)
        w = np.float32(options.weight)
        if options.unsure_below is not None and before.shape[1]:
            w = w * (before.max(axis=1, keepdims=True) < options.unsure_below)
        return np.maximum(before, w * q)

    def save(self, model: LabelNames, folder: Path) -> None:
        save_arrays(folder / "label_names.npz", labels=np.array(model.labels, dtype=str),
                 names=np.array([" ".join(n) for n in model.names], dtype=str), matched=model.matched,
                 hits=model.hits, key=np.array(model.key, dtype=str))

    def load(self, folder: Path) -> LabelNames:
        z = load_arrays(folder / "label_names.npz")
        labels = [str(x) for x in z["labels"]]
        names = [tuple(str(x).split()) for x in z["names"]]
        return LabelNames(labels, names, z["matched"].astype(np.int64), z["hits"].astype(np.int64),
                          [str(x) for x in z["key"]])

