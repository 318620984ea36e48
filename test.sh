#!/usr/bin/env bash
# The test command (README "Test"). It installs the two programs the
# end-to-end tests drive — Chromium (status page in a real browser) and
# Prometheus (dashboard queries against a real server) — when they are
# missing and this is a Debian machine we may administer, then runs vet,
# the whole suite under the race detector, and the zero-allocation tests,
# which need a build without -race (the race detector makes sync.Pool drop
# items on purpose).
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "test.sh: ${need[*]} missing; install them (Debian: apt-get install ${need[*]}) — the browser and dashboard tests need them" >&2
    exit 1
  fi
fi

go vet ./...
go test -race -count=1 -timeout 20m ./...
go test -count=1 -run 'Alloc' ./...
