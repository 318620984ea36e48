#!/usr/bin/env bash
# CPU per proxied request: `trimtab serve` against nginx (and a minimal Go
# proxy, the floor of Go's net/http) in front of the same loopback
# upstream, for a chat completion with an 8k-token body; trimtab's scraping
# measured apart. Not part of CI or ./test.sh: run it by hand.
#
#   bench/scripts/proxy-vs-nginx.sh [flags of bench/scripts/proxyvsnginx]
#   bench/scripts/proxy-vs-nginx.sh -requests 20000 -concurrency 16 -rounds 3
#   bench/scripts/proxy-vs-nginx.sh -perf /tmp/proxyperf   # also profile each proxy (perf record -g)
#
# It installs nginx from the distribution's packages when it is missing
# (Debian: nginx-light, else nginx; root only), builds trimtab into a
# temporary directory and runs the Go driver (build tag proxybench, so
# `go test ./...` never sees it). Everything listens on 127.0.0.1; the
# driver stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing nginx"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx-light >/dev/null 2>&1 ||
      apt-get install -y -qq --no-install-recommends nginx >/dev/null
  else
    echo "proxy-vs-nginx.sh: nginx missing; install it (Debian: apt-get install nginx-light)" >&2
    exit 1
  fi
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/trimtab" ./cmd/trimtab
go build -tags proxybench -o "$tmp/proxyvsnginx" ./bench/scripts/proxyvsnginx

echo "== $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $("$nginx_bin" -v 2>&1)"
"$tmp/proxyvsnginx" -trimtab "$tmp/trimtab" -nginx "$nginx_bin" "$@"
