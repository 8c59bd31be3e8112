#!/usr/bin/env bash
# pingpong.sh PREFIX [fi_pingpong options...]
#
# Runs an fi_pingpong server in the background and a client against it on
# 127.0.0.1 (control port picked free, -B/-P), both with -p $PROVIDER -e rdm.
# PROVIDER defaults to uet, loaded from PREFIX/lib/libfabric; PROVIDER=tcp or
# sockets runs the same thing over a stock provider (PREFIX is then unused).
# Prints the client's table; exits non-zero if either side fails or runs
# past $PINGPONG_TIMEOUT seconds (default 300) each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 PREFIX [fi_pingpong options]" >&2; exit 2; }
prefix=$1; shift
provider=${PROVIDER:-uet}
limit=${PINGPONG_TIMEOUT:-300}
[[ $provider == uet ]] && provider_env "$prefix"

port=$(free_port)
log=$(mktemp)
server=
trap 'rm -f "$log"; [[ -n $server ]] && kill "$server" 2>/dev/null; true' EXIT
start_server "$port" "$log" "$limit" fi_pingpong -p "$provider" -e rdm -B "$port" "$@"
server=$server_pid
status=0
timeout "$limit" fi_pingpong -p "$provider" -e rdm -P "$port" "$@" 127.0.0.1 || status=$?
sstatus=0
wait "$server" || sstatus=$?
server=
if [[ $sstatus -ne 0 ]]; then
    echo "fi_pingpong server ($provider) failed with status $sstatus:" >&2
    cat "$log" >&2
    exit 1
fi
if [[ $status -ne 0 ]]; then
    echo "fi_pingpong client ($provider) failed with status $status" >&2
    exit 1
fi
