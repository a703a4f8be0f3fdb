"""The classifier service object: encoder + knowledge memory (one collection per language and model version)
+ simplified RAE-XMC. Used by the CLI (``memory build``, ``suggest``) and by the workers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from newsmon.shared.config import RaeSettings, Settings
from newsmon.shared.data import Article
from newsmon.shared.predictors import LabelVocab, Proposal, Retrieval, explain, rae_xmc_scores

log = structlog.get_logger(__name__)

#: Article text kept in each memory point's payload (characters), so the nightly job can re-embed the memory
#: with a new model version without the original corpus.
TEXT_PAYLOAD_CHARS = 20_000


@dataclass
class BuildReport:
    """What ``memory build`` did: articles upserted per language, seconds spent embedding and upserting."""

    upserted: dict[str, int]
    embed_s: float
    upsert_s: float


def model_identity(settings: Settings) -> tuple[str, int]:
    """(model version, embedding dimension) of the encoder in production (the promoted one, else
    ``encoder.model``) without loading its weights."""
    from transformers import AutoConfig

    from newsmon.shared.encoder import model_fingerprint, resolve_model
    from newsmon.shared.promotion import effective_encoder_settings

    path = resolve_model(effective_encoder_settings(settings).model, settings.home)
    return model_fingerprint(path), int(AutoConfig.from_pretrained(path).hidden_size)


class MemoryRouter:
    """The knowledge memories of one model version: one collection per language, opened on first use.

    The memory of language ``lang`` is the collection ``<prefix>_<lang>_<model version>`` (embedded engine
    under ``settings.memory_path`` or the Qdrant server at ``settings.memory.url``). ``write_lock`` serialises
    read-modify-write updates of points between the workers of this process.
    """

    def __init__(self, settings: Settings, model_version: str, dim: int):
        import threading

        self.settings = settings
        self.model_version = model_version
        self.dim = dim
        self._memories: dict = {}
        self._open_lock = threading.Lock()
        self.write_lock = threading.RLock()
        self.closed = False

    def collection(self, lang: str) -> str:
        from newsmon.shared.memory import collection_name

        return collection_name(self.settings.memory.collection_prefix, lang, self.model_version)

    def memory(self, lang: str):
        """The knowledge memory of one language (opened on first use)."""
        from newsmon.shared.memory import open_memory

        with self._open_lock:
            if lang not in self._memories:
                m = self.settings.memory
                self._memories[lang] = open_memory(url=m.url, api_key=m.api_key, path=self.settings.memory_path,
                                                   collection=self.collection(lang), dim=self.dim)
            return self._memories[lang]

    def languages(self) -> list[str]:
        """Languages that have a collection of this model version."""
        prefix = self.settings.memory.collection_prefix
        suffix = self.collection("xx")[len(f"{prefix}_xx"):]
        if self.settings.memory.url:
            from qdrant_client import QdrantClient

            client = QdrantClient(url=self.settings.memory.url, api_key=self.settings.memory.api_key)
            try:
                names = [c.name for c in client.get_collections().collections]
            finally:
                client.close()
        else:
            root = Path(self.settings.memory_path)
            names = [p.name for p in root.iterdir() if p.is_dir()] if root.exists() else []
        pat = re.compile(rf"^{re.escape(prefix)}_([a-z]{{2}}){re.escape(suffix)}$")
        return sorted({m.group(1) for n in names if (m := pat.match(n))} | set(self._memories))

    def find(self, article_id: str, with_vectors: bool = False):
        """``(lang, MemoryPoint)`` of an article in any language collection, or None."""
        for lang in self.languages():
            point = self.memory(lang).get([article_id], with_vectors=with_vectors)[0]
            if point is not None:
                return lang, point
        return None

    def close(self) -> None:
        with self._open_lock:
            for m in self._memories.values():
                m.close()
            self._memories.clear()
            self.closed = True


_ROUTERS: dict[tuple, "MemoryRouter"] = {}
_ROUTERS_LOCK = __import__("threading").Lock()


def shared_router(settings: Settings, model_version: str, dim: int) -> MemoryRouter:
    """One :class:`MemoryRouter` per memory location and model version in this process: the embedded engine
    allows one open handle per collection directory, so workers of one process must share it."""
    key = (settings.memory.url or str(Path(settings.memory_path).resolve()), settings.memory.collection_prefix,
           model_version)
    with _ROUTERS_LOCK:
        router = _ROUTERS.get(key)
        if router is None or router.closed:
            router = _ROUTERS[key] = MemoryRouter(settings, model_version, dim)
        return router


def close_all_routers() -> None:
    """Close every router of this process (runtime shutdown)."""
    with _ROUTERS_LOCK:
        for router in _ROUTERS.values():
            router.close()
        _ROUTERS.clear()


class Classifier:
    """Proposes labels for articles from the knowledge memory (RAE-XMC eq. 8).

    Args:
        settings: encoder, memory and RAE-XMC settings.
        encoder: an already loaded :class:`shared.encoder.Encoder` (default: load one from settings).

    The memory of language ``lang`` is the collection ``<prefix>_<lang>_<model version>`` (embedded engine
    under ``settings.memory_path`` or the Qdrant server at ``settings.memory.url``). An article whose language
    has no labelled article yet is searched in every collection of this model version (cross-lingual
    retrieval).
    """

    def __init__(self, settings: Settings, encoder=None, router: MemoryRouter | None = None):
        from newsmon.shared.encoder import Encoder
        from newsmon.shared.promotion import effective_encoder_settings

        self.settings = settings
        self.encoder = encoder or Encoder(effective_encoder_settings(settings), settings.home)
        self.model_version = self.encoder.model_id
        self.router = router or shared_router(settings, self.model_version, self.encoder.dim)

    # -- memory -------------------------------------------------------------------------------------
    def collection(self, lang: str) -> str:
        return self.router.collection(lang)

    def memory(self, lang: str):
        """The knowledge memory of one language (opened on first use)."""
        return self.router.memory(lang)

    def languages(self) -> list[str]:
        """Languages that have a collection of this model version."""
        return self.router.languages()

    def add_articles(self, articles: Sequence[Article], progress: bool = False, batch: int = 64) -> BuildReport:
        """Embed (``passage`` role) and upsert labelled articles into their language's memory.

        Idempotent: an article id already present is overwritten with the new vector, labels and payload.
        """
        import time

        from tqdm import tqdm

        done: dict[str, int] = {}
        embed_s = upsert_s = 0.0
        bar = tqdm(total=len(articles), desc="memory build", unit="art", disable=not progress)
        for start in range(0, len(articles), batch):
            chunk = list(articles[start:start + batch])
            t0 = time.perf_counter()
            vecs = self.encoder.encode([a.text for a in chunk], role="passage")
            embed_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            for lang in sorted({a.lang for a in chunk}):
                idx = [i for i, a in enumerate(chunk) if a.lang == lang]
                self.memory(lang).upsert(
                    [chunk[i].id for i in idx], vecs[idx], [chunk[i].labels for i in idx],
                    [{"lang": lang, "title": chunk[i].title, "source": chunk[i].source,
                      "text": chunk[i].text[:TEXT_PAYLOAD_CHARS]} for i in idx])
                done[lang] = done.get(lang, 0) + len(idx)
            upsert_s += time.perf_counter() - t0
            bar.update(len(chunk))
        bar.close()
        return BuildReport(done, embed_s, upsert_s)

    # -- proposals ----------------------------------------------------------------------------------
    def retrieve(self, vectors: np.ndarray, langs: Sequence[str | None], top_k: int,
                 exclude: Sequence[str] = ()) -> Retrieval:
        """Top-k labelled neighbours of ``(m, d)`` float32 query vectors from each language's memory."""
        from newsmon.shared.memory import SearchFilter

        flt = SearchFilter(labelled=True, exclude_ids=tuple(exclude))
        known = [lg for lg in self.languages() if self.memory(lg).count(SearchFilter(labelled=True)) > 0]
        rows: list = [[] for _ in langs]
        for lang in sorted({lg or "" for lg in langs}):
            idx = [i for i, lg in enumerate(langs) if (lg or "") == lang]
            targets = [lang] if lang in known else known
            merged: list[list] = [[] for _ in idx]
            for t in targets:
                for pos, hits in enumerate(self.memory(t).search(vectors[idx], top_k, flt)):
                    merged[pos].extend(hits)
            for pos, i in enumerate(idx):
                rows[i] = sorted(merged[pos], key=lambda n: -n.similarity)[:top_k]
        return Retrieval.from_neighbours(rows, top_k)

    def propose(self, texts: Sequence[str], langs: Sequence[str | None] | None = None,
                rae: RaeSettings | None = None, vectors: np.ndarray | None = None,
                exclude: Sequence[str] = (), relabel=None) -> tuple[list[Proposal], np.ndarray]:
        """Label proposals for ``m`` articles.

        Args:
            texts: article texts; langs: ISO 639-1 per article (None: search every language);
            rae: k / tau / lambda / threshold (default from settings);
            vectors: ``(m, d)`` float32 embeddings when already computed (``query`` role);
            exclude: article ids never used as neighbours; relabel: a function applied to each neighbour's
            label tuple before scoring (the label registry: renames, retired labels).

        Returns:
            (proposals, the ``(m, d)`` float32 query embeddings).
        """
        rae = rae or self.settings.rae
        langs = list(langs) if langs is not None else [None] * len(texts)
        if vectors is None:
            vectors = self.encoder.encode(list(texts), role="query")
        r = self.retrieve(vectors, langs, rae.top_k, exclude)
        if relabel is not None:
            r.labels = [[relabel(lbs) for lbs in row] for row in r.labels]
        vocab = LabelVocab()
        rows = r.label_matrix(vocab)
        scores = rae_xmc_scores(r.sims, rows, rae.top_k, rae.tau, rae.lam, len(vocab)) if len(vocab) else \
            np.zeros((len(texts), 0), dtype=np.float32)
        return explain(r, scores, vocab, rae.threshold, rae.top_k), vectors

    def close(self) -> None:
        """Close the memories and the embedding cache."""
        self.router.close()
        self.encoder.close()
