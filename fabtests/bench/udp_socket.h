/*
 * udp_socket.h: what the raw-UDP anchors (udp_gso_bw, udp_pingpong) share.
 */
#ifndef UET_BENCH_UDP_SOCKET_H
#define UET_BENCH_UDP_SOCKET_H

#include <sys/socket.h>

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

#endif
