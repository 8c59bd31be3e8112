/*
 * fi_ext_uet.h: public extension header of the uet libfabric provider.
 *
 * uet is an Ultra-Ethernet-Transport-like reliable datagram provider over
 * UDP. Applications select it with FI_PROVIDER=uet and
 * FI_PROVIDER_PATH=<dir holding libuet-fi.so>. This header names its
 * parameters and its wire constants, for programs that set or report them;
 * nothing in it is needed to use the provider through the plain fi_* API.
 */
#ifndef FI_EXT_UET_H
#define FI_EXT_UET_H

#include <stdint.h>
#include <stddef.h>
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Name to pass as hints->fabric_attr->prov_name, or FI_PROVIDER=uet. */
#define FI_UET_PROV_NAME "uet"

/*
 * UDP destination port of a UET fabric (IANA-assigned to Ultra Ethernet,
 * 4793). An endpoint that names no port (and no FI_UET_PORT) binds it when
 * it is free and any port otherwise; fi_getinfo with a node and no service
 * addresses a peer on it.
 */
#define FI_UET_DEFAULT_PORT 4793

/*
 * DSCP values (6 bits, the IP TOS byte >> 2) that a switch writes into the
 * IP header of a trimmed packet: TRIMMED when the payload was cut inside the
 * fabric, TRIMMED_LASTHOP when it was cut at the receiver's downlink. The
 * receiver answers with NACK code 0x01 or 0x02 respectively. UET leaves the
 * values to the operator; these defaults come from the RFC 2474 pool for
 * local/experimental use (xxxx11), so they never collide with a standard
 * class (CS*, AF*, EF, LE). emu-net and the provider use these unless
 * configured otherwise.
 */
#define FI_UET_DSCP_TRIMMED         0x0B /* 001011 */
#define FI_UET_DSCP_TRIMMED_LASTHOP 0x0F /* 001111 */

/* The IP TOS byte carrying DSCP d with ECN codepoint ecn (0..3). */
#define FI_UET_DSCP_TO_TOS(d, ecn) ((unsigned char)((((d) & 0x3F) << 2) | ((ecn) & 0x3)))

/*
 * Parameters: environment variables read through libfabric's fi_param_get;
 * `fi_info -e` prints each with its help text. Defaults in brackets.
 */
#define FI_UET_PARAM_MTU               "FI_UET_MTU"               /* bytes per UDP payload, headers included [0 = auto: 65000 on loopback, 1472 elsewhere] */
#define FI_UET_PARAM_WINDOW            "FI_UET_WINDOW"            /* unacknowledged packets per peer [256] */
#define FI_UET_PARAM_RTO_MIN_US        "FI_UET_RTO_MIN_US"        /* smallest retransmission timeout, us [1000] */
#define FI_UET_PARAM_RTO_MAX_US        "FI_UET_RTO_MAX_US"        /* largest timeout after backoff, us [200000] */
#define FI_UET_PARAM_MAX_RETRIES       "FI_UET_MAX_RETRIES"       /* retransmissions before FI_EIO [30] */
#define FI_UET_PARAM_SOCKBUF           "FI_UET_SOCKBUF"           /* socket buffer request, bytes [8388608] */
#define FI_UET_PARAM_INJECT_SIZE       "FI_UET_INJECT_SIZE"       /* largest fi_inject, bytes [4096] */
#define FI_UET_PARAM_SPIN_BEFORE_YIELD "FI_UET_SPIN_BEFORE_YIELD" /* empty progress calls before yielding [64] */
#define FI_UET_PARAM_WAIT_SPIN_US     "FI_UET_WAIT_SPIN_US"     /* fi_cq_sread, fi_cntr_wait poll this long before sleeping, us [50] */
#define FI_UET_PARAM_IDLE_PROGRESS_US "FI_UET_IDLE_PROGRESS_US" /* manual progress: domain thread steps in after this idle time, us [1000] */
#define FI_UET_PARAM_DEFER_ACKS       "FI_UET_DEFER_ACKS"       /* ACKs of an application progress call that completes a message wait for its next call [1] */
#define FI_UET_PARAM_ACK_HOLD_US      "FI_UET_ACK_HOLD_US"      /* held ACKs survive further application progress calls for this long, us [10] */
#define FI_UET_PARAM_ACK_PIGGYBACK    "FI_UET_ACK_PIGGYBACK"    /* held ACKs ride at the end of the reply's datagram to the same peer, and ACKs on delivery responses [1] */
#define FI_UET_PARAM_DIRECT_RX        "FI_UET_DIRECT_RX"        /* receive payloads of 16 KiB or more straight into the posted buffer [1] */
#define FI_UET_PARAM_SPLICE_BYTES     "FI_UET_SPLICE_BYTES"     /* payloads this long or longer leave by splice, not copied [32768] */
#define FI_UET_PARAM_CONNECTED_PEERS  "FI_UET_CONNECTED_PEERS"  /* peers whose data leaves from a socket connected to them [32; 0 = none] */
#define FI_UET_PARAM_SRC_ADDR          "FI_UET_SRC_ADDR"          /* address bound when none is named [127.0.0.1; "auto"] */
#define FI_UET_PARAM_PORT              "FI_UET_PORT"              /* UDP port bound when none is named [0 = 4793 if free, else any] */
#define FI_UET_PARAM_PDC_IDLE_US       "FI_UET_PDC_IDLE_US"       /* close an idle delivery context after this long, us [1000000; 0 = never] */
#define FI_UET_PARAM_MAX_PDCS          "FI_UET_MAX_PDCS"          /* delivery-context ID pool per endpoint [16384; 2..65535] */
#define FI_UET_PARAM_UNEXPECTED_BYTES  "FI_UET_UNEXPECTED_BYTES"  /* payload held for unmatched messages, then NACK 0x07 [67108864] */
#define FI_UET_PARAM_ANSWER_BYTES      "FI_UET_ANSWER_BYTES"      /* read data / fetched values held for peers, then NACK 0x07 [67108864] */
#define FI_UET_PARAM_RENDEZVOUS_BYTES  "FI_UET_RENDEZVOUS_BYTES"  /* sends longer than this are pulled by the receiver once matched [262144; 0 = never] */
#define FI_UET_PARAM_HOST_READ         "FI_UET_HOST_READ"         /* same host: copy a rendezvous remainder from the sender's memory, bypassing the network [0] */
#define FI_UET_PARAM_HOST_RING         "FI_UET_HOST_RING"         /* same host: datagrams through shared-memory rings instead of UDP, bypassing the network [0] */
#define FI_UET_PARAM_HOST_RENDEZVOUS_BYTES "FI_UET_HOST_RENDEZVOUS_BYTES" /* rendezvous threshold towards peers seen copying in place [16384; 0 = never] */
#define FI_UET_PARAM_TRACE             "FI_UET_TRACE"             /* CSV trace of congestion-control events; %p = pid, %e = port [none] */
#define FI_UET_PARAM_DELIVERY          "FI_UET_DELIVERY"          /* send contexts: rud (unordered, sprayed) | rod (ordered, one path) [rud] */
#define FI_UET_PARAM_CC                "FI_UET_CC"                /* congestion control: nscc | none (fixed window) [nscc] */
#define FI_UET_PARAM_LINK_GBPS         "FI_UET_LINK_GBPS"         /* link rate NSCC scales with, Gb/s [100] */
#define FI_UET_PARAM_LINK_MBPS         "FI_UET_LINK_MBPS"         /* link rate in Mb/s, replaces LINK_GBPS when set [0] */
#define FI_UET_PARAM_BASE_RTT_US       "FI_UET_BASE_RTT_US"       /* base RTT seed, us [0 = measure] */
#define FI_UET_PARAM_LB                "FI_UET_LB"                /* load balancer: auto (single on loopback, else reps) | reps | reps_paper | bitmap | oblivious | single [auto] */
#define FI_UET_PARAM_NSCC_VARIANT      "FI_UET_NSCC_VARIANT"      /* sim | paper | list of target,maxwnd,wtd,qa_scaling,fast_increase,md_rtt [sim] */
#define FI_UET_PARAM_NSCC_TARGET_PCT   "FI_UET_NSCC_TARGET_PCT"   /* target queueing delay, % of base RTT [0 = from variant: 75/100/50] */
#define FI_UET_PARAM_NSCC_TRIMMING     "FI_UET_NSCC_TRIMMING"     /* fabric trims (target 0.75 R0) or drops (1.0 R0) [1] */
#define FI_UET_PARAM_NSCC_MIN_MAXWND_PACKETS "FI_UET_NSCC_MIN_MAXWND_PACKETS" /* floor of maxwnd in packets [16; 0 = 1.5 bdp only] */
#define FI_UET_PARAM_NSCC_QA_IDLE_RESTART "FI_UET_NSCC_QA_IDLE_RESTART" /* QuickAdapt window restarts after an idle gap [1] */
#define FI_UET_PARAM_NSCC_QA_WINDOW_LIMITED "FI_UET_NSCC_QA_WINDOW_LIMITED" /* QuickAdapt fires on delay only for a sender that used its window [1; 0 = any sender] */
#define FI_UET_PARAM_NSCC_FAST_INCREASE_MTUS "FI_UET_NSCC_FAST_INCREASE_MTUS" /* k of the paper FastIncrease [2] */
#define FI_UET_PARAM_GSO               "FI_UET_GSO"               /* UDP GSO on transmit, GRO after a burst [1] */
#define FI_UET_PARAM_SEND_BURST_US     "FI_UET_SEND_BURST_US"     /* sends this close together leave together at the burst's end, us [20; 0 = off] */

/*
 * Statistics extension. Open it on an endpoint:
 *
 *   struct fi_uet_stats_ops *ops;
 *   fi_open_ops(&ep->fid, FI_UET_STATS_OPS, 0, (void **)&ops, NULL);
 *   struct fi_uet_peer_stats ps;
 *   ops->peer_stats(ep, peer_fi_addr, &ps);
 *
 * Every call returns 0 or a negative fi_errno (-FI_EINVAL for an unknown
 * endpoint, -FI_ENODATA for a peer this endpoint never sent to). Counters
 * only grow; the other fields are current values. Times in nanoseconds,
 * windows in bytes with headers.
 */
#define FI_UET_STATS_OPS "uet_stats_ops_v1"

/* Endpoint-wide packet-delivery counters. */
struct fi_uet_ep_stats {
	uint64_t packets_sent, packets_received, retransmits, duplicates;
	uint64_t acks_sent, acks_received;
	uint64_t malformed, unknown_pdc, out_of_window, peers_failed;
	uint64_t trimmed_received, ecn_ce_received, ecn_echoes_received;
	uint64_t nacks_sent, nacks_received, nack_retransmits;
	uint64_t pdcs_closed, backpressure;
};

/* Congestion state of the send side towards one peer (NSCC). */
struct fi_uet_peer_stats {
	uint64_t cwnd, maxwnd, in_flight, base_rtt_ns, target_qdelay_ns;
	double avg_delay_ns;
	uint64_t acks, ecn_echoes, invalid_rtt_samples;
	/* ACKs per quadrant */
	uint64_t fair_increase, proportional_increase, multiplicative_decrease, steer_only;
	uint64_t decreases_applied, fair_decreases;
	uint64_t fast_increase_acks, fast_increase_events;
	uint64_t quick_adapt_events, quick_adapt_ignored, fulfills;
	uint64_t nacks_fabric, nacks_last_hop, timeouts;
	uint64_t retransmits; /* packets resent to this peer */
	uint64_t entropies; /* entries entropy_stats can return */
};

/* Use of one entropy (UDP source port) towards one peer. sent counts the
 * data packets (retransmissions included) that left with it; with ordered
 * delivery all of them leave with entropy 0. */
struct fi_uet_entropy_stats {
	uint64_t sent, good, ecn, nacks_fabric, nacks_last_hop, timeouts;
	uint64_t penalty; /* bitmap load balancer only */
};

struct fi_uet_stats_ops {
	size_t size;
	int (*ep_stats)(struct fid_ep *ep, struct fi_uet_ep_stats *stats);
	int (*peer_stats)(struct fid_ep *ep, fi_addr_t peer, struct fi_uet_peer_stats *stats);
	/* Fills up to *count entries; sets *count to the number of entropies. */
	int (*entropy_stats)(struct fid_ep *ep, fi_addr_t peer,
			     struct fi_uet_entropy_stats *stats, size_t *count);
};
#define FI_UET_PARAM_SPRAY_BYTES       "FI_UET_SPRAY_BYTES"       /* wire bytes of data to a peer that keep one entropy pick [0 = auto: 65507 with GSO, 1 (every packet) through FI_UET_FABRIC or without GSO] */
#define FI_UET_PARAM_ENTROPIES         "FI_UET_ENTROPIES"         /* sockets (source ports) per endpoint, socket 0 = its address [16] */
#define FI_UET_PARAM_FABRIC            "FI_UET_FABRIC"            /* ip:port of an emu-net relay carrying all traffic ["" = direct] */
#define FI_UET_PARAM_FAULT_DROP        "FI_UET_FAULT_DROP"        /* per-mille of data and ACK packets not sent [0] */
#define FI_UET_PARAM_FAULT_DUP         "FI_UET_FAULT_DUP"         /* per-mille of data and ACK packets sent twice [0] */
#define FI_UET_PARAM_FAULT_REORDER     "FI_UET_FAULT_REORDER"     /* per-mille of data and ACK packets held back [0] */
#define FI_UET_PARAM_FAULT_DELAY_US    "FI_UET_FAULT_DELAY_US"    /* how long a held packet waits, us [200] */
#define FI_UET_PARAM_FAULT_TRIM        "FI_UET_FAULT_TRIM"        /* per-mille of data packets trimmed (DSCP 0x0B) [0] */
#define FI_UET_PARAM_FAULT_ECN         "FI_UET_FAULT_ECN"         /* per-mille of data packets sent with ECN CE [0] */
#define FI_UET_PARAM_FAULT_SEED        "FI_UET_FAULT_SEED"        /* seed of the fault decisions [1] */

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_UET_H */
