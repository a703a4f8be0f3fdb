"""The scoring parameters: **one model** for the settings (``NEWSMON_SCORING__*``), the calibration record and
the wire (``LabelProposal.scoring``), so that a parameter cannot exist in one place and not in another.

* :class:`ScoringParams` is what runs: retrieval and RAE-XMC (``top_k``, ``tau``, hybrid retrieval's
  ``lexical_weight`` / ``lexical_candidates``), the thresholds, the **score components** mixed into the RAE-XMC
  scores (``components``, in order) and the **decision rules** (``rules``, in order). It is the type of the
  settings' ``scoring`` section and of a calibration record's ``params``.
* :class:`ScoringInfo` is its wire form (:meth:`ScoringParams.to_wire`): the same fields, the per-label
  thresholds as their count (each proposed label carries its own threshold), plus where the parameters came
  from (the calibration record's id, or the defaults and why).

A component or a rule is a name and its options (:class:`Step`). The rules and components are registered here
(:data:`RULES`, :data:`COMPONENTS`: one :class:`~newsmon.schemas.registry.Registry` each) by the code that
implements them (``newsmon.shared.scoring``), so the wire knows every registered name and its options model (the
JSON Schema's enums are generated from the registry) without the wire depending on the method, and a rule added
outside the package (a module of a deployment, a test) is validated, stored and sent like a built-in one, with no
new message version.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from newsmon.schemas.base import FiniteFloat, Name, Part
from newsmon.schemas.registry import NAME_PATTERN, Registry

__all__ = ["COMPONENTS", "ENTRY_POINTS", "RULES", "ComponentSpec", "Options", "RuleName", "RuleSpec", "ScoringInfo",
           "ScoringParams", "Step", "legacy_params", "options_model", "registered"]

Kind = Literal["rule", "component"]
#: The entry-point group whose modules register rules and components: this package's scorer
#: (``newsmon.shared.scoring``) and any deployment's. The wire finds them there, so it never imports the method.
ENTRY_POINTS = "newsmon.scoring"
#: The registered decision rules and score components (the objects of ``newsmon.shared.scoring``, each with its
#: ``Options`` model): the one registry of each kind, which the scorer reads and the wire validates names and
#: options against (:func:`options_model`).
RULES: Registry[Any] = Registry("decision rule", group=ENTRY_POINTS, instances=True)
COMPONENTS: Registry[Any] = Registry("score component", group=ENTRY_POINTS, instances=True)
_STEPS: dict[Kind, Registry[Any]] = {"rule": RULES, "component": COMPONENTS}


class Options(BaseModel):
    """Base of a rule's or a component's options (unknown options refused, values immutable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """``{field: default}`` of every field with a plain default (what the options are without calibration: the
        prior the calibration's choice takes when it is within the noise of the best)."""
        return {k: f.default for k, f in cls.model_fields.items() if not f.is_required() and f.default_factory is None}


def registered(kind: Kind) -> tuple[str, ...]:
    """The registered names of ``kind``, in registration order."""
    return _STEPS[kind].names()


def options_model(kind: Kind, name: str, load: bool = True) -> type[Options] | None:
    """The options model registered for ``name`` (None when the name is not registered in this process;
    ``load``: import the registering modules first, :data:`ENTRY_POINTS`)."""
    step = _STEPS[kind].find(name, load=load)
    return None if step is None else step.Options


class _Registered:
    """JSON Schema of a step name: the pattern, and the names registered when the schema is generated."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        names = registered(self.kind)
        if names:
            schema["enum"] = list(names)
        return schema


RuleName = Annotated[str, StringConstraints(pattern=NAME_PATTERN), _Registered("rule")]
"""A decision rule's name (its code on the wire)."""
ComponentName = Annotated[str, StringConstraints(pattern=NAME_PATTERN), _Registered("component")]


class Step(BaseModel):
    """One score component or decision rule: its registered name and its options (the options model's fields;
    defaults filled in when the name is registered in this process)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[Kind] = "rule"

    name: str
    options: dict[str, Any] = Field(default_factory=dict, description="The step's options (see its reference).")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value  # "threshold" = {"name": "threshold"}

    @model_validator(mode="after")
    def _known_options(self) -> Step:
        model = options_model(self.kind, self.name, load=False)
        if model is not None:
            object.__setattr__(self, "options", model(**self.options).model_dump(mode="json"))
        return self

    def parsed(self) -> Options:
        """The options as their registered model.

        Raises:
            KeyError: the name is not registered in this process.
        """
        model = options_model(self.kind, self.name)
        if model is None:
            raise KeyError(f"{self.kind} {self.name!r} is not registered; registered: {', '.join(registered(self.kind))}")
        return model(**self.options)


class RuleSpec(Step):
    """A decision rule and its options; the rules run in the order listed."""

    kind: ClassVar[Kind] = "rule"
    name: RuleName


class ComponentSpec(Step):
    """A score component mixed into the RAE-XMC scores and its options; mixed in the order listed."""

    kind: ClassVar[Kind] = "component"
    name: ComponentName


class ScoringCore(Part):
    """The fields the settings, the calibration record and the wire share."""

    top_k: int = Field(50, ge=1, le=1000, description="Neighbours k retrieved from the knowledge memory and "
                       "weighted by RAE-XMC (eq. 8).")
    tau: FiniteFloat = Field(0.04, gt=0, description="Temperature tau of the softmax over the neighbours' "
                             "similarities.")
    threshold: FiniteFloat = Field(0.5, ge=0, le=1, description="The threshold rule proposes a label whose score "
                                   "is above this (unless bucket or per-label thresholds replace it).")
    bucket_thresholds: tuple[FiniteFloat, FiniteFloat, FiniteFloat, FiniteFloat] | None = Field(
        None, description="One threshold per label-frequency bucket instead of threshold: labels on <= 10 memory "
        "articles (and labels new since the calibration), 11-99, 100-499, >= 500; unset: one threshold. "
        "Environment: a JSON list, e.g. [0.6, 0.5, 0.3, 0.35].")
    lexical_weight: FiniteFloat = Field(0.0, ge=0, le=1, description="Hybrid retrieval: weight w of the lexical "
                                        "(TF-IDF) similarity fused with the dense one, (1 - w) * dense + w * "
                                        "lexical (0: dense only).")
    lexical_candidates: int = Field(200, ge=1, le=1000, description="Hybrid retrieval: the memory's dense top-N "
                                    "united with its lexical top-N, re-ranked by the fusion.")
    components: list[ComponentSpec] = Field(default_factory=list, description="Score components mixed into the "
                                            "RAE-XMC scores, in order (e.g. label_keys, head_model). Environment: a "
                                            "JSON list of {name, options}.")
    rules: list[RuleSpec] = Field(default_factory=lambda: [RuleSpec(name="threshold"), RuleSpec(name="too_few_words")],
                                  description=(
        "Decision rules, applied in order (e.g. threshold, label_count, set_vote, tail_support, "
        "new_label_support, floor, too_few_words, far_from_memory). Environment: a JSON list of names or "
        "{name, options}."))

    @field_validator("bucket_thresholds")
    @classmethod
    def _thresholds_in_range(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is not None and not all(0.0 <= x <= 1.0 for x in v):
            raise ValueError(f"bucket thresholds must lie in [0, 1], got {list(v)}")
        return v

    def options_of(self, name: str) -> dict[str, Any] | None:
        """The options of rule or component ``name`` as sent (a dict; None when it is not listed): readable
        without the rule's code, e.g. by a consumer of the wire."""
        return next((s.options for s in (*self.rules, *self.components) if s.name == name), None)

    def rule(self, name: str) -> Options | None:
        """The options of rule ``name`` when it is in :attr:`rules`, else None."""
        return next((s.parsed() for s in self.rules if s.name == name), None)

    def component(self, name: str) -> Options | None:
        """The options of component ``name`` when it is in :attr:`components`, else None."""
        return next((s.parsed() for s in self.components if s.name == name), None)


class ScoringParams(ScoringCore):
    """What a proposal is scored with (see the module docstring). Every rule and component named must be
    registered in this process (:data:`RULES`, :data:`COMPONENTS`)."""

    lexical_search: bool = Field(
        True, description="Hybrid retrieval: the memory's lexical top-N (N = lexical_candidates) joins the dense "
        "top-N as candidates (a sparse search whose cost grows with the memory); false: the fusion re-ranks the "
        "dense top-N only. The calibration keeps the lexical search only where it lifts.")
    label_thresholds: dict[str, FiniteFloat] | None = Field(
        None, description="A threshold of its own for each label named (the calibration fits one for labels on >= "
        "100 memory articles, when it lifts on articles it was not fitted on), over threshold and "
        "bucket_thresholds; unset: none. Environment: a JSON object, e.g. {\"earn\": 0.4}.")

    @field_validator("label_thresholds")
    @classmethod
    def _label_thresholds_in_range(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        bad = {lb: t for lb, t in (v or {}).items() if not 0.0 <= t <= 1.0}
        if bad:
            raise ValueError(f"label thresholds must lie in [0, 1], got {bad}")
        return v

    @model_validator(mode="after")
    def _steps_registered(self) -> ScoringParams:
        for step in (*self.components, *self.rules):
            if options_model(step.kind, step.name) is None:
                raise PydanticCustomError("unknown_step", "{kind} {name} is not registered (registered: {known})",
                                          {"kind": step.kind, "name": repr(step.name),
                                           "known": ", ".join(registered(step.kind)) or "none"})
        return self

    def to_wire(self, calibration: str | None = None, source: str = "defaults", note: str | None = None
                ) -> ScoringInfo:
        """The wire form: the same fields (per-label thresholds as their count) and where they came from."""
        shared = self.model_dump(exclude={"label_thresholds", "lexical_search"})
        return ScoringInfo(**shared, label_thresholds=len(self.label_thresholds or {}), calibration=calibration,
                           source=source, note=note)


class ScoringInfo(ScoringCore):
    """The parameters a proposal was scored with (:meth:`ScoringParams.to_wire`), so the moderation tool and audits
    can tell runs apart. Proposals of versions 3 to 5 (flat rule fields) are read into this shape."""

    predictor: Name = Field("newsmon", description="The scoring method: newsmon (RAE-XMC with the calibrated "
                            "components and decision rules).")
    calibration: Name | None = Field(None, description="Id of the calibration record the parameters come from; "
                                     "null when none was used (see source and note).")
    source: Literal["calibration", "calibration+settings", "settings", "defaults"] = Field(
        "defaults", description="Where the parameters came from: a calibration record, a record with settings "
        "overriding some fields, the settings alone, or the defaults (no calibration record; note says why); v6.")
    note: Annotated[str, StringConstraints(max_length=500)] | None = Field(
        None, description="Why the parameters are what they are when it is not a calibration record; v6.")
    label_thresholds: int = Field(0, ge=0, description="How many labels had a threshold of their own (each "
                                  "proposed label carries its own threshold).")
    _legacy: int | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _read_legacy(cls, value: Any, handler: Any) -> ScoringInfo:
        legacy = isinstance(value, dict) and bool(_LEGACY_WIRE & set(value) or "components" not in value
                                                  and "rules" not in value and "source" not in value)
        out = handler(legacy_params(value) if legacy else value)
        out._legacy = _legacy_version(value) if legacy else None
        return out


#: Flat fields of versions 3 to 5 of the wire and of calibration records before layout version 2.
_LEGACY_RULES = ("floor", "set_vote", "label_count", "tail_support", "tail_neighbours", "tail_similarity",
                 "new_label_support", "new_label_neighbours", "new_label_similarity")
_LEGACY_COMPONENTS = ("label_lambda", "label_keys", "label_tau", "head_weight", "head_c", "lam")
_LEGACY_WIRE = frozenset(_LEGACY_RULES + _LEGACY_COMPONENTS)


def _legacy_version(value: dict) -> int:
    """The proposal version a legacy (flat) scoring payload needed."""
    if value.get("head_weight"):
        return 5
    if value.get("label_count") is not None:
        return 4
    if any(value.get(k) for k in ("floor", "set_vote", "tail_support", "new_label_support", "label_lambda",
                                  "bucket_thresholds", "label_thresholds")) or value.get("floor") == 0:
        return 3
    return 2


def legacy_params(value: dict[str, Any]) -> dict[str, Any]:
    """Flat parameters (calibration records of layout version 1, proposals of versions 3 to 5) in the
    components-and-rules shape: ``label_lambda`` / ``head_weight`` -> components, ``floor``, ``set_vote``,
    ``label_count``, ``tail_support``, ``new_label_support`` -> rules in the order they ran; ``lam`` (unused by the
    product's scoring) is dropped; the other fields are kept as they are."""
    v = {k: x for k, x in value.items() if k not in _LEGACY_WIRE}
    comps = []
    if value.get("label_lambda"):
        comps.append({"name": "label_keys", "options": {"weight": value["label_lambda"], **{
            o: value[f] for o, f in (("keys", "label_keys"), ("tau", "label_tau")) if value.get(f) is not None}}})
    if value.get("head_weight"):
        comps.append({"name": "head_model", "options": {"weight": value["head_weight"],
                                                        **({"c": value["head_c"]} if value.get("head_c") else {})}})
    rules: list[dict[str, Any]] = []
    rules.append({"name": "label_count", "options": {"minimum": value["label_count"]}}
                 if value.get("label_count") is not None else {"name": "threshold"})
    if value.get("set_vote") is not None:
        rules.append({"name": "set_vote", "options": {"share": value["set_vote"]}})
    for rule in ("tail", "new_label"):
        if value.get(f"{rule}_support"):
            rules.append({"name": f"{rule}_support", "options": {
                o: value[f"{rule}_{o}"] for o in ("support", "neighbours", "similarity")
                if value.get(f"{rule}_{o}") is not None}})
    if value.get("floor") is not None:
        rules.append({"name": "floor", "options": {"score": value["floor"]}})
    return {**v, "components": value.get("components", comps), "rules": value.get("rules", rules)}
