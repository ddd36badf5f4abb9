/*
 * dist.c — the communicator (kiln_dist, kiln.h; internals in dist.h): which ranks, the
 * TCP rendezvous of torchrun's variables (NCCL's unique id from rank 0 to the others),
 * the start-of-training checks and broadcasts, and the pass that puts kiln.AllReduce
 * nodes into a training graph.
 */
#include "dist.h"

#include "../core/backend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double kiln_dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *kiln_dist_who(const kiln_dist *d, char *buf, size_t n) {
    snprintf(buf, n, "rank %d of %d", d->rank, d->size);
    return buf;
}

/* ------------------------------------------------------------ one rank alone */

static kiln_status single_allreduce(kiln_dist *d, float *buf, int64_t n, kiln_dist_op op) {
    (void)d, (void)buf, (void)n, (void)op;
    return KILN_OK;
}
static kiln_status single_allreduce64(kiln_dist *d, double *buf, int64_t n) {
    (void)d, (void)buf, (void)n;
    return KILN_OK;
}
static kiln_status single_bcast(kiln_dist *d, void *buf, size_t bytes) {
    (void)d, (void)buf, (void)bytes;
    return KILN_OK;
}
static kiln_status single_allgather(kiln_dist *d, const void *mine, void *all, size_t bytes) {
    (void)d;
    memcpy(all, mine, bytes);
    return KILN_OK;
}
static kiln_status single_barrier(kiln_dist *d) {
    (void)d;
    return KILN_OK;
}
static void single_free(kiln_dist *d) { (void)d; }

/* World size 1 without MPI or NCCL: every collective is the identity. */
static const kiln_dist_impl single_impl = {"single", single_allreduce, single_allreduce64, single_bcast,
                                           single_allgather, single_barrier, single_free};

/* ------------------------------------------------------------ the environment */

static bool env_int(kiln_context *ctx, const char *name, int lo, int *out, bool required, kiln_status *st) {
    const char *s = getenv(name);
    if (!s || !*s) {
        if (required)
            *st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                            "data parallelism: the environment variable %s is not set (torchrun's RANK, WORLD_SIZE, "
                            "LOCAL_RANK, MASTER_ADDR, MASTER_PORT; kiln launch sets them)",
                            name);
        return false;
    }
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > 1 << 20) {
        *st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "data parallelism: %s='%s' is not an integer >= %d", name, s, lo);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int kiln_dist_launched(void) {
    const char *w = getenv("WORLD_SIZE");
    if (!w) w = getenv("OMPI_COMM_WORLD_SIZE");
    if (!w) w = getenv("PMI_SIZE");
    return w && atoi(w) >= 1;
}

/* ------------------------------------------------------------ TCP rendezvous */

static kiln_status sock_fail(kiln_context *ctx, const char *what, const char *host, const char *port, int rank) {
    return kiln_fail(ctx, KILN_ERR_IO, "data parallelism: rank %d: %s %s:%s: %s", rank, what, host, port,
                     errno ? strerror(errno) : "timed out");
}

/* All n bytes within the deadline. */
static bool io_all(int fd, void *buf, size_t n, bool writing, double deadline) {
    char *p = buf;
    while (n) {
        double left = deadline - kiln_dist_now();
        if (left <= 0) {
            errno = 0;
            return false;
        }
        struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            return false;
        }
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ECONNRESET;
            return false;
        }
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Rank 0 listens on the rendezvous port and sends `id` to each of the others, which
 * connect to MASTER_ADDR:port (retrying until rank 0 listens) and send their rank first.
 * The port is MASTER_PORT, except under torchrun, whose agent serves its own store there
 * (TORCHELASTIC_USE_AGENT_STORE=True; measured with torch 2.11, --standalone or not): then
 * the port above it. KILN_RENDEZVOUS_PORT, when set, is the port in every case. */
kiln_status kiln_dist_rendezvous(kiln_dist *d, unsigned char id[KILN_NCCL_ID_BYTES]) {
    kiln_context *ctx = d->ctx;
    const char *host = getenv("MASTER_ADDR"), *port = getenv("KILN_RENDEZVOUS_PORT");
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    char above[16];
    if (!host || !*host) host = "127.0.0.1";
    if (!port || !*port) {
        port = getenv("MASTER_PORT");
        if (port && *port && agent && !strcmp(agent, "True")) {
            char *end = NULL;
            long p = strtol(port, &end, 10);
            if (*end || p < 1 || p >= 65535)
                return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "data parallelism: rank %d: MASTER_PORT='%s' is not a "
                                 "port below 65535 (torchrun: the rendezvous takes the port above it)", d->rank, port);
            snprintf(above, sizeof above, "%ld", p + 1);
            port = above;
        }
    }
    if (!port || !*port)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "data parallelism: rank %d: MASTER_PORT is not set (the rendezvous of %d ranks at MASTER_ADDR "
                         "%s needs a port)",
                         d->rank, d->size, host);
    const double deadline = kiln_dist_now() + d->timeout_s;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (d->rank == 0) hints.ai_flags = AI_PASSIVE;
    int gai = getaddrinfo(d->rank == 0 ? NULL : host, port, &hints, &ai);
    if (gai)
        return kiln_fail(ctx, KILN_ERR_IO, "data parallelism: rank %d: MASTER_ADDR:MASTER_PORT %s:%s: %s", d->rank, host,
                         port, gai_strerror(gai));
    kiln_status st = KILN_OK;
    if (d->rank == 0) {
        int ls = socket(ai->ai_family, SOCK_STREAM, 0);
        int one = 1;
        if (ls >= 0) setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ls < 0 || bind(ls, ai->ai_addr, ai->ai_addrlen) || listen(ls, d->size))
            st = sock_fail(ctx, "cannot listen on port (the rendezvous: MASTER_PORT, the port above it under torchrun, or "
                                "KILN_RENDEZVOUS_PORT)", "*", port, 0);
        for (int got = 1; got < d->size && !st; got++) {
            double left = deadline - kiln_dist_now();
            struct pollfd pf = {.fd = ls, .events = POLLIN};
            int r = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
            if (r < 0 && errno == EINTR) {
                got--;
                continue;
            }
            if (r <= 0) {
                st = kiln_fail(ctx, KILN_ERR_IO,
                               "data parallelism: rank 0: only %d of %d ranks reached port %s within %.0f s", got,
                               d->size, port, d->timeout_s);
                break;
            }
            int c = accept(ls, NULL, NULL);
            int32_t peer = -1;
            if (c < 0 || !io_all(c, &peer, sizeof peer, false, deadline) || peer <= 0 || peer >= d->size ||
                !io_all(c, id, KILN_NCCL_ID_BYTES, true, deadline))
                st = sock_fail(ctx, "the rendezvous with a rank failed on port", "*", port, 0);
            if (c >= 0) close(c);
        }
        if (ls >= 0) close(ls);
    } else {
        int s = -1;
        for (;;) {
            s = socket(ai->ai_family, SOCK_STREAM, 0);
            if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) break;
            if (s >= 0) close(s);
            s = -1;
            if (kiln_dist_now() > deadline) break;
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        int32_t me = d->rank;
        if (s < 0)
            st = kiln_fail(ctx, KILN_ERR_IO, "data parallelism: rank %d: rank 0 at MASTER_ADDR:MASTER_PORT %s:%s was "
                           "not reachable within %.0f s", d->rank, host, port, d->timeout_s);
        else if (!io_all(s, &me, sizeof me, true, deadline) || !io_all(s, id, KILN_NCCL_ID_BYTES, false, deadline))
            st = sock_fail(ctx, "no NCCL id from rank 0 at", host, port, d->rank);
        if (s >= 0) close(s);
    }
    freeaddrinfo(ai);
    return st;
}

/* ------------------------------------------------------------ create and free */

static uint64_t next_id = 1;

kiln_status kiln_dist_create(kiln_context *ctx, const kiln_dist_options *opts, kiln_dist **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_dist_options o;
    kiln_status st = kiln_options_take(ctx, "kiln_dist_options", opts, &o, sizeof o);
    if (st) return st;
    if (!opts) o.device_index = -1;
    if (ctx->dist)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "this context already has a communicator (rank %d of %d)",
                         ctx->dist->rank, ctx->dist->size);
    if (o.kind < KILN_DIST_AUTO || o.kind > KILN_DIST_ENV)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown communicator kind %d", (int)o.kind);
    if (o.device != KILN_DEVICE_CPU && o.device != KILN_DEVICE_CUDA)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown device %d", (int)o.device);
    kiln_dist *d = kiln_calloc(ctx, 1, sizeof *d, "a communicator");
    if (!d) return KILN_ERR_OUT_OF_MEMORY;
    d->ctx = ctx;
    d->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    d->device = o.device;
    d->timeout_s = o.timeout_s > 0 ? o.timeout_s : 300;
    d->host = &single_impl;
    kiln_dist_kind kind = o.kind;
    if (kind == KILN_DIST_AUTO) kind = mpi_launched() && kiln_mpi_available() ? KILN_DIST_MPI : KILN_DIST_ENV;
    if (kind == KILN_DIST_ENV && mpi_launched() && !getenv("WORLD_SIZE") && !kiln_mpi_available())
        st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                       "data parallelism: started by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE is set), but this build has "
                       "no MPI: each rank would train alone (configure with MPI, or launch with kiln launch / torchrun)");
    if (st) {
        /* reported below */
    } else if (kind == KILN_DIST_MPI) {
        d->mpi = true;
        st = kiln_mpi_join(d);
        if (!st) d->host = &kiln_mpi_impl;
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        d->local_rank = lr ? atoi(lr) : 0;
    } else {
        /* torchrun's variables; none at all: one rank alone */
        if (getenv("WORLD_SIZE") || getenv("RANK")) {
            if (env_int(ctx, "WORLD_SIZE", 1, &d->size, true, &st) && env_int(ctx, "RANK", 0, &d->rank, true, &st)) {
                if (!env_int(ctx, "LOCAL_RANK", 0, &d->local_rank, false, &st) && !st) d->local_rank = d->rank;
                if (!st && d->rank >= d->size)
                    st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "data parallelism: RANK=%d is not below WORLD_SIZE=%d",
                                   d->rank, d->size);
            }
        } else {
            d->size = 1;
        }
    }
    d->device_index = o.device_index >= 0 ? o.device_index : o.device == KILN_DEVICE_CUDA ? d->local_rank : 0;
    if (!st && o.device == KILN_DEVICE_CUDA) {
        /* NCCL: the id from rank 0, by MPI or the TCP rendezvous */
        unsigned char id[KILN_NCCL_ID_BYTES];
        memset(id, 0, sizeof id);
        if (!kiln_nccl_available())
            st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "data parallelism on CUDA needs NCCL: this build has none");
        if (!st && d->rank == 0) st = kiln_nccl_get_id(d, id);
        if (!st && d->size > 1) st = d->mpi ? kiln_mpi_bcast(d, id, sizeof id) : kiln_dist_rendezvous(d, id);
        if (!st) st = kiln_nccl_init(d, id);
        if (!st && !d->mpi) d->host = &kiln_nccl_impl;
    } else if (!st && !d->mpi && d->size > 1) {
        st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                       "data parallelism: rank %d of %d: CPU ranks reduce through MPI: start them with mpirun (this "
                       "build %s MPI)",
                       d->rank, d->size, kiln_mpi_available() ? "has" : "has no");
    }
    if (st) {
        if (d->host) d->host->free(d);
        free(d);
        return st;
    }
    ctx->dist = d;
    *out = d;
    return KILN_OK;
}

void kiln_dist_free(kiln_dist *d) {
    if (!d) return;
    if (d->ctx->dist == d) d->ctx->dist = NULL;
    if (d->host) d->host->free(d);
    if (d->nccl && d->host != &kiln_nccl_impl) kiln_nccl_impl.free(d);
    free(d);
}

int kiln_dist_rank(const kiln_dist *d) { return d ? d->rank : 0; }
int kiln_dist_size(const kiln_dist *d) { return d ? d->size : 1; }
int kiln_dist_local_rank(const kiln_dist *d) { return d ? d->local_rank : 0; }

kiln_status kiln_dist_mean_f32(kiln_dist *d, float *data, int64_t n) {
    if (!d || (n && !data) || n < 0) return KILN_ERR_INVALID_ARGUMENT;
    kiln_status st = d->host->allreduce_f32(d, data, n, KILN_DIST_SUM);
    for (int64_t i = 0; i < n && !st; i++) data[i] /= (float)d->size;
    return kiln_api_end(d->ctx, st);
}

kiln_status kiln_dist_barrier(kiln_dist *d) {
    if (!d) return KILN_ERR_INVALID_ARGUMENT;
    return kiln_api_end(d->ctx, d->host->barrier(d));
}

kiln_status kiln_dist_bcast(kiln_dist *d, void *buf, size_t bytes) { return d->host->bcast(d, buf, bytes); }

kiln_dist *kiln_dist_of(kiln_op_ctx *c, const char *attr) {
    const int64_t id = kiln_attr_int(c->node, attr, 0);
    kiln_dist *d = c->kctx->dist;
    if (!d || (int64_t)d->id != id) {
        kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "communicator %lld is not this context's (%s)", (long long)id,
                     d ? "another one" : "none: it was freed");
        return NULL;
    }
    return d;
}

/* ------------------------------------------------------------ the same model */

uint64_t kiln_dist_hash_bytes(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

static uint64_t hash_str(const char *s, uint64_t h) { return kiln_dist_hash_bytes(s ? s : "", s ? strlen(s) + 1 : 1, h); }

uint64_t kiln_dist_hash_model(const kiln_model *m, uint64_t h) {
    for (int i = 0; i < m->n_nodes; i++) {
        h = hash_str(m->nodes[i].op_type, h);
        h = kiln_dist_hash_bytes(&m->nodes[i].n_in, sizeof(int), h);
        h = kiln_dist_hash_bytes(m->nodes[i].in, sizeof(int) * (size_t)m->nodes[i].n_in, h);
    }
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        h = hash_str(v->name, h);
        h = kiln_dist_hash_bytes(&v->dtype, sizeof v->dtype, h);
        h = kiln_dist_hash_bytes(&v->ndim, sizeof v->ndim, h);
        if (v->ndim > 0) h = kiln_dist_hash_bytes(v->dims, sizeof(int64_t) * (size_t)v->ndim, h);
    }
    return h;
}

kiln_status kiln_dist_check_same(kiln_dist *d, const char *what, uint64_t hash) {
    if (d->size == 1) return KILN_OK;
    uint64_t *all = kiln_calloc(d->ctx, (size_t)d->size, sizeof *all, "the ranks' hashes");
    if (!all) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = d->host->allgather(d, &hash, all, sizeof hash);
    for (int r = 1; r < d->size && !st; r++)
        if (all[r] != all[0])
            st = kiln_fail(d->ctx, KILN_ERR_INVALID_ARGUMENT,
                           "data parallelism: rank %d's %s differs from rank 0's (hash %016llx, rank 0 %016llx; this is "
                           "rank %d of %d): every rank must train the same model on the same data set and batch",
                           r, what, (unsigned long long)all[r], (unsigned long long)all[0], d->rank, d->size);
    free(all);
    return st;
}

/* ------------------------------------------------------------ the AllReduce pass */

static int fresh(kiln_model *m, const char *base) {
    char name[512];
    snprintf(name, sizeof name, "%s:allreduced", base);
    for (int k = 1; kiln_model_find_value(m, name) >= 0; k++) snprintf(name, sizeof name, "%s:allreduced.%d", base, k);
    return kiln_model_get_value(m, name);
}

/* Move node `from` (the last one) to position `to` (<= from), shifting the others up. */
static void move_node(kiln_model *m, int from, int to) {
    if (to >= from) return;
    kiln_node nd = m->nodes[from];
    memmove(&m->nodes[to + 1], &m->nodes[to], sizeof(kiln_node) * (size_t)(from - to));
    m->nodes[to] = nd;
}

static int producer_of(const kiln_model *m, int v) {
    for (int i = m->n_nodes - 1; i >= 0; i--)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] == v) return i;
    return -1;
}

static size_t value_bytes(const kiln_value *v) {
    size_t n = 4;
    for (int i = 0; i < v->ndim; i++) n *= v->dims[i] > 0 ? (size_t)v->dims[i] : 1;
    return n;
}

/* The buckets: gradients in reverse parameter order (the last layers' come first out of
 * backward), bucket_bytes at most (a bigger tensor alone). order[] gets the parameter
 * indices k in that order, start[b] where bucket b begins (start[nb] = n); returns nb, or -1
 * out of memory (its message set).
 *
 * The last bucket's all-reduce cannot begin before the last gradient is made, and nothing
 * of backward is left to hide it then: it is the step's tail. So the gradients made by the
 * last producer (the first layer's weight gradient, ~37 KB in ResNet-50) get a bucket of
 * their own, and the rest of what would have been the last bucket (~2 MB there) is reduced
 * while that producer runs. KILN_DIST_TAIL_BUCKET=0: one last bucket as before. */
static int plan_buckets(const kiln_model *m, size_t bucket_bytes, int n, const int *params, const int *grads,
                        int *order, int *start) {
    int nb = 0, i = 0;
    size_t bytes = 0;
    for (int k = n - 1; k >= 0; k--) {
        const size_t b = value_bytes(&m->values[params[k]]);
        if (i == 0 || bytes + b > bucket_bytes) {
            start[nb++] = i;
            bytes = 0;
        }
        bytes += b;
        order[i++] = k;
    }
    start[nb] = n;
    const char *e = getenv("KILN_DIST_TAIL_BUCKET");
    if (nb == 0 || (e && !strcmp(e, "0"))) return nb;
    int last = -1, *pos = kiln_calloc(m->ctx, (size_t)n, sizeof *pos, "all-reduce buckets");
    if (!pos) return -1;
    for (int k = 0; k < n; k++) {
        pos[k] = producer_of(m, grads[k]);
        if (pos[k] > last) last = pos[k];
    }
    /* the last bucket, stably partitioned: what the last producer makes goes to its end */
    const int a = start[nb - 1], len = n - a;
    int *tmp = kiln_calloc(m->ctx, 2 * (size_t)len, sizeof *tmp, "all-reduce buckets"), rest = 0, tail = 0;
    if (!tmp) {
        free(pos);
        return -1;
    }
    for (int j = a; j < n; j++) {
        if (pos[order[j]] == last) tmp[len + tail++] = order[j];
        else tmp[rest++] = order[j];
    }
    if (tail > 0 && rest > 0) { /* both parts non-empty: two buckets */
        memcpy(&order[a], tmp, sizeof(int) * (size_t)rest);
        memcpy(&order[a + rest], tmp + len, sizeof(int) * (size_t)tail);
        start[nb++] = a + rest;
        start[nb] = n;
    }
    free(tmp);
    free(pos);
    return nb;
}

kiln_status kiln_dist_insert_allreduce(kiln_model *m, const kiln_dist *d, size_t bucket_bytes, int n, const int *params,
                                       int *grads, int skip) {
    kiln_context *ctx = m->ctx;
    if (bucket_bytes == 0) bucket_bytes = 25u << 20;
    int *in = kiln_calloc(ctx, (size_t)n + 2, sizeof *in, "all-reduce buckets");
    int *idx = kiln_calloc(ctx, (size_t)n + 1, sizeof *idx, "all-reduce buckets");
    int *out = kiln_calloc(ctx, (size_t)n + 1, sizeof *out, "all-reduce buckets");
    int *order = kiln_calloc(ctx, (size_t)n + 1, sizeof *order, "all-reduce buckets");
    int *start = kiln_calloc(ctx, (size_t)n + 2, sizeof *start, "all-reduce buckets");
    kiln_status st = in && idx && out && order && start ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    const int nb = st ? 0 : plan_buckets(m, bucket_bytes, n, params, grads, order, start);
    if (nb < 0) st = KILN_ERR_OUT_OF_MEMORY;
    int prev = -1; /* the previous bucket's first output: the order of the buckets */
    for (int bucket = 0; bucket < nb && !st; bucket++) {
        int cnt = 0;
        for (int j = start[bucket]; j < start[bucket + 1]; j++) {
            idx[cnt] = order[j];
            in[cnt++] = grads[order[j]];
        }
        int n_in = cnt;
        if (skip >= 0) in[n_in++] = skip;
        if (prev >= 0) in[n_in++] = prev;
        int last = -1;
        for (int j = 0; j < cnt && !st; j++) {
            const int p = producer_of(m, in[j]);
            if (p > last) last = p;
            if ((out[j] = fresh(m, m->values[in[j]].name)) < 0) st = KILN_ERR_OUT_OF_MEMORY;
        }
        kiln_attr *a = st ? NULL : kiln_calloc(ctx, 4, sizeof *a, "all-reduce attributes");
        if (!st && !a) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st) {
            a[0].name = kiln_strdup(ctx, "comm");
            a[0].type = KILN_ATTR_INT;
            a[0].i = (int64_t)d->id;
            a[1].name = kiln_strdup(ctx, "world");
            a[1].type = KILN_ATTR_INT;
            a[1].i = d->size;
            a[2].name = kiln_strdup(ctx, "skip");
            a[2].type = KILN_ATTR_INT;
            a[2].i = skip >= 0;
            a[3].name = kiln_strdup(ctx, "after");
            a[3].type = KILN_ATTR_INT;
            a[3].i = prev >= 0;
            if (!a[0].name || !a[1].name || !a[2].name || !a[3].name) {
                for (int j = 0; j < 4; j++) kiln_attr_clear(&a[j]);
                free(a);
                st = KILN_ERR_OUT_OF_MEMORY;
            }
        }
        if (!st) {
            char name[64];
            snprintf(name, sizeof name, "kiln:allreduce.%d", bucket);
            if (prev >= 0) {
                const int p = producer_of(m, prev);
                if (p > last) last = p;
            }
            const int at = kiln_model_add_node_raw(m, "AllReduce", name, "kiln", n_in, in, cnt, out, 4, a);
            if (at < 0) st = KILN_ERR_OUT_OF_MEMORY;
            else move_node(m, at, last + 1);
            prev = out[0];
        }
        for (int j = 0; j < cnt && !st; j++) grads[idx[j]] = out[j];
    }
    free(in);
    free(idx);
    free(out);
    free(order);
    free(start);
    return st;
}

/* ------------------------------------------------------------ the trainer's start */

kiln_status kiln_dist_trainer_start(kiln_dist *d, const kiln_model *train, int n_params, struct kiln_param *params,
                                    int n_states, struct kiln_state *states) {
    kiln_status st = kiln_dist_check_same(d, "training graph (ops, parameter and input shapes)",
                                          kiln_dist_hash_model(train, 0xcbf29ce484222325ull));
    for (int k = 0; k < n_params && !st; k++)
        st = d->host->bcast(d, params[k].value->data, kiln_tensor_nbytes(params[k].value));
    for (int k = 0; k < n_states && !st; k++)
        st = d->host->bcast(d, states[k].value->data, kiln_tensor_nbytes(states[k].value));
    return st;
}

kiln_status kiln_dist_check_epoch(kiln_dist *d, int64_t n, int64_t sample, int64_t batch, uint64_t seed, int64_t epoch,
                                  int64_t offset, int64_t start) {
    const int64_t v[7] = {n, sample, batch, (int64_t)seed, epoch, offset, start};
    return kiln_dist_check_same(d, "data set (samples, sample size), batch, seed or position",
                                kiln_dist_hash_bytes(v, sizeof v, 0xcbf29ce484222325ull));
}
