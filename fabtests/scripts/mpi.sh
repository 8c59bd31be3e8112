#!/usr/bin/env bash
# mpi.sh PREFIX NP PROGRAM [args...]
# Runs an MPI program with Open MPI's cm PML and ofi MTL over uet.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
[[ $# -ge 3 ]] || { echo "usage: $0 PREFIX NP PROGRAM [args]" >&2; exit 2; }
prefix=$1 np=$2; shift 2
provider_env "$prefix"
exec timeout "${MPI_TIMEOUT:-600}" mpirun --allow-run-as-root --oversubscribe -np "$np" \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include uet \
    --mca btl self,vader \
    -x FI_PROVIDER_PATH -x FI_PROVIDER=uet "$@"
