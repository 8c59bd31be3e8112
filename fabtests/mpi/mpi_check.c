/*
 * mpi_check: MPI point-to-point and collective checks with verified data.
 * Run with any np >= 2. Rank 0 prints PASS/FAIL per check and a final
 * "N passed, N failed" line; the exit status is non-zero on any failure.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static unsigned char pat(int who, long n, long i) { return (unsigned char)((who * 131 + n * 7 + i * 31) % 251); }

static void fill(unsigned char *b, long n, int who) { for (long i = 0; i < n; i++) b[i] = pat(who, n, i); }

static int check(const unsigned char *b, long n, int who) {
	for (long i = 0; i < n; i++)
		if (b[i] != pat(who, n, i)) return 0;
	return 1;
}

static int ring_sizes(void) {
	int ok = 1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
	long max = 8L << 20;
	unsigned char *s = malloc(max), *r = malloc(max);
	for (long n = 0; n <= max; n = n ? n * 2 : 1) {
		MPI_Request req;
		MPI_Status st;
		int count;
		fill(s, n, rank);
		memset(r, 0, n);
		MPI_Irecv(r, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
		MPI_Send(s, (int)n, MPI_BYTE, next, (int)(n % 1000), MPI_COMM_WORLD);
		MPI_Wait(&req, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		if (st.MPI_SOURCE != prev || st.MPI_TAG != (int)(n % 1000) || count != n || !check(r, n, prev)) ok = 0;
	}
	free(s);
	free(r);
	return ok;
}

static int same_tag_order(void) {
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
				MPI_Recv(&x, 1, MPI_INT, 0, anytag ? MPI_ANY_TAG : 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				if (x != i) ok = 0;
			}
		}
	}
	return ok;
}

static int ssend(void) {
	int next = (rank + 1) % size, prev = (rank + size - 1) % size, in = -1, out = rank * 10 + 1;
	MPI_Request req;
	MPI_Irecv(&in, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &req);
	MPI_Ssend(&out, 1, MPI_INT, next, 9, MPI_COMM_WORLD);
	MPI_Wait(&req, MPI_STATUS_IGNORE);
	return in == prev * 10 + 1;
}

static int iprobe(void) {
	int ok = 1;
	if (rank == 0) {
		unsigned char b[333];
		fill(b, sizeof b, 0);
		MPI_Send(b, sizeof b, MPI_BYTE, 1, 11, MPI_COMM_WORLD);
	} else if (rank == 1) {
		int flag = 0, count;
		MPI_Status st;
		while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &flag, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		unsigned char b[333];
		MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		ok = count == 333 && st.MPI_SOURCE == 0 && check(b, 333, 0);
	}
	return ok;
}

static int mprobe(void) {
	int ok = 1;
	if (rank == 0) {
		unsigned char b[4096];
		fill(b, 1000, 0);
		MPI_Send(b, 1000, MPI_BYTE, 1, 12, MPI_COMM_WORLD);
		fill(b, 4096, 0);
		MPI_Send(b, 4096, MPI_BYTE, 1, 13, MPI_COMM_WORLD);
	} else if (rank == 1) {
		MPI_Message m;
		MPI_Status st;
		int count, flag = 0;
		unsigned char b[4096];
		MPI_Mprobe(0, 12, MPI_COMM_WORLD, &m, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		MPI_Mrecv(b, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
		ok = count == 1000 && check(b, 1000, 0);
		while (!flag) MPI_Improbe(0, 13, MPI_COMM_WORLD, &flag, &m, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		MPI_Mrecv(b, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
		ok = ok && count == 4096 && check(b, 4096, 0);
	}
	return ok;
}

static int cancel_recv(void) {
	int x, cancelled = 0;
	MPI_Request req;
	MPI_Status st;
	MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &req);
	MPI_Cancel(&req);
	MPI_Wait(&req, &st);
	MPI_Test_cancelled(&st, &cancelled);
	return cancelled;
}

static int truncate_err(void) {
	int ok = 1;
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == 0) {
		unsigned char b[1000];
		fill(b, 1000, 0);
		MPI_Send(b, 1000, MPI_BYTE, 1, 14, MPI_COMM_WORLD);
	} else if (rank == 1) {
		unsigned char b[100];
		int rc = MPI_Recv(b, 100, MPI_BYTE, 0, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE), cls = MPI_SUCCESS;
		if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
		ok = cls == MPI_ERR_TRUNCATE;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
	return ok;
}

static int allreduce(void) {
	int i = rank + 1, isum = 0;
	double d = rank * 0.5, dsum = 0;
	MPI_Allreduce(&i, &isum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return isum == size * (size + 1) / 2 && dsum == 0.5 * size * (size - 1) / 2;
}

static int alltoall(void) {
	int ok = 1, *s = malloc(size * sizeof(int)), *r = malloc(size * sizeof(int));
	for (int j = 0; j < size; j++) s[j] = rank * 1000 + j;
	MPI_Alltoall(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD);
	for (int j = 0; j < size; j++)
		if (r[j] != j * 1000 + rank) ok = 0;
	free(s);
	free(r);
	return ok;
}

static int alltoallv(void) {
	/* rank i sends (i + j + 1) * 100 ints to rank j, each = i * 1000000 + j * 1000 + k % 1000 */
	int ok = 1, *sc = malloc(size * sizeof(int)), *sd = malloc(size * sizeof(int));
	int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int)), st = 0, rt = 0;
	for (int j = 0; j < size; j++) {
		sc[j] = (rank + j + 1) * 100, sd[j] = st, st += sc[j];
		rc[j] = (j + rank + 1) * 100, rd[j] = rt, rt += rc[j];
	}
	int *s = malloc(st * sizeof(int)), *r = malloc(rt * sizeof(int));
	for (int j = 0; j < size; j++)
		for (int k = 0; k < sc[j]; k++) s[sd[j] + k] = rank * 1000000 + j * 1000 + k % 1000;
	MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, MPI_COMM_WORLD);
	for (int j = 0; j < size; j++)
		for (int k = 0; k < rc[j]; k++)
			if (r[rd[j] + k] != j * 1000000 + rank * 1000 + k % 1000) ok = 0;
	free(s), free(r), free(sc), free(sd), free(rc), free(rd);
	return ok;
}

static int bcast(void) {
	long n = 4L << 20;
	int ok = 1;
	unsigned char *b = malloc(n);
	for (int root = 0; root < size; root += size - 1) {
		if (rank == root) fill(b, n, root); else memset(b, 0, n);
		MPI_Bcast(b, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
		if (!check(b, n, root)) ok = 0;
		if (size == 1) break;
	}
	free(b);
	return ok;
}

static int barrier(void) { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS; }

int main(int argc, char **argv) {
	static const struct { const char *name; int (*fn)(void); } checks[] = {
		{"ring_sizes", ring_sizes}, {"same_tag_order", same_tag_order}, {"ssend", ssend},
		{"iprobe", iprobe}, {"mprobe", mprobe}, {"cancel_recv", cancel_recv},
		{"truncate", truncate_err}, {"allreduce", allreduce}, {"alltoall", alltoall},
		{"alltoallv", alltoallv}, {"bcast", bcast}, {"barrier", barrier},
	};
	int passed = 0, failed = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) {
		if (rank == 0) fprintf(stderr, "mpi_check needs at least 2 ranks\n");
		MPI_Finalize();
		return 2;
	}
	for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
		int mine = checks[i].fn(), all = 0;
		MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
		if (rank == 0) {
			printf("%s %s\n", all ? "PASS" : "FAIL", checks[i].name);
			fflush(stdout);
		}
		all ? passed++ : failed++;
	}
	if (rank == 0) printf("%d passed, %d failed\n", passed, failed);
	MPI_Finalize();
	return failed != 0;
}
