/*
 * uet_matrix: one host of a connection-matrix run (uet-emu run).
 *
 *   uet_matrix --host I --hosts N --flows FILE --dir DIR [--timeout S]
 *
 * Written against the plain libfabric API (RDM endpoint, tagged messages);
 * the provider comes from FI_PROVIDER (uet in the runner). FILE lists the
 * flows, one per line: "id src dst bytes start_ns ndeps dep...". This host
 * sends the flows whose src is I (tag = flow id) once their start time has
 * come and the flows they wait for have completed here, and pre-posts a
 * receive for every flow whose dst is I.
 *
 * Coordination through files in DIR (the runner watches them):
 *   addr.I    this endpoint's address (fi_getname, hex)
 *   ready.I   every address inserted, every receive posted
 *   go        written by the runner: the common start, CLOCK_REALTIME ns
 *   result.I  "send id start_ns done_ns", "recv id done_ns", then "status ok"
 *   stop      written by the runner once every host has a result; until
 *             then the host keeps progressing so its peers get their ACKs.
 * Times are CLOCK_REALTIME ns, comparable across the hosts of one machine.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define API_VERSION FI_VERSION(1, 5)

struct flow {
	uint64_t id;
	int src, dst;
	uint64_t bytes;
	uint64_t start_ns; /* after the common start */
	int ndeps;
	uint64_t *deps;
	/* this host's view */
	int posted, done;
	uint64_t t_start, t_done;
	struct fi_context2 ctx;
};

static int me = -1, nhosts;
static const char *dir;
static struct flow *flows;
static size_t nflows;

static void die(const char *fmt, ...)
{
	char path[4096];
	va_list ap;
	FILE *f;

	fprintf(stderr, "uet_matrix host %d: ", me);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (dir) {
		snprintf(path, sizeof path, "%s/result.%d", dir, me);
		f = fopen(path, "a");
		if (f) {
			fprintf(f, "status error\n");
			fclose(f);
		}
	}
	exit(1);
}

#define CHECK(call)                                                         \
	do {                                                                \
		int rc_ = (int)(call);                                      \
		if (rc_)                                                    \
			die("%s: %s (%d)", #call, fi_strerror(-rc_), rc_);  \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void path_of(char *buf, size_t len, const char *name, int host)
{
	if (host >= 0)
		snprintf(buf, len, "%s/%s.%d", dir, name, host);
	else
		snprintf(buf, len, "%s/%s", dir, name);
}

/* Write a file atomically (write a temporary, rename it). */
static void put_file(const char *name, int host, const char *text)
{
	char path[4096], tmp[4200];
	FILE *f;

	path_of(path, sizeof path, name, host);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f))
		die("cannot write %s", tmp);
	if (rename(tmp, path))
		die("cannot rename %s", tmp);
}

/* Read a whole small file into buf; 0 when it exists. */
static int get_file(const char *name, int host, char *buf, size_t len)
{
	char path[4096];
	FILE *f;
	size_t n;

	path_of(path, sizeof path, name, host);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
	return 0;
}

static void read_flows(const char *file)
{
	FILE *f = fopen(file, "r");
	size_t cap = 0;
	struct flow fl;

	if (!f)
		die("cannot open %s", file);
	memset(&fl, 0, sizeof fl);
	while (fscanf(f, "%" SCNu64 " %d %d %" SCNu64 " %" SCNu64 " %d", &fl.id, &fl.src,
		      &fl.dst, &fl.bytes, &fl.start_ns, &fl.ndeps) == 6) {
		if (fl.id != nflows || fl.ndeps < 0 || fl.src < 0 || fl.dst < 0 ||
		    fl.src >= nhosts || fl.dst >= nhosts)
			die("bad flow line %zu in %s", nflows, file);
		fl.deps = calloc((size_t)fl.ndeps + 1, sizeof *fl.deps);
		if (!fl.deps)
			die("out of memory");
		for (int i = 0; i < fl.ndeps; i++)
			if (fscanf(f, "%" SCNu64, &fl.deps[i]) != 1 || fl.deps[i] >= fl.id)
				die("bad dependency in flow %zu", nflows);
		if (nflows == cap) {
			cap = cap ? 2 * cap : 64;
			flows = realloc(flows, cap * sizeof *flows);
			if (!flows)
				die("out of memory");
		}
		flows[nflows++] = fl;
		memset(&fl, 0, sizeof fl);
	}
	fclose(f);
	if (!nflows)
		die("no flows in %s", file);
}

static struct fid_cq *cq;

/* Drain the CQ; mark flows done. Returns the number of completions. While
 * none has come, wait up to timeout_ms for one (0: do not wait). */
static int progress_wait(int timeout_ms)
{
	struct fi_cq_tagged_entry e[16];
	ssize_t n;
	int total = 0;

	for (;;) {
		if (timeout_ms > 0 && !total)
			n = fi_cq_sread(cq, e, 16, NULL, timeout_ms);
		else
			n = fi_cq_read(cq, e, 16);
		if (n == -FI_EAGAIN)
			return total;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err;

			memset(&err, 0, sizeof err);
			fi_cq_readerr(cq, &err, 0);
			die("completion error: %s (%d)", fi_strerror(err.err), err.err);
		}
		if (n < 0)
			die("fi_cq_read: %s", fi_strerror((int)-n));
		for (ssize_t i = 0; i < n; i++) {
			struct flow *fl = NULL;

			for (size_t k = 0; k < nflows; k++)
				if (&flows[k].ctx == e[i].op_context)
					fl = &flows[k];
			if (!fl)
				die("completion with an unknown context");
			fl->done = 1;
			fl->t_done = now_ns();
		}
		total += (int)n;
	}
}

static int progress(void)
{
	return progress_wait(0);
}

int main(int argc, char **argv)
{
	const char *flows_file = NULL;
	double timeout_s = 60;
	struct fi_info *hints, *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep;
	fi_addr_t *peer;
	char name[256], text[1024];
	size_t namelen = sizeof name;
	uint64_t sbytes = 1, rbytes = 1, go = 0, deadline;
	char *sbuf, *rbuf;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--host"))
			me = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--hosts"))
			nhosts = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--flows"))
			flows_file = argv[i + 1];
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--timeout"))
			timeout_s = atof(argv[i + 1]);
		else
			die("unknown option %s", argv[i]);
	}
	if (me < 0 || nhosts < 2 || me >= nhosts || !flows_file || !dir)
		die("usage: uet_matrix --host I --hosts N --flows FILE --dir DIR [--timeout S]");
	read_flows(flows_file);
	for (size_t k = 0; k < nflows; k++) {
		if (flows[k].src == me && flows[k].bytes > sbytes)
			sbytes = flows[k].bytes;
		if (flows[k].dst == me && flows[k].bytes > rbytes)
			rbytes = flows[k].bytes;
	}
	/* One buffer each way: the contents do not matter, only the timing. */
	sbuf = calloc(1, sbytes);
	rbuf = calloc(1, rbytes);
	if (!sbuf || !rbuf)
		die("out of memory");

	hints = fi_allocinfo();
	if (!hints)
		die("fi_allocinfo");
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_MSG;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = 0;
	CHECK(fi_getinfo(API_VERSION, NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	{
		/* A wait object: between packets a host sleeps in fi_cq_sread
		 * instead of spinning, so a dozen hosts on two cores leave the
		 * CPU to whichever host (or the relay) has work. */
		struct fi_cq_attr ca = { .size = 1024, .format = FI_CQ_FORMAT_TAGGED,
					 .wait_obj = FI_WAIT_UNSPEC };
		struct fi_av_attr aa = { .type = FI_AV_TABLE, .count = (size_t)nhosts };

		CHECK(fi_cq_open(domain, &ca, &cq, NULL));
		CHECK(fi_av_open(domain, &aa, &av, NULL));
	}
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	CHECK(fi_getname(&ep->fid, name, &namelen));
	{
		char hex[600];

		for (size_t i = 0; i < namelen && i < 256; i++)
			sprintf(hex + 2 * i, "%02x", (unsigned char)name[i]);
		hex[2 * namelen] = '\n';
		hex[2 * namelen + 1] = 0;
		put_file("addr", me, hex);
	}

	/* Everyone's address, in host order. */
	peer = calloc((size_t)nhosts, sizeof *peer);
	if (!peer)
		die("out of memory");
	deadline = now_ns() + (uint64_t)(timeout_s * 1e9);
	for (int h = 0; h < nhosts; h++) {
		unsigned char addr[256];
		size_t len = 0;

		while (get_file("addr", h, text, sizeof text)) {
			if (now_ns() > deadline)
				die("no address from host %d", h);
			usleep(2000);
		}
		for (char *p = text; p[0] && p[1] && p[0] != '\n' && len < sizeof addr; p += 2) {
			unsigned v;

			if (sscanf(p, "%2x", &v) != 1)
				die("bad address file of host %d", h);
			addr[len++] = (unsigned char)v;
		}
		if (fi_av_insert(av, addr, 1, &peer[h], 0, NULL) != 1)
			die("fi_av_insert of host %d failed", h);
	}
	for (size_t k = 0; k < nflows; k++) {
		struct flow *fl = &flows[k];
		ssize_t rc;

		if (fl->dst != me)
			continue;
		while ((rc = fi_trecv(ep, rbuf, fl->bytes, NULL, peer[fl->src], fl->id, 0,
				      &fl->ctx)) == -FI_EAGAIN)
			progress();
		if (rc)
			die("fi_trecv flow %zu: %s", k, fi_strerror((int)-rc));
		fl->posted = 1;
	}
	put_file("ready", me, "1\n");
	while (get_file("go", -1, text, sizeof text) || sscanf(text, "%" SCNu64, &go) != 1) {
		if (now_ns() > deadline)
			die("no go from the runner");
		progress();
		usleep(1000);
	}

	deadline = go + (uint64_t)(timeout_s * 1e9);
	for (;;) {
		int pending = 0;
		uint64_t t = now_ns(), next_start = UINT64_MAX;
		int refused = 0;

		for (size_t k = 0; k < nflows; k++) {
			struct flow *fl = &flows[k];
			int ready = 1;
			ssize_t rc;

			if (fl->src != me && fl->dst != me)
				continue;
			if (!fl->done)
				pending++;
			if (fl->src != me || fl->posted)
				continue;
			if (t < go + fl->start_ns) {
				if (go + fl->start_ns < next_start)
					next_start = go + fl->start_ns;
				continue;
			}
			for (int d = 0; d < fl->ndeps; d++)
				if (!flows[fl->deps[d]].done)
					ready = 0;
			if (!ready)
				continue;
			fl->t_start = now_ns();
			rc = fi_tsend(ep, sbuf, fl->bytes, NULL, peer[fl->dst], fl->id, &fl->ctx);
			if (rc == -FI_EAGAIN) {
				refused = 1;
				continue;
			}
			if (rc)
				die("fi_tsend flow %zu: %s", k, fi_strerror((int)-rc));
			fl->posted = 1;
		}
		if (!pending)
			break;
		/* Sleep until a completion, a packet or a timer (fi_cq_sread
		 * waits in whole milliseconds, so the last one before a
		 * flow's start time is spent polling). */
		{
			uint64_t t2 = now_ns();
			int ms = 10;

			if (next_start != UINT64_MAX)
				ms = next_start > t2 + 2000000 ?
					     (int)((next_start - t2) / 1000000) - 1 : 0;
			if (ms > 10)
				ms = 10;
			if (refused)
				ms = 0;
			if (!progress_wait(ms) && !ms)
				sched_yield();
		}
		if (now_ns() > deadline)
			die("timed out with %d flows pending", pending);
	}

	{
		char path[4096], tmp[4200];
		FILE *f;

		path_of(path, sizeof path, "result", me);
		snprintf(tmp, sizeof tmp, "%s.tmp", path);
		f = fopen(tmp, "w");
		if (!f)
			die("cannot write %s", tmp);
		for (size_t k = 0; k < nflows; k++) {
			struct flow *fl = &flows[k];

			if (fl->src == me)
				fprintf(f, "send %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", fl->id,
					fl->t_start, fl->t_done);
			else if (fl->dst == me)
				fprintf(f, "recv %" PRIu64 " %" PRIu64 "\n", fl->id, fl->t_done);
		}
		fprintf(f, "status ok\n");
		if (fclose(f) || rename(tmp, path))
			die("cannot write %s", path);
	}
	/* Keep answering peers until the runner says everyone is done. */
	deadline = now_ns() + (uint64_t)(timeout_s * 1e9);
	while (get_file("stop", -1, text, sizeof text) && now_ns() < deadline) {
		progress();
		usleep(100);
	}
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
