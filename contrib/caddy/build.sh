#!/usr/bin/env bash
# contrib/caddy/build.sh: build Caddy with the dthrottle module, the way
# xcaddy does: a main package of three imports (Caddy's command, its
# standard modules, this module) in a temporary directory, its go.mod
# the requirements of contrib/caddy/go.mod (so the Caddy version and every
# dependency are the ones pinned and summed there), with this module and
# dthrottle replaced by this checkout, built through the Go module proxy.
#
#   contrib/caddy/build.sh OUT          # Caddy with http.handlers.dthrottle
#   contrib/caddy/build.sh -bare OUT    # the same Caddy, same dependencies, without it
#
# Then: OUT list-modules | grep dthrottle; OUT run --config Caddyfile.shared
set -euo pipefail

usage() {
	echo "usage: $0 [-bare] OUT" >&2
	exit 2
}
bare=
if [ "${1:-}" = -bare ]; then
	bare=1
	shift
fi
[ $# -eq 1 ] && [ -n "$1" ] || usage
out=$1
case $out in
/*) ;;
*) out=$PWD/$out ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v go >/dev/null || { echo "build.sh: go not found" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/dthrottle-caddy-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false"
export GOWORK=off

plugin='	_ "github.com/dthrottle/dthrottle/contrib/caddy"'
[ -n "$bare" ] && plugin='	// built with -bare: without the dthrottle module'
cat >"$work/main.go" <<GO
// Caddy, built by dthrottle's contrib/caddy/build.sh.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
$plugin
)

func main() { caddycmd.Main() }
GO

# contrib/caddy/go.mod, renamed, requiring contrib/caddy itself (in the
# bare build too, so that both builds select the same versions of
# everything), its relative replace made absolute.
{
	sed -e 's|^module .*|module dthrottle-caddy-build|' -e '/^replace /d' "$here/go.mod"
	cat <<MOD

require github.com/dthrottle/dthrottle/contrib/caddy v0.0.0

replace (
	github.com/dthrottle/dthrottle/contrib/caddy => $here
	github.com/dthrottle/dthrottle => $root
)
MOD
} >"$work/go.mod"
cp "$here/go.sum" "$work/go.sum"

# Built without -trimpath, so that the compiled packages are the ones
# `go test` in contrib/caddy uses too (CI builds Caddy once). -mod=mod adds
# the sums of what Caddy's command needs beyond what
# contrib/caddy imports, fetched and checked through the module proxy; it
# adds no requirement and changes no version.
(cd "$work" && go build -mod=mod -o "$out" .)
