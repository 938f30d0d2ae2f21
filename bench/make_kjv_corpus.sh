#!/bin/bash
# Writes the whole King James Version (Genesis 1:1 to Revelation 22:21, one
# verse per line, references removed: 31,102 lines, 4,137,850 bytes) to
# $1 (default /tmp/kjv.txt), from Debian's bible-kjv and bible-kjv-text
# packages, downloaded and unpacked in a scratch folder (nothing installed):
# the same source and commands as data/kjv-genesis-exodus.txt
# (data/README.md), for the whole book. The FP8 loss curves of
# bench/RESULTS.md train on it (byte tokens: mlt-run reads .txt as bytes).
set -euo pipefail
out=$(realpath -m "${1:-/tmp/kjv.txt}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get download bible-kjv bible-kjv-text 2>&1 | grep -v "unsandboxed" | grep -q . || true
for deb in ./*.deb; do dpkg -x "$deb" root; done
root/usr/bin/bible -f -p "$work"/root/usr/lib -d bible.data Gen1:1-Rev22:21 |
  sed -E 's/^[A-Za-z0-9]+:[0-9]+ //' > "$out"
echo "make_kjv_corpus: wrote $out: $(wc -l < "$out") lines, $(wc -c < "$out") bytes" \
  "(sha256 $(sha256sum "$out" | cut -c1-16)...)"
