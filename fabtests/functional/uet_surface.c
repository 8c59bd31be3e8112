/*
 * uet_surface: functional tests of the libfabric surface beyond messaging
 * (counters, wait objects, blocking reads, fi_trywait, FI_GETWAIT, several
 * threads on one endpoint), through the public fi_* API only.
 *
 *   uet_surface [-p prov] [-t substring] [-l]
 *
 * Each test prints PASS/FAIL; the last line is "N passed, N failed".
 * Every test sets up two endpoints A and B in one domain (one AV) and
 * closes everything it opened, pass or fail.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_tagged.h>

#define API_VERSION FI_VERSION(1, 17)
/* Bound on every wait: turns a hang into a FAIL; nothing is timed. */
#define WAIT_MS 20000

static const char *prov = "uet";
static jmp_buf fail_jmp;
static char fail_msg[512];

static void fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void fail(int line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(fail_msg, sizeof fail_msg, "line %d: ", line);

	va_start(ap, fmt);
	vsnprintf(fail_msg + n, sizeof fail_msg - n, fmt, ap);
	va_end(ap);
	longjmp(fail_jmp, 1);
}

#define CHECK(cond, ...) do { if (!(cond)) fail(__LINE__, __VA_ARGS__); } while (0)
#define CHECK_RC(call) do { long rc_ = (long)(call); \
	CHECK(rc_ == 0, "%s = %ld (%s)", #call, rc_, fi_strerror((int)-rc_)); } while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What one test opened; teardown closes whatever is set. */
static struct env {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	struct fid_cntr *cntr[4];
	struct fid_eq *eq;
	fi_addr_t addr[2];
	struct fid_mr *mr[4];
	/* A second domain of the same fabric with its own AV, CQ, endpoint. */
	struct fid_domain *domain2;
	struct fid_av *av2;
	struct fid_cq *cq2;
	struct fid_ep *ep2;
	/* A copy of info a test changes (freed at teardown). */
	struct fi_info *info2;
} E;

/* Progress model the next open_domain asks for (reset by teardown). */
static enum fi_progress want_progress;
/* Capabilities beyond FI_MSG|FI_TAGGED the next open_domain asks for. */
static uint64_t want_caps;
/* MR modes the next open_domain supports. */
static int want_mr_mode;

static void teardown(void)
{
	int i;

	for (i = 0; i < 2; i++)
		if (E.ep[i])
			fi_close(&E.ep[i]->fid);
	if (E.ep2)
		fi_close(&E.ep2->fid);
	if (E.cq2)
		fi_close(&E.cq2->fid);
	if (E.av2)
		fi_close(&E.av2->fid);
	if (E.domain2)
		fi_close(&E.domain2->fid);
	/* Regions before counters: a counter bound to a region is in use. */
	for (i = 0; i < 4; i++)
		if (E.mr[i])
			fi_close(&E.mr[i]->fid);
	for (i = 0; i < 2; i++)
		if (E.cq[i])
			fi_close(&E.cq[i]->fid);
	for (i = 0; i < 4; i++)
		if (E.cntr[i])
			fi_close(&E.cntr[i]->fid);
	if (E.eq)
		fi_close(&E.eq->fid);
	if (E.av)
		fi_close(&E.av->fid);
	if (E.domain)
		fi_close(&E.domain->fid);
	if (E.fabric)
		fi_close(&E.fabric->fid);
	if (E.info)
		fi_freeinfo(E.info);
	if (E.info2)
		fi_freeinfo(E.info2);
	memset(&E, 0, sizeof E);
	want_progress = FI_PROGRESS_UNSPEC;
	want_caps = 0;
	want_mr_mode = 0;
}

static void open_domain(void)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 16 };
	int rc;

	CHECK(hints, "fi_allocinfo");
	hints->caps = FI_MSG | FI_TAGGED | want_caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->domain_attr->data_progress = want_progress;
	hints->domain_attr->mr_mode = want_mr_mode;
	rc = fi_getinfo(API_VERSION, NULL, NULL, 0, hints, &E.info);
	fi_freeinfo(hints);
	CHECK_RC(rc);
	CHECK_RC(fi_fabric(E.info->fabric_attr, &E.fabric, NULL));
	CHECK_RC(fi_domain(E.fabric, E.info, &E.domain, NULL));
	CHECK_RC(fi_av_open(E.domain, &av_attr, &E.av, NULL));
}

static struct fid_cq *open_cq(enum fi_wait_obj wait)
{
	struct fi_cq_attr attr = {
		.size = 1024, .format = FI_CQ_FORMAT_TAGGED, .wait_obj = wait,
	};
	struct fid_cq *cq;

	CHECK_RC(fi_cq_open(E.domain, &attr, &cq, NULL));
	return cq;
}

static struct fid_cntr *open_cntr(enum fi_wait_obj wait)
{
	struct fi_cntr_attr attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = wait };
	struct fid_cntr *c;

	CHECK_RC(fi_cntr_open(E.domain, &attr, &c, NULL));
	return c;
}

/* Endpoint i, bound to the AV; the caller binds CQs/counters, then enable(). */
static void open_ep(int i)
{
	CHECK_RC(fi_endpoint(E.domain, E.info, &E.ep[i], NULL));
	CHECK_RC(fi_ep_bind(E.ep[i], &E.av->fid, 0));
}

/* Enable both endpoints and insert their names into the AV. */
static void enable_both(void)
{
	int i;

	for (i = 0; i < 2; i++) {
		char name[64];
		size_t len = sizeof name;

		CHECK_RC(fi_enable(E.ep[i]));
		CHECK_RC(fi_getname(&E.ep[i]->fid, name, &len));
		CHECK(fi_av_insert(E.av, name, 1, &E.addr[i], 0, NULL) == 1, "av_insert");
	}
}

/* Both endpoints with their own CQ of wait object `wait`, not yet enabled
 * (the caller may bind more). */
static void two_eps_to_enable(enum fi_wait_obj wait)
{
	int i;

	open_domain();
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(wait);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
}

/* Both endpoints with their own CQ of wait object `wait`. */
static void two_eps(enum fi_wait_obj wait)
{
	two_eps_to_enable(wait);
	enable_both();
}

/* Retry a post while it answers -FI_EAGAIN, progressing through `cq`. */
static void post(ssize_t (*fn)(void *), void *arg, struct fid_cq *cq)
{
	double end = now_s() + WAIT_MS / 1000.0;
	ssize_t rc;

	while ((rc = fn(arg)) == -FI_EAGAIN) {
		struct fi_cq_tagged_entry e;

		CHECK(now_s() < end, "post stayed -FI_EAGAIN");
		if (cq)
			(void)fi_cq_read(cq, &e, 0);
	}
	CHECK(rc == 0, "post: %zd (%s)", rc, fi_strerror((int)-rc));
}

struct msg { int ep; void *buf; size_t len; fi_addr_t to; void *ctx; int inject; };

static ssize_t do_send(void *p)
{
	struct msg *m = p;

	if (m->inject)
		return fi_inject(E.ep[m->ep], m->buf, m->len, m->to);
	return fi_send(E.ep[m->ep], m->buf, m->len, NULL, m->to, m->ctx);
}

static ssize_t do_recv(void *p)
{
	struct msg *m = p;

	return fi_recv(E.ep[m->ep], m->buf, m->len, NULL, FI_ADDR_UNSPEC, m->ctx);
}

static void send_msg(int from, int to, void *buf, size_t len, void *ctx, int inject)
{
	struct msg m = { from, buf, len, E.addr[to], ctx, inject };

	post(do_send, &m, E.cq[from]);
}

static void recv_msg(int ep, void *buf, size_t len, void *ctx)
{
	struct msg m = { ep, buf, len, 0, ctx, 0 };

	post(do_recv, &m, E.cq[ep]);
}

/* Blocking read of one successful entry with the given context. */
/* The next entry of cq, which must be a success. */
static struct fi_cq_tagged_entry sread_any(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;
	ssize_t n = fi_cq_sread(cq, &e, 1, NULL, WAIT_MS);

	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		(void)fi_cq_readerr(cq, &err, 0);
		fail(__LINE__, "error entry: %s, context %p, flags 0x%llx", fi_strerror(err.err),
		     err.op_context, (unsigned long long)err.flags);
	}
	CHECK(n == 1, "fi_cq_sread = %zd (%s)", n, fi_strerror((int)-n));
	return e;
}

/* The next entry of cq, which must be the success of operation ctx. */
static struct fi_cq_tagged_entry sread_one(struct fid_cq *cq, void *ctx)
{
	struct fi_cq_tagged_entry e = sread_any(cq);

	CHECK(e.op_context == ctx, "context %p, want %p", e.op_context, ctx);
	return e;
}

/* The k < n for which op_context is &ctx[k], not yet marked in *seen
 * (marked now); fails the test otherwise. Entries of different operations
 * may come in any order (comp_order FI_ORDER_NONE: over several paths a
 * later message can finish first). */
static int take_ctx(const void *op_context, const int *ctx, int n, unsigned *seen,
		    const char *what)
{
	int k;

	for (k = 0; k < n; k++) {
		if (op_context == &ctx[k] && !(*seen & 1u << k)) {
			*seen |= 1u << k;
			return k;
		}
	}
	fail(__LINE__, "%s: entry for context %p, none expected", what, op_context);
}

/* Counter wait that also progresses the other side. */
static void cntr_wait(struct fid_cntr *c, uint64_t threshold)
{
	int rc = fi_cntr_wait(c, threshold, WAIT_MS);

	CHECK(rc == 0, "fi_cntr_wait(%llu) = %d (%s), value %llu",
	      (unsigned long long)threshold, rc, fi_strerror(-rc),
	      (unsigned long long)fi_cntr_read(c));
}

/* ------------------------------------------------------------------ */

static void t_cntr_ops(void)
{
	struct fid_cntr *c;

	open_domain();
	c = E.cntr[0] = open_cntr(FI_WAIT_UNSPEC);
	CHECK(fi_cntr_read(c) == 0 && fi_cntr_readerr(c) == 0, "fresh counter not zero");
	CHECK_RC(fi_cntr_add(c, 5));
	CHECK_RC(fi_cntr_add(c, 2));
	CHECK(fi_cntr_read(c) == 7, "add: %llu", (unsigned long long)fi_cntr_read(c));
	CHECK_RC(fi_cntr_set(c, 100));
	CHECK(fi_cntr_read(c) == 100, "set");
	CHECK_RC(fi_cntr_adderr(c, 3));
	CHECK(fi_cntr_readerr(c) == 3, "adderr");
	CHECK_RC(fi_cntr_seterr(c, 1));
	CHECK(fi_cntr_readerr(c) == 1, "seterr");
	CHECK(fi_cntr_read(c) == 100, "errors changed the value");
	CHECK_RC(fi_cntr_wait(c, 100, 0));
	CHECK(fi_cntr_wait(c, 101, 50) == -FI_ETIMEDOUT, "wait past value did not time out");
}

/* FI_SEND / FI_RECV counters count every operation, signalled or not;
 * the CQ still gets the signalled ones. */
static void t_cntr_msg(void)
{
	char out[8][64], in[8][64];
	int ctx[8], i, k;
	unsigned seen = 0;
	struct fi_cq_tagged_entry e;

	open_domain();
	E.cntr[0] = open_cntr(FI_WAIT_UNSPEC);	/* A sends */
	E.cntr[1] = open_cntr(FI_WAIT_UNSPEC);	/* B receives */
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(FI_WAIT_NONE);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	CHECK(fi_ep_bind(E.ep[0], &E.cntr[0]->fid, 0) == -FI_EINVAL, "bind without flags accepted");
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cntr[0]->fid, FI_SEND));
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[1]->fid, FI_RECV));
	enable_both();
	for (i = 0; i < 8; i++) {
		memset(in[i], 0, sizeof in[i]);
		recv_msg(1, in[i], sizeof in[i], &ctx[i]);
	}
	for (i = 0; i < 8; i++) {
		memset(out[i], 'a' + i, sizeof out[i]);
		send_msg(0, 1, out[i], sizeof out[i], &ctx[i], i % 2);	/* odd: inject */
	}
	cntr_wait(E.cntr[1], 8);
	cntr_wait(E.cntr[0], 8);
	CHECK(fi_cntr_readerr(E.cntr[0]) == 0 && fi_cntr_readerr(E.cntr[1]) == 0, "errors counted");
	for (i = 0; i < 8; i++)
		CHECK(in[i][0] == 'a' + i && in[i][63] == 'a' + i, "message %d data", i);
	/* The receive CQ has 8 entries, the send CQ 4 (injects report nothing),
	 * in any order (comp_order FI_ORDER_NONE: over several paths a later
	 * message can finish first). */
	for (i = 0; i < 8; i++) {
		CHECK(fi_cq_read(E.cq[1], &e, 1) == 1, "recv entry %d missing", i);
		(void)take_ctx(e.op_context, ctx, 8, &seen, "recv");
	}
	seen = 0;
	for (i = 0; i < 4; i++) {
		CHECK(fi_cq_read(E.cq[0], &e, 1) == 1, "send entry %d missing", i);
		k = take_ctx(e.op_context, ctx, 8, &seen, "send");
		CHECK(k % 2 == 0, "send entry %d: an inject (%d) reported", i, k);
	}
	CHECK(fi_cq_read(E.cq[0], &e, 1) == -FI_EAGAIN, "extra send entry");
}

/* An endpoint bound to counters only (no CQ) works; cancel reaches the
 * receive through the counter bookkeeping. */
/* Both endpoints bound to one CQ without a wait object: reading it
 * progresses both, so messages each way complete with fi_cq_read alone. */
static void t_shared_cq(void)
{
	char out[2][64], in[2][64];
	int sctx[2], rctx[2], i, seen = 0;
	double end;

	open_domain();
	E.cq[0] = open_cq(FI_WAIT_NONE);
	for (i = 0; i < 2; i++) {
		open_ep(i);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[0]->fid, FI_TRANSMIT | FI_RECV));
	}
	enable_both();
	for (i = 0; i < 2; i++) {
		struct msg r = { i, in[i], sizeof in[i], 0, &rctx[i], 0 };

		memset(in[i], 0, sizeof in[i]);
		post(do_recv, &r, E.cq[0]);
	}
	for (i = 0; i < 2; i++) {
		struct msg m = { i, out[i], sizeof out[i], E.addr[1 - i], &sctx[i], 0 };

		memset(out[i], 'a' + i, sizeof out[i]);
		post(do_send, &m, E.cq[0]);
	}
	/* Two sends and two receives, in any order. */
	end = now_s() + WAIT_MS / 1000.0;
	while (seen != 0xf) {
		struct fi_cq_tagged_entry e;
		ssize_t n = fi_cq_read(E.cq[0], &e, 1);

		CHECK(n == 1 || n == -FI_EAGAIN, "fi_cq_read = %zd (%s)", n, fi_strerror((int)-n));
		CHECK(now_s() < end, "completions seen 0x%x of 0xf", seen);
		if (n != 1)
			continue;
		for (i = 0; i < 2; i++) {
			if (e.op_context == &sctx[i])
				seen |= 1 << i;
			if (e.op_context == &rctx[i]) {
				CHECK(e.len == sizeof in[i], "receive %d: %zu bytes", i, e.len);
				seen |= 4 << i;
			}
		}
	}
	for (i = 0; i < 2; i++)
		CHECK(memcmp(in[i], out[1 - i], sizeof in[i]) == 0, "endpoint %d got wrong bytes", i);
}

/* Voluntary context switches of this process's idle-progress threads so
 * far (one per sleep, so one per wake-up; preemptions by a loaded machine
 * are not counted), -1 when there is none. */
static long progress_thread_switches(void)
{
	char path[300], line[256];
	long total = -1;
	DIR *tasks = opendir("/proc/self/task");
	struct dirent *d;

	CHECK(tasks != NULL, "cannot list /proc/self/task");
	while ((d = readdir(tasks)) != NULL) {
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", d->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(line, sizeof line, f) || strncmp(line, "uet-progress", 12) != 0) {
			fclose(f);
			continue;
		}
		fclose(f);
		snprintf(path, sizeof path, "/proc/self/task/%s/status", d->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			long n;

			if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
				total = (total < 0 ? 0 : total) + n;
		}
		fclose(f);
	}
	closedir(tasks);
	return total;
}

/* Manual progress with the idle-progress thread on (1 ms grace): while the
 * application polls its CQ, the thread sleeps instead of waking every grace
 * period to check (on a busy machine each wake-up takes a core from a
 * rank). Over 400 ms of polling it wakes about 20 times (its longest sleep
 * is 20 ms; more when the machine is loaded and the application's calls
 * stall); a thread looking every period wakes about 400 times. */
static void t_idle_thread_sleeps_while_polled(void)
{
	enum { POLL_MS = 400 };
	long before, after;
	double end;

	setenv("FI_UET_IDLE_PROGRESS_US", "1000", 1);
	open_domain();
	unsetenv("FI_UET_IDLE_PROGRESS_US");
	E.cq[0] = open_cq(FI_WAIT_NONE);
	open_ep(0);
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cq[0]->fid, FI_TRANSMIT | FI_RECV));
	CHECK_RC(fi_enable(E.ep[0]));
	/* The thread names itself once it runs. */
	end = now_s() + WAIT_MS / 1000.0;
	while ((before = progress_thread_switches()) < 0 && now_s() < end)
		usleep(1000);
	CHECK(before >= 0, "no uet-progress thread with FI_UET_IDLE_PROGRESS_US=1000");
	end = now_s() + POLL_MS / 1000.0;
	while (now_s() < end) {
		struct fi_cq_tagged_entry e;
		ssize_t n = fi_cq_read(E.cq[0], &e, 1);

		CHECK(n == -FI_EAGAIN, "fi_cq_read = %zd on an idle endpoint", n);
	}
	after = progress_thread_switches();
	CHECK(after - before < POLL_MS / 2,
	      "the idle-progress thread woke %ld times in %d ms of polling", after - before,
	      POLL_MS);
}

static void t_cntr_only(void)
{
	char out[32] = "counter only", in[32] = { 0 }, spare[32] = { 0 };
	int i, ctx;
	struct fi_cq_tagged_entry e;

	open_domain();
	for (i = 0; i < 2; i++) {
		E.cntr[2 * i] = open_cntr(FI_WAIT_UNSPEC);
		E.cntr[2 * i + 1] = open_cntr(FI_WAIT_UNSPEC);
		open_ep(i);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cntr[2 * i]->fid, FI_SEND));
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cntr[2 * i + 1]->fid, FI_RECV));
	}
	/* B also has a CQ for its receives, to see the cancel. */
	E.cq[1] = open_cq(FI_WAIT_NONE);
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cq[1]->fid, FI_RECV));
	enable_both();
	CHECK_RC(fi_recv(E.ep[1], in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL));
	CHECK_RC(fi_send(E.ep[0], out, sizeof out, NULL, E.addr[1], NULL));
	cntr_wait(E.cntr[3], 1);
	cntr_wait(E.cntr[0], 1);
	CHECK(strcmp(in, out) == 0, "data");
	CHECK(fi_cq_read(E.cq[1], &e, 1) == 1 && e.op_context == NULL, "recv entry");
	CHECK_RC(fi_recv(E.ep[1], spare, sizeof spare, NULL, FI_ADDR_UNSPEC, &ctx));
	CHECK_RC((int)fi_cancel(&E.ep[1]->fid, &ctx));
	{
		struct fi_cq_err_entry err = { 0 };
		double end = now_s() + WAIT_MS / 1000.0;
		ssize_t n;

		while ((n = fi_cq_read(E.cq[1], &e, 1)) == -FI_EAGAIN)
			CHECK(now_s() < end, "no cancel completion");
		CHECK(n == -FI_EAVAIL, "cancel: read %zd", n);
		CHECK(fi_cq_readerr(E.cq[1], &err, 0) == 1, "readerr");
		CHECK(err.err == FI_ECANCELED && err.op_context == &ctx, "cancel entry");
	}
	CHECK(fi_cntr_readerr(E.cntr[3]) == 1, "cancel not counted as an error");
}

struct waiter { struct fid_cntr *c; uint64_t threshold; int rc; };

static void *cntr_waiter(void *p)
{
	struct waiter *w = p;

	w->rc = fi_cntr_wait(w->c, w->threshold, WAIT_MS);
	return NULL;
}

/* A thread blocked in fi_cntr_wait wakes for another thread's receive. */
static void t_cntr_wait_thread(void)
{
	char out[16] = "wake up", in[16] = { 0 };
	int ctx;
	pthread_t th;
	struct waiter w;

	two_eps(FI_WAIT_NONE);
	E.cntr[0] = open_cntr(FI_WAIT_UNSPEC);
	/* Counters bind before enable: reopen B with it. */
	fi_close(&E.ep[1]->fid);
	E.ep[1] = NULL;
	open_ep(1);
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cq[1]->fid, FI_TRANSMIT | FI_RECV));
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[0]->fid, FI_RECV));
	CHECK_RC(fi_enable(E.ep[1]));
	{
		char name[64];
		size_t len = sizeof name;

		CHECK_RC(fi_getname(&E.ep[1]->fid, name, &len));
		CHECK(fi_av_insert(E.av, name, 1, &E.addr[1], 0, NULL) == 1, "av_insert");
	}
	recv_msg(1, in, sizeof in, &ctx);
	w = (struct waiter){ E.cntr[0], 1, -1 };
	CHECK(pthread_create(&th, NULL, cntr_waiter, &w) == 0, "pthread_create");
	send_msg(0, 1, out, sizeof out, &ctx, 0);
	pthread_join(th, NULL);
	CHECK(w.rc == 0, "waiter: %d (%s)", w.rc, fi_strerror(-w.rc));
	CHECK(strcmp(in, out) == 0, "data");
	/* The sender's CQ entry is still there (progress by the other thread). */
	(void)sread_one(E.cq[0], &ctx);
}

/* fi_cq_sread on a FI_WAIT_FD CQ: times out empty, returns data. */
static void t_cq_sread(void)
{
	char out[100], in[100];
	int sctx, rctx;
	struct fi_cq_tagged_entry e;
	ssize_t n;

	two_eps(FI_WAIT_FD);
	n = fi_cq_sread(E.cq[1], &e, 1, NULL, 30);
	CHECK(n == -FI_EAGAIN, "empty sread = %zd", n);
	memset(out, 7, sizeof out);
	recv_msg(1, in, sizeof in, &rctx);
	send_msg(0, 1, out, sizeof out, &sctx, 0);
	e = sread_one(E.cq[1], &rctx);
	CHECK(e.len == sizeof out && memcmp(in, out, sizeof out) == 0, "data");
	{
		fi_addr_t src = 0;

		(void)src;
		e = sread_one(E.cq[0], &sctx);
		CHECK(e.flags & FI_SEND, "send flags");
	}
	/* fi_cq_signal wakes a blocked reader without an entry. */
	CHECK_RC(fi_cq_signal(E.cq[1]));
	n = fi_cq_sread(E.cq[1], &e, 1, NULL, -1);
	CHECK(n == -FI_EAGAIN, "signalled sread = %zd", n);
}

/* The inject size fi_getinfo offers with FI_UET_INJECT_SIZE = `text`. */
static size_t offered_inject_size(const char *text)
{
	const char *was = getenv("FI_UET_INJECT_SIZE");
	char *saved = was ? strdup(was) : NULL;
	size_t size;

	setenv("FI_UET_INJECT_SIZE", text, 1);
	open_domain();
	size = E.info->tx_attr->inject_size;
	teardown();
	/* The caller's own setting goes back for the tests after this one. */
	if (saved)
		setenv("FI_UET_INJECT_SIZE", saved, 1);
	else
		unsetenv("FI_UET_INJECT_SIZE");
	free(saved);
	return size;
}

/* An integer parameter libfabric would misread (it stops at the first
 * character strtol cannot use: "abc" would be 0, "2k" 2) keeps its
 * default, with a warning; what strtol reads whole is taken. */
static void t_int_param_misread(void)
{
	static const struct {
		const char *text;
		size_t size;
	} cases[] = {
		{ "100", 100 }, { " 0x100 ", 256 }, { "abc", 4096 }, { "2k", 4096 },
		{ "99999999999", 4096 },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t got = offered_inject_size(cases[i].text);

		CHECK(got == cases[i].size, "FI_UET_INJECT_SIZE=\"%s\": inject_size %zu, not %zu",
		      cases[i].text, got, cases[i].size);
	}
}

/* Times the calling thread went to sleep (voluntary context switches;
 * yielding the CPU while runnable is not one). */
static long thread_sleeps(void)
{
	struct rusage ru;

	CHECK(getrusage(RUSAGE_THREAD, &ru) == 0, "getrusage: %s", strerror(errno));
	return ru.ru_nvcsw;
}

/* Voluntary context switches of one 200 ms blocking wait that nothing
 * ends (fi_cq_sread on an empty CQ, or fi_cntr_wait for a count nothing
 * reaches) on objects with wait object `wait`, with FI_UET_WAIT_SPIN_US =
 * `spin_us` (and no idle-progress thread). */
static long idle_wait_sleeps(const char *spin_us, int counter, enum fi_wait_obj wait)
{
	struct fi_cq_tagged_entry e;
	long before;
	ssize_t n;

	setenv("FI_UET_WAIT_SPIN_US", spin_us, 1);
	setenv("FI_UET_IDLE_PROGRESS_US", "0", 1);
	two_eps_to_enable(wait);
	unsetenv("FI_UET_WAIT_SPIN_US");
	unsetenv("FI_UET_IDLE_PROGRESS_US");
	if (counter) {
		/* Bound, so the wait progresses an endpoint as it would in use. */
		E.cntr[0] = open_cntr(wait);
		CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[0]->fid, FI_RECV));
	}
	enable_both();
	before = thread_sleeps();
	if (counter) {
		n = fi_cntr_wait(E.cntr[0], 1, 200);
		CHECK(n == -FI_ETIMEDOUT, "fi_cntr_wait on an idle counter = %zd", n);
	} else {
		n = fi_cq_sread(E.cq[1], &e, 1, NULL, 200);
		CHECK(n == -FI_EAGAIN, "empty sread = %zd", n);
	}
	n = thread_sleeps() - before;
	teardown();
	return n;
}

/* FI_UET_WAIT_SPIN_US: a blocking wait polls that long before it sleeps.
 * Without the spin, 200 ms of waiting take about ten sleeps (none lasts
 * over 20 ms; five, at least, under valgrind); with a spin longer than the
 * wait, the thread keeps polling (a scheduler or valgrind may still park
 * it now and then). The same for fi_cq_sread and fi_cntr_wait, and for
 * objects opened with FI_WAIT_YIELD, which poll however short the spin,
 * as libfabric defines that wait object. A sleep
 * that runs out (the 20 ms bound) does not start the spin again: with a
 * 50 ms spin, the 150 ms left take about eight sleeps (three if each were
 * followed by 50 ms of polling). */
static void t_wait_spins_before_sleeping(void)
{
	long once;

	for (int counter = 0; counter < 2; counter++) {
		const char *what = counter ? "fi_cntr_wait" : "fi_cq_sread";
		long sleeping = idle_wait_sleeps("0", counter, FI_WAIT_FD);
		long spinning = idle_wait_sleeps("10000000", counter, FI_WAIT_FD);
		long yielding = idle_wait_sleeps("0", counter, FI_WAIT_YIELD);

		CHECK(sleeping >= 5, "a 200 ms %s without spin slept only %ld times", what,
		      sleeping);
		CHECK(spinning * 2 < sleeping,
		      "a 200 ms %s inside a 10 s spin slept %ld times (%ld without spin)", what,
		      spinning, sleeping);
		CHECK(yielding * 2 < sleeping,
		      "a 200 ms %s on FI_WAIT_YIELD objects slept %ld times (%ld on FI_WAIT_FD)",
		      what, yielding, sleeping);
	}
	once = idle_wait_sleeps("50000", 0, FI_WAIT_FD);
	CHECK(once >= 5, "a 200 ms fi_cq_sread with a 50 ms spin slept only %ld times", once);
}

/* FI_GETWAIT + fi_trywait + poll(2): the fd becomes readable for a message. */
static void t_cq_getwait(void)
{
	char out[64] = "poll me", in[64] = { 0 };
	int fd = -1, rctx, sctx, rc;
	struct fid *fids[1];
	struct fi_cq_tagged_entry e;
	double end;

	two_eps(FI_WAIT_FD);
	CHECK_RC(fi_control(&E.cq[1]->fid, FI_GETWAIT, &fd));
	CHECK(fd >= 0, "fd %d", fd);
	fids[0] = &E.cq[1]->fid;
	recv_msg(1, in, sizeof in, &rctx);
	CHECK_RC(fi_trywait(E.fabric, fids, 1));
	send_msg(0, 1, out, sizeof out, &sctx, 0);
	end = now_s() + WAIT_MS / 1000.0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		CHECK(now_s() < end, "no completion through the wait fd");
		rc = fi_trywait(E.fabric, fids, 1);
		if (rc == -FI_EAGAIN) {
			ssize_t n = fi_cq_read(E.cq[1], &e, 1);

			if (n == 1)
				break;
			continue;
		}
		CHECK(rc == 0, "trywait %d", rc);
		rc = poll(&p, 1, 1000);
		CHECK(rc >= 0, "poll: %s", strerror(errno));
		if (rc > 0) {
			ssize_t n = fi_cq_read(E.cq[1], &e, 1);

			if (n == 1)
				break;
		}
	}
	CHECK(e.op_context == &rctx && strcmp(in, out) == 0, "entry/data");
	(void)sread_one(E.cq[0], &sctx);
	/* Nothing left: trywait says the application may sleep. */
	CHECK_RC(fi_trywait(E.fabric, fids, 1));
}

static struct fi_cq_err_entry wait_entry(int i, void *ctx, int want_err);

/* Poll the FI_GETWAIT fd `fd` of B's CQ (E.cq[1]) until it is readable,
 * progressing only A (E.cq[0]): nothing else reads B's socket. */
static void wait_fd_readable(int fd, const char *what)
{
	double end = now_s() + WAIT_MS / 1000.0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int rc;

		CHECK(now_s() < end, "%s: the wait fd never became readable", what);
		(void)fi_cq_read(E.cq[0], NULL, 0);
		rc = poll(&p, 1, 1);
		CHECK(rc >= 0, "poll: %s", strerror(errno));
		if (rc > 0)
			return;
	}
}

/* The FI_GETWAIT fd watches the endpoints bound now, not those bound when
 * it was handed out: one bound afterwards, and one whose sockets took the
 * descriptor numbers of a closed one. */
static void t_cq_getwait_rebound(void)
{
	char out[32] = "wake me", in[32];
	struct fid *fids[1];
	int fd = -1, round, rctx, sctx;

	/* No idle progress: only the application reads B's socket. */
	setenv("FI_UET_IDLE_PROGRESS_US", "0", 1);
	open_domain();
	unsetenv("FI_UET_IDLE_PROGRESS_US");
	E.cq[0] = open_cq(FI_WAIT_NONE);
	E.cq[1] = open_cq(FI_WAIT_FD);
	CHECK_RC(fi_control(&E.cq[1]->fid, FI_GETWAIT, &fd));
	fids[0] = &E.cq[1]->fid;
	open_ep(0);
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cq[0]->fid, FI_TRANSMIT | FI_RECV));
	for (round = 0; round < 2; round++) {
		char name[64];
		size_t len = sizeof name;
		fi_addr_t b;

		if (round) {
			CHECK_RC(fi_close(&E.ep[1]->fid));
			E.ep[1] = NULL;
		}
		open_ep(1);
		CHECK_RC(fi_ep_bind(E.ep[1], &E.cq[1]->fid, FI_TRANSMIT | FI_RECV));
		CHECK_RC(fi_enable(E.ep[1]));
		if (!round)
			CHECK_RC(fi_enable(E.ep[0]));
		CHECK_RC(fi_getname(&E.ep[1]->fid, name, &len));
		CHECK(fi_av_insert(E.av, name, 1, &b, 0, NULL) == 1, "av_insert");
		memset(in, 0, sizeof in);
		CHECK_RC(fi_recv(E.ep[1], in, sizeof in, NULL, FI_ADDR_UNSPEC, &rctx));
		CHECK_RC(fi_trywait(E.fabric, fids, 1));
		CHECK_RC(fi_send(E.ep[0], out, sizeof out, NULL, b, &sctx));
		wait_fd_readable(fd, round ? "endpoint opened after a close"
				     : "endpoint bound after FI_GETWAIT");
		(void)sread_one(E.cq[1], &rctx);
		CHECK(strcmp(in, out) == 0, "round %d data", round);
		(void)wait_entry(0, &sctx, 0);
	}
}

/* EQ with FI_WAIT_FD: sread sleeps until another thread's fi_eq_write. */
struct eq_writer { struct fid_eq *eq; };

static void *eq_write_later(void *p)
{
	struct eq_writer *w = p;
	int v = 42;

	usleep(20000);
	fi_eq_write(w->eq, FI_NOTIFY, &v, sizeof v, 0);
	return NULL;
}

static void t_eq_wait(void)
{
	struct fi_eq_attr attr = { .size = 16, .wait_obj = FI_WAIT_FD };
	struct fid *fids[1];
	uint32_t event = 0;
	int buf = 0, fd = -1;
	pthread_t th;
	struct eq_writer w;
	ssize_t n;

	open_domain();
	CHECK_RC(fi_eq_open(E.fabric, &attr, &E.eq, NULL));
	CHECK_RC(fi_control(&E.eq->fid, FI_GETWAIT, &fd));
	CHECK(fd >= 0, "fd");
	fids[0] = &E.eq->fid;
	CHECK_RC(fi_trywait(E.fabric, fids, 1));
	CHECK(fi_eq_sread(E.eq, &event, &buf, sizeof buf, 20, 0) == -FI_EAGAIN, "empty sread");
	w.eq = E.eq;
	CHECK(pthread_create(&th, NULL, eq_write_later, &w) == 0, "pthread_create");
	n = fi_eq_sread(E.eq, &event, &buf, sizeof buf, WAIT_MS, 0);
	pthread_join(th, NULL);
	CHECK(n == sizeof buf && event == FI_NOTIFY && buf == 42, "sread = %zd", n);
}

/* Several threads post and poll on one endpoint pair (FI_THREAD_SAFE). */
#define THREADS 4
#define PER_THREAD 200

struct worker { int id; int rc; };

static void *pingpong_worker(void *p)
{
	struct worker *w = p;
	int i;

	for (i = 0; i < PER_THREAD; i++) {
		uint64_t tag = ((uint64_t)w->id << 32) | i, got = ~0ULL;
		uint64_t val = tag * 3;
		struct fi_cq_tagged_entry e;
		ssize_t rc;
		double end = now_s() + WAIT_MS / 1000.0;

		while ((rc = fi_trecv(E.ep[1], &got, sizeof got, NULL, FI_ADDR_UNSPEC,
				      tag, 0, &got)) == -FI_EAGAIN)
			;
		if (rc) { w->rc = __LINE__; return NULL; }
		while ((rc = fi_tsend(E.ep[0], &val, sizeof val, NULL, E.addr[1],
				      tag, &val)) == -FI_EAGAIN)
			;
		if (rc) { w->rc = __LINE__; return NULL; }
		/* Entries are read by whichever thread polls; watch the data
		 * (placed by any thread's progress) instead. */
		while (__atomic_load_n(&got, __ATOMIC_ACQUIRE) != val) {
			if (now_s() > end) { w->rc = __LINE__; return NULL; }
			(void)fi_cq_read(E.cq[0], &e, 1);
			(void)fi_cq_read(E.cq[1], &e, 1);
		}
	}
	w->rc = 0;
	return NULL;
}

static void t_threads(void)
{
	pthread_t th[THREADS];
	struct worker w[THREADS];
	int i;

	two_eps(FI_WAIT_NONE);
	CHECK(E.info->domain_attr->threading == FI_THREAD_SAFE, "threading not FI_THREAD_SAFE");
	for (i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ i, -1 };
		CHECK(pthread_create(&th[i], NULL, pingpong_worker, &w[i]) == 0, "pthread_create");
	}
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < THREADS; i++)
		CHECK(w[i].rc == 0, "worker %d failed at line %d", i, w[i].rc);
}

/* FI_PROGRESS_AUTO: data moves while the application makes no fi_* call. */
static void t_auto_progress(void)
{
	static char out[200000], in[200000];
	int sctx, rctx;
	size_t i;
	double end;
	struct fi_cq_tagged_entry e;

	want_progress = FI_PROGRESS_AUTO;
	two_eps(FI_WAIT_UNSPEC);
	CHECK(E.info->domain_attr->data_progress == FI_PROGRESS_AUTO, "progress not AUTO");
	memset(out, 0x5a, sizeof out);
	memset(in, 0, sizeof in);
	recv_msg(1, in, sizeof in, &rctx);
	send_msg(0, 1, out, sizeof out, &sctx, 0);
	end = now_s() + WAIT_MS / 1000.0;
	/* Every byte: over several paths the last packet can come first. */
	for (i = 0; i < sizeof in; i++) {
		while (__atomic_load_n(&in[i], __ATOMIC_ACQUIRE) != 0x5a) {
			CHECK(now_s() < end, "data did not arrive without application progress");
			usleep(1000);
		}
	}
	/* Completions were queued by the thread: a plain read finds them. */
	end = now_s() + WAIT_MS / 1000.0;
	while (fi_cq_read(E.cq[1], &e, 1) != 1)
		CHECK(now_s() < end, "receive completion missing");
	CHECK(e.op_context == &rctx, "context");
	(void)sread_one(E.cq[0], &sctx);
}

/* FI_MULTI_RECV: messages land back to back in one buffer; once one leaves
 * less than FI_OPT_MIN_MULTI_RECV, the buffer's last entry carries
 * FI_MULTI_RECV (buffer released). */
static void t_multi_recv(void)
{
	static char big[1000], second[1000], out[4][300];
	size_t min = 200, got_min = 0, len = sizeof got_min;
	struct iovec iov = { big, sizeof big };
	struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC };
	int mctx, mctx2, sctx[4], i, in_big;
	unsigned seen;

	want_caps = FI_MULTI_RECV;
	two_eps(FI_WAIT_UNSPEC);
	CHECK(E.info->caps & FI_MULTI_RECV, "FI_MULTI_RECV not granted");
	CHECK_RC(fi_setopt(&E.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min));
	CHECK_RC(fi_getopt(&E.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got_min, &len));
	CHECK(got_min == 200 && len == sizeof got_min, "getopt %zu", got_min);
	msg.context = &mctx;
	CHECK_RC(fi_recvmsg(E.ep[1], &msg, FI_MULTI_RECV));
	iov.iov_base = second;
	msg.context = &mctx2;
	CHECK_RC(fi_recvmsg(E.ep[1], &msg, FI_MULTI_RECV));
	for (i = 0; i < 4; i++) {
		memset(out[i], 'A' + i, sizeof out[i]);
		send_msg(0, 1, out[i], sizeof out[i], &sctx[i], 0);
	}
	/* Message k lands where the matching order puts it, the first three in
	 * big and the fourth in second; their entries may come in any order
	 * (comp_order FI_ORDER_NONE: over several paths a later message can
	 * finish first), and the last of big's carries FI_MULTI_RECV. */
	for (i = 0, seen = 0, in_big = 0; i < 4; i++) {
		struct fi_cq_tagged_entry e = sread_any(E.cq[1]);
		int k;
		char *want;

		CHECK(e.op_context == &mctx || e.op_context == &mctx2, "entry %d context", i);
		k = e.op_context == &mctx2 ? 3 : (int)(((char *)e.buf - big) / 300);
		want = k < 3 ? big + 300 * k : second;
		CHECK(k >= 0 && k < 4 && !(seen & 1u << k), "entry %d at %p", i, e.buf);
		seen |= 1u << k;
		in_big += k < 3;
		CHECK(e.len == 300, "entry %d len %zu", i, e.len);
		CHECK(e.buf == want, "entry %d at %p, want %p", i, e.buf, (void *)want);
		CHECK(memcmp(want, out[k], 300) == 0, "entry %d data", i);
		CHECK(e.flags & FI_RECV, "entry %d flags", i);
		CHECK(!!(e.flags & FI_MULTI_RECV) == (k < 3 && in_big == 3),
		      "entry %d FI_MULTI_RECV flag %d", i, !!(e.flags & FI_MULTI_RECV));
	}
	for (i = 0, seen = 0; i < 4; i++)
		(void)take_ctx(sread_any(E.cq[0]).op_context, sctx, 4, &seen, "send");
	/* The second buffer is still posted: cancel releases it. */
	CHECK_RC((int)fi_cancel(&E.ep[1]->fid, &mctx2));
	{
		struct fi_cq_tagged_entry e;
		struct fi_cq_err_entry err = { 0 };
		ssize_t n = fi_cq_sread(E.cq[1], &e, 1, NULL, WAIT_MS);

		CHECK(n == -FI_EAVAIL, "cancel read %zd", n);
		CHECK(fi_cq_readerr(E.cq[1], &err, 0) == 1, "readerr");
		CHECK(err.err == FI_ECANCELED && err.op_context == &mctx2, "cancel entry");
		CHECK(err.flags & FI_MULTI_RECV, "cancelled buffer not released");
	}
	/* Messages that arrived first (unexpected) fill a buffer posted later. */
	for (i = 0; i < 2; i++) {
		memset(out[i], 'a' + i, sizeof out[i]);
		send_msg(0, 1, out[i], sizeof out[i], &sctx[i], 0);
	}
	/* Transmit complete = B's transport holds them: progress both sides. */
	{
		double end = now_s() + WAIT_MS / 1000.0;
		struct fi_cq_tagged_entry e;

		for (i = 0; i < 2;) {
			CHECK(now_s() < end, "sends did not complete");
			CHECK(fi_cq_read(E.cq[1], &e, 1) == -FI_EAGAIN, "B has an entry");
			if (fi_cq_read(E.cq[0], &e, 1) == 1) {
				CHECK(e.op_context == &sctx[i], "send %d context", i);
				i++;
			}
		}
	}
	memset(big, 0, sizeof big);
	iov.iov_base = big;
	msg.context = &mctx;
	CHECK_RC(fi_recvmsg(E.ep[1], &msg, FI_MULTI_RECV));
	for (i = 0; i < 2; i++) {
		struct fi_cq_tagged_entry e = sread_one(E.cq[1], &mctx);

		CHECK(e.len == 300 && e.buf == big + 300 * i, "unexpected %d: len %zu at %p",
		      i, e.len, e.buf);
		CHECK(memcmp(big + 300 * i, out[i], 300) == 0, "unexpected %d data", i);
		CHECK(!(e.flags & FI_MULTI_RECV), "released early");
	}
	CHECK_RC((int)fi_cancel(&E.ep[1]->fid, &mctx));
}

/* Operations that asked for no completion (FI_SELECTIVE_COMPLETION without
 * FI_COMPLETION, the inject calls) still report failure (fi_cq(3)): sends
 * and writes to a peer that never answers end in FI_EIO entries. Those
 * without a context of their own carry the endpoint's (fi_endpoint(3)). */
static void t_unsignalled_errors(void)
{
	static char buf[100];
	struct iovec iov = { buf, sizeof buf };
	struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1 };
	struct fi_rma_iov rma = { 0, sizeof buf, 7 };
	struct fi_msg_rma wmsg = { .msg_iov = &iov, .iov_count = 1, .rma_iov = &rma,
		.rma_iov_count = 1 };
	struct sockaddr_storage dead_name;
	socklen_t dead_len = sizeof dead_name;
	int epctx, c_send, c_sendmsg, c_write, c_writemsg, sock, i;
	void *want[6] = { &c_send, &c_sendmsg, &c_write, &c_writemsg, &epctx, &epctx };
	int got[6] = { 0 };
	fi_addr_t dead;
	double end;

	/* Few retries: the peer is given up on soon. */
	setenv("FI_UET_MAX_RETRIES", "3", 1);
	want_caps = FI_RMA;
	open_domain();
	unsetenv("FI_UET_MAX_RETRIES");
	CHECK_RC(fi_endpoint(E.domain, E.info, &E.ep[0], &epctx));
	CHECK_RC(fi_ep_bind(E.ep[0], &E.av->fid, 0));
	E.cq[0] = open_cq(FI_WAIT_NONE);
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cq[0]->fid,
			    FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION));
	CHECK_RC(fi_enable(E.ep[0]));
	/* A port nobody listens on. */
	{
		char name[64];
		size_t len = sizeof name;

		CHECK_RC(fi_getname(&E.ep[0]->fid, name, &len));
		sock = socket(AF_INET, SOCK_DGRAM, 0);
		CHECK(sock >= 0, "socket");
		memcpy(&dead_name, name, len);
		((struct sockaddr_in *)&dead_name)->sin_port = 0;
		CHECK(bind(sock, (struct sockaddr *)&dead_name, sizeof(struct sockaddr_in)) == 0 &&
		      getsockname(sock, (struct sockaddr *)&dead_name, &dead_len) == 0, "bind");
		close(sock);
	}
	CHECK(fi_av_insert(E.av, &dead_name, 1, &dead, 0, NULL) == 1, "av_insert");
	msg.addr = wmsg.addr = dead;
	CHECK_RC(fi_send(E.ep[0], buf, sizeof buf, NULL, dead, &c_send));
	msg.context = &c_sendmsg;
	CHECK_RC(fi_sendmsg(E.ep[0], &msg, FI_COMPLETION));
	CHECK_RC(fi_write(E.ep[0], buf, sizeof buf, NULL, dead, 0, 7, &c_write));
	CHECK_RC(fi_inject(E.ep[0], buf, sizeof buf, dead));
	CHECK_RC(fi_inject_write(E.ep[0], buf, sizeof buf, dead, 0, 7));
	wmsg.context = &c_writemsg;
	CHECK_RC(fi_writemsg(E.ep[0], &wmsg, 0));
	end = now_s() + WAIT_MS / 1000.0;
	for (i = 0; i < 6;) {
		struct fi_cq_tagged_entry e;
		struct fi_cq_err_entry err = { 0 };
		ssize_t n = fi_cq_read(E.cq[0], &e, 1);
		int k;

		CHECK(now_s() < end, "%d of 6 error entries", i);
		CHECK(n == -FI_EAGAIN || n == -FI_EAVAIL, "read %zd: a success entry", n);
		if (n == -FI_EAGAIN)
			continue;
		CHECK(fi_cq_readerr(E.cq[0], &err, 0) == 1, "readerr");
		CHECK(err.err == FI_EIO, "error %d (%s)", err.err, fi_strerror(err.err));
		for (k = 0; k < 6 && !(want[k] == err.op_context && !got[k]); k++)
			;
		CHECK(k < 6, "unexpected error context %p", err.op_context);
		got[k] = 1;
		i++;
	}
}

/* FI_SOURCE_ERR: a message from a sender missing from the AV is an error
 * entry FI_EADDRNOTAVAIL whose err_data is the sender's address. */
static void t_source_err(void)
{
	char out[32] = "who am I", in[32] = { 0 }, name[64];
	size_t namelen = sizeof name;
	struct fi_cq_err_entry err = { 0 };
	struct fi_cq_tagged_entry e;
	fi_addr_t back = FI_ADDR_NOTAVAIL;
	int rctx, sctx;
	ssize_t n;

	want_caps = FI_SOURCE | FI_SOURCE_ERR;
	two_eps(FI_WAIT_UNSPEC);
	CHECK((E.info->caps & FI_SOURCE_ERR) == FI_SOURCE_ERR, "FI_SOURCE_ERR not granted");
	CHECK_RC(fi_getname(&E.ep[0]->fid, name, &namelen));
	CHECK_RC(fi_av_remove(E.av, &E.addr[0], 1, 0));
	recv_msg(1, in, sizeof in, &rctx);
	send_msg(0, 1, out, sizeof out, &sctx, 0);
	n = fi_cq_sread(E.cq[1], &e, 1, NULL, WAIT_MS);
	CHECK(n == -FI_EAVAIL, "read %zd, want -FI_EAVAIL", n);
	CHECK(fi_cq_readerr(E.cq[1], &err, 0) == 1, "readerr");
	CHECK(err.err == FI_EADDRNOTAVAIL, "err %d", err.err);
	CHECK(err.op_context == &rctx && err.len == sizeof out, "context/len");
	CHECK(strcmp(in, out) == 0, "data not delivered");
	CHECK(err.err_data && err.err_data_size == namelen &&
	      memcmp(err.err_data, name, namelen) == 0, "err_data is not the sender's address");
	CHECK(fi_av_insert(E.av, err.err_data, 1, &back, 0, NULL) == 1, "re-insert");
	/* Known again: the next message reads normally with its source. */
	recv_msg(1, in, sizeof in, &rctx);
	send_msg(0, 1, out, sizeof out, &sctx, 0);
	{
		fi_addr_t src = FI_ADDR_NOTAVAIL;

		n = fi_cq_sreadfrom(E.cq[1], &e, 1, &src, NULL, WAIT_MS);
		CHECK(n == 1 && src == back, "readfrom %zd src %llu", n, (unsigned long long)src);
	}
}

/* Wait for an entry with `ctx` on endpoint i's CQ while progressing the
 * other endpoint; returns the entry, or the error entry when `err` is set. */
/* Endpoint i's next entry, whatever its operation (an error one only
 * with want_err), while progressing the other. */
static struct fi_cq_err_entry wait_any_entry(int i, int want_err)
{
	double end = now_s() + WAIT_MS / 1000.0;
	struct fi_cq_err_entry out = { 0 };

	for (;;) {
		struct fi_cq_tagged_entry e;
		ssize_t n;

		CHECK(now_s() < end, "no completion on endpoint %d", i);
		(void)fi_cq_read(E.cq[1 - i], NULL, 0);
		n = fi_cq_read(E.cq[i], &e, 1);
		if (n == -FI_EAGAIN)
			continue;
		if (n == -FI_EAVAIL) {
			CHECK(fi_cq_readerr(E.cq[i], &out, 0) == 1, "readerr");
			CHECK(want_err, "error entry %d (%s)", out.err, fi_strerror(out.err));
			return out;
		}
		CHECK(n == 1, "read %zd", n);
		CHECK(!want_err, "success where an error was expected");
		out.op_context = e.op_context;
		out.flags = e.flags;
		out.len = e.len;
		out.buf = e.buf;
		out.data = e.data;
		return out;
	}
}

static struct fi_cq_err_entry wait_entry(int i, void *ctx, int want_err)
{
	struct fi_cq_err_entry out = wait_any_entry(i, want_err);

	CHECK(out.op_context == ctx, "%s context %p, want %p", want_err ? "error" : "entry",
	      out.op_context, ctx);
	return out;
}

/* FI_MULTI_RECV among the endpoint's receive op flags makes plain fi_recv
 * buffers multi-receive buffers; tagged receives, which cannot be, are
 * left alone by it. */
static void t_multi_recv_op_flag(void)
{
	static char big[1000], out[2][100];
	uint64_t tagged = 0, mark = 0x99;
	int mctx, tctx, sctx[3], i;
	unsigned seen = 0;

	want_caps = FI_MULTI_RECV;
	open_domain();
	E.info->rx_attr->op_flags |= FI_MULTI_RECV;
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(FI_WAIT_UNSPEC);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	enable_both();
	CHECK_RC(fi_trecv(E.ep[1], &tagged, sizeof tagged, NULL, FI_ADDR_UNSPEC, 9, 0, &tctx));
	CHECK_RC(fi_recv(E.ep[1], big, sizeof big, NULL, FI_ADDR_UNSPEC, &mctx));
	CHECK_RC(fi_tsend(E.ep[0], &mark, sizeof mark, NULL, E.addr[1], 9, &sctx[2]));
	(void)wait_entry(1, &tctx, 0);
	CHECK(tagged == mark, "tagged data");
	for (i = 0; i < 2; i++) {
		memset(out[i], 'k' + i, sizeof out[i]);
		send_msg(0, 1, out[i], sizeof out[i], &sctx[i], 0);
	}
	/* Pieces in matching order, entries in any. */
	for (i = 0; i < 2; i++) {
		struct fi_cq_err_entry e = wait_entry(1, &mctx, 0);
		int k = (int)(((char *)e.buf - big) / 100);

		CHECK(e.len == 100 && (k == 0 || k == 1) && !(seen & 1u << k) &&
		      e.buf == big + 100 * k, "piece %d: len %zu at %p", i, e.len, e.buf);
		seen |= 1u << k;
		CHECK(memcmp(big + 100 * k, out[k], 100) == 0, "piece %d data", k);
	}
	CHECK_RC((int)fi_cancel(&E.ep[1]->fid, &mctx));
}

/* Read B's next entry (success or error) while progressing A; 0 when B has
 * none yet. */
static int read_b(struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *err)
{
	ssize_t n;

	(void)fi_cq_read(E.cq[0], NULL, 0);
	n = fi_cq_read(E.cq[1], e, 1);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		memset(err, 0, sizeof *err);
		CHECK(fi_cq_readerr(E.cq[1], err, 0) == 1, "readerr");
		return -1;
	}
	CHECK(n == 1, "read %zd", n);
	return 1;
}

/* fi_cancel of an FI_MULTI_RECV buffer while a message is still landing in
 * it (a rendezvous send being pulled into its piece): the cancel entry
 * comes, but the buffer is released (FI_MULTI_RECV) only with the last of
 * its entries, once the message is all there, and every entry carries the
 * buffer's context. */
static void t_multi_recv_cancel_landing(void)
{
	static char out[1 << 20], big[2 << 20];
	struct iovec iov = { big, sizeof big };
	struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC };
	uint64_t mark = 0x77, got = 0;
	int mctx, sctx, tctx, pctx, rctx, msgs = 0, cancels = 0, releases = 0, sends = 0;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	double end;
	size_t i;

	want_caps = FI_MULTI_RECV;
	two_eps(FI_WAIT_UNSPEC);
	for (i = 0; i < sizeof out; i++)
		out[i] = (char)(i * 7 + 1);
	send_msg(0, 1, out, sizeof out, &sctx, 0);
	CHECK_RC(fi_tsend(E.ep[0], &mark, sizeof mark, NULL, E.addr[1], 0x77, &tctx));
	/* Messages match in the sender's order: once B can peek at the tagged
	 * one, the large one waits there unexpected. */
	end = now_s() + WAIT_MS / 1000.0;
	for (;;) {
		struct fi_msg_tagged peek = {
			.addr = FI_ADDR_UNSPEC, .tag = 0x77, .context = &pctx,
		};
		int r;

		CHECK(now_s() < end, "the tagged message never became visible");
		CHECK_RC(fi_trecvmsg(E.ep[1], &peek, FI_PEEK));
		while ((r = read_b(&e, &err)) == 0)
			CHECK(now_s() < end, "no answer to FI_PEEK");
		if (r == 1)
			break;
		CHECK(err.err == FI_ENOMSG, "peek error %d", err.err);
	}
	msg.context = &mctx;
	CHECK_RC(fi_recvmsg(E.ep[1], &msg, FI_MULTI_RECV));
	CHECK_RC((int)fi_cancel(&E.ep[1]->fid, &mctx));
	end = now_s() + WAIT_MS / 1000.0;
	while (msgs + cancels < 2) {
		int r = read_b(&e, &err);
		uint64_t flags = r == 1 ? e.flags : err.flags;

		CHECK(now_s() < end, "message %d, cancel %d entries", msgs, cancels);
		if (r == 0)
			continue;
		if (r == 1) {
			CHECK(e.op_context == &mctx, "message entry context %p, want %p",
			      e.op_context, (void *)&mctx);
			CHECK(e.len == sizeof out && e.buf == big, "message len %zu at %p",
			      e.len, e.buf);
			msgs++;
		} else {
			CHECK(err.err == FI_ECANCELED && err.op_context == &mctx,
			      "error %d context %p", err.err, err.op_context);
			cancels++;
		}
		if (flags & FI_MULTI_RECV) {
			releases++;
			CHECK(memcmp(big, out, sizeof out) == 0,
			      "buffer released before its message landed");
		}
	}
	CHECK(msgs == 1 && cancels == 1 && releases == 1,
	      "%d message, %d cancel, %d release entries", msgs, cancels, releases);
	CHECK(memcmp(big, out, sizeof out) == 0, "message data");
	CHECK_RC(fi_trecv(E.ep[1], &got, sizeof got, NULL, FI_ADDR_UNSPEC, 0x77, 0, &rctx));
	(void)wait_entry(1, &rctx, 0);
	CHECK(got == mark, "tagged data");
	end = now_s() + WAIT_MS / 1000.0;
	while (sends < 2) {
		CHECK(now_s() < end, "send completions");
		(void)fi_cq_read(E.cq[1], NULL, 0);
		if (fi_cq_read(E.cq[0], &e, 1) == 1) {
			CHECK(e.op_context == &sctx || e.op_context == &tctx, "send context");
			sends++;
		}
	}
}

/* FI_PEEK|FI_CLAIM on B for `tag` until the message is there; the peek's
 * entry is checked and consumed. */
static void peek_claim(uint64_t tag, void *ctx)
{
	double end = now_s() + WAIT_MS / 1000.0;

	for (;;) {
		struct fi_msg_tagged peek = { .addr = FI_ADDR_UNSPEC, .tag = tag, .context = ctx };
		struct fi_cq_tagged_entry e;
		struct fi_cq_err_entry err;
		int r;

		CHECK(now_s() < end, "tag %llu never became visible", (unsigned long long)tag);
		CHECK_RC(fi_trecvmsg(E.ep[1], &peek, FI_PEEK | FI_CLAIM));
		while ((r = read_b(&e, &err)) == 0)
			CHECK(now_s() < end, "no answer to FI_PEEK");
		if (r == 1) {
			CHECK(e.op_context == ctx && e.tag == tag, "peek entry");
			return;
		}
		CHECK(err.err == FI_ENOMSG && err.op_context == ctx, "peek error %d", err.err);
	}
}

/* The FI_RECV counter counts claimed receives (FI_CLAIM, FI_CLAIM|FI_DISCARD)
 * like any receive, and peeks not at all. */
static void t_cntr_claim(void)
{
	uint64_t out[2] = { 0x1111, 0x2222 }, in = 0;
	struct iovec iov = { &in, sizeof in };
	struct fi_msg_tagged claim = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC };
	struct fi_context2 ctx[2];
	int sctx[2], i;
	unsigned seen = 0;
	struct fi_cq_tagged_entry e;

	open_domain();
	E.cntr[1] = open_cntr(FI_WAIT_UNSPEC);
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(FI_WAIT_NONE);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[1]->fid, FI_RECV));
	enable_both();
	for (i = 0; i < 2; i++)
		CHECK_RC(fi_tsend(E.ep[0], &out[i], sizeof out[i], NULL, E.addr[1], 5 + i, &sctx[i]));
	peek_claim(5, &ctx[0]);
	CHECK(fi_cntr_read(E.cntr[1]) == 0, "a peek was counted");
	claim.tag = 5;
	claim.context = &ctx[0];
	CHECK_RC(fi_trecvmsg(E.ep[1], &claim, FI_CLAIM));
	(void)wait_entry(1, &ctx[0], 0);
	CHECK(in == out[0], "claimed data");
	cntr_wait(E.cntr[1], 1);
	peek_claim(6, &ctx[1]);
	claim.tag = 6;
	claim.context = &ctx[1];
	CHECK_RC(fi_trecvmsg(E.ep[1], &claim, FI_CLAIM | FI_DISCARD));
	(void)wait_entry(1, &ctx[1], 0);
	cntr_wait(E.cntr[1], 2);
	CHECK(fi_cntr_read(E.cntr[1]) == 2 && fi_cntr_readerr(E.cntr[1]) == 0,
	      "counter %llu, errors %llu", (unsigned long long)fi_cntr_read(E.cntr[1]),
	      (unsigned long long)fi_cntr_readerr(E.cntr[1]));
	/* The two sends' entries, in either order. */
	for (i = 0; i < 2; i++)
		(void)take_ctx(wait_any_entry(0, 0).op_context, sctx, 2, &seen, "send");
	CHECK(fi_cq_read(E.cq[1], &e, 1) == -FI_EAGAIN, "extra receive entry");
}

static const uint64_t RMA_RW = FI_REMOTE_READ | FI_REMOTE_WRITE;

/* Target address of byte `off` of a region at `buf`. */
static uint64_t target_addr(void *buf, size_t off)
{
	return (E.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf + off : off;
}

static void rma_basic(int mr_mode)
{
	static char target[8192], ro[256], src[4096], dst[4096];
	struct fid_mr *mr = NULL, *ro_mr = NULL;
	struct fi_cq_err_entry c;
	uint64_t key, ro_key;
	int ctx[8], i;

	want_caps = FI_RMA;
	want_mr_mode = mr_mode;
	two_eps(FI_WAIT_UNSPEC);
	CHECK((E.info->caps & (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) ==
	      (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE), "RMA caps");
	for (i = 0; i < (int)sizeof target; i++)
		target[i] = (char)(i * 7);
	memset(ro, 0x33, sizeof ro);
	CHECK_RC(fi_mr_reg(E.domain, target, sizeof target, RMA_RW, 0, 42, 0, &mr, NULL));
	CHECK_RC(fi_mr_reg(E.domain, ro, sizeof ro, FI_REMOTE_READ, 0, 43, 0, &ro_mr, NULL));
	key = fi_mr_key(mr);
	ro_key = fi_mr_key(ro_mr);
	if (!(E.info->domain_attr->mr_mode & FI_MR_PROV_KEY))
		CHECK(key == 42 && ro_key == 43, "requested keys not used");
	{
		struct fid_mr *dup = NULL;

		if (!(E.info->domain_attr->mr_mode & FI_MR_PROV_KEY)) {
			CHECK(fi_mr_reg(E.domain, ro, 16, RMA_RW, 0, 42, 0, &dup, NULL) == -FI_ENOKEY,
			      "duplicate key accepted");
		}
	}

	/* write: 3000 bytes (several packets) at offset 100 */
	for (i = 0; i < 3000; i++)
		src[i] = (char)(i ^ 0x5a);
	CHECK_RC(fi_write(E.ep[0], src, 3000, NULL, E.addr[1], target_addr(target, 100), key, &ctx[0]));
	c = wait_entry(0, &ctx[0], 0);
	CHECK(c.flags == (FI_RMA | FI_WRITE), "write flags 0x%llx", (unsigned long long)c.flags);
	CHECK(memcmp(target + 100, src, 3000) == 0, "write data");
	CHECK(target[99] == (char)(99 * 7) && target[3100] == (char)(3100 * 7), "write overran");

	/* writedata: the target's CQ reports the data */
	CHECK_RC(fi_writedata(E.ep[0], src, 64, NULL, 0xabcdef, E.addr[1], target_addr(target, 5000), key, &ctx[1]));
	(void)wait_entry(0, &ctx[1], 0);
	c = wait_entry(1, NULL, 0);
	CHECK(c.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) && c.data == 0xabcdef,
	      "remote entry flags 0x%llx data 0x%llx", (unsigned long long)c.flags,
	      (unsigned long long)c.data);
	CHECK(memcmp(target + 5000, src, 64) == 0, "writedata data");

	/* read 1000 bytes at offset 2000, and readv into two pieces */
	memset(dst, 0, sizeof dst);
	CHECK_RC(fi_read(E.ep[0], dst, 1000, NULL, E.addr[1], target_addr(target, 2000), key, &ctx[2]));
	c = wait_entry(0, &ctx[2], 0);
	CHECK(c.flags == (FI_RMA | FI_READ) && c.len == 1000, "read flags/len");
	CHECK(memcmp(dst, target + 2000, 1000) == 0, "read data");
	{
		struct iovec iov[2] = { { dst, 10 }, { dst + 100, 20 } };

		CHECK_RC(fi_readv(E.ep[0], iov, NULL, 2, E.addr[1], target_addr(target, 0), key, &ctx[3]));
		(void)wait_entry(0, &ctx[3], 0);
		CHECK(memcmp(dst, target, 10) == 0 && memcmp(dst + 100, target + 10, 20) == 0, "readv");
	}

	/* writemsg with FI_REMOTE_CQ_DATA and readmsg */
	{
		struct iovec iov = { src, 16 };
		struct fi_rma_iov rma = { target_addr(target, 7000), 16, key };
		struct fi_msg_rma msg = { .msg_iov = &iov, .iov_count = 1, .addr = E.addr[1],
			.rma_iov = &rma, .rma_iov_count = 1, .context = &ctx[4], .data = 77 };

		CHECK_RC(fi_writemsg(E.ep[0], &msg, FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE));
		(void)wait_entry(0, &ctx[4], 0);
		c = wait_entry(1, NULL, 0);
		CHECK(c.data == 77, "writemsg data");
		iov.iov_base = dst;
		msg.context = &ctx[5];
		memset(dst, 0, 16);
		CHECK_RC(fi_readmsg(E.ep[0], &msg, 0));
		(void)wait_entry(0, &ctx[5], 0);
		CHECK(memcmp(dst, src, 16) == 0, "readmsg");
		/* FI_INJECT: the source is free at once, the write still
		 * completes (only fi_inject_write makes no entry). */
		memset(dst, 0x6b, 16);
		iov.iov_base = dst;
		rma.addr = target_addr(target, 7100);
		msg.context = &ctx[4];
		CHECK_RC(fi_writemsg(E.ep[0], &msg, FI_INJECT));
		memset(dst, 0, 16);
		c = wait_entry(0, &ctx[4], 0);
		CHECK(c.flags == (FI_RMA | FI_WRITE), "injected writemsg flags 0x%llx",
		      (unsigned long long)c.flags);
		CHECK(target[7100] == 0x6b && target[7115] == 0x6b, "injected writemsg data");
	}

	/* refused: unknown key, past the end, no write permission, read past end */
	{
		char before[sizeof target];

		memcpy(before, target, sizeof target);
		CHECK_RC(fi_write(E.ep[0], src, 8, NULL, E.addr[1], target_addr(target, 0), key + 1000, &ctx[6]));
		c = wait_entry(0, &ctx[6], 1);
		CHECK(c.err == FI_EACCES, "bad key: err %d", c.err);
		CHECK_RC(fi_write(E.ep[0], src, 100, NULL, E.addr[1], target_addr(target, sizeof target - 50), key, &ctx[6]));
		c = wait_entry(0, &ctx[6], 1);
		CHECK(c.err == FI_EACCES, "past the end: err %d", c.err);
		CHECK(memcmp(before, target, sizeof target) == 0, "refused write touched memory");
		CHECK_RC(fi_write(E.ep[0], src, 8, NULL, E.addr[1], target_addr(ro, 0), ro_key, &ctx[6]));
		c = wait_entry(0, &ctx[6], 1);
		CHECK(c.err == FI_EACCES, "read-only region: err %d", c.err);
		CHECK(ro[0] == 0x33 && ro[7] == 0x33, "read-only region written");
		CHECK_RC(fi_read(E.ep[0], dst, 300, NULL, E.addr[1], target_addr(ro, 0), ro_key, &ctx[7]));
		c = wait_entry(0, &ctx[7], 1);
		CHECK(c.err == FI_EACCES, "read past the end: err %d", c.err);
		CHECK_RC(fi_read(E.ep[0], dst, 256, NULL, E.addr[1], target_addr(ro, 0), ro_key, &ctx[7]));
		(void)wait_entry(0, &ctx[7], 0);
	}
	fi_close(&mr->fid);
	mr = NULL;
	/* a closed region refuses access */
	CHECK_RC(fi_write(E.ep[0], src, 8, NULL, E.addr[1], target_addr(target, 0), key, &ctx[6]));
	c = wait_entry(0, &ctx[6], 1);
	CHECK(c.err == FI_EACCES, "closed region: err %d", c.err);
	fi_close(&ro_mr->fid);
}

static void t_rma_offset_keys(void) { rma_basic(0); }
static void t_rma_virt_prov_key(void) { rma_basic(FI_MR_VIRT_ADDR | FI_MR_PROV_KEY); }

/* RMA counters: FI_WRITE/FI_READ at the initiator, FI_REMOTE_WRITE/READ at
 * the target; fi_inject_write completes only through the counter. */
static void t_rma_counters(void)
{
	static char target[1024], src[64], dst[64];
	struct fid_mr *mr = NULL;
	int i;

	want_caps = FI_RMA;
	open_domain();
	for (i = 0; i < 4; i++)
		E.cntr[i] = open_cntr(FI_WAIT_UNSPEC);
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(FI_WAIT_NONE);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cntr[0]->fid, FI_WRITE));
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cntr[1]->fid, FI_READ));
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[2]->fid, FI_REMOTE_WRITE));
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[3]->fid, FI_REMOTE_READ));
	enable_both();
	CHECK_RC(fi_mr_reg(E.domain, target, sizeof target, RMA_RW, 0, 9, 0, &mr, NULL));
	memset(src, 0x11, sizeof src);
	for (i = 0; i < 5; i++)
		CHECK_RC(fi_inject_write(E.ep[0], src, sizeof src, E.addr[1], target_addr(target, 64 * i), fi_mr_key(mr)));
	CHECK_RC(fi_read(E.ep[0], dst, sizeof dst, NULL, E.addr[1], target_addr(target, 0), fi_mr_key(mr), NULL));
	{
		double end = now_s() + WAIT_MS / 1000.0;

		uint64_t v[4];

		/* Read every counter each round: each progresses its endpoint. */
		for (;;) {
			for (i = 0; i < 4; i++)
				v[i] = fi_cntr_read(E.cntr[i]);
			if (v[0] >= 5 && v[1] >= 1 && v[2] >= 5 && v[3] >= 1)
				break;
			CHECK(now_s() < end, "counters %llu %llu %llu %llu",
			      (unsigned long long)v[0], (unsigned long long)v[1],
			      (unsigned long long)v[2], (unsigned long long)v[3]);
		}
		CHECK(v[0] == 5 && v[1] == 1 && v[2] == 5 && v[3] == 1, "counted too much");
		CHECK(fi_cntr_readerr(E.cntr[0]) == 0 && fi_cntr_readerr(E.cntr[1]) == 0, "errors");
	}
	CHECK(target[0] == 0x11 && target[64 * 5 - 1] == 0x11 && target[64 * 5] == 0, "data");
	(void)wait_entry(0, NULL, 0);	/* the read's CQ entry */
	CHECK(fi_cq_read(E.cq[0], NULL, 0) == -FI_EAGAIN, "inject_write made a CQ entry");
	fi_close(&mr->fid);
}

/* Atomics: write, fetch and compare ops on B's memory; results and the old
 * values; unsupported combinations refused; a bad key fails with FI_EACCES. */
static void t_atomic_ops(void)
{
	static int64_t ivals[4];
	static double dvals[2];
	static uint32_t uvals[2];
	struct fid_mr *imr = NULL, *dmr = NULL, *umr = NULL;
	struct fi_atomic_attr attr;
	struct fi_cq_err_entry c;
	int64_t x, old, cmp;
	double dx, dold;
	uint32_t ux;
	size_t count = 0;
	int ctx;

	want_caps = FI_ATOMIC;
	two_eps(FI_WAIT_UNSPEC);
	CHECK(E.info->caps & FI_ATOMIC, "FI_ATOMIC not granted");
	CHECK_RC(fi_query_atomic(E.domain, FI_INT64, FI_SUM, &attr, 0));
	CHECK(attr.size == 8 && attr.count >= 1, "query size %zu count %zu", attr.size, attr.count);
	CHECK(fi_query_atomic(E.domain, FI_DOUBLE, FI_BOR, &attr, 0) == -FI_EOPNOTSUPP, "BOR on double");
	CHECK(fi_query_atomic(E.domain, FI_INT64, FI_CSWAP, &attr, 0) == -FI_EOPNOTSUPP, "CSWAP as write");
	CHECK_RC(fi_query_atomic(E.domain, FI_INT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC));
	CHECK_RC(fi_query_atomic(E.domain, FI_UINT8, FI_ATOMIC_READ, &attr, FI_FETCH_ATOMIC));
	CHECK_RC(fi_atomicvalid(E.ep[0], FI_FLOAT, FI_MAX, &count));
	CHECK(count >= 1, "atomicvalid count");
	ivals[0] = 10; ivals[1] = 100; ivals[2] = 0xf0; ivals[3] = 7;
	dvals[0] = 1.5; dvals[1] = -2.0;
	uvals[0] = 0xff00ff00u; uvals[1] = 1;
	CHECK_RC(fi_mr_reg(E.domain, ivals, sizeof ivals, RMA_RW, 0, 1, 0, &imr, NULL));
	CHECK_RC(fi_mr_reg(E.domain, dvals, sizeof dvals, RMA_RW, 0, 2, 0, &dmr, NULL));
	CHECK_RC(fi_mr_reg(E.domain, uvals, sizeof uvals, RMA_RW, 0, 3, 0, &umr, NULL));

	/* write: SUM */
	x = 5;
	CHECK_RC(fi_atomic(E.ep[0], &x, 1, NULL, E.addr[1], target_addr(ivals, 0), fi_mr_key(imr), FI_INT64, FI_SUM, &ctx));
	c = wait_entry(0, &ctx, 0);
	CHECK(c.flags == (FI_ATOMIC | FI_WRITE), "atomic flags 0x%llx", (unsigned long long)c.flags);
	CHECK(ivals[0] == 15, "SUM: %lld", (long long)ivals[0]);
	/* fetch: PROD returns the old value */
	x = 3; old = 0;
	CHECK_RC(fi_fetch_atomic(E.ep[0], &x, 1, NULL, &old, NULL, E.addr[1], target_addr(ivals, 8), fi_mr_key(imr), FI_INT64, FI_PROD, &ctx));
	c = wait_entry(0, &ctx, 0);
	CHECK(c.flags == (FI_ATOMIC | FI_READ), "fetch flags 0x%llx", (unsigned long long)c.flags);
	CHECK(old == 100 && ivals[1] == 300, "PROD: old %lld new %lld", (long long)old, (long long)ivals[1]);
	/* fetch: ATOMIC_READ */
	old = 0;
	CHECK_RC(fi_fetch_atomic(E.ep[0], NULL, 1, NULL, &old, NULL, E.addr[1], target_addr(ivals, 16), fi_mr_key(imr), FI_INT64, FI_ATOMIC_READ, &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK(old == 0xf0 && ivals[2] == 0xf0, "ATOMIC_READ");
	/* compare: CSWAP that fails, then one that succeeds */
	x = 99; cmp = 8; old = 0;
	CHECK_RC(fi_compare_atomic(E.ep[0], &x, 1, NULL, &cmp, NULL, &old, NULL, E.addr[1], target_addr(ivals, 24), fi_mr_key(imr), FI_INT64, FI_CSWAP, &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK(old == 7 && ivals[3] == 7, "CSWAP mismatch swapped");
	cmp = 7;
	CHECK_RC(fi_compare_atomic(E.ep[0], &x, 1, NULL, &cmp, NULL, &old, NULL, E.addr[1], target_addr(ivals, 24), fi_mr_key(imr), FI_INT64, FI_CSWAP, &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK(old == 7 && ivals[3] == 99, "CSWAP match did not swap");
	/* MSWAP on uint32: take x's bits where the mask is set */
	ux = 0x12345678u;
	{
		uint32_t mask = 0x0000ffffu, uold = 0;

		CHECK_RC(fi_compare_atomic(E.ep[0], &ux, 1, NULL, &mask, NULL, &uold, NULL, E.addr[1], target_addr(uvals, 0), fi_mr_key(umr), FI_UINT32, FI_MSWAP, &ctx));
		(void)wait_entry(0, &ctx, 0);
		CHECK(uold == 0xff00ff00u && uvals[0] == 0xff005678u, "MSWAP: 0x%x", uvals[0]);
	}
	/* BXOR on uint32 */
	ux = 3;
	CHECK_RC(fi_atomic(E.ep[0], &ux, 1, NULL, E.addr[1], target_addr(uvals, 4), fi_mr_key(umr), FI_UINT32, FI_BXOR, &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK(uvals[1] == 2, "BXOR");
	/* doubles: MIN (write), MAX (fetch), two elements */
	{
		double two[2] = { 0.5, 0.5 }, olds[2] = { 0, 0 };

		CHECK_RC(fi_atomic(E.ep[0], two, 2, NULL, E.addr[1], target_addr(dvals, 0), fi_mr_key(dmr), FI_DOUBLE, FI_MIN, &ctx));
		(void)wait_entry(0, &ctx, 0);
		CHECK(dvals[0] == 0.5 && dvals[1] == -2.0, "MIN: %g %g", dvals[0], dvals[1]);
		dx = 4.0;
		dold = 0;
		CHECK_RC(fi_fetch_atomic(E.ep[0], &dx, 1, NULL, &dold, NULL, E.addr[1], target_addr(dvals, 8), fi_mr_key(dmr), FI_DOUBLE, FI_MAX, &ctx));
		(void)wait_entry(0, &ctx, 0);
		CHECK(dold == -2.0 && dvals[1] == 4.0, "MAX");
		(void)olds;
	}
	/* atomicmsg with FI_INJECT: the operand is free at once, the atomic
	 * still completes (only fi_inject_atomic makes no entry). */
	{
		struct fi_ioc ioc = { &ux, 1 };
		struct fi_rma_ioc rioc = { target_addr(uvals, 4), 1, fi_mr_key(umr) };
		struct fi_msg_atomic msg = { .msg_iov = &ioc, .iov_count = 1, .addr = E.addr[1],
			.rma_iov = &rioc, .rma_iov_count = 1, .datatype = FI_UINT32,
			.op = FI_SUM, .context = &ctx };

		ux = 40;
		CHECK_RC(fi_atomicmsg(E.ep[0], &msg, FI_INJECT));
		ux = 0;
		c = wait_entry(0, &ctx, 0);
		CHECK(c.flags == (FI_ATOMIC | FI_WRITE), "injected atomicmsg flags 0x%llx",
		      (unsigned long long)c.flags);
		CHECK(uvals[1] == 42, "injected atomicmsg: %u", uvals[1]);
	}
	/* unsupported combination and bad key */
	CHECK(fi_atomic(E.ep[0], &dx, 1, NULL, E.addr[1], 0, fi_mr_key(dmr), FI_DOUBLE, FI_BAND, &ctx) == -FI_EOPNOTSUPP,
	      "BAND on double accepted");
	x = 1;
	CHECK_RC(fi_atomic(E.ep[0], &x, 1, NULL, E.addr[1], target_addr(ivals, 0), fi_mr_key(imr) + 77, FI_INT64, FI_SUM, &ctx));
	c = wait_entry(0, &ctx, 1);
	CHECK(c.err == FI_EACCES && ivals[0] == 15, "bad key: err %d", c.err);
	fi_close(&imr->fid);
	fi_close(&dmr->fid);
	fi_close(&umr->fid);
}

/* Both endpoints add to the same word (B's, B also through the network to
 * itself): no update is lost. */
static void t_atomic_concurrent(void)
{
	enum { N = 300 };
	static int64_t word;
	static struct fid_mr *mr;
	int64_t one = 1;
	int i, done[2] = { 0, 0 }, posted[2] = { 0, 0 }, ctx;
	double end;

	want_caps = FI_ATOMIC;
	two_eps(FI_WAIT_UNSPEC);
	word = 0;
	mr = NULL;
	CHECK_RC(fi_mr_reg(E.domain, &word, sizeof word, RMA_RW, 0, 5, 0, &mr, NULL));
	end = now_s() + WAIT_MS / 1000.0;
	while (done[0] < N || done[1] < N) {
		CHECK(now_s() < end, "done %d %d", done[0], done[1]);
		for (i = 0; i < 2; i++) {
			struct fi_cq_tagged_entry e;
			ssize_t rc;

			if (posted[i] < N && posted[i] - done[i] < 16) {
				rc = fi_atomic(E.ep[i], &one, 1, NULL, E.addr[1], target_addr(&word, 0),
					       fi_mr_key(mr), FI_INT64, FI_SUM, &ctx);
				if (rc == 0)
					posted[i]++;
				else
					CHECK(rc == -FI_EAGAIN, "fi_atomic: %zd", rc);
			}
			rc = fi_cq_read(E.cq[i], &e, 1);
			if (rc == 1)
				done[i]++;
			else
				CHECK(rc == -FI_EAGAIN, "cq read %zd", rc);
		}
	}
	CHECK(word == 2 * N, "word %lld, want %d", (long long)word, 2 * N);
	fi_close(&mr->fid);
}

/* FI_RMA_EVENT: a counter bound to a region (fi_mr_bind) counts the peers'
 * writes and atomics (FI_REMOTE_WRITE) or reads (FI_REMOTE_READ) of that
 * region only; the target endpoint's remote counters count them all;
 * refused accesses count nowhere; writedata still makes a CQ entry. */
static void t_rma_event(void)
{
	static char a[4096], src[64], dst[64];
	static int64_t word;
	struct fi_cq_err_entry c;
	uint64_t ka, kb, v[4];
	int64_t one = 1, got = 0;
	int ctx, i;

	want_caps = FI_RMA | FI_ATOMIC | FI_RMA_EVENT;
	/* Only the application progresses (checked by the counter wait). */
	setenv("FI_UET_IDLE_PROGRESS_US", "0", 1);
	open_domain();
	unsetenv("FI_UET_IDLE_PROGRESS_US");
	CHECK(E.info->caps & FI_RMA_EVENT, "FI_RMA_EVENT not granted");
	for (i = 0; i < 4; i++)
		E.cntr[i] = open_cntr(FI_WAIT_UNSPEC);
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(FI_WAIT_UNSPEC);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	CHECK_RC(fi_ep_bind(E.ep[1], &E.cntr[3]->fid, FI_REMOTE_WRITE | FI_REMOTE_READ));
	enable_both();
	word = 0;
	CHECK_RC(fi_mr_reg(E.domain, a, sizeof a, RMA_RW, 0, 11, 0, &E.mr[0], NULL));
	CHECK_RC(fi_mr_reg(E.domain, &word, sizeof word, RMA_RW, 0, 12, 0, &E.mr[1], NULL));
	CHECK(fi_mr_bind(E.mr[0], &E.cntr[0]->fid, FI_SEND) == -FI_EINVAL, "FI_SEND binding accepted");
	CHECK(fi_mr_bind(E.mr[0], &E.cntr[0]->fid, 0) == -FI_EINVAL, "binding without events accepted");
	CHECK_RC(fi_mr_bind(E.mr[0], &E.cntr[0]->fid, FI_REMOTE_WRITE));
	CHECK_RC(fi_mr_bind(E.mr[0], &E.cntr[1]->fid, FI_REMOTE_READ));
	CHECK_RC(fi_mr_bind(E.mr[1], &E.cntr[2]->fid, FI_REMOTE_WRITE | FI_REMOTE_READ));
	ka = fi_mr_key(E.mr[0]);
	kb = fi_mr_key(E.mr[1]);
	memset(src, 0x5c, sizeof src);
	for (i = 0; i < 2; i++) {
		CHECK_RC(fi_write(E.ep[0], src, sizeof src, NULL, E.addr[1], target_addr(a, 64 * i), ka, &ctx));
		(void)wait_entry(0, &ctx, 0);
	}
	CHECK_RC(fi_writedata(E.ep[0], src, 8, NULL, 0x77, E.addr[1], target_addr(a, 512), ka, &ctx));
	(void)wait_entry(0, &ctx, 0);
	c = wait_entry(1, NULL, 0);
	CHECK(c.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) && c.data == 0x77,
	      "writedata entry flags 0x%llx data 0x%llx", (unsigned long long)c.flags,
	      (unsigned long long)c.data);
	for (i = 0; i < 2; i++) {
		CHECK_RC(fi_read(E.ep[0], dst, sizeof dst, NULL, E.addr[1], target_addr(a, 0), ka, &ctx));
		(void)wait_entry(0, &ctx, 0);
	}
	CHECK_RC(fi_atomic(E.ep[0], &one, 1, NULL, E.addr[1], target_addr(&word, 0), kb, FI_INT64, FI_SUM, &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK_RC(fi_read(E.ep[0], &got, 8, NULL, E.addr[1], target_addr(&word, 0), kb, &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK(word == 1 && got == 1, "atomic/read: word %lld read %lld", (long long)word, (long long)got);
	/* refused (past the end of a): counted nowhere */
	CHECK_RC(fi_write(E.ep[0], src, 64, NULL, E.addr[1], target_addr(a, sizeof a - 8), ka, &ctx));
	c = wait_entry(0, &ctx, 1);
	CHECK(c.err == FI_EACCES, "refused write: err %d", c.err);
	/* Every target event happened before the initiator's completion. */
	for (i = 0; i < 4; i++)
		v[i] = fi_cntr_read(E.cntr[i]);
	CHECK(v[0] == 3 && v[1] == 2 && v[2] == 2 && v[3] == 7,
	      "counters %llu %llu %llu %llu, want 3 2 2 7", (unsigned long long)v[0],
	      (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)v[3]);
	for (i = 0; i < 4; i++)
		CHECK(fi_cntr_readerr(E.cntr[i]) == 0, "counter %d errors", i);
	/* Waiting on a counter bound only to a region progresses the domain's
	 * endpoints: no CQ is read until the count is reached. */
	CHECK_RC(fi_write(E.ep[0], src, 8, NULL, E.addr[1], target_addr(a, 0), ka, &ctx));
	CHECK_RC(fi_cntr_wait(E.cntr[0], 4, WAIT_MS));
	(void)wait_entry(0, &ctx, 0);
	/* A counter bound to an open region is in use. */
	CHECK(fi_close(&E.cntr[0]->fid) == -FI_EBUSY, "counter bound to a region closed");
	CHECK_RC(fi_close(&E.mr[0]->fid));
	E.mr[0] = NULL;
	CHECK_RC(fi_close(&E.cntr[0]->fid));
	E.cntr[0] = NULL;
}

/* FI_MR_ENDPOINT when the application asks for it: a region is usable once
 * bound to an endpoint and enabled, not before; enabling it unbound fails. */
static void t_mr_endpoint(void)
{
	static char target[256], src[16];
	struct fi_cq_err_entry c;
	int ctx;

	want_caps = FI_RMA;
	want_mr_mode = FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	two_eps(FI_WAIT_UNSPEC);
	CHECK(E.info->domain_attr->mr_mode & FI_MR_ENDPOINT, "FI_MR_ENDPOINT not offered");
	CHECK_RC(fi_mr_reg(E.domain, target, sizeof target, RMA_RW, 0, 0, 0, &E.mr[0], NULL));
	CHECK(fi_mr_enable(E.mr[0]) == -FI_EINVAL, "enabled before fi_mr_bind");
	memset(src, 7, sizeof src);
	CHECK_RC(fi_write(E.ep[0], src, sizeof src, NULL, E.addr[1], target_addr(target, 0),
			  fi_mr_key(E.mr[0]), &ctx));
	c = wait_entry(0, &ctx, 1);
	CHECK(c.err == FI_EACCES && target[0] == 0, "region usable before fi_mr_enable");
	CHECK_RC(fi_mr_bind(E.mr[0], &E.ep[1]->fid, 0));
	CHECK_RC(fi_mr_enable(E.mr[0]));
	CHECK_RC(fi_write(E.ep[0], src, sizeof src, NULL, E.addr[1], target_addr(target, 0),
			  fi_mr_key(E.mr[0]), &ctx));
	(void)wait_entry(0, &ctx, 0);
	CHECK(memcmp(target, src, sizeof src) == 0, "write after enable");
}

/* One message from (s, scq) to (r, rcq) at `to`, progressing both sides. */
static void xfer(struct fid_ep *s, struct fid_cq *scq, fi_addr_t to,
		 struct fid_ep *r, struct fid_cq *rcq, int seed)
{
	char out[100], in[100] = { 0 };
	int sctx, rctx, got_s = 0, got_r = 0;
	double end = now_s() + WAIT_MS / 1000.0;

	memset(out, seed, sizeof out);
	CHECK_RC(fi_recv(r, in, sizeof in, NULL, FI_ADDR_UNSPEC, &rctx));
	CHECK_RC(fi_send(s, out, sizeof out, NULL, to, &sctx));
	while (!got_s || !got_r) {
		struct fi_cq_tagged_entry e;

		CHECK(now_s() < end, "transfer %d: send %d recv %d", seed, got_s, got_r);
		if (fi_cq_read(scq, &e, 1) == 1) {
			CHECK(e.op_context == &sctx, "transfer %d: send context", seed);
			got_s = 1;
		}
		if (fi_cq_read(rcq, &e, 1) == 1) {
			CHECK(e.op_context == &rctx && e.len == sizeof in, "transfer %d: recv", seed);
			got_r = 1;
		}
	}
	CHECK(memcmp(in, out, sizeof in) == 0, "transfer %d data", seed);
}

/* fi_close of an endpoint is final when it returns, even while the domain's
 * progress thread holds it: its address can be bound again at once (its
 * sockets are closed, so nothing of it writes into application memory
 * any more). Each round the endpoint sends itself a message, and is closed
 * as soon as the thread has placed it: the thread is then busy with it, or
 * asleep holding it. */
static void t_close_rebind(void)
{
	static char out[256], in[256];
	fi_addr_t self = FI_ADDR_NOTAVAIL;
	int round, rc, rctx, sctx;

	want_progress = FI_PROGRESS_AUTO;
	open_domain();
	E.cq[1] = open_cq(FI_WAIT_UNSPEC);
	for (round = 0; round < 10; round++) {
		double end = now_s() + WAIT_MS / 1000.0;

		rc = fi_endpoint(E.domain, round ? E.info2 : E.info, &E.ep[1], NULL);
		CHECK(rc == 0, "round %d: binding the address just closed: %s", round,
		      fi_strerror(-rc));
		CHECK_RC(fi_ep_bind(E.ep[1], &E.av->fid, 0));
		CHECK_RC(fi_ep_bind(E.ep[1], &E.cq[1]->fid, FI_TRANSMIT | FI_RECV));
		CHECK_RC(fi_enable(E.ep[1]));
		if (!round) {
			char name[64];
			size_t len = sizeof name;

			CHECK_RC(fi_getname(&E.ep[1]->fid, name, &len));
			CHECK(fi_av_insert(E.av, name, 1, &self, 0, NULL) == 1, "av_insert");
			E.info2 = fi_dupinfo(E.info);
			CHECK(E.info2, "fi_dupinfo");
			free(E.info2->src_addr);
			E.info2->src_addr = malloc(len);
			CHECK(E.info2->src_addr, "malloc");
			memcpy(E.info2->src_addr, name, len);
			E.info2->src_addrlen = len;
		}
		memset(out, 'a' + round, sizeof out);
		memset(in, 0, sizeof in);
		CHECK_RC(fi_recv(E.ep[1], in, sizeof in, NULL, FI_ADDR_UNSPEC, &rctx));
		CHECK_RC(fi_send(E.ep[1], out, sizeof out, NULL, self, &sctx));
		while (__atomic_load_n(&in[sizeof in - 1], __ATOMIC_ACQUIRE) != 'a' + round)
			CHECK(now_s() < end, "round %d: the progress thread placed nothing", round);
		CHECK_RC(fi_close(&E.ep[1]->fid));
		E.ep[1] = NULL;
	}
}

/* fi_close in an order the man pages refuse answers -FI_EBUSY and leaves
 * the object usable (CQ, counter, AV, EQ bound to an open endpoint; domain
 * with open children; fabric with an open domain or EQ). Endpoints close
 * with operations pending; then everything closes. */
static void t_close_busy(void)
{
	static char out[1 << 20], in[64];
	struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_NONE };
	char got[32] = { 0 };
	int i, rctx, sctx;

	open_domain();
	CHECK_RC(fi_eq_open(E.fabric, &eq_attr, &E.eq, NULL));
	E.cntr[0] = open_cntr(FI_WAIT_NONE);
	for (i = 0; i < 2; i++) {
		open_ep(i);
		E.cq[i] = open_cq(FI_WAIT_UNSPEC);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	CHECK_RC(fi_ep_bind(E.ep[0], &E.cntr[0]->fid, FI_SEND));
	CHECK_RC(fi_ep_bind(E.ep[0], &E.eq->fid, 0));
	enable_both();
	CHECK_RC(fi_mr_reg(E.domain, in, sizeof in, FI_REMOTE_WRITE, 0, 3, 0, &E.mr[0], NULL));

	CHECK(fi_close(&E.cq[0]->fid) == -FI_EBUSY, "CQ of an open endpoint closed");
	CHECK(fi_close(&E.cntr[0]->fid) == -FI_EBUSY, "counter of an open endpoint closed");
	CHECK(fi_close(&E.av->fid) == -FI_EBUSY, "AV of an open endpoint closed");
	CHECK(fi_close(&E.eq->fid) == -FI_EBUSY, "EQ of an open endpoint closed");
	CHECK(fi_close(&E.domain->fid) == -FI_EBUSY, "domain with open objects closed");
	CHECK(fi_close(&E.fabric->fid) == -FI_EBUSY, "fabric with an open domain closed");

	/* All still work. */
	xfer(E.ep[0], E.cq[0], E.addr[1], E.ep[1], E.cq[1], 9);
	CHECK(fi_cntr_read(E.cntr[0]) == 1, "counter");

	/* Pending at close: a receive that never matches, a 1 MiB send the
	 * peer never takes. */
	CHECK_RC(fi_trecv(E.ep[1], got, sizeof got, NULL, FI_ADDR_UNSPEC, 0x99, 0, &rctx));
	memset(out, 1, sizeof out);
	CHECK_RC(fi_tsend(E.ep[0], out, sizeof out, NULL, E.addr[1], 0x42, &sctx));
	(void)fi_cq_read(E.cq[0], NULL, 0);
	CHECK_RC(fi_close(&E.ep[1]->fid));
	E.ep[1] = NULL;
	CHECK(fi_close(&E.av->fid) == -FI_EBUSY, "AV still bound to endpoint A closed");
	CHECK_RC(fi_close(&E.cq[1]->fid));
	E.cq[1] = NULL;
	CHECK_RC(fi_close(&E.ep[0]->fid));
	E.ep[0] = NULL;
	CHECK_RC(fi_close(&E.eq->fid));
	E.eq = NULL;
	CHECK(fi_close(&E.domain->fid) == -FI_EBUSY, "domain with open objects closed");
	CHECK_RC(fi_close(&E.av->fid));
	E.av = NULL;
	CHECK_RC(fi_close(&E.cntr[0]->fid));
	E.cntr[0] = NULL;
	CHECK_RC(fi_close(&E.cq[0]->fid));
	E.cq[0] = NULL;
	CHECK(fi_close(&E.domain->fid) == -FI_EBUSY, "domain with an open region closed");
	CHECK_RC(fi_close(&E.mr[0]->fid));
	E.mr[0] = NULL;
	CHECK_RC(fi_close(&E.domain->fid));
	E.domain = NULL;
	CHECK_RC(fi_close(&E.fabric->fid));
	E.fabric = NULL;
}

/* Several domains in one process: A and B share the first domain's AV, C
 * lives in a second domain with its own AV and CQ; A->C, C->B, B->A. */
static void t_domains(void)
{
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fi_cq_attr cq_attr = { .size = 64, .format = FI_CQ_FORMAT_TAGGED };
	fi_addr_t c_of_a, a_of_c, b_of_c;
	char name[64];
	size_t len = sizeof name;
	int i;

	two_eps(FI_WAIT_UNSPEC);
	CHECK_RC(fi_domain(E.fabric, E.info, &E.domain2, NULL));
	CHECK_RC(fi_av_open(E.domain2, &av_attr, &E.av2, NULL));
	CHECK_RC(fi_cq_open(E.domain2, &cq_attr, &E.cq2, NULL));
	CHECK_RC(fi_endpoint(E.domain2, E.info, &E.ep2, NULL));
	CHECK_RC(fi_ep_bind(E.ep2, &E.av2->fid, 0));
	CHECK_RC(fi_ep_bind(E.ep2, &E.cq2->fid, FI_TRANSMIT | FI_RECV));
	CHECK_RC(fi_enable(E.ep2));
	CHECK_RC(fi_getname(&E.ep2->fid, name, &len));
	CHECK(fi_av_insert(E.av, name, 1, &c_of_a, 0, NULL) == 1, "insert C");
	for (i = 0; i < 2; i++) {
		len = sizeof name;
		CHECK_RC(fi_getname(&E.ep[i]->fid, name, &len));
		CHECK(fi_av_insert(E.av2, name, 1, i ? &b_of_c : &a_of_c, 0, NULL) == 1, "insert");
	}
	(void)a_of_c;
	xfer(E.ep[0], E.cq[0], c_of_a, E.ep2, E.cq2, 1);
	xfer(E.ep2, E.cq2, b_of_c, E.ep[1], E.cq[1], 2);
	xfer(E.ep[1], E.cq[1], E.addr[0], E.ep[0], E.cq[0], 3);
	CHECK(fi_close(&E.domain2->fid) == -FI_EBUSY, "second domain closed under its endpoint");
	CHECK_RC(fi_close(&E.ep2->fid));
	E.ep2 = NULL;
	/* The first domain is unaffected. */
	xfer(E.ep[0], E.cq[0], E.addr[1], E.ep[1], E.cq[1], 4);
}

/* fi_av(3) leaves operations in flight to a removed address to the
 * provider: here they finish normally (the transport addressed the peer at
 * post time). New posts to the removed fi_addr fail with -FI_EINVAL, the
 * slot is never handed out again, and inserting the address again gives a
 * new fi_addr that works. */
static void t_av_remove_inflight(void)
{
	enum { N = 4, LEN = 256 << 10 };
	static char out[N][LEN], in[N][LEN], target[4096], dst[4096];
	char name[64], abuf[64];
	size_t len = sizeof name, alen = sizeof abuf;
	fi_addr_t old, again = FI_ADDR_NOTAVAIL;
	int sctx[N + 1], rctx[N], i, sent = 0, recvd = 0;
	unsigned sends_seen = 0, recvs_seen = 0;
	double end;

	want_caps = FI_RMA;
	two_eps(FI_WAIT_UNSPEC);
	CHECK_RC(fi_mr_reg(E.domain, target, sizeof target, FI_REMOTE_READ, 0, 8, 0, &E.mr[0], NULL));
	memset(target, 'T', sizeof target);
	old = E.addr[1];
	for (i = 0; i < N; i++) {
		memset(out[i], 'A' + i, LEN);
		CHECK_RC(fi_send(E.ep[0], out[i], LEN, NULL, old, &sctx[i]));
	}
	CHECK_RC(fi_read(E.ep[0], dst, sizeof dst, NULL, old, target_addr(target, 0),
			 fi_mr_key(E.mr[0]), &sctx[N]));
	(void)fi_cq_read(E.cq[0], NULL, 0);
	CHECK_RC(fi_av_remove(E.av, &old, 1, 0));
	CHECK(fi_send(E.ep[0], out[0], 8, NULL, old, &sctx[0]) == -FI_EINVAL,
	      "send to a removed address accepted");
	CHECK(fi_av_lookup(E.av, old, abuf, &alen) != 0, "lookup of a removed address");
	for (i = 0; i < N; i++)
		CHECK_RC(fi_recv(E.ep[1], in[i], LEN, NULL, FI_ADDR_UNSPEC, &rctx[i]));
	end = now_s() + WAIT_MS / 1000.0;
	while (sent < N + 1 || recvd < N) {
		struct fi_cq_tagged_entry e;
		ssize_t n;

		CHECK(now_s() < end, "in flight: %d of %d sends/reads, %d of %d receives", sent,
		      N + 1, recvd, N);
		n = fi_cq_read(E.cq[0], &e, 1);
		CHECK(n == 1 || n == -FI_EAGAIN, "sender CQ: %zd (%s)", n, fi_strerror((int)-n));
		if (n == 1) {
			(void)take_ctx(e.op_context, sctx, N + 1, &sends_seen, "sender");
			sent++;
		}
		n = fi_cq_read(E.cq[1], &e, 1);
		CHECK(n == 1 || n == -FI_EAGAIN, "receiver CQ: %zd", n);
		if (n == 1) {
			(void)take_ctx(e.op_context, rctx, N, &recvs_seen, "receiver");
			CHECK(e.len == LEN, "receive %d: len %zu", recvd, e.len);
			recvd++;
		}
	}
	for (i = 0; i < N; i++)
		CHECK(in[i][0] == 'A' + i && in[i][LEN - 1] == 'A' + i, "message %d data", i);
	CHECK(memcmp(dst, target, sizeof dst) == 0, "read data");
	/* The same address again: a new fi_addr, never the removed slot. */
	CHECK_RC(fi_getname(&E.ep[1]->fid, name, &len));
	CHECK(fi_av_insert(E.av, name, 1, &again, 0, NULL) == 1, "re-insert");
	CHECK(again != old, "removed slot handed out again");
	E.addr[1] = again;
	xfer(E.ep[0], E.cq[0], again, E.ep[1], E.cq[1], 5);
}

/* Completion levels (fi_cq(3)). Inject complete: the entry comes once the
 * buffer may be reused, before the peer did anything, and the peer gets the
 * content at post time; it comes from the endpoint default
 * (tx_attr->op_flags) or a per-operation flag. Transmit complete (the
 * default, also set back with FI_SETOPSFLAG): no entry while the peer
 * sleeps. Delivery complete: the receive buffer holds the data when the
 * send completes. */
static void t_completion_levels(void)
{
	enum { LEN = 8192 };	/* above inject_size: not copied at post */
	static char out[3][LEN], in[3][LEN];
	struct fi_cq_tagged_entry e;
	uint64_t flags;
	int sctx[3], rctx[3], i, got_s = 0, got_r = 0;
	unsigned recvs_seen = 0;
	double end;

	/* B must stay untouched while A looks for entries: no idle-progress
	 * thread in this domain (read when the domain opens). */
	setenv("FI_UET_IDLE_PROGRESS_US", "0", 1);
	open_domain();
	unsetenv("FI_UET_IDLE_PROGRESS_US");
	E.info->tx_attr->op_flags = FI_INJECT_COMPLETE;
	open_ep(0);
	E.info->tx_attr->op_flags = 0;
	open_ep(1);
	for (i = 0; i < 2; i++) {
		E.cq[i] = open_cq(FI_WAIT_UNSPEC);
		CHECK_RC(fi_ep_bind(E.ep[i], &E.cq[i]->fid, FI_TRANSMIT | FI_RECV));
	}
	enable_both();
	flags = FI_TRANSMIT;
	CHECK_RC(fi_control(&E.ep[0]->fid, FI_GETOPSFLAG, &flags));
	CHECK(flags & FI_INJECT_COMPLETE, "default op flags 0x%llx", (unsigned long long)flags);

	/* Endpoint default: inject complete; B never progressed (reading A's
	 * CQ progresses A only). */
	memset(out[0], 'x', LEN);
	CHECK_RC(fi_send(E.ep[0], out[0], LEN, NULL, E.addr[1], &sctx[0]));
	CHECK(fi_cq_read(E.cq[0], &e, 1) == 1 && e.op_context == &sctx[0],
	      "no inject completion before the peer progressed");
	memset(out[0], 'y', LEN);	/* reused at once */

	/* Back to transmit complete: no entry while B sleeps. */
	flags = FI_TRANSMIT | FI_TRANSMIT_COMPLETE;
	CHECK_RC(fi_control(&E.ep[0]->fid, FI_SETOPSFLAG, &flags));
	memset(out[1], 'm', LEN);
	CHECK_RC(fi_send(E.ep[0], out[1], LEN, NULL, E.addr[1], &sctx[1]));
	for (i = 0; i < 100; i++)
		CHECK(fi_cq_read(E.cq[0], &e, 1) == -FI_EAGAIN,
		      "transmit complete before the peer acknowledged");

	/* Per operation: inject complete overtakes the pending send. */
	{
		struct iovec iov = { out[2], LEN };
		struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1, .addr = E.addr[1],
				      .context = &sctx[2] };

		memset(out[2], 'p', LEN);
		CHECK_RC(fi_sendmsg(E.ep[0], &msg, FI_INJECT_COMPLETE | FI_COMPLETION));
		CHECK(fi_cq_read(E.cq[0], &e, 1) == 1 && e.op_context == &sctx[2],
		      "per-operation inject complete missing");
		memset(out[2], 'q', LEN);
	}
	for (i = 0; i < 3; i++)
		CHECK_RC(fi_recv(E.ep[1], in[i], LEN, NULL, FI_ADDR_UNSPEC, &rctx[i]));
	end = now_s() + WAIT_MS / 1000.0;
	while (!got_s || got_r < 3) {
		CHECK(now_s() < end, "send %d, %d receives", got_s, got_r);
		if (fi_cq_read(E.cq[0], &e, 1) == 1) {
			CHECK(e.op_context == &sctx[1], "send entry");
			got_s = 1;
		}
		if (fi_cq_read(E.cq[1], &e, 1) == 1) {
			(void)take_ctx(e.op_context, rctx, 3, &recvs_seen, "receive");
			got_r++;
		}
	}
	CHECK(in[0][0] == 'x' && in[0][LEN - 1] == 'x', "inject complete: data not as posted");
	CHECK(in[1][0] == 'm' && in[1][LEN - 1] == 'm', "transmit complete data");
	CHECK(in[2][0] == 'p' && in[2][LEN - 1] == 'p', "per-operation inject: data not as posted");

	/* Delivery complete: B's buffer is filled when A's entry appears. */
	memset(in[0], 0, LEN);
	memset(out[0], 'd', LEN);
	CHECK_RC(fi_recv(E.ep[1], in[0], LEN, NULL, FI_ADDR_UNSPEC, &rctx[0]));
	{
		struct iovec iov = { out[0], LEN };
		struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1, .addr = E.addr[1],
				      .context = &sctx[0] };

		CHECK_RC(fi_sendmsg(E.ep[0], &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION));
	}
	end = now_s() + WAIT_MS / 1000.0;
	while (fi_cq_read(E.cq[0], &e, 1) != 1) {
		CHECK(now_s() < end, "no delivery completion");
		(void)fi_cq_read(E.cq[1], NULL, 0);
	}
	CHECK(e.op_context == &sctx[0], "delivery entry context");
	CHECK(in[0][0] == 'd' && in[0][LEN - 1] == 'd', "delivery complete before the data was placed");
	(void)sread_one(E.cq[1], &rctx[0]);
}

/* ------------------------------------------------------------------ */

static const struct test { const char *name; void (*fn)(void); } tests[] = {
	{ "cntr_ops", t_cntr_ops },
	{ "cntr_msg", t_cntr_msg },
	{ "cntr_only", t_cntr_only },
	{ "cntr_claim", t_cntr_claim },
	{ "cntr_wait_thread", t_cntr_wait_thread },
	{ "cq_sread", t_cq_sread },
	{ "wait_spins_before_sleeping", t_wait_spins_before_sleeping },
	{ "int_param_misread", t_int_param_misread },
	{ "shared_cq", t_shared_cq },
	{ "idle_thread_sleeps_while_polled", t_idle_thread_sleeps_while_polled },
	{ "cq_getwait", t_cq_getwait },
	{ "cq_getwait_rebound", t_cq_getwait_rebound },
	{ "eq_wait", t_eq_wait },
	{ "threads", t_threads },
	{ "auto_progress", t_auto_progress },
	{ "multi_recv", t_multi_recv },
	{ "multi_recv_cancel_landing", t_multi_recv_cancel_landing },
	{ "multi_recv_op_flag", t_multi_recv_op_flag },
	{ "source_err", t_source_err },
	{ "unsignalled_errors", t_unsignalled_errors },
	{ "rma_offset_keys", t_rma_offset_keys },
	{ "rma_virt_prov_key", t_rma_virt_prov_key },
	{ "rma_counters", t_rma_counters },
	{ "atomic_ops", t_atomic_ops },
	{ "atomic_concurrent", t_atomic_concurrent },
	{ "rma_event", t_rma_event },
	{ "mr_endpoint", t_mr_endpoint },
	{ "close_busy", t_close_busy },
	{ "close_rebind", t_close_rebind },
	{ "domains", t_domains },
	{ "av_remove_inflight", t_av_remove_inflight },
	{ "completion_levels", t_completion_levels },
};

int main(int argc, char **argv)
{
	static const char *only;
	static int passed, failed, ran;
	int opt;
	static size_t i;

	while ((opt = getopt(argc, argv, "p:t:l")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 't': only = optarg; break;
		case 'l':
			for (i = 0; i < sizeof tests / sizeof tests[0]; i++)
				printf("%s\n", tests[i].name);
			return 0;
		default:
			fprintf(stderr, "usage: %s [-p prov] [-t substring] [-l]\n", argv[0]);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		if (only && !strstr(tests[i].name, only))
			continue;
		ran++;
		if (setjmp(fail_jmp) == 0) {
			tests[i].fn();
			printf("PASS %s\n", tests[i].name);
			passed++;
		} else {
			printf("FAIL %s: %s\n", tests[i].name, fail_msg);
			failed++;
		}
		teardown();
	}
	if (!ran) {
		fprintf(stderr, "no test matches '%s'\n", only);
		return 2;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
