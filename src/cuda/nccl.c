/*
 * nccl.c — NCCL for data-parallel CUDA training (src/dist/dist.h): the communicator of a
 * kiln_dist on its device, the CUDA kernel of kiln.AllReduce, and host collectives over
 * device staging (the start's checks and broadcasts when no MPI is there: torchrun-style
 * launches).
 *
 * kiln.AllReduce's kernel: one ncclGroupStart/End around an nc.AllReduce(ncclAvg) per
 * tensor of the bucket (from the gradient's buffer into the output's), on the stream the plan gives the node (cu->stream: the main
 * stream, or a side stream where the plan's streams pass put the node off the critical
 * path, so it overlaps the rest of backward); captured into the step's CUDA graph with
 * everything else (NCCL supports stream capture).
 *
 * Faults: a watchdog thread polls ncclCommGetAsyncError every 100 ms; on an error (a peer
 * gone, a network failure) it aborts the communicator (ncclCommAbort), which ends the
 * NCCL kernels of this rank so the waiting host call fails instead of hanging, and later
 * kernels fail naming the error. Host collectives wait at most the communicator's
 * timeout, then abort it likewise.
 */
#include "../dist/dist.h"
#include "cuda_internal.h"
#include "norm_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_NCCL
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <time.h>

/* NCCL is loaded when data parallelism first asks for it (dlopen of libnccl.so.2), not
 * linked: kiln and its tests start where NCCL is not installed, and a build here runs on a
 * GPU machine whose NCCL lives elsewhere (PyTorch's nvidia/nccl/lib on LD_LIBRARY_PATH). */
static struct {
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*CommAbort)(ncclComm_t);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
    const char *(*GetErrorString)(ncclResult_t);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
} nc;
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;
static bool nc_loaded;
static char nc_error[512];

static void nc_load(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(nc_error, sizeof nc_error, "%s", e ? e : "libnccl.so.2 not found");
        return;
    }
    bool ok = true;
#define SYM(f)                                                        \
    do {                                                              \
        *(void **)&nc.f = dlsym(h, "nccl" #f);                        \
        if (!nc.f) {                                                  \
            snprintf(nc_error, sizeof nc_error, "libnccl has no nccl" #f); \
            ok = false;                                               \
        }                                                             \
    } while (0)
    SYM(GetUniqueId);
    SYM(CommInitRank);
    SYM(CommDestroy);
    SYM(CommAbort);
    SYM(CommGetAsyncError);
    SYM(GetErrorString);
    SYM(AllReduce);
    SYM(Broadcast);
    SYM(AllGather);
    SYM(GroupStart);
    SYM(GroupEnd);
#undef SYM
    nc_loaded = ok;
}

static bool nc_ready(void) {
    pthread_once(&nc_once, nc_load);
    return nc_loaded;
}

typedef struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;  /* host collectives' */
    /* the device collectives' (kiln.AllReduce, SyncBatchNorm's sums): the device's highest
     * stream priority, forked from the plan's stream and joined back (events fork, join), so
     * that in a captured step the NCCL kernel's blocks are scheduled before the pending
     * blocks of the convolutions beside it and it starts when its inputs are ready, not
     * when an SM-filling kernel ends. NULL: on the plan's stream (KILN_CUDA_COMM_PRIORITY=0). */
    cudaStream_t prio;
    cudaEvent_t fork, join;
    pthread_t watchdog;
    bool watching;
    int stop;             /* atomic: the watchdog ends */
    int aborted;          /* atomic: the communicator was aborted */
    ncclResult_t why;     /* the async error that aborted it */
    pthread_mutex_t mu;   /* ncclCommAbort once, not racing a host collective's own */
} nccl_state;

_Static_assert(sizeof(ncclUniqueId) == KILN_NCCL_ID_BYTES, "NCCL's unique id size");

bool kiln_nccl_available(void) { return true; /* built with it; nc_ready() says whether it loads */ }

static kiln_status nccl_fail(kiln_dist *d, ncclResult_t r, const char *what) {
    char who[64];
    return kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: %s: %s: %s", kiln_dist_who(d, who, sizeof who), what,
                     nc.GetErrorString(r));
}

static kiln_status nccl_load(kiln_dist *d) {
    if (nc_ready()) return KILN_OK;
    return kiln_fail(d->ctx, KILN_ERR_UNSUPPORTED,
                     "data parallelism on CUDA: NCCL's library could not be loaded (%s): put the folder holding "
                     "libnccl.so.2 on LD_LIBRARY_PATH (PyTorch's: .../site-packages/nvidia/nccl/lib)",
                     nc_error);
}

static void abort_comm(nccl_state *s, ncclResult_t why) {
    pthread_mutex_lock(&s->mu);
    if (!__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) {
        s->why = why;
        nc.CommAbort(s->comm);
        __atomic_store_n(&s->aborted, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *watch(void *arg) {
    kiln_dist *d = arg;
    nccl_state *s = d->nccl;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) && !__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) {
        ncclResult_t async = ncclSuccess;
        if (nc.CommGetAsyncError(s->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            fprintf(stderr, "kiln: data parallelism: rank %d of %d: NCCL reported %s: aborting the communicator\n",
                    d->rank, d->size, nc.GetErrorString(async));
            abort_comm(s, async);
            break;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

kiln_status kiln_nccl_get_id(kiln_dist *d, unsigned char id[KILN_NCCL_ID_BYTES]) {
    kiln_status lst = nccl_load(d);
    if (lst) return lst;
    ncclUniqueId u;
    ncclResult_t r = nc.GetUniqueId(&u);
    if (r != ncclSuccess) return nccl_fail(d, r, "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    return KILN_OK;
}

kiln_status kiln_nccl_init(kiln_dist *d, const unsigned char id[KILN_NCCL_ID_BYTES]) {
    kiln_status lst = nccl_load(d);
    if (lst) return lst;
    nccl_state *s = kiln_calloc(d->ctx, 1, sizeof *s, "an NCCL communicator");
    if (!s) return KILN_ERR_OUT_OF_MEMORY;
    cudaError_t ce = cudaSetDevice(d->device_index);
    if (ce != cudaSuccess) {
        free(s);
        return kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: rank %d of %d: CUDA device %d: %s", d->rank, d->size,
                         d->device_index, cudaGetErrorString(ce));
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = nc.CommInitRank(&s->comm, d->size, u, d->rank);
    if (r != ncclSuccess) {
        free(s);
        return nccl_fail(d, r, "ncclCommInitRank");
    }
    ce = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    const char *pe = getenv("KILN_CUDA_COMM_PRIORITY");
    if (ce == cudaSuccess && !(pe && !strcmp(pe, "0"))) {
        int least = 0, greatest = 0;
        ce = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (ce == cudaSuccess) ce = cudaStreamCreateWithPriority(&s->prio, cudaStreamNonBlocking, greatest);
        if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming);
        if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming);
    }
    pthread_mutex_init(&s->mu, NULL);
    d->nccl = s;
    if (ce != cudaSuccess) {
        kiln_nccl_impl.free(d);
        return kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: a stream for NCCL: %s", cudaGetErrorString(ce));
    }
    s->watching = pthread_create(&s->watchdog, NULL, watch, d) == 0;
    return KILN_OK;
}

static void nccl_free(kiln_dist *d) {
    nccl_state *s = d->nccl;
    if (!s) return;
    if (s->watching) {
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        pthread_join(s->watchdog, NULL);
    }
    if (!s->aborted) nc.CommDestroy(s->comm);
    if (s->stream) cudaStreamDestroy(s->stream);
    if (s->prio) cudaStreamDestroy(s->prio);
    if (s->fork) cudaEventDestroy(s->fork);
    if (s->join) cudaEventDestroy(s->join);
    pthread_mutex_destroy(&s->mu);
    free(s);
    d->nccl = NULL;
}

static kiln_status aborted(kiln_dist *d, const char *what) {
    nccl_state *s = d->nccl;
    char who[64];
    return kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: %s: %s: the NCCL communicator was aborted (%s): a "
                     "rank died or hangs", kiln_dist_who(d, who, sizeof who), what, nc.GetErrorString(s->why));
}

/* Wait for a stream within the timeout; on timeout or an NCCL error abort the
 * communicator. */
static kiln_status wait_on(kiln_dist *d, cudaStream_t stream, const char *what) {
    nccl_state *s = d->nccl;
    const double deadline = kiln_dist_now() + d->timeout_s;
    char who[64];
    for (;;) {
        cudaError_t ce = cudaStreamQuery(stream);
        if (ce == cudaSuccess) return KILN_OK;
        if (ce != cudaErrorNotReady)
            return kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: %s: %s: %s", kiln_dist_who(d, who, sizeof who),
                             what, cudaGetErrorString(ce));
        if (__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) return aborted(d, what);
        if (kiln_dist_now() > deadline) {
            abort_comm(s, ncclSystemError);
            return kiln_fail(d->ctx, KILN_ERR_IO,
                             "data parallelism: %s: %s did not complete within %.0f s: another rank died or hangs "
                             "(--dist-timeout)",
                             kiln_dist_who(d, who, sizeof who), what, d->timeout_s);
        }
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

static kiln_status wait(kiln_dist *d, const char *what) { return wait_on(d, ((nccl_state *)d->nccl)->stream, what); }

kiln_status kiln_nccl_wait_stream(kiln_dist *d, void *stream, const char *what) {
    if (!d || !d->nccl) return KILN_OK;
    return wait_on(d, (cudaStream_t)stream, what);
}

/* One host collective through device memory: bytes_in in, bytes_out back. */
typedef enum { H_ALLREDUCE_SUM, H_ALLREDUCE_MAX, H_ALLREDUCE_F64, H_BCAST, H_ALLGATHER } host_op;

static kiln_status host_collective(kiln_dist *d, host_op op, const void *in, void *out, size_t bytes) {
    nccl_state *s = d->nccl;
    if (__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) return aborted(d, "a host collective");
    const size_t out_bytes = op == H_ALLGATHER ? bytes * (size_t)d->size : bytes;
    void *buf = NULL;
    cudaError_t ce = cudaSetDevice(d->device_index);
    if (ce == cudaSuccess) ce = cudaMalloc(&buf, out_bytes ? out_bytes : 1);
    if (ce != cudaSuccess)
        return kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: staging %zu bytes on CUDA device %d: %s", out_bytes,
                         d->device_index, cudaGetErrorString(ce));
    char *dst = (char *)buf + (op == H_ALLGATHER ? bytes * (size_t)d->rank : 0);
    ce = cudaMemcpyAsync(dst, in, bytes, cudaMemcpyHostToDevice, s->stream);
    ncclResult_t r = ncclSuccess;
    if (ce == cudaSuccess) {
        switch (op) {
        case H_ALLREDUCE_SUM:
        case H_ALLREDUCE_MAX:
            r = nc.AllReduce(buf, buf, bytes / sizeof(float), ncclFloat, op == H_ALLREDUCE_MAX ? ncclMax : ncclSum,
                              s->comm, s->stream);
            break;
        case H_ALLREDUCE_F64:
            r = nc.AllReduce(buf, buf, bytes / sizeof(double), ncclDouble, ncclSum, s->comm, s->stream);
            break;
        case H_BCAST: r = nc.Broadcast(buf, buf, bytes, ncclUint8, 0, s->comm, s->stream); break;
        case H_ALLGATHER: r = nc.AllGather(dst, buf, bytes, ncclUint8, s->comm, s->stream); break;
        }
    }
    if (ce == cudaSuccess && r == ncclSuccess) ce = cudaMemcpyAsync(out, buf, out_bytes, cudaMemcpyDeviceToHost, s->stream);
    kiln_status st = KILN_OK;
    if (r != ncclSuccess) st = nccl_fail(d, r, "a host collective");
    else if (ce != cudaSuccess)
        st = kiln_fail(d->ctx, KILN_ERR_DEVICE, "data parallelism: a host collective: %s", cudaGetErrorString(ce));
    else st = wait(d, op == H_BCAST ? "a broadcast from rank 0" : op == H_ALLGATHER ? "an all-gather" : "an all-reduce");
    if (!__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) cudaFree(buf);
    return st;
}

static kiln_status nccl_allreduce(kiln_dist *d, float *buf, int64_t n, kiln_dist_op op) {
    return host_collective(d, op == KILN_DIST_MAX ? H_ALLREDUCE_MAX : H_ALLREDUCE_SUM, buf, buf, sizeof(float) * (size_t)n);
}
static kiln_status nccl_allreduce64(kiln_dist *d, double *buf, int64_t n) {
    return host_collective(d, H_ALLREDUCE_F64, buf, buf, sizeof(double) * (size_t)n);
}
static kiln_status nccl_bcast(kiln_dist *d, void *buf, size_t bytes) { return host_collective(d, H_BCAST, buf, buf, bytes); }
static kiln_status nccl_allgather(kiln_dist *d, const void *mine, void *all, size_t bytes) {
    return host_collective(d, H_ALLGATHER, mine, all, bytes);
}
static kiln_status nccl_barrier(kiln_dist *d) {
    float one = 1;
    return nccl_allreduce(d, &one, 1, KILN_DIST_SUM);
}

const kiln_dist_impl kiln_nccl_impl = {"nccl", nccl_allreduce, nccl_allreduce64, nccl_bcast, nccl_allgather, nccl_barrier,
                                       nccl_free};

/* ---------------------------------------------------------------- the kernel */

/* The stream a device collective runs on: s->prio after it waits for cu->stream's work so
 * far (or cu->stream itself); comm_join puts cu->stream after what was queued on it. */
static kiln_status comm_fork(kiln_cuda *cu, nccl_state *s, cudaStream_t *ls) {
    *ls = cu->stream;
    if (!s->prio) return KILN_OK;
    cudaError_t ce = cudaEventRecord(s->fork, cu->stream);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(s->prio, s->fork, 0);
    if (ce != cudaSuccess)
        return kiln_fail(cu->ctx, KILN_ERR_DEVICE, "NCCL's stream after the plan's: %s", cudaGetErrorString(ce));
    *ls = s->prio;
    return KILN_OK;
}

static kiln_status comm_join(kiln_cuda *cu, nccl_state *s) {
    if (!s->prio) return KILN_OK;
    cudaError_t ce = cudaEventRecord(s->join, s->prio);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(cu->stream, s->join, 0);
    if (ce != cudaSuccess)
        return kiln_fail(cu->ctx, KILN_ERR_DEVICE, "the plan's stream after NCCL's: %s", cudaGetErrorString(ce));
    return KILN_OK;
}

/* kiln.AllReduce(x...) -> mean over the ranks of each x (src/ops/all_reduce.c) */
kiln_status kiln_cuda_k_all_reduce(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = cu->ctx;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    if (kiln_attr_int(c->node, "comm", 0) == 0) { /* world 1 alone */
        for (int k = 0; k < c->n_out; k++)
            if (c->out[k]->data != c->in[k]->data)
                KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(c->out[k]->data, c->in[k]->data, kiln_tensor_nbytes(c->out[k]),
                                                     cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    kiln_dist *d = kiln_dist_of(c, "comm");
    if (!d) return KILN_ERR_INVALID_ARGUMENT;
    nccl_state *s = d->nccl;
    if (!s) return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "the communicator has no NCCL (made for the CPU)");
    if (__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) return aborted(d, c->node->name);
    if (d->device_index != cu->device)
        return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "the communicator is on CUDA device %d, the plan on %d",
                            d->device_index, cu->device);
    cudaStream_t ls;
    kiln_status st = comm_fork(cu, s, &ls);
    if (st) return st;
    ncclResult_t r = nc.GroupStart();
    for (int k = 0; k < c->n_out && r == ncclSuccess; k++)
        r = nc.AllReduce(c->in[k]->data, c->out[k]->data, (size_t)kiln_tensor_numel(c->out[k]), ncclFloat, ncclAvg,
                          s->comm, ls); /* out of place where the plan gave two buffers */
    ncclResult_t e = nc.GroupEnd();
    if (r == ncclSuccess) r = e;
    st = comm_join(cu, s); /* (joined even after a failure: a capture must end on its stream) */
    if (r != ncclSuccess) return kiln_op_fail(c, KILN_ERR_DEVICE, "ncclAllReduce: %s", nc.GetErrorString(r));
    return st;
}

kiln_status kiln_cuda_sync_sums(kiln_cuda *cu, kiln_op_ctx *c, const double *in, double *out, int64_t n, int *world) {
    kiln_context *ctx = cu->ctx;
    *world = 1;
    if (kiln_attr_int(c->node, "sync_comm", 0) == 0) {
        if (out != in)
            KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(out, in, (size_t)n * sizeof(double), cudaMemcpyDeviceToDevice,
                                                 cu->stream));
        return KILN_OK;
    }
    kiln_dist *d = kiln_dist_of(c, "sync_comm");
    if (!d) return KILN_ERR_INVALID_ARGUMENT;
    nccl_state *s = d->nccl;
    if (!s) return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "SyncBatchNorm: the communicator has no NCCL (made for the CPU)");
    if (__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE)) return aborted(d, c->node->name);
    if (d->device_index != cu->device)
        return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "the communicator is on CUDA device %d, the plan on %d",
                            d->device_index, cu->device);
    cudaStream_t ls;
    kiln_status st = comm_fork(cu, s, &ls);
    if (st) return st;
    ncclResult_t r = nc.AllReduce(in, out, (size_t)n, ncclDouble, ncclSum, s->comm, ls);
    st = comm_join(cu, s);
    if (r != ncclSuccess) return kiln_op_fail(c, KILN_ERR_DEVICE, "SyncBatchNorm ncclAllReduce: %s", nc.GetErrorString(r));
    if (st) return st;
    *world = d->size;
    return KILN_OK;
}

#else /* CUDA without NCCL: src/dist/nccl_stub.c has the dist entries */

kiln_status kiln_cuda_sync_sums(kiln_cuda *cu, kiln_op_ctx *c, const double *in, double *out, int64_t n, int *world) {
    *world = 1;
    if (kiln_attr_int(c->node, "sync_comm", 0) != 0)
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "this build has no NCCL: SyncBatchNorm on CUDA needs it");
    if (out != in)
        KILN_CUDA_CHECK(cu->ctx, cudaMemcpyAsync(out, in, (size_t)n * sizeof(double), cudaMemcpyDeviceToDevice,
                                                 cu->stream));
    return KILN_OK;
}

kiln_status kiln_cuda_k_all_reduce(kiln_cuda *cu, kiln_op_ctx *c) {
    if (kiln_attr_int(c->node, "comm", 0) != 0)
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "this build has no NCCL: data parallelism on CUDA needs it");
    for (int k = 0; k < c->n_out; k++)
        if (c->out[k]->data != c->in[k]->data)
            KILN_CUDA_CHECK(cu->ctx, cudaMemcpyAsync(c->out[k]->data, c->in[k]->data, kiln_tensor_nbytes(c->out[k]),
                                                     cudaMemcpyDeviceToDevice, cu->stream));
    return KILN_OK;
}

#endif

/* f32 tensors, NCHW or NHWC alike (the bytes are reduced as they lie); no skip flag
 * (gradient accumulation runs on the CPU only) */
bool kiln_cuda_sup_all_reduce(const kiln_op_ctx *c, char *why, size_t n) {
    if (kiln_attr_int(c->node, "skip", 0)) {
        snprintf(why, n, "the skip flag (gradient accumulation) is CPU-only");
        return false;
    }
    for (int k = 0; k < c->n_out; k++)
        if (!c->in[k] || c->in[k]->dtype != KILN_F32) {
            snprintf(why, n, "input %d must be f32", k);
            return false;
        }
    return true;
}
