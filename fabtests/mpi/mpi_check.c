/*
 * mpi_check: MPI point-to-point, collective and one-sided checks with
 * verified data.
 *
 *   mpicc -O2 -o mpi_check mpi_check.c
 *   mpirun -np 4 ./mpi_check            (any np >= 2)
 *
 * Every rank runs every check; the per-rank results are combined with a
 * logical AND and rank 0 prints "PASS name" or "FAIL name" per check and a
 * final "N passed, N failed" line.  A rank that sees a wrong value prints
 * the reason to stderr.  The exit status is non-zero on any failure.
 * Nothing is timed; run it under `timeout` to turn a hang into a failure.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static const char *cur;

/* Report why this rank's part of the current check failed; returns 0. */
static int bad(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rank %d: %s: ", rank, cur);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return 0;
}

/* Byte pattern that depends on the sender, the message size and the offset. */
static unsigned char pat(int who, long n, long i)
{
	return (unsigned char)((who * 131 + n * 7 + i * 31 + (i >> 8)) % 251);
}

static void fill(unsigned char *b, long n, int who)
{
	for (long i = 0; i < n; i++)
		b[i] = pat(who, n, i);
}

/* Returns the first wrong offset, or -1. */
static long mismatch(const unsigned char *b, long n, int who)
{
	for (long i = 0; i < n; i++)
		if (b[i] != pat(who, n, i))
			return i;
	return -1;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	return p;
}

/* Ring: every rank sends to rank+1 and receives with ANY_SOURCE/ANY_TAG;
 * sizes 0, 1, 2, 4, ... 8 MiB. */
static int ring_sizes(void)
{
	int ok = 1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
	long max = 8L << 20;
	unsigned char *s = xmalloc(max), *r = xmalloc(max);

	for (long n = 0; n <= max; n = n ? n * 2 : 1) {
		MPI_Request req;
		MPI_Status st;
		int count, tag = (int)(n % 1000) + 1;
		long off;

		fill(s, n, rank);
		memset(r, 0, n);
		MPI_Irecv(r, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
		MPI_Send(s, (int)n, MPI_BYTE, next, tag, MPI_COMM_WORLD);
		MPI_Wait(&req, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		if (st.MPI_SOURCE != prev || st.MPI_TAG != tag || count != n)
			ok = bad("size %ld: source %d tag %d count %d", n, st.MPI_SOURCE,
				 st.MPI_TAG, count);
		else if ((off = mismatch(r, n, prev)) >= 0)
			ok = bad("size %ld: wrong byte at offset %ld", n, off);
	}
	free(s);
	free(r);
	return ok;
}

/* Both neighbours at once with nonblocking operations, large sizes. */
static int ring_bidir(void)
{
	int ok = 1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
	long max = 4L << 20;
	unsigned char *s = xmalloc(max), *rn = xmalloc(max), *rp = xmalloc(max);

	for (long n = 1000; n <= max; n *= 4) {
		MPI_Request req[4];
		long off;

		fill(s, n, rank);
		MPI_Irecv(rp, (int)n, MPI_BYTE, prev, 21, MPI_COMM_WORLD, &req[0]);
		MPI_Irecv(rn, (int)n, MPI_BYTE, next, 22, MPI_COMM_WORLD, &req[1]);
		MPI_Isend(s, (int)n, MPI_BYTE, next, 21, MPI_COMM_WORLD, &req[2]);
		MPI_Isend(s, (int)n, MPI_BYTE, prev, 22, MPI_COMM_WORLD, &req[3]);
		MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
		if ((off = mismatch(rp, n, prev)) >= 0)
			ok = bad("size %ld from prev: offset %ld", n, off);
		if ((off = mismatch(rn, n, next)) >= 0)
			ok = bad("size %ld from next: offset %ld", n, off);
	}
	free(s);
	free(rn);
	free(rp);
	return ok;
}

/* 1000 Isends with the same tag arrive in send order (exact and ANY_TAG). */
static int same_tag_order(void)
{
	enum { N = 1000 };
	int ok = 1;

	for (int anytag = 0; anytag < 2; anytag++) {
		if (rank == 0) {
			static int v[N];
			MPI_Request req[N];

			for (int i = 0; i < N; i++) {
				v[i] = i;
				MPI_Isend(&v[i], 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &req[i]);
			}
			MPI_Waitall(N, req, MPI_STATUSES_IGNORE);
		} else if (rank == 1) {
			for (int i = 0; i < N; i++) {
				int x = -1;

				MPI_Recv(&x, 1, MPI_INT, 0, anytag ? MPI_ANY_TAG : 5,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				if (x != i && ok)
					ok = bad("receive %d got message %d", i, x);
			}
		}
	}
	return ok;
}

/* A message its receiver takes only after 70000 later ones from the same
 * sender (another tag): more than a round of the transport's 16-bit
 * message IDs passes while it waits. */
static int overtaken(void)
{
	enum { N = 70000 };
	int ok = 1, early = 4242, x;

	if (rank == 0) {
		MPI_Request req;

		MPI_Isend(&early, 1, MPI_INT, 1, 51, MPI_COMM_WORLD, &req);
		for (int i = 0; i < N; i++)
			MPI_Send(&i, 1, MPI_INT, 1, 52, MPI_COMM_WORLD);
		MPI_Wait(&req, MPI_STATUS_IGNORE);
	} else if (rank == 1) {
		for (int i = 0; i < N; i++) {
			x = -1;
			MPI_Recv(&x, 1, MPI_INT, 0, 52, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (x != i && ok)
				ok = bad("receive %d got message %d", i, x);
		}
		x = -1;
		MPI_Recv(&x, 1, MPI_INT, 0, 51, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (x != early && ok)
			ok = bad("the early message held %d", x);
	}
	return ok;
}

/* Every other rank sends 100 numbered messages of varying size to rank 0,
 * which receives them with MPI_ANY_SOURCE: per-source order holds. */
static int fan_in(void)
{
	enum { N = 100, MAXN = 70000 };
	int ok = 1;
	unsigned char *b = xmalloc(MAXN);

	if (rank == 0) {
		int *next = calloc(size, sizeof(int));

		for (int k = 0; k < N * (size - 1); k++) {
			MPI_Status st;
			int count, src, i;

			MPI_Recv(b, MAXN, MPI_BYTE, MPI_ANY_SOURCE, 31, MPI_COMM_WORLD, &st);
			MPI_Get_count(&st, MPI_BYTE, &count);
			src = st.MPI_SOURCE;
			if (src < 1 || src >= size) {
				ok = bad("source %d", src);
				break;
			}
			memcpy(&i, b, sizeof i);
			if (i != next[src] || count != 4 + (i % 10) * 7000)
				ok = bad("from %d: message %d (%d bytes), expected %d", src, i,
					 count, next[src]);
			else if (mismatch(b + 4, count - 4, src * 1000 + i) >= 0)
				ok = bad("from %d: message %d data differs", src, i);
			next[src]++;
		}
		free(next);
	} else {
		for (int i = 0; i < N; i++) {
			int n = 4 + (i % 10) * 7000;

			fill(b + 4, n - 4, rank * 1000 + i);
			memcpy(b, &i, sizeof i);
			MPI_Send(b, n, MPI_BYTE, 0, 31, MPI_COMM_WORLD);
		}
	}
	free(b);
	return ok;
}

/* A 4 MiB message sent before its receive is posted. */
static int unexpected_large(void)
{
	long n = 4L << 20;
	int ok = 1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
	unsigned char *s = xmalloc(n), *r = xmalloc(n);
	MPI_Request req;
	long off;

	fill(s, n, rank);
	memset(r, 0, n);
	MPI_Isend(s, (int)n, MPI_BYTE, next, 41, MPI_COMM_WORLD, &req);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Recv(r, (int)n, MPI_BYTE, prev, 41, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	MPI_Wait(&req, MPI_STATUS_IGNORE);
	if ((off = mismatch(r, n, prev)) >= 0)
		ok = bad("offset %ld differs", off);
	free(s);
	free(r);
	return ok;
}

static int ssend(void)
{
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	int in = -1, out = rank * 10 + 1;
	MPI_Request req;

	MPI_Irecv(&in, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &req);
	MPI_Ssend(&out, 1, MPI_INT, next, 9, MPI_COMM_WORLD);
	MPI_Wait(&req, MPI_STATUS_IGNORE);
	return in == prev * 10 + 1 || bad("got %d", in);
}

static int iprobe(void)
{
	int ok = 1;
	unsigned char b[333];

	if (rank == 0) {
		fill(b, sizeof b, 0);
		MPI_Send(b, sizeof b, MPI_BYTE, 1, 11, MPI_COMM_WORLD);
	} else if (rank == 1) {
		int flag = 0, count;
		MPI_Status st;

		while (!flag)
			MPI_Iprobe(MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &flag, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		if (count != 333 || st.MPI_SOURCE != 0 || st.MPI_TAG != 11)
			return bad("probe: count %d source %d tag %d", count, st.MPI_SOURCE,
				   st.MPI_TAG);
		MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (mismatch(b, 333, 0) >= 0)
			ok = bad("data differs");
	}
	return ok;
}

static int mprobe(void)
{
	int ok = 1;
	unsigned char b[4096];

	if (rank == 0) {
		fill(b, 1000, 0);
		MPI_Send(b, 1000, MPI_BYTE, 1, 12, MPI_COMM_WORLD);
		fill(b, 4096, 0);
		MPI_Send(b, 4096, MPI_BYTE, 1, 13, MPI_COMM_WORLD);
	} else if (rank == 1) {
		MPI_Message m;
		MPI_Status st;
		int count, flag = 0;

		MPI_Mprobe(0, 12, MPI_COMM_WORLD, &m, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		memset(b, 0, sizeof b);
		MPI_Mrecv(b, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
		if (count != 1000 || mismatch(b, 1000, 0) >= 0)
			ok = bad("Mprobe/Mrecv: count %d or data wrong", count);
		while (!flag)
			MPI_Improbe(0, 13, MPI_COMM_WORLD, &flag, &m, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		memset(b, 0, sizeof b);
		MPI_Mrecv(b, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
		if (count != 4096 || mismatch(b, 4096, 0) >= 0)
			ok = bad("Improbe/Mrecv: count %d or data wrong", count);
	}
	return ok;
}

static int cancel_recv(void)
{
	int x = 0, cancelled = 0;
	MPI_Request req;
	MPI_Status st;

	MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &req);
	MPI_Cancel(&req);
	MPI_Wait(&req, &st);
	MPI_Test_cancelled(&st, &cancelled);
	return cancelled || bad("MPI_Test_cancelled says not cancelled");
}

static int truncate_err(void)
{
	int ok = 1;

	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == 0) {
		unsigned char b[1000];

		fill(b, 1000, 0);
		MPI_Send(b, 1000, MPI_BYTE, 1, 14, MPI_COMM_WORLD);
	} else if (rank == 1) {
		unsigned char b[100];
		int rc, cls = MPI_SUCCESS;

		rc = MPI_Recv(b, 100, MPI_BYTE, 0, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS)
			MPI_Error_class(rc, &cls);
		if (cls != MPI_ERR_TRUNCATE)
			ok = bad("error class %d, expected MPI_ERR_TRUNCATE", cls);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
	return ok;
}

static int allreduce(void)
{
	enum { N = 1000 };
	int ok = 1, i = rank + 1, isum = 0;
	double d = rank * 0.5, dsum = 0, *dv = xmalloc(N * sizeof(double)),
	       *dr = xmalloc(N * sizeof(double));

	MPI_Allreduce(&i, &isum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	if (isum != size * (size + 1) / 2)
		ok = bad("int sum %d", isum);
	if (dsum != 0.5 * size * (size - 1) / 2)
		ok = bad("double sum %g", dsum);
	for (int k = 0; k < N; k++)
		dv[k] = k + rank * 0.25;
	MPI_Allreduce(dv, dr, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	for (int k = 0; k < N; k++)
		if (dr[k] != (double)k * size + 0.25 * size * (size - 1) / 2) {
			ok = bad("vector element %d is %g", k, dr[k]);
			break;
		}
	free(dv);
	free(dr);
	return ok;
}

static int alltoall(void)
{
	int ok = 1, *s = xmalloc(size * sizeof(int)), *r = xmalloc(size * sizeof(int));

	for (int j = 0; j < size; j++)
		s[j] = rank * 1000 + j;
	MPI_Alltoall(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD);
	for (int j = 0; j < size; j++)
		if (r[j] != j * 1000 + rank)
			ok = bad("from %d: %d", j, r[j]);
	free(s);
	free(r);
	return ok;
}

/* Rank i sends (i + j + 1) * 100 ints to rank j, each i*1000000 + j*1000 + k%1000. */
static int alltoallv(void)
{
	int ok = 1, st = 0, rt = 0;
	int *sc = xmalloc(size * sizeof(int)), *sd = xmalloc(size * sizeof(int));
	int *rc = xmalloc(size * sizeof(int)), *rd = xmalloc(size * sizeof(int));
	int *s, *r;

	for (int j = 0; j < size; j++) {
		sc[j] = (rank + j + 1) * 100, sd[j] = st, st += sc[j];
		rc[j] = (j + rank + 1) * 100, rd[j] = rt, rt += rc[j];
	}
	s = xmalloc(st * sizeof(int));
	r = xmalloc(rt * sizeof(int));
	for (int j = 0; j < size; j++)
		for (int k = 0; k < sc[j]; k++)
			s[sd[j] + k] = rank * 1000000 + j * 1000 + k % 1000;
	MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, MPI_COMM_WORLD);
	for (int j = 0; j < size && ok; j++)
		for (int k = 0; k < rc[j]; k++)
			if (r[rd[j] + k] != j * 1000000 + rank * 1000 + k % 1000) {
				ok = bad("from %d: element %d is %d", j, k, r[rd[j] + k]);
				break;
			}
	free(s), free(r), free(sc), free(sd), free(rc), free(rd);
	return ok;
}

/* 4 MiB broadcast from rank 0 and from the last rank. */
static int bcast(void)
{
	long n = 4L << 20, off;
	int ok = 1;
	unsigned char *b = xmalloc(n);

	for (int root = 0; root < size; root += size - 1) {
		if (rank == root)
			fill(b, n, root);
		else
			memset(b, 0, n);
		MPI_Bcast(b, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
		if ((off = mismatch(b, n, root)) >= 0)
			ok = bad("root %d: offset %ld differs", root, off);
	}
	free(b);
	return ok;
}

static int barrier(void)
{
	return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS || bad("MPI_Barrier failed");
}

/* One-sided: every rank puts a block into its right neighbour's window and
 * gets one from its left neighbour, under MPI_Win_fence. */
static int rma_fence(void)
{
	enum { N = 4096 };
	int ok = 1, right = (rank + 1) % size, left = (rank + size - 1) % size;
	unsigned char *win_buf = xmalloc(2 * N), *mine = xmalloc(N), *got = xmalloc(N);
	MPI_Win win;

	memset(win_buf, 0, 2 * N);
	fill(win_buf + N, N, rank + 100);	/* what others read from us */
	fill(mine, N, rank);
	MPI_Win_create(win_buf, 2 * N, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	MPI_Win_fence(0, win);
	MPI_Put(mine, N, MPI_BYTE, right, 0, N, MPI_BYTE, win);
	MPI_Get(got, N, MPI_BYTE, left, N, N, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	if (mismatch(win_buf, N, left) >= 0)
		ok = bad("put from rank %d wrong at %ld", left, mismatch(win_buf, N, left));
	if (mismatch(got, N, left + 100) >= 0)
		ok = bad("get from rank %d wrong at %ld", left, mismatch(got, N, left + 100));
	MPI_Win_free(&win);
	free(win_buf);
	free(mine);
	free(got);
	return ok;
}

/* One-sided: every rank adds into every other rank's counters with
 * MPI_Accumulate under passive-target lock/unlock, then reads them back
 * with MPI_Get. */
static int rma_lock_accumulate(void)
{
	enum { N = 64, ROUNDS = 10 };
	int ok = 1;
	long *win_buf = xmalloc(N * sizeof(long)), add[N], back[N];
	MPI_Win win;

	for (int i = 0; i < N; i++) {
		win_buf[i] = 0;
		add[i] = i + 1;
	}
	MPI_Win_create(win_buf, N * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
		       &win);
	MPI_Barrier(MPI_COMM_WORLD);
	for (int r = 0; r < ROUNDS; r++)
		for (int t = 0; t < size; t++) {
			MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
			MPI_Accumulate(add, N, MPI_LONG, t, 0, N, MPI_LONG, MPI_SUM, win);
			MPI_Win_unlock(t, win);
		}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_lock(MPI_LOCK_EXCLUSIVE, (rank + 1) % size, 0, win);
	MPI_Get(back, N, MPI_LONG, (rank + 1) % size, 0, N, MPI_LONG, win);
	MPI_Win_unlock((rank + 1) % size, win);
	for (int i = 0; i < N; i++)
		if (back[i] != (long)(i + 1) * ROUNDS * size) {
			ok = bad("element %d is %ld, want %ld", i, back[i],
				 (long)(i + 1) * ROUNDS * size);
			break;
		}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_free(&win);
	free(win_buf);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} checks[] = {
		{ "ring_sizes", ring_sizes },
		{ "ring_bidir", ring_bidir },
		{ "same_tag_order", same_tag_order },
		{ "overtaken_by_70000", overtaken },
		{ "fan_in_any_source", fan_in },
		{ "unexpected_large", unexpected_large },
		{ "ssend", ssend },
		{ "iprobe", iprobe },
		{ "mprobe", mprobe },
		{ "cancel_recv", cancel_recv },
		{ "truncate", truncate_err },
		{ "allreduce", allreduce },
		{ "alltoall", alltoall },
		{ "alltoallv", alltoallv },
		{ "bcast", bcast },
		{ "barrier", barrier },
		{ "rma_put_get_fence", rma_fence },
		{ "rma_accumulate_lock", rma_lock_accumulate },
	};
	int passed = 0, failed = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_check needs at least 2 ranks\n");
		MPI_Finalize();
		return 2;
	}
	for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
		int mine, all = 0;

		cur = checks[i].name;
		mine = checks[i].fn() ? 1 : 0;
		MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
		if (rank == 0) {
			printf("%s %s\n", all ? "PASS" : "FAIL", checks[i].name);
			fflush(stdout);
		}
		if (all)
			passed++;
		else
			failed++;
	}
	if (rank == 0)
		printf("%d passed, %d failed\n", passed, failed);
	MPI_Finalize();
	return failed != 0;
}
