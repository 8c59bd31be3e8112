# Shared helpers for the run scripts (sourced, not executed).

# A TCP port on 127.0.0.1 that nobody is bound to right now, for
# fi_pingpong's control connection.
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' && return
    fi
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 20000))
        if ! listening "$p"; then echo "$p"; return; fi
    done
    echo 47592
}

# Whether something listens on TCP port $1 of this host. A here-string,
# not a pipe: under pipefail, grep -q leaving before ss has written all
# its lines would make the pipe fail.
listening() {
    grep -q ":$1 " <<<"$(ss -ltn 2>/dev/null)"
}

# start_server PORT LOG LIMIT COMMAND...: run COMMAND, a server that takes
# its control connection on TCP port PORT of 127.0.0.1, in the background
# under `timeout LIMIT` with its output in LOG; return once it listens (it
# does once its endpoint is up) or has died. Its PID is in $server_pid.
start_server() {
    local port=$1 log=$2 limit=$3
    shift 3
    timeout "$limit" "$@" >"$log" 2>&1 &
    server_pid=$!
    for _ in $(seq 200); do
        listening "$port" && return 0
        kill -0 "$server_pid" 2>/dev/null || return 0
        sleep 0.05
    done
}

# provider_env PREFIX: export what makes libfabric load the installed uet
# provider. Other providers (PROVIDER=tcp, sockets) need nothing.
provider_env() {
    local prefix=$1
    if [[ ! -f $prefix/lib/libfabric/libuet-fi.so ]]; then
        echo "no provider at $prefix/lib/libfabric/libuet-fi.so (run make install)" >&2
        exit 1
    fi
    export FI_PROVIDER_PATH=$prefix/lib/libfabric
}
