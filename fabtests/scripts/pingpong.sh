#!/usr/bin/env bash
# pingpong.sh PREFIX [fi_pingpong options...]
# Runs an fi_pingpong server and client on 127.0.0.1 over the provider named
# by $PROVIDER (default uet, loaded from PREFIX) and prints the client's table.
# Fails when either side fails or runs past $PINGPONG_TIMEOUT seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 PREFIX [fi_pingpong options]" >&2; exit 2; }
prefix=$1; shift
provider=${PROVIDER:-uet}
limit=${PINGPONG_TIMEOUT:-600}
[[ $provider == uet ]] && provider_env "$prefix"

port=$(free_port)
log=$(mktemp)
trap 'rm -f "$log"; [[ -n ${server:-} ]] && kill "$server" 2>/dev/null || true' EXIT
timeout "$limit" fi_pingpong -p "$provider" -e rdm -B "$port" "$@" >"$log" 2>&1 &
server=$!
# The server listens on its control port once its endpoint is up.
for _ in $(seq 100); do
    if ss -ltn 2>/dev/null | grep -q ":$port "; then break; fi
    sleep 0.05
done
status=0
timeout "$limit" fi_pingpong -p "$provider" -e rdm -P "$port" "$@" 127.0.0.1 || status=$?
wait "$server" || { echo "server failed (status $?):" >&2; cat "$log" >&2; exit 1; }
server=
[[ $status -eq 0 ]] || { echo "client failed (status $status)" >&2; cat "$log" >&2; exit "$status"; }
