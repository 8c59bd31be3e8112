/*
 * uet_host_read: rendezvous sends between two processes of one host, with
 * same-host copies on (FI_UET_HOST_READ=1) and off, through the public API.
 *
 * For each mode the program forks a receiver and a sender process (each
 * opens its own fabric, so each reads the mode from its environment); they
 * exchange endpoint names over pipes. The sender sends messages past the
 * rendezvous threshold with 4 KiB packets:
 *   - one of 1 MiB first, which proves each side to the other (a copy is
 *     made only for a descriptor that returns a token the copier sent to
 *     the peer's address: the first is pulled over the network); it is not
 *     counted below,
 *   - one that arrives before its receive is posted (unexpected),
 *   - expected ones of 4 MiB and of odd lengths,
 *   - one received into two iovecs (a buffer in pieces: pulled over the
 *     network even with copies on).
 * The sender overwrites each buffer once its send completes, and the
 * receiver checks every byte. Its endpoint counters tell the modes
 * apart: with copies on, only the eager parts arrive as packets; with them
 * off, every payload byte does.
 *
 * Usage: uet_host_read [-p provider]. Prints PASS/FAIL lines and ends with
 * "N passed, N failed"; exit status 0 only when none failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_uet.h>

#define MTU 4096
/* The first WARMUP messages prove the two sides to each other; the last
 * goes into two iovecs. */
static const size_t sizes[] = {1 << 20, 3 << 20, 4 << 20, (1 << 20) + 123, 300000, 2 << 20};
#define NMSG (sizeof(sizes) / sizeof(sizes[0]))
#define WARMUP 1
#define SPLIT_MSG (NMSG - 1)

static const char *prov = "uet";

struct end {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_cq *cq;
	char name[64];
	size_t namelen;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned char pattern(size_t msg, size_t i)
{
	return (unsigned char)((i * 31 + msg * 7 + 1) % 251);
}

/* fi_* failures end the process: the parent reports them. */
static void must(const char *what, int rc)
{
	if (rc) {
		fprintf(stderr, "%s: %s\n", what, fi_strerror(-rc));
		exit(3);
	}
}

static void open_end(struct end *e)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_av_attr av_attr = {.type = FI_AV_MAP};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	must("fi_getinfo", fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &e->info));
	fi_freeinfo(hints);
	must("fi_fabric", fi_fabric(e->info->fabric_attr, &e->fabric, NULL));
	must("fi_domain", fi_domain(e->fabric, e->info, &e->domain, NULL));
	must("fi_av_open", fi_av_open(e->domain, &av_attr, &e->av, NULL));
	must("fi_cq_open", fi_cq_open(e->domain, &cq_attr, &e->cq, NULL));
	must("fi_endpoint", fi_endpoint(e->domain, e->info, &e->ep, NULL));
	must("fi_ep_bind av", fi_ep_bind(e->ep, &e->av->fid, 0));
	must("fi_ep_bind cq", fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
	must("fi_enable", fi_enable(e->ep));
	e->namelen = sizeof(e->name);
	must("fi_getname", fi_getname(&e->ep->fid, e->name, &e->namelen));
}

static void close_end(struct end *e)
{
	fi_close(&e->ep->fid);
	fi_close(&e->cq->fid);
	fi_close(&e->av->fid);
	fi_close(&e->domain->fid);
	fi_close(&e->fabric->fid);
	fi_freeinfo(e->info);
}

/* One completion (manual progress); 0, or a negative error after an error
 * completion or 30 s. */
static int wait_one(struct end *e)
{
	struct fi_cq_entry ent;
	struct fi_cq_err_entry err = {0};
	double deadline = now_s() + 30;
	ssize_t n;

	while (now_s() < deadline) {
		n = fi_cq_read(e->cq, &ent, 1);
		if (n == 1)
			return 0;
		if (n == -FI_EAVAIL) {
			fi_cq_readerr(e->cq, &err, 0);
			fprintf(stderr, "error completion: %s\n", fi_strerror(err.err));
			return -err.err;
		}
		if (n != -FI_EAGAIN)
			return (int)n;
	}
	return -FI_ETIMEDOUT;
}

static void progress(struct end *e)
{
	struct fi_cq_entry ent;
	fi_cq_read(e->cq, &ent, 0);
}

static int full_read(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static void sender(int name_in, int done_in)
{
	struct end e;
	char peer_name[64];
	size_t peer_len;
	fi_addr_t peer;
	char byte;

	open_end(&e);
	if (full_read(name_in, &peer_len, sizeof(peer_len)) || peer_len > sizeof(peer_name) ||
	    full_read(name_in, peer_name, peer_len))
		exit(4);
	if (fi_av_insert(e.av, peer_name, 1, &peer, 0, NULL) != 1)
		exit(4);
	for (size_t m = 0; m < NMSG; m++) {
		unsigned char *buf = malloc(sizes[m]);
		ssize_t rc;
		if (!buf)
			exit(5);
		for (size_t i = 0; i < sizes[m]; i++)
			buf[i] = pattern(m, i);
		while ((rc = fi_send(e.ep, buf, sizes[m], NULL, peer, NULL)) == -FI_EAGAIN)
			progress(&e);
		must("fi_send", (int)rc);
		must("send completion", wait_one(&e));
		/* The buffer is the application's again: reuse it, so that a
		 * receiver still copying from it would see. */
		memset(buf, 0xee, sizes[m]);
		free(buf);
	}
	/* Keep the endpoint up (it answers the receiver) until it is done. */
	if (full_read(done_in, &byte, 1))
		exit(6);
	close_end(&e);
	exit(0);
}

/* Receives the messages and checks them; returns the number of failed
 * checks (printed). */
static int receiver(int name_out, int done_out, int copies_on)
{
	const char *mode = copies_on ? "on" : "off";
	struct fi_uet_stats_ops *ops = NULL;
	struct fi_uet_ep_stats st, warm;
	size_t counted = 0;
	int bad = 0;
	struct end e;

	open_end(&e);
	if (write(name_out, &e.namelen, sizeof(e.namelen)) != sizeof(e.namelen) ||
	    write(name_out, e.name, e.namelen) != (ssize_t)e.namelen)
		exit(4);
	must("fi_open_ops", fi_open_ops(&e.ep->fid, FI_UET_STATS_OPS, 0, (void **)&ops, NULL));
	for (size_t m = 0; m < NMSG; m++) {
		unsigned char *buf = calloc(1, sizes[m]);
		size_t wrong = 0;
		ssize_t rc;
		if (!buf)
			exit(5);
		if (m == WARMUP) {
			/* Counters after the warm-up; the next message arrives
			 * before its receive is posted. */
			must("ep_stats", ops->ep_stats(e.ep, &warm));
			usleep(200000);
		}
		if (m == SPLIT_MSG) {
			size_t half = sizes[m] / 2 + 1000;
			struct iovec iov[2] = {{buf, half}, {buf + half, sizes[m] - half}};
			/* Counters before the message that is pulled. */
			must("ep_stats", ops->ep_stats(e.ep, &st));
			while ((rc = fi_recvv(e.ep, iov, NULL, 2, FI_ADDR_UNSPEC, NULL)) ==
			       -FI_EAGAIN)
				progress(&e);
		} else {
			counted += m < WARMUP ? 0 : sizes[m];
			while ((rc = fi_recv(e.ep, buf, sizes[m], NULL, FI_ADDR_UNSPEC, NULL)) ==
			       -FI_EAGAIN)
				progress(&e);
		}
		must("fi_recv", (int)rc);
		if (wait_one(&e)) {
			printf("FAIL host_read_%s: message %zu (%zu bytes) did not arrive\n", mode,
			       m, sizes[m]);
			exit(7);
		}
		for (size_t i = 0; i < sizes[m]; i++)
			wrong += buf[i] != pattern(m, i);
		if (wrong) {
			printf("FAIL host_read_%s: message %zu (%zu bytes): %zu bytes differ\n",
			       mode, m, sizes[m], wrong);
			bad++;
		}
		free(buf);
	}
	/* Packets that carried the messages after the warm-up and before the
	 * split one. */
	size_t all = counted / MTU;
	unsigned long long got = st.packets_received - warm.packets_received;
	printf("# copies %s: %llu packets received for %zu bytes (%zu packets' worth)\n", mode,
	       got, counted, all);
	if (copies_on && got >= all / 4) {
		printf("FAIL host_read_on: %llu packets received, the eager parts are %zu\n", got,
		       (NMSG - 1 - WARMUP) * (256 << 10) / MTU);
		bad++;
	}
	if (!copies_on && got < all) {
		printf("FAIL host_read_off: %llu packets for %zu packets' worth of payload\n", got,
		       all);
		bad++;
	}
	if (write(done_out, "x", 1) != 1)
		exit(6);
	close_end(&e);
	return bad;
}

static int run_mode(int copies_on)
{
	const char *test = copies_on ? "host_read_on" : "host_read_off";
	int names[2], done[2], status;
	pid_t recv_pid, send_pid;
	int ok = 1;

	if (pipe(names) || pipe(done))
		return 0;
	setenv("FI_UET_HOST_READ", copies_on ? "1" : "0", 1);
	recv_pid = fork();
	if (recv_pid == 0) {
		close(names[0]);
		close(done[0]);
		exit(receiver(names[1], done[1], copies_on) ? 1 : 0);
	}
	send_pid = fork();
	if (send_pid == 0) {
		close(names[1]);
		close(done[1]);
		sender(names[0], done[0]);
	}
	close(names[0]);
	close(names[1]);
	close(done[0]);
	close(done[1]);
	if (waitpid(recv_pid, &status, 0) != recv_pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		printf("FAIL %s: receiver ended with status %d\n", test, status);
		ok = 0;
	}
	if (waitpid(send_pid, &status, 0) != send_pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		printf("FAIL %s: sender ended with status %d\n", test, status);
		ok = 0;
	}
	if (ok)
		printf("PASS %s\n", test);
	return ok;
}

int main(int argc, char **argv)
{
	int opt, passed = 0, failed = 0;

	while ((opt = getopt(argc, argv, "p:")) != -1) {
		if (opt == 'p')
			prov = optarg;
		else {
			fprintf(stderr, "usage: %s [-p provider]\n", argv[0]);
			return 2;
		}
	}
	setenv("FI_UET_MTU", "4096", 1);
	/* Output in order, whichever process prints. */
	setvbuf(stdout, NULL, _IONBF, 0);
	for (int on = 1; on >= 0; on--) {
		if (run_mode(on))
			passed++;
		else
			failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
