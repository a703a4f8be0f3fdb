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

from newsmon.shared.config import PRODUCTION_MODEL, Settings, settings_reference

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "helm_check.py"
SECRET_KEYS = {"NEWSMON_KAFKA__SASL_PASSWORD", "NEWSMON_MEMORY__API_KEY", "NEWSMON_WORKER__REDIS_URL",
               "NEWSMON_TRAINING__OPTUNA_STORAGE"}
SETTINGS = set(re.findall(r"^\| `(NEWSMON_[A-Z0-9_]+)` \|", settings_reference(), re.M))
WORKERS = {"newsmon-classifier": ["newsmon", "worker", "classifier"],
           "newsmon-memory-updater": ["newsmon", "worker", "memory-updater"]}


def run_check(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=900)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{"report": report.json, "default"|"gpu"|"full": [manifests]} from one run of the script."""
    out = tmp_path_factory.mktemp("helm")
    proc = run_check(out)
    assert proc.returncode == 0, f"helm_check failed:\n{proc.stdout}\n{proc.stderr}"
    report = json.loads((out / "report.json").read_text())
    result = {"report": report}
    for case in report["cases"]:
        result[case] = [d for d in yaml.safe_load_all((out / f"{case}.yaml").read_text()) if d]
    return result


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def one(docs, kind, name=None):
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_specs(docs):
    """(owner name, pod spec) of every Deployment and CronJob."""
    for d in docs:
        if d["kind"] == "Deployment":
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]
        elif d["kind"] == "CronJob":
            yield d["metadata"]["name"], d["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def config_data(docs):
    cm = one(docs, "ConfigMap", "newsmon-config")["data"]
    secret = {k: base64.b64decode(v).decode() for k, v in one(docs, "Secret", "newsmon-secret").get("data", {}).items()}
    return cm, secret


CASES = ["default", "gpu", "full"]


def test_every_manifest_rendered_and_validated(rendered):
    report = rendered["report"]
    assert report["errors"] == []
    assert set(report["cases"]) == set(CASES)
    for case, info in report["cases"].items():
        assert info["manifests"], case
        for m in info["manifests"]:
            expected = "structure" if m["apiVersion"] == "monitoring.coreos.com/v1" else "schema"
            assert m["validation"] == expected, (case, m)
        assert len(info["manifests"]) == len(rendered[case])
    kinds = {m["kind"] for m in report["cases"]["full"]["manifests"]}
    assert kinds == {"ConfigMap", "Secret", "ServiceAccount", "Deployment", "CronJob", "Service",
                     "ServiceMonitor", "HorizontalPodAutoscaler", "PersistentVolumeClaim"}
    assert report["kube_versions"] == ["1.27.0", "1.37.0"]


@pytest.mark.parametrize("case", CASES)
def test_security_context_on_every_container(rendered, case):
    specs = list(pod_specs(rendered[case]))
    assert {name for name, _ in specs} == {*WORKERS, "newsmon-training"}
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
    for name, spec in pod_specs(rendered[case]):
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


@pytest.mark.parametrize("case", CASES)
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


def _env_names(docs):
    names = set()
    for _, spec in pod_specs(docs):
        names |= {e["name"] for e in spec["containers"][0]["env"]}
    return names


@pytest.mark.parametrize("case", CASES)
def test_settings_split_between_configmap_and_secret(rendered, case):
    docs = rendered[case]
    cm, secret = config_data(docs)
    assert not SECRET_KEYS & set(cm), "a secret setting is in the ConfigMap"
    assert set(secret) <= SECRET_KEYS and "NEWSMON_WORKER__REDIS_URL" in secret
    assert not SECRET_KEYS & _env_names(docs), "a secret setting is a plain env value"
    for value in secret.values():
        assert value not in json.dumps(cm)
    # every NEWSMON_* variable the chart sets is a real setting (README "Settings" table)
    newsmon_vars = {k for k in set(cm) | set(secret) | _env_names(docs) if k.startswith("NEWSMON_")}
    assert newsmon_vars <= SETTINGS, newsmon_vars - SETTINGS
    # production defaults
    assert cm["NEWSMON_ENCODER__MODEL"] == PRODUCTION_MODEL
    assert cm["NEWSMON_ENCODER__POOLING"] == "cls" and cm["NEWSMON_ENCODER__MAX_LENGTH"] == "8192"
    assert cm["NEWSMON_ENCODER__QUERY_PREFIX"] == "" and cm["NEWSMON_ENCODER__PASSAGE_PREFIX"] == ""
    assert cm["NEWSMON_LOG_FORMAT"] == "json"
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
    assert str(s.home) == cm["NEWSMON_HOME"]
    assert s.encoder.cache is False  # the classifier's own override
    if case == "gpu":
        assert s.encoder.device == "cuda" and s.worker.batch_max_messages == 128
    if case == "full":
        assert s.kafka.sasl_password.get_secret_value() == secret["NEWSMON_KAFKA__SASL_PASSWORD"]
        assert s.kafka.client_options == {"ssl.endpoint.identification.algorithm": "https"}
        assert s.kafka.create_topics is False and s.kafka.topic_partitions == 12
        assert s.training.optuna_storage == secret["NEWSMON_TRAINING__OPTUNA_STORAGE"]


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
    "no_qdrant": ({"config": {"NEWSMON_MEMORY__URL": None}}, "NEWSMON_MEMORY__URL is required"),
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
