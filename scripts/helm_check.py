#!/usr/bin/env python3
"""Render the Helm chart helm/newsmon with a real Helm engine and validate every manifest.

    python scripts/helm_check.py [--out build/helm] [--image REF] [--kube-version 1.37.0 ...]
                                 [--case NAME=FILE[,FILE...]]

What it does:

1. Creates ``.venv-helm`` (Python 3.12 when there is one, else this interpreter) on first use and installs
   the pinned ``helm-python-sdk`` (Helm's own Go SDK, v4, as a shared library: no helm binary, no cluster)
   and ``kubernetes-validate`` (the Kubernetes OpenAPI JSON schemas, bundled), then re-runs itself there.
   Later runs reuse it (a stamp file records the pinned requirements).
2. For each case (default: ``default`` = values.yaml alone, ``gpu`` = values-gpu.yaml, ``full`` =
   ci/full-values.yaml, which turns every optional part on, ``embedded`` = ci/embedded-values.yaml, one pod
   without a Qdrant server): ``helm lint --strict`` and the equivalent of
   ``helm template newsmon helm/newsmon -n newsmon -f FILE``, with ``image.repository`` and ``image.tag`` set to
   the image that ``make image`` builds (``--image``, default ``$NEWSMON_IMAGE`` or
   ``localhost/newsmon:<version in pyproject.toml>``, the tag of scripts/build_image.sh) unless the case's
   values name an image themselves.
3. Validates every rendered manifest against the Kubernetes schemas of each ``--kube-version`` (default: 1.27,
   the oldest the chart supports, and 1.37, the newest bundled) in strict mode (unknown fields are errors).
   ``helm lint --strict`` runs with the newest. Kinds from CRDs have no schema there: the ServiceMonitor
   (monitoring.coreos.com/v1) is checked against a structural schema of the fields the chart emits
   (see ``CRD_SCHEMAS``); any other kind without a schema is an error.
4. Writes ``<out>/<case>.yaml`` (all manifests, hooks included, like ``helm template``),
   ``<out>/<case>.NOTES.txt`` (the chart's notes as ``helm install`` prints them) and ``<out>/report.json``, and
   exits non-zero when a case fails to render, lint or validate.

Why helm-python-sdk and not helm-sdkpy: helm-sdkpy 0.1.32 exposes install/upgrade against a live cluster
only (its C ABI has no template / dry-run / client-only entry point), so it cannot render offline.
helm-python-sdk's ``Chart.render`` is Helm's client-only rendering (the engine of ``helm template``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "newsmon"
VENV = ROOT / ".venv-helm"
# Pinned: the Helm engine (helm-c-sdk 0.2.2 over Helm v4.2.3) and the Kubernetes schemas (up to 1.37).
REQUIREMENTS = ["helm-python-sdk==0.2.2", "kubernetes-validate==1.37.0", "PyYAML>=6"]
STAMP = VENV / ".newsmon-requirements"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas bundled.
DEFAULT_KUBE_VERSIONS = ["1.27.0", "1.37.0"]
RELEASE, NAMESPACE = "newsmon", "newsmon"


def default_image() -> str:
    """The reference ``make image`` tags (scripts/build_image.sh): ``$NEWSMON_IMAGE``, else
    ``localhost/newsmon:<[project] version of pyproject.toml>``."""
    if os.environ.get("NEWSMON_IMAGE"):
        return os.environ["NEWSMON_IMAGE"]
    import re

    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project]", 1)[1].split("\n[", 1)[0]
    version = re.search(r'^version\s*=\s*"([^"]+)"', project, re.M).group(1)
    return f"localhost/newsmon:{version}"


def image_values(ref: str) -> dict:
    """``{"image": {"repository": ..., "tag": ...}}`` of an image reference (a digest stays in the tag)."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:  # no tag, or the colon belongs to a registry port
        name, tag = ref, "latest"
    return {"image": {"repository": name, "tag": tag}}


DEFAULT_CASES = {
    "default": [],
    "gpu": [CHART / "values-gpu.yaml"],
    "full": [CHART / "ci" / "full-values.yaml"],
    "embedded": [CHART / "ci" / "embedded-values.yaml"],
}

# Structural schemas of the CRD kinds the chart can emit (no schema for them in kubernetes-validate). They
# cover the fields the templates write, reject unknown ones where the CRD does, and check the types.
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
    "namespace": {"type": "string"}, "labels": _LABELS, "annotations": _LABELS}}
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
                "properties": {
                    "selector": {"type": "object", "additionalProperties": False, "properties": {
                        "matchLabels": _LABELS, "matchExpressions": {"type": "array"}}},
                    "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}}}},
                    "jobLabel": {"type": "string"},
                    "endpoints": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "additionalProperties": False, "properties": {
                            "port": {"type": "string"}, "targetPort": {"type": ["string", "integer"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?"
                                         "(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?"
                                              "(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array"}, "metricRelabelings": {"type": "array"}}}},
                }},
        },
    },
}


# ---------------------------------------------------------------------------------------------------------
# 1. The environment
# ---------------------------------------------------------------------------------------------------------

def _in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def _base_python() -> str:
    """Python 3.12 for the venv when there is one (HELM_CHECK_PYTHON wins), else this interpreter (>= 3.10
    is enough for helm-python-sdk)."""
    given = os.environ.get("HELM_CHECK_PYTHON")
    if given:
        return given
    candidates = [shutil.which("python3.12")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True)
    for c in candidates:
        if c and subprocess.run([c, "-c", "import venv, ensurepip"], capture_output=True).returncode == 0:
            return c
    if sys.version_info < (3, 10):
        sys.exit("helm_check: needs Python >= 3.10 (set HELM_CHECK_PYTHON)")
    return sys.executable


def ensure_venv() -> Path:
    """Create / update .venv-helm under a lock (pytest and make may run at once); returns its python."""
    import fcntl

    python = VENV / "bin" / "python"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    with open(__file__, "rb") as lock:  # lock this script's own file: no lock file to clean up
        fcntl.flock(lock, fcntl.LOCK_EX)
        works = python.exists() and subprocess.run(  # a complete venv whose base interpreter still exists
            [str(python), "-c", "import sys; assert sys.prefix != sys.base_prefix"], capture_output=True).returncode == 0
        if works and STAMP.exists() and STAMP.read_text() == wanted:
            return python
        t0 = time.monotonic()
        if not works:  # missing, or its base interpreter is gone
            shutil.rmtree(VENV, ignore_errors=True)
            base = _base_python()
            print(f"helm_check: creating {VENV.name} with {base}", file=sys.stderr, flush=True)
            subprocess.run([base, "-m", "venv", str(VENV)], check=True)
        print(f"helm_check: installing {' '.join(REQUIREMENTS)}", file=sys.stderr, flush=True)
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--require-virtualenv", *REQUIREMENTS],
                       check=True, env=env)
        STAMP.write_text(wanted)
        print(f"helm_check: {VENV.name} ready in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return python


# ---------------------------------------------------------------------------------------------------------
# 2-4. Render, lint, validate
# ---------------------------------------------------------------------------------------------------------

def load_values(files: list[Path], base: dict | None = None) -> dict:
    """``base`` and the values files merged in order, as ``helm --set ... -f A -f B`` would with the files
    winning (maps merge, the rest is replaced)."""
    import yaml

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    values: dict = dict(base or {})
    for f in files:
        values = merge(values, yaml.safe_load(Path(f).read_text(encoding="utf-8")) or {})
    return values


def render(values: dict) -> tuple[list[tuple[str, dict]], str]:
    """``helm template``: (template path, manifest) for every non-empty document, in template order, and the
    rendered NOTES.txt ("" when the chart has none)."""
    import helm_python as helm
    import yaml

    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or None, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs, notes = [], ""
    for source in sorted(rendered):
        if source.endswith("NOTES.txt"):
            notes = rendered[source]
        if not source.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(rendered[source]):
            if doc:
                docs.append((source, doc))
    return docs, notes


def lint(values: dict, kube_version: str) -> list[str]:
    """``helm lint --strict``: warnings and errors (info messages, e.g. "icon is recommended", pass)."""
    import helm_python as helm

    report = helm.lint(str(CHART), values or None, strict=True, namespace=NAMESPACE,
                       kube_version=f"v{kube_version}")
    problems = [f"{m['path']}: {m['error']}" for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    return problems + [str(e) for e in report.get("errors", [])]


def validate(doc: dict, kube_versions: list[str]) -> str:
    """Validate one manifest for each Kubernetes version; returns how ("schema" or "structure"); raises
    ValueError when invalid."""
    import jsonschema
    import kubernetes_validate

    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRD_SCHEMAS:
        errors = sorted(jsonschema.Draft7Validator(CRD_SCHEMAS[key]).iter_errors(doc), key=str)
        if errors:
            raise ValueError("; ".join(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                                       for e in errors))
        return "structure"
    for kube_version in kube_versions:
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(map(str, exc.path)) or "<root>"
            raise ValueError(f"Kubernetes {kube_version}: {path}: {exc.message}") from None
        except kubernetes_validate.SchemaNotFoundError:
            raise ValueError(f"no schema for {key[0]} {key[1]} in Kubernetes {kube_version} and no structural "
                             "schema in CRD_SCHEMAS") from None
    return "schema"


def run_case(name: str, files: list[Path], kube_versions: list[str], out: Path,
             image: str) -> tuple[dict, list[str]]:
    import helm_python as helm
    import yaml

    t0 = time.monotonic()
    errors: list[str] = []
    values = load_values(files, base=image_values(image))
    case = {"values_files": [str(Path(f).resolve().relative_to(ROOT)) if Path(f).resolve().is_relative_to(ROOT)
                             else str(f) for f in files], "manifests": []}
    try:
        docs, notes = render(values)
    except helm.HelmError as exc:
        case["render_error"] = str(exc)
        return case, [f"{name}: render failed: {exc}"]
    errors += [f"{name}: lint: {p}" for p in lint(values, kube_versions[-1])]
    parts = []
    for source, doc in docs:
        ident = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            how = validate(doc, kube_versions)
        except ValueError as exc:
            how = "invalid"
            errors.append(f"{name}: {ident} ({source}): {exc}")
        case["manifests"].append({"source": source, "apiVersion": doc.get("apiVersion"), "kind": doc.get("kind"),
                                  "name": doc.get("metadata", {}).get("name"), "validation": how})
        parts.append(f"# Source: {source}\n" + yaml.safe_dump(doc, sort_keys=False))
    (out / f"{name}.yaml").write_text("---\n".join(parts), encoding="utf-8")
    (out / f"{name}.NOTES.txt").write_text(notes, encoding="utf-8")
    case["image"] = f"{values['image']['repository']}:{values['image'].get('tag', '')}"
    case["seconds"] = round(time.monotonic() - t0, 2)
    return case, errors


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "helm", help="folder for the manifests")
    ap.add_argument("--image", default=None, metavar="REF",
                    help="image reference the cases render with (default: $NEWSMON_IMAGE or "
                         "localhost/newsmon:<version>, what `make image` builds)")
    ap.add_argument("--kube-version", action="append", default=[], dest="kube_versions",
                    help=f"Kubernetes version of the schemas, repeatable (default: {' and '.join(DEFAULT_KUBE_VERSIONS)})")
    ap.add_argument("--case", action="append", default=[], metavar="NAME=FILE[,FILE...]",
                    help="render these values files instead of the default cases (repeatable; NAME= for "
                         "the chart's defaults alone)")
    args = ap.parse_args(argv)
    args.kube_versions = args.kube_versions or DEFAULT_KUBE_VERSIONS
    args.image = args.image or default_image()

    if not _in_venv():
        python = ensure_venv()
        env = dict(os.environ, PYTHONNOUSERSITE="1")
        return subprocess.run([str(python), str(Path(__file__).resolve()), *argv], env=env).returncode

    from importlib import metadata

    import helm_python as helm

    cases = DEFAULT_CASES
    if args.case:
        cases = {}
        for spec in args.case:
            name, _, files = spec.partition("=")
            cases[name] = [Path(f) for f in files.split(",") if f]
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"engine": f"helm-python-sdk {helm.helm_c_version()} (Helm {helm.helm_sdk_version()})",
              "validator": f"kubernetes-validate {metadata.version('kubernetes-validate')}",
              "kube_versions": args.kube_versions, "image": args.image, "release": RELEASE, "namespace": NAMESPACE,
              "cases": {}}
    t0 = time.monotonic()
    errors: list[str] = []
    for name, files in cases.items():
        case, errs = run_case(name, files, args.kube_versions, args.out, args.image)
        report["cases"][name] = case
        errors += errs
        kinds = {}
        for m in case["manifests"]:
            kinds[m["kind"]] = kinds.get(m["kind"], 0) + 1
        print(f"helm_check: {name}: {len(case['manifests'])} manifests "
              f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), "
              f"{'FAILED' if errs else 'valid'} for Kubernetes {' and '.join(args.kube_versions)}")
    report["errors"] = errors
    report["seconds"] = round(time.monotonic() - t0, 2)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for e in errors:
        print(f"helm_check: ERROR {e}", file=sys.stderr)
    print(f"helm_check: {report['engine']}; manifests in {args.out}; {report['seconds']} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
