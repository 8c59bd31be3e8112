/*
 * udp_gso_bw: raw UDP streaming over loopback with the kernel's segmentation
 * offloads, the physical limit for a transport that sends small datagrams
 * in batches (uet with FI_UET_MTU=4096 does). iperf3 sends one datagram per
 * system call; this sends one segmented super-datagram per call
 * (UDP_SEGMENT, as many whole segments as fit in 64 KiB) and receives
 * coalesced ones (UDP_GRO), busy-polling like the providers do.
 *
 *   udp_gso_bw [-l segment bytes] [-t seconds] [-n | -s]
 *
 * -n turns both offloads off (one datagram per call, like iperf3). -s also
 * sends one datagram at a time, but splices its payload behind a corked
 * 64-byte header instead of copying it (three system calls: send, vmsplice
 * and splice, as uet's network path sends large datagrams,
 * FI_UET_SPLICE_BYTES): with -l 65000, the reference for uet's default
 * large datagrams on loopback. A sender
 * thread streams from a 1 MiB buffer for the given time; a receiver thread
 * copies nothing beyond the kernel's copy. Prints one line:
 *
 *   segment seconds MB/s_received cpu_s_per_GB sent_MB lost_percent
 *
 * where MB/s is 10^6 received bytes per second between the first and the
 * last arrival and cpu_s_per_GB is the process's user+system CPU time (both
 * threads) per 10^9 received bytes. Exit status is non-zero on any error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "udp_socket.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define MAX_UDP 65507
#define SEND_BUF (1 << 20)

static size_t segment = 4096;
static double duration = 2.0;
static int offload = 1;
static int splicing;
/* What a spliced datagram carries before its payload (-s): about uet's
 * headers. */
#define SPLICE_HEADER 64
static struct sockaddr_in dest;
static atomic_int sender_done;
static unsigned long long sent_bytes;

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "udp_gso_bw: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int udp_socket(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	int big = 16 << 20;

	if (fd < 0)
		die("socket");
	/* Deep buffers, as the providers ask for: the sender outruns a
	 * receiver that is descheduled for a moment. */
	if (udp_socket_buffers(fd, big))
		die("socket buffers");
	return fd;
}

static void *sender(void *arg)
{
	int fd = udp_socket();
	char *data = malloc(SEND_BUF);
	size_t per = offload ? (MAX_UDP / segment) * segment : segment;
	size_t off = 0;
	int seg = (int)segment;
	int pipe[2];
	double end;

	(void)arg;
	if (!data)
		die("malloc");
	memset(data, 0x5a, SEND_BUF);
	if (splicing && udp_splice_pipe(pipe))
		die("pipe for splicing");
	if (offload && setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof seg))
		die("UDP_SEGMENT");
	if (connect(fd, (struct sockaddr *)&dest, sizeof dest))
		die("connect");
	end = now_s() + duration;
	while (now_s() < end) {
		ssize_t n;

		if (off + per > SEND_BUF)
			off = 0;
		if (splicing) {
			/* The header is the buffer's first bytes: what it says
			 * does not matter here. A failed splice may leave a
			 * header corked: no retry. */
			if (udp_splice_send(fd, pipe, data, SPLICE_HEADER, data + off,
					    per - SPLICE_HEADER))
				die("splice");
			n = (ssize_t)per;
		} else
			n = send(fd, data + off, per, 0);
		if (n > 0) {
			sent_bytes += n;
			off += per;
		} else if (errno != ENOBUFS && errno != EAGAIN && errno != ECONNREFUSED) {
			die("send");
		}
	}
	atomic_store(&sender_done, 1);
	free(data);
	close(fd);
	if (splicing) {
		close(pipe[0]);
		close(pipe[1]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static char buf[1 << 16];
	unsigned long long received = 0;
	double first = 0, last = 0, quiet_since = 0;
	socklen_t len = sizeof dest;
	struct rusage ru;
	pthread_t tx;
	int fd, one = 1, c;

	while ((c = getopt(argc, argv, "l:t:ns")) != -1) {
		switch (c) {
		case 'l':
			segment = strtoul(optarg, NULL, 0);
			break;
		case 't':
			duration = atof(optarg);
			break;
		case 'n':
			offload = 0;
			break;
		case 's':
			offload = 0;
			splicing = 1;
			break;
		default:
			fprintf(stderr, "usage: udp_gso_bw [-l segment bytes] [-t seconds] [-n | -s]\n");
			return 2;
		}
	}
	if (segment < (splicing ? SPLICE_HEADER + 1 : 64) || segment > MAX_UDP || duration <= 0) {
		fprintf(stderr, "udp_gso_bw: segment must be %d..%d bytes, time positive\n",
			splicing ? SPLICE_HEADER + 1 : 64, MAX_UDP);
		return 2;
	}
	fd = udp_socket();
	dest.sin_family = AF_INET;
	dest.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&dest, sizeof dest) ||
	    getsockname(fd, (struct sockaddr *)&dest, &len))
		die("bind");
	if (offload && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one))
		die("UDP_GRO");
	if (pthread_create(&tx, NULL, sender, NULL))
		die("pthread_create");
	/* Busy-poll until the sender is done and the socket has been quiet for
	 * 100 ms. */
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
		double t;

		if (n > 0) {
			last = now_s();
			if (!first)
				first = last;
			received += n;
			quiet_since = 0;
			continue;
		}
		if (n < 0 && errno != EAGAIN)
			die("recv");
		if (!atomic_load(&sender_done))
			continue;
		t = now_s();
		if (!quiet_since)
			quiet_since = t;
		else if (t - quiet_since > 0.1)
			break;
	}
	pthread_join(tx, NULL);
	if (getrusage(RUSAGE_SELF, &ru))
		die("getrusage");
	if (!received || last <= first) {
		fprintf(stderr, "udp_gso_bw: nothing arrived\n");
		return 1;
	}
	{
		double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
			     ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
		double lost = sent_bytes ? 100.0 * (double)(sent_bytes - received) / sent_bytes : 0;

		printf("%zu %.3f %.0f %.3f %.0f %.2f\n", segment, last - first,
		       received / (last - first) / 1e6, cpu / (received / 1e9), sent_bytes / 1e6,
		       lost < 0 ? 0 : lost);
	}
	close(fd);
	return 0;
}
