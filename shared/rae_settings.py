"""The scoring parameters of the ``newsmon`` predictor (``NEWSMON_RAE__*``, part of
:class:`newsmon.shared.config.Settings`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class RaeSettings(BaseModel):
    """Scoring of the proposals: simplified RAE-XMC (RAE-XMC eq. 8; k, tau, lambda, threshold: research defaults),
    the label keys and the product's decision rules (floor, label-set vote, label count, tail and new-label
    support), all off by default. A calibration record (``newsmon tune``) replaces the defaults; a field set
    explicitly here replaces the record's."""

    top_k: int = Field(50, ge=1, le=1000, description="Neighbours retrieved from the memory.")
    tau: float = Field(0.04, gt=0, allow_inf_nan=False, description="Softmax temperature over cosine similarities.")
    lam: float = Field(1.0, gt=0, allow_inf_nan=False, description="lambda: weight of the neighbours' label rows.")
    threshold: float = Field(0.5, ge=0, le=1, allow_inf_nan=False, description="A label is proposed when its score p > threshold.")
    floor: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, description="Propose the best label when no "
                                "label passes the threshold but its score reaches this (unset: off).")
    set_vote: float | None = Field(None, gt=0, le=1, allow_inf_nan=False, description="Label-set vote: propose the "
                                   "neighbours' exact label set that holds at least this share of the softmax weight "
                                   "(unset: off).")
    label_count: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, description="Label-count rule: each "
                                      "article gets its n best labels whose score reaches this, n the softmax-weighted "
                                      "mean label count of its top_k neighbours, rounded; replaces threshold, "
                                      "bucket_thresholds and label_thresholds (unset: off).")
    tail_support: int = Field(0, ge=0, le=100, description="Propose a label carried by at least this many of the "
                              "first tail_neighbours neighbours at cosine >= tail_similarity (0: off); lets a few "
                              "confirmed close articles carry a new or rare label.")
    tail_neighbours: int = Field(5, ge=1, le=100, description="Neighbours the tail-support rule looks at.")
    lexical_weight: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="Hybrid retrieval: weight w of "
                                  "the lexical (TF-IDF) similarity fused with the dense one, (1 - w) * dense + w * "
                                  "lexical, over the hybrid candidates (0: dense only).")
    lexical_candidates: int = Field(200, ge=1, le=1000, description="Hybrid retrieval: the memory's dense top-N "
                                    "united with its lexical top-N (IDF-weighted term overlap), re-ranked by the "
                                    "fusion.")
    tail_similarity: float = Field(0.9, ge=-1, le=1, allow_inf_nan=False, description="Minimum cosine of a "
                                   "tail-support neighbour.")
    new_label_support: int = Field(0, ge=0, le=100, description="Propose a label the calibration record never saw "
                                   "(confirmed since) carried by this many of the first new_label_neighbours "
                                   "neighbours at cosine >= new_label_similarity (0: off; needs a record).")
    new_label_neighbours: int = Field(20, ge=1, le=200, description="Neighbours the new-label rule looks at.")
    new_label_similarity: float = Field(0.8, ge=-1, le=1, allow_inf_nan=False, description="Its minimum cosine.")
    label_lambda: float = Field(0.0, ge=0, le=10, allow_inf_nan=False, description="lambda of RAE-XMC's label keys "
                                "(each label's prototype: the normalised sum of its memory articles' embeddings): "
                                "p = (neighbours' score + lambda * label keys' score) / (1 + lambda); 0: off.")
    label_keys: int = Field(10, ge=1, le=1000, description="Nearest label keys in the label keys' softmax.")
    label_tau: float = Field(0.01, gt=0, allow_inf_nan=False, description="Softmax temperature over the label keys' "
                             "cosines.")
    head_weight: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="beta of the head model (a "
                               "logistic regression over words and punctuation for each label on >= 100 memory "
                               "articles): a head label's score = (1 - beta) * score + beta * its probability; 0: off "
                               "(needs a calibration record: the workers fit it from the memory under each record).")
    head_c: float = Field(10.0, gt=0, allow_inf_nan=False, description="The head model's inverse regularisation C.")
    bucket_thresholds: tuple[float, float, float, float] | None = Field(
        None, description="One threshold per label-frequency bucket instead of threshold: labels carried by <= 10 "
        "memory articles (and labels new since the calibration), 11-99, 100-499, >= 500; unset: one threshold. "
        "Environment: a JSON list, e.g. [0.6, 0.5, 0.3, 0.35].")

    label_thresholds: dict[str, float] | None = Field(
        None, description="A threshold of its own for each label named (the calibration fits one for labels on >= "
        "100 memory articles, when it lifts on articles it was not fitted on), over threshold / bucket_thresholds; "
        "unset: none. Environment: a JSON object, e.g. {\"earn\": 0.4}.")

    @field_validator("bucket_thresholds")
    @classmethod
    def _thresholds_in_range(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is not None and not all(0.0 <= x <= 1.0 for x in v):
            raise ValueError(f"bucket thresholds must lie in [0, 1], got {list(v)}")
        return v

    @field_validator("label_thresholds")
    @classmethod
    def _label_thresholds_in_range(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        bad = {lb: t for lb, t in (v or {}).items() if not 0.0 <= t <= 1.0}
        if bad:
            raise ValueError(f"label thresholds must lie in [0, 1], got {bad}")
        return v
