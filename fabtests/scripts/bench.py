#!/usr/bin/env python3
"""bench.py PREFIX OUTDIR [--quick]: uet beside tcp, udp;ofi_rxd and raw UDP.

Runs, interleaved and repeated, on 127.0.0.1:
  * fi_pingpong -e rdm (msg and tagged) per message size,
  * uet_bw (build/bin, a window of outstanding sends) per message size,
  * uet_bw -L -w: a ping-pong whose two sides wait in fi_cq_sread, as an
    application that blocks does (uet also with FI_UET_WAIT_SPIN_US=0, to
    show what polling before sleeping buys),
  * raw-UDP anchors: sockperf ping-pong with busy-polling (--nonblocked),
    iperf3 UDP at 4 KiB and 64 KiB datagrams (one datagram per system
    call), udp_gso_bw (build/bin) streaming 4 KiB segments with UDP GSO
    and GRO, the reference for a transport that batches small datagrams,
    and 65000-byte datagrams with spliced payloads (-s), the reference for
    uet's large datagrams, which it splices too, and udp_pingpong
    (build/bin): a ping-pong of 64 KiB to 16 MiB messages in datagrams of
    65000 payload bytes, spliced at the sender and landed in place at the
    receiver (one copy per byte, as uet's network path makes) or sent by a
    copying sendmsg (two), with nothing else to do: no ACKs, no flow
    control (anchors, not strict bounds: uet can match them),
  * an MPI halo exchange (PREFIX/bin/mpi_halo under Open MPI's cm PML and
    ofi MTL, two ranks that exchange a message and compute, or not, each
    iteration; not over udp;ofi_rxd),
  * as root, fi_pingpong (msg) between two network namespaces joined by a
    veth pair (MTU 1500): uet with its defaults off loopback (1472-byte
    packets, REPS over 16 source ports) against tcp over the same pair,
    the nearest thing to two hosts on one machine (net.csv),
over five configurations: uet with 4 KiB packets (FI_UET_MTU=4096), uet with
its default auto MTU (large datagrams on loopback), uet-host (the default
MTU plus the same-host paths: datagrams through shared-memory rings,
FI_UET_HOST_RING=1, and large messages copied in place, FI_UET_HOST_READ=1,
with rendezvous from 16 KiB so more of each is copied), tcp and udp;ofi_rxd.
When PREFIX holds the profile-guided provider and UET_PLAIN_LIBDIR names a
directory with the plain build's libuet-fi.so, that build (uet-64k-plain)
also runs the 64 B ping-pongs, interleaved with the others, and the report
compares the two.

Writes OUTDIR/{pingpong,stream,wait,raw,mpi,net}.csv (every run), OUTDIR/summary.csv
(medians) and OUTDIR/bench.png, and prints per size the medians, the spread
(min-max over repetitions) and the ratios uet/tcp, uet/rxd and uet/raw, then
one PASS/MISS line per target. Every run is bounded by `timeout`; a failed
run is printed and recorded, never dropped silently. Exit status is 0 unless
the harness itself breaks: targets are reported, not asserted.
"""
import csv
import glob
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

PREFIX, OUT = sys.argv[1], sys.argv[2]
QUICK = "--quick" in sys.argv[3:]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
UET_BW = os.environ.get("UET_BW", os.path.join(ROOT, "build", "bin", "uet_bw"))
UDP_GSO_BW = os.environ.get("UDP_GSO_BW", os.path.join(ROOT, "build", "bin", "udp_gso_bw"))
UDP_PINGPONG = os.environ.get("UDP_PINGPONG",
                              os.path.join(ROOT, "build", "bin", "udp_pingpong"))
LIBDIR = os.path.join(PREFIX, "lib", "libfabric")
MPI_HALO = os.path.join(PREFIX, "bin", "mpi_halo")
MPI_SH = os.path.join(HERE, "mpi.sh")
# MPICH ch4:ofi (the Makefile's MPICH wheel, with its own libfabric 2.x and
# that library's tcp provider); its rows are skipped when these are unset.
MPICH_HOME = os.environ.get("MPICH_HOME", "")
MPICH_HALO = os.environ.get("MPICH_HALO", "")
MPICH_SH = os.path.join(HERE, "mpich.sh")
# Which build of the provider PREFIX holds (the Makefile says: plain or
# profile-guided, PGO=1); printed and kept with the results.
UET_BUILD = os.environ.get("UET_BUILD", "not stated")
# With a profile-guided provider in PREFIX, the plain build of the same
# source (a directory holding its libuet-fi.so): its 64 B ping-pong runs
# beside uet-64k's, so every run shows what the profile buys.
PLAIN_LIBDIR = os.environ.get("UET_PLAIN_LIBDIR", "")
PLAIN = "uet-64k-plain"

KI, MI = 1024, 1024 * 1024
# name -> (libfabric provider, extra environment)
CONFIGS = {
    "uet-4k": ("uet", {"FI_PROVIDER_PATH": LIBDIR, "FI_UET_MTU": "4096"}),
    "uet-64k": ("uet", {"FI_PROVIDER_PATH": LIBDIR}),
    "uet-host": ("uet", {"FI_PROVIDER_PATH": LIBDIR, "FI_UET_HOST_READ": "1",
                         "FI_UET_HOST_RING": "1", "FI_UET_RENDEZVOUS_BYTES": "16384"}),
    "tcp": ("tcp", {}),
    "rxd": ("udp;ofi_rxd", {}),
}
if PLAIN_LIBDIR:
    CONFIGS[PLAIN] = ("uet", {"FI_PROVIDER_PATH": PLAIN_LIBDIR})
# Only in the blocking-wait ping-pong: uet-64k sleeping at once.
NOSPIN = "uet-64k-nospin"
CONFIGS[NOSPIN] = ("uet", {"FI_PROVIDER_PATH": LIBDIR, "FI_UET_WAIT_SPIN_US": "0"})
UETS = ["uet-4k", "uet-64k", "uet-host"]
# uet-4k is compared with raw UDP at 4 KiB datagrams, the others at 64 KiB.
RAW_DGRAM = {"uet-4k": 4096, "uet-64k": 65000, "uet-host": 65000}

if QUICK:
    REPS = 1
    PP_SIZES = [1, 64, 4 * KI, 64 * KI, 1 * MI, 4 * MI]
    PP_MODES = ["msg"]
    BW_SIZES = [64, 4 * KI, 64 * KI, 1 * MI, 4 * MI]
    BW_BYTES = "32m"
    RAW_TIME = 1
else:
    # More repetitions narrow the medians on a host that drifts in phases.
    REPS = max(1, int(os.environ.get("BENCH_REPS", "3")))
    PP_SIZES = [1, 64, 1 * KI, 4 * KI, 64 * KI, 1 * MI, 4 * MI, 16 * MI]
    PP_MODES = ["msg", "tagged"]
    BW_SIZES = [64, 4 * KI, 64 * KI, 1 * MI, 4 * MI, 16 * MI]
    BW_BYTES = "128m"
    RAW_TIME = 2
SOCKPERF_SIZES = [64, 1 * KI, 4 * KI, 65000]
# The raw large-message ping-pong (udp_pingpong): sizes, and its two ways
# to send, with the test names they are recorded under.
RAW_PP_SIZES = [s for s in PP_SIZES if s >= 64 * KI]
RAW_PP_MODES = {"udp_pp": [], "udp_pp_copy": ["-c"]}
# Why the raw ping-pong could not run here (exit status 77), once known.
RAW_PP_SKIPPED = []
# Blocking-wait ping-pong (uet_bw -L -w): sizes and round trips per size.
WAIT_SIZES = [64, 4 * KI, 64 * KI]
WAIT_ITERS = 1000 if QUICK else 3000
WAIT_CONFIGS = UETS + [NOSPIN, "tcp", "rxd"]
# MPI halo exchange: (message bytes, compute us per iteration); udp;ofi_rxd
# is left out (Open MPI over it is not what its users run).
MPI_CONFIGS = ["uet-4k", "uet-64k", "uet-host", "tcp"]
MPI_CASES = [(8 * KI, 200)] if QUICK else [(64, 200), (64, 0), (8 * KI, 200), (8 * KI, 0)]
MPI_LIBRARIES = ["openmpi"] + (["mpich"] if MPICH_HOME and MPICH_HALO else [])
MPI_ITERS = 500 if QUICK else 1000
# The network path between two namespaces: the server's end first.
NETNS = ("uet-bench-a", "uet-bench-b")
NET_ADDRS = ("10.233.77.1", "10.233.77.2")
NET_CONFIGS = {"uet-net": ("uet", {"FI_PROVIDER_PATH": LIBDIR}), "tcp-net": ("tcp", {})}
NET_SIZES = [64, 4 * KI, 64 * KI, 1 * MI, 4 * MI]


def pp_iters(size, config):
    """Iterations per fi_pingpong run: enough to average, bounded in time.

    fi_pingpong has no warm-up: its first iterations are timed too. A
    large-message run must last long past a new connection's ramp-up
    (tcp's first few 4 MiB transfers take three times as long as the
    rest), or it measures that ramp instead of the steady state an
    application sees; so even 16 MiB runs move about 1 GiB each way.
    Small messages run for a few tenths of a second, like the sockperf
    anchor they are compared with: 2000 round trips of 64 B last about
    30 ms, a few scheduler time slices, and one preemption of either
    process moved such a run's mean by 20-50% on a shared VM.
    """
    if size <= 64:
        n = 20000
    elif size <= 4 * KI:
        n = 5000
    elif size <= 64 * KI:
        n = 400
    elif size <= 1 * MI:
        n = 400
    elif size <= 4 * MI:
        n = 200
    else:
        n = 60
    if QUICK:
        n = max(2, n // 2)
    # udp;ofi_rxd moves large messages at tens of MB/s.
    if config == "rxd" and size >= MI:
        n = max(2, n // 3)
    return n


def log(msg):
    print(msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tcp_tables(netns=None):
    """The rows of /proc/net/tcp and tcp6, of network namespace `netns`
    (read through ip-netns-exec) or of ours."""
    paths = ["/proc/net/tcp", "/proc/net/tcp6"]
    if netns:
        r = subprocess.run(["ip", "netns", "exec", netns, "cat", *paths],
                           capture_output=True, text=True)
        return r.stdout.splitlines()
    rows = []
    for path in paths:
        try:
            with open(path) as f:
                rows += f.read().splitlines()
        except OSError:
            continue
    return rows


def tcp_listening(port, netns=None):
    """Whether a socket listens on TCP `port` (read from /proc, so the
    check does not take the server's one out-of-band connection)."""
    for row in tcp_tables(netns):
        cols = row.split()
        try:
            # local address "IP:PORT" in hex, state 0A = LISTEN
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return True
        except (ValueError, IndexError):
            continue  # the header line
    return False


def client_server(server_cmd, client_cmd, env, limit, listen_port=None, settle=0.3,
                  netns=None):
    """Run a server in the background and a client against it, both under
    `timeout`. With `listen_port`, the client starts once the server listens
    there (in network namespace `netns`, if given; up to 10 s: a loaded
    machine can take longer than any fixed pause), else after `settle`
    seconds. Returns (ok, client stdout, error text)."""
    full_env = dict(os.environ, **env)
    tl = ["timeout", "-k", "5", str(limit)]
    srv = subprocess.Popen(tl + server_cmd, env=full_env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    if listen_port is not None:
        end = time.time() + 10.0
        while (time.time() < end and srv.poll() is None
               and not tcp_listening(listen_port, netns)):
            time.sleep(0.01)
    else:
        time.sleep(settle)
    try:
        cli = subprocess.run(tl + client_cmd, env=full_env, capture_output=True,
                             text=True, timeout=limit + 10)
        crc, cout, cerr = cli.returncode, cli.stdout, cli.stderr
    except subprocess.TimeoutExpired:
        crc, cout, cerr = 124, "", "client exceeded its time limit"
    try:
        sout, _ = srv.communicate(timeout=limit + 10)
        src = srv.returncode
    except subprocess.TimeoutExpired:
        srv.kill()
        sout, _ = srv.communicate()
        src = 124
    if crc == 0 and src in (0, None):
        return True, cout, ""
    def excerpt(text):
        lines = (text or "").strip().splitlines()
        return " | ".join(lines[:2] + (["..."] + lines[-1:] if len(lines) > 3 else lines[2:]))

    what = []
    if crc != 0:
        what.append(f"client status {crc}{' (timeout)' if crc == 124 else ''}: "
                    f"{excerpt(cerr or cout)}")
    if src not in (0, None):
        what.append(f"server status {src}{' (timeout)' if src == 124 else ''}: "
                    f"{excerpt(sout)}")
    return False, cout, "; ".join(what)


FAILURES = []


def run_pingpong(config, mode, size):
    prov, env = CONFIGS[config]
    port = free_port()
    iters = pp_iters(size, config)
    common = ["fi_pingpong", "-p", prov, "-e", "rdm", "-m", mode, "-S", str(size),
              "-I", str(iters)]
    limit = 60 if (config == "rxd" and size >= MI) else 30
    srv = common + ["-B", str(port)]
    cli = common + ["-P", str(port), "127.0.0.1"]
    ok, out, err = client_server(srv, cli, env, limit, listen_port=port)
    return pingpong_result(f"fi_pingpong {config} {mode} {size} B", ok, out, err, iters)


def pingpong_result(what, ok, out, err, iters):
    """The result row of an fi_pingpong run, or None (recorded as failed)."""
    if ok:
        # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 8 and re.match(r"^[0-9.]+[kmg]?$", f[0]):
                return {"lat_us": float(f[6]), "mbps": float(f[5]), "iters": iters}
        err = "no result line in fi_pingpong output"
    FAILURES.append(f"{what}: {err}")
    log(f"   FAILED {what}: {err}")
    return None


def netns_down():
    """Removes the namespaces (their veth ends with them) and a pair left
    in ours by a run that died while making it."""
    for ns in NETNS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "link", "del", "uetbench0"], capture_output=True)


def netns_up():
    """Two network namespaces joined by a veth pair (MTU 1500, addresses
    NET_ADDRS); None when done, else why not (not root, no ip(8), a step
    refused), with nothing left behind."""
    if os.geteuid() != 0:
        return "needs root"
    if subprocess.run(["sh", "-c", "command -v ip"], capture_output=True).returncode:
        return "needs ip(8) (iproute2)"
    netns_down()
    (a, b), (addr_a, addr_b) = NETNS, NET_ADDRS
    steps = [["ip", "netns", "add", a], ["ip", "netns", "add", b],
             ["ip", "link", "add", "uetbench0", "type", "veth", "peer", "name", "uetbench1"],
             ["ip", "link", "set", "uetbench0", "netns", a],
             ["ip", "link", "set", "uetbench1", "netns", b],
             ["ip", "-n", a, "addr", "add", addr_a + "/30", "dev", "uetbench0"],
             ["ip", "-n", b, "addr", "add", addr_b + "/30", "dev", "uetbench1"]]
    for ns, dev in ((a, "uetbench0"), (b, "uetbench1")):
        steps += [["ip", "-n", ns, "link", "set", "lo", "up"],
                  ["ip", "-n", ns, "link", "set", dev, "up"]]
    for step in steps:
        r = subprocess.run(step, capture_output=True, text=True)
        if r.returncode:
            netns_down()
            return f"`{' '.join(step)}` failed: {r.stderr.strip()}"
    return None


def run_net_pingpong(config, size):
    """fi_pingpong msg from the second namespace to the first (netns_up)."""
    prov, env = NET_CONFIGS[config]
    port = free_port()
    iters = pp_iters(size, config)
    common = ["fi_pingpong", "-p", prov, "-e", "rdm", "-m", "msg", "-S", str(size),
              "-I", str(iters)]

    def inside(k):
        return ["ip", "netns", "exec", NETNS[k], "env", f"FI_UET_SRC_ADDR={NET_ADDRS[k]}"]
    srv = inside(0) + common + ["-B", str(port)]
    cli = inside(1) + common + ["-P", str(port), NET_ADDRS[0]]
    ok, out, err = client_server(srv, cli, env, 30, listen_port=port, netns=NETNS[0])
    return pingpong_result(f"fi_pingpong {config} {size} B between namespaces", ok, out,
                           err, iters)


def run_uet_bw(config, what, flags, client_flags, fields):
    """uet_bw over `config`: {size: row} from its result lines (size, iters,
    seconds, then the two columns named by `fields`); a failure is recorded
    as `what`."""
    prov, env = CONFIGS[config]
    port = free_port()
    common = [UET_BW, "-p", prov, "-m", "msg", *flags, "-T", "40"]
    ok, out, err = client_server(common + ["-B", str(port)],
                                 common + ["-P", str(port), *client_flags, "127.0.0.1"],
                                 env, 120, listen_port=port)
    res = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 5 and f[0].isdigit():
            res[int(f[0])] = {"iters": int(f[1]), fields[0]: float(f[3]),
                              fields[1]: float(f[4])}
    if not ok:
        FAILURES.append(f"{what} {config}: {err}")
        log(f"   FAILED {what} {config}: {err}")
    return res


def run_stream(config):
    sizes = ",".join(str(s) for s in BW_SIZES)
    return run_uet_bw(config, "uet_bw", [], ["-S", sizes, "-b", BW_BYTES],
                      ("mbps", "cpu_s_per_gb"))


def run_wait_pingpong(config):
    """One-way latency (us) per size of a ping-pong waiting in fi_cq_sread."""
    sizes = ",".join(str(s) for s in WAIT_SIZES)
    return run_uet_bw(config, "uet_bw -L -w", ["-L", "-w"],
                      ["-S", sizes, "-I", str(WAIT_ITERS)], ("lat_us", "cpu_us_per_rt"))


def run_sockperf(size):
    port = free_port()
    srv = ["sockperf", "server", "-i", "127.0.0.1", "-p", str(port), "--nonblocked"]
    cli = ["sockperf", "ping-pong", "-i", "127.0.0.1", "-p", str(port), "--nonblocked",
           "-m", str(size), "-t", str(RAW_TIME)]
    full_env = dict(os.environ)
    s = subprocess.Popen(["timeout", str(RAW_TIME + 10)] + srv, env=full_env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        c = subprocess.run(["timeout", str(RAW_TIME + 8)] + cli, capture_output=True,
                           text=True)
        text = c.stdout + c.stderr
    finally:
        s.terminate()
        s.wait()
    avg = re.search(r"Summary: Latency is ([0-9.]+) usec", text)
    p50 = re.search(r"percentile 50\.000 =\s*([0-9.]+)", text)
    if not avg:
        FAILURES.append(f"sockperf {size} B: {text.strip()[-300:]}")
        log(f"   FAILED sockperf {size} B")
        return None
    return {"lat_us": float(avg.group(1)), "p50_us": float(p50.group(1)) if p50 else None}


def run_iperf(dgram):
    port = free_port()
    srv = ["iperf3", "-s", "-1", "-p", str(port)]
    cli = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-u", "-b", "0", "-l", str(dgram),
           "-t", str(RAW_TIME), "-J"]
    ok, out, err = client_server(srv, cli, {}, RAW_TIME + 20, settle=0.3)
    if ok:
        try:
            end = json.loads(out)["end"]
            rx = end["sum_received"]
            cpu = end["cpu_utilization_percent"]
            secs = rx["seconds"]
            cpu_s = (cpu["host_total"] + cpu["remote_total"]) / 100 * secs
            return {"mbps": rx["bits_per_second"] / 8 / 1e6,
                    "cpu_s_per_gb": cpu_s / (rx["bytes"] / 1e9)}
        except (ValueError, KeyError, ZeroDivisionError) as e:
            err = f"bad iperf3 output: {e}"
    FAILURES.append(f"iperf3 UDP {dgram} B: {err}")
    log(f"   FAILED iperf3 UDP {dgram} B: {err}")
    return None


def run_udp_gso(segment, flags=()):
    cmd = ["timeout", str(RAW_TIME + 10), UDP_GSO_BW, "-l", str(segment), "-t", str(RAW_TIME),
           *flags]
    c = subprocess.run(cmd, capture_output=True, text=True)
    f = c.stdout.split()
    if c.returncode == 0 and len(f) == 6:
        try:
            return {"mbps": float(f[2]), "cpu_s_per_gb": float(f[3])}
        except ValueError:
            pass
    err = (c.stdout + c.stderr).strip()[-300:] or f"exit status {c.returncode}"
    what = " ".join(["udp_gso_bw", *flags, f"{segment} B"])
    FAILURES.append(f"{what}: {err}")
    log(f"   FAILED {what}: {err}")
    return None


def run_udp_pingpong(flags):
    """udp_pingpong over RAW_PP_SIZES: {size: {lat_us, mbps}} for the sizes
    it measured. Sizes whose message does not fit in a socket buffer here
    (not root) are skipped, their reasons noted once; a failure is recorded,
    and the sizes measured before it are kept."""
    sizes = ",".join(str(s) for s in RAW_PP_SIZES)
    cmd = ["timeout", "60", UDP_PINGPONG, "-S", sizes, *flags]
    c = subprocess.run(cmd, capture_output=True, text=True)
    skipped = [line for line in c.stderr.splitlines() if "skipping" in line]
    for line in skipped:
        if line not in RAW_PP_SKIPPED:
            RAW_PP_SKIPPED.append(line)
            log(f"   SKIPPED {line}")
    if c.returncode == 77:
        return {}
    res = {}
    for line in c.stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[0].isdigit():
            try:
                res[int(f[0])] = {"lat_us": float(f[2]), "mbps": float(f[3])}
            except ValueError:
                pass
    if c.returncode or len(res) + len(skipped) != len(RAW_PP_SIZES):
        err = (c.stdout + c.stderr).strip()[-300:] or f"exit status {c.returncode}"
        what = " ".join(["udp_pingpong", *flags])
        FAILURES.append(f"{what}: {err}")
        log(f"   FAILED {what}: {err}")
    return res


def run_halo(library, config, size, compute_us):
    """mpi_halo with two ranks over `config` under `library` (openmpi or
    mpich): mean us per iteration and per exchange (posting to the end of
    MPI_Waitall), the slower rank's."""
    prov, env = CONFIGS[config]
    full_env = dict(os.environ, **env, PROVIDER=prov, MPI_TIMEOUT="60")
    if library == "mpich":
        cmd = [MPICH_SH, MPICH_HOME, PREFIX, "2", MPICH_HALO]
    else:
        cmd = [MPI_SH, PREFIX, "2", MPI_HALO]
    cmd = ["timeout", "-k", "5", "90"] + cmd + [str(size), str(compute_us), str(MPI_ITERS)]
    c = subprocess.run(cmd, env=full_env, capture_output=True, text=True)
    m = re.search(r"iteration ([0-9.]+) us, exchange ([0-9.]+) us$", c.stdout, re.M)
    if c.returncode == 0 and m:
        return {"iter_us": float(m.group(1)), "exchange_us": float(m.group(2))}
    lines = (c.stdout + c.stderr).strip().splitlines()
    err = f"status {c.returncode}: {' | '.join(lines[-2:])}"
    what = f"mpi_halo {library} {config} {size} B compute {compute_us} us"
    FAILURES.append(f"{what}: {err}")
    log(f"   FAILED {what}: {err}")
    return None


def rotate(seq, k):
    k %= len(seq)
    return seq[k:] + seq[:k]


def free_page_reporting():
    """The size in KiB of the free blocks this VM hands back to its
    hypervisor (virtio-balloon free page reporting), or None when it does
    not. A reported block is unmapped at the host, so the next page the
    kernel allocates from it faults there on its first write."""
    page_kib = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) // 1024
    try:
        with open("/sys/module/page_reporting/parameters/page_reporting_order") as f:
            order = int(f.read())
    except (OSError, ValueError):
        order = -1  # kernels before 5.14 report without saying the order
    if order < 0:
        # The kernel's choice: the pageblock order, 2 MiB with 4 KiB pages.
        order = max((2048 // page_kib).bit_length() - 1, 0)
    # An order past the largest the buddy allocator has (its columns in
    # /proc/buddyinfo) matches no free block: nothing is reported.
    try:
        with open("/proc/buddyinfo") as f:
            orders = max(len(line.split()) - 4 for line in f)
    except (OSError, ValueError):
        orders = None
    if orders is not None and order >= orders:
        return None
    for dev in glob.glob("/sys/bus/virtio/devices/*"):
        try:
            with open(os.path.join(dev, "device")) as f:
                device = f.read().strip()
            with open(os.path.join(dev, "features")) as f:
                features = f.read().strip()
        except OSError:
            continue
        # Device 5 is the balloon; feature bit 5 is VIRTIO_BALLOON_F_REPORTING,
        # and sysfs prints the negotiated bits lowest first.
        if (device == "0x0005" and len(features) > 5 and features[5] == "1"
                and os.path.exists(os.path.join(dev, "driver"))):
            return page_kib << order
    return None


FRESH_PAGES_NOTE = (
    "this VM hands free memory back to its hypervisor (free page reporting, "
    "{kib} KiB blocks): senders that copy into freshly allocated kernel pages "
    "(uet-4k) can run at half their rate or less in some repetitions (README, "
    "Benchmarks)")


def main():
    os.makedirs(OUT, exist_ok=True)
    mpich_tools = [MPICH_HALO, os.path.join(MPICH_HOME, "bin", "mpiexec")] if MPICH_HALO else []
    for tool in ["fi_pingpong", "sockperf", "iperf3", "mpirun", UET_BW, UDP_GSO_BW, UDP_PINGPONG,
                 MPI_HALO,
                 *mpich_tools]:
        if subprocess.run(["sh", "-c", f"command -v '{tool}'"],
                          capture_output=True).returncode:
            sys.exit(f"bench: {tool} not found (make deps / make bench builds it)")
    if not os.path.exists(os.path.join(LIBDIR, "libuet-fi.so")):
        sys.exit(f"bench: no provider in {LIBDIR} (make install)")

    # The plain build only joins the 64 B ping-pongs (msg and tagged), the
    # spinless one the blocking-wait ping-pong.
    configs = [c for c in CONFIGS if c not in (PLAIN, NOSPIN)]
    pp_rows, bw_rows, wait_rows, raw_rows, mpi_rows = [], [], [], [], []
    t0 = time.time()
    # Busy-polling benchmarks measure the scheduler when the cores are busy.
    log("== load average at start: %.2f %.2f %.2f on %d cores"
        % (*os.getloadavg(), os.cpu_count() or 0))
    log(f"== uet provider build: {UET_BUILD}")
    reported = free_page_reporting()
    if reported:
        log("== host memory: " + FRESH_PAGES_NOTE.format(kib=reported))
    with open(os.path.join(OUT, "build.txt"), "w") as f:
        f.write(UET_BUILD + "\n")
    net_rows = []
    no_net = netns_up()
    if no_net:
        log(f"== network path between namespaces SKIPPED: {no_net}")
    # A bench stopped by its time limit (SIGTERM) removes them too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: terminated"))
    try:
        run_reps(configs, pp_rows, bw_rows, wait_rows, raw_rows, mpi_rows,
                 None if no_net else net_rows, t0)
    finally:
        if not no_net:
            netns_down()

    write_csv("pingpong.csv", pp_rows, ["rep", "config", "mode", "size", "iters", "lat_us",
                                        "mbps"])
    write_csv("stream.csv", bw_rows, ["rep", "config", "size", "mbps", "cpu_s_per_gb"])
    write_csv("wait.csv", wait_rows, ["rep", "config", "size", "iters", "lat_us",
                                      "cpu_us_per_rt"])
    write_csv("raw.csv", raw_rows, ["rep", "test", "size", "lat_us", "p50_us", "mbps",
                                    "cpu_s_per_gb"])
    write_csv("mpi.csv", mpi_rows, ["rep", "library", "config", "size", "compute_us",
                                    "iter_us", "exchange_us"])
    write_csv("net.csv", net_rows, ["rep", "config", "size", "iters", "lat_us", "mbps"])
    report(pp_rows, bw_rows, wait_rows, raw_rows, mpi_rows, net_rows, reported)
    log(f"== bench finished in {time.time() - t0:.0f} s; load average at end: "
        f"{os.getloadavg()[0]:.2f}; results in {OUT}")


def run_reps(configs, pp_rows, bw_rows, wait_rows, raw_rows, mpi_rows, net_rows, t0):
    """The interleaved repetitions; `net_rows` None when the namespaces
    are not there."""
    n_pp = REPS * len(PP_MODES) * len(PP_SIZES)
    done = 0
    for rep in range(REPS):
        log(f"== repetition {rep + 1}/{REPS} ({time.time() - t0:.0f} s so far)")
        # Raw anchors first: they are short and bound what the rest can reach.
        for size in SOCKPERF_SIZES:
            r = run_sockperf(size)
            if r:
                raw_rows.append({"rep": rep, "test": "sockperf", "size": size, **r})
        for dgram in (4096, 65000):
            r = run_iperf(dgram)
            if r:
                raw_rows.append({"rep": rep, "test": "iperf3", "size": dgram, **r})
        r = run_udp_gso(4096)
        if r:
            raw_rows.append({"rep": rep, "test": "udp_gso", "size": 4096, **r})
        r = run_udp_gso(65000, ["-s"])
        if r:
            raw_rows.append({"rep": rep, "test": "udp_splice", "size": 65000, **r})
        for test in rotate(list(RAW_PP_MODES), rep):
            for size, r in run_udp_pingpong(RAW_PP_MODES[test]).items():
                raw_rows.append({"rep": rep, "test": test, "size": size, **r})
        log(f"   raw UDP anchors done ({time.time() - t0:.0f} s)")
        for i, config in enumerate(rotate(configs, rep)):
            res = run_stream(config)
            for size, r in res.items():
                bw_rows.append({"rep": rep, "config": config, "size": size, **r})
        log(f"   streaming bandwidth done ({time.time() - t0:.0f} s)")
        for config in rotate(WAIT_CONFIGS, rep):
            for size, r in run_wait_pingpong(config).items():
                wait_rows.append({"rep": rep, "config": config, "size": size, **r})
        log(f"   blocking-wait ping-pong done ({time.time() - t0:.0f} s)")
        for library in MPI_LIBRARIES:
            for size, compute_us in MPI_CASES:
                for config in rotate(MPI_CONFIGS, rep + size.bit_length()):
                    r = run_halo(library, config, size, compute_us)
                    if r:
                        mpi_rows.append({"rep": rep, "library": library, "config": config,
                                         "size": size, "compute_us": compute_us, **r})
        log(f"   MPI halo exchanges done ({time.time() - t0:.0f} s)")
        for mode in PP_MODES:
            for size in PP_SIZES:
                # Interleave: every configuration at this size, in an order
                # that rotates per size and repetition.
                here = configs + ([PLAIN] if PLAIN_LIBDIR and size == 64 else [])
                for config in rotate(here, rep + size.bit_length()):
                    r = run_pingpong(config, mode, size)
                    if r:
                        pp_rows.append({"rep": rep, "config": config, "mode": mode,
                                        "size": size, **r})
                done += 1
                log(f"   fi_pingpong {mode:6} {size:>9} B  [{done}/{n_pp}, "
                    f"{time.time() - t0:.0f} s]")
        if net_rows is None:
            continue
        for size in NET_SIZES:
            for config in rotate(list(NET_CONFIGS), rep + size.bit_length()):
                r = run_net_pingpong(config, size)
                if r:
                    net_rows.append({"rep": rep, "config": config, "size": size, **r})
        log(f"   fi_pingpong between namespaces done ({time.time() - t0:.0f} s)")


MPI_TITLES = {
    "openmpi": "Open MPI cm/ofi, Debian's libfabric and its tcp",
    "mpich": "MPICH ch4:ofi, MPICH's own libfabric 2.x and its tcp",
}


def report_mpi(rows):
    for library in MPI_LIBRARIES:
        report_mpi_library([r for r in rows if r["library"] == library], library)


def report_mpi_library(rows, library):
    log(f"\n== MPI halo exchange (mpi_halo, 2 ranks, {MPI_TITLES[library]}): median us "
        "per exchange [min-max], ratio to tcp (lower is better)")
    log(f"{'size':>6} {'compute':>8} " + " ".join(f"{c:>22}" for c in MPI_CONFIGS))
    for size, compute_us in MPI_CASES:
        t = med(rows, "exchange_us", config="tcp", size=size, compute_us=compute_us)[0]
        cells = []
        for c in MPI_CONFIGS:
            m, lo, hi = med(rows, "exchange_us", config=c, size=size, compute_us=compute_us)
            spread = f"[{fmt(lo, 1, 0)}-{fmt(hi, 1, 0)}]" if lo is not None else ""
            tail = f" {fmt(ratio(m, t), 1)}x" if c != "tcp" else ""
            cells.append(f"{fmt(m, 1, 1)} {spread}{tail}")
        log(f"{size_label(size):>6} {compute_us:>5} us " + " ".join(f"{x:>22}" for x in cells))


def write_csv(name, rows, fields):
    with open(os.path.join(OUT, name), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def med(rows, key, **match):
    vals = [r[key] for r in rows if all(r.get(k) == v for k, v in match.items())
            and r.get(key) is not None]
    if not vals:
        return None, None, None
    return statistics.median(vals), min(vals), max(vals)


def paired(rows, key, a, b, **match):
    """Per repetition, config a's value over config b's, both measured in
    that repetition: whether a target's median ratio holds in every
    repetition or rests on one. A text for a target's line, empty without
    data."""
    reps = sorted({r["rep"] for r in rows})
    if len(reps) < 2:
        return ""
    qs = [ratio(med(rows, key, config=a, rep=rep, **match)[0],
                med(rows, key, config=b, rep=rep, **match)[0]) for rep in reps]
    out = ["-" if q is None else f"{q:.2f}x" for q in qs]
    return f" (per repetition: {' '.join(out)})"


def fmt(v, w=9, p=2):
    return f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"


def ratio(a, b):
    return a / b if a is not None and b else None


def size_label(s):
    if s >= MI and s % MI == 0:
        return f"{s // MI}M"
    if s >= KI and s % KI == 0:
        return f"{s // KI}K"
    return str(s)


def report_net(rows):
    """The namespace ping-pong table; returns its summary rows."""
    if not rows:
        return []
    log("\n== fi_pingpong -e rdm -m msg between two network namespaces (veth, MTU 1500): "
        "uet with its defaults off loopback against tcp; median one-way us [min-max], "
        "MB/s, ratios uet/tcp")
    log(f"{'size':>6} {'uet':>9} {'spread':>15} {'tcp':>9} {'/tcp':>6} | {'uetMB/s':>8} "
        f"{'tcpMB/s':>8} {'x tcp':>6}")
    summary = []
    for s in NET_SIZES:
        u, lo, hi = med(rows, "lat_us", config="uet-net", size=s)
        t = med(rows, "lat_us", config="tcp-net", size=s)[0]
        ub = med(rows, "mbps", config="uet-net", size=s)[0]
        tb = med(rows, "mbps", config="tcp-net", size=s)[0]
        spread = f"{fmt(lo, 1)}-{fmt(hi, 1)}" if lo is not None else "-"
        log(f"{size_label(s):>6} {fmt(u)} {spread:>15} {fmt(t)} {fmt(ratio(u, t), 6)} | "
            f"{fmt(ub, 8, 0)} {fmt(tb, 8, 0)} {fmt(ratio(ub, tb), 6)}")
        summary.append({"test": "net_pingpong", "mode": "msg", "uet": "uet-net", "size": s,
                        "uet_lat_us": u, "tcp_lat_us": t, "uet_mbps": ub, "tcp_mbps": tb})
    return summary


# What each configuration's streaming column `x off` compares with.
OFFLOAD_LABEL = {"uet-4k": "udp_gso_bw 4 KiB segments",
                 "uet-64k": "udp_gso_bw -s 65000 B spliced",
                 "uet-host": "nothing (its large messages bypass UDP)"}


def report(pp, bw, wait, raw, mpi, net, reported):
    summary = []
    sock = {s: med(raw, "lat_us", test="sockperf", size=s)[0] for s in SOCKPERF_SIZES}
    sock[64 * KI] = sock.pop(65000)
    iperf = {d: med(raw, "mbps", test="iperf3", size=d)[0] for d in (4096, 65000)}
    iperf_cpu = {d: med(raw, "cpu_s_per_gb", test="iperf3", size=d)[0] for d in (4096, 65000)}
    gso, gso_lo, gso_hi = med(raw, "mbps", test="udp_gso", size=4096)
    gso_cpu = med(raw, "cpu_s_per_gb", test="udp_gso", size=4096)[0]
    spliced, spliced_lo, spliced_hi = med(raw, "mbps", test="udp_splice", size=65000)
    spliced_cpu = med(raw, "cpu_s_per_gb", test="udp_splice", size=65000)[0]
    # What each uet configuration's sends can reach: uet-4k segments its
    # 4 KiB packets as udp_gso_bw does; 64 KiB datagrams go one per call,
    # their payloads spliced (udp_gso_bw -s).
    # uet-host's large messages bypass UDP: no reference for it (OFFLOAD_LABEL).
    offload_bw = {"uet-4k": gso, "uet-64k": spliced, "uet-host": None}
    # The raw large-message ping-pong: spliced (one copy) and copied.
    raw_pp = {t: {s: med(raw, "mbps", test=t, size=s)[0] for s in RAW_PP_SIZES}
              for t in RAW_PP_MODES}

    log("\n== raw UDP anchors (medians)")
    for s in SOCKPERF_SIZES:
        m, lo, hi = med(raw, "lat_us", test="sockperf", size=s)
        log(f"   sockperf busy-poll ping-pong {s:>6} B: one-way {fmt(m)} us "
            f"(spread {fmt(lo, 1)}-{fmt(hi, 1)})")
    for d in (4096, 65000):
        log(f"   iperf3 UDP {d:>6} B datagrams: {fmt(iperf[d], 9, 0)} MB/s received, "
            f"{fmt(iperf_cpu[d], 1, 2)} CPU s/GB")
    log(f"   udp_gso_bw 4096 B segments (GSO+GRO): {fmt(gso, 9, 0)} MB/s received "
        f"(spread {fmt(gso_lo, 1, 0)}-{fmt(gso_hi, 1, 0)}), {fmt(gso_cpu, 1, 2)} CPU s/GB")
    log(f"   udp_gso_bw -s 65000 B datagrams, payloads spliced: {fmt(spliced, 9, 0)} MB/s "
        f"received (spread {fmt(spliced_lo, 1, 0)}-{fmt(spliced_hi, 1, 0)}), "
        f"{fmt(spliced_cpu, 1, 2)} CPU s/GB")
    for s in RAW_PP_SIZES:
        m, lo, hi = med(raw, "mbps", test="udp_pp", size=s)
        c, clo, chi = med(raw, "mbps", test="udp_pp_copy", size=s)
        log(f"   udp_pingpong {size_label(s):>6}: spliced sends {fmt(m, 6, 0)} MB/s "
            f"(spread {fmt(lo, 1, 0)}-{fmt(hi, 1, 0)}), copying sends {fmt(c, 6, 0)} MB/s "
            f"(spread {fmt(clo, 1, 0)}-{fmt(chi, 1, 0)})")
    for line in RAW_PP_SKIPPED:
        log(f"   SKIPPED {line}")

    for uet in UETS:
        for mode in PP_MODES:
            log(f"\n== fi_pingpong -e rdm -m {mode}, {uet} (median one-way latency in us "
                f"[min-max], ratios are uet time / other time; bandwidth MB/s and uet/other)")
            log(f"{'size':>6} {'uet':>9} {'spread':>15} {'tcp':>9} {'rxd':>9} {'raw':>7} "
                f"{'/tcp':>6} {'/rxd':>6} {'/raw':>6} | {'uetMB/s':>8} {'tcpMB/s':>8} "
                f"{'rxdMB/s':>8} {'rawMB/s':>8} {'x tcp':>6} {'x rxd':>6} {'x raw':>6}")
            for s in PP_SIZES:
                u, ulo, uhi = med(pp, "lat_us", config=uet, mode=mode, size=s)
                t = med(pp, "lat_us", config="tcp", mode=mode, size=s)[0]
                x = med(pp, "lat_us", config="rxd", mode=mode, size=s)[0]
                r = sock.get(s)
                ub = med(pp, "mbps", config=uet, mode=mode, size=s)[0]
                tb = med(pp, "mbps", config="tcp", mode=mode, size=s)[0]
                xb = med(pp, "mbps", config="rxd", mode=mode, size=s)[0]
                rb = raw_pp["udp_pp"].get(s)
                spread = f"{fmt(ulo, 1)}-{fmt(uhi, 1)}" if ulo is not None else "-"
                log(f"{size_label(s):>6} {fmt(u)} {spread:>15} {fmt(t)} {fmt(x)} "
                    f"{fmt(r, 7)} {fmt(ratio(u, t), 6)} {fmt(ratio(u, x), 6)} "
                    f"{fmt(ratio(u, r), 6)} | {fmt(ub, 8, 0)} {fmt(tb, 8, 0)} "
                    f"{fmt(xb, 8, 0)} {fmt(rb, 8, 0)} {fmt(ratio(ub, tb), 6)} "
                    f"{fmt(ratio(ub, xb), 6)} {fmt(ratio(ub, rb), 6)}")
                summary.append({"test": "pingpong", "mode": mode, "uet": uet, "size": s,
                                "uet_lat_us": u, "tcp_lat_us": t, "rxd_lat_us": x,
                                "raw_lat_us": r, "uet_mbps": ub, "tcp_mbps": tb,
                                "rxd_mbps": xb, "raw_mbps": rb})

        log(f"\n== streaming bandwidth (uet_bw, window 64), {uet}: median MB/s [min-max], "
            f"ratios uet/other; raw = iperf3 UDP at {RAW_DGRAM[uet]} B; x off = uet / "
            f"{OFFLOAD_LABEL[uet]}; "
            f"CPU s per GB")
        log(f"{'size':>6} {'uet':>8} {'spread':>15} {'tcp':>8} {'rxd':>8} {'raw':>8} "
            f"{'x tcp':>6} {'x rxd':>6} {'x raw':>6} {'x off':>6} | {'uetCPU':>7} "
            f"{'tcpCPU':>7} {'rxdCPU':>7} {'rawCPU':>7}")
        raw_bw = iperf[RAW_DGRAM[uet]]
        for s in BW_SIZES:
            u, ulo, uhi = med(bw, "mbps", config=uet, size=s)
            t = med(bw, "mbps", config="tcp", size=s)[0]
            x = med(bw, "mbps", config="rxd", size=s)[0]
            uc = med(bw, "cpu_s_per_gb", config=uet, size=s)[0]
            tc = med(bw, "cpu_s_per_gb", config="tcp", size=s)[0]
            xc = med(bw, "cpu_s_per_gb", config="rxd", size=s)[0]
            spread = f"{fmt(ulo, 1, 0)}-{fmt(uhi, 1, 0)}" if ulo is not None else "-"
            log(f"{size_label(s):>6} {fmt(u, 8, 0)} {spread:>15} {fmt(t, 8, 0)} "
                f"{fmt(x, 8, 0)} {fmt(raw_bw, 8, 0)} {fmt(ratio(u, t), 6)} "
                f"{fmt(ratio(u, x), 6)} {fmt(ratio(u, raw_bw), 6)} "
                f"{fmt(ratio(u, offload_bw[uet]), 6)} | {fmt(uc, 7)} "
                f"{fmt(tc, 7)} {fmt(xc, 7)} {fmt(iperf_cpu[RAW_DGRAM[uet]], 7)}")
            summary.append({"test": "stream", "mode": "msg", "uet": uet, "size": s,
                            "uet_mbps": u, "tcp_mbps": t, "rxd_mbps": x, "raw_mbps": raw_bw,
                            "raw_offload_mbps": offload_bw[uet],
                            "uet_cpu_s_per_gb": uc, "tcp_cpu_s_per_gb": tc,
                            "rxd_cpu_s_per_gb": xc})

    summary += report_wait(wait)
    summary += report_net(net)
    write_csv("summary.csv", summary,
              ["test", "mode", "uet", "size", "uet_lat_us", "tcp_lat_us", "rxd_lat_us",
               "raw_lat_us", "uet_mbps", "tcp_mbps", "rxd_mbps", "raw_mbps", "raw_offload_mbps",
               "uet_cpu_s_per_gb", "tcp_cpu_s_per_gb", "rxd_cpu_s_per_gb",
               "uet_cpu_us_per_rt", "tcp_cpu_us_per_rt", "rxd_cpu_us_per_rt"])
    report_mpi(mpi)
    if PLAIN_LIBDIR:
        report_plain(pp)
    targets(pp, bw, sock, offload_bw, raw_pp, reported)
    plot(pp, bw, iperf, sock, gso, spliced, raw_pp)
    if FAILURES:
        log(f"\n== {len(FAILURES)} failed run(s):")
        for f in FAILURES:
            log(f"   {f}")


def report_wait(rows):
    """Prints the blocking-wait ping-pong tables; returns their summary rows."""
    summary = []
    names = [c.replace("uet-64k-nospin", "nospin") for c in WAIT_CONFIGS]
    log("\n== ping-pong waiting in fi_cq_sread (uet_bw -L -w): median one-way latency "
        "in us, spread (min-max) of uet-64k, ratios uet-64k time / other time; "
        "nospin = uet-64k with FI_UET_WAIT_SPIN_US=0")
    log(f"{'size':>6} " + " ".join(f"{n:>9}" for n in names)
        + f" {'spread':>15} {'/tcp':>6} {'/rxd':>6} {'/nospin':>7}")
    cpu_by_size = {}
    for s in WAIT_SIZES:
        m = {c: med(rows, "lat_us", config=c, size=s)[0] for c in WAIT_CONFIGS}
        cpu = {c: med(rows, "cpu_us_per_rt", config=c, size=s)[0] for c in WAIT_CONFIGS}
        cpu_by_size[s] = cpu
        u, lo, hi = med(rows, "lat_us", config="uet-64k", size=s)
        spread = f"{fmt(lo, 1)}-{fmt(hi, 1)}" if lo is not None else "-"
        log(f"{size_label(s):>6} " + " ".join(fmt(m[c]) for c in WAIT_CONFIGS)
            + f" {spread:>15} {fmt(ratio(u, m['tcp']), 6)} {fmt(ratio(u, m['rxd']), 6)} "
            f"{fmt(ratio(u, m[NOSPIN]), 7)}")
        for uet in UETS + [NOSPIN]:
            summary.append({"test": "wait_pingpong", "mode": "msg", "uet": uet, "size": s,
                            "uet_lat_us": m[uet], "tcp_lat_us": m["tcp"],
                            "rxd_lat_us": m["rxd"], "uet_cpu_us_per_rt": cpu[uet],
                            "tcp_cpu_us_per_rt": cpu["tcp"],
                            "rxd_cpu_us_per_rt": cpu["rxd"]})
    # What the spin costs: CPU time of both processes per round trip.
    log("   CPU us per round trip (both processes, all threads):")
    log(f"{'size':>6} " + " ".join(f"{n:>9}" for n in names))
    for s, cpu in cpu_by_size.items():
        log(f"{size_label(s):>6} " + " ".join(fmt(cpu[c]) for c in WAIT_CONFIGS))
    return summary


def report_plain(pp):
    """The profile-guided provider (uet-64k) against the plain build of the
    same source, at 64 B, run by run (they ran next to each other)."""
    log("\n== profile-guided (uet-64k) against the plain build (uet-64k-plain): "
        "fi_pingpong 64 B, one-way us")
    for mode in PP_MODES:
        g, g_lo, g_hi = med(pp, "lat_us", config="uet-64k", mode=mode, size=64)
        p, p_lo, p_hi = med(pp, "lat_us", config=PLAIN, mode=mode, size=64)
        lat = {(r["config"], r["rep"]): r["lat_us"] for r in pp
               if r["mode"] == mode and r["size"] == 64}
        pairs = [(lat[("uet-64k", k)], lat[(PLAIN, k)]) for k in range(REPS)
                 if ("uet-64k", k) in lat and (PLAIN, k) in lat]
        faster = sum(1 for a, b in pairs if a < b)
        log(f"   {mode:6} profile-guided {fmt(g, 5)} [{fmt(g_lo, 1)}-{fmt(g_hi, 1)}]  "
            f"plain {fmt(p, 5)} [{fmt(p_lo, 1)}-{fmt(p_hi, 1)}]  "
            f"ratio {fmt(ratio(g, p), 1)}; faster in {faster} of {len(pairs)} repetitions")


def targets(pp, bw, sock, offload_bw, raw_pp, reported):
    log("\n== targets (issue #7; msg mode, medians; reported, not asserted)")
    if reported:
        log("   note: " + FRESH_PAGES_NOTE.format(kib=reported))

    def line(ok, text):
        log(f"{'PASS' if ok else 'MISS'}  {text}")

    for uet in UETS:
        u = med(pp, "lat_us", config=uet, mode="msg", size=64)[0]
        t = med(pp, "lat_us", config="tcp", mode="msg", size=64)[0]
        r = sock.get(64)
        q = ratio(u, t)
        line(q is not None and q <= 0.6, f"[{uet}] 64 B one-way latency <= 0.6x tcp: "
             f"{fmt(u, 1)} us vs {fmt(t, 1)} us = {fmt(q, 1)}x"
             + paired(pp, "lat_us", uet, "tcp", mode="msg", size=64))
        q = ratio(u, r)
        line(q is not None and q <= 1.5, f"[{uet}] 64 B one-way latency <= 1.5x raw UDP "
             f"busy-poll: {fmt(u, 1)} us vs {fmt(r, 1)} us = {fmt(q, 1)}x")
        ub = med(pp, "mbps", config=uet, mode="msg", size=4 * MI)[0]
        tb = med(pp, "mbps", config="tcp", mode="msg", size=4 * MI)[0]
        xb = med(pp, "mbps", config="rxd", mode="msg", size=4 * MI)[0]
        q = ratio(ub, tb)
        line(q is not None and q >= 2, f"[{uet}] 4 MiB ping-pong bandwidth >= 2x tcp: "
             f"{fmt(ub, 1, 0)} vs {fmt(tb, 1, 0)} MB/s = {fmt(q, 1)}x"
             + paired(pp, "mbps", uet, "tcp", mode="msg", size=4 * MI))
        rb, rc = raw_pp["udp_pp"].get(4 * MI), raw_pp["udp_pp_copy"].get(4 * MI)
        if q is not None and q < 2 and tb and rb and ub:
            log(f"      (2x tcp is {2 * tb:.0f} MB/s; raw UDP moves {rb:.0f} MB/s with "
                f"spliced sends and one copy, {fmt(rc, 1, 0)} with copying sends; uet "
                f"reaches {ub / rb:.2f} of the first)")
        q = ratio(ub, xb)
        line(q is not None and q >= 8, f"[{uet}] 4 MiB ping-pong bandwidth >= 8x rxd: "
             f"{fmt(ub, 1, 0)} vs {fmt(xb, 1, 0)} MB/s = {fmt(q, 1)}x")
        us = med(bw, "mbps", config=uet, size=MI)[0]
        ts = med(bw, "mbps", config="tcp", size=MI)[0]
        q = ratio(us, ts)
        line(q is not None and q >= 1.5, f"[{uet}] streaming bandwidth at 1 MiB >= 1.5x "
             f"tcp: {fmt(us, 1, 0)} vs {fmt(ts, 1, 0)} MB/s = {fmt(q, 1)}x"
             + paired(bw, "mbps", uet, "tcp", size=MI))
        if q is not None and q < 1.5 and ts and offload_bw[uet]:
            log(f"      (1.5x tcp is {1.5 * ts:.0f} MB/s; raw UDP sending as this uet does "
                f"moves {offload_bw[uet]:.0f} MB/s, uet reaches "
                f"{us / offload_bw[uet]:.2f} of it)")
        slower = []
        for mode in PP_MODES:
            for s in PP_SIZES:
                a = med(pp, "lat_us", config=uet, mode=mode, size=s)[0]
                b = med(pp, "lat_us", config="tcp", mode=mode, size=s)[0]
                if a is None or b is None or a > b:
                    slower.append(f"pingpong {mode} {size_label(s)}"
                                  + (f" ({a / b:.2f}x time)" if a and b else " (no data)"))
        for s in BW_SIZES:
            a = med(bw, "mbps", config=uet, size=s)[0]
            b = med(bw, "mbps", config="tcp", size=s)[0]
            if a is None or b is None or a < b:
                slower.append(f"stream {size_label(s)}"
                              + (f" ({a / b:.2f}x bw)" if a and b else " (no data)"))
        line(not slower, f"[{uet}] no size where uet is slower than tcp"
             + (": slower at " + ", ".join(slower) if slower else ""))


def plot(pp, bw, iperf, sock, gso, spliced, raw_pp):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("(matplotlib missing: no plot; install python3-matplotlib)")
        return
    fig, ax = plt.subplots(1, 3, figsize=(17, 5))
    for config in [c for c in CONFIGS if c not in (PLAIN, NOSPIN)]:
        xs = [s for s in PP_SIZES if med(pp, "lat_us", config=config, mode="msg", size=s)[0]]
        ax[0].plot(xs, [med(pp, "lat_us", config=config, mode="msg", size=s)[0] for s in xs],
                   "o-", label=config)
        # fi_pingpong rounds MB/s to 0 at the smallest sizes: not on a log axis.
        bxs = [s for s in xs if med(pp, "mbps", config=config, mode="msg", size=s)[0]]
        ax[1].plot(bxs, [med(pp, "mbps", config=config, mode="msg", size=s)[0] for s in bxs],
                   "o-", label=config)
        xs = [s for s in BW_SIZES if med(bw, "mbps", config=config, size=s)[0]]
        ax[2].plot(xs, [med(bw, "mbps", config=config, size=s)[0] for s in xs], "o-",
                   label=config)
    xs = [s for s in sorted(sock) if sock[s]]
    ax[0].plot(xs, [sock[s] for s in xs], "k--", label="raw UDP (sockperf busy-poll)")
    for test, style, label in (("udp_pp", "--", "raw UDP, spliced (udp_pingpong)"),
                               ("udp_pp_copy", ":", "raw UDP, copied (udp_pingpong -c)")):
        xs = [s for s in RAW_PP_SIZES if raw_pp[test].get(s)]
        if xs:
            ax[1].plot(xs, [raw_pp[test][s] for s in xs], "k" + style, label=label)
    for d, style in ((4096, ":"), (65000, "--")):
        if iperf[d]:
            ax[2].axhline(iperf[d], color="k", linestyle=style, label=f"iperf3 UDP {d} B")
    if gso:
        ax[2].axhline(gso, color="grey", linestyle="-.", label="UDP GSO/GRO 4096 B segments")
    if spliced:
        ax[2].axhline(spliced, color="grey", linestyle="--",
                      label="UDP 65000 B, spliced payloads")
    titles = ["fi_pingpong msg: one-way latency (us)", "fi_pingpong msg: MB/s",
              "streaming (uet_bw, window 64): MB/s"]
    for a, title in zip(ax, titles):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("message size (bytes)")
        a.set_title(title)
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(OUT, "bench.png")
    fig.savefig(path, dpi=90)
    log(f"plot: {path}")


if __name__ == "__main__":
    main()
