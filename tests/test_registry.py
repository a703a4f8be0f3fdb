"""The one registry by name (:class:`newsmon.schemas.registry.Registry`): decision rules, score components,
predictors and memory engines are found by name through it, in registration order, with one error for an unknown
name, and the plug-ins of an entry-point group are imported once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from newsmon.schemas import scoring
from newsmon.schemas.registry import Registry
from newsmon.shared.predictors import PREDICTORS
from newsmon.shared.scoring.components import COMPONENTS, get_component
from newsmon.shared.scoring.rules import RULES, get_rule

REPO = Path(__file__).resolve().parents[1]


class Alpha:
    name = "alpha"


class Beta:
    name = "beta"


def test_names_in_registration_order_and_an_unknown_name_lists_them():
    reg: Registry[type] = Registry("widget", listing="available")
    assert reg.add("beta", Beta) is Beta and reg.add("alpha", Alpha) is Alpha
    assert reg.names() == ("beta", "alpha") and reg.values() == (Beta, Alpha) and list(reg) == ["beta", "alpha"]
    assert reg.get("alpha") is Alpha and "alpha" in reg and "gamma" not in reg and len(reg) == 2
    assert reg.find("gamma") is None
    with pytest.raises(KeyError, match=r"unknown widget 'gamma'; available: beta, alpha"):
        reg.get("gamma")
    reg.remove("beta")
    reg.remove("beta")  # forgetting twice is no error
    assert reg.names() == ("alpha",)


def test_a_class_decorator_registers_the_class_or_an_instance_of_it():
    classes: Registry[type] = Registry("predictor")
    objects: Registry[object] = Registry("rule", instances=True)
    assert classes.register(Alpha) is Alpha and classes.get("alpha") is Alpha
    assert objects.register(Beta) is Beta and type(objects.get("beta")) is Beta

    class Nameless:
        pass

    with pytest.raises(ValueError, match="Nameless has no name"):
        objects.register(Nameless)


def test_a_name_is_snake_case_and_taken_by_one_class():
    reg: Registry[object] = Registry("widget")
    reg.add("alpha", Alpha())
    reg.add("alpha", Alpha())  # the same class again (a module imported twice): replaced
    assert isinstance(reg.get("alpha"), Alpha) and len(reg) == 1
    with pytest.raises(ValueError, match="widget 'alpha' is already registered by Alpha"):
        reg.add("alpha", Beta())
    with pytest.raises(ValueError, match="Beta has no name"):
        reg.add("", Beta())
    for bad in ("Alpha", "al-pha", "1alpha", "a" * 65):
        with pytest.raises(ValueError, match="must be lower-case snake case"):
            reg.add(bad, Beta())
    assert reg.names() == ("alpha",)


def test_the_wire_and_the_scorer_read_one_registry_per_kind():
    assert RULES is scoring.RULES and COMPONENTS is scoring.COMPONENTS
    assert scoring.registered("rule") == RULES.names() and scoring.registered("component") == COMPONENTS.names()
    assert scoring.options_model("rule", "threshold") is get_rule("threshold").Options
    assert scoring.options_model("component", "label_keys") is get_component("label_keys").Options
    assert scoring.options_model("rule", "no_such_rule") is None
    # the unknown-name errors the scorer and eval gave before the one registry
    with pytest.raises(KeyError, match=r"unknown decision rule 'nope'; registered: threshold, "):
        get_rule("nope")
    with pytest.raises(KeyError, match=r"unknown score component 'nope'; registered: label_keys, "):
        get_component("nope")
    with pytest.raises(KeyError, match=r"unknown predictor 'nope'; available: rae, zshot, "):
        PREDICTORS.get("nope")


PLUGIN = '''
from pydantic import Field

from newsmon.schemas.scoring import Options
from newsmon.shared.scoring import DecisionRule, register_rule


class Opts(Options):
    minimum: float = Field(0.0, ge=0, le=1)


@register_rule
class FromPlugin(DecisionRule):
    name = "from_plugin"
    Options = Opts

    def apply(self, state, options):
        pass
'''

PROBE = '''
import json
from importlib.metadata import EntryPoint

loaded = []
_load = EntryPoint.load


def load(self):
    loaded.append(self.value)
    return _load(self)


EntryPoint.load = load
from newsmon.schemas.scoring import ScoringParams, registered  # noqa: E402

ScoringParams(rules=["threshold"])  # the wire asks the registry first: the group is loaded here
import newsmon.shared.scoring  # noqa: E402,F401

registered("rule"), registered("component")
print(json.dumps({"loaded": loaded, "rules": list(registered("rule"))}))
'''


@pytest.mark.slow  # a fresh process imports the group
def test_the_plug_ins_of_the_entry_point_group_are_imported_once(tmp_path):
    """A deployment's module named in the group ``newsmon.scoring`` is imported once per process, whichever of the
    wire and the scorer asks first, and its rule comes after the built-ins."""
    dist = tmp_path / "newsmon_plugin_probe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: newsmon-plugin-probe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[newsmon.scoring]\nprobe = newsmon_plugin_probe\n")
    (tmp_path / "newsmon_plugin_probe.py").write_text(textwrap.dedent(PLUGIN))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(got["loaded"]) == ["newsmon.shared.scoring", "newsmon_plugin_probe"], got["loaded"]
    assert got["rules"][-1] == "from_plugin" and got["rules"][0] == "threshold"
