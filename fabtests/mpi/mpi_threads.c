/*
 * mpi_threads: point-to-point traffic from several threads of each rank at
 * once (MPI_THREAD_MULTIPLE), with verified data.
 *
 *   mpicc -O2 -pthread -o mpi_threads mpi_threads.c
 *   mpirun -np 2 ./mpi_threads [threads] [iterations]    (any even np)
 *
 * Ranks pair up (0-1, 2-3, ...). Each thread of a rank has its own
 * communicator (MPI_Comm_dup) and exchanges messages of 1 byte to 256 KiB
 * with the same thread of the partner rank: nonblocking receive and send,
 * then a wait on both, so every thread is inside the library at the same
 * time as the others. Under MPICH, MPIR_CVAR_CH4_NUM_VCIS > 1 spreads the
 * communicators over several endpoints. Rank 0 prints "threads T
 * iterations N errors E"; the exit status is non-zero on any error or
 * when the library does not grant MPI_THREAD_MULTIPLE. Nothing is timed;
 * run it under `timeout` to turn a hang into a failure.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 16
#define MAX_LEN (256 * 1024)

static int rank, size, iterations = 200;
static MPI_Comm comms[MAX_THREADS];
static int errors[MAX_THREADS];

/* Byte i of message `it` that `who` sends from thread t. */
static unsigned char pat(int who, int t, int it, size_t i)
{
	return (unsigned char)((who * 131 + t * 17 + it * 7 + i * 31 + (i >> 8)) % 251);
}

static void *exchange(void *arg)
{
	int t = (int)(long)arg, peer = rank ^ 1;
	unsigned char *sb = malloc(MAX_LEN), *rb = malloc(MAX_LEN);

	if (!sb || !rb) {
		fprintf(stderr, "rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	for (int it = 0; it < iterations; it++) {
		/* Mostly small messages, every fourth one up to 256 KiB (past the
		 * eager limit of the usual providers). */
		size_t len = 1 + (size_t)(it * 7919 + t * 131) % 100;
		if (it % 4 == 3)
			len = 1 + (size_t)(it * 104729 + t * 1031) % MAX_LEN;
		for (size_t i = 0; i < len; i++)
			sb[i] = pat(rank, t, it, i);
		MPI_Request r[2];
		MPI_Irecv(rb, (int)len, MPI_BYTE, peer, it, comms[t], &r[0]);
		MPI_Isend(sb, (int)len, MPI_BYTE, peer, it, comms[t], &r[1]);
		MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
		for (size_t i = 0; i < len; i++) {
			if (rb[i] != pat(peer, t, it, i)) {
				fprintf(stderr, "rank %d thread %d: message %d (%zu B) differs at %zu\n",
					rank, t, it, len, i);
				errors[t]++;
				break;
			}
		}
	}
	free(sb);
	free(rb);
	return NULL;
}

int main(int argc, char **argv)
{
	int granted, threads = argc > 1 ? atoi(argv[1]) : 4;
	pthread_t th[MAX_THREADS];

	if (argc > 2)
		iterations = atoi(argv[2]);
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &granted);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (granted != MPI_THREAD_MULTIPLE || size % 2 || threads < 1 || threads > MAX_THREADS) {
		if (rank == 0)
			fprintf(stderr, "needs MPI_THREAD_MULTIPLE (granted %d), an even number "
				"of ranks (%d) and 1 to %d threads (%d)\n",
				granted, size, MAX_THREADS, threads);
		MPI_Finalize();
		return 2;
	}
	for (int t = 0; t < threads; t++)
		MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
	for (int t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, exchange, (void *)(long)t);
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	int mine = 0, all = 0;
	for (int t = 0; t < threads; t++)
		mine += errors[t];
	MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("threads %d iterations %d errors %d\n", threads, iterations, all);
	for (int t = 0; t < threads; t++)
		MPI_Comm_free(&comms[t]);
	MPI_Finalize();
	return all != 0;
}
