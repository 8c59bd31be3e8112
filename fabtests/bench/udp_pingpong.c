/*
 * udp_pingpong: raw UDP ping-pong of large messages over loopback, the
 * reference for a transport whose receiver copies each byte once.
 * sockperf and iperf3 anchor small-message latency and streaming; neither
 * moves a 4 MiB message back and forth. Here two processes (this one and a
 * child) exchange a message of the given size in datagrams of 65000
 * payload bytes behind a 24-byte header: the
 * sender splices each payload (vmsplice into a pipe behind the corked
 * header, splice into the socket, as uet's network path does for large
 * datagrams, FI_UET_SPLICE_BYTES) and the receiver lands each payload
 * straight in the message buffer at its offset (one recvmsg, two iovecs).
 * Nothing else runs: no acknowledgements, no flow control, no loss
 * recovery: what raw UDP moves when it sends as uet does and does nothing
 * else (an anchor, not a strict bound: a tuned transport can match it).
 *
 *   udp_pingpong [-S size[,size...]] [-I iterations] [-c]
 *
 * -c sends with a copying sendmsg instead (two copies per byte, as tcp and
 * plain UDP make). Each size runs 5 untimed round trips, then -I timed
 * ones (default: 1 GiB each way, between 20 and 20000). Prints one line
 * per size:
 *
 *   size iterations one_way_us MB/s
 *
 * where MB/s is 10^6 bytes of message per second one way, as fi_pingpong
 * counts it. With no flow control, a message must fit in the receiver's
 * socket buffer: a size that does not (not root, net.core.rmem_max too
 * small) is skipped with a line on stderr, and when no size fits the run
 * ends with exit status 77 before anything is sent. A lost,
 * reordered or truncated datagram, or a side silent for 2 s, ends it with
 * status 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "udp_socket.h"

#define PAYLOAD 65000
#define MAX_SIZES 32
#define WARMUP 5
#define QUIET_S 2.0
/* Socket memory a datagram takes beyond its payload, generously: its skb
 * and head, and the rest of the pages its payload touches should they be
 * charged whole (65000 bytes span up to 17 pages, 69632 bytes). */
#define PER_DATAGRAM_OVERHEAD 8192

struct header {
	uint64_t iteration;
	uint64_t offset;
	uint64_t size;
};

static int copy_sends;
static int splice_pipe[2] = { -1, -1 };
static const char *side = "client";

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "udp_pingpong (%s): %s: %s\n", side, what, strerror(errno));
	exit(1);
}

static void fail(const char *fmt, unsigned long long a, unsigned long long b)
{
	fprintf(stderr, "udp_pingpong (%s): ", side);
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
	exit(1);
}

static size_t datagrams(size_t size)
{
	return size ? (size + PAYLOAD - 1) / PAYLOAD : 1;
}

/* Bytes of receive buffer a whole message of `size` needs. */
static size_t rcvbuf_needed(size_t size)
{
	return size + datagrams(size) * PER_DATAGRAM_OVERHEAD;
}

/* A socket bound to an ephemeral loopback port, with buffers for `need`
 * bytes in flight; the buffer it got in *got. */
static int udp_socket(size_t need, int *got)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof *got;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	/* The kernel sets twice what it is asked for: room to spare, since
	 * past half of it the kernel treats the queue as under pressure. */
	int want = need > (size_t)INT32_MAX / 2 ? INT32_MAX / 2 : (int)need;

	if (fd < 0)
		die("socket");
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a))
		die("bind");
	if (udp_socket_buffers(fd, want))
		die("socket buffers");
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, got, &len))
		die("getsockopt SO_RCVBUF");
	return fd;
}

static void join(int fd, int peer)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;

	if (getsockname(peer, (struct sockaddr *)&a, &len))
		die("getsockname");
	if (connect(fd, (struct sockaddr *)&a, len))
		die("connect");
}

static void send_datagram(int fd, const struct header *h, const char *payload, size_t n)
{
	if (copy_sends) {
		struct iovec iov[2] = { { (void *)h, sizeof *h }, { (void *)payload, n } };
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };

		while (sendmsg(fd, &m, 0) < 0)
			if (errno != EINTR && errno != ENOBUFS)
				die("sendmsg");
		return;
	}
	if (udp_splice_send(fd, splice_pipe, h, sizeof *h, payload, n))
		die("splice (try -c)");
}

static void send_message(int fd, const char *buf, size_t size, uint64_t iteration)
{
	size_t off = 0;

	do {
		size_t n = size - off < PAYLOAD ? size - off : PAYLOAD;
		struct header h = { iteration, off, size };

		send_datagram(fd, &h, buf + off, n);
		off += n;
	} while (off < size);
}

static void recv_message(int fd, char *buf, size_t size, uint64_t iteration)
{
	size_t off = 0;
	double quiet_since = 0;

	/* Until the datagram that completes the message (an empty message
	 * is one datagram too). */
	for (;;) {
		struct header h;
		size_t room = size - off < PAYLOAD ? size - off : PAYLOAD;
		struct iovec iov[2] = { { &h, sizeof h }, { buf + off, room } };
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
		ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT);

		if (r < 0) {
			if (errno != EAGAIN && errno != EINTR)
				die("recvmsg");
			/* Busy-poll, as the providers do. */
			double t = now_s();
			if (!quiet_since)
				quiet_since = t;
			else if (t - quiet_since > QUIET_S)
				fail("no datagram for 2 s at offset %llu of a %llu-byte message",
				     off, size);
			continue;
		}
		quiet_since = 0;
		if (m.msg_flags & MSG_TRUNC || r < (ssize_t)sizeof h)
			fail("datagram of %llu bytes does not fit at offset %llu",
			     (unsigned long long)r, off);
		if (h.iteration != iteration || h.size != size || h.offset != off) {
			fprintf(stderr, "udp_pingpong (%s): datagram of round trip %llx, "
				"message size %llu, offset %llu where round trip %llx, size %zu, "
				"offset %zu was due (lost or reordered)\n", side,
				(unsigned long long)h.iteration, (unsigned long long)h.size,
				(unsigned long long)h.offset, (unsigned long long)iteration,
				size, off);
			exit(1);
		}
		off += r - sizeof h;
		if (off >= size)
			return;
	}
}

static int parse_sizes(const char *arg, size_t *sizes)
{
	int n = 0;
	char *copy = strdup(arg), *save = NULL;

	if (!copy)
		die("strdup");
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long long v = strtoull(t, &end, 0);
		int shift = 0, digits = end != t && *t != '-';

		if (*end == 'k' || *end == 'K')
			shift = 10, end++;
		else if (*end == 'm' || *end == 'M')
			shift = 20, end++;
		if (!digits || *end || n == MAX_SIZES || v > (1ull << 30) >> shift) {
			fprintf(stderr, "udp_pingpong: bad size '%s' (at most %d sizes of up to 1 GiB)\n",
				t, MAX_SIZES);
			exit(2);
		}
		sizes[n++] = v << shift;
	}
	free(copy);
	return n;
}

static unsigned long iterations_for(size_t size, unsigned long fixed)
{
	unsigned long n;

	if (fixed)
		return fixed;
	n = size ? (1ul << 30) / size : 20000;
	return n < 20 ? 20 : n > 20000 ? 20000 : n;
}

/* One side of the exchange over every size: the client sends first and
 * times; the server answers. */
static int run(int fd, int client, const size_t *sizes, int nsizes, unsigned long fixed)
{
	size_t largest = 0;
	char *tx, *rx;

	/* Each side its own pipe: the payload passes through it. */
	if (!copy_sends && udp_splice_pipe(splice_pipe))
		die("pipe for splicing (try -c)");
	for (int i = 0; i < nsizes; i++)
		largest = sizes[i] > largest ? sizes[i] : largest;
	/* Page-aligned, as an application's large buffers are, and written
	 * first: unwritten pages are the shared zero page. */
	if (posix_memalign((void **)&tx, 4096, largest + 1) ||
	    posix_memalign((void **)&rx, 4096, largest + 1))
		die("posix_memalign");
	memset(tx, client ? 0x5a : 0xa5, largest + 1);
	memset(rx, 0, largest + 1);
	for (int i = 0; i < nsizes; i++) {
		size_t size = sizes[i];
		unsigned long iters = iterations_for(size, fixed);
		double t0 = 0;

		for (unsigned long k = 0; k < WARMUP + iters; k++) {
			uint64_t it = (uint64_t)i << 32 | k;

			if (k == WARMUP)
				t0 = now_s();
			if (client) {
				send_message(fd, tx, size, it);
				recv_message(fd, rx, size, it);
			} else {
				recv_message(fd, rx, size, it);
				send_message(fd, tx, size, it);
			}
		}
		if (client) {
			double one_way = (now_s() - t0) / iters / 2;

			printf("%zu %lu %.2f %.2f\n", size, iters, one_way * 1e6,
			       size / one_way / 1e6);
			fflush(stdout);
		}
	}
	free(tx);
	free(rx);
	return 0;
}

int main(int argc, char **argv)
{
	size_t sizes[MAX_SIZES] = { 4 << 20 };
	int nsizes = 1, c, a, b, got_a, got_b, status;
	unsigned long fixed = 0;
	size_t need = 0;
	pid_t child;

	while ((c = getopt(argc, argv, "S:I:c")) != -1) {
		switch (c) {
		case 'S':
			nsizes = parse_sizes(optarg, sizes);
			break;
		case 'I': {
			char *end;

			errno = 0;
			fixed = strtoul(optarg, &end, 0);
			/* The round-trip number keeps 32 bits beside the size's
			 * index. */
			if (errno || end == optarg || *end || *optarg == '-' ||
			    fixed > UINT32_MAX - WARMUP) {
				fprintf(stderr, "udp_pingpong: bad iteration count '%s'\n", optarg);
				return 2;
			}
			break;
		}
		case 'c':
			copy_sends = 1;
			break;
		default:
			fprintf(stderr, "usage: udp_pingpong [-S size[,size...]] [-I iterations] [-c]\n");
			return 2;
		}
	}
	if (nsizes == 0) {
		fprintf(stderr, "udp_pingpong: no sizes\n");
		return 2;
	}
	for (int i = 0; i < nsizes; i++)
		need = rcvbuf_needed(sizes[i]) > need ? rcvbuf_needed(sizes[i]) : need;
	a = udp_socket(need, &got_a);
	b = udp_socket(need, &got_b);
	/* What getsockopt reports is what the queued datagrams' memory
	 * (payload and skb, PER_DATAGRAM_OVERHEAD) is held against. */
	{
		size_t got = (size_t)(got_a < got_b ? got_a : got_b);
		int kept = 0;

		for (int i = 0; i < nsizes; i++) {
			if (rcvbuf_needed(sizes[i]) <= got) {
				sizes[kept++] = sizes[i];
				continue;
			}
			fprintf(stderr, "udp_pingpong: skipping %zu bytes: a message needs %zu bytes "
				"of receive buffer, the socket got %zu (run as root or raise "
				"net.core.rmem_max)\n", sizes[i], rcvbuf_needed(sizes[i]), got);
		}
		if (!kept)
			return 77;
		nsizes = kept;
	}
	join(a, b);
	join(b, a);
	fflush(stdout);
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		side = "server";
		close(a);
		/* The client's death (a failure) ends the server too. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM))
			die("prctl");
		_exit(run(b, 0, sizes, nsizes, fixed));
	}
	close(b);
	run(a, 1, sizes, nsizes, fixed);
	if (waitpid(child, &status, 0) < 0)
		die("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "udp_pingpong: the server side failed (status %d)\n", status);
		return 1;
	}
	return 0;
}
