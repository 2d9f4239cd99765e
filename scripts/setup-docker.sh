#!/usr/bin/env bash
# Make a Docker engine and the sandbox image available on a Debian machine, offline:
#   bash scripts/setup-docker.sh
# - installs Debian's docker.io and debootstrap with apt-get if they are missing;
# - starts dockerd in the background if no engine answers (no bridge, no iptables:
#   sandbox containers only ever use network_mode=none, so no network is created);
# - builds research-sandbox:<version> if it is missing, without any image registry:
#   debootstrap a minimal bookworm (git, ripgrep) from the machine's own Debian
#   mirror, `docker import` it, then build sandbox/Dockerfile on top with the
#   build's network disabled.
# Idempotent: with the engine up and the image present it returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
IMAGE=${RESEARCH_SANDBOX_IMAGE:-research-sandbox:$VERSION}
# The imported debootstrap tree; `research sandbox build` (sandbox/docker_admin.py) prefers it when present.
BASE_IMAGE=research-sandbox-base:bookworm
SUITE=bookworm
SOCKET=/var/run/docker.sock
DOCKERD_LOG=/var/log/research-dockerd.log
ENGINE_WAIT_S=60

say() { echo "setup-docker: $*" >&2; }
die() { say "$*"; exit 1; }

engine_up() { docker info >/dev/null 2>&1; }

# The Debian mirror this machine already uses, read at run time so that no
# registry host name is written into the project.
debian_mirror() {
  local sources=/etc/apt/sources.list.d/debian.sources
  if [ -r "$sources" ]; then
    # deb822 stanzas: the URIs of the first stanza whose Suites name the release itself.
    awk -v suite="$SUITE" '
      /^[[:space:]]*$/ { if (uris != "" && found) { print uris; exit } uris = ""; found = 0; next }
      /^URIs:/ { uris = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) found = 1 }
      END { if (uris != "" && found) print uris }
    ' "$sources" | head -n 1
    return
  fi
  if [ -r /etc/apt/sources.list ]; then
    awk -v suite="$SUITE" '
      $1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }
    ' /etc/apt/sources.list
  fi
}

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  # CI (RESEARCH_REQUIRE_DOCKER=1) also runs the ssh:// engine test against an
  # sshd the test starts on loopback; a developer's machine is not given one.
  if [ "${RESEARCH_REQUIRE_DOCKER:-}" = 1 ] && [ ! -x /usr/sbin/sshd ]; then
    missing+=(openssh-server)
  fi
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root"
  say "installing ${missing[*]}"
  apt-get update -qq
  # No package may start a service (an sshd on port 22, say): policy-rc.d refuses.
  local policy=/usr/sbin/policy-rc.d made_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
  fi
  local status=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || status=$?
  [ -z "$made_policy" ] || rm -f "$policy"
  [ "$status" = 0 ] || die "apt-get install ${missing[*]} failed ($status)"
}

start_engine() {
  engine_up && return
  [ -z "${DOCKER_HOST:-}" ] || die "DOCKER_HOST=$DOCKER_HOST does not answer; start that engine or unset DOCKER_HOST"
  [ "$(id -u)" = 0 ] || die "no Docker engine answers at $SOCKET and starting one needs root"
  say "starting dockerd (log: $DOCKERD_LOG)"
  # setsid: the engine outlives this script and the test run's process group.
  setsid dockerd --bridge=none --iptables=false --ip-masq=false >"$DOCKERD_LOG" 2>&1 </dev/null &
  local deadline=$((SECONDS + ENGINE_WAIT_S))
  until engine_up; do
    [ $SECONDS -lt $deadline ] || die "dockerd did not answer within ${ENGINE_WAIT_S} s; see $DOCKERD_LOG"
    kill -0 $! 2>/dev/null || die "dockerd exited; see $DOCKERD_LOG"
    sleep 0.2
  done
}

import_base() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  local mirror root
  mirror=$(debian_mirror)
  [ -n "$mirror" ] || die "no Debian mirror for $SUITE in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
  root=$(mktemp -d /var/tmp/research-base-XXXXXX)
  trap 'rm -rf "$root"' EXIT
  say "debootstrapping $SUITE into $root (about 40 s)"
  debootstrap --variant=minbase --include=git,ripgrep,ca-certificates "$SUITE" "$root" "$mirror" >/dev/null
  # apt's downloaded packages are of no use inside the image.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
  trap - EXIT
}

build_image() {
  docker image inspect "$IMAGE" >/dev/null 2>&1 && return
  import_base
  say "building $IMAGE on $BASE_IMAGE"
  # The classic builder honours --network none without buildx being installed.
  DOCKER_BUILDKIT=0 docker build --quiet --network none --build-arg "BASE=$BASE_IMAGE" \
    --label "research.sandbox=1" -t "$IMAGE" sandbox/ >/dev/null
}

install_packages
start_engine
build_image
say "engine up, $IMAGE present"
