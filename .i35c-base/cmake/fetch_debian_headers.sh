#!/usr/bin/env bash
# Fetch a Debian -dev package's headers without installing it system-wide, and cache them.
# ORT's C/C++ headers are on no PyPI package, so the build takes them from Debian's
# libonnxruntime-dev; apt verifies the download against the archive's signed index.
#
#   fetch_debian_headers.sh PACKAGE SUITE VERSION_PREFIX CACHE_DIR
# Prints the directory the package was unpacked into (its usr/include lies below it).
set -euo pipefail
pkg=$1 suite=$2 want=$3 cache=$4
dest="$cache/$pkg-$want"
if [ -f "$dest/.ok" ]; then echo "$dest"; exit 0; fi

command -v apt-get >/dev/null || { echo "fetch_debian_headers: apt-get not found; set ORT_INCLUDE_DIR / EIGEN_INCLUDE_DIR instead" >&2; exit 1; }

# The mirror this system already uses (deb822 .sources or one-line sources.list), minus security.
uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' | grep -v security | head -1 || true)
[ -n "$uri" ] || uri=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | grep -v security | awk '{for(i=2;i<=NF;i++) if ($i ~ /:\/\//) {print $i; exit}}' || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts"
echo "deb [signed-by=$keyring] $uri $suite main" > "$work/parts/$suite.list"
: > "$work/empty.list"
apt_opts=(-q -o "Dir::Etc::SourceList=$work/empty.list" -o "Dir::Etc::SourceParts=$work/parts"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root
          -o Debug::NoLocking=1)
echo "fetch_debian_headers: $pkg from $uri $suite" >&2
apt-get "${apt_opts[@]}" update >&2
(cd "$work" && apt-get "${apt_opts[@]}" download "$pkg" >&2)
deb=$(ls "$work"/"$pkg"_*.deb)
version=$(dpkg-deb -f "$deb" Version)
case "$version" in
  "$want"*) ;;
  *) echo "fetch_debian_headers: $pkg is $version in $suite, expected $want*" >&2; exit 1 ;;
esac
rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
dpkg-deb -x "$deb" "$dest.tmp"
(cd "$work" && sha256sum "$(basename "$deb")") > "$dest.tmp/SHA256SUMS"
touch "$dest.tmp/.ok"
rm -rf "$dest"; mv "$dest.tmp" "$dest"
echo "$dest"
