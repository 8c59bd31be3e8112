#!/usr/bin/env bash
# demo.sh PREFIX
# fi_pingpong over uet, then the same run over libfabric's tcp provider, on
# 127.0.0.1; prints both tables and a side-by-side summary parsed from them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$1
iters=${DEMO_ITERS:-1000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for p in uet tcp; do
    echo "== fi_pingpong -e rdm -p $p (sizes 1 B .. 8 MiB, $iters iterations each)"
    PROVIDER=$p "$here/pingpong.sh" "$prefix" -S all -I "$iters" | tee "$out/$p.txt"
    echo
done

# Columns of fi_pingpong's table: bytes iters =iters total time MB/sec usec/xfer Mxfers/sec
pick() { awk -v s="$2" -v c="$3" '$1 == s { print $c }' "$out/$1.txt"; }
largest=$(awk '$1 ~ /^[0-9]+[km]?$/ { last = $1 } END { print last }' "$out/uet.txt")
echo "== summary (usec/xfer and MB/s as fi_pingpong reports them)"
printf '%-28s %12s %12s %8s\n' "" "uet" "tcp" "uet/tcp"
row() {
    local label=$1 size=$2 col=$3 u t
    u=$(pick uet "$size" "$col"); t=$(pick tcp "$size" "$col")
    if [[ -n $u && -n $t ]]; then
        awk -v l="$label" -v u="$u" -v t="$t" 'BEGIN { printf "%-28s %12s %12s %8.2f\n", l, u, t, u / t }'
    fi
}
row "64 B usec/xfer" 64 7
row "4k usec/xfer" 4k 7
row "64k MB/s" 64k 6
row "1m MB/s" 1m 6
row "$largest MB/s" "$largest" 6
