/*
 * mpi_halo: a halo exchange between computing ranks, the pattern of
 * stencil codes: every iteration each rank posts its receives and sends
 * to its neighbours, waits for all of them, then computes (spins) for a
 * while without calling MPI.
 *
 *   mpicc -O2 -o mpi_halo mpi_halo.c
 *   mpirun -np 2 ./mpi_halo [SIZE [COMPUTE_US [ITERS [pair|ring]]]]
 *
 * pair (default): rank r exchanges with rank r^1 (np even).  ring: rank r
 * sends to r+1 and receives from r-1 (and the other way round).  Defaults:
 * 8192 bytes, 200 us of compute, 2000 iterations after 100 of warm-up.
 * Messages between two ranks arrive in order (tag 0), each checked against
 * the iteration it belongs to.
 * Rank 0 prints the mean time per iteration and per exchange (posting
 * to the end of MPI_Waitall), the slowest rank's, in microseconds.  The
 * data are checked: a rank that receives a wrong byte prints it and the
 * exit status is non-zero.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP 100

/* Byte i of what `from` sends in iteration `it`. */
static unsigned char pat(int from, int it, long i)
{
	return (unsigned char)((from * 131 + it * 17 + i * 31) % 251);
}

/* argv[i] as a number in [lo, hi], or `def` when absent; -1 when invalid. */
static double arg(int argc, char **argv, int i, double def, double lo, double hi)
{
	char *end;
	double v;

	if (argc <= i)
		return def;
	v = strtod(argv[i], &end);
	return (*argv[i] && !*end && v >= lo && v <= hi) ? v : -1;
}

static void compute(double us)
{
	double end = MPI_Wtime() + us * 1e-6;

	while (MPI_Wtime() < end)
		;
}

int main(int argc, char **argv)
{
	int rank, np, iters, ring, nbr[2], n = 0, bad = 0;
	long size, i;
	double compute_us, t0 = 0, exchange = 0, per[2], worst[2];
	unsigned char *sbuf, *rbuf[2];
	MPI_Request req[4];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	size = (long)arg(argc, argv, 1, 8192, 1, INT_MAX);
	compute_us = arg(argc, argv, 2, 200, 0, 1e9);
	iters = (int)arg(argc, argv, 3, 2000, 1, INT_MAX - WARMUP);
	ring = argc > 4 && strcmp(argv[4], "ring") == 0;
	if (size < 1 || iters < 1 || compute_us < 0 || np < 2 || (!ring && np % 2) ||
	    (argc > 4 && !ring && strcmp(argv[4], "pair") != 0) || argc > 5) {
		if (rank == 0)
			fprintf(stderr, "usage: mpi_halo [SIZE>0 [COMPUTE_US [ITERS [pair|ring]]]]"
					" (pair needs an even number of ranks)\n");
		MPI_Finalize();
		return 2;
	}
	if (ring) {
		nbr[0] = (rank + np - 1) % np;
		nbr[1] = (rank + 1) % np;
		n = np > 2 ? 2 : 1;
	} else {
		nbr[0] = rank ^ 1;
		n = 1;
	}
	sbuf = malloc(size);
	rbuf[0] = malloc(size);
	rbuf[1] = malloc(size);
	if (!sbuf || !rbuf[0] || !rbuf[1]) {
		fprintf(stderr, "rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (int it = 0; it < WARMUP + iters; it++) {
		double start;
		int k;

		if (it == WARMUP) {
			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
			exchange = 0;
		}
		for (i = 0; i < size; i++)
			sbuf[i] = pat(rank, it, i);
		start = MPI_Wtime();
		for (k = 0; k < n; k++)
			MPI_Irecv(rbuf[k], (int)size, MPI_BYTE, nbr[k], 0, MPI_COMM_WORLD, &req[k]);
		for (k = 0; k < n; k++)
			MPI_Isend(sbuf, (int)size, MPI_BYTE, nbr[n == 2 ? 1 - k : k], 0,
				  MPI_COMM_WORLD, &req[n + k]);
		MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE);
		exchange += MPI_Wtime() - start;
		for (k = 0; k < n; k++)
			for (i = 0; i < size && !bad; i++)
				if (rbuf[k][i] != pat(nbr[k], it, i)) {
					fprintf(stderr, "rank %d: iteration %d, byte %ld from rank %d: %u, expected %u\n",
						rank, it, i, nbr[k], rbuf[k][i], pat(nbr[k], it, i));
					bad = 1;
				}
		compute(compute_us);
	}
	per[0] = (MPI_Wtime() - t0) / iters * 1e6;
	per[1] = exchange / iters * 1e6;
	MPI_Reduce(per, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s, %d ranks, %ld B, compute %.0f us: iteration %.2f us, exchange %.2f us%s\n",
		       ring ? "ring" : "pair", np, size, compute_us, worst[0], worst[1],
		       bad ? " (WRONG DATA)" : "");
	free(sbuf);
	free(rbuf[0]);
	free(rbuf[1]);
	MPI_Finalize();
	return bad;
}
