/*
 * mpi.c — MPI's collectives for the communicator (dist.h): CPU ranks' gradients and every
 * host-side check, and NCCL's id under mpirun. Built with MPI when CMake finds it
 * (KILN_HAVE_MPI, Debian's Open MPI); without it each entry fails with KILN_ERR_UNSUPPORTED.
 *
 * Each collective is the non-blocking form polled until done or until the communicator's
 * timeout: a rank that died or hangs makes the others fail with KILN_ERR_IO naming the
 * collective, not wait forever. A collective that timed out cannot be taken back: the
 * process then ends MPI with MPI_Abort at exit (so mpirun stops every rank) rather than
 * MPI_Finalize, which would wait for the lost rank.
 */
#include "dist.h"

#ifdef KILN_HAVE_MPI
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int broken; /* a collective timed out or failed: abort at exit */

static void at_exit(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (broken) MPI_Abort(MPI_COMM_WORLD, 1);
    else MPI_Finalize();
}

bool kiln_mpi_available(void) { return true; }

kiln_status kiln_mpi_join(kiln_dist *d) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return kiln_fail(d->ctx, KILN_ERR_IO, "data parallelism: MPI_Init_thread failed");
        atexit(at_exit);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    return KILN_OK;
}

/* Poll req until done or the timeout. */
static kiln_status wait(kiln_dist *d, MPI_Request *req, const char *what, int rc) {
    char who[64];
    if (rc != MPI_SUCCESS) {
        broken = 1;
        return kiln_fail(d->ctx, KILN_ERR_IO, "data parallelism: %s: %s failed (MPI error %d)", kiln_dist_who(d, who, sizeof who),
                         what, rc);
    }
    const double deadline = kiln_dist_now() + d->timeout_s;
    for (long spin = 0;; spin++) {
        int done = 0;
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            broken = 1;
            return kiln_fail(d->ctx, KILN_ERR_IO, "data parallelism: %s: %s failed (MPI error %d)",
                             kiln_dist_who(d, who, sizeof who), what, rc);
        }
        if (done) return KILN_OK;
        if (spin > 200) {
            /* let the other ranks have the cores (CI runs 3 ranks on 2) */
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
            if ((spin & 255) == 0 && kiln_dist_now() > deadline) {
                broken = 1;
                return kiln_fail(d->ctx, KILN_ERR_IO,
                                 "data parallelism: %s: %s did not complete within %.0f s: another rank died or hangs "
                                 "(--dist-timeout)",
                                 kiln_dist_who(d, who, sizeof who), what, d->timeout_s);
            }
        }
    }
}

static kiln_status mpi_allreduce(kiln_dist *d, float *buf, int64_t n, kiln_dist_op op) {
    kiln_status st = KILN_OK;
    for (int64_t at = 0; at < n && !st; at += 1 << 28) {
        const int cnt = (int)(n - at < (1 << 28) ? n - at : (1 << 28));
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + at, cnt, MPI_FLOAT, op == KILN_DIST_MAX ? MPI_MAX : MPI_SUM,
                                MPI_COMM_WORLD, &req);
        st = wait(d, &req, "an all-reduce", rc);
    }
    return st;
}

static kiln_status mpi_allreduce64(kiln_dist *d, double *buf, int64_t n) {
    kiln_status st = KILN_OK;
    for (int64_t at = 0; at < n && !st; at += 1 << 27) {
        const int cnt = (int)(n - at < (1 << 27) ? n - at : (1 << 27));
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + at, cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
        st = wait(d, &req, "an all-reduce of statistics", rc);
    }
    return st;
}

kiln_status kiln_mpi_bcast(kiln_dist *d, void *buf, size_t bytes) {
    kiln_status st = KILN_OK;
    for (size_t at = 0; at < bytes && !st; at += (size_t)1 << 30) {
        const int cnt = (int)(bytes - at < ((size_t)1 << 30) ? bytes - at : ((size_t)1 << 30));
        MPI_Request req;
        int rc = MPI_Ibcast((char *)buf + at, cnt, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        st = wait(d, &req, "a broadcast from rank 0", rc);
    }
    return st;
}

static kiln_status mpi_allgather(kiln_dist *d, const void *mine, void *all, size_t bytes) {
    MPI_Request req;
    int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req);
    return wait(d, &req, "an all-gather", rc);
}

static kiln_status mpi_barrier(kiln_dist *d) {
    MPI_Request req;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    return wait(d, &req, "a barrier", rc);
}

static void mpi_free(kiln_dist *d) { (void)d; /* MPI ends at exit: it cannot start again */ }

const kiln_dist_impl kiln_mpi_impl = {"mpi", mpi_allreduce, mpi_allreduce64, kiln_mpi_bcast, mpi_allgather, mpi_barrier,
                                      mpi_free};

#else /* no MPI in this build */

bool kiln_mpi_available(void) { return false; }

kiln_status kiln_mpi_join(kiln_dist *d) {
    return kiln_fail(d->ctx, KILN_ERR_UNSUPPORTED,
                     "data parallelism: MPI was asked for, but this build has no MPI (install libopenmpi-dev and "
                     "configure again: KILN_MPI)");
}

kiln_status kiln_mpi_bcast(kiln_dist *d, void *buf, size_t bytes) {
    (void)buf, (void)bytes;
    return kiln_mpi_join(d);
}

static void none_free(kiln_dist *d) { (void)d; }
const kiln_dist_impl kiln_mpi_impl = {"mpi", NULL, NULL, NULL, NULL, NULL, none_free};

#endif
