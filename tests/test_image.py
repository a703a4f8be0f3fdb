"""The container image (Containerfile, built by scripts/build_image.sh = `make image`): the CLI run inside it the
way the Helm chart runs it: UID 10001, a read-only root file system, no network (so the default model must be in
the image), the home on a volume. A tiny knowledge memory is built from 20 real articles mounted read-only, then
`newsmon suggest` proposes labels from it.

Needs podman (Debian: apt-get install podman buildah mmdebstrap). The image is the one `make image` tags; it is
built first when missing or when its revision label is not this checkout's (about 10 minutes cold on 2 cores),
so `make test` leaves this file out and `make image-check` runs it."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "scripts" / "build_image.sh"
PODMAN = shutil.which("podman")
UID = 10001
MODEL_DIR = "/opt/newsmon/models/multilingual-e5-small"

pytestmark = pytest.mark.skipif(
    PODMAN is None, reason="podman is not installed, so the image can be neither built nor run here "
                           "(Debian: apt-get install podman buildah mmdebstrap)")


def _sh(*cmd: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=ROOT, text=True, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def _revision() -> str:
    """The revision scripts/build_image.sh writes into the image's labels for this checkout."""
    rev = _sh("git", "rev-parse", "HEAD").stdout.strip()
    return rev + "-dirty" if _sh("git", "status", "--porcelain").stdout.strip() else rev


def _inspect(ref: str) -> dict | None:
    proc = _sh(PODMAN, "image", "inspect", ref, check=False)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def image() -> dict:
    """The image `make image` tags, built now when missing or built from another revision: its inspect record."""
    ref = _sh(str(BUILD), "--ref").stdout.strip()
    info = _inspect(ref)
    labels = (info or {}).get("Config", {}).get("Labels") or {}
    if labels.get("org.opencontainers.image.revision") != _revision():
        _sh(str(BUILD), timeout=3600)
        info = _inspect(ref)
    assert info is not None, f"{ref} is missing after scripts/build_image.sh"
    info["ref"] = ref
    return info


@pytest.fixture(scope="module")
def run_args(image) -> list[str]:
    """`podman run` options that work on this host. Some sandboxes refuse what podman asks by default: crun
    refuses a host with the hybrid cgroup v1+v2 layout ("cgroups in hybrid mode not supported"), and without
    CAP_SYS_RESOURCE the default RLIMIT_NOFILE/NPROC cannot be set ("setrlimit: Operation not permitted"). Tries
    the plain command first, then runc, then runc with the limits this process has; fails with every error."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
    limits = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]
    errors = []
    for extra in ([], ["--runtime", "runc"], ["--runtime", "runc", *limits], limits):
        proc = _sh(PODMAN, "run", "--rm", "--network", "none", *extra, "--entrypoint", "true", image["ref"],
                   check=False, timeout=120)
        if proc.returncode == 0:
            return extra
        errors.append(f"{extra or 'defaults'}: {proc.stderr.strip()[-500:]}")
    pytest.fail("podman cannot run a container here:\n" + "\n".join(errors))


def podman_run(image, run_args, *args: str, mounts: tuple[str, ...] = (), timeout: float = 900):
    """`podman run` as the chart runs the pods: the image's user, read-only root, no network, a tmpfs /tmp."""
    cmd = [PODMAN, "run", "--rm", *run_args, "--network", "none", "--read-only", "--user", f"{UID}:{UID}",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=512m,mode=1777"]
    for m in mounts:
        cmd += ["-v", m]
    return _sh(*cmd, image["ref"], *args, timeout=timeout, check=False)


def test_image_metadata(image):
    """Entry point, user, OCI labels (source, version, revision), the baked model in the settings."""
    cfg = image["Config"]
    assert cfg["Entrypoint"] == ["newsmon"]
    assert cfg["User"] == f"{UID}:{UID}"
    labels = cfg["Labels"]
    version = _sh("python3", "-c", "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))"
                                   "['project']['version'])").stdout.strip()
    assert labels["org.opencontainers.image.version"] == version
    assert image["ref"].endswith(f":{version}")
    assert labels["org.opencontainers.image.revision"] == _revision()
    assert labels["org.opencontainers.image.source"]
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert env["NEWSMON_ENCODER__MODEL"] == MODEL_DIR
    assert env["NEWSMON_HOME"] == "/var/lib/newsmon"
    print(f"image {image['ref']}: {image['Size'] / 1e6:.0f} MB")


def test_runtime_stage_has_no_build_tools(image, run_args):
    """No compiler, make or pip in the runtime stage (pip left the virtual environment in the builder)."""
    proc = _sh(PODMAN, "run", "--rm", *run_args, "--network", "none", "--read-only", "--entrypoint", "sh",
               image["ref"], "-c", "for t in gcc cc c++ make pip pip3; do command -v $t; done; "
               "/opt/venv/bin/python -c 'import pip' 2>/dev/null && echo pip-module; id -u")
    assert proc.stdout.split() == [str(UID)], f"build tools or pip in the runtime image: {proc.stdout}"


def test_help_runs_in_the_image(image, run_args):
    proc = podman_run(image, run_args, "--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("suggest", "memory", "worker", "model", "train"):
        assert command in proc.stdout, command


def test_suggest_on_a_tiny_memory_in_the_image(image, run_args, shared_data, tmp_path):
    """`newsmon memory build` on 20 real articles, then `newsmon suggest` on one of them: its own labels come
    back with itself as the nearest neighbour; offline, with the baked model, as UID 10001."""
    rows = [json.loads(x) for x in (shared_data / "sentinews_sl" / "articles.jsonl").read_text(
        encoding="utf-8").splitlines()]
    picked = [r for r in rows if r["split"] == "train" and r["labels"]][:20]
    data = tmp_path / "data"
    data.mkdir()
    (data / "articles.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked),
                                         encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() == 0:
        os.chown(home, UID, UID)
    else:
        home.chmod(0o777)
    mounts = (f"{data}:/data:ro", f"{home}:/var/lib/newsmon")

    built = podman_run(image, run_args, "memory", "build", "--data", "/data/articles.jsonl", "--limit", "20",
                       mounts=mounts)
    assert built.returncode == 0, built.stdout + built.stderr
    report = json.loads(built.stdout.strip().splitlines()[-1])
    assert report["upserted"] == {"sl": 20} and report["memory_counts"] == {"sl": 20}
    assert report["bad_lines"] == 0
    assert all(p.stat().st_uid == UID for p in home.rglob("*")), "files in the home not owned by UID 10001"
    # the CPU default runtime (onnx-int8) used the artefact baked beside the model: nothing built in the home
    assert not (home / "models" / "onnx").exists(), sorted(str(p) for p in (home / "models").rglob("*"))

    query = picked[3]
    proc = podman_run(image, run_args, "suggest", "--json", query["text"], mounts=mounts)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (out,) = json.loads(proc.stdout)  # a list of one proposal, as POST /v1/suggest answers
    proposed = {x["label"] for x in out["labels"]}
    assert proposed, f"no proposal: {out}"
    assert proposed <= {lab for r in picked for lab in r["labels"]}
    assert proposed & set(query["labels"]), (proposed, query["labels"])
    best = max((n for x in out["labels"] for n in x["neighbours"]), key=lambda n: n["similarity"])
    assert best["article_id"] == query["id"] and best["similarity"] > 0.99, best
