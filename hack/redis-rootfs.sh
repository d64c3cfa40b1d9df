#!/usr/bin/env bash
# redis-rootfs.sh DIR: a Debian root filesystem with Debian's redis-server and redis-tools, the
# Redis image's content (test/images). Made by debootstrap from Debian's own packages, from the
# mirror apt uses here; nothing is pulled from an image registry. Needs root (debootstrap makes
# files of other owners). The redis user is given uid and gid 999, as in the official image: the
# StatefulSet runs Redis as 999.
set -euo pipefail
dir=$1
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}

command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "making the Redis root filesystem needs root (debootstrap)" >&2; exit 1; }

tmp=$dir.tmp
rm -rf "$tmp"
debootstrap --variant=minbase --include=redis-server,redis-tools "$suite" "$tmp" "$mirror" >"$dir.log" 2>&1 || {
	tail -20 "$dir.log" >&2
	exit 1
}

# The redis user and group the package made, renumbered to 999 with what they own.
old_uid=$(awk -F: '$1 == "redis" {print $3}' "$tmp/etc/passwd")
old_gid=$(awk -F: '$1 == "redis" {print $3}' "$tmp/etc/group")
if awk -F: '$3 == 999 && $1 != "redis"' "$tmp/etc/passwd" "$tmp/etc/group" | grep -q .; then
	echo "uid or gid 999 is taken in the root filesystem" >&2
	exit 1
fi
find "$tmp" -xdev -uid "$old_uid" -exec chown -h 999 {} +
find "$tmp" -xdev -gid "$old_gid" -exec chgrp -h 999 {} +
sed -i -E "s/^redis:x:$old_uid:$old_gid:/redis:x:999:999:/" "$tmp/etc/passwd"
sed -i -E "s/^redis:x:$old_gid:/redis:x:999:/" "$tmp/etc/group"

# /data, the official image's working directory, where the StatefulSet mounts the volume.
install -d -o 999 -g 999 -m 0755 "$tmp/data"
# What debootstrap and apt leave that an image does not need.
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/* "$tmp"/var/log/* "$tmp"/debootstrap

rm -rf "$dir"
mv "$tmp" "$dir"
test -x "$dir/usr/bin/redis-server"
