#!/usr/bin/env bash
# Runs the buf CLI pinned in tools/buf/package-lock.json, installing it first
# (npm ci) when it is missing or the lock file changed since the last install.
# Usage: tools/buf.sh ARGS...   e.g. tools/buf.sh lint proto
set -euo pipefail
dir="$(cd "$(dirname "$0")/buf" && pwd)"
buf="$dir/node_modules/.bin/buf"
stamp="$dir/node_modules/.flux-installed-lock.json"

stale() { [ ! -x "$buf" ] || ! cmp -s "$dir/package-lock.json" "$stamp"; }

if stale && command -v flock >/dev/null 2>&1; then
	# Parallel tests (make test runs several pytest processes) may all find buf missing: one
	# installs while the others wait, then finds it there (npm ci first deletes node_modules).
	exec 9<"$dir/package.json"
	flock 9
fi
if stale; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "tools/buf.sh: npm is required to install buf (tools/buf/package.json); install Node.js >= 18" >&2
		exit 2
	fi
	echo "tools/buf.sh: installing buf with npm ci --prefix tools/buf" >&2
	# stdout too goes to stderr: callers may capture buf's own output.
	npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
	cp "$dir/package-lock.json" "$stamp"
fi
exec "$buf" "$@"
