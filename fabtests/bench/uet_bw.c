/*
 * uet_bw: streaming bandwidth of a libfabric RDM provider through the public
 * fi_* API, in the manner of libfabric's bandwidth benchmarks: the sender
 * keeps a window of sends outstanding, the receiver a window of receives.
 *
 *   server: uet_bw -p <prov> [-m msg|tagged] [-w] [-L] -B <ctrl port>
 *   client: uet_bw -p <prov> [-m msg|tagged] [-w] [-L] -P <ctrl port>
 *                  [-S s1,s2,..] [-W window] [-b bytes per size]
 *                  [-I max iters] 127.0.0.1
 *
 * -w waits for completions in fi_cq_sread (the CQ gets a wait object)
 * instead of polling fi_cq_read, as an application that blocks does.
 * -L measures latency instead: the two sides take turns, one message each
 * way per iteration (a ping-pong; each side's send completions are reaped
 * as they come, not waited for before the next message), after one untimed
 * round trip. Both sides must be given the same -L and -w.
 *
 * A TCP control connection carries the endpoint names and, per size, the
 * parameters, a "receives posted" signal and the receiver's "all received"
 * answer with the CPU time it spent. The client times from its first send
 * to that answer and prints one line per size:
 *
 *   size iters seconds MB/s cpu_s_per_GB         (streaming)
 *   size iters seconds us_one_way cpu_us_per_rt  (-L)
 *
 * where MB/s is 10^6 bytes per second of payload, cpu_s_per_GB is the
 * user+system CPU time of both processes (all threads) per 10^9 bytes, and
 * cpu_us_per_rt that time per round trip.
 * Exit status is non-zero on any error; every wait has a deadline (-T).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

#define MAX_SIZES 32
#define MAX_WINDOW 1024
#define BW_TAG 0x5eedULL

static const char *prov = "uet";
static int tagged;
static int blocking; /* -w: fi_cq_sread */
static int latency;  /* -L: ping-pong */
static double deadline_s = 60.0;

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_mr *mr;
static void *desc;
static fi_addr_t peer;
static struct fi_info *info;
/* Sends read the first half, receives land in the second: a ping-pong
 * side has one of each outstanding. */
static char *buf;
static size_t half;
/* Operation contexts (the provider may use them, FI_CONTEXT2); which
 * array a completion's context lies in says its direction. */
static struct fi_context2 send_ctx[MAX_WINDOW], recv_ctx[MAX_WINDOW];

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "uet_bw (%s): ", prov);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CHECK(call)                                                          \
	do {                                                                 \
		int rc_ = (int)(call);                                       \
		if (rc_)                                                     \
			die("%s: %s", #call, fi_strerror(-rc_));             \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* ---------------------------------------------------------------- */
/* Control connection: fixed-size records, polled so that the fabric  */
/* keeps progressing while we wait for the peer.                      */

struct ctrl {
	uint64_t a, b, c;
	double d;
};

static int ctrl_fd = -1;

static void ctrl_send(const struct ctrl *m)
{
	if (write(ctrl_fd, m, sizeof *m) != (ssize_t)sizeof *m)
		die("control write: %s", strerror(errno));
}

static int progress(void);

static void ctrl_recv(struct ctrl *m)
{
	size_t got = 0;
	double end = now_s() + deadline_s;

	while (got < sizeof *m) {
		struct pollfd p = { .fd = ctrl_fd, .events = POLLIN };

		if (now_s() > end)
			die("timed out waiting for the peer's control message");
		if (poll(&p, 1, 0) == 1) {
			ssize_t n = read(ctrl_fd, (char *)m + got, sizeof *m - got);

			if (n <= 0)
				die("control connection closed by the peer");
			got += n;
		} else {
			progress();
		}
	}
}

static void ctrl_connect(const char *host, int port, int server)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1;

	inet_pton(AF_INET, server ? "127.0.0.1" : host, &sa.sin_addr);
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1))
			die("control listen on %d: %s", port, strerror(errno));
		ctrl_fd = accept(l, NULL, NULL);
		close(l);
	} else {
		double end = now_s() + 10;

		for (;;) {
			ctrl_fd = socket(AF_INET, SOCK_STREAM, 0);
			if (!connect(ctrl_fd, (struct sockaddr *)&sa, sizeof sa))
				break;
			close(ctrl_fd);
			ctrl_fd = -1;
			if (now_s() > end)
				break;
			usleep(20000);
		}
	}
	if (ctrl_fd < 0)
		die("control connection: %s", strerror(errno));
	setsockopt(ctrl_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---------------------------------------------------------------- */
/* Fabric                                                            */

static void fabric_open(size_t max_size)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT,
				      .wait_obj = blocking ? FI_WAIT_UNSPEC : FI_WAIT_NONE };
	struct fi_av_attr av_attr = { .type = FI_AV_MAP };

	if (!hints)
		die("fi_allocinfo");
	hints->caps = tagged ? FI_TAGGED : FI_MSG;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, 0, hints, &info));
	fi_freeinfo(hints);
	if (info->ep_attr->max_msg_size < max_size)
		die("largest size %zu exceeds the provider's max_msg_size %zu", max_size,
		    info->ep_attr->max_msg_size);

	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	cq_attr.size = 4 * MAX_WINDOW;
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_enable(ep));

	half = max_size ? max_size : 1;
	buf = calloc(2, half);
	if (!buf)
		die("cannot allocate 2 x %zu bytes", half);
	/* Written, as an application's data is: pages never written are the
	 * kernel's shared zero page, which a provider that pins pages (splice)
	 * takes by a slower path than real memory and one that copies does not. */
	memset(buf, 0x5a, 2 * half);
	if (info->domain_attr->mr_mode & FI_MR_LOCAL) {
		CHECK(fi_mr_reg(domain, buf, 2 * half, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
		if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
			CHECK(fi_mr_bind(mr, &ep->fid, 0));
			CHECK(fi_mr_enable(mr));
		}
		desc = fi_mr_desc(mr);
	}
}

static void exchange_names(int server)
{
	char name[256];
	size_t len = sizeof name;
	struct ctrl m = { 0 };
	char peer_name[256];

	CHECK(fi_getname(&ep->fid, name, &len));
	m.a = len;
	if (server) {
		ctrl_recv(&m);
		if (m.a > sizeof peer_name || read(ctrl_fd, peer_name, m.a) != (ssize_t)m.a)
			die("bad peer name");
		m.a = len;
		ctrl_send(&m);
		if (write(ctrl_fd, name, len) != (ssize_t)len)
			die("control write");
	} else {
		ctrl_send(&m);
		if (write(ctrl_fd, name, len) != (ssize_t)len)
			die("control write");
		ctrl_recv(&m);
		if (m.a > sizeof peer_name || read(ctrl_fd, peer_name, m.a) != (ssize_t)m.a)
			die("bad peer name");
	}
	if (fi_av_insert(av, peer_name, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert failed");
}

/* Completions seen since the last reset, split by direction. */
static uint64_t sends_done, recvs_done;

/* Reap completions; with -w and `wait` set, sleep in fi_cq_sread up to
 * 100 ms for the first (the callers' deadlines are checked between). */
static int reap(int wait)
{
	struct fi_cq_entry e[64];
	ssize_t n;

	if (!cq) /* control traffic before the fabric is open */
		return 0;
	n = wait && blocking ? fi_cq_sread(cq, e, 64, NULL, 100) : fi_cq_read(cq, e, 64);

	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(cq, &err, 0);
		die("completion error: %s (prov errno %d)", fi_strerror(err.err),
		    err.prov_errno);
	}
	if (n < 0)
		die("fi_cq_read: %s", fi_strerror((int)-n));
	for (ssize_t i = 0; i < n; i++) {
		struct fi_context2 *c = e[i].op_context;

		if (c >= send_ctx && c < send_ctx + MAX_WINDOW)
			sends_done++;
		else
			recvs_done++;
	}
	return (int)n;
}

static int progress(void)
{
	return reap(0);
}

/* Wait for the next completion: poll, or sleep with -w. */
static int await_completion(void)
{
	return reap(1);
}

static void post(int send, size_t size, unsigned slot)
{
	struct fi_context2 *c = send ? &send_ctx[slot] : &recv_ctx[slot];
	double end = now_s() + deadline_s;
	ssize_t rc;

	for (;;) {
		if (send)
			rc = tagged ? fi_tsend(ep, buf, size, desc, peer, BW_TAG, c)
				    : fi_send(ep, buf, size, desc, peer, c);
		else
			rc = tagged ? fi_trecv(ep, buf + half, size, desc, peer, BW_TAG, 0, c)
				    : fi_recv(ep, buf + half, size, desc, peer, c);
		if (rc == 0)
			return;
		if (rc != -FI_EAGAIN)
			die("%s: %s", send ? "send" : "recv", fi_strerror((int)-rc));
		progress();
		if (now_s() > end)
			die("timed out posting a %s", send ? "send" : "recv");
	}
}

/* Receiver: tell the sender its first message has a receive waiting. */
static void receives_posted(void)
{
	struct ctrl ready = { 0 };

	ctrl_send(&ready);
}

/* Keep `window` operations outstanding until `iters` have completed. */
static void stream(int send, size_t size, uint64_t iters, unsigned window)
{
	uint64_t posted = 0;
	uint64_t *done = send ? &sends_done : &recvs_done;
	double end = now_s() + deadline_s;

	*done = 0;
	while (posted < iters && posted < window)
		post(send, size, posted++ % MAX_WINDOW);
	if (!send)
		receives_posted();
	while (*done < iters) {
		if (!await_completion() && now_s() > end)
			die("timed out at size %zu: %llu of %llu %s complete", size,
			    (unsigned long long)*done, (unsigned long long)iters,
			    send ? "sends" : "receives");
		while (posted < iters && posted - *done < window)
			post(send, size, posted++ % MAX_WINDOW);
	}
}

/* Wait until `*done` reaches `target`, or die at the deadline. */
static void await_count(const uint64_t *done, uint64_t target, size_t size, const char *what)
{
	double end = now_s() + deadline_s;

	while (*done < target)
		if (!await_completion() && now_s() > end)
			die("timed out at size %zu waiting for %s %llu", size, what,
			    (unsigned long long)target);
}

/* Ping-pong: the client sends first, the server answers each message. A
 * receive is always posted before the message it takes can arrive. One
 * untimed round trip first (connection and delivery-context set-up);
 * returns the seconds the other `iters` took. */
static double pingpong(int client, size_t size, uint64_t iters)
{
	double t0 = 0;

	iters++;
	sends_done = recvs_done = 0;
	post(0, size, 0);
	if (!client)
		receives_posted();
	for (uint64_t i = 0; i < iters; i++) {
		/* Send slots are reused round the window: reap the oldest. */
		if (i >= MAX_WINDOW)
			await_count(&sends_done, i - MAX_WINDOW + 1, size, "send");
		if (client)
			post(1, size, i % MAX_WINDOW);
		await_count(&recvs_done, i + 1, size, "receive");
		if (i == 0)
			t0 = now_s();
		if (i + 1 < iters)
			post(0, size, (i + 1) % MAX_WINDOW);
		if (!client)
			post(1, size, i % MAX_WINDOW);
	}
	await_count(&sends_done, iters, size, "send");
	return now_s() - t0;
}

/* -L and -w, as the client sends them for the server to check. */
static uint64_t mode_bits(void)
{
	return (uint64_t)(latency | blocking << 1);
}

static size_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	switch (*end) {
	case 'k': case 'K': v *= 1024; break;
	case 'm': case 'M': v *= 1024 * 1024; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
	}
	return (size_t)v;
}

int main(int argc, char **argv)
{
	size_t sizes[MAX_SIZES] = { 64, 4096, 65536, 1 << 20, 4 << 20 };
	int nsizes = 5, ctl_port = 47593, server, opt;
	unsigned window = 64;
	uint64_t bytes_per_size = 256ull << 20, max_iters = 20000;
	size_t max_size = 0;

	while ((opt = getopt(argc, argv, "p:m:B:P:S:W:b:I:T:wL")) != -1) {
		switch (opt) {
		case 'w': blocking = 1; break;
		case 'L': latency = 1; break;
		case 'p': prov = optarg; break;
		case 'm': tagged = !strcmp(optarg, "tagged"); break;
		case 'B': case 'P': ctl_port = atoi(optarg); break;
		case 'W': window = atoi(optarg); break;
		case 'b': bytes_per_size = parse_size(optarg); break;
		case 'I': max_iters = strtoull(optarg, NULL, 0); break;
		case 'T': deadline_s = atof(optarg); break;
		case 'S': {
			char *s = strdup(optarg), *tok, *save;

			nsizes = 0;
			for (tok = strtok_r(s, ",", &save); tok && nsizes < MAX_SIZES;
			     tok = strtok_r(NULL, ",", &save))
				sizes[nsizes++] = parse_size(tok);
			break;
		}
		default:
			fprintf(stderr, "usage: see the comment at the top of uet_bw.c\n");
			return 2;
		}
	}
	if (window < 1 || window > MAX_WINDOW)
		die("window must be 1..%d", MAX_WINDOW);
	server = optind >= argc;

	ctrl_connect(server ? NULL : argv[optind], ctl_port, server);
	/* The client's sizes travel to the server first. */
	if (server) {
		struct ctrl m;

		ctrl_recv(&m);
		nsizes = (int)m.a;
		if (nsizes > MAX_SIZES || read(ctrl_fd, sizes, nsizes * sizeof sizes[0]) !=
						  (ssize_t)(nsizes * sizeof sizes[0]))
			die("bad size list");
	} else {
		struct ctrl m = { .a = nsizes };

		ctrl_send(&m);
		if (write(ctrl_fd, sizes, nsizes * sizeof sizes[0]) !=
		    (ssize_t)(nsizes * sizeof sizes[0]))
			die("control write");
	}
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > max_size)
			max_size = sizes[i];
	fabric_open(max_size);
	exchange_names(server);
	if (!server)
		printf("%-10s %8s %10s %10s %12s\n", "size", "iters", "seconds",
		       latency ? "us_one_way" : "MB/s", latency ? "cpu_us/rt" : "cpu_s/GB");

	for (int i = 0; i < nsizes; i++) {
		size_t size = sizes[i];
		struct ctrl m = { 0 };

		if (server) {
			double cpu0;

			ctrl_recv(&m); /* iterations, window and mode for this size */
			if (m.c != mode_bits())
				die("the client's -L/-w differ from the server's");
			cpu0 = cpu_s();
			if (latency)
				pingpong(0, size, m.a);
			else
				stream(0, size, m.a, (unsigned)m.b);
			m.d = cpu_s() - cpu0;
			ctrl_send(&m);
		} else {
			uint64_t iters = size ? bytes_per_size / size : max_iters;
			unsigned w;
			double t0, t, cpu0, cpu;

			if (iters > max_iters)
				iters = max_iters;
			if (iters < 4)
				iters = 4;
			w = iters < window ? (unsigned)iters : window;
			m.a = iters;
			m.b = w;
			m.c = mode_bits();
			ctrl_send(&m);
			ctrl_recv(&m); /* receives posted */
			cpu0 = cpu_s();
			if (latency) {
				t = pingpong(1, size, iters);
				ctrl_recv(&m); /* the server's CPU time */
				cpu = cpu_s() - cpu0 + m.d;
				/* CPU per round trip (the untimed one too) */
				printf("%-10zu %8llu %10.4f %10.2f %12.2f\n", size,
				       (unsigned long long)iters, t, t / iters / 2 * 1e6,
				       cpu / (iters + 1) * 1e6);
			} else {
				t0 = now_s();
				stream(1, size, iters, w);
				ctrl_recv(&m); /* all received, with the server's CPU time */
				t = now_s() - t0;
				cpu = cpu_s() - cpu0 + m.d;
				printf("%-10zu %8llu %10.4f %10.2f %12.3f\n", size,
				       (unsigned long long)iters, t, iters * size / t / 1e6,
				       size ? cpu / (iters * size / 1e9) : 0.0);
			}
			fflush(stdout);
		}
	}

	/* Drain and close: the last sends may still be completing. */
	if (mr)
		fi_close(&mr->fid);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	free(buf);
	close(ctrl_fd);
	return 0;
}
