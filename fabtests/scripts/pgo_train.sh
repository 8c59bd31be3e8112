#!/usr/bin/env bash
# pgo_train.sh PREFIX BINDIR
#
# The training runs of the profile-guided build (`make pgo`, `make install
# PGO=1`): the instrumented provider in PREFIX/lib/libfabric records which
# code runs how often while it carries the two patterns MPI and collective
# libraries lean on, over loopback: small and large ping-pongs (fi_pingpong,
# msg and tagged, 64 B to 1 MiB, data checked) and streaming with many sends
# outstanding (BINDIR/uet_bw), each with large datagrams (the loopback
# default) and with 4 KiB packets (FI_UET_MTU=4096). About 15 seconds.
# Exits non-zero if any run fails: a provider that cannot carry these must
# not be built from their profile.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
[[ $# -eq 2 ]] || { echo "usage: $0 PREFIX BINDIR" >&2; exit 2; }
prefix=$1
bindir=$2
provider_env "$prefix"
# A run cut short leaves no server behind.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
export FI_PROVIDER=uet
limit=120

# uet_bw server in the background, client against it (as pingpong.sh does
# for fi_pingpong).
stream() {
    local port log server status=0
    port=$(free_port)
    log=$(mktemp)
    start_server "$port" "$log" "$limit" "$bindir/uet_bw" -p uet -m msg -T 60 -B "$port"
    server=$server_pid
    timeout "$limit" "$bindir/uet_bw" -p uet -m msg -T 60 -P "$port" "$@" 127.0.0.1 \
        >/dev/null || status=$?
    # A client that failed before it connected leaves the server waiting.
    [[ $status -eq 0 ]] || kill "$server" 2>/dev/null || true
    local sstatus=0
    wait "$server" || sstatus=$?
    [[ $status -ne 0 ]] || status=$sstatus
    if [[ $status -ne 0 ]]; then
        echo "uet_bw $* failed (status $status); server said:" >&2
        cat "$log" >&2
    fi
    rm -f "$log"
    return "$status"
}

pingpong() {
    PINGPONG_TIMEOUT=$limit "$here/pingpong.sh" "$prefix" -c "$@" >/dev/null
}

for mtu in 0 4096; do
    echo "-- training: FI_UET_MTU=$mtu (0: the loopback default)"
    export FI_UET_MTU=$mtu
    for mode in msg tagged; do
        pingpong -m "$mode" -S 64 -I 20000
        pingpong -m "$mode" -S 4096 -I 5000
        pingpong -m "$mode" -S 1048576 -I 100
    done
    stream -S 4096,1048576 -b 256m
done
