# Shared helpers for the run scripts (sourced, not executed).

# A UDP/TCP port nobody is bound to, for fi_pingpong's control connection.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# provider_env PREFIX: export what selects the installed uet provider.
provider_env() {
    local prefix=$1
    if [[ ! -f $prefix/lib/libfabric/libuet-fi.so ]]; then
        echo "no provider at $prefix/lib/libfabric/libuet-fi.so (run make install)" >&2
        exit 1
    fi
    export FI_PROVIDER_PATH=$prefix/lib/libfabric
}
