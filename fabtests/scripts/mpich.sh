#!/usr/bin/env bash
# mpich.sh MPICH_HOME PREFIX NP PROGRAM [args...]
#
# Runs an MPI program built with MPICH_HOME/bin/mpicc on NP ranks with
# MPICH's ch4:ofi netmod over the uet provider (loaded from
# PREFIX/lib/libfabric by the libfabric MPICH carries), bounded by
# $MPI_TIMEOUT seconds (default 600). MPIR_CVAR_NOLOCAL keeps MPICH's own
# shared memory out, so every message between ranks goes through uet. The
# run fails unless MPICH reports uet as the provider it chose. FI_UET_*
# parameters reach every rank (hydra passes the environment on).
# PROVIDER=tcp (any other name) runs over that provider of MPICH's own
# libfabric instead, for comparison.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
[[ $# -ge 4 ]] || { echo "usage: $0 MPICH_HOME PREFIX NP PROGRAM [args]" >&2; exit 2; }
mpich=$1 prefix=$2 np=$3; shift 3
provider=${PROVIDER:-uet}
[[ $provider == uet ]] && provider_env "$prefix"
export FI_PROVIDER=$provider MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_DEBUG_SUMMARY=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
timeout "${MPI_TIMEOUT:-600}" "$mpich/bin/mpiexec" -n "$np" "$@" >"$out" 2>&1 || status=$?
# Rank 0's summary (MPI_Init) ends with a line of '=' after its data
# structure sizes; show what the program printed after it.
awk '/^==== data structure summary/ { sizes = 1 }
     !past { if (sizes && /^=+$/) past = 1; next } { print }' "$out"
if [[ $status -ne 0 ]]; then
    echo "mpich.sh: $* exited with $status" >&2
    tail -n 40 "$out" >&2
    exit "$status"
fi
if ! grep -q "^libfabric provider: $provider\b" "$out"; then
    echo "mpich.sh: MPICH did not report $provider as its provider" >&2
    exit 1
fi
