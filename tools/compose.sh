#!/usr/bin/env bash
# The compose stack on this machine, with or without an image registry.
#
#   compose.sh up      installs what is missing, builds the images, starts the stack (compose.yaml)
#   compose.sh test    a fresh stack, the scenarios of tests/compose (pytest -m compose), then down
#   compose.sh down    removes the stack (containers, network, volumes); stops a dockerd it started
#   compose.sh logs    the stack's logs (extra arguments go to `docker compose logs`)
#   compose.sh build   installs what is missing and builds the images only
#
# What it installs when missing: Debian's docker.io and debootstrap (apt-get), the Compose CLI
# plugin (built from the Go module github.com/docker/compose/v5, ~4 min once). It starts dockerd
# when none answers and stops only a dockerd it started itself.
#
# Images. Where a registry answers, the official images are the bases (python:3.11-slim,
# apache/kafka:4.1.1). Without one, a Debian bookworm base made by debootstrap over http and
# imported (swa-es-debian:bookworm), and a Kafka image from it with Debian's Java runtime and the
# jars tools/kafka/kafka.sh resolves (swa-es-kafka:local). Either way the swa-es image installs a
# wheelhouse made on the host (torch and the dependencies by pip, the project wheel by
# tools/build_wheel.sh), so nothing in a container needs TLS. SWA_ES_COMPOSE_OFFLINE=1 forces the
# path without registry.
# Prometheus (swa-es-prometheus:local, docker/prometheus) is Debian's package on the same base.
# SWA_ES_COMPOSE_SGLANG=1 also builds swa-es-sglang:local and runs the sglang bridge scenario.
#
# Caches (a second run reuses them): SWA_ES_COMPOSE_CACHE (default ~/.cache/swa-es-compose) holds
# the downloaded wheels and the Compose plugin's module; the images themselves stay in Docker.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${SWA_ES_COMPOSE_CACHE:-$HOME/.cache/swa-es-compose}"
state="$root/.compose"
compose_version="v5.6.0"
debian_mirror="http://deb.debian.org/debian"
debian_base="swa-es-debian:bookworm"
python_official="python:3.11-slim"
kafka_official="apache/kafka:4.1.1"
plugin="$HOME/.docker/cli-plugins/docker-compose"

say() { echo "compose.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }
step() { say "$1 ($((SECONDS - step_started))s)"; step_started=$SECONDS; }
step_started=$SECONDS

# --- what is missing ---------------------------------------------------------------------------

apt_install() {
    say "installing $* (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

ensure_compose_plugin() {
    if docker compose version >/dev/null 2>&1; then return 0; fi
    command -v go >/dev/null || die "the Compose plugin is missing and no Go toolchain builds it"
    say "building the Compose plugin $compose_version from its Go module (first run only, minutes)"
    local mod="$cache/compose-plugin-$compose_version"
    mkdir -p "$mod" "$(dirname "$plugin")"
    (
        cd "$mod"
        [ -f go.mod ] || go mod init swa-es-compose-plugin >/dev/null 2>&1
        # `go install module@version` refuses a go.mod with exclude directives; a tool
        # requirement in a module of our own builds it with those directives applied.
        go get -tool "github.com/docker/compose/v5/cmd@$compose_version"
        go mod tidy
        go build -trimpath -ldflags "-X github.com/docker/compose/v5/internal.Version=$compose_version" \
            -o "$plugin.tmp" github.com/docker/compose/v5/cmd
    )
    mv -f "$plugin.tmp" "$plugin"
    docker compose version >/dev/null || die "the Compose plugin does not run"
}

# --- the engine --------------------------------------------------------------------------------

ensure_dockerd() {
    if docker info >/dev/null 2>&1; then return 0; fi
    mkdir -p "$state"
    say "starting dockerd (log: $state/dockerd.log)"
    setsid dockerd >"$state/dockerd.log" 2>&1 </dev/null &
    echo $! >"$state/dockerd.pid"
    local deadline=$((SECONDS + 60))
    until docker info >/dev/null 2>&1; do
        kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null || {
            tail -n 20 "$state/dockerd.log" >&2
            die "dockerd exited"
        }
        [ "$SECONDS" -lt "$deadline" ] || die "dockerd does not answer after 60 s"
        sleep 0.5
    done
}

stop_own_dockerd() {
    local pid_file="$state/dockerd.pid" pid
    [ -f "$pid_file" ] || return 0
    pid="$(cat "$pid_file")"
    if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null; then
        say "stopping the dockerd this script started (pid $pid)"
        kill -TERM "$pid"
        while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    fi
    rm -f "$pid_file"
}

# --- images ------------------------------------------------------------------------------------

registry_answers() {
    [ "${SWA_ES_COMPOSE_OFFLINE:-0}" = 1 ] && return 1
    docker image inspect "$python_official" >/dev/null 2>&1 && return 0
    timeout 60 docker pull -q "$python_official" >/dev/null 2>&1
}

ensure_debian_base() {
    docker image inspect "$debian_base" >/dev/null 2>&1 && return 0
    local dir="$cache/debian-rootfs.$$"
    say "making $debian_base with debootstrap over http (first run only)"
    rm -rf "$dir"
    debootstrap --variant=minbase bookworm "$dir" "$debian_mirror" >"$cache/debootstrap.log" 2>&1 ||
        { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed"; }
    tar -C "$dir" -c . | docker import - "$debian_base" >/dev/null
    rm -rf "$dir"
}

# The versions the project's venv runs, so the image runs what the tests here ran.
pinned_requirements() {
    .venv/bin/python - <<'EOF'
import importlib.metadata as md
import re
import tomllib

# The core and every extra (the images run serve, follow and bridge): `all` lists them.
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = [*project["dependencies"], *project["optional-dependencies"]["all"]]
for dep in deps:
    name = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0]
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(dep)
EOF
}

# torch's closure (its CUDA libraries included: the PyPI wheel does not import without them) and
# every other dependency, downloaded once by the host's pip into the cache.
ensure_wheelhouse() {
    local wheels="$cache/wheelhouse" want stamp
    [ -x .venv/bin/python ] || die "no .venv here: run 'bash tools/setup.sh' first"
    want="$(pinned_requirements)"
    stamp="$wheels/.requirements"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        say "downloading the wheels of the dependencies (first run only: ~3 GB, torch with CUDA libraries)"
        mkdir -p "$wheels"
        # shellcheck disable=SC2086 # one requirement per word
        .venv/bin/python -m pip download -q --only-binary=:all: -d "$wheels" $want
        echo "$want" >"$stamp"
    fi
    # The image gets hard links of the closure, triton excepted (torch imports and runs without it;
    # it only compiles kernels for torch.compile).
    local deps="$state/wheelhouse/deps"
    if [ -f "$deps.requirements" ] && [ "$(cat "$deps.requirements")" = "$want" ]; then return 0; fi
    rm -rf "$deps" "$deps.requirements"
    mkdir -p "$deps"
    resolve_closure "$wheels" "$deps" "$want"
    echo "$want" >"$deps.requirements"
}

# Links into DEST the newest wheel of every distribution the requirements need (their closure).
resolve_closure() {
    local wheels=$1 dest=$2 want=$3
    # shellcheck disable=SC2086
    .venv/bin/python -m pip install -q --dry-run --ignore-installed --no-index --find-links "$wheels" \
        --report "$state/closure.json" $want
    .venv/bin/python - "$state/closure.json" "$wheels" "$dest" <<'EOF'
import json
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

report, wheels, dest = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
for item in json.loads(Path(report).read_text())["install"]:
    name = item["metadata"]["name"].lower()
    if name == "triton":
        continue
    wheel = Path(unquote(urlparse(item["download_info"]["url"]).path))
    os.link(wheel, dest / wheel.name)
EOF
}

ensure_project_wheel() {
    local built="$state/wheelhouse/project.new" kept="$state/wheelhouse/project"
    rm -rf "$built"
    # tools/build_wheel.sh builds reproducibly (the same sources give the same bytes), and an
    # identical wheel is kept as it was: the image layer installing it (and the sglang image
    # above it) then comes from Docker's cache.
    bash tools/build_wheel.sh "$built" >/dev/null
    if diff -rq "$built" "$kept" >/dev/null 2>&1; then
        rm -rf "$built"
    else
        rm -rf "$kept"
        mv "$built" "$kept"
    fi
}

ensure_kafka_libs() {
    bash tools/kafka/kafka.sh classpath >/dev/null
    rm -rf "$state/kafka/libs"
    mkdir -p "$state/kafka"
    cp -al tools/kafka/.cache/libs "$state/kafka/libs" 2>/dev/null || cp -a tools/kafka/.cache/libs "$state/kafka/libs"
}

# `docker build` with BuildKit (the Dockerfiles bind-mount the wheelhouse): the buildx plugin
# where one is installed, else a CLI with BuildKit built in (Debian's docker.io 20.10 has it;
# newer CLIs need buildx, so /usr/bin/docker, the engine package's own CLI, is tried too).
build_image() {
    if docker buildx version >/dev/null 2>&1; then
        docker buildx build --load "$@"
        return
    fi
    local cli
    for cli in docker /usr/bin/docker; do
        command -v "$cli" >/dev/null || continue
        if DOCKER_BUILDKIT=1 "$cli" build --help 2>/dev/null | grep -q -- '--secret'; then
            if DOCKER_BUILDKIT=1 "$cli" build "$@"; then return 0; fi
            [ "$cli" = /usr/bin/docker ] && return 1
        fi
    done
    die "no BuildKit builder: install the buildx plugin (or Debian's docker.io CLI)"
}

build_images() {
    local python_base kafka_image
    ensure_wheelhouse
    step "wheelhouse ready"
    ensure_project_wheel
    step "project wheel built"
    if registry_answers; then
        say "a registry answers: official base images"
        python_base="$python_official"
        kafka_image="$kafka_official"
        docker image inspect "$kafka_image" >/dev/null 2>&1 || docker pull -q "$kafka_image" >/dev/null
    else
        say "no registry: a Debian base made here"
        ensure_debian_base
        python_base="$debian_base"
        kafka_image="swa-es-kafka:local"
        ensure_kafka_libs
        build_image -q -f docker/kafka/Dockerfile --build-arg BASE_IMAGE="$debian_base" \
            -t "$kafka_image" . >/dev/null
        step "kafka image built"
    fi
    build_image -q --build-arg BASE_IMAGE="$python_base" -t swa-es:local . >/dev/null
    step "swa-es image built"
    # Debian's prometheus package on the same base (its configs are mounted by compose.yaml, so
    # this image, apt's layer only, comes from Docker's cache on every later run).
    build_image -q -f docker/prometheus/Dockerfile --build-arg BASE_IMAGE="$python_base" \
        -t swa-es-prometheus:local docker/prometheus >/dev/null
    step "prometheus image built"
    if [ "${SWA_ES_COMPOSE_SGLANG:-0}" = 1 ]; then
        ensure_sglang_wheels
        build_image -q -f docker/sglang/Dockerfile -t swa-es-sglang:local . >/dev/null
        step "sglang image built"
    fi
    mkdir -p "$state"
    printf 'SWA_ES_KAFKA_IMAGE=%s\nSWA_ES_PYTHON_BASE=%s\n' "$kafka_image" "$python_base" >"$state/images.env"
}

# sglang 0.5.16 and its import-time packages (the pins of bench/setup_sglang.sh), as wheels made
# by the host's pip (an sdist among them is built into a wheel here), for swa-es-sglang:local.
ensure_sglang_wheels() {
    local wheels="$cache/wheelhouse-sglang" want yaml numpy
    want="$(sed -n '/^PACKAGES=(/,/^)/p' bench/setup_sglang.sh)"
    [ -n "$want" ] || die "no PACKAGES list in bench/setup_sglang.sh"
    # The host's sglang venv also sees the project venv's packages; of those sglang imports only
    # PyYAML and numpy beyond what the swa-es image holds.
    yaml="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("PyYAML"))')"
    numpy="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("numpy"))')"
    want="$want
PACKAGES+=(PyYAML==$yaml numpy==$numpy)"
    if [ ! -f "$wheels.requirements" ] || [ "$(cat "$wheels.requirements")" != "$want" ]; then
        say "making the sglang wheels (first run only)"
        rm -rf "$wheels" "$wheels.requirements"
        mkdir -p "$wheels"
        (
            eval "$want"
            .venv/bin/python -m pip wheel -q --no-deps -w "$wheels" "${PACKAGES[@]}"
        )
        echo "$want" >"$wheels.requirements"
    fi
    rm -rf "$state/wheelhouse/sglang"
    mkdir -p "$state/wheelhouse"
    cp -al "$wheels" "$state/wheelhouse/sglang"
    # sglang imports triton at start-up (the swa-es image leaves it out); torch's own pin of it.
    local triton
    triton="$(find "$cache/wheelhouse" -maxdepth 1 -name 'triton-*.whl' | sort -V | tail -n 1)"
    [ -n "$triton" ] || die "no triton wheel in $cache/wheelhouse"
    ln "$triton" "$state/wheelhouse/sglang/"
}

compose() {
    local env_file=()
    [ -f "$state/images.env" ] && env_file=(--env-file "$state/images.env")
    docker compose "${env_file[@]}" "$@"
}

# --- verbs -------------------------------------------------------------------------------------

prepare() {
    ensure_packages
    ensure_dockerd
    ensure_compose_plugin
    step "engine and Compose ready"
    build_images
}

cmd_up() {
    prepare
    compose up -d --no-build --wait --wait-timeout 300
    step "stack up"
    compose ps >&2
}

cmd_down() {
    if docker info >/dev/null 2>&1; then
        docker rm -f swa-es-sglang-engine >/dev/null 2>&1 || true
        compose --profile sglang down --volumes --remove-orphans --timeout 30 || true
        local left
        left="$(docker ps -a -q --filter label=com.docker.compose.project=swa-es)"
        [ -z "$left" ] || die "containers of the stack left after down: $left"
        say "down: $(docker ps -a -q | wc -l) containers left on this engine (docker ps -a)"
    fi
    stop_own_dockerd
}

cmd_test() {
    trap 'cmd_down' EXIT
    prepare
    compose --profile sglang down --volumes --remove-orphans --timeout 30 >/dev/null 2>&1 || true
    compose up -d --no-build --wait --wait-timeout 300
    step "stack up"
    # The sglang bridge scenario is opt-in (SWA_ES_COMPOSE_SGLANG=1): it needs its own image
    # (about 5 minutes more on a first run) and has passed few runs yet (docs/compose.md).
    local only=()
    [ "${SWA_ES_COMPOSE_SGLANG:-0}" = 1 ] ||
        only=(--deselect tests/compose/test_stack.py::test_bridge_appends_sglangs_own_kv_events
              --deselect tests/compose/test_liveness_stack.py::test_sglang_engine_killed_offline_then_restarted_new_epoch
              --deselect tests/compose/test_liveness_stack.py::test_bridge_killed_and_restarted_loses_nothing)
    SWA_ES_COMPOSE_STACK=1 .venv/bin/python -m pytest -m compose -p no:cacheprovider -v -s \
        "${only[@]}" tests/compose/test_prometheus_stack.py tests/compose/test_stack.py \
        tests/compose/test_liveness_stack.py "$@"
    step "scenarios done"
}

main() {
    [ $# -ge 1 ] || die "usage: compose.sh up|test|down|logs|build"
    local verb=$1
    shift
    case "$verb" in
    up) cmd_up ;;
    test) cmd_test "$@" ;;
    down) cmd_down ;;
    logs) compose logs "$@" ;;
    build) prepare ;;
    *) die "unknown verb $verb (up|test|down|logs|build)" ;;
    esac
}

main "$@"
