#!/usr/bin/env bash
# build-tool.sh OUT MODULE_DIR [go build flags and packages...]
#
# go build in MODULE_DIR (a pinned tools module under hack/tools) with -o OUT (a directory when it
# ends with /, else a file). Linking the Kubernetes binaries, OLM and the rest takes about two
# minutes even with Go's build cache warm, so what a build makes is also kept in the user's cache
# under the hash of what makes it (Go's version, the module's go.mod and go.sum, the flags): a
# fresh clone (CI) copies it instead.
set -euo pipefail
out=$1 mod=$2
shift 2
cache=${TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redis-operator/tools}
# A module the tools module replaces with a directory of its own (hack/tools/olmv1/boxcutter) counts
# too: its sources are part of what makes the build.
local_modules=$(find "$mod" -mindepth 2 -type f \( -name '*.go' -o -name go.mod \) | sort)
key=$({ go version; go env GOOS GOARCH CGO_ENABLED GOFLAGS; cat "$mod/go.mod" "$mod/go.sum"; [ -z "$local_modules" ] || cat $local_modules; echo "$(basename "$out")" "$*"; } | sha256sum | cut -c1-16)
if [[ $out == */ ]]; then dest=$out; else dest=$(dirname "$out")/; fi
mkdir -p "$dest"
if [ ! -d "$cache/$key" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	target=$tmp/
	[[ $out == */ ]] || target=$tmp/$(basename "$out")
	# Linked without a symbol table and DWARF, as their releases are; an -ldflags among the
	# arguments replaces this one.
	start=$SECONDS
	(cd "$mod" && go build -ldflags="-s -w" -o "$target" "$@")
	# Said per tool, so that a cold run shows which tools its build step spends its minutes on.
	echo "=== built $out from $mod (${*: -1}): $((SECONDS - start))s"
	mkdir -p "$cache"
	rm -rf "$cache/$key.partial"
	cp -r "$tmp" "$cache/$key.partial"
	mv "$cache/$key.partial" "$cache/$key"
fi
# Not cp -p: the copies are newer than the go.mod they were built from, so make sees them current.
cp "$cache/$key"/* "$dest"
