/*
 * uet_stats: the statistics extension of the uet provider (fi_ext_uet.h),
 * exercised through the public API, and ECN seen end to end over real UDP.
 *
 * Two endpoints in one process; A sends messages to B over loopback while
 * the provider's transmit-side fault injection marks a share of A's data
 * packets ECN CE in their IP header (FI_UET_FAULT_ECN, set here unless the
 * caller set it). Then:
 *   - B's endpoint counters show CE-marked arrivals, A's show ECN echoes;
 *   - A's congestion state towards B shows ACKs and ECN echoes in NSCC;
 *   - A's per-entropy statistics cover every entropy and add up to at least
 *     the data packets sent;
 *   - unknown extension names and unknown peers are refused.
 *
 * Usage: uet_stats [-p provider]. Prints PASS/FAIL lines and ends with
 * "N passed, N failed"; exit status 0 only when none failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_uet.h>

#define MSGS 64
#define MSG_SIZE (64 * 1024)

static int passed, failed;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("FAIL %s: line %d: ", test, __LINE__);          \
			printf(__VA_ARGS__);                                   \
			printf("\n");                                          \
			failed++;                                              \
			return;                                                \
		}                                                              \
	} while (0)

#define DIE(what, rc)                                                          \
	do {                                                                   \
		fprintf(stderr, "%s: %s\n", what, fi_strerror(-(int)(rc)));    \
		exit(1);                                                       \
	} while (0)

struct end {
	struct fid_ep *ep;
	struct fid_cq *cq;
	char name[64];
	size_t namelen;
	fi_addr_t peer;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct end A, B;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void open_end(struct end *e)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
	int rc;

	if ((rc = fi_cq_open(domain, &cq_attr, &e->cq, NULL)))
		DIE("fi_cq_open", rc);
	if ((rc = fi_endpoint(domain, info, &e->ep, NULL)))
		DIE("fi_endpoint", rc);
	if ((rc = fi_ep_bind(e->ep, &av->fid, 0)) ||
	    (rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)))
		DIE("fi_ep_bind", rc);
	if ((rc = fi_enable(e->ep)))
		DIE("fi_enable", rc);
	e->namelen = sizeof(e->name);
	if ((rc = fi_getname(&e->ep->fid, e->name, &e->namelen)))
		DIE("fi_getname", rc);
}

static void setup(const char *prov)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_av_attr av_attr = {.type = FI_AV_MAP};
	int rc;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	if ((rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info)))
		DIE("fi_getinfo", rc);
	fi_freeinfo(hints);
	if ((rc = fi_fabric(info->fabric_attr, &fabric, NULL)))
		DIE("fi_fabric", rc);
	if ((rc = fi_domain(fabric, info, &domain, NULL)))
		DIE("fi_domain", rc);
	if ((rc = fi_av_open(domain, &av_attr, &av, NULL)))
		DIE("fi_av_open", rc);
	open_end(&A);
	open_end(&B);
	if (fi_av_insert(av, B.name, 1, &A.peer, 0, NULL) != 1 ||
	    fi_av_insert(av, A.name, 1, &B.peer, 0, NULL) != 1)
		DIE("fi_av_insert", -FI_EINVAL);
}

/* Poll both CQs (manual progress) until `want` completions arrived on B
 * and A; false on an error completion or after 30 s. */
static int transfer(int want)
{
	static char bufs[MSGS][MSG_SIZE];
	static char payload[MSG_SIZE];
	struct fi_cq_entry ent;
	int sends = 0, recvs = 0, posted = 0;
	double deadline = now_s() + 30;
	ssize_t n;

	memset(payload, 0x5a, sizeof(payload));
	for (int i = 0; i < want; i++)
		while (fi_recv(B.ep, bufs[i], MSG_SIZE, NULL, B.peer, NULL) == -FI_EAGAIN)
			fi_cq_read(B.cq, &ent, 0);
	while ((sends < want || recvs < want) && now_s() < deadline) {
		if (posted < want) {
			n = fi_send(A.ep, payload, MSG_SIZE, NULL, A.peer, NULL);
			if (n == 0)
				posted++;
			else if (n != -FI_EAGAIN)
				return 0;
		}
		n = fi_cq_read(A.cq, &ent, 1);
		if (n == 1)
			sends++;
		else if (n != -FI_EAGAIN)
			return 0;
		n = fi_cq_read(B.cq, &ent, 1);
		if (n == 1)
			recvs++;
		else if (n != -FI_EAGAIN)
			return 0;
	}
	return sends == want && recvs == want;
}

static struct fi_uet_stats_ops *open_stats(struct end *e)
{
	struct fi_uet_stats_ops *ops = NULL;
	int rc = fi_open_ops(&e->ep->fid, FI_UET_STATS_OPS, 0, (void **)&ops, NULL);
	return rc ? NULL : ops;
}

static void test_open_ops(void)
{
	const char *test = "open_ops";
	void *ops = NULL;
	struct fi_uet_stats_ops *s = open_stats(&A);

	CHECK(s != NULL, "fi_open_ops(%s) failed", FI_UET_STATS_OPS);
	CHECK(s->size == sizeof(*s), "ops size %zu, header says %zu", s->size, sizeof(*s));
	CHECK(fi_open_ops(&A.ep->fid, "no_such_ops", 0, &ops, NULL) == -FI_ENOSYS,
	      "unknown ops name not refused");
	printf("PASS %s\n", test);
	passed++;
}

static void test_ecn_end_to_end(void)
{
	const char *test = "ecn_end_to_end";
	struct fi_uet_stats_ops *s = open_stats(&A);
	struct fi_uet_ep_stats a, b;
	struct fi_uet_peer_stats p;

	CHECK(s != NULL, "no stats ops");
	CHECK(transfer(MSGS), "transfer of %d x %d bytes failed", MSGS, MSG_SIZE);
	CHECK(s->ep_stats(A.ep, &a) == 0 && s->ep_stats(B.ep, &b) == 0, "ep_stats failed");
	CHECK(a.packets_sent >= MSGS && b.packets_received >= MSGS,
	      "A sent %llu packets, B received %llu", (unsigned long long)a.packets_sent,
	      (unsigned long long)b.packets_received);
	CHECK(b.ecn_ce_received > 0, "B saw no CE-marked datagram");
	CHECK(a.ecn_echoes_received > 0, "A got no ACK echoing CE");
	CHECK(s->peer_stats(A.ep, A.peer, &p) == 0, "peer_stats failed");
	CHECK(p.acks > 0 && p.cwnd > 0, "acks %llu cwnd %llu", (unsigned long long)p.acks,
	      (unsigned long long)p.cwnd);
	CHECK(p.ecn_echoes > 0, "NSCC saw no ECN echo (acks %llu)", (unsigned long long)p.acks);
	CHECK(p.ecn_echoes <= p.acks, "more echoes than ACKs");
	CHECK(p.retransmits <= a.retransmits, "peer resent %llu, endpoint %llu",
	      (unsigned long long)p.retransmits, (unsigned long long)a.retransmits);
	CHECK(p.base_rtt_ns > 0 && p.maxwnd >= p.cwnd, "base rtt %llu, cwnd %llu > maxwnd %llu",
	      (unsigned long long)p.base_rtt_ns, (unsigned long long)p.cwnd,
	      (unsigned long long)p.maxwnd);
	printf("# A->B: %llu packets, %llu ACKs, %llu ECN echoes, cwnd %llu B, base RTT %llu ns\n",
	       (unsigned long long)a.packets_sent, (unsigned long long)p.acks,
	       (unsigned long long)p.ecn_echoes, (unsigned long long)p.cwnd,
	       (unsigned long long)p.base_rtt_ns);
	printf("PASS %s\n", test);
	passed++;
}

static void test_entropies(void)
{
	const char *test = "entropy_stats";
	struct fi_uet_stats_ops *s = open_stats(&A);
	struct fi_uet_peer_stats p;
	struct fi_uet_ep_stats a;
	struct fi_uet_entropy_stats e[1024];
	size_t count = 0, used = 0;
	unsigned long long sent = 0;

	CHECK(s != NULL, "no stats ops");
	CHECK(s->peer_stats(A.ep, A.peer, &p) == 0 && s->ep_stats(A.ep, &a) == 0, "stats failed");
	CHECK(s->entropy_stats(A.ep, A.peer, NULL, &count) == 0, "size query failed");
	CHECK(count == p.entropies && count >= 1 && count <= 1024, "count %zu, peer says %llu",
	      count, (unsigned long long)p.entropies);
	CHECK(s->entropy_stats(A.ep, A.peer, e, &count) == 0, "entropy_stats failed");
	for (size_t i = 0; i < count; i++) {
		sent += e[i].sent;
		used += e[i].sent > 0;
	}
	CHECK(sent >= MSGS, "entropies carried %llu packets", sent);
	printf("# %zu entropies, %zu used, %llu packets\n", count, used, sent);
	printf("PASS %s\n", test);
	passed++;
}

static void test_unknown_peer(void)
{
	const char *test = "unknown_peer";
	struct fi_uet_stats_ops *s = open_stats(&B);
	struct fi_uet_peer_stats p;

	CHECK(s != NULL, "no stats ops");
	/* B only answered A (ACKs): it never sent data, but knows A as a peer. */
	CHECK(s->peer_stats(B.ep, 12345, &p) == -FI_EINVAL, "bad fi_addr not refused");
	CHECK(s->ep_stats(B.ep, NULL) == -FI_EINVAL, "NULL output not refused");
	printf("PASS %s\n", test);
	passed++;
}

int main(int argc, char **argv)
{
	const char *prov = "uet";
	int opt;

	while ((opt = getopt(argc, argv, "p:")) != -1) {
		if (opt == 'p')
			prov = optarg;
		else {
			fprintf(stderr, "usage: %s [-p provider]\n", argv[0]);
			return 2;
		}
	}
	/* 20% of data packets leave CE-marked (read at domain open). */
	setenv("FI_UET_FAULT_ECN", "200", 0);
	setup(prov);
	test_open_ops();
	test_ecn_end_to_end();
	test_entropies();
	test_unknown_peer();
	fi_close(&A.ep->fid);
	fi_close(&B.ep->fid);
	fi_close(&A.cq->fid);
	fi_close(&B.cq->fid);
	fi_close(&av->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
