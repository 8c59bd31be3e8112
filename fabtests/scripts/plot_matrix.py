#!/usr/bin/python3
"""Plots of a connection-matrix run (uet-emu run): reads DIR/*/results.json
and the hosts' congestion-control traces (DIR/*/work/trace.H.csv, written
through FI_UET_TRACE), writes per variant throughput.png, cwnd.png,
queue.png, and one fct_cdf.png comparing the variants, each also as SVG.

usage: plot_matrix.py DIR
"""
import csv
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save(fig, base):
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=110)
    fig.savefig(base + ".svg")
    plt.close(fig)


def throughput(r, out):
    rel = r["relay"]
    w = rel["sample_ns"]
    # Model time 0 is the relay's start; shift to the hosts' common start.
    go_off = r["go_realtime_ns"] - rel["epoch_realtime_ns"]
    end = max([b[0] for p in rel["pairs"] for b in p["bytes"]] or [w])
    # About 200 bins over the run, whole multiples of the model's buckets;
    # empty bins are zeros, not gaps.
    width = w * max(1, int((end - max(go_off, 0)) / w / 200))
    fig, ax = plt.subplots(figsize=(8, 4))
    for p in rel["pairs"]:
        if not p["bytes"]:
            continue
        bins = [0] * (end // width + 1)
        for t, n in p["bytes"]:
            bins[t // width] += n
        t = [(i * width - go_off) / 1e6 for i in range(len(bins))]
        gbps = [n * 8 / width for n in bins]
        ax.step(t, gbps, where="post", lw=0.8, label="h%d->h%d" % (p["src"], p["dst"]))
    ax.set_xlim(left=max(ax.get_xlim()[0], -1.0))
    ax.set_xlabel("time after the common start (ms)")
    ax.set_ylabel("delivered Gb/s (%.1f ms bins)" % (width / 1e6))
    ax.set_title("%s / %s: per-flow throughput" % (r["scenario"], r["variant"]))
    if not rel["pairs"]:
        ax.text(0.5, 0.5, "no traffic crossed the relay", ha="center",
                transform=ax.transAxes)
    elif len(rel["pairs"]) <= 16:
        ax.legend(fontsize=6, ncol=2)
    save(fig, os.path.join(out, "throughput"))


def cwnd(r, out):
    """Congestion window per sender and peer over time, from the per-ACK
    trace (ack, nack and timeout events), against the fabric's BDP."""
    go = r["go_realtime_ns"]
    lines = []
    for path in sorted(glob.glob(os.path.join(out, "work", "trace.*.csv"))):
        host = path.rsplit(".", 2)[-2]
        per_peer = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                try:
                    t = (int(row["wall_ns"]) - go) / 1e6
                    w = int(row["cwnd"]) / 1024
                except (KeyError, ValueError):
                    continue
                per_peer.setdefault(row["peer"], ([], []))
                per_peer[row["peer"]][0].append(t)
                per_peer[row["peer"]][1].append(w)
        for peer, (t, w) in per_peer.items():
            # Host i is 127.0.0.(first_host + i), carrying on into 127.0.1.0.
            try:
                a, b, c, d = (int(x) for x in peer.split(":")[0].split("."))
                index = (b << 16) + (c << 8) + d - r.get("first_host", 2)
                dst = "h%d" % index
            except ValueError:
                dst = peer
            lines.append(("h%s->%s" % (host, dst), t, w))
    fig, ax = plt.subplots(figsize=(8, 4))
    if not lines:
        ax.text(0.5, 0.5, "no congestion-control trace (FI_UET_TRACE)", ha="center",
                transform=ax.transAxes)
    for label, t, w in lines[:16]:
        ax.step(t, w, where="post", lw=0.8, label=label)
    bdp = r["relay"]["bdp_bytes"] / 1024
    ax.axhline(bdp, ls="--", c="black", lw=0.7, label="BDP")
    ax.set_xlabel("time after the common start (ms)")
    ax.set_ylabel("cwnd (KiB)")
    ax.set_title("%s / %s: congestion window (%s)" % (
        r["scenario"], r["variant"], r["env"].get("FI_UET_CC", "nscc")))
    ax.set_yscale("log")
    if lines:
        ax.legend(fontsize=6, ncol=2)
    save(fig, os.path.join(out, "cwnd"))


def queue(r, out):
    rel = r["relay"]
    go_off = r["go_realtime_ns"] - rel["epoch_realtime_ns"]
    # Switch ports only (host NICs neither mark nor trim: kmin is "never").
    ports = [p for p in rel["ports"]
             if p["counters"]["max_queue_bytes"] > 0 and p["kmin_bytes"] < 1 << 60]
    ports.sort(key=lambda p: -p["counters"]["max_queue_bytes"])
    if not ports:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    w = rel["sample_ns"]
    for p in ports[:4]:
        s = p["series"]
        if not s:
            continue
        # Buckets the model skipped had no traffic: an empty queue.
        last = s[-1]["t_ns"] // w
        q = [0] * (last + 2)
        for x in s:
            q[x["t_ns"] // w] = x["max_queue_bytes"]
        ax.step([(i * w - go_off) / 1e6 for i in range(len(q))], [v / 1024 for v in q],
                where="post", lw=0.8, label=p["name"])
    top = ports[0]
    ax.axhline(top["kmin_bytes"] / 1024, ls="--", c="grey", lw=0.7, label="kmin")
    ax.axhline(top["kmax_bytes"] / 1024, ls=":", c="grey", lw=0.7, label="kmax")
    ax.axhline(top["buffer_bytes"] / 1024, ls="-", c="black", lw=0.7, label="buffer")
    # NSCC's target queueing delay (spec/NSCC.md section 1): 0.75 base RTT
    # with trimming, 1 base RTT without, as bytes at the port's rate.
    target = (0.75 if r["trimming"] else 1.0) * rel["base_rtt_ns"] * top["gbps"] / 8
    ax.axhline(target / 1024, ls="-.", c="red", lw=0.8, label="NSCC target")
    # Model time starts with the relay, about a second before the hosts.
    ax.set_xlim(left=max(ax.get_xlim()[0], -1.0))
    ax.set_xlabel("time after the common start (ms)")
    ax.set_ylabel("data queue (KiB, max per bucket)")
    ax.set_title("%s / %s: busiest queues" % (r["scenario"], r["variant"]))
    ax.legend(fontsize=6)
    save(fig, os.path.join(out, "queue"))


def fct_cdf(results, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        f = sorted(x["fct_ns"] / 1e6 for x in r["flows"])
        n = len(f)
        ax.step(f, [(i + 1) / n for i in range(n)], where="post", label=r["variant"])
    ideal = sorted(x["ideal_fct_ns"] / 1e6 for x in results[0]["flows"])
    n = len(ideal)
    ax.step(ideal, [(i + 1) / n for i in range(n)], where="post", ls="--", c="black",
            label="ideal")
    ax.set_xlabel("flow completion time (ms)")
    ax.set_ylabel("CDF")
    ax.set_title(results[0]["scenario"] + ": FCT")
    ax.legend(fontsize=7)
    save(fig, os.path.join(out, "fct_cdf"))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    top = sys.argv[1]
    results = []
    for path in sorted(glob.glob(os.path.join(top, "*", "results.json"))):
        with open(path) as f:
            r = json.load(f)
        results.append(r)
        d = os.path.dirname(path)
        throughput(r, d)
        cwnd(r, d)
        queue(r, d)
    if results:
        fct_cdf(results, top)


if __name__ == "__main__":
    main()
