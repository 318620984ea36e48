#!/usr/bin/env bash
# The test command (README "Test"). It installs the two programs the
# end-to-end tests drive — Chromium (status page in a real browser) and
# Prometheus (dashboard queries against a real server) — when they are
# missing and this is a Debian machine we may administer (apt's output is
# shown only when it fails), then runs vet,
# the whole suite under the race detector, the zero-allocation tests,
# which need a build without -race (the race detector makes sync.Pool drop
# items on purpose), and every fuzz target for FUZZTIME (default 5000x: 5,000 inputs) each.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    aptlog="$(mktemp)"
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$aptlog" 2>&1; then
      cat "$aptlog" >&2
      rm -f "$aptlog"
      echo "test.sh: installing ${need[*]} failed (output above)" >&2
      exit 1
    fi
    rm -f "$aptlog"
  else
    echo "test.sh: ${need[*]} missing; install them (Debian: apt-get install ${need[*]}) — the browser and dashboard tests need them" >&2
    exit 1
  fi
fi

# End-to-end tests skip when their program is missing unless TRIMTAB_E2E=1
# (internal/testenv): here they must run, so a missing program fails.
export TRIMTAB_E2E=1

go vet ./...
go test -race -count=1 -timeout 20m ./...
go test -count=1 -run 'Alloc' ./...

# Every fuzz target in the repository, found afresh each run so a new one
# cannot be missed, fuzzes for FUZZTIME beyond its seed corpus: a parser
# regression that the seeds do not hit still gets a bounded chance to show.
# A count, not a duration: a timed run that ends while the engine is
# minimising a new input fails with "context deadline exceeded".
# 12 targets × 5,000 inputs stay near a minute once their (fuzz-instrumented)
# builds are cached; a cold cache adds the builds. A failure
# leaves the crashing input in the package's testdata/fuzz/.
fuzztime="${FUZZTIME:-5000x}"
mapfile -t fuzzfiles < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
if [ ${#fuzzfiles[@]} -eq 0 ]; then
  echo "test.sh: no fuzz targets found (grep '^func Fuzz' in *_test.go)" >&2
  exit 1
fi
for file in "${fuzzfiles[@]}"; do
  dir="$(dirname "$file")"
  for name in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "== fuzz $dir $name ($fuzztime)"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir"
  done
done
