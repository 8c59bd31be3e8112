#!/usr/bin/env bash
# mpi.sh PREFIX NP PROGRAM [args...]
#
# Runs an MPI program with Open MPI's cm PML and ofi MTL over the libfabric
# provider $PROVIDER (default uet, loaded from PREFIX/lib/libfabric), bounded
# by $MPI_TIMEOUT seconds (default 600). PROVIDER=sockets validates the same
# command line against a stock provider.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
[[ $# -ge 3 ]] || { echo "usage: $0 PREFIX NP PROGRAM [args]" >&2; exit 2; }
prefix=$1 np=$2; shift 2
provider=${PROVIDER:-uet}
env_args=(-x "FI_PROVIDER=$provider")
if [[ $provider == uet ]]; then
    provider_env "$prefix"
    env_args+=(-x FI_PROVIDER_PATH)
fi
# The provider's parameters reach every rank.
for v in $(env | sed -n 's/^\(FI_UET_[A-Z0-9_]*\)=.*/\1/p'); do
    env_args+=(-x "$v")
done
exec timeout "${MPI_TIMEOUT:-600}" mpirun --allow-run-as-root --oversubscribe -np "$np" \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$provider" \
    --mca btl self,vader \
    "${env_args[@]}" "$@"
