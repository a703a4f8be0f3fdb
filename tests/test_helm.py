"""The Helm chart helm/newsmon, rendered by a real Helm engine (scripts/helm_check.py: Helm's Go SDK through
helm-python-sdk in .venv-helm, created on first use) and validated against the Kubernetes schemas there.
These tests assert on the rendered manifests: security, probes, resources, GPU scheduling, the settings split
between ConfigMap and Secret (checked against the real settings model), and the chart's guards."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from newsmon.shared.config import PRODUCTION_MODEL, Settings
from newsmon.shared.settings_reference import settings_reference

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "helm_check.py"
SECRET_KEYS = {"NEWSMON_KAFKA__SASL_PASSWORD", "NEWSMON_MEMORY__API_KEY", "NEWSMON_WORKER__REDIS_URL",
               "NEWSMON_TRAINING__OPTUNA_STORAGE", "NEWSMON_API__TOKEN"}
PENDING_SETTINGS: set[str] = set()  # settings the chart would set ahead of the code (none now)
SETTINGS = set(re.findall(r"^\| `(NEWSMON_[A-Z0-9_]+)` \|", settings_reference(), re.M)) | PENDING_SETTINGS
WORKERS = {"newsmon-classifier": ["newsmon", "worker", "classifier"],
           "newsmon-memory-updater": ["newsmon", "worker", "memory-updater"]}
PYPROJECT_VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
BUILT_IMAGE = f"localhost/newsmon:{PYPROJECT_VERSION}"  # what `make image` (scripts/build_image.sh) tags


def run_check(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NEWSMON_IMAGE"}  # the default image reference
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=900, env=env)


def render_values(tmp_path: Path, name: str, values: dict) -> tuple[list[dict], str]:
    """The chart rendered with these values (over values.yaml): (manifests, NOTES.txt); fails when invalid."""
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(values))
    proc = run_check(tmp_path / "out", "--case", f"{name}={f}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = [d for d in yaml.safe_load_all((tmp_path / "out" / f"{name}.yaml").read_text()) if d]
    return docs, (tmp_path / "out" / f"{name}.NOTES.txt").read_text()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{"report": report.json, "default"|"gpu"|"full"|"embedded": [manifests], "notes": {case: NOTES.txt}} from
    one run of the script."""
    out = tmp_path_factory.mktemp("helm")
    proc = run_check(out)
    assert proc.returncode == 0, f"helm_check failed:\n{proc.stdout}\n{proc.stderr}"
    report = json.loads((out / "report.json").read_text())
    result = {"report": report, "notes": {}}
    for case in report["cases"]:
        result[case] = [d for d in yaml.safe_load_all((out / f"{case}.yaml").read_text()) if d]
        result["notes"][case] = (out / f"{case}.NOTES.txt").read_text()
    return result


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def one(docs, kind, name=None):
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(docs, jobs=True):
    """(owner name, pod spec) of every Deployment, CronJob and (with ``jobs``) Job."""
    for d in docs:
        if d["kind"] == "Deployment" or (jobs and d["kind"] == "Job"):
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]
        elif d["kind"] == "CronJob":
            yield d["metadata"]["name"], d["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def config_data(docs):
    cm = one(docs, "ConfigMap", "newsmon-config")["data"]
    data = one(docs, "Secret", "newsmon-secret").get("data") or {}  # no data at all: null
    secret = {k: base64.b64decode(v).decode() for k, v in data.items()}
    return cm, secret


CASES = ["default", "gpu", "full"]  # a Qdrant server: classifier and memory updater in their own Deployments
ALL_CASES = CASES + ["embedded"]   # + ci/embedded-values.yaml: one pod without a Qdrant server


def test_every_manifest_rendered_and_validated(rendered):
    report = rendered["report"]
    assert report["errors"] == []
    assert set(report["cases"]) == set(ALL_CASES)
    for case, info in report["cases"].items():
        assert info["manifests"], case
        for m in info["manifests"]:
            expected = "structure" if m["apiVersion"] == "monitoring.coreos.com/v1" else "schema"
            assert m["validation"] == expected, (case, m)
        assert len(info["manifests"]) == len(rendered[case])
    kinds = {m["kind"] for m in report["cases"]["full"]["manifests"]}
    assert kinds == {"ConfigMap", "Secret", "ServiceAccount", "Deployment", "CronJob", "Job", "Service",
                     "ServiceMonitor", "HorizontalPodAutoscaler", "PersistentVolumeClaim"}
    assert report["kube_versions"] == ["1.27.0", "1.37.0"]


POD_OWNERS = {"default": {*WORKERS, "newsmon-training"}, "gpu": {*WORKERS, "newsmon-training"},
              "full": {*WORKERS, "newsmon-training", "newsmon-api", "newsmon-topics"},
              "embedded": {"newsmon-worker"}}


@pytest.mark.parametrize("case", ALL_CASES)
def test_security_context_on_every_container(rendered, case):
    specs = list(pod_specs(rendered[case]))
    assert {name for name, _ in specs} == POD_OWNERS[case]
    for name, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec["automountServiceAccountToken"] is False, name
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, (name, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])
            assert not sc["capabilities"].get("add"), (name, c["name"])
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", (name, c["name"])
            assert sc.get("privileged", False) is False, (name, c["name"])


@pytest.mark.parametrize("case", CASES)
def test_writable_volumes_for_home_and_tmp(rendered, case):
    cm, _ = config_data(rendered[case])
    for name, spec in pod_specs(rendered[case], jobs=False):  # the topics Job: test_topics_hook_job
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["/tmp"] == "tmp" and "emptyDir" in volumes["tmp"], name
        assert mounts[cm["NEWSMON_HOME"]] == "home", name
        assert cm["HF_HOME"].startswith(cm["NEWSMON_HOME"] + "/")
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["HOME"] == "/tmp", name
        if case == "full":  # one shared volume: the nightly job's promotions reach the workers
            assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "newsmon-home"}, name
        else:
            assert "emptyDir" in volumes["home"], name
    if case == "full":
        pvc = one(rendered[case], "PersistentVolumeClaim", "newsmon-home")
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    else:
        assert not find(rendered[case], "PersistentVolumeClaim")


@pytest.mark.parametrize("case", CASES)
def test_workers_have_probes_ports_and_commands(rendered, case):
    docs = rendered[case]
    cm, _ = config_data(docs)
    port = int(cm["NEWSMON_WORKER__HTTP_PORT"])
    assert port == 8000
    for name, command in WORKERS.items():
        dep = one(docs, "Deployment", name)
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        assert c["command"] == command
        assert {"name": "http", "containerPort": port, "protocol": "TCP"} in c["ports"]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        # the startup probe leaves minutes for loading (and on a fresh volume downloading) bge-m3
        assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 600
        assert [e["configMapRef"]["name"] for e in c["envFrom"] if "configMapRef" in e] == ["newsmon-config"]
        assert [e["secretRef"]["name"] for e in c["envFrom"] if "secretRef" in e] == ["newsmon-secret"]
    mu = one(docs, "Deployment", "newsmon-memory-updater")
    assert mu["spec"]["replicas"] == 1


@pytest.mark.parametrize("case", ALL_CASES)
def test_resources_set_on_every_container(rendered, case):
    for name, spec in pod_specs(rendered[case]):
        for c in spec["containers"]:
            res = c["resources"]
            assert res["requests"]["cpu"] and res["requests"]["memory"], name
            assert res["limits"]["memory"], name


def test_gpu_values_schedule_the_classifier_on_a_gpu(rendered):
    dep = one(rendered["gpu"], "Deployment", "newsmon-classifier")
    spec = dep["spec"]["template"]["spec"]
    res = spec["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == 1 and res["requests"]["nvidia.com/gpu"] == 1
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["NEWSMON_ENCODER__DEVICE"] == "cuda"
    assert 64 <= int(env["NEWSMON_WORKER__BATCH_MAX_MESSAGES"]) <= 128
    assert 64 <= int(env["NEWSMON_ENCODER__BATCH_SIZE"]) <= 128
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0  # no spare GPU for a surge pod
    # the memory updater stays on CPU nodes
    mu = one(rendered["gpu"], "Deployment", "newsmon-memory-updater")["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in mu["containers"][0]["resources"].get("limits", {})
    assert "nodeSelector" not in mu and "tolerations" not in mu


def test_default_values_need_no_gpu(rendered):
    for name, spec in pod_specs(rendered["default"]):
        assert "nvidia.com/gpu" not in json.dumps(spec["containers"][0]["resources"]), name
        assert "nodeSelector" not in spec and "tolerations" not in spec, name


@pytest.mark.parametrize("case", CASES)
def test_nightly_training_cronjob(rendered, case):
    cj = one(rendered[case], "CronJob", "newsmon-training")
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    assert cj["spec"]["schedule"] == "0 2 * * *"
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["containers"][0]["command"] == ["newsmon", "train", "nightly"]
    if case == "gpu":
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    if case == "full":  # the corpus from its own volume, read-only
        assert env["NEWSMON_DATA"] == "/data/articles.jsonl"
        assert mounts["data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
        assert {"name": "data", "persistentVolumeClaim": {"claimName": "newsmon-corpus", "readOnly": True}} \
            in pod["volumes"]
    else:  # the corpus in the home volume
        cm, _ = config_data(rendered[case])
        assert env["NEWSMON_DATA"].startswith(cm["NEWSMON_HOME"] + "/") and "data" not in mounts


def _env_names(docs, plain=False):
    """Names of the containers' env entries (with ``plain``: only those with a literal value)."""
    names = set()
    for _, spec in pod_specs(docs):
        names |= {e["name"] for e in spec["containers"][0]["env"] if not plain or "value" in e}
    return names


@pytest.mark.parametrize("case", CASES)
def test_settings_split_between_configmap_and_secret(rendered, case):
    docs = rendered[case]
    cm, secret = config_data(docs)
    assert not SECRET_KEYS & set(cm), "a secret setting is in the ConfigMap"
    assert set(secret) <= SECRET_KEYS and "NEWSMON_WORKER__REDIS_URL" in secret
    assert not SECRET_KEYS & _env_names(docs, plain=True), "a secret setting is a plain env value"
    for value in secret.values():
        assert value not in json.dumps(cm)
    # every NEWSMON_* variable the chart sets is a real setting (the settings reference)
    newsmon_vars = {k for k in set(cm) | set(secret) | _env_names(docs) if k.startswith("NEWSMON_")}
    assert newsmon_vars <= SETTINGS, newsmon_vars - SETTINGS
    # production defaults
    assert cm["NEWSMON_ENCODER__MODEL"] == PRODUCTION_MODEL
    assert cm["NEWSMON_ENCODER__POOLING"] == "cls" and cm["NEWSMON_ENCODER__MAX_LENGTH"] == "8192"
    assert cm["NEWSMON_ENCODER__QUERY_PREFIX"] == "" and cm["NEWSMON_ENCODER__PASSAGE_PREFIX"] == ""
    assert cm["NEWSMON_ENCODER__RUNTIME"] == "torch"  # onnx-int8 is measured for e5-small only
    assert cm["NEWSMON_LOG_FORMAT"] == "json"
    # the workers never create topics (a replication factor of 1): the hook Job or the cluster's admins do
    assert cm["NEWSMON_KAFKA__CREATE_TOPICS"] == "false"
    assert int(cm["NEWSMON_KAFKA__MIN_INSYNC_REPLICAS"]) < int(cm["NEWSMON_KAFKA__REPLICATION_FACTOR"])
    for key in ("NEWSMON_KAFKA__BOOTSTRAP_SERVERS", "NEWSMON_KAFKA__SECURITY_PROTOCOL", "NEWSMON_MEMORY__URL",
                "NEWSMON_KAFKA__TOPIC_ARTICLES", "NEWSMON_KAFKA__TOPIC_PROPOSALS", "NEWSMON_KAFKA__TOPIC_DECISIONS",
                "NEWSMON_KAFKA__TOPIC_LABEL_EVENTS", "NEWSMON_WORKER__BATCH_MAX_MESSAGES", "NEWSMON_HOME"):
        assert cm[key], key


def test_full_values_put_every_secret_in_the_secret(rendered):
    cm, secret = config_data(rendered["full"])
    assert set(secret) == SECRET_KEYS
    assert cm["NEWSMON_KAFKA__SECURITY_PROTOCOL"] == "SASL_SSL"
    assert cm["NEWSMON_KAFKA__SASL_MECHANISM"] == "SCRAM-SHA-512" and cm["NEWSMON_KAFKA__SASL_USERNAME"]
    assert cm["NEWSMON_KAFKA__SSL_CA_LOCATION"] == "/etc/newsmon/kafka-ca/ca.crt"
    assert cm["NEWSMON_WORKER__MAX_MESSAGE_BYTES"] == "2000000"  # no 2e+06 from YAML floats
    for _, spec in pod_specs(rendered["full"]):
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert "/etc/newsmon/kafka-ca" in mounts


@pytest.mark.parametrize("case", CASES)
def test_rendered_settings_load_in_the_settings_model(rendered, case, monkeypatch):
    """The ConfigMap + Secret (+ a worker's own env) are accepted by shared.config.Settings as they stand."""
    docs = rendered[case]
    cm, secret = config_data(docs)
    spec = one(docs, "Deployment", "newsmon-classifier")["spec"]["template"]["spec"]
    own = {e["name"]: e["value"] for e in spec["containers"][0]["env"] if "value" in e}
    for k in [k for k in os.environ if k.startswith("NEWSMON_")]:
        monkeypatch.delenv(k)
    for k, v in {**cm, **secret, **own}.items():
        monkeypatch.setenv(k, v)
    s = Settings(_env_file=None)
    assert s.encoder.model == PRODUCTION_MODEL and s.encoder.pooling == "cls" and s.encoder.max_length == 8192
    assert s.encoder.query_prefix == "" and s.encoder.passage_prefix == ""
    assert s.log_format == "json" and s.worker.http_port == 8000
    assert s.memory.url and s.worker.redis_url
    assert s.kafka.create_topics is False
    assert s.kafka.replication_factor == 3 and s.kafka.min_insync_replicas == 2  # `newsmon topics create` applies
    assert str(s.home) == cm["NEWSMON_HOME"]
    assert s.encoder.cache is False  # the classifier's own override
    if case == "gpu":
        assert s.encoder.device == "cuda" and s.worker.batch_max_messages == 128
    if case == "full":
        assert s.kafka.sasl_password.get_secret_value() == secret["NEWSMON_KAFKA__SASL_PASSWORD"]
        assert s.kafka.client_options == {"ssl.endpoint.identification.algorithm": "https"}
        assert s.kafka.create_topics is False and s.kafka.topic_partitions == 12
        assert s.training.optuna_storage.get_secret_value() == secret["NEWSMON_TRAINING__OPTUNA_STORAGE"]


@pytest.mark.parametrize("case", CASES)
def test_metrics_service_and_scrape_config(rendered, case):
    docs = rendered[case]
    for name in WORKERS:
        dep = one(docs, "Deployment", name)
        svc = one(docs, "Service", f"{name}-metrics")
        assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
        assert svc["spec"]["ports"] == [{"name": "http-metrics", "port": 8000, "targetPort": "http",
                                         "protocol": "TCP"}]
        ann = dep["spec"]["template"]["metadata"]["annotations"]
        assert "checksum/config" in ann and "checksum/secret" in ann
        if case == "full":  # ServiceMonitor on: no double scrape through annotations
            assert "prometheus.io/scrape" not in ann
        else:
            assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "8000"
            assert ann["prometheus.io/path"] == "/metrics"
    if case == "full":
        sm = one(docs, "ServiceMonitor")
        assert sm["spec"]["endpoints"][0]["port"] == "http-metrics"
        sel = sm["spec"]["selector"]["matchLabels"]
        for name in WORKERS:
            labels = one(docs, "Service", f"{name}-metrics")["metadata"]["labels"]
            assert sel.items() <= labels.items()
    else:
        assert not find(docs, "ServiceMonitor")


def test_autoscaling_on_consumer_lag_is_optional(rendered):
    for case in ("default", "gpu"):
        assert not find(rendered[case], "HorizontalPodAutoscaler")
        assert one(rendered[case], "Deployment", "newsmon-classifier")["spec"]["replicas"] == 2
    hpa = one(rendered["full"], "HorizontalPodAutoscaler", "newsmon-classifier")
    cm, _ = config_data(rendered["full"])
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "newsmon-classifier"}
    assert hpa["spec"]["maxReplicas"] <= int(cm["NEWSMON_KAFKA__TOPIC_PARTITIONS"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External" and metric["external"]["metric"]["name"] == "newsmon_consumer_lag"
    assert metric["external"]["metric"]["selector"]["matchLabels"]["topic"] == cm["NEWSMON_KAFKA__TOPIC_ARTICLES"]
    # the HPA owns the replica count
    assert "replicas" not in one(rendered["full"], "Deployment", "newsmon-classifier")["spec"]


BAD_VALUES = {
    "too_many_replicas": ({"classifier": {"replicas": 7}}, "exceeds NEWSMON_KAFKA__TOPIC_PARTITIONS"),
    "hpa_beyond_partitions": ({"classifier": {"autoscaling": {"enabled": True, "maxReplicas": 8}}},
                              "exceeds NEWSMON_KAFKA__TOPIC_PARTITIONS"),
    "secret_in_config": ({"config": {"NEWSMON_KAFKA__SASL_PASSWORD": "x"}}, "is a secret setting"),
    "secret_in_component": ({"classifier": {"config": {"NEWSMON_MEMORY__API_KEY": "x"}}}, "is a secret setting"),
    "not_a_secret": ({"secrets": {"values": {"NEWSMON_KAFKA__SASL_USERNAME": "x"}}}, "not a secret setting"),
    "no_redis": ({"secrets": {"values": {"NEWSMON_WORKER__REDIS_URL": ""}}}, "REDIS_URL is required"),
    # one knowledge memory per deployment: without a Qdrant server only the one-pod embedded mode renders
    "two_replicas_no_qdrant": ({"config": {"NEWSMON_MEMORY__URL": None}},
                               "classifier.replicas is 2 but config.NEWSMON_MEMORY__URL is empty"),
    "three_replicas_empty_url": ({"config": {"NEWSMON_MEMORY__URL": ""}, "classifier": {"replicas": 3}},
                                 "the knowledge memory would be split between them"),
    "hpa_no_qdrant": ({"config": {"NEWSMON_MEMORY__URL": None},
                       "classifier": {"replicas": 1, "autoscaling": {"enabled": True}}},
                      "classifier.autoscaling.enabled needs config.NEWSMON_MEMORY__URL"),
    "embedded_training": ({"config": {"NEWSMON_MEMORY__URL": None}, "classifier": {"replicas": 1},
                           "home": {"create": True}}, "training.enabled needs config.NEWSMON_MEMORY__URL"),
    "embedded_api": ({"config": {"NEWSMON_MEMORY__URL": None}, "classifier": {"replicas": 1},
                      "home": {"create": True}, "training": {"enabled": False}, "api": {"enabled": True}},
                     "api.enabled needs config.NEWSMON_MEMORY__URL"),
    "embedded_emptydir": ({"config": {"NEWSMON_MEMORY__URL": None}, "classifier": {"replicas": 1},
                           "training": {"enabled": False}}, "an emptyDir would lose it"),
    "api_without_token": ({"api": {"enabled": True}}, "api.auth.enabled needs a bearer token"),
    "api_port_in_config": ({"config": {"NEWSMON_API__PORT": 9000}}, "is set by the chart"),
    "isr_above_rf": ({"config": {"NEWSMON_KAFKA__REPLICATION_FACTOR": 2, "NEWSMON_KAFKA__MIN_INSYNC_REPLICAS": 3}},
                     "exceeds NEWSMON_KAFKA__REPLICATION_FACTOR"),
    "derived_home": ({"config": {"NEWSMON_HOME": "/x"}}, "is set by the chart"),
    "typo": ({"classifer": {"replicas": 1}}, "additional properties 'classifer' not allowed"),
}


def test_chart_refuses_bad_values(tmp_path):
    args = []
    for name, (values, _) in BAD_VALUES.items():
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(values))
        args += ["--case", f"{name}={f}"]
    proc = run_check(tmp_path / "out", *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    for name, (_, message) in BAD_VALUES.items():
        assert message in report["cases"][name].get("render_error", ""), (name, report["cases"][name])


def test_existing_secret_and_claim_replace_the_chart_ones(tmp_path):
    f = tmp_path / "existing.yaml"
    f.write_text(yaml.safe_dump({"secrets": {"existingSecret": "newsmon-prod"},
                                 "home": {"existingClaim": "models", "create": True}}))
    proc = run_check(tmp_path / "out", "--case", f"existing={f}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    docs = [d for d in yaml.safe_load_all((tmp_path / "out" / "existing.yaml").read_text()) if d]
    assert not find(docs, "Secret")
    for _, spec in pod_specs(docs):
        refs = [e["secretRef"]["name"] for e in spec["containers"][0]["envFrom"] if "secretRef" in e]
        assert refs == ["newsmon-prod"]
        assert {"name": "home", "persistentVolumeClaim": {"claimName": "models"}} in spec["volumes"]
    assert not find(docs, "PersistentVolumeClaim")


# ---------------------------------------------------------------------------------------------------------
# Deployable as built: the built image, one knowledge memory per deployment, topics, the API, the notes
# ---------------------------------------------------------------------------------------------------------

def _containers(docs):
    for d in docs:
        spec = {"Deployment": lambda: d["spec"]["template"]["spec"], "Job": lambda: d["spec"]["template"]["spec"],
                "CronJob": lambda: d["spec"]["jobTemplate"]["spec"]["template"]["spec"]}.get(d["kind"])
        if spec:
            yield from spec()["containers"]


@pytest.mark.parametrize("case", ALL_CASES)
def test_chart_renders_the_image_make_image_builds(rendered, case):
    chart = yaml.safe_load((ROOT / "helm" / "newsmon" / "Chart.yaml").read_text())
    assert chart["appVersion"] == PYPROJECT_VERSION  # image.tag defaults to the package version
    assert rendered["report"]["image"] == BUILT_IMAGE
    images = {c["image"] for c in _containers(rendered[case])}
    assert images == {BUILT_IMAGE}
    assert f"image {BUILT_IMAGE}" in rendered["notes"][case]


def test_two_classifier_replicas_render_with_a_qdrant_url(rendered):
    """The acceptance's other half: 2 replicas (values.yaml) render with a Qdrant URL, each in its own pod."""
    cm, _ = config_data(rendered["default"])
    assert cm["NEWSMON_MEMORY__URL"].startswith("http")
    assert one(rendered["default"], "Deployment", "newsmon-classifier")["spec"]["replicas"] == 2
    assert not find(rendered["default"], "Deployment", "newsmon-worker")


def test_embedded_mode_is_one_pod_with_both_roles(rendered, monkeypatch):
    docs = rendered["embedded"]
    assert {d["metadata"]["name"] for d in find(docs, "Deployment")} == {"newsmon-worker"}
    assert not find(docs, "CronJob") and not find(docs, "HorizontalPodAutoscaler") and not find(docs, "Job")
    dep = one(docs, "Deployment", "newsmon-worker")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}  # a surge pod could not open the locked memory
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"] == ["newsmon", "worker", "all"]
    assert {"name": "home", "persistentVolumeClaim": {"claimName": "newsmon-home"}} in spec["volumes"]
    assert one(docs, "PersistentVolumeClaim", "newsmon-home")["spec"]["accessModes"] == ["ReadWriteOnce"]
    svc = one(docs, "Service", "newsmon-worker-metrics")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    cm, secret = config_data(docs)
    assert "NEWSMON_WORKER__REDIS_URL" not in secret  # optional: the stores live in the one process
    for k in [k for k in os.environ if k.startswith("NEWSMON_")]:
        monkeypatch.delenv(k)
    own = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    for k, v in {**cm, **secret, **own}.items():
        monkeypatch.setenv(k, v)
    s = Settings(_env_file=None)
    assert not s.memory.url and str(s.memory_path).startswith(cm["NEWSMON_HOME"] + "/")
    assert "EMBEDDED" in rendered["notes"]["embedded"] and "newsmon-worker" in rendered["notes"]["embedded"]


def test_topics_hook_job_renders_only_when_enabled(rendered):
    for case in ("default", "gpu", "embedded"):
        assert not find(rendered[case], "Job"), case
        assert "topicsJob.enabled=true" in rendered["notes"][case]
    docs = rendered["full"]
    job = one(docs, "Job", "newsmon-topics")
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert hooks["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never" and job["spec"]["activeDeadlineSeconds"] > 0
    # before an install the chart's ConfigMap, Secret, ServiceAccount and PVC do not exist yet
    assert spec["serviceAccountName"] == "default"
    (c,) = spec["containers"]
    assert c["command"] == ["newsmon", "topics", "create"]
    assert "envFrom" not in c
    assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
    env = {e["name"]: e for e in c["env"]}
    cm, secret = config_data(docs)
    for key in ("NEWSMON_KAFKA__BOOTSTRAP_SERVERS", "NEWSMON_KAFKA__SECURITY_PROTOCOL", "NEWSMON_KAFKA__TOPIC_ARTICLES",
                "NEWSMON_KAFKA__TOPIC_PARTITIONS", "NEWSMON_KAFKA__REPLICATION_FACTOR",
                "NEWSMON_KAFKA__MIN_INSYNC_REPLICAS", "NEWSMON_KAFKA__SSL_CA_LOCATION"):
        assert env[key]["value"] == cm[key], key
    assert (env["NEWSMON_KAFKA__TOPIC_PARTITIONS"]["value"], env["NEWSMON_KAFKA__REPLICATION_FACTOR"]["value"],
            env["NEWSMON_KAFKA__MIN_INSYNC_REPLICAS"]["value"]) == ("12", "3", "2")
    # the SASL password from a hook Secret created just before the Job (lower weight), deleted after it
    ref = env["NEWSMON_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    hook_secret = one(docs, "Secret", ref["name"])
    assert hook_secret["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(hooks["helm.sh/hook-weight"])
    assert base64.b64decode(hook_secret["data"][ref["key"]]).decode() == secret["NEWSMON_KAFKA__SASL_PASSWORD"]
    assert set(hook_secret["data"]) == {"NEWSMON_KAFKA__SASL_PASSWORD"}
    assert "hook Job newsmon-topics" in rendered["notes"]["full"]


def test_topics_hook_job_reads_an_existing_secret(tmp_path):
    docs, _ = render_values(tmp_path, "topics", {
        "topicsJob": {"enabled": True}, "serviceAccount": {"create": False, "name": "newsmon-sa"},
        "secrets": {"existingSecret": "newsmon-prod", "values": {"NEWSMON_KAFKA__SASL_PASSWORD": "x"}}})
    assert not find(docs, "Secret")
    spec = one(docs, "Job", "newsmon-topics")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "newsmon-sa"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NEWSMON_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "newsmon-prod", "key": "NEWSMON_KAFKA__SASL_PASSWORD", "optional": True}


def test_api_deployment_and_service(rendered):
    for case in ("default", "gpu", "embedded"):
        assert not find(rendered[case], "Deployment", "newsmon-api"), case
        assert "HTTP API: off" in rendered["notes"][case]
    docs = rendered["full"]
    dep = one(docs, "Deployment", "newsmon-api")
    assert dep["spec"]["replicas"] == 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["newsmon", "serve"]
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NEWSMON_API__HOST"] == "0.0.0.0" and env["NEWSMON_API__PORT"] == "8080"
    assert env["NEWSMON_ENCODER__CACHE"] == "false"  # no SQLite cache shared by replicas over a network volume
    # the bearer token reaches the API from the Secret, never as a plain value
    assert [e["secretRef"]["name"] for e in c["envFrom"] if "secretRef" in e] == ["newsmon-secret"]
    _, secret = config_data(docs)
    assert secret["NEWSMON_API__TOKEN"] == "ci-dummy-api-token"
    svc = one(docs, "Service", "newsmon-api")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    sm = one(docs, "ServiceMonitor")
    assert {"port": "http", "path": "/metrics"}.items() <= sm["spec"]["endpoints"][1].items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_api_without_auth_renders_with_a_warning(tmp_path):
    docs, notes = render_values(tmp_path, "noauth", {"api": {"enabled": True, "auth": {"enabled": False}}})
    assert one(docs, "Deployment", "newsmon-api")
    assert "WARNING: api.auth.enabled is false" in notes


@pytest.mark.parametrize("case", ALL_CASES)
def test_notes_say_how_to_reach_metrics_and_the_api(rendered, case):
    notes = rendered["notes"][case]
    assert "/metrics" in notes and "/healthz" in notes and "/readyz" in notes
    assert "kubectl -n newsmon port-forward" in notes
    assert "HTTP API" in notes
    if case == "full":
        assert "port-forward svc/newsmon-api 8080" in notes and "Authorization: Bearer" in notes
        assert "http://newsmon-classifier-metrics.newsmon.svc:8000/metrics" in notes
