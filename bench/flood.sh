#!/usr/bin/env bash
# bench/flood.sh: does max_tags hold dthrottled's memory under a flood of
# distinct tags? It builds and starts dthrottled on a temporary Unix socket
# (gossip off, max_tags $MAX_TAGS, rate 1/s, burst 10), sends $TAGS distinct
# random 13-byte tags, one query each, pipelined over 4 connections, and
# prints the daemon's resident memory after every million.
#
#   bench/flood.sh                        # 10M tags, max_tags 1,000,000
#   MAX_TAGS=100000 bench/flood.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TAGS=${TAGS:-10000000}
MAX_TAGS=${MAX_TAGS:-1000000}

tmp=$(mktemp -d /tmp/dthrottle-flood.XXXXXX)
dpid=
cleanup() {
	[ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/dthrottled" ./cmd/dthrottled
go build -o "$tmp/dthrottle-load" ./cmd/dthrottle-load
cat >"$tmp/dthrottle.toml" <<TOML
[listen]
unix = "$tmp/d.sock"
unix_mode = "0600"
[limit]
rate = 1
burst = 10
max_tags = $MAX_TAGS
TOML
"$tmp/dthrottled" -config "$tmp/dthrottle.toml" 2>"$tmp/dthrottled.log" &
dpid=$!
for _ in $(seq 100); do [ -S "$tmp/d.sock" ] && break; sleep 0.1; done
[ -S "$tmp/d.sock" ] || { cat "$tmp/dthrottled.log" >&2; exit 1; }

echo "# $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg): $TAGS distinct tags through max_tags = $MAX_TAGS"
echo
"$tmp/dthrottle-load" flood -addr "unix:$tmp/d.sock" -pid "$dpid" -tags "$TAGS" -every 1000000
