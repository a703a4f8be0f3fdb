#!/usr/bin/env bash
# Build the newsmon container image from ./Containerfile with buildah (or podman), without any image registry.
#
#   scripts/build_image.sh            # build; prints the reference, size and build time
#   scripts/build_image.sh --ref      # print the image reference that a build tags, and exit
#
# 1. The base: BASE_IMAGE when set (e.g. python:3.11-slim-bookworm where a registry is reachable); else the local
#    image localhost/newsmon-base:bookworm, bootstrapped once from Debian's packages with mmdebstrap
#    (minbase + python3, python3-venv, ca-certificates) and imported with `podman import` / `buildah`.
# 2. The build: `buildah bud` with the build arguments VERSION (pyproject.toml), REVISION (git HEAD, "-dirty"
#    when the tree has changes), SOURCE, CREATED and the same OCI annotations; torch's wheel from a local folder
#    when one holds it (LOCAL_WHEELS, else pip's find-links on this machine), mounted read-only at /mnt.
# 3. Writes build/image/image.json: reference, id, size, seconds, build arguments.
#
# Environment (all optional):
#   NEWSMON_IMAGE    reference to tag (default localhost/newsmon:<version>; scripts/helm_check.py renders with it)
#   BASE_IMAGE       base of both stages (default localhost/newsmon-base:bookworm, made when missing)
#   TORCH_VERSION    default 2.13.0;  TORCH_VARIANT: cpu (default) or a CUDA tag such as cu128
#   LOCAL_WHEELS     folder with torch-<version>+<variant>-*.whl (default: found among pip's find-links)
#   PIP_INDEX_URL    index pip uses inside the build (default: this machine's pip setting, else PyPI)
#   PIP_CERT         CA bundle pip trusts here (default: this machine's pip setting); mounted for the build
#   DEBIAN_MIRROR    mirror of the base bootstrap (default http://deb.debian.org/debian)
#   BUILDER          buildah (default when installed) or podman
#   SOURCE_URL       org.opencontainers.image.source (default: git remote origin, else a placeholder)
#   OCI_RUNTIME      runtime of the RUN steps (default: the builder's; runc on a host with cgroups v1+v2 "hybrid"
#                    mounts, where crun refuses to start: "cgroups in hybrid mode not supported")
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
IMAGE=${NEWSMON_IMAGE:-localhost/newsmon:${VERSION}}
if [[ "${1:-}" == "--ref" ]]; then echo "$IMAGE"; exit 0; fi

DEFAULT_BASE=localhost/newsmon-base:bookworm
BASE_IMAGE=${BASE_IMAGE:-$DEFAULT_BASE}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_VARIANT=${TORCH_VARIANT:-cpu}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
OUT=build/image
mkdir -p "$OUT"

log() { echo "build_image: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -n "${BUILDER:-}" ]]; then :
elif command -v buildah > /dev/null; then BUILDER=buildah
elif command -v podman > /dev/null; then BUILDER=podman
else die "neither buildah nor podman is installed (Debian: apt-get install buildah podman mmdebstrap)"; fi

image_exists() {
    if [[ $BUILDER == buildah ]]; then buildah inspect --type image "$1" > /dev/null 2>&1
    else podman image exists "$1"; fi
}

# --- 1. the base ------------------------------------------------------------------------------------------
if [[ "$BASE_IMAGE" == "$DEFAULT_BASE" ]] && ! image_exists "$BASE_IMAGE"; then
    command -v mmdebstrap > /dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap), or set BASE_IMAGE"
    log "bootstrapping $BASE_IMAGE from $DEBIAN_MIRROR with mmdebstrap"
    t0=$SECONDS
    sec_mirror=${DEBIAN_SECURITY_MIRROR:-${DEBIAN_MIRROR%/debian}/debian-security}
    # minbase: the essential and required packages and apt; no recommends; no docs except copyright files.
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        bookworm "$OUT/base.tar" \
        "deb $DEBIAN_MIRROR bookworm main" "deb $DEBIAN_MIRROR bookworm-updates main" \
        "deb $sec_mirror bookworm-security main"
    ctr=$(buildah from scratch)
    mnt_cleanup() { buildah rm "$ctr" > /dev/null 2>&1 || true; }
    trap mnt_cleanup EXIT
    buildah add "$ctr" "$OUT/base.tar" / > /dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd /bin/bash \
        --label org.opencontainers.image.description="Debian bookworm minbase + python3, python3-venv, ca-certificates" \
        "$ctr"
    buildah commit --quiet "$ctr" "$BASE_IMAGE" > /dev/null
    mnt_cleanup; trap - EXIT
    rm -f "$OUT/base.tar"
    log "base ready in $((SECONDS - t0)) s"
fi

# --- 2. the build -----------------------------------------------------------------------------------------
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ $REVISION != unknown && -n "$(git status --porcelain 2>/dev/null)" ]]; then REVISION="$REVISION-dirty"; fi
SOURCE_URL=${SOURCE_URL:-$(git remote get-url origin 2>/dev/null || echo https://example.com/newsmon)}
CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

args=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION"
      --build-arg "SOURCE=$SOURCE_URL" --build-arg "CREATED=$CREATED"
      --build-arg "TORCH_VERSION=$TORCH_VERSION" --build-arg "TORCH_VARIANT=$TORCH_VARIANT")
for kv in "org.opencontainers.image.version=$VERSION" "org.opencontainers.image.revision=$REVISION" \
          "org.opencontainers.image.source=$SOURCE_URL" "org.opencontainers.image.created=$CREATED"; do
    args+=(--annotation "$kv")
done

# torch's wheel from local disk: the folder named by LOCAL_WHEELS, else the find-links pip uses here.
if [[ -z "${LOCAL_WHEELS:-}" ]]; then
    for d in ${PIP_FIND_LINKS:-} $(python3 -m pip config get global.find-links 2>/dev/null || true); do
        d=${d#file://}
        if compgen -G "$d/torch-${TORCH_VERSION}+${TORCH_VARIANT}-*.whl" > /dev/null; then LOCAL_WHEELS=$d; break; fi
    done
fi
if [[ -n "${LOCAL_WHEELS:-}" ]]; then
    log "torch ${TORCH_VERSION}+${TORCH_VARIANT} from $LOCAL_WHEELS (mounted read-only at /mnt)"
    # PyTorch's index is not needed then (and may be unreachable): pip looks only at the wheel folder and PyPI.
    # /mnt exists in the base: a new mount point would stay behind as an empty folder in the image.
    args+=(-v "$(realpath "$LOCAL_WHEELS"):/mnt:ro" --build-arg LOCAL_WHEELS=/mnt --build-arg TORCH_INDEX_URL=)
fi
PIP_INDEX_URL=${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}
if [[ -n "$PIP_INDEX_URL" ]]; then args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"); fi
# The CA bundle pip trusts here (a TLS-intercepting proxy's CA): mounted over the base's bundle for the RUN steps.
PIP_CERT=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [[ -n "$PIP_CERT" ]]; then args+=(-v "$(realpath "$PIP_CERT"):/etc/ssl/certs/ca-certificates.crt:ro"); fi

# crun (buildah's default) refuses hosts with the hybrid cgroup layout; runc works there.
if [[ -z "${OCI_RUNTIME:-}" && -d /sys/fs/cgroup/unified ]] && command -v runc > /dev/null; then OCI_RUNTIME=runc; fi
if [[ -n "${OCI_RUNTIME:-}" ]]; then args+=(--runtime "$OCI_RUNTIME"); fi

log "building $IMAGE with $BUILDER on $BASE_IMAGE (torch ${TORCH_VERSION}+${TORCH_VARIANT}); load: $(uptime)"
t0=$SECONDS
if [[ $BUILDER == buildah ]]; then
    buildah bud --layers --network host -f Containerfile -t "$IMAGE" "${args[@]}" .
else
    podman build --layers --network host -f Containerfile -t "$IMAGE" "${args[@]}" .
fi
seconds=$((SECONDS - t0))

# --- 3. report --------------------------------------------------------------------------------------------
id=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null \
     || buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE")
size=$(podman image inspect --format '{{.Size}}' "$IMAGE" 2>/dev/null || echo 0)
python3 - "$OUT/image.json" "$IMAGE" "$id" "$size" "$seconds" "$BASE_IMAGE" "$VERSION" "$REVISION" \
    "$TORCH_VERSION+$TORCH_VARIANT" <<'EOF'
import json, sys
out, image, id_, size, seconds, base, version, revision, torch = sys.argv[1:]
repository, _, tag = image.rpartition(":")
json.dump({"image": image, "repository": repository, "tag": tag, "id": id_, "size_bytes": int(size),
           "build_seconds": int(seconds), "base_image": base, "version": version, "revision": revision,
           "torch": torch}, open(out, "w"), indent=2)
EOF
log "built $IMAGE: $((size / 1000000)) MB, $seconds s; $OUT/image.json"
