/*
 * uet_functional: functional tests of a libfabric RDM provider through the
 * public fi_* API only.
 *
 *   cc -O2 -Wall -Wextra -o uet_functional uet_functional.c -lfabric
 *   FI_PROVIDER_PATH=<dir with libuet-fi.so> ./uet_functional [-p uet]
 *   ./uet_functional -p sockets          (same tests on a reference provider)
 *
 * Options: -p <prov> (default uet), -t <substring> (run matching tests only),
 * -l (list tests), -b (include the 256 MiB "big" test).
 *
 * Each test prints "PASS name" or "FAIL name: reason"; the last line is
 * "N passed, N failed" and the exit status is 0 only when none failed.
 *
 * Endpoints live in one process, each with its own CQ.  Every wait polls the
 * CQs of all endpoints (completions that are not being waited for are kept
 * in a per-endpoint queue) until a wall-clock budget per test runs out; the
 * budget only turns a hang into a FAIL, nothing is asserted about timing.
 * Checks that the libfabric man pages leave to the provider are made strict
 * for uet only (see strict()).
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define API_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define MAX_EP 3
#define MAX_DOM 2
#define STASH_LEN 4096
#define MAX_ALLOCS 64
#define MAX_INFOS 32
#define DEFAULT_BUDGET 20.0 /* seconds; a hang guard, not a performance bound */

static const char *prov = "uet";
static int verbose;

/* ------------------------------------------------------------------ */
/* Failure handling: a failed check longjmps back to the runner.       */

static jmp_buf fail_jmp;
static char fail_msg[512];
static const char *cur_test;

static void fail(int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 2, 3)));
static void fail(int line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(fail_msg, sizeof fail_msg, "line %d: ", line);

	va_start(ap, fmt);
	vsnprintf(fail_msg + n, sizeof fail_msg - n, fmt, ap);
	va_end(ap);
	longjmp(fail_jmp, 1);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;

	printf("# %s: ", cur_test);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

#define FAILF(...) fail(__LINE__, __VA_ARGS__)
#define CHECK(cond, fmt, ...)                                                 \
	do {                                                                  \
		if (!(cond))                                                  \
			fail(__LINE__, "`%s` failed: " fmt, #cond, ##__VA_ARGS__); \
	} while (0)
/* A call returning 0 on success and -errno on failure. */
#define CHECK_RC(call)                                                        \
	do {                                                                  \
		long rc_ = (long)(call);                                      \
		if (rc_)                                                      \
			fail(__LINE__, "%s returned %ld (%s)", #call, rc_,    \
			     fi_strerror((int)-rc_));                         \
	} while (0)

/* The man pages leave these details to the provider: enforce them for uet. */
static int strict(void)
{
	return strcmp(prov, "uet") == 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double deadline;

static void check_deadline(const char *what)
{
	if (now() > deadline)
		FAILF("no progress within the test budget while %s", what);
}

/* ------------------------------------------------------------------ */
/* Test environment: fabric, domains, AVs, endpoints with one CQ each. */

struct comp {
	int err; /* 0, or the positive error code of an error completion */
	int prov_errno;
	void *ctx;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data;
	uint64_t tag;
	size_t olen;
	fi_addr_t src;
};

struct ep {
	struct fid_ep *ep;
	struct fid_cq *cq;
	int dom;
	char name[64];
	size_t namelen;
	fi_addr_t peer[MAX_EP]; /* the endpoints' fi_addrs in this ep's AV */
	struct comp stash[STASH_LEN];
	size_t head, count;
};

struct setup_opts {
	int nep;                  /* endpoints, default 2 */
	enum fi_cq_format format; /* default FI_CQ_FORMAT_TAGGED */
	enum fi_av_type av_type;  /* default FI_AV_TABLE */
	uint64_t tx_bind_flags;   /* e.g. FI_SELECTIVE_COMPLETION */
	int two_domains;          /* ep i in domain i % 2; domain 1 in a second fabric */
};

static struct env {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_fabric *fabric2; /* second fabric (two_domains) */
	struct fid_domain *domain[MAX_DOM];
	struct fid_av *av[MAX_DOM];
	int ndom, nep;
	enum fi_cq_format format;
	int readfrom; /* poll with fi_cq_readfrom */
	struct ep ep[MAX_EP];
	void *allocs[MAX_ALLOCS];
	int nallocs;
	struct fi_info *infos[MAX_INFOS]; /* getinfo results to free */
	int ninfos;
} E;

static void *xalloc(size_t len)
{
	void *p;

	if (E.nallocs == MAX_ALLOCS)
		FAILF("test uses too many buffers");
	p = malloc(len ? len : 1);
	if (!p)
		FAILF("cannot allocate %zu bytes", len);
	memset(p, 0xEE, len);
	E.allocs[E.nallocs++] = p;
	return p;
}

static struct fi_info *keep_info(struct fi_info *info)
{
	if (info && E.ninfos < MAX_INFOS)
		E.infos[E.ninfos++] = info;
	return info;
}

static struct fi_info *base_hints(void)
{
	struct fi_info *h = keep_info(fi_allocinfo());

	if (!h)
		FAILF("fi_allocinfo failed");
	h->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->ep_attr->type = FI_EP_RDM;
	h->addr_format = FI_SOCKADDR_IN;
	h->domain_attr->mr_mode = 0;
	h->fabric_attr->prov_name = strdup(prov);
	return h;
}

static void close_fid(struct fid *fid, const char *what)
{
	int rc = fi_close(fid);

	if (rc && verbose)
		fprintf(stderr, "# closing %s: %s\n", what, fi_strerror(-rc));
}

static void teardown(void)
{
	int i;

	for (i = 0; i < MAX_EP; i++) {
		if (E.ep[i].ep)
			close_fid(&E.ep[i].ep->fid, "endpoint");
		if (E.ep[i].cq)
			close_fid(&E.ep[i].cq->fid, "cq");
	}
	for (i = 0; i < MAX_DOM; i++) {
		if (E.av[i])
			close_fid(&E.av[i]->fid, "av");
		if (E.domain[i])
			close_fid(&E.domain[i]->fid, "domain");
	}
	if (E.fabric2)
		close_fid(&E.fabric2->fid, "second fabric");
	if (E.fabric)
		close_fid(&E.fabric->fid, "fabric");
	for (i = 0; i < E.nallocs; i++)
		free(E.allocs[i]);
	for (i = 0; i < E.ninfos; i++)
		fi_freeinfo(E.infos[i]);
	if (E.info)
		fi_freeinfo(E.info);
	memset(&E, 0, sizeof E);
}

static struct fid_cq *open_cq(struct fid_domain *domain)
{
	struct fi_cq_attr attr = {
		.size = STASH_LEN,
		.format = E.format,
		.wait_obj = FI_WAIT_NONE,
	};
	struct fid_cq *cq;

	CHECK_RC(fi_cq_open(domain, &attr, &cq, NULL));
	return cq;
}

/* Create an endpoint bound to a new CQ and the domain's AV (not enabled). */
static struct fid_ep *open_ep(int dom, struct fid_cq **cqp, uint64_t tx_bind)
{
	struct fid_ep *ep;
	struct fid_cq *cq;

	CHECK_RC(fi_endpoint(E.domain[dom], E.info, &ep, NULL));
	*cqp = cq = open_cq(E.domain[dom]);
	CHECK_RC(fi_ep_bind(ep, &E.av[dom]->fid, 0));
	CHECK_RC(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | tx_bind));
	CHECK_RC(fi_ep_bind(ep, &cq->fid, FI_RECV));
	return ep;
}

static void setup(const struct setup_opts *o)
{
	struct fi_info *hints = base_hints();
	int i, j, d;

	E.nep = o && o->nep ? o->nep : 2;
	E.ndom = o && o->two_domains ? 2 : 1;
	E.format = o && o->format ? o->format : FI_CQ_FORMAT_TAGGED;

	CHECK_RC(fi_getinfo(API_VERSION, NULL, NULL, 0, hints, &E.info));
	CHECK_RC(fi_fabric(E.info->fabric_attr, &E.fabric, NULL));
	for (d = 0; d < E.ndom; d++) {
		struct fi_av_attr av_attr = {
			.type = o && o->av_type ? o->av_type : FI_AV_TABLE,
			.count = 16,
		};

		if (d == 1)
			CHECK_RC(fi_fabric(E.info->fabric_attr, &E.fabric2, NULL));
		CHECK_RC(fi_domain(d ? E.fabric2 : E.fabric, E.info, &E.domain[d], NULL));
		CHECK_RC(fi_av_open(E.domain[d], &av_attr, &E.av[d], NULL));
	}
	for (i = 0; i < E.nep; i++) {
		struct ep *e = &E.ep[i];

		e->dom = i % E.ndom;
		e->ep = open_ep(e->dom, &e->cq, o ? o->tx_bind_flags : 0);
		CHECK_RC(fi_enable(e->ep));
		e->namelen = sizeof e->name;
		CHECK_RC(fi_getname(&e->ep->fid, e->name, &e->namelen));
	}
	/* Every domain's AV holds every endpoint, inserted in index order. */
	for (d = 0; d < E.ndom; d++) {
		for (j = 0; j < E.nep; j++) {
			fi_addr_t fa = FI_ADDR_NOTAVAIL;
			int n = fi_av_insert(E.av[d], E.ep[j].name, 1, &fa, 0, NULL);

			CHECK(n == 1, "fi_av_insert of ep %d returned %d", j, n);
			CHECK(fa != FI_ADDR_NOTAVAIL, "no fi_addr for ep %d", j);
			for (i = 0; i < E.nep; i++)
				if (E.ep[i].dom == d)
					E.ep[i].peer[j] = fa;
		}
	}
}

/* ------------------------------------------------------------------ */
/* Completions.                                                        */

static void stash_push(struct ep *e, const struct comp *c)
{
	if (e->count == STASH_LEN)
		FAILF("completion queue of the test overflowed");
	e->stash[(e->head + e->count++) % STASH_LEN] = *c;
}

/* Read at most one entry from endpoint i's CQ into its stash. */
static int poll_ep(int i)
{
	struct ep *e = &E.ep[i];
	union {
		struct fi_cq_entry c;
		struct fi_cq_msg_entry m;
		struct fi_cq_data_entry d;
		struct fi_cq_tagged_entry t;
	} raw;
	struct comp c;
	fi_addr_t src = FI_ADDR_NOTAVAIL;
	ssize_t n;

	memset(&raw, 0, sizeof raw);
	memset(&c, 0, sizeof c);
	n = E.readfrom ? fi_cq_readfrom(e->cq, &raw, 1, &src)
		       : fi_cq_read(e->cq, &raw, 1);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == 1) {
		c.ctx = raw.c.op_context;
		c.src = src;
		if (E.format != FI_CQ_FORMAT_CONTEXT) {
			c.flags = raw.m.flags;
			c.len = raw.m.len;
		}
		if (E.format == FI_CQ_FORMAT_DATA ||
		    E.format == FI_CQ_FORMAT_TAGGED) {
			c.buf = raw.d.buf;
			c.data = raw.d.data;
		}
		if (E.format == FI_CQ_FORMAT_TAGGED)
			c.tag = raw.t.tag;
	} else if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err;
		ssize_t r;

		memset(&err, 0, sizeof err);
		r = fi_cq_readerr(e->cq, &err, 0);
		if (r != 1)
			FAILF("fi_cq_readerr on ep %d returned %zd after -FI_EAVAIL", i, r);
		if (err.err <= 0)
			FAILF("error completion on ep %d with err %d", i, err.err);
		c.err = err.err;
		c.prov_errno = err.prov_errno;
		c.ctx = err.op_context;
		c.flags = err.flags;
		c.len = err.len;
		c.buf = err.buf;
		c.data = err.data;
		c.tag = err.tag;
		c.olen = err.olen;
		c.src = FI_ADDR_NOTAVAIL;
	} else {
		FAILF("fi_cq_read on ep %d returned %zd (%s)", i, n,
		      fi_strerror((int)-n));
	}
	stash_push(e, &c);
	return 1;
}

/* Poll every endpoint's CQ once. */
static void progress(void)
{
	int i;

	for (i = 0; i < E.nep; i++)
		poll_ep(i);
}

/* Wait for the next completion (success or error) of endpoint i. */
static struct comp wait_any(int i)
{
	struct ep *e = &E.ep[i];
	struct comp c;

	while (!e->count) {
		progress();
		if (now() > deadline)
			FAILF("no completion on ep %d within the test budget", i);
	}
	c = e->stash[e->head];
	e->head = (e->head + 1) % STASH_LEN;
	e->count--;
	return c;
}

/* Wait for a successful completion of endpoint i for operation ctx. */
static struct comp wait_ok(int i, void *ctx)
{
	struct comp c = wait_any(i);

	if (c.err)
		FAILF("ep %d: error completion %d (%s), olen %zu, expected success",
		      i, c.err, fi_strerror(c.err), c.olen);
	if (c.ctx != ctx)
		FAILF("ep %d: completion for context %p, expected %p", i, c.ctx, ctx);
	return c;
}

/* Wait for a successful completion of endpoint i for one of the n
 * operations ctx[0..n) not yet marked in *seen; mark it, return its index.
 * Completions need not come in posting order (comp_order is
 * FI_ORDER_NONE): over several paths a later message can finish first. */
static int wait_ok_among(int i, void *const ctx[], int n, unsigned *seen,
			 struct comp *out)
{
	struct comp c = wait_any(i);
	int k;

	if (c.err)
		FAILF("ep %d: error completion %d (%s), olen %zu, expected success",
		      i, c.err, fi_strerror(c.err), c.olen);
	for (k = 0; k < n; k++) {
		if (c.ctx == ctx[k] && !(*seen & 1u << k)) {
			*seen |= 1u << k;
			*out = c;
			return k;
		}
	}
	FAILF("ep %d: completion for context %p, none expected", i, c.ctx);
	return -1;
}

/* Wait for successful completions of endpoint i for operations a and b,
 * in either order. */
static void wait_both_ok(int i, void *a, void *b)
{
	void *ctx[2] = { a, b };
	unsigned seen = 0;
	struct comp c;

	wait_ok_among(i, ctx, 2, &seen, &c);
	wait_ok_among(i, ctx, 2, &seen, &c);
}

/* Wait for an error completion of endpoint i for operation ctx. */
static struct comp wait_err(int i, void *ctx, int err)
{
	struct comp c = wait_any(i);

	if (c.err != err)
		FAILF("ep %d: completion with err %d (%s), expected %d (%s)", i,
		      c.err, c.err ? fi_strerror(c.err) : "success", err,
		      fi_strerror(err));
	if (c.ctx != ctx)
		FAILF("ep %d: error completion for context %p, expected %p", i,
		      c.ctx, ctx);
	return c;
}

/* After the other checks of a test: nothing further shows up on ep i while
 * all CQs are polled for a short while. */
static void expect_quiet(int i, const char *what)
{
	double until = now() + 0.2;

	while (now() < until)
		progress();
	if (E.ep[i].count)
		FAILF("ep %d: unexpected completion (context %p, err %d) %s", i,
		      E.ep[i].stash[E.ep[i].head].ctx,
		      E.ep[i].stash[E.ep[i].head].err, what);
}

/* Post a data operation, retrying while the provider says -FI_EAGAIN. */
#define POST(call)                                                            \
	do {                                                                  \
		ssize_t rc_;                                                  \
		while ((rc_ = (call)) == -FI_EAGAIN) {                        \
			progress();                                           \
			check_deadline("retrying " #call);                    \
		}                                                             \
		if (rc_)                                                      \
			fail(__LINE__, "%s returned %zd (%s)", #call, rc_,    \
			     fi_strerror((int)-rc_));                         \
	} while (0)

static void check_flags(const struct comp *c, uint64_t want, uint64_t forbid)
{
	if (E.format == FI_CQ_FORMAT_CONTEXT)
		return;
	/* Some providers (sockets) also set FI_MSG on tagged completions. */
	if (!strict())
		forbid &= ~(FI_MSG | FI_TAGGED);
	if ((c->flags & want) != want || (c->flags & forbid))
		FAILF("completion flags 0x%llx: want 0x%llx set and 0x%llx clear",
		      (unsigned long long)c->flags, (unsigned long long)want,
		      (unsigned long long)forbid);
}

/* ------------------------------------------------------------------ */
/* Data patterns.                                                      */

static uint8_t pattern_byte(size_t off, uint64_t seed)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ULL ^ (seed * 0xBF58476D1CE4E5B9ULL);

	return (uint8_t)(x >> 56 ^ x >> 29 ^ off);
}

static void fill_pattern(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = pattern_byte(i, seed);
}

/* Fail unless buf[0..len) holds the pattern (offsets from start). */
static void check_pattern_at(const void *buf, size_t len, uint64_t seed,
			     size_t start, const char *what)
{
	const uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != pattern_byte(start + i, seed))
			FAILF("%s: byte %zu is 0x%02x, expected 0x%02x", what,
			      start + i, p[i], pattern_byte(start + i, seed));
}

static void check_pattern(const void *buf, size_t len, uint64_t seed,
			  const char *what)
{
	check_pattern_at(buf, len, seed, 0, what);
}

static void check_untouched(const void *buf, size_t len, const char *what)
{
	const uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != 0xEE)
			FAILF("%s: byte %zu past the data was overwritten", what, i);
}

/* ------------------------------------------------------------------ */
/* Small helpers for common exchanges.                                 */

/* ep `from` sends `len` bytes of pattern `seed` to ep `to` (fi_send/fi_recv)
 * and both completions and the data are checked. */
static void msg_exchange(int from, int to, size_t len, uint64_t seed)
{
	struct fi_context2 sctx, rctx;
	uint8_t *sbuf = xalloc(len), *rbuf = xalloc(len + 64);
	struct comp c;

	fill_pattern(sbuf, len, seed);
	POST(fi_recv(E.ep[to].ep, rbuf, len + 64, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_send(E.ep[from].ep, sbuf, len, NULL, E.ep[from].peer[to], &sctx));
	c = wait_ok(to, &rctx);
	check_flags(&c, FI_RECV | FI_MSG, FI_SEND | FI_TAGGED);
	if (E.format != FI_CQ_FORMAT_CONTEXT)
		CHECK(c.len == len, "received len %zu, sent %zu", c.len, len);
	c = wait_ok(from, &sctx);
	check_flags(&c, FI_SEND | FI_MSG, FI_RECV);
	check_pattern(rbuf, len, seed, "received message");
	check_untouched(rbuf + len, 64, "receive buffer");
}

static void tagged_exchange(int from, int to, size_t len, uint64_t tag,
			    uint64_t seed)
{
	struct fi_context2 sctx, rctx;
	uint8_t *sbuf = xalloc(len), *rbuf = xalloc(len);
	struct comp c;

	fill_pattern(sbuf, len, seed);
	POST(fi_trecv(E.ep[to].ep, rbuf, len, NULL, FI_ADDR_UNSPEC, tag, 0, &rctx));
	POST(fi_tsend(E.ep[from].ep, sbuf, len, NULL, E.ep[from].peer[to], tag, &sctx));
	c = wait_ok(to, &rctx);
	check_flags(&c, FI_RECV | FI_TAGGED, FI_SEND | FI_MSG);
	CHECK(c.len == len, "received len %zu, sent %zu", c.len, len);
	CHECK(c.tag == tag, "tag 0x%llx", (unsigned long long)c.tag);
	wait_ok(from, &sctx);
	check_pattern(rbuf, len, seed, "received tagged message");
}

/* Post a peek (with extra flags) for tag on ep i and wait for its result;
 * returns the completion (err 0 = found, FI_ENOMSG = nothing there). */
static struct comp peek(int i, uint64_t tag, uint64_t flags,
			struct fi_context2 *ctx)
{
	struct fi_msg_tagged msg = {
		.addr = FI_ADDR_UNSPEC,
		.tag = tag,
		.context = ctx,
	};
	struct comp c;

	POST(fi_trecvmsg(E.ep[i].ep, &msg, FI_PEEK | flags));
	c = wait_any(i);
	CHECK(c.ctx == ctx, "peek completion context %p, expected %p", c.ctx, (void *)ctx);
	CHECK(c.err == 0 || c.err == FI_ENOMSG, "peek failed with %d (%s)",
	      c.err, fi_strerror(c.err));
	return c;
}

/* Peek until the message with `tag` has arrived on ep i. */
static struct comp peek_until_found(int i, uint64_t tag, uint64_t flags,
				    struct fi_context2 *ctx)
{
	struct comp c;

	do {
		c = peek(i, tag, flags, ctx);
		check_deadline("peeking for a sent message");
	} while (c.err == FI_ENOMSG);
	return c;
}

/* ------------------------------------------------------------------ */
/* getinfo                                                             */

static int getinfo_rc(struct fi_info *hints, const char *node,
		      const char *service, uint64_t flags, struct fi_info **out)
{
	struct fi_info *info = NULL;
	int rc = fi_getinfo(API_VERSION, node, service, flags, hints, &info);

	keep_info(info);
	if (out)
		*out = info;
	return rc;
}

static void t_getinfo_reject(void);
static void t_getinfo_node(void);

static void t_getinfo(void)
{
	struct fi_info *hints = base_hints(), *info;

	CHECK_RC(getinfo_rc(hints, NULL, NULL, 0, &info));
	CHECK(info->ep_attr->type == FI_EP_RDM, "ep type %d", info->ep_attr->type);
	CHECK((info->caps & hints->caps) == hints->caps, "caps 0x%llx",
	      (unsigned long long)info->caps);
	CHECK(info->addr_format == FI_SOCKADDR_IN, "addr_format %u",
	      info->addr_format);
	CHECK(strcmp(info->fabric_attr->prov_name, prov) == 0, "provider %s",
	      info->fabric_attr->prov_name);
	CHECK(info->ep_attr->mem_tag_format >> 63 == 1, "mem_tag_format 0x%llx",
	      (unsigned long long)info->ep_attr->mem_tag_format);
	CHECK(info->domain_attr->cq_data_size >= 8, "cq_data_size %zu",
	      info->domain_attr->cq_data_size);
	CHECK(info->ep_attr->max_msg_size >= (1ULL << 30), "max_msg_size %zu",
	      info->ep_attr->max_msg_size);
	CHECK(info->tx_attr->inject_size > 0, "inject_size 0");
	CHECK((info->domain_attr->mr_mode & FI_MR_LOCAL) == 0,
	      "mr_mode 0x%x requires FI_MR_LOCAL", info->domain_attr->mr_mode);
	/* RMA: at least one target iovec per operation (fi_rma(3)). */
	hints = base_hints();
	hints->caps |= FI_RMA | FI_ATOMIC;
	CHECK_RC(getinfo_rc(hints, NULL, NULL, 0, &info));
	CHECK(info->tx_attr->rma_iov_limit >= 1, "rma_iov_limit %zu",
	      info->tx_attr->rma_iov_limit);
	t_getinfo_reject();
	t_getinfo_node();
}

static void t_getinfo_reject(void)
{
	struct fi_info *hints;
	int rc;

	hints = base_hints();
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_MSG;
	rc = getinfo_rc(hints, NULL, NULL, 0, NULL);
	if (strict())
		CHECK(rc == -FI_ENODATA, "FI_EP_MSG: rc %d (%s)", rc, fi_strerror(-rc));
	else
		note("FI_EP_MSG: rc %d (-FI_ENODATA expected only for uet)", rc);

	hints = base_hints();
	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_DGRAM;
	rc = getinfo_rc(hints, NULL, NULL, 0, NULL);
	if (strict())
		CHECK(rc == -FI_ENODATA, "FI_EP_DGRAM: rc %d (%s)", rc, fi_strerror(-rc));
	else
		note("FI_EP_DGRAM: rc %d (-FI_ENODATA expected only for uet)", rc);

	if (strict()) {
		hints = base_hints();
		hints->caps |= FI_TRIGGER;
		rc = getinfo_rc(hints, NULL, NULL, 0, NULL);
		CHECK(rc == -FI_ENODATA, "FI_TRIGGER: rc %d (%s)", rc, fi_strerror(-rc));
	}

	/* uet takes exactly one target iovec per RMA or atomic. */
	if (strict()) {
		hints = base_hints();
		hints->caps |= FI_RMA;
		hints->tx_attr->rma_iov_limit = 2;
		rc = getinfo_rc(hints, NULL, NULL, 0, NULL);
		CHECK(rc == -FI_ENODATA, "rma_iov_limit 2: rc %d (%s)", rc, fi_strerror(-rc));
	}

	/* No provider here reports device memory support. */
	hints = base_hints();
	hints->caps |= FI_HMEM;
	rc = getinfo_rc(hints, NULL, NULL, 0, NULL);
	CHECK(rc == -FI_ENODATA, "FI_HMEM: rc %d (%s)", rc, fi_strerror(-rc));
}

static const struct sockaddr_in *as_sin(const void *addr, size_t len)
{
	const struct sockaddr_in *sin = addr;

	CHECK(addr != NULL, "address missing");
	CHECK(len >= sizeof *sin, "address length %zu", len);
	CHECK(sin->sin_family == AF_INET, "address family %d", sin->sin_family);
	return sin;
}

static void t_getinfo_node(void)
{
	struct fi_info *hints, *info;
	const struct sockaddr_in *sin;
	int rc;

	/* FI_SOURCE: node/service name the local (source) address. */
	hints = base_hints();
	CHECK_RC(getinfo_rc(hints, "127.0.0.1", "0", FI_SOURCE, &info));
	sin = as_sin(info->src_addr, info->src_addrlen);
	CHECK(sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK), "src_addr not 127.0.0.1");

	/* Without FI_SOURCE they name the destination. */
	hints = base_hints();
	CHECK_RC(getinfo_rc(hints, "127.0.0.1", "4000", 0, &info));
	sin = as_sin(info->dest_addr, info->dest_addrlen);
	CHECK(sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK), "dest_addr not 127.0.0.1");
	CHECK(ntohs(sin->sin_port) == 4000, "dest port %d", ntohs(sin->sin_port));

	/* A node name that cannot be resolved fails. */
	hints = base_hints();
	rc = getinfo_rc(hints, "no-such-host.invalid", "4000", 0, &info);
	CHECK(rc != 0, "unresolvable node accepted");
}

/* ------------------------------------------------------------------ */
/* Address vectors and names                                           */

static void av_checks(enum fi_av_type type)
{
	struct setup_opts o = { .av_type = type };
	struct fid_av *av;
	struct sockaddr_in bad;
	char buf[64], str[128];
	size_t len, slen;
	fi_addr_t fa;
	int j, n;

	setup(&o);
	av = E.av[0];
	for (j = 0; j < E.nep; j++) {
		len = sizeof buf;
		CHECK_RC(fi_av_lookup(av, E.ep[0].peer[j], buf, &len));
		CHECK(len == E.ep[j].namelen, "lookup length %zu, name %zu", len,
		      E.ep[j].namelen);
		CHECK(memcmp(buf, E.ep[j].name, len) == 0, "lookup of ep %d differs", j);
		slen = sizeof str;
		CHECK(fi_av_straddr(av, E.ep[j].name, str, &slen) != NULL, "straddr NULL");
		CHECK(str[0] != '\0', "straddr empty");
	}
	/* The inserted addresses work both ways. */
	msg_exchange(0, 1, 100, 1);
	msg_exchange(1, 0, 100, 2);

	/* An address of an unknown family is not inserted. */
	memset(&bad, 0, sizeof bad);
	bad.sin_family = 0xffff;
	fa = 0;
	n = fi_av_insert(av, &bad, 1, &fa, 0, NULL);
	CHECK(n != 1, "address of family 0xffff inserted (fi_addr %llu)",
	      (unsigned long long)fa);
	if (n == 0)
		CHECK(fa == FI_ADDR_NOTAVAIL, "failed insert left fi_addr %llu",
		      (unsigned long long)fa);

	/* Remove: the removed entry no longer resolves (table indices). */
	CHECK_RC(fi_av_remove(av, &E.ep[0].peer[1], 1, 0));
	if (type == FI_AV_TABLE) {
		len = sizeof buf;
		n = fi_av_lookup(av, E.ep[0].peer[1], buf, &len);
		if (strict())
			CHECK(n != 0, "lookup of a removed address succeeded");
		else if (n == 0)
			note("lookup of a removed address still succeeds");
	}
	/* Re-insert: usable again. */
	fa = FI_ADDR_NOTAVAIL;
	CHECK(fi_av_insert(av, E.ep[1].name, 1, &fa, 0, NULL) == 1, "re-insert failed");
	E.ep[0].peer[1] = fa;
	msg_exchange(0, 1, 100, 3);
}

static void t_av_table(void) { av_checks(FI_AV_TABLE); }
static void t_av_map(void) { av_checks(FI_AV_MAP); }

static void t_getname(void)
{
	char small[2];
	size_t len = sizeof small;
	int rc;

	setup(NULL);
	rc = fi_getname(&E.ep[0].ep->fid, small, &len);
	CHECK(rc == -FI_ETOOSMALL, "rc %d (%s)", rc, fi_strerror(-rc));
	CHECK(len == E.ep[0].namelen, "needed length %zu, name length %zu", len,
	      E.ep[0].namelen);
	CHECK(E.ep[0].namelen >= sizeof(struct sockaddr_in), "name length %zu",
	      E.ep[0].namelen);
	CHECK(memcmp(E.ep[0].name, E.ep[1].name, E.ep[0].namelen) != 0,
	      "two endpoints have the same name");
}

/* ------------------------------------------------------------------ */
/* Bad input                                                           */

static void t_not_enabled(void)
{
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_context2 ctx;
	char buf[16] = "x";
	ssize_t rc;

	setup(NULL);
	/* A third endpoint, bound but not enabled, reusing slot 2. */
	ep = open_ep(0, &cq, 0);
	E.ep[2].ep = ep; /* closed by teardown */
	E.ep[2].cq = cq;
	rc = fi_send(ep, buf, sizeof buf, NULL, E.ep[0].peer[1], &ctx);
	if (strict())
		CHECK(rc == -FI_EOPBADSTATE, "fi_send: %zd (%s)", rc, fi_strerror((int)-rc));
	else if (rc != -FI_EOPBADSTATE)
		note("fi_send on a disabled endpoint returned %zd", rc);
	rc = fi_trecv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 1, 0, &ctx);
	if (strict())
		CHECK(rc == -FI_EOPBADSTATE, "fi_trecv: %zd (%s)", rc, fi_strerror((int)-rc));
	else if (rc != -FI_EOPBADSTATE)
		note("fi_trecv on a disabled endpoint returned %zd", rc);
	/* The enabled endpoints are unaffected. */
	msg_exchange(0, 1, 10, 4);
}

static void t_unknown_addr(void)
{
	struct fi_context2 ctx;
	char buf[16] = "x";
	ssize_t rc;

	setup(NULL);
	if (!strict()) {
		note("send to an unknown fi_addr is only checked for uet");
		return;
	}
	rc = fi_send(E.ep[0].ep, buf, sizeof buf, NULL, (fi_addr_t)12345, &ctx);
	CHECK(rc == -FI_EINVAL, "fi_send: %zd (%s)", rc, fi_strerror((int)-rc));
	rc = fi_tsend(E.ep[0].ep, buf, sizeof buf, NULL, (fi_addr_t)12345, 7, &ctx);
	CHECK(rc == -FI_EINVAL, "fi_tsend: %zd (%s)", rc, fi_strerror((int)-rc));
	msg_exchange(0, 1, 10, 5);
}

static void t_inject_too_big(void)
{
	size_t max;
	uint8_t *buf, *rbuf;
	struct fi_context2 rctx;
	ssize_t rc;
	struct comp c;

	setup(NULL);
	max = E.info->tx_attr->inject_size;
	buf = xalloc(max + 1);
	rbuf = xalloc(max + 1);
	fill_pattern(buf, max + 1, max);
	rc = fi_inject(E.ep[0].ep, buf, max + 1, E.ep[0].peer[1]);
	CHECK(rc < 0, "fi_inject of inject_size+1 bytes returned %zd", rc);
	rc = fi_tinject(E.ep[0].ep, buf, max + 1, E.ep[0].peer[1], 9);
	CHECK(rc < 0, "fi_tinject of inject_size+1 bytes returned %zd", rc);
	/* Exactly inject_size bytes work. */
	POST(fi_recv(E.ep[1].ep, rbuf, max + 1, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_inject(E.ep[0].ep, buf, max, E.ep[0].peer[1]));
	c = wait_ok(1, &rctx);
	CHECK(c.len == max, "len %zu", c.len);
	check_pattern(rbuf, max, max, "injected message");
	expect_quiet(0, "after fi_inject");
}

/* ------------------------------------------------------------------ */
/* Messages                                                            */

static void t_msg_sizes(void)
{
	static const size_t sizes[] = { 0, 1, 63, 4096, 65536, 1 << 20, (5 << 20) + 3 };
	size_t i;

	setup(NULL);
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		msg_exchange(0, 1, sizes[i], sizes[i]);
		msg_exchange(1, 0, sizes[i], sizes[i] + 1);
	}
}

static void t_msg_iov(void)
{
	static const size_t slen[3] = { 100, 2000, 5000 }, rlen[2] = { 3000, 4100 };
	enum { TOTAL = 7100 };
	uint8_t *src = xalloc(TOTAL), *dst[2];
	struct iovec siov[3], riov[2];
	struct fi_context2 sctx, rctx;
	size_t off = 0;
	struct comp c;
	int k;

	setup(NULL);
	CHECK(E.info->tx_attr->iov_limit >= 3 && E.info->rx_attr->iov_limit >= 2,
	      "iov_limit tx %zu rx %zu", E.info->tx_attr->iov_limit,
	      E.info->rx_attr->iov_limit);
	fill_pattern(src, TOTAL, 77);
	for (k = 0; k < 3; k++) {
		siov[k].iov_base = src + off;
		siov[k].iov_len = slen[k];
		off += slen[k];
	}
	for (k = 0; k < 2; k++) {
		dst[k] = xalloc(rlen[k]);
		riov[k].iov_base = dst[k];
		riov[k].iov_len = rlen[k];
	}
	POST(fi_recvv(E.ep[1].ep, riov, NULL, 2, FI_ADDR_UNSPEC, &rctx));
	POST(fi_sendv(E.ep[0].ep, siov, NULL, 3, E.ep[0].peer[1], &sctx));
	c = wait_ok(1, &rctx);
	CHECK(c.len == TOTAL, "len %zu", c.len);
	wait_ok(0, &sctx);
	for (off = 0, k = 0; k < 2; off += rlen[k], k++)
		check_pattern_at(dst[k], rlen[k], 77, off, "iovec receive");
}

static void t_msg_sendmsg(void)
{
	enum { LEN = 3000 };
	uint8_t *sbuf = xalloc(LEN), *rbuf = xalloc(LEN);
	struct iovec siov = { sbuf, LEN }, riov = { rbuf, LEN };
	struct fi_context2 sctx, rctx;
	struct fi_msg smsg, rmsg;
	struct comp c;

	setup(NULL);
	fill_pattern(sbuf, LEN, 12);
	memset(&rmsg, 0, sizeof rmsg);
	rmsg.msg_iov = &riov;
	rmsg.iov_count = 1;
	rmsg.addr = FI_ADDR_UNSPEC;
	rmsg.context = &rctx;
	memset(&smsg, 0, sizeof smsg);
	smsg.msg_iov = &siov;
	smsg.iov_count = 1;
	smsg.addr = E.ep[0].peer[1];
	smsg.context = &sctx;
	POST(fi_recvmsg(E.ep[1].ep, &rmsg, FI_COMPLETION));
	POST(fi_sendmsg(E.ep[0].ep, &smsg, FI_COMPLETION));
	c = wait_ok(1, &rctx);
	check_flags(&c, FI_RECV | FI_MSG, FI_SEND);
	CHECK(c.len == LEN, "len %zu", c.len);
	c = wait_ok(0, &sctx);
	check_flags(&c, FI_SEND | FI_MSG, FI_RECV);
	check_pattern(rbuf, LEN, 12, "fi_sendmsg data");
}

/* Contexts are the application's to choose: integers with the top bit set
 * (no address has it) come back as given. */
static void t_context_high_bit(void)
{
	enum { LEN = 64 };
	uint8_t *sbuf = xalloc(LEN), *rbuf = xalloc(LEN);
	void *sctx = (void *)(uintptr_t)(~(uintptr_t)0 - 1);
	void *rctx = (void *)(uintptr_t)((uintptr_t)1 << (sizeof(void *) * 8 - 1));
	struct comp c;

	setup(NULL);
	fill_pattern(sbuf, LEN, 31);
	POST(fi_recv(E.ep[1].ep, rbuf, LEN, NULL, FI_ADDR_UNSPEC, rctx));
	POST(fi_send(E.ep[0].ep, sbuf, LEN, NULL, E.ep[0].peer[1], sctx));
	c = wait_ok(1, rctx);
	CHECK(c.len == LEN, "len %zu", c.len);
	c = wait_ok(0, sctx);
	check_flags(&c, FI_SEND | FI_MSG, FI_RECV);
	check_pattern(rbuf, LEN, 31, "high-bit context data");
}

/* FI_MORE: the provider may hold a send for the ones said to follow; the
 * burst still arrives whole once the sender reads its CQ. */
static void t_send_more(void)
{
	enum { N = 4, LEN = 500 };
	uint8_t *s = xalloc(N * LEN), *r = xalloc(N * LEN);
	struct fi_context2 sctx[N], rctx[N];
	struct iovec iov[N];
	struct fi_msg msg[N];
	void *sent[N], *received[N];
	unsigned sends_seen = 0, recvs_seen = 0;
	struct comp c;
	int k;

	setup(NULL);
	for (k = 0; k < N; k++) {
		fill_pattern(s + k * LEN, LEN, 60 + k);
		POST(fi_recv(E.ep[1].ep, r + k * LEN, LEN, NULL, FI_ADDR_UNSPEC, &rctx[k]));
	}
	for (k = 0; k < N; k++) {
		iov[k] = (struct iovec){ s + k * LEN, LEN };
		memset(&msg[k], 0, sizeof msg[k]);
		msg[k].msg_iov = &iov[k];
		msg[k].iov_count = 1;
		msg[k].addr = E.ep[0].peer[1];
		msg[k].context = &sctx[k];
		POST(fi_sendmsg(E.ep[0].ep, &msg[k], FI_COMPLETION | (k < N - 1 ? FI_MORE : 0)));
	}
	for (k = 0; k < N; k++) {
		sent[k] = &sctx[k];
		received[k] = &rctx[k];
	}
	for (k = 0; k < N; k++) {
		wait_ok_among(0, sent, N, &sends_seen, &c);
		check_flags(&c, FI_SEND | FI_MSG, 0);
	}
	for (k = 0; k < N; k++) {
		wait_ok_among(1, received, N, &recvs_seen, &c);
		CHECK(c.len == LEN, "len %zu", c.len);
	}
	/* Matched in sending order (FI_ORDER_SAS) whatever the completion order. */
	for (k = 0; k < N; k++)
		check_pattern(r + k * LEN, LEN, 60 + k, "FI_MORE burst");
}

static void t_msg_senddata(void)
{
	struct setup_opts o = { .format = FI_CQ_FORMAT_DATA };
	const uint64_t data = 0x1122334455667788ULL;
	uint8_t *sbuf = xalloc(256), *rbuf = xalloc(256);
	struct fi_context2 sctx, rctx;
	struct comp c;

	setup(&o);
	fill_pattern(sbuf, 256, 256);
	POST(fi_recv(E.ep[1].ep, rbuf, 256, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_senddata(E.ep[0].ep, sbuf, 256, NULL, data, E.ep[0].peer[1], &sctx));
	c = wait_ok(1, &rctx);
	check_flags(&c, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, 0);
	CHECK(c.data == data, "data 0x%llx", (unsigned long long)c.data);
	CHECK(c.len == 256, "len %zu", c.len);
	wait_ok(0, &sctx);
	check_pattern(rbuf, 256, 256, "fi_senddata payload");

	/* Tagged with data. */
	POST(fi_trecv(E.ep[1].ep, rbuf, 256, NULL, FI_ADDR_UNSPEC, 5, 0, &rctx));
	POST(fi_tsenddata(E.ep[0].ep, sbuf, 100, NULL, ~data, E.ep[0].peer[1], 5, &sctx));
	c = wait_ok(1, &rctx);
	check_flags(&c, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA, 0);
	CHECK(c.data == ~data, "data 0x%llx", (unsigned long long)c.data);
	CHECK(c.len == 100, "len %zu", c.len);
	wait_ok(0, &sctx);

	/* A plain send carries no data flag. */
	POST(fi_recv(E.ep[1].ep, rbuf, 256, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_send(E.ep[0].ep, sbuf, 10, NULL, E.ep[0].peer[1], &sctx));
	c = wait_ok(1, &rctx);
	check_flags(&c, FI_RECV | FI_MSG, FI_REMOTE_CQ_DATA);
	wait_ok(0, &sctx);
}

static void t_msg_inject(void)
{
	struct setup_opts o = { .format = FI_CQ_FORMAT_DATA };
	size_t len;
	uint8_t *sbuf, *rbuf;
	struct fi_context2 rctx, sctx;
	struct comp c;

	setup(&o);
	len = E.info->tx_attr->inject_size < 64 ? E.info->tx_attr->inject_size : 64;
	sbuf = xalloc(len);
	rbuf = xalloc(len);

	fill_pattern(sbuf, len, 31);
	POST(fi_recv(E.ep[1].ep, rbuf, len, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_inject(E.ep[0].ep, sbuf, len, E.ep[0].peer[1]));
	memset(sbuf, 0, len); /* the buffer is free again on return */
	c = wait_ok(1, &rctx);
	CHECK(c.len == len, "len %zu", c.len);
	check_flags(&c, FI_RECV | FI_MSG, FI_REMOTE_CQ_DATA);
	check_pattern(rbuf, len, 31, "fi_inject payload");

	fill_pattern(sbuf, len, 32);
	POST(fi_recv(E.ep[1].ep, rbuf, len, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_injectdata(E.ep[0].ep, sbuf, len, 0x1122334455667788ULL, E.ep[0].peer[1]));
	memset(sbuf, 0, len);
	c = wait_ok(1, &rctx);
	check_flags(&c, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA, 0);
	CHECK(c.data == 0x1122334455667788ULL, "data 0x%llx", (unsigned long long)c.data);
	check_pattern(rbuf, len, 32, "fi_injectdata payload");

	/* Tagged inject too. */
	fill_pattern(sbuf, len, 33);
	POST(fi_trecv(E.ep[1].ep, rbuf, len, NULL, FI_ADDR_UNSPEC, 44, 0, &rctx));
	POST(fi_tinject(E.ep[0].ep, sbuf, len, E.ep[0].peer[1], 44));
	c = wait_ok(1, &rctx);
	check_pattern(rbuf, len, 33, "fi_tinject payload");

	/* Neither produced a send completion: the first one is this send's. */
	POST(fi_recv(E.ep[1].ep, rbuf, len, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_send(E.ep[0].ep, sbuf, len, NULL, E.ep[0].peer[1], &sctx));
	wait_ok(1, &rctx);
	wait_ok(0, &sctx);
	expect_quiet(0, "after fi_inject/fi_injectdata");
}

/* ------------------------------------------------------------------ */
/* Tagged                                                              */

static void t_tagged_basic(void)
{
	const uint64_t t1 = 0x8000000000000001ULL, t2 = 0x1234;
	uint8_t *b1 = xalloc(500), *b2 = xalloc(500), *s = xalloc(500);
	struct fi_context2 r1, r2, s1, s2;
	struct comp c;

	setup(NULL);
	tagged_exchange(0, 1, 1000, t1, 1);
	tagged_exchange(1, 0, 0, t2, 2);

	/* Two receives with different tags, messages sent in the other order. */
	POST(fi_trecv(E.ep[1].ep, b1, 500, NULL, FI_ADDR_UNSPEC, t1, 0, &r1));
	POST(fi_trecv(E.ep[1].ep, b2, 500, NULL, FI_ADDR_UNSPEC, t2, 0, &r2));
	fill_pattern(s, 500, t2);
	POST(fi_tsend(E.ep[0].ep, s, 200, NULL, E.ep[0].peer[1], t2, &s2));
	c = wait_ok(1, &r2);
	CHECK(c.tag == t2 && c.len == 200, "tag 0x%llx len %zu", (unsigned long long)c.tag, c.len);
	check_pattern(b2, 200, t2, "message for the second receive");
	fill_pattern(s, 500, 99);
	POST(fi_tsend(E.ep[0].ep, s, 300, NULL, E.ep[0].peer[1], t1, &s1));
	c = wait_ok(1, &r1);
	CHECK(c.tag == t1 && c.len == 300, "tag 0x%llx len %zu", (unsigned long long)c.tag, c.len);
	check_flags(&c, FI_RECV | FI_TAGGED, FI_SEND | FI_MSG);
	check_pattern(b1, 300, 99, "message for the first receive");
	{
		void *sends[2] = { &s1, &s2 };
		unsigned seen = 0;

		while (seen != 3) {
			wait_ok_among(0, sends, 2, &seen, &c);
			check_flags(&c, FI_SEND | FI_TAGGED, FI_RECV);
		}
	}

	/* Tagged and untagged queues are separate: with an untagged receive
	 * and a tagged receive posted, a tagged send goes to the tagged one
	 * and an untagged send to the untagged one, whatever the order. */
	POST(fi_recv(E.ep[1].ep, b1, 500, NULL, FI_ADDR_UNSPEC, &r1));
	fill_pattern(s, 500, 0x7A);
	POST(fi_tsend(E.ep[0].ep, s, 40, NULL, E.ep[0].peer[1], 0, &s1));
	c = peek_until_found(1, 0, 0, &r2);
	CHECK(c.len == 40, "peek len %zu", c.len);
	POST(fi_trecv(E.ep[1].ep, b2, 500, NULL, FI_ADDR_UNSPEC, 0, 0, &r2));
	c = wait_ok(1, &r2);
	CHECK(c.len == 40, "tagged receive len %zu", c.len);
	check_pattern(b2, 40, 0x7A, "tagged message next to an untagged receive");
	fill_pattern(s, 500, 0x7B);
	POST(fi_send(E.ep[0].ep, s, 60, NULL, E.ep[0].peer[1], &s2));
	c = wait_ok(1, &r1);
	CHECK(c.len == 60, "untagged receive len %zu", c.len);
	check_flags(&c, FI_RECV | FI_MSG, FI_TAGGED);
	check_pattern(b1, 60, 0x7B, "untagged message");
	wait_both_ok(0, &s1, &s2);
}

static void t_tagged_ignore(void)
{
	uint8_t *rbuf = xalloc(64), *sbuf = xalloc(64);
	struct fi_context2 r, s1, s2;
	struct comp c;

	setup(NULL);
	fill_pattern(sbuf, 64, 1);
	/* Receive 0xAB00 ignoring the low byte; 0xAC42 must not match it. */
	POST(fi_trecv(E.ep[1].ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, 0xAB00, 0x00FF, &r));
	POST(fi_tsend(E.ep[0].ep, sbuf, 16, NULL, E.ep[0].peer[1], 0xAC42, &s1));
	POST(fi_tsend(E.ep[0].ep, sbuf, 32, NULL, E.ep[0].peer[1], 0xAB42, &s2));
	c = wait_ok(1, &r);
	CHECK(c.tag == 0xAB42, "matched tag 0x%llx", (unsigned long long)c.tag);
	CHECK(c.len == 32, "len %zu", c.len);
	/* The 0xAC42 message is still there for an exact receive. */
	POST(fi_trecv(E.ep[1].ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, 0xAC42, 0, &r));
	c = wait_ok(1, &r);
	CHECK(c.tag == 0xAC42 && c.len == 16, "tag 0x%llx len %zu",
	      (unsigned long long)c.tag, c.len);
	check_pattern(rbuf, 16, 1, "tagged payload");
	wait_both_ok(0, &s1, &s2);
	/* Ignore bits in the top of the tag. */
	tagged_exchange(0, 1, 8, 0xF000000000000042ULL, 3);
	POST(fi_trecv(E.ep[1].ep, rbuf, 64, NULL, FI_ADDR_UNSPEC, 0x42,
		      0xF000000000000000ULL, &r));
	POST(fi_tsend(E.ep[0].ep, sbuf, 8, NULL, E.ep[0].peer[1], 0xA000000000000042ULL, &s1));
	c = wait_ok(1, &r);
	CHECK(c.tag == 0xA000000000000042ULL, "tag 0x%llx", (unsigned long long)c.tag);
	wait_ok(0, &s1);
}

/* Three endpoints: A (ep0) posts a receive directed at C (ep2); B (ep1) sends
 * first, then C.  The directed receive gets C's message; B's waits for a
 * later wildcard receive. */
static void t_directed_recv(void)
{
	struct setup_opts o = { .nep = 3 };
	uint8_t *rdir = xalloc(64), *rwild = xalloc(64), *sb = xalloc(64), *sc = xalloc(64);
	struct fi_context2 rctx_dir, rctx_wild, sctx_b, sctx_c, pctx;
	struct comp c;

	setup(&o);
	fill_pattern(sb, 64, 0xB);
	fill_pattern(sc, 64, 0xC);
	POST(fi_trecv(E.ep[0].ep, rdir, 64, NULL, E.ep[0].peer[2], 7, 0, &rctx_dir));
	POST(fi_tsend(E.ep[1].ep, sb, 64, NULL, E.ep[1].peer[0], 7, &sctx_b));
	/* B's message reaches A (a wildcard peek finds it) without completing
	 * the receive directed at C. */
	c = peek_until_found(0, 7, 0, &pctx);
	CHECK(c.len == 64, "peek len %zu", c.len);
	POST(fi_tsend(E.ep[2].ep, sc, 64, NULL, E.ep[2].peer[0], 7, &sctx_c));
	c = wait_ok(0, &rctx_dir);
	CHECK(c.len == 64, "len %zu", c.len);
	check_pattern(rdir, 64, 0xC, "directed receive (from C)");
	wait_ok(2, &sctx_c);
	/* B's message is taken by a later wildcard receive. */
	POST(fi_trecv(E.ep[0].ep, rwild, 64, NULL, FI_ADDR_UNSPEC, 7, 0, &rctx_wild));
	c = wait_ok(0, &rctx_wild);
	CHECK(c.len == 64, "len %zu", c.len);
	check_pattern(rwild, 64, 0xB, "wildcard receive (from B)");
	wait_ok(1, &sctx_b);
}

/* N same-tag messages of varying length, each starting with its index, are
 * matched in send order: receive k gets message k.  Phase 0 posts the
 * receives after all the sends (unexpected), phase 1 before them. */
static void t_tagged_order(void)
{
	enum { N = 200, MAXLEN = 8 + 6 * 1000 };
	static struct fi_context2 sctx[N], rctx[N];
	uint8_t *sblock = xalloc((size_t)N * MAXLEN), *rblock = xalloc((size_t)N * MAXLEN);
	uint8_t *sbuf[N], *rbuf[N];
	int done[N];
	struct comp c;
	int i, got, k, phase;

	setup(NULL);
	for (i = 0; i < N; i++) {
		size_t len = 8 + (i % 7) * 1000;

		sbuf[i] = sblock + (size_t)i * MAXLEN;
		rbuf[i] = rblock + (size_t)i * MAXLEN;
		fill_pattern(sbuf[i], len, i);
		memcpy(sbuf[i], &i, sizeof i);
	}
	for (phase = 0; phase < 2; phase++) {
		const char *what = phase ? "pre-posted receives" : "receives posted after the sends";

		memset(done, 0, sizeof done);
		memset(rblock, 0xEE, (size_t)N * MAXLEN);
		if (phase)
			for (i = 0; i < N; i++)
				POST(fi_trecv(E.ep[1].ep, rbuf[i], MAXLEN, NULL,
					      FI_ADDR_UNSPEC, 0xABC, 0, &rctx[i]));
		for (i = 0; i < N; i++)
			POST(fi_tsend(E.ep[0].ep, sbuf[i], 8 + (i % 7) * 1000, NULL,
				      E.ep[0].peer[1], 0xABC, &sctx[i]));
		if (!phase)
			for (i = 0; i < N; i++)
				POST(fi_trecv(E.ep[1].ep, rbuf[i], MAXLEN, NULL,
					      FI_ADDR_UNSPEC, 0xABC, 0, &rctx[i]));
		for (got = 0; got < N; got++) {
			c = wait_any(1);
			CHECK(c.err == 0, "%s: receive error %d", what, c.err);
			k = (int)((struct fi_context2 *)c.ctx - rctx);
			CHECK(k >= 0 && k < N && !done[k], "%s: bad receive context %p",
			      what, c.ctx);
			done[k] = 1;
			memcpy(&i, rbuf[k], sizeof i);
			CHECK(i == k, "%s: receive %d holds message %d", what, k, i);
			CHECK(c.len == 8 + (size_t)(k % 7) * 1000, "%s: receive %d got %zu bytes",
			      what, k, c.len);
			check_pattern_at(rbuf[k] + sizeof i, c.len - sizeof i, k, sizeof i,
					 "ordered message");
		}
		for (i = 0; i < N; i++) {
			c = wait_any(0);
			CHECK(c.err == 0, "%s: send error %d", what, c.err);
		}
	}
}

static void unexpected(size_t len)
{
	uint8_t *sbuf = xalloc(len), *rbuf = xalloc(len);
	struct fi_context2 sctx, rctx;
	double until;
	struct comp c;

	fill_pattern(sbuf, len, len);
	POST(fi_tsend(E.ep[0].ep, sbuf, len, NULL, E.ep[0].peer[1], 0x77, &sctx));
	/* Let the message (or its header) arrive before the receive exists. */
	until = now() + 0.1;
	while (now() < until)
		progress();
	POST(fi_trecv(E.ep[1].ep, rbuf, len, NULL, FI_ADDR_UNSPEC, 0x77, 0, &rctx));
	c = wait_ok(1, &rctx);
	CHECK(c.len == len, "len %zu", c.len);
	CHECK(c.tag == 0x77, "tag 0x%llx", (unsigned long long)c.tag);
	wait_ok(0, &sctx);
	check_pattern(rbuf, len, len, "unexpected message");
}

/* A 4 MiB tagged message (and a small one) sent before the receive exists. */
static void t_unexpected_large(void)
{
	setup(NULL);
	unexpected(4 << 20);
	unexpected(100);
}

static void t_source(void)
{
	struct setup_opts o = { .nep = 3 };
	uint8_t *rbuf[2], *sbuf = xalloc(16);
	struct fi_context2 rctx[2], sctx[2];
	struct comp c;
	int k, from;

	setup(&o);
	E.readfrom = 1;
	rbuf[0] = xalloc(16);
	rbuf[1] = xalloc(16);
	for (k = 0; k < 2; k++)
		POST(fi_trecv(E.ep[0].ep, rbuf[k], 16, NULL, FI_ADDR_UNSPEC, 3, 0, &rctx[k]));
	for (from = 1; from <= 2; from++) {
		sbuf[0] = (uint8_t)from;
		POST(fi_tsend(E.ep[from].ep, sbuf, 16, NULL, E.ep[from].peer[0], 3,
			      &sctx[from - 1]));
		wait_ok(from, &sctx[from - 1]);
	}
	for (k = 0; k < 2; k++) {
		c = wait_any(0);
		CHECK(c.err == 0, "receive error %d", c.err);
		int idx = (int)((struct fi_context2 *)c.ctx - rctx);
		CHECK(idx == 0 || idx == 1, "bad context");
		from = rbuf[idx][0];
		CHECK(from == 1 || from == 2, "payload names sender %d", from);
		CHECK(c.src == E.ep[0].peer[from],
		      "fi_cq_readfrom source %llu, sender ep %d is fi_addr %llu",
		      (unsigned long long)c.src, from,
		      (unsigned long long)E.ep[0].peer[from]);
	}
}

/* ------------------------------------------------------------------ */
/* Peek, claim, discard                                                */

static void t_peek_nomsg(void)
{
	struct fi_msg_tagged msg = { .addr = FI_ADDR_UNSPEC, .tag = 0x99 };
	struct fi_context2 ctx;
	struct fi_cq_err_entry err;
	struct fi_cq_tagged_entry ent;
	ssize_t n;

	setup(NULL);
	msg.context = &ctx;
	POST(fi_trecvmsg(E.ep[1].ep, &msg, FI_PEEK));
	/* Read this CQ directly: fi_cq_read reports -FI_EAVAIL. */
	while ((n = fi_cq_read(E.ep[1].cq, &ent, 1)) == -FI_EAGAIN) {
		poll_ep(0);
		check_deadline("waiting for the peek result");
	}
	CHECK(n == -FI_EAVAIL, "fi_cq_read returned %zd", n);
	memset(&err, 0, sizeof err);
	n = fi_cq_readerr(E.ep[1].cq, &err, 0);
	CHECK(n == 1, "fi_cq_readerr returned %zd", n);
	CHECK(err.err == FI_ENOMSG, "err %d (%s)", err.err, fi_strerror(err.err));
	CHECK(err.op_context == &ctx, "context %p", err.op_context);
	CHECK(fi_cq_strerror(E.ep[1].cq, err.prov_errno, err.err_data, NULL, 0) != NULL,
	      "fi_cq_strerror NULL");
}

static void t_peek_claim(void)
{
	uint8_t *s1 = xalloc(200), *s2 = xalloc(200), *r1 = xalloc(200), *r2 = xalloc(200);
	struct fi_context2 pctx, ctxA, rctx2, sctx1, sctx2;
	struct fi_msg_tagged msg;
	struct iovec iov = { r1, 200 };
	double until;
	struct comp c;

	setup(NULL);
	fill_pattern(s1, 200, 1);
	fill_pattern(s2, 200, 2);
	POST(fi_tsend(E.ep[0].ep, s1, 150, NULL, E.ep[0].peer[1], 7, &sctx1));
	/* A plain peek finds it, reporting its length and tag ... */
	c = peek_until_found(1, 7, 0, &pctx);
	CHECK(c.len == 150, "peek len %zu", c.len);
	CHECK(c.tag == 7, "peek tag 0x%llx", (unsigned long long)c.tag);
	check_flags(&c, FI_RECV | FI_TAGGED, 0);
	/* ... without consuming it; another tag finds nothing. */
	c = peek(1, 7, 0, &pctx);
	CHECK(c.err == 0, "second peek did not find the message");
	c = peek(1, 8, 0, &pctx);
	CHECK(c.err == FI_ENOMSG, "peek of tag 8 found something");
	/* Peek and claim, with context ctxA. */
	c = peek(1, 7, FI_CLAIM, &ctxA);
	CHECK(c.err == 0, "FI_PEEK|FI_CLAIM did not find the message");
	CHECK(c.len == 150 && c.tag == 7, "claim peek len %zu tag 0x%llx", c.len,
	      (unsigned long long)c.tag);
	/* A plain receive for the tag must not take the claimed message. */
	POST(fi_trecv(E.ep[1].ep, r2, 200, NULL, FI_ADDR_UNSPEC, 7, 0, &rctx2));
	until = now() + 0.2;
	while (now() < until)
		progress();
	CHECK(E.ep[1].count == 0, "completion %p (err %d) after posting a receive for "
	      "a claimed message (receive is %p)", E.ep[1].stash[E.ep[1].head].ctx,
	      E.ep[1].stash[E.ep[1].head].err, (void *)&rctx2);
	/* The claim with the same context delivers it. */
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.iov_count = 1;
	msg.addr = FI_ADDR_UNSPEC;
	msg.tag = 7;
	msg.context = &ctxA;
	POST(fi_trecvmsg(E.ep[1].ep, &msg, FI_CLAIM));
	c = wait_ok(1, &ctxA);
	CHECK(c.len == 150, "claimed len %zu", c.len);
	CHECK(c.tag == 7, "claimed tag 0x%llx", (unsigned long long)c.tag);
	check_flags(&c, FI_RECV | FI_TAGGED, 0);
	check_pattern(r1, 150, 1, "claimed message");
	check_untouched(r2, 200, "plain receive buffer");
	/* The next message goes to the plain receive. */
	POST(fi_tsend(E.ep[0].ep, s2, 120, NULL, E.ep[0].peer[1], 7, &sctx2));
	c = wait_ok(1, &rctx2);
	CHECK(c.len == 120, "len %zu", c.len);
	check_pattern(r2, 120, 2, "message after the claimed one");
	wait_both_ok(0, &sctx1, &sctx2);
	c = peek(1, 7, 0, &pctx);
	CHECK(c.err == FI_ENOMSG, "a message is still there after receiving both");
}

/* Send msg1 (to be discarded) then check that only msg2 is received. */
static void discard_test(int claim_first)
{
	uint8_t *s1 = xalloc(100), *s2 = xalloc(100), *r = xalloc(100);
	struct fi_context2 pctx, rctx, sctx1, sctx2;
	struct fi_msg_tagged msg;
	struct comp c;

	fill_pattern(s1, 100, 1);
	fill_pattern(s2, 100, 2);
	POST(fi_tsend(E.ep[0].ep, s1, 100, NULL, E.ep[0].peer[1], 0x71, &sctx1));
	if (claim_first) {
		c = peek_until_found(1, 0x71, FI_CLAIM, &pctx);
		memset(&msg, 0, sizeof msg);
		msg.addr = FI_ADDR_UNSPEC;
		msg.tag = 0x71;
		msg.context = &pctx;
		POST(fi_trecvmsg(E.ep[1].ep, &msg, FI_CLAIM | FI_DISCARD));
		wait_ok(1, &pctx);
	} else {
		c = peek_until_found(1, 0x71, FI_DISCARD, &pctx);
	}
	CHECK(c.len == 100, "peek len %zu", c.len);
	c = peek(1, 0x71, 0, &pctx);
	CHECK(c.err == FI_ENOMSG, "discarded message still there");
	wait_ok(0, &sctx1);
	POST(fi_tsend(E.ep[0].ep, s2, 100, NULL, E.ep[0].peer[1], 0x71, &sctx2));
	POST(fi_trecv(E.ep[1].ep, r, 100, NULL, FI_ADDR_UNSPEC, 0x71, 0, &rctx));
	wait_ok(1, &rctx);
	check_pattern(r, 100, 2, "message after the discarded one");
	wait_ok(0, &sctx2);
}

/* FI_PEEK|FI_DISCARD, then FI_PEEK|FI_CLAIM followed by FI_CLAIM|FI_DISCARD. */
static void t_peek_discard(void)
{
	setup(NULL);
	discard_test(0);
	discard_test(1);
}

/* ------------------------------------------------------------------ */
/* Cancel, truncation, completion control                              */

static void t_cancel(void)
{
	uint8_t *r1 = xalloc(64), *r2 = xalloc(64), *s = xalloc(64);
	struct fi_context2 c1, c2, c3, sctx;

	setup(NULL);
	POST(fi_trecv(E.ep[1].ep, r1, 64, NULL, FI_ADDR_UNSPEC, 0x81, 0, &c1));
	POST(fi_recv(E.ep[1].ep, r2, 64, NULL, FI_ADDR_UNSPEC, &c2));
	CHECK_RC(fi_cancel(&E.ep[1].ep->fid, &c1));
	wait_err(1, &c1, FI_ECANCELED);
	CHECK_RC(fi_cancel(&E.ep[1].ep->fid, &c2));
	wait_err(1, &c2, FI_ECANCELED);
	/* The cancelled buffers are not used: a new receive gets the message. */
	fill_pattern(s, 64, 5);
	POST(fi_tsend(E.ep[0].ep, s, 64, NULL, E.ep[0].peer[1], 0x81, &sctx));
	POST(fi_trecv(E.ep[1].ep, r2, 64, NULL, FI_ADDR_UNSPEC, 0x81, 0, &c3));
	wait_ok(1, &c3);
	check_pattern(r2, 64, 5, "message after cancel");
	check_untouched(r1, 64, "cancelled receive buffer");
	wait_ok(0, &sctx);
	expect_quiet(1, "after cancel");
}

static void t_truncate(void)
{
	uint8_t *s = xalloc(1000), *r = xalloc(200);
	struct fi_context2 rctx, sctx;
	struct comp c;

	setup(NULL);
	fill_pattern(s, 1000, 1000);
	POST(fi_trecv(E.ep[1].ep, r, 100, NULL, FI_ADDR_UNSPEC, 0x91, 0, &rctx));
	POST(fi_tsend(E.ep[0].ep, s, 1000, NULL, E.ep[0].peer[1], 0x91, &sctx));
	c = wait_err(1, &rctx, FI_ETRUNC);
	CHECK(c.olen == 900, "olen %zu", c.olen);
	if (strict())
		CHECK(c.len == 100, "len %zu", c.len);
	check_pattern(r, 100, 1000, "truncated message");
	check_untouched(r + 100, 100, "bytes past the receive buffer");
	wait_ok(0, &sctx);

	/* Untagged too. */
	POST(fi_recv(E.ep[1].ep, r, 100, NULL, FI_ADDR_UNSPEC, &rctx));
	POST(fi_send(E.ep[0].ep, s, 1000, NULL, E.ep[0].peer[1], &sctx));
	c = wait_err(1, &rctx, FI_ETRUNC);
	CHECK(c.olen == 900, "olen %zu", c.olen);
	check_pattern(r, 100, 1000, "truncated message");
	wait_ok(0, &sctx);

	/* A 1 MiB message into 100 bytes, receive posted first and after. */
	{
		const size_t big = 1 << 20;
		uint8_t *bs = xalloc(big);
		int posted_first;
		double until;

		fill_pattern(bs, big, big);
		for (posted_first = 1; posted_first >= 0; posted_first--) {
			memset(r, 0xEE, 200);
			if (posted_first)
				POST(fi_trecv(E.ep[1].ep, r, 100, NULL, FI_ADDR_UNSPEC, 0x92, 0, &rctx));
			POST(fi_tsend(E.ep[0].ep, bs, big, NULL, E.ep[0].peer[1], 0x92, &sctx));
			if (!posted_first) {
				until = now() + 0.1;
				while (now() < until)
					progress();
				POST(fi_trecv(E.ep[1].ep, r, 100, NULL, FI_ADDR_UNSPEC, 0x92, 0, &rctx));
			}
			c = wait_err(1, &rctx, FI_ETRUNC);
			CHECK(c.olen == big - 100, "1 MiB (%s): olen %zu",
			      posted_first ? "pre-posted" : "unexpected", c.olen);
			check_pattern(r, 100, big, "truncated 1 MiB message");
			check_untouched(r + 100, 100, "bytes past the receive buffer");
			wait_ok(0, &sctx);
		}
	}
}

static void send_msg(int from, int to, void *buf, size_t len, void *ctx,
		     uint64_t flags)
{
	struct iovec iov = { buf, len };
	struct fi_msg msg;

	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.iov_count = 1;
	msg.addr = E.ep[from].peer[to];
	msg.context = ctx;
	POST(fi_sendmsg(E.ep[from].ep, &msg, flags));
}

static void t_selective_completion(void)
{
	struct setup_opts o = { .tx_bind_flags = FI_SELECTIVE_COMPLETION };
	uint8_t *s = xalloc(100), *r1 = xalloc(100), *r2 = xalloc(100);
	struct fi_context2 a, b, rc1, rc2;
	void *received[2] = { &rc1, &rc2 };
	unsigned seen = 0;
	struct comp c;
	int k;

	setup(&o);
	fill_pattern(s, 100, 8);
	POST(fi_recv(E.ep[1].ep, r1, 100, NULL, FI_ADDR_UNSPEC, &rc1));
	POST(fi_recv(E.ep[1].ep, r2, 100, NULL, FI_ADDR_UNSPEC, &rc2));
	send_msg(0, 1, s, 100, &a, 0);
	send_msg(0, 1, s, 50, &b, FI_COMPLETION);
	for (k = 0; k < 2; k++) {
		int which = wait_ok_among(1, received, 2, &seen, &c);

		CHECK(c.len == (which ? 50u : 100u), "receive %d: len %zu", which, c.len);
	}
	check_pattern(r1, 100, 8, "first message");
	check_pattern(r2, 50, 8, "second message");
	/* Only the send with FI_COMPLETION reports. */
	wait_ok(0, &b);
	expect_quiet(0, "for the send without FI_COMPLETION");
}

/* fi_cq(3): delivery complete means processed by the peer; a message the
 * peer buffered (no receive posted yet) completes without a receive. A send
 * longer than FI_UET_RENDEZVOUS_BYTES (256 KiB by default) is pulled by the
 * receiver once matched, so it completes only after the receive is posted. */
/* Sends longer than this are rendezvous sends (FI_UET_RENDEZVOUS_BYTES,
 * 262144 unless set; 0 = never). */
static size_t rendezvous_bytes(void)
{
	const char *v = getenv("FI_UET_RENDEZVOUS_BYTES");
	size_t n = v ? strtoull(v, NULL, 0) : 256 << 10;
	return n ? n : SIZE_MAX;
}

static void delivery_complete_unexpected(void)
{
	static const size_t sizes[] = { 100, 100 << 10, 1 << 20 };
	size_t k;

	for (k = 0; k < 3; k++) {
		uint8_t *s = xalloc(sizes[k]), *r = xalloc(sizes[k]);
		struct fi_context2 sctx, rctx;
		struct comp c;
		int pulled = sizes[k] > rendezvous_bytes();

		fill_pattern(s, sizes[k], k + 5);
		send_msg(0, 1, s, sizes[k], &sctx, FI_DELIVERY_COMPLETE | FI_COMPLETION);
		if (pulled)
			expect_quiet(0, "before the rendezvous message was matched");
		else
			wait_ok(0, &sctx);
		POST(fi_recv(E.ep[1].ep, r, sizes[k], NULL, FI_ADDR_UNSPEC, &rctx));
		c = wait_ok(1, &rctx);
		CHECK(c.len == sizes[k], "len %zu", c.len);
		check_pattern(r, sizes[k], k + 5, pulled ? "pulled message" : "buffered message");
		if (pulled)
			wait_ok(0, &sctx);
	}
}

static void t_completion_levels(void)
{
	static const uint64_t levels[] = { FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE,
					   FI_DELIVERY_COMPLETE };
	static const size_t sizes[] = { 4000, 200 << 10 };
	size_t l, k;

	setup(NULL);
	for (l = 0; l < 3; l++) {
		for (k = 0; k < 2; k++) {
			uint8_t *s = xalloc(sizes[k]), *r = xalloc(sizes[k]);
			struct fi_context2 sctx, rctx;
			struct comp c;

			fill_pattern(s, sizes[k], l * 10 + k);
			POST(fi_recv(E.ep[1].ep, r, sizes[k], NULL, FI_ADDR_UNSPEC, &rctx));
			send_msg(0, 1, s, sizes[k], &sctx, levels[l] | FI_COMPLETION);
			c = wait_ok(0, &sctx);
			check_flags(&c, FI_SEND | FI_MSG, 0);
			c = wait_ok(1, &rctx);
			CHECK(c.len == sizes[k], "len %zu", c.len);
			check_pattern(r, sizes[k], l * 10 + k, "message");
		}
	}
	delivery_complete_unexpected();
}

/* Manual progress, receiver left alone: A's transmit-complete send needs
 * B's ACK, and only the domain's idle-progress thread progresses B (this
 * test never reads B's CQ until A's send is done). Fails with
 * FI_UET_IDLE_PROGRESS_US=0: the send then errors out. */
static void t_idle_progress(void)
{
	enum { LEN = 3000, ROUNDS = 3 };
	uint8_t *s = xalloc(LEN), *r = xalloc(LEN);
	struct fi_context2 sctx, rctx;
	struct comp c;
	int k;

	setup(NULL);
	for (k = 0; k < ROUNDS; k++) {
		fill_pattern(s, LEN, 40 + k);
		POST(fi_recv(E.ep[1].ep, r, LEN, NULL, FI_ADDR_UNSPEC, &rctx));
		send_msg(0, 1, s, LEN, &sctx, FI_TRANSMIT_COMPLETE | FI_COMPLETION);
		while (!E.ep[0].count) {
			poll_ep(0);
			if (now() > deadline)
				FAILF("round %d: send not acknowledged without the receiver "
				      "progressing", k);
		}
		c = wait_ok(0, &sctx);
		check_flags(&c, FI_SEND | FI_MSG, 0);
		c = wait_ok(1, &rctx);
		CHECK(c.len == LEN, "len %zu", c.len);
		check_pattern(r, LEN, 40 + k, "message");
	}
}

/* ------------------------------------------------------------------ */
/* CQ formats, EQ, MR, close                                           */

static void t_cq_formats(void)
{
	static const enum fi_cq_format fmts[] = { FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG,
						  FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED };
	static const char *names[] = { "CONTEXT", "MSG", "DATA", "TAGGED" };
	size_t f;

	for (f = 0; f < 4; f++) {
		struct setup_opts o = { .format = fmts[f] };
		uint8_t *s, *r;
		struct fi_context2 sctx, rctx;
		struct comp c;
		char buf[128];

		setup(&o);
		s = xalloc(777);
		r = xalloc(777);
		fill_pattern(s, 777, f);
		POST(fi_trecv(E.ep[1].ep, r, 777, NULL, FI_ADDR_UNSPEC, 0xC0 + f, 0, &rctx));
		POST(fi_tsenddata(E.ep[0].ep, s, 777, NULL, 0xDA7A + f, E.ep[0].peer[1],
				  0xC0 + f, &sctx));
		c = wait_ok(1, &rctx);
		if (fmts[f] != FI_CQ_FORMAT_CONTEXT) {
			check_flags(&c, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA, FI_SEND);
			CHECK(c.len == 777, "%s: len %zu", names[f], c.len);
		}
		if (fmts[f] == FI_CQ_FORMAT_DATA || fmts[f] == FI_CQ_FORMAT_TAGGED)
			CHECK(c.data == 0xDA7A + f, "%s: data 0x%llx", names[f],
			      (unsigned long long)c.data);
		if (fmts[f] == FI_CQ_FORMAT_TAGGED)
			CHECK(c.tag == 0xC0 + f, "tag 0x%llx", (unsigned long long)c.tag);
		c = wait_ok(0, &sctx);
		if (fmts[f] != FI_CQ_FORMAT_CONTEXT)
			check_flags(&c, FI_SEND | FI_TAGGED, FI_RECV);
		check_pattern(r, 777, f, names[f]);
		CHECK(fi_cq_strerror(E.ep[0].cq, 0, NULL, buf, sizeof buf) != NULL,
		      "fi_cq_strerror returned NULL");
		teardown();
	}
}

static void t_eq(void)
{
	/* FI_WRITE: the application may insert events with fi_eq_write. */
	struct fi_eq_attr attr = { .size = 16, .flags = FI_WRITE, .wait_obj = FI_WAIT_NONE };
	struct fi_eq_entry in, out;
	struct fid_eq *eq;
	uint32_t event;
	ssize_t n;
	int marker;

	setup(NULL);
	CHECK_RC(fi_eq_open(E.fabric, &attr, &eq, NULL));
	n = fi_eq_read(eq, &event, &out, sizeof out, 0);
	if (n != -FI_EAGAIN) {
		fi_close(&eq->fid);
		FAILF("fi_eq_read of an empty EQ returned %zd", n);
	}
	memset(&in, 0, sizeof in);
	in.fid = &E.fabric->fid;
	in.context = &marker;
	in.data = 42;
	n = fi_eq_write(eq, FI_NOTIFY, &in, sizeof in, 0);
	if (n == -FI_ENOSYS && !strict()) {
		note("fi_eq_write not supported");
	} else if (n != (ssize_t)sizeof in) {
		fi_close(&eq->fid);
		FAILF("fi_eq_write returned %zd", n);
	} else {
		memset(&out, 0, sizeof out);
		n = fi_eq_read(eq, &event, &out, sizeof out, 0);
		fi_close(&eq->fid);
		CHECK(n == (ssize_t)sizeof out, "fi_eq_read returned %zd", n);
		CHECK(event == FI_NOTIFY, "event %u", event);
		CHECK(out.context == &marker && out.data == 42, "entry differs");
		return;
	}
	CHECK_RC(fi_close(&eq->fid));
}

static void t_mr(void)
{
	uint8_t *a = xalloc(4096), *b = xalloc(8192);
	struct iovec iov[2] = { { b, 4096 }, { b + 4096, 4096 } };
	struct fid_mr *mr1, *mr2, *mr3;
	struct fi_mr_attr attr;
	struct fi_context2 sctx, rctx;
	void *desc;

	setup(NULL);
	CHECK_RC(fi_mr_reg(E.domain[0], a, 4096, FI_SEND | FI_RECV, 0, 1, 0, &mr1, NULL));
	CHECK_RC(fi_mr_regv(E.domain[0], iov, 2, FI_SEND | FI_RECV, 0, 2, 0, &mr2, NULL));
	memset(&attr, 0, sizeof attr);
	attr.mr_iov = iov;
	attr.iov_count = 1;
	attr.access = FI_SEND | FI_RECV;
	attr.requested_key = 3;
	CHECK_RC(fi_mr_regattr(E.domain[0], &attr, 0, &mr3));
	CHECK(fi_mr_key(mr1) != FI_KEY_NOTAVAIL, "fi_mr_key not available");
	(void)fi_mr_key(mr2);
	(void)fi_mr_key(mr3);
	/* A send and a receive using the descriptors. */
	fill_pattern(a, 4096, 4096);
	desc = fi_mr_desc(mr3);
	POST(fi_recv(E.ep[1].ep, b, 4096, desc, FI_ADDR_UNSPEC, &rctx));
	desc = fi_mr_desc(mr1);
	POST(fi_send(E.ep[0].ep, a, 4096, desc, E.ep[0].peer[1], &sctx));
	wait_ok(1, &rctx);
	wait_ok(0, &sctx);
	check_pattern(b, 4096, 4096, "registered buffer");
	CHECK_RC(fi_close(&mr1->fid));
	CHECK_RC(fi_close(&mr2->fid));
	CHECK_RC(fi_close(&mr3->fid));
}

/* Closing an AV or CQ that an endpoint still uses is either allowed (0) or
 * refused with -FI_EBUSY; the rest then closes normally. */
static void close_busy(struct fid *fid, const char *what, int *closed)
{
	int rc = fi_close(fid);

	CHECK(rc == 0 || rc == -FI_EBUSY, "closing %s before its endpoint: %d (%s)",
	      what, rc, fi_strerror(-rc));
	*closed = rc == 0;
	if (rc == -FI_EBUSY)
		note("closing %s before its endpoint: -FI_EBUSY", what);
}

static void t_close_order(void)
{
	int i, closed;

	setup(NULL);
	msg_exchange(0, 1, 1000, 1);
	tagged_exchange(1, 0, 1000, 2, 2);
	close_busy(&E.av[0]->fid, "the AV", &closed);
	if (closed)
		E.av[0] = NULL;
	for (i = 0; i < E.nep; i++) {
		close_busy(&E.ep[i].cq->fid, "a CQ", &closed);
		if (closed)
			E.ep[i].cq = NULL;
	}
	for (i = 0; i < E.nep; i++) {
		CHECK_RC(fi_close(&E.ep[i].ep->fid));
		E.ep[i].ep = NULL;
	}
	for (i = 0; i < E.nep; i++) {
		if (E.ep[i].cq)
			CHECK_RC(fi_close(&E.ep[i].cq->fid));
		E.ep[i].cq = NULL;
	}
	if (E.av[0])
		CHECK_RC(fi_close(&E.av[0]->fid));
	E.av[0] = NULL;
	CHECK_RC(fi_close(&E.domain[0]->fid));
	E.domain[0] = NULL;
	CHECK_RC(fi_close(&E.fabric->fid));
	E.fabric = NULL;
	/* Everything can be opened again afterwards. */
	teardown();
	setup(NULL);
	msg_exchange(0, 1, 1000, 3);
}

static void t_two_domains(void)
{
	struct setup_opts o = { .two_domains = 1 };

	setup(&o);
	CHECK(E.ep[0].dom == 0 && E.ep[1].dom == 1, "endpoints not split");
	msg_exchange(0, 1, 5000, 1);
	msg_exchange(1, 0, 70000, 2);
	tagged_exchange(0, 1, 1 << 20, 0x2D, 3);
}

static void t_big(void)
{
	const size_t len = 256UL << 20, words = len / 8;
	const uint64_t k = 0x9E3779B97F4A7C15ULL;
	uint64_t *s = xalloc(len), *r = xalloc(len);
	struct fi_context2 sctx, rctx;
	struct comp c;
	size_t i;

	setup(NULL);
	for (i = 0; i < words; i++)
		s[i] = i * k;
	memset(r, 0, len);
	POST(fi_trecv(E.ep[1].ep, r, len, NULL, FI_ADDR_UNSPEC, 0xB16, 0, &rctx));
	POST(fi_tsend(E.ep[0].ep, s, len, NULL, E.ep[0].peer[1], 0xB16, &sctx));
	c = wait_ok(1, &rctx);
	CHECK(c.len == len, "len %zu", c.len);
	CHECK(c.tag == 0xB16, "tag 0x%llx", (unsigned long long)c.tag);
	wait_ok(0, &sctx);
	for (i = 0; i < words; i++)
		if (r[i] != i * k)
			FAILF("word %zu (byte offset %zu) is 0x%llx, expected 0x%llx",
			      i, i * 8, (unsigned long long)r[i],
			      (unsigned long long)(i * k));
}

/* ------------------------------------------------------------------ */
/* Runner                                                              */

struct test {
	const char *name;
	void (*fn)(void);
	double budget; /* seconds, 0 = DEFAULT_BUDGET */
	int optional;  /* only with -b */
};

static const struct test tests[] = {
	{ "getinfo", t_getinfo, 0, 0 },
	{ "av_table", t_av_table, 0, 0 },
	{ "av_map", t_av_map, 0, 0 },
	{ "getname_too_small", t_getname, 0, 0 },
	{ "not_enabled", t_not_enabled, 0, 0 },
	{ "bad_addr", t_unknown_addr, 0, 0 },
	{ "inject_too_big", t_inject_too_big, 0, 0 },
	{ "msg_sizes", t_msg_sizes, 0, 0 },
	{ "msg_iov", t_msg_iov, 0, 0 },
	{ "msg_sendmsg_recvmsg", t_msg_sendmsg, 0, 0 },
	{ "context_high_bit", t_context_high_bit, 0, 0 },
	{ "send_more", t_send_more, 0, 0 },
	{ "senddata", t_msg_senddata, 0, 0 },
	{ "inject_and_injectdata", t_msg_inject, 0, 0 },
	{ "tagged_basic", t_tagged_basic, 0, 0 },
	{ "tag_ignore", t_tagged_ignore, 0, 0 },
	{ "directed_recv", t_directed_recv, 0, 0 },
	{ "ordering", t_tagged_order, 0, 0 },
	{ "unexpected_large", t_unexpected_large, 0, 0 },
	{ "readfrom", t_source, 0, 0 },
	{ "peek_none", t_peek_nomsg, 0, 0 },
	{ "peek_claim", t_peek_claim, 0, 0 },
	{ "peek_discard", t_peek_discard, 0, 0 },
	{ "cancel", t_cancel, 0, 0 },
	{ "truncation", t_truncate, 0, 0 },
	{ "selective_completion", t_selective_completion, 0, 0 },
	{ "completion_levels", t_completion_levels, 0, 0 },
	{ "idle_progress", t_idle_progress, 0, 0 },
	{ "cq_formats", t_cq_formats, 0, 0 },
	{ "eq", t_eq, 0, 0 },
	{ "mr", t_mr, 0, 0 },
	{ "two_domains", t_two_domains, 0, 0 },
	{ "close_order", t_close_order, 0, 0 },
	{ "big", t_big, 150, 1 },
};

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [-p provider] [-t substring] [-l] [-b] [-v]\n"
		"  -p  provider name (default uet)\n"
		"  -t  run only tests whose name contains substring\n"
		"  -l  list the tests\n"
		"  -b  include the 256 MiB test (allocates 512 MiB)\n"
		"  -v  report close errors\n",
		argv0);
}

int main(int argc, char **argv)
{
	/* static: kept across the longjmp of a failing test */
	static const char *filter;
	static int list, big, passed, failed;
	static size_t i;
	int opt;

	while ((opt = getopt(argc, argv, "p:t:lbvh")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 't': filter = optarg; break;
		case 'l': list = 1; break;
		case 'b': big = 1; break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]); return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		const struct test *t = &tests[i];

		if (list) {
			printf("%s%s\n", t->name, t->optional ? " (-b)" : "");
			continue;
		}
		if (filter && !strstr(t->name, filter))
			continue;
		if (t->optional && !big)
			continue;
		cur_test = t->name;
		memset(&E, 0, sizeof E);
		deadline = now() + (t->budget ? t->budget : DEFAULT_BUDGET);
		if (setjmp(fail_jmp) == 0) {
			t->fn();
			printf("PASS %s\n", t->name);
			passed++;
		} else {
			printf("FAIL %s: %s\n", t->name, fail_msg);
			failed++;
		}
		teardown();
	}
	if (list)
		return 0;
	printf("%d passed, %d failed\n", passed, failed);
	if (!passed && !failed) {
		fprintf(stderr, "no test matched%s%s (see -l)\n", filter ? " -t " : "",
			filter ? filter : "");
		return 2;
	}
	return failed ? 1 : 0;
}
