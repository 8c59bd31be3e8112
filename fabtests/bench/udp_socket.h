/*
 * udp_socket.h: what the raw-UDP anchors (udp_gso_bw, udp_pingpong) share.
 * vmsplice and splice need _GNU_SOURCE before the first system header.
 */
#ifndef UET_BENCH_UDP_SOCKET_H
#define UET_BENCH_UDP_SOCKET_H

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* Pipe room for one spliced payload: 65000 bytes span up to 17 pages,
 * beyond the 16 slots of a default pipe. */
#define UDP_SPLICE_PIPE_BYTES (256 << 10)

/* Receive and send buffers of `bytes` each: beyond net.core.rmem_max and
 * wmem_max where the caller may (root: the FORCE options), else as far as
 * those limits allow. 0, or -1 with errno set by the failing call. */
static inline int udp_socket_buffers(int fd, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) &&
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes))
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) &&
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes))
		return -1;
	return 0;
}

/* A pipe for udp_splice_send in p[0] (read end) and p[1]. 0, or -1 with
 * errno set. */
static inline int udp_splice_pipe(int p[2])
{
	if (pipe2(p, O_CLOEXEC))
		return -1;
	if (fcntl(p[1], F_SETPIPE_SZ, UDP_SPLICE_PIPE_BYTES) < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	return 0;
}

/* One datagram on the connected socket fd, as uet's network path sends a
 * large one (FI_UET_SPLICE_BYTES): the header starts a corked datagram, the
 * payload's pages go into the pipe by reference (vmsplice) and the splice
 * into the socket, without SPLICE_F_MORE, completes it. The kernel copies
 * no payload byte; the pages must stay unchanged until the receiver has
 * read the datagram. 0, or -1 with errno set; after a failure a header
 * may stay corked and pages in the pipe, so the caller stops. */
static inline int udp_splice_send(int fd, const int p[2], const void *header,
				  size_t header_len, const void *payload, size_t n)
{
	struct iovec v = { (void *)payload, n };

	if (send(fd, header, header_len, n ? MSG_MORE : 0) != (ssize_t)header_len)
		return -1;
	while (v.iov_len) {
		ssize_t r = vmsplice(p[1], &v, 1, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		v.iov_base = (char *)v.iov_base + r;
		v.iov_len -= r;
	}
	for (size_t left = n; left;) {
		ssize_t r = splice(p[0], NULL, fd, NULL, left, 0);

		if (r < 0 && errno != EINTR)
			return -1;
		if (r > 0)
			left -= r;
	}
	return 0;
}

#endif
