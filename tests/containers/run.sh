#!/usr/bin/env bash
# make test-containers: configs/Dockerfile built and configs/docker-compose.yaml
# run with podman and podman-compose (Debian's), on a base image made offline,
# and a trainer in the compose network that reads a distributed_epoch job end
# to end (tests/containers/trainer.py). docs/deployment.md, "Containers".
#
# Installs what is missing with apt-get (as root). Prints one loud
# "SKIPPED: containers: <reason>" line and exits 0 when this machine cannot
# run containers (not root and no podman, no apt, podman cannot start one);
# once a container runs, any failure exits non-zero. Everything it starts
# (containers, pods, networks, volumes) is removed on exit, failed or not.
# Cached between runs: the base image (podman image exists) and the wheels.
set -euo pipefail
cd "$(dirname "$0")/../.."

PROJECT=zmqdata-containers        # podman-compose project: names and labels
COMPOSE=(podman-compose -p "$PROJECT" -f configs/docker-compose.yaml)
BASE=localhost/zmqdata-base:bookworm
IMAGE=localhost/zmqdata           # configs/docker-compose.yaml's image: zmqdata
WORK=build/containers             # wheels, podman's config (git-ignored)
WORKERS=2                         # the compose file's deploy.replicas
ELEMENTS=2000
PYTHON=${PYTHON:-python3}
PACKAGES=(podman podman-compose debootstrap runc crun fuse-overlayfs
          slirp4netns netavark aardvark-dns iptables)
START=$SECONDS

say() { echo "containers: [$((SECONDS - START))s] $*" >&2; }
skip() {
    echo "########################################################" >&2
    echo "SKIPPED: containers: $*" >&2
    echo "########################################################" >&2
    exit 0
}

install_tools() {
    local missing=()
    for tool in podman podman-compose debootstrap runc; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    "$PYTHON" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
    [ ${#missing[@]} -eq 0 ] && return
    [ "$(id -u)" -eq 0 ] || skip "missing ${missing[*]} and not root to install them"
    command -v apt-get >/dev/null || skip "missing ${missing[*]} and no apt-get"
    say "installing ${PACKAGES[*]} python3-pip (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -q >/dev/null &&
        timeout 600 apt-get install -y -q "${PACKAGES[@]}" python3-pip >/dev/null ||
        skip "apt-get could not install ${PACKAGES[*]} python3-pip"
}

# A Debian bookworm rootfs (python3 3.11 and its venv module) from Debian's
# mirror, imported as $BASE: no image registry needed.
make_base() {
    podman image exists "$BASE" && return
    say "debootstrap bookworm into $BASE (once; about 2 minutes)"
    local root
    root=$(mktemp -d "$PWD/$WORK/rootfs.XXXXXX")
    timeout 900 debootstrap --variant=minbase --include=python3,python3-venv \
        bookworm "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$WORK/debootstrap.log" ||
        { rm -rf "$root"; tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
        "$root"/usr/share/{doc,man,locale}/*
    tar -C "$root" -c . | timeout 300 podman import -q \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    rm -rf "$root"
}

# Runs a container with podman's defaults or, failing that, with a config for
# sandboxes like this one's (cgroups v1 plus a v2 hierarchy with a controller,
# which crun refuses; no CAP_SYS_RESOURCE to raise the default ulimits, and
# podman's own process limit is at most 32768). Skips if neither runs.
probe() {
    local out
    out=$(timeout 120 podman run --rm "$BASE" true 2>&1) && return
    say "podman's defaults cannot run a container here: $out"
    local nproc
    nproc=$(ulimit -Hu)
    [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
    cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
EOF
    export CONTAINERS_CONF=$PWD/$WORK/containers.conf
    local again
    again=$(timeout 120 podman run --rm "$BASE" true 2>&1) ||
        skip "podman cannot run a container here: '$out', then with $CONTAINERS_CONF: '$again'"
    say "using $CONTAINERS_CONF (runc, ulimits within this machine's)"
}

# The wheels of zmqdata's dependencies and build backend for CPython 3.11 on
# glibc 2.36 (bookworm), downloaded again only when pyproject.toml changes.
download_wheels() {
    local requirements stamp platforms=()
    requirements=$("$PYTHON" -c 'import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))
print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))')
    stamp="$WORK/wheels/requirements.txt"
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$requirements" ] && return
    for minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${minor}_$(uname -m)"); done
    say "downloading wheels into $WORK/wheels"
    rm -rf "$WORK/wheels"
    echo "$requirements" >"$WORK/requirements.txt"
    timeout 300 "$PYTHON" -m pip download -q --dest "$WORK/wheels" --only-binary=:all: \
        --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" \
        -r "$WORK/requirements.txt"
    mv "$WORK/requirements.txt" "$stamp"
}

cleanup() {
    local status=$?
    trap - EXIT
    if [ $status -ne 0 ]; then
        for name in $(podman ps -a --format '{{.Names}}' \
            --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null); do
            echo "--- podman logs $name (last 30 lines)" >&2
            podman logs --tail 30 "$name" >&2 || true
        done
    fi
    remove_deployment
    [ $status -eq 0 ] || say "FAILED (exit $status)"
    exit $status
}

remove_deployment() {
    local label="label=io.podman.compose.project=$PROJECT"
    timeout 120 "${COMPOSE[@]}" down -v -t 5 >/dev/null 2>&1 || true
    podman ps -aq --filter "$label" | xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
    podman pod ls -q --filter "$label" | xargs -r podman pod rm -f >/dev/null 2>&1 || true
    podman volume ls -q --filter "$label" | xargs -r podman volume rm -f >/dev/null 2>&1 || true
    podman network ls -q --filter "$label" | xargs -r podman network rm -f >/dev/null 2>&1 || true
}

workers_registered() {
    timeout 10 podman exec "${PROJECT}_dispatcher_1" \
        zmqdata status --dispatcher localhost:5050 --json --timeout 2 2>/dev/null |
        "$PYTHON" -c 'import json, sys; print(len(json.load(sys.stdin)["workers"]))' 2>/dev/null ||
        echo 0
}

main() {
    install_tools
    mkdir -p "$WORK"
    make_base
    probe
    download_wheels
    trap cleanup EXIT
    remove_deployment # what a killed run may have left
    say "podman build -f configs/Dockerfile --build-arg BASE=$BASE (offline wheels)"
    timeout 600 podman build -q -f configs/Dockerfile -t "$IMAGE" \
        --build-arg BASE="$BASE" --build-arg PIP_ARGS="--no-index --find-links /wheels" \
        -v "$PWD/$WORK/wheels:/wheels:ro" . >/dev/null
    say "podman-compose up: a dispatcher and $WORKERS workers"
    timeout 180 "${COMPOSE[@]}" up -d --no-build >"$WORK/compose-up.log" 2>&1 ||
        { cat "$WORK/compose-up.log" >&2; exit 1; }
    local deadline=$((SECONDS + 90)) registered=0
    until [ "$registered" -ge "$WORKERS" ]; do
        [ $SECONDS -lt $deadline ] ||
            { say "$registered of $WORKERS workers registered after 90s"; exit 1; }
        sleep 1
        registered=$(workers_registered)
    done
    say "$registered workers registered; the trainer reads in the compose network"
    timeout 180 podman run --rm --name "${PROJECT}_trainer" \
        --label "io.podman.compose.project=$PROJECT" --network "${PROJECT}_default" \
        -v "$PWD/tests/containers/trainer.py:/trainer.py:ro" --entrypoint python \
        "$IMAGE" /trainer.py dispatcher:5050 "$ELEMENTS"
    say "PASSED"
}

main "$@"
