/*
 * dist.h — data parallelism's internals: the communicator (kiln_dist, kiln.h) and what the
 * trainer, the kiln.AllReduce op and the backends read of it.
 *
 *   dist.c   kiln_dist_create: which ranks (MPI or torchrun's variables), the TCP
 *            rendezvous that sends NCCL's unique id, the checks and broadcasts at start,
 *            the kiln.AllReduce pass over a training graph.
 *   mpi.c    MPI's collectives (KILN_HAVE_MPI builds only): CPU gradients, host checks,
 *            and under mpirun NCCL's id.
 *   ../cuda/nccl.c  NCCL's communicator and the CUDA kernel of kiln.AllReduce
 *            (KILN_HAVE_NCCL builds only).
 *
 * A context holds at most one communicator (kiln_context.dist); the kiln.AllReduce nodes a
 * trainer puts into its graph name it by its id (attribute "comm"), and their kernels find
 * it through the op context's kiln_context: no global state, and a node that outlives its
 * communicator fails naming it.
 *
 * Every collective waits at most d->timeout_s: a rank that died or hangs makes the others
 * fail (KILN_ERR_IO, naming the collective and this rank) instead of waiting forever.
 */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include "../core/internal.h"

typedef enum { KILN_DIST_SUM = 0, KILN_DIST_MAX = 1 } kiln_dist_op;

/* One implementation of the collectives (MPI; NCCL over host staging for host buffers). */
typedef struct kiln_dist_impl {
    const char *name; /* "mpi", "nccl" */
    /* host buffers, blocking (with the timeout) */
    kiln_status (*allreduce_f32)(kiln_dist *d, float *buf, int64_t n, kiln_dist_op op);
    kiln_status (*allreduce_f64)(kiln_dist *d, double *buf, int64_t n); /* sum (SyncBatchNorm's statistics) */
    kiln_status (*bcast)(kiln_dist *d, void *buf, size_t bytes); /* from rank 0 */
    kiln_status (*allgather)(kiln_dist *d, const void *mine, void *all, size_t bytes); /* all: size * bytes */
    kiln_status (*barrier)(kiln_dist *d);
    void (*free)(kiln_dist *d);
} kiln_dist_impl;

struct kiln_dist {
    kiln_context *ctx;
    uint64_t id;           /* the "comm" attribute of the AllReduce nodes reducing through it */
    int rank, size, local_rank;
    kiln_device device;
    int device_index;
    double timeout_s;
    bool mpi;              /* rank and size from MPI (mpi.c holds MPI_COMM_WORLD) */
    const kiln_dist_impl *host; /* the host collectives: MPI's, or NCCL's over staging */
    void *nccl;            /* the NCCL communicator (src/cuda/nccl.c), or NULL */
};

/* --- mpi.c (stubs failing with KILN_ERR_UNSUPPORTED without MPI) */
bool kiln_mpi_available(void);
/* MPI_Init_thread (once per process) and rank / size of MPI_COMM_WORLD. */
kiln_status kiln_mpi_join(kiln_dist *d);
extern const kiln_dist_impl kiln_mpi_impl;
/* Broadcast bytes from rank 0 with MPI (NCCL's id under mpirun). */
kiln_status kiln_mpi_bcast(kiln_dist *d, void *buf, size_t bytes);

/* --- ../cuda/nccl.c (stubs failing with KILN_ERR_UNSUPPORTED without NCCL) */
bool kiln_nccl_available(void);
#define KILN_NCCL_ID_BYTES 128
kiln_status kiln_nccl_get_id(kiln_dist *d, unsigned char id[KILN_NCCL_ID_BYTES]);
/* ncclCommInitRank on d->device_index with the id all ranks hold; d->nccl set. */
kiln_status kiln_nccl_init(kiln_dist *d, const unsigned char id[KILN_NCCL_ID_BYTES]);
/* The NCCL id from rank 0 to the others over TCP (torchrun's variables: MASTER_ADDR, and
 * MASTER_PORT, or the port above it under torchrun's agent, or KILN_RENDEZVOUS_PORT);
 * rank 0's id is sent, the others' filled. d: ctx, rank, size and timeout_s set. */
kiln_status kiln_dist_rendezvous(kiln_dist *d, unsigned char id[KILN_NCCL_ID_BYTES]);
extern const kiln_dist_impl kiln_nccl_impl;
/* Wait for a CUDA stream (cudaStream_t) holding NCCL work of d, at most d->timeout_s: on
 * timeout, or an NCCL error, the communicator is aborted (its kernels end) and the wait
 * fails naming this rank and `what`; a rank that died or hangs so stops the others. */
kiln_status kiln_nccl_wait_stream(kiln_dist *d, void *stream, const char *what);

/* --- dist.c */
/* The context's communicator whose id is the node's attribute attr ("comm" of
 * kiln.AllReduce, "sync_comm" of SyncBatchNorm), or NULL with a message naming the node. */
kiln_dist *kiln_dist_of(kiln_op_ctx *c, const char *attr);
/* "rank R of W" for messages. */
const char *kiln_dist_who(const kiln_dist *d, char *buf, size_t n);
/* Seconds on a monotonic clock. */
double kiln_dist_now(void);

/* The trainer's part (src/train/trainer.c calls these when opts->dist is set). */
struct kiln_train_options;
/* Replace grads[k] (value indices of the gradients the update reads, k < n, of parameters
 * params[k], whose shapes size the buckets) with the outputs of kiln.AllReduce nodes (mean over the ranks) grouped in
 * buckets of bucket_bytes in reverse parameter order; each node is moved to just after the
 * last node producing one of its gradients, so a plan may start it while backward goes
 * on; each bucket after the first also reads the previous one's first output (attribute
 * after), so the buckets are reduced in one order on every rank (NCCL's collectives on a
 * communicator must be). skip: an f32 scalar value (gradient accumulation's: nonzero on micro-batches that do
 * not complete a step, which then reduce nothing), or -1. */
kiln_status kiln_dist_insert_allreduce(kiln_model *m, const kiln_dist *d, size_t bucket_bytes, int n, const int *params,
                                       int *grads, int skip);
/* Every rank holds the same model: a hash of the graph (ops, names of parameters) and the
 * shapes of parameters and inputs, compared through an all-gather; a rank that differs
 * fails everywhere, naming it and what was hashed. */
kiln_status kiln_dist_check_same(kiln_dist *d, const char *what, uint64_t hash);
uint64_t kiln_dist_hash_model(const kiln_model *m, uint64_t h);
uint64_t kiln_dist_hash_bytes(const void *p, size_t n, uint64_t h);
/* Rank 0's bytes into every rank's buf. */
kiln_status kiln_dist_bcast(kiln_dist *d, void *buf, size_t bytes);


/* The samples of one rank's epoch over n (kiln_loader_shard's length): n alone. */
static inline int64_t kiln_dist_shard_n(const kiln_train_options *o, int64_t n) {
    const kiln_dist *d = o->dist;
    if (!d || d->size <= 1) return n;
    return o->drop_last ? n / d->size : (n + d->size - 1) / d->size;
}

/* kiln_trainer_create's start with a communicator: the same training graph on every rank
 * (checked), then rank 0's weights and BatchNormalization statistics everywhere. */
struct kiln_param;
struct kiln_state;
kiln_status kiln_dist_trainer_start(kiln_dist *d, const kiln_model *train, int n_params, struct kiln_param *params,
                                    int n_states, struct kiln_state *states);
/* kiln_trainer_train_epoch's start: the same data set size, sample, batch, seed and
 * position on every rank. */
kiln_status kiln_dist_check_epoch(kiln_dist *d, int64_t n, int64_t sample, int64_t batch, uint64_t seed, int64_t epoch,
                                  int64_t offset, int64_t start);

#endif
