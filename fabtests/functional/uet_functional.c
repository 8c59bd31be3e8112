/*
 * uet_functional: functional tests of an RDM provider through the public
 * fi_* API. Endpoints live in one process; every wait polls all CQs (manual
 * progress) and has a wall-clock budget only to turn a hang into a FAIL.
 *
 * usage: uet_functional [-p provider] [-t substring] [-l] [-b]
 * Prints PASS/FAIL per test and ends with "N passed, N failed".
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NEP 3
#define STASH 1024

static const char *prov = "uet";
static int is_uet;
static char why[512];

#define REQUIRE(c, ...) do { if (!(c)) { snprintf(why, sizeof why, __VA_ARGS__); return 1; } } while (0)

struct entry {
	struct fi_cq_tagged_entry e;
	int err;           /* positive FI_E* value, 0 for success */
	size_t olen;
};

struct cqstash {
	struct entry q[STASH];
	int head, tail;
};

struct world {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep[NEP];
	struct fid_cq *cq[NEP];
	struct cqstash stash[NEP];
	fi_addr_t addr[NEP];
};

static struct fi_info *hints_for(const char *p) {
	struct fi_info *h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->addr_format = FI_SOCKADDR_IN;
	h->domain_attr->mr_mode = 0;
	h->fabric_attr->prov_name = strdup(p);
	return h;
}

static double now_s(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Drain every CQ into its stash. */
static void poll_all(struct world *w) {
	for (int i = 0; i < NEP; i++) {
		if (!w->cq[i]) continue;
		struct cqstash *s = &w->stash[i];
		for (;;) {
			struct fi_cq_tagged_entry e;
			ssize_t n = fi_cq_read(w->cq[i], &e, 1);
			if (n == 1) {
				s->q[s->tail++ % STASH] = (struct entry){.e = e};
			} else if (n == -FI_EAVAIL) {
				struct fi_cq_err_entry err = {0};
				if (fi_cq_readerr(w->cq[i], &err, 0) != 1) break;
				struct entry x = {.err = err.err, .olen = err.olen};
				x.e.op_context = err.op_context, x.e.flags = err.flags, x.e.len = err.len;
				x.e.buf = err.buf, x.e.data = err.data, x.e.tag = err.tag;
				s->q[s->tail++ % STASH] = x;
			} else {
				break;
			}
		}
	}
}

/* Wait for the next completion on endpoint i's CQ; 0 on success. */
static int next(struct world *w, int i, struct entry *out) {
	double end = now_s() + 20;
	struct cqstash *s = &w->stash[i];
	while (s->head == s->tail) {
		if (now_s() > end) return -1;
		poll_all(w);
	}
	*out = s->q[s->head++ % STASH];
	return 0;
}

/* Poll for a while and report whether endpoint i's CQ stayed empty. */
static int stays_empty(struct world *w, int i, int rounds) {
	for (int r = 0; r < rounds; r++) poll_all(w);
	return w->stash[i].head == w->stash[i].tail;
}

static int open_world(struct world *w, enum fi_av_type avt, int cqfmt_sel_tx) {
	memset(w, 0, sizeof *w);
	struct fi_info *h = hints_for(prov);
	int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &w->info);
	fi_freeinfo(h);
	if (rc) return rc;
	if ((rc = fi_fabric(w->info->fabric_attr, &w->fabric, NULL))) return rc;
	if ((rc = fi_domain(w->fabric, w->info, &w->domain, NULL))) return rc;
	struct fi_av_attr ava = {.type = avt};
	if ((rc = fi_av_open(w->domain, &ava, &w->av, NULL))) return rc;
	for (int i = 0; i < NEP; i++) {
		struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .size = 4096};
		if ((rc = fi_cq_open(w->domain, &cqa, &w->cq[i], NULL))) return rc;
		if ((rc = fi_endpoint(w->domain, w->info, &w->ep[i], NULL))) return rc;
		uint64_t f = FI_TRANSMIT | FI_RECV | ((i == 0 && cqfmt_sel_tx) ? FI_SELECTIVE_COMPLETION : 0);
		if ((rc = fi_ep_bind(w->ep[i], &w->cq[i]->fid, f))) return rc;
		if ((rc = fi_ep_bind(w->ep[i], &w->av->fid, 0))) return rc;
		if ((rc = fi_enable(w->ep[i]))) return rc;
		char name[64];
		size_t len = sizeof name;
		if ((rc = fi_getname(&w->ep[i]->fid, name, &len))) return rc;
		if (fi_av_insert(w->av, name, 1, &w->addr[i], 0, NULL) != 1) return -FI_EINVAL;
	}
	return 0;
}

static void close_world(struct world *w) {
	for (int i = 0; i < NEP; i++) {
		if (w->ep[i]) fi_close(&w->ep[i]->fid);
		if (w->cq[i]) fi_close(&w->cq[i]->fid);
	}
	if (w->av) fi_close(&w->av->fid);
	if (w->domain) fi_close(&w->domain->fid);
	if (w->fabric) fi_close(&w->fabric->fid);
	if (w->info) fi_freeinfo(w->info);
}

static unsigned char pat(long seed, long i) { return (unsigned char)((seed * 7 + i * 31) % 251); }
static void fill(void *b, size_t n, long seed) { for (size_t i = 0; i < n; i++) ((unsigned char *)b)[i] = pat(seed, i); }
static int same(const void *b, size_t n, long seed) {
	for (size_t i = 0; i < n; i++) if (((const unsigned char *)b)[i] != pat(seed, i)) return 0;
	return 1;
}

/* ------------------------------------------------------------------ tests */

static int t_getinfo(struct world *w) {
	(void)w;
	struct fi_info *h = hints_for(prov), *info = NULL;
	REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info) == 0, "no RDM info");
	REQUIRE(info->ep_attr->mem_tag_format >> 63, "mem_tag_format bit 63 clear");
	REQUIRE(info->domain_attr->cq_data_size >= 8, "cq_data_size %zu", info->domain_attr->cq_data_size);
	REQUIRE(info->ep_attr->max_msg_size >= (1UL << 30), "max_msg_size %zu", info->ep_attr->max_msg_size);
	REQUIRE(info->tx_attr->inject_size > 0, "inject_size 0");
	fi_freeinfo(info), info = NULL;
	struct fi_info *i2 = NULL;
	REQUIRE(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "0", FI_SOURCE, h, &i2) == 0 && i2->src_addr, "FI_SOURCE node");
	fi_freeinfo(i2), i2 = NULL;
	REQUIRE(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "4000", 0, h, &i2) == 0 && i2->dest_addr, "dest node");
	REQUIRE(((struct sockaddr_in *)i2->dest_addr)->sin_port == htons(4000), "dest port");
	fi_freeinfo(i2), i2 = NULL;
	REQUIRE(fi_getinfo(FI_VERSION(1, 17), "no-such-host.invalid", "1", 0, h, &i2) != 0, "bogus node resolved");
	if (is_uet) {
		h->ep_attr->type = FI_EP_MSG;
		REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i2) == -FI_ENODATA, "MSG not ENODATA");
		h->ep_attr->type = FI_EP_DGRAM;
		REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i2) == -FI_ENODATA, "DGRAM not ENODATA");
		h->ep_attr->type = FI_EP_RDM;
		h->caps |= FI_RMA;
		REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &i2) == -FI_ENODATA, "FI_RMA not ENODATA");
	}
	fi_freeinfo(h);
	return 0;
}

static int av_common(struct world *w) {
	char name[64], back[64], str[128];
	size_t len = sizeof name, blen = sizeof back, slen = sizeof str;
	REQUIRE(fi_getname(&w->ep[1]->fid, name, &len) == 0, "getname");
	REQUIRE(fi_av_lookup(w->av, w->addr[1], back, &blen) == 0 && blen == len && !memcmp(name, back, len), "lookup");
	fi_av_straddr(w->av, name, str, &slen);
	REQUIRE(slen > 1 && strlen(str) > 0, "straddr empty");
	struct sockaddr_in bad = {.sin_family = 0xffff};
	fi_addr_t a = 0;
	int n = fi_av_insert(w->av, &bad, 1, &a, 0, NULL);
	REQUIRE(n != 1 || !is_uet, "bad address inserted");
	REQUIRE(fi_av_remove(w->av, &w->addr[2], 1, 0) == 0, "remove");
	return 0;
}

static int t_av_table(struct world *w) { REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup"); return av_common(w); }
static int t_av_map(struct world *w) { REQUIRE(open_world(w, FI_AV_MAP, 0) == 0, "setup"); return av_common(w); }

static int t_getname_too_small(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	char name[4];
	size_t len = sizeof name;
	REQUIRE(fi_getname(&w->ep[0]->fid, name, &len) == -FI_ETOOSMALL, "not ETOOSMALL");
	REQUIRE(len >= sizeof(struct sockaddr_in), "needed length %zu", len);
	return 0;
}

static int t_not_enabled(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	struct fid_ep *ep;
	char b[8] = {0};
	REQUIRE(fi_endpoint(w->domain, w->info, &ep, NULL) == 0, "endpoint");
	REQUIRE(fi_ep_bind(ep, &w->cq[0]->fid, FI_TRANSMIT | FI_RECV) == 0 && fi_ep_bind(ep, &w->av->fid, 0) == 0, "bind");
	ssize_t rc = fi_send(ep, b, sizeof b, NULL, w->addr[1], NULL);
	fi_close(&ep->fid);
	REQUIRE(!is_uet || rc == -FI_EOPBADSTATE, "send before enable returned %zd", rc);
	return 0;
}

static int t_bad_input(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	char b[8] = {0};
	size_t big = w->info->tx_attr->inject_size + 1;
	char *ib = calloc(1, big);
	ssize_t rc = fi_inject(w->ep[0], ib, big, w->addr[1]);
	free(ib);
	REQUIRE(rc < 0, "oversized inject accepted");
	if (is_uet) {
		rc = fi_send(w->ep[0], b, sizeof b, NULL, 12345, NULL);
		REQUIRE(rc == -FI_EINVAL, "unknown fi_addr gave %zd", rc);
	}
	return 0;
}

static int t_msg_sizes(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	static const size_t sizes[] = {0, 1, 63, 4096, 65536, 1 << 20, (5 << 20) + 3};
	for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
		size_t n = sizes[k];
		char *s = malloc(n + 1), *r = calloc(1, n + 1);
		struct entry e;
		fill(s, n, k);
		REQUIRE(fi_recv(w->ep[1], r, n, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
		REQUIRE(fi_send(w->ep[0], s, n, NULL, w->addr[1], s) == 0, "send");
		REQUIRE(next(w, 1, &e) == 0 && !e.err && e.e.op_context == r && e.e.len == n, "recv completion %zu", n);
		REQUIRE(e.e.flags & FI_RECV && e.e.flags & FI_MSG, "recv flags");
		REQUIRE(next(w, 0, &e) == 0 && !e.err && e.e.op_context == s, "send completion %zu", n);
		REQUIRE(e.e.flags & FI_SEND, "send flags");
		REQUIRE(same(r, n, k), "data of size %zu", n);
		free(s), free(r);
	}
	return 0;
}

static int t_iov(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	char s[3000], r[3000] = {0};
	struct entry e;
	fill(s, sizeof s, 9);
	struct iovec si[3] = {{s, 1000}, {s + 1000, 1}, {s + 1001, 1999}}, ri[2] = {{r, 2500}, {r + 2500, 500}};
	REQUIRE(fi_recvv(w->ep[1], ri, NULL, 2, FI_ADDR_UNSPEC, r) == 0, "recvv");
	REQUIRE(fi_sendv(w->ep[0], si, NULL, 3, w->addr[1], s) == 0, "sendv");
	REQUIRE(next(w, 1, &e) == 0 && e.e.len == 3000, "recv");
	REQUIRE(next(w, 0, &e) == 0, "send");
	REQUIRE(same(r, 3000, 9), "data");
	/* sendmsg / recvmsg */
	memset(r, 0, sizeof r);
	struct iovec one = {s, 777}, rone = {r, 3000};
	struct fi_msg sm = {.msg_iov = &one, .iov_count = 1, .addr = w->addr[1], .context = s};
	struct fi_msg rm = {.msg_iov = &rone, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = r};
	REQUIRE(fi_recvmsg(w->ep[1], &rm, 0) == 0, "recvmsg");
	REQUIRE(fi_sendmsg(w->ep[0], &sm, FI_COMPLETION) == 0, "sendmsg");
	REQUIRE(next(w, 1, &e) == 0 && e.e.len == 777 && e.e.op_context == r, "recvmsg completion");
	REQUIRE(next(w, 0, &e) == 0 && e.e.op_context == s, "sendmsg completion");
	REQUIRE(same(r, 777, 9), "sendmsg data");
	return 0;
}

static int t_senddata_inject(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	char s[64], r[64];
	struct entry e;
	fill(s, 64, 3);
	REQUIRE(fi_recv(w->ep[1], r, 64, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
	REQUIRE(fi_senddata(w->ep[0], s, 64, NULL, 0x1122334455667788ULL, w->addr[1], s) == 0, "senddata");
	REQUIRE(next(w, 1, &e) == 0 && (e.e.flags & FI_REMOTE_CQ_DATA) && e.e.data == 0x1122334455667788ULL, "cq data");
	REQUIRE(next(w, 0, &e) == 0, "send completion");
	memset(r, 0, 64);
	REQUIRE(fi_recv(w->ep[1], r, 64, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
	REQUIRE(fi_inject(w->ep[0], s, 64, w->addr[1]) == 0, "inject");
	memset(s, 0, 64); /* the source may be reused at once */
	REQUIRE(next(w, 1, &e) == 0 && same(r, 64, 3), "inject data");
	REQUIRE(fi_recv(w->ep[1], r, 64, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
	fill(s, 64, 3);
	REQUIRE(fi_injectdata(w->ep[0], s, 64, 42, w->addr[1]) == 0, "injectdata");
	REQUIRE(next(w, 1, &e) == 0 && e.e.data == 42 && (e.e.flags & FI_REMOTE_CQ_DATA), "injectdata data");
	REQUIRE(stays_empty(w, 0, 2000), "inject produced a send completion");
	return 0;
}

static int t_tagged(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	char s[100], r[100];
	struct entry e;
	fill(s, 100, 4);
	REQUIRE(fi_trecv(w->ep[1], r, 100, NULL, FI_ADDR_UNSPEC, 0xAB00, 0x00FF, r) == 0, "trecv");
	REQUIRE(fi_tsend(w->ep[0], s, 100, NULL, w->addr[1], 0xAB42, s) == 0, "tsend");
	REQUIRE(next(w, 1, &e) == 0 && e.e.tag == 0xAB42 && e.e.len == 100, "tag/len");
	REQUIRE((e.e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED), "flags");
	REQUIRE(same(r, 100, 4), "data");
	REQUIRE(next(w, 0, &e) == 0 && (e.e.flags & FI_TAGGED), "send completion");
	/* A tag outside the ignore mask does not match. */
	REQUIRE(fi_trecv(w->ep[1], r, 100, NULL, FI_ADDR_UNSPEC, 0xAB00, 0x000F, r) == 0, "trecv2");
	REQUIRE(fi_tsend(w->ep[0], s, 100, NULL, w->addr[1], 0xAB42, s) == 0, "tsend2");
	REQUIRE(next(w, 0, &e) == 0, "send2 completion");
	REQUIRE(stays_empty(w, 1, 2000), "mismatched tag matched");
	return 0;
}

static int t_directed_readfrom(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	int from1 = 1, from2 = 2, x = 0, y = 0;
	struct entry e;
	REQUIRE(fi_trecv(w->ep[0], &x, sizeof x, NULL, w->addr[2], 7, 0, &x) == 0, "directed trecv");
	REQUIRE(fi_tsend(w->ep[1], &from1, sizeof from1, NULL, w->addr[0], 7, NULL) == 0, "send 1");
	REQUIRE(next(w, 1, &e) == 0, "send 1 done");
	REQUIRE(stays_empty(w, 0, 2000), "directed receive took the wrong sender");
	REQUIRE(fi_tsend(w->ep[2], &from2, sizeof from2, NULL, w->addr[0], 7, NULL) == 0, "send 2");
	REQUIRE(next(w, 0, &e) == 0 && e.e.op_context == &x && x == 2, "directed got %d", x);
	REQUIRE(fi_trecv(w->ep[0], &y, sizeof y, NULL, FI_ADDR_UNSPEC, 7, 0, &y) == 0, "wildcard");
	/* readfrom on the receive CQ reports the sender's fi_addr. */
	double end = now_s() + 20;
	struct fi_cq_tagged_entry te;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	ssize_t n;
	while ((n = fi_cq_readfrom(w->cq[0], &te, 1, &src)) == -FI_EAGAIN && now_s() < end) poll_all(w);
	REQUIRE(n == 1 && te.op_context == &y && y == 1, "wildcard got %d (%zd)", y, n);
	REQUIRE(src == w->addr[1], "readfrom src %llu", (unsigned long long)src);
	return 0;
}

static int t_ordering(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	enum { N = 200 };
	static int s[N], r[N];
	struct entry e;
	for (int pre = 0; pre < 2; pre++) {
		if (pre) for (int i = 0; i < N; i++) REQUIRE(fi_trecv(w->ep[1], &r[i], sizeof(int), NULL, FI_ADDR_UNSPEC, 5, 0, &r[i]) == 0, "trecv");
		for (int i = 0; i < N; i++) {
			s[i] = i;
			REQUIRE(fi_tsend(w->ep[0], &s[i], sizeof(int), NULL, w->addr[1], 5, &s[i]) == 0, "tsend %d", i);
		}
		for (int i = 0; i < N; i++) REQUIRE(next(w, 0, &e) == 0, "send completion %d", i);
		if (!pre) for (int i = 0; i < N; i++) REQUIRE(fi_trecv(w->ep[1], &r[i], sizeof(int), NULL, FI_ADDR_UNSPEC, 5, 0, &r[i]) == 0, "trecv");
		for (int i = 0; i < N; i++) REQUIRE(next(w, 1, &e) == 0, "recv completion %d", i);
		for (int i = 0; i < N; i++) REQUIRE(r[i] == i, "message %d got %d (pre-posted %d)", i, r[i], pre);
	}
	return 0;
}

static int t_unexpected_large(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	size_t n = 4 << 20;
	char *s = malloc(n), *r = calloc(1, n);
	struct entry e;
	fill(s, n, 11);
	REQUIRE(fi_tsend(w->ep[0], s, n, NULL, w->addr[1], 77, s) == 0, "tsend");
	REQUIRE(next(w, 0, &e) == 0, "send completion before the receive exists");
	REQUIRE(fi_trecv(w->ep[1], r, n, NULL, FI_ADDR_UNSPEC, 77, 0, r) == 0, "trecv");
	REQUIRE(next(w, 1, &e) == 0 && e.e.len == n && same(r, n, 11), "data");
	free(s), free(r);
	return 0;
}

static int trecvmsg(struct world *w, int ep, void *buf, size_t len, uint64_t tag, void *ctx, uint64_t flags) {
	struct iovec iov = {buf, len};
	struct fi_msg_tagged m = {.msg_iov = buf ? &iov : NULL, .iov_count = buf ? 1 : 0, .addr = FI_ADDR_UNSPEC,
	                          .tag = tag, .ignore = 0, .context = ctx};
	return (int)fi_trecvmsg(w->ep[ep], &m, flags);
}

static int t_peek_claim_discard(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	struct fi_context2 ca, cb, cc;
	char s[50], r[50] = {0};
	struct entry e;
	REQUIRE(trecvmsg(w, 1, NULL, 0, 7, &ca, FI_PEEK) == 0, "peek");
	REQUIRE(next(w, 1, &e) == 0 && e.err == FI_ENOMSG && e.e.op_context == &ca, "empty peek gave err %d", e.err);
	fill(s, 50, 5);
	REQUIRE(fi_tsend(w->ep[0], s, 50, NULL, w->addr[1], 7, s) == 0, "tsend");
	REQUIRE(next(w, 0, &e) == 0, "send");
	for (;;) { /* the message may still be in flight: peek until found */
		REQUIRE(trecvmsg(w, 1, NULL, 0, 7, &ca, FI_PEEK | FI_CLAIM) == 0, "peek|claim");
		REQUIRE(next(w, 1, &e) == 0, "peek completion");
		if (!e.err) break;
		REQUIRE(e.err == FI_ENOMSG, "peek error %d", e.err);
	}
	REQUIRE(e.e.len == 50 && e.e.tag == 7, "peek len %zu tag %llu", e.e.len, (unsigned long long)e.e.tag);
	REQUIRE(fi_trecv(w->ep[1], r, 50, NULL, FI_ADDR_UNSPEC, 7, 0, &cb) == 0, "plain trecv");
	REQUIRE(stays_empty(w, 1, 2000), "claimed message went to a plain receive");
	REQUIRE(trecvmsg(w, 1, r, 50, 7, &ca, FI_CLAIM) == 0, "claim");
	REQUIRE(next(w, 1, &e) == 0 && !e.err && e.e.op_context == &ca && same(r, 50, 5), "claim data");
	REQUIRE(fi_cancel(&w->ep[1]->fid, &cb) == 0, "cancel plain");
	REQUIRE(next(w, 1, &e) == 0 && e.err == FI_ECANCELED && e.e.op_context == &cb, "cancel completion err %d", e.err);
	/* peek|discard */
	REQUIRE(fi_tsend(w->ep[0], s, 50, NULL, w->addr[1], 8, s) == 0, "tsend 8");
	REQUIRE(next(w, 0, &e) == 0, "send 8");
	for (;;) {
		REQUIRE(trecvmsg(w, 1, NULL, 0, 8, &cc, FI_PEEK | FI_DISCARD) == 0, "peek|discard");
		REQUIRE(next(w, 1, &e) == 0, "discard completion");
		if (!e.err) break;
	}
	REQUIRE(trecvmsg(w, 1, NULL, 0, 8, &cc, FI_PEEK) == 0, "peek after discard");
	REQUIRE(next(w, 1, &e) == 0 && e.err == FI_ENOMSG, "discarded message still there");
	return 0;
}

static int t_cancel_truncate(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	char s[1000], r[100];
	struct entry e;
	int ctx;
	REQUIRE(fi_trecv(w->ep[1], r, 100, NULL, FI_ADDR_UNSPEC, 99, 0, &ctx) == 0, "trecv");
	REQUIRE(fi_cancel(&w->ep[1]->fid, &ctx) == 0, "cancel");
	REQUIRE(next(w, 1, &e) == 0 && e.err == FI_ECANCELED && e.e.op_context == &ctx, "canceled err %d", e.err);
	fill(s, 1000, 6);
	REQUIRE(fi_recv(w->ep[1], r, 100, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
	REQUIRE(fi_send(w->ep[0], s, 1000, NULL, w->addr[1], s) == 0, "send");
	REQUIRE(next(w, 1, &e) == 0 && e.err == FI_ETRUNC && e.olen == 900, "trunc err %d olen %zu", e.err, e.olen);
	REQUIRE(same(r, 100, 6), "truncated data");
	char str[64];
	REQUIRE(fi_cq_strerror(w->cq[1], 0, NULL, str, sizeof str) != NULL, "strerror");
	return 0;
}

static int t_selective_levels(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 1) == 0, "setup");
	char s[5000], r[5000];
	struct entry e;
	fill(s, 5000, 8);
	struct iovec iov = {s, 5000};
	struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = w->addr[1], .context = s};
	REQUIRE(fi_recv(w->ep[1], r, 5000, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
	REQUIRE(fi_sendmsg(w->ep[0], &m, 0) == 0, "sendmsg without FI_COMPLETION");
	REQUIRE(next(w, 1, &e) == 0 && same(r, 5000, 8), "data");
	REQUIRE(stays_empty(w, 0, 3000), "unrequested completion");
	static const uint64_t levels[] = {FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE};
	for (int k = 0; k < 3; k++) {
		memset(r, 0, sizeof r);
		REQUIRE(fi_recv(w->ep[1], r, 5000, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
		REQUIRE(fi_sendmsg(w->ep[0], &m, FI_COMPLETION | levels[k]) == 0, "sendmsg level %d", k);
		REQUIRE(next(w, 0, &e) == 0 && e.e.op_context == s && !e.err, "level %d completion", k);
		REQUIRE(next(w, 1, &e) == 0 && same(r, 5000, 8), "level %d data", k);
	}
	return 0;
}

static int t_cq_formats(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	static const enum fi_cq_format fmts[] = {FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA};
	for (int k = 0; k < 3; k++) {
		struct fid_cq *cq;
		struct fid_ep *ep;
		struct fi_cq_attr a = {.format = fmts[k]};
		char name[64], s[32], r[32];
		size_t len = sizeof name;
		fi_addr_t me;
		REQUIRE(fi_cq_open(w->domain, &a, &cq, NULL) == 0, "cq_open %d", k);
		REQUIRE(fi_endpoint(w->domain, w->info, &ep, NULL) == 0, "ep");
		REQUIRE(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) == 0 && fi_ep_bind(ep, &w->av->fid, 0) == 0, "bind");
		REQUIRE(fi_enable(ep) == 0 && fi_getname(&ep->fid, name, &len) == 0, "enable");
		REQUIRE(fi_av_insert(w->av, name, 1, &me, 0, NULL) == 1, "insert self");
		fill(s, 32, k);
		REQUIRE(fi_recv(ep, r, 32, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
		REQUIRE(fi_senddata(ep, s, 32, NULL, 5, me, s) == 0, "send to self");
		int got_send = 0, got_recv = 0;
		double end = now_s() + 20;
		while ((!got_send || !got_recv) && now_s() < end) {
			struct fi_cq_data_entry d;
			if (fi_cq_read(cq, &d, 1) != 1) continue;
			if (d.op_context == s) got_send = 1;
			if (d.op_context == r) {
				got_recv = 1;
				if (k >= 1) REQUIRE((d.flags & FI_RECV) && d.len == 32, "format %d len/flags", k);
				if (k == 2) REQUIRE(d.data == 5, "format DATA data");
			}
		}
		REQUIRE(got_send && got_recv && same(r, 32, k), "format %d completions", k);
		fi_close(&ep->fid);
		fi_close(&cq->fid);
	}
	return 0;
}

static int t_eq_mr(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	struct fid_eq *eq;
	struct fi_eq_attr ea = {.size = 16};
	uint32_t ev;
	struct fi_eq_entry in = {.context = (void *)w}, out;
	REQUIRE(fi_eq_open(w->fabric, &ea, &eq, NULL) == 0, "eq_open");
	REQUIRE(fi_eq_read(eq, &ev, &out, sizeof out, 0) == -FI_EAGAIN, "empty eq");
	ssize_t wr = fi_eq_write(eq, FI_NOTIFY, &in, sizeof in, 0);
	if (wr != -FI_ENOSYS) {
		REQUIRE(wr == sizeof in, "eq_write %zd", wr);
		REQUIRE(fi_eq_read(eq, &ev, &out, sizeof out, 0) == sizeof out && ev == FI_NOTIFY && out.context == w, "eq_read");
	}
	fi_close(&eq->fid);
	char buf[256];
	struct fid_mr *mr1, *mr2, *mr3;
	struct iovec iov = {buf, 128};
	struct fi_mr_attr ma = {.mr_iov = &iov, .iov_count = 1, .access = FI_SEND | FI_RECV, .requested_key = 3};
	REQUIRE(fi_mr_reg(w->domain, buf, sizeof buf, FI_SEND | FI_RECV, 0, 1, 0, &mr1, NULL) == 0, "mr_reg");
	REQUIRE(fi_mr_regv(w->domain, &iov, 1, FI_SEND, 0, 2, 0, &mr2, NULL) == 0, "mr_regv");
	REQUIRE(fi_mr_regattr(w->domain, &ma, 0, &mr3) == 0, "mr_regattr");
	(void)fi_mr_desc(mr1);
	REQUIRE(fi_mr_key(mr1) != fi_mr_key(mr2) || fi_mr_key(mr1) != FI_KEY_NOTAVAIL, "keys");
	fi_close(&mr1->fid), fi_close(&mr2->fid), fi_close(&mr3->fid);
	return 0;
}

static int t_two_domains_close_order(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	struct world w2;
	REQUIRE(open_world(&w2, FI_AV_TABLE, 0) == 0, "second fabric");
	char name[64], s[100], r[100];
	size_t len = sizeof name;
	fi_addr_t there;
	struct entry e;
	REQUIRE(fi_getname(&w2.ep[0]->fid, name, &len) == 0 && fi_av_insert(w->av, name, 1, &there, 0, NULL) == 1, "insert");
	fill(s, 100, 12);
	REQUIRE(fi_recv(w2.ep[0], r, 100, NULL, FI_ADDR_UNSPEC, r) == 0, "recv");
	REQUIRE(fi_send(w->ep[0], s, 100, NULL, there, s) == 0, "send");
	double end = now_s() + 20;
	while (w2.stash[0].head == w2.stash[0].tail && now_s() < end) poll_all(w), poll_all(&w2);
	REQUIRE(next(&w2, 0, &e) == 0 && same(r, 100, 12), "cross-domain data");
	REQUIRE(next(w, 0, &e) == 0, "send completion");
	/* Close the AV and CQs before the endpoints: allowed or -FI_EBUSY, never a crash. */
	int rc = fi_close(&w2.av->fid);
	REQUIRE(rc == 0 || rc == -FI_EBUSY, "av close %d", rc);
	if (rc == 0) w2.av = NULL;
	for (int i = 0; i < NEP; i++) {
		rc = fi_close(&w2.cq[i]->fid);
		REQUIRE(rc == 0 || rc == -FI_EBUSY, "cq close %d", rc);
		if (rc == 0) w2.cq[i] = NULL;
	}
	close_world(&w2);
	return 0;
}

static int t_big(struct world *w) {
	REQUIRE(open_world(w, FI_AV_TABLE, 0) == 0, "setup");
	size_t n = 256UL << 20, words = n / 8;
	uint64_t *s = malloc(n), *r = calloc(1, n);
	struct entry e;
	REQUIRE(s && r, "allocation");
	for (size_t i = 0; i < words; i++) s[i] = i * 0x9E3779B97F4A7C15ULL;
	REQUIRE(fi_trecv(w->ep[1], r, n, NULL, FI_ADDR_UNSPEC, 1, 0, r) == 0, "trecv");
	REQUIRE(fi_tsend(w->ep[0], s, n, NULL, w->addr[1], 1, s) == 0, "tsend");
	double end = now_s() + 300;
	while (w->stash[1].head == w->stash[1].tail && now_s() < end) poll_all(w);
	REQUIRE(next(w, 1, &e) == 0 && !e.err && e.e.len == n, "256 MiB receive completion");
	for (size_t i = 0; i < words; i++) REQUIRE(r[i] == i * 0x9E3779B97F4A7C15ULL, "word %zu corrupted", i);
	free(s), free(r);
	return 0;
}

static const struct test {
	const char *name;
	int (*fn)(struct world *);
	int optin;
} tests[] = {
	{"getinfo", t_getinfo, 0},
	{"av_table", t_av_table, 0},
	{"av_map", t_av_map, 0},
	{"getname_too_small", t_getname_too_small, 0},
	{"not_enabled", t_not_enabled, 0},
	{"bad_input", t_bad_input, 0},
	{"msg_sizes", t_msg_sizes, 0},
	{"iov_and_msg", t_iov, 0},
	{"senddata_inject", t_senddata_inject, 0},
	{"tagged_ignore", t_tagged, 0},
	{"directed_readfrom", t_directed_readfrom, 0},
	{"ordering", t_ordering, 0},
	{"unexpected_large", t_unexpected_large, 0},
	{"peek_claim_discard", t_peek_claim_discard, 0},
	{"cancel_truncate", t_cancel_truncate, 0},
	{"selective_and_levels", t_selective_levels, 0},
	{"cq_formats", t_cq_formats, 0},
	{"eq_mr", t_eq_mr, 0},
	{"two_domains_close_order", t_two_domains_close_order, 0},
	{"big", t_big, 1},
};

int main(int argc, char **argv) {
	const char *filter = NULL;
	int list = 0, big = 0, opt, passed = 0, failed = 0;
	while ((opt = getopt(argc, argv, "p:t:lb")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 't': filter = optarg; break;
		case 'l': list = 1; break;
		case 'b': big = 1; break;
		default:
			fprintf(stderr, "usage: %s [-p provider] [-t substring] [-l] [-b]\n", argv[0]);
			return 2;
		}
	}
	is_uet = strcmp(prov, "uet") == 0;
	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
		const struct test *t = &tests[i];
		if ((t->optin && !big) || (filter && !strstr(t->name, filter))) continue;
		if (list) { puts(t->name); continue; }
		struct world w;
		memset(&w, 0, sizeof w);
		why[0] = 0;
		int rc = t->fn(&w);
		close_world(&w);
		if (rc) printf("FAIL %s: %s\n", t->name, why), failed++;
		else printf("PASS %s\n", t->name), passed++;
		fflush(stdout);
	}
	if (!list) printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
