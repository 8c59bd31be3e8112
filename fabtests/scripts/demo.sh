#!/usr/bin/env bash
# demo.sh PREFIX
#
# fi_pingpong (RDM, all sizes, no data check) over uet, then the same run over
# libfabric's tcp provider, on 127.0.0.1. Prints both tables, each under a
# header line, then a side-by-side summary parsed from the two tables:
# latency at 64 B and bandwidth at the largest size both tables contain.
#
# PROVIDER=<name> replaces uet as the first provider (e.g. PROVIDER=sockets to
# try the script without uet); DEMO_ITERS sets -I (default 1000).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 1 ]] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$1
first=${PROVIDER:-uet}
iters=${DEMO_ITERS:-1000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

failed=0
for p in "$first" tcp; do
    echo "== fi_pingpong -e rdm -p $p -S all -I $iters (127.0.0.1)"
    if PROVIDER=$p "$here/pingpong.sh" "$prefix" -S all -I "$iters" >"$out/$p.txt"; then
        cat "$out/$p.txt"
    else
        cat "$out/$p.txt"
        echo "(fi_pingpong over $p failed)"
        failed=1
    fi
    echo
done

# fi_pingpong's columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
pick() { awk -v s="$2" -v c="$3" '$1 == s { print $c }' "$out/$1.txt"; }
sizes() { awk '$1 ~ /^[0-9.]+[kmg]?$/ { print $1 }' "$out/$1.txt"; }
largest=$(grep -Fxf <(sizes tcp) <(sizes "$first") | tail -n 1)

echo "== summary (as measured above; latency = usec/xfer, bandwidth = MB/sec)"
printf '%-30s %12s %12s\n' "" "$first" "tcp"
row() {
    local label=$1 size=$2 col=$3 a b
    a=$(pick "$first" "$size" "$col"); b=$(pick tcp "$size" "$col")
    printf '%-30s %12s %12s\n' "$label" "${a:-n/a}" "${b:-n/a}"
}
row "latency at 64 B (usec/xfer)" 64 7
if [[ -n $largest ]]; then
    row "bandwidth at $largest (MB/sec)" "$largest" 6
else
    echo "bandwidth: no size present in both tables"
fi
exit "$failed"
