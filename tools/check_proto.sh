#!/usr/bin/env bash
# Contract hygiene for a proto module: buf lint (rules in PROTO_DIR/buf.yaml),
# then buf breaking against the released snapshot. Prints every finding as
# file:line:column:message and exits non-zero when there is any.
# Usage: tools/check_proto.sh [PROTO_DIR [SNAPSHOT]]
#   PROTO_DIR defaults to proto/, SNAPSHOT to PROTO_DIR/released/flux-v1.binpb.
set -uo pipefail
tools="$(cd "$(dirname "$0")" && pwd)"
proto_dir="${1:-$(dirname "$tools")/proto}"
snapshot="${2:-$proto_dir/released/flux-v1.binpb}"

if [ ! -f "$snapshot" ]; then
	echo "check-proto: no released snapshot at $snapshot (make release-proto creates it)" >&2
	exit 2
fi
# Install (if needed) once, up front, so a failed install is not mistaken for findings.
"$tools/buf.sh" --version >/dev/null || exit 2

status=0
if ! "$tools/buf.sh" lint "$proto_dir"; then
	echo "check-proto: lint failed (rules: $proto_dir/buf.yaml)" >&2
	status=1
fi
if ! "$tools/buf.sh" breaking "$proto_dir" --against "$snapshot"; then
	echo "check-proto: breaking change against the released contract $snapshot;" \
		"restore it, or run 'make release-proto' only when cutting a release that means to break it" >&2
	status=1
fi
exit $status
