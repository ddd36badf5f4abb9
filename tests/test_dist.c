/* test_dist.c — data-parallel training over MPI on CPU ranks (run under mpirun, see
 * tests/CMakeLists.txt):
 *
 *   test_dist same DATA_DIR     every rank trains mnist-net (no Dropout) for 16 steps of 32
 *                               samples of its shard; rank 0 also trains one process alone
 *                               with the ranks' combined batch (W * 32) in the same data
 *                               order (DistributedSampler's shards of one permutation are
 *                               the single loader's batches). The mean of the ranks' losses
 *                               must be the single run's loss at every step, the weights
 *                               the single run's within fp32 tolerance, and every rank's
 *                               weights bitwise the same. Then RESUMED steps of epoch 1
 *                               resumed at sample FROM (kiln_trainer_set_epoch_start, on no
 *                               step's boundary): the ranks' shards of the rest against the
 *                               single process's batches of it, the same way.
 *   test_dist accumulate DATA_DIR  the same with accumulate 2 (16 samples per micro-batch):
 *                               only the last micro-batch reduces.
 *   test_dist syncbn DATA_DIR   the same with a small CNN holding BatchNormalization, the ranks
 *                               with sync_bn against one process's BatchNormalization (also
 *                               the running statistics).
 *   test_dist mismatch DATA_DIR the last rank builds mnist-net with Dropout: every rank's
 *                               kiln_trainer_create fails naming that rank; then the last
 *                               rank asks for another batch: kiln_trainer_train_epoch fails
 *                               everywhere, naming it.
 *   test_dist hang DATA_DIR     rank 1 stops answering at step 3: the others fail within
 *                               the 3 s timeout, naming the all-reduce (the test script
 *                               checks the message and the exit status).
 *   test_dist kill DATA_DIR     rank 1 dies (SIGKILL) at step 3: mpirun stops the others.
 *   test_dist rendezvous        (no MPI, no GPU) the NCCL id's TCP rendezvous under torchrun's
 *                               variables, its agent holding MASTER_PORT: 2, 3 and 4 forked
 *                               ranks meet on the port above it; without the agent's
 *                               variable the ranks fail within the timeout.
 *   test_dist shard             (no MPI) kiln_loader_shard and a sharded loader: the shards
 *                               of W ranks interleave into the epoch's permutation, padded
 *                               with its first samples or cut, every shard the same length;
 *                               a loader resumed mid-epoch on another number of ranks and
 *                               batch (kiln_loader_seek_sample), many sizes.
 *   test_dist resume-save DATA_DIR CK   (under mpirun -np 2) the syncbn model trained for
 *                               4 steps of 32 per rank with a sharded loader, then rank 0
 *                               saves CK with its position; the consumed indices go to
 *                               CK.idx; then the ranks finish the epoch uninterrupted and
 *                               rank 0 writes the weights' hash to CK.hash.
 *   test_dist resume-load DATA_DIR CK B  (any -np) every rank loads CK and finishes its
 *                               epoch in batches of B: together with CK.idx every sample
 *                               of the epoch once (the padding aside), the same weights on
 *                               every rank (bitwise the uninterrupted run's at the saving
 *                               world size and batch), the next epoch this world size's.
 *   test_dist resume-bad DATA_DIR CK  (-np 2 or more) rank 1 reads a file that is not
 *                               there, rank 0 CK: every rank's load fails, the others naming
 *                               rank 1, and no rank's weights change.
 *                               tests/dist_resume.sh runs these three.
 */
#include "core/internal.h"
#include "dist/dist.h"
#include "train/trainer_internal.h"

#include <kiln_models.h>
#include <kiln_tools.h>
#include <math.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int fails;

#define STEPS 16
#define BATCH 32
#define N_DATA 2000 /* not a multiple of 3: the shards are padded */
#define FROM 1001   /* run_same's resumed epoch starts at this sample of its order */
#define RESUMED 4   /* and runs this many steps (none of them its last: no padding) */

/* Conv(1->4, 3x3, stride 2) BatchNormalization Relu Flatten Gemm(676->10) LogSoftmax NLL */
static kiln_status bn_net(kiln_context *ctx, kiln_model **out) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    const int64_t xd[4] = {-1, 1, 28, 28}, yd[1] = {-1};
    if (!st) st = kiln_model_add_input(m, "image", KILN_F32, 4, xd);
    if (!st) st = kiln_model_add_input(m, "label", KILN_I64, 1, yd);
    static const struct { const char *name; int ndim; int64_t dims[4]; double lo, hi; } w[] = {
        {"conv.w", 4, {4, 1, 3, 3}, -0.3, 0.3}, {"conv.b", 1, {4}, -0.1, 0.1}, {"bn.scale", 1, {4}, 0.8, 1.2},
        {"bn.bias", 1, {4}, -0.1, 0.1},         {"bn.mean", 1, {4}, 0, 0},      {"bn.var", 1, {4}, 1, 1},
        {"fc.w", 2, {10, 676}, -0.04, 0.04},    {"fc.b", 1, {10}, -0.04, 0.04}};
    uint64_t s = 99;
    for (size_t i = 0; i < sizeof w / sizeof w[0] && !st; i++) {
        kiln_tensor *t = kiln_tensor_new(ctx, KILN_F32, w[i].ndim, w[i].dims);
        for (int64_t k = 0; k < kiln_tensor_numel(t); k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            ((float *)t->data)[k] = (float)(w[i].lo + (w[i].hi - w[i].lo) * (double)(s >> 11) / 9007199254740992.0);
        }
        st = kiln_model_add_initializer(m, w[i].name, t);
        kiln_tensor_free(t);
    }
    kiln_node *n = NULL;
    if (!st) st = kiln_model_add_node(m, "Conv", "conv", 3, (const char *[]){"image", "conv.w", "conv.b"}, 1,
                                      (const char *[]){"c"}, &n);
    if (!st) st = kiln_node_set_ints(n, "strides", 2, (const int64_t[]){2, 2});
    if (!st) st = kiln_model_add_node(m, "BatchNormalization", "bn", 5,
                                      (const char *[]){"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"}, 1,
                                      (const char *[]){"b"}, &n);
    if (!st) st = kiln_model_add_node(m, "Relu", "relu", 1, (const char *[]){"b"}, 1, (const char *[]){"r"}, &n);
    if (!st) st = kiln_model_add_node(m, "Flatten", "flat", 1, (const char *[]){"r"}, 1, (const char *[]){"f"}, &n);
    if (!st) st = kiln_model_add_node(m, "Gemm", "fc", 3, (const char *[]){"f", "fc.w", "fc.b"}, 1,
                                      (const char *[]){"z"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_node(m, "LogSoftmax", "lsm", 1, (const char *[]){"z"}, 1,
                                      (const char *[]){"logprobs"}, &n);
    if (!st) st = kiln_node_set_int(n, "axis", 1);
    if (!st) st = kiln_model_add_node(m, "NegativeLogLikelihoodLoss", "nll", 2, (const char *[]){"logprobs", "label"}, 1,
                                      (const char *[]){"loss"}, &n);
    if (!st) st = kiln_model_add_output(m, "logprobs");
    if (!st) st = kiln_model_add_output(m, "loss");
    if (!st) st = kiln_model_finalize(m);
    if (st) kiln_model_free(m);
    else *out = m;
    return st;
}

static int sync_bn; /* the syncbn mode: bn_net, the ranks with sync_bn */

static kiln_trainer *make_trainer(kiln_context *ctx, kiln_dist *d, int dropout, int accumulate, kiln_status *st) {
    kiln_model *m = NULL;
    *st = sync_bn ? bn_net(ctx, &m) : kiln_model_mnist_net(ctx, -1, 42, dropout, &m);
    if (*st) return NULL;
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.threads = 1;
    o.dist = d;
    o.accumulate = accumulate;
    o.bucket_bytes = 256 << 10; /* several buckets */
    o.sync_bn = sync_bn && d;
    kiln_trainer *t = NULL;
    *st = kiln_trainer_create(m, "loss", &o, &t);
    kiln_model_free(m);
    return *st ? NULL : t;
}

/* The first N_DATA samples of Fashion-MNIST's training split. */
static kiln_status load(kiln_context *ctx, const char *dir, kiln_tensor **x, kiln_tensor **y) {
    kiln_mnist ds;
    kiln_status st = kiln_mnist_load(ctx, dir, KILN_F32, KILN_FASHION_MNIST_MEAN, KILN_FASHION_MNIST_STD, &ds);
    if (st) return st;
    const int64_t xd[4] = {N_DATA, 1, 28, 28}, yd[1] = {N_DATA};
    *x = kiln_tensor_new(ctx, KILN_F32, 4, xd);
    *y = kiln_tensor_new(ctx, KILN_I64, 1, yd);
    memcpy((*x)->data, ds.train_images->data, kiln_tensor_nbytes(*x));
    memcpy((*y)->data, ds.train_labels->data, kiln_tensor_nbytes(*y));
    kiln_mnist_free(&ds);
    return KILN_OK;
}

static uint64_t weights_hash(const kiln_trainer *t) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < t->n_params; k++)
        h = kiln_dist_hash_bytes(t->params[k].value->data, kiln_tensor_nbytes(t->params[k].value), h);
    return h;
}

static int producer(const kiln_model *m, int v) {
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] == v) return i;
    return -1;
}

/* The all-reduce buckets (src/dist/dist.c plan_buckets): the gradients that the last
 * gradient producer makes are reduced alone, in the last bucket, after the others (the
 * step's tail); no other bucket holds one of them. (With accumulation one node makes every
 * gradient the update reads: that holds trivially.) */
static void check_buckets(const kiln_model *m, int accumulate) {
    int n_ar = 0, last_ar = -1, last_prod = -1, grads = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *nd = &m->nodes[i];
        if (strcmp(nd->op_type, "AllReduce")) continue;
        n_ar++;
        last_ar = i;
        for (int k = 0; k < nd->n_out; k++) {
            const int p = producer(m, nd->in[k]);
            if (p > last_prod) last_prod = p;
            grads++;
        }
    }
    CHECK(n_ar >= (accumulate > 1 ? 1 : 2), "%d all-reduce buckets", n_ar);
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *nd = &m->nodes[i];
        if (strcmp(nd->op_type, "AllReduce")) continue;
        for (int k = 0; k < nd->n_out; k++) {
            const int p = producer(m, nd->in[k]);
            if (i == last_ar)
                CHECK(p == last_prod, "the last bucket's gradient %d (of %d) is made by node %d, not by the last "
                      "producer %d", k, nd->n_out, p, last_prod);
            else
                CHECK(p != last_prod || accumulate > 1, "bucket node %d holds a gradient of the last producer %d", i, p);
        }
    }
    if (accumulate == 1 && last_ar >= 0)
        CHECK(m->nodes[last_ar].n_out < grads, "the last bucket holds all %d gradients", grads);
}

static void run_same(kiln_context *ctx, kiln_dist *d, const char *dir, int accumulate) {
    const int W = kiln_dist_size(d), r = kiln_dist_rank(d);
    kiln_tensor *x = NULL, *y = NULL;
    kiln_status st = load(ctx, dir, &x, &y);
    CHECK(!st, "rank %d: loading %s: %s", r, dir, kiln_context_message(ctx));
    if (st) return;
    kiln_trainer *t = make_trainer(ctx, d, 0, accumulate, &st);
    CHECK(t, "rank %d: kiln_trainer_create: %s", r, kiln_context_message(ctx));
    if (t) check_buckets(t->train, accumulate);
    kiln_trainer *ref = NULL;
    if (r == 0) {
        ref = make_trainer(ctx, NULL, 0, accumulate, &st);
        CHECK(ref, "the single process's trainer: %s", kiln_context_message(ctx));
    }
    const int64_t b = BATCH / accumulate;
    /* STEPS steps of epoch 0, then RESUMED of epoch 1 resumed at sample FROM (a position
     * on no step of any of these world sizes and batches: kiln_trainer_set_epoch_start) */
    const int64_t full = (N_DATA + W - 1) / W, rest = (N_DATA - FROM + W - 1) / W;
    const int64_t first1 = (full + b - 1) / b - (rest + b - 1) / b;
    const int total = (STEPS + RESUMED) * accumulate;
    if (t) st = kiln_trainer_set_epoch_start(t, 1, FROM);
    if (ref && !st) st = kiln_trainer_set_epoch_start(ref, 1, FROM);
    CHECK(!st, "rank %d: kiln_trainer_set_epoch_start: %s", r, kiln_context_message(ctx));
    double worst = 0;
    for (int k = 0; k < total && t && !fails; k++) {
        const int64_t e = k < STEPS * accumulate ? 0 : 1, s = e ? first1 + k - STEPS * accumulate : k;
        float loss = 0, ref_loss = 0;
        st = kiln_trainer_train_epoch(t, x, y, b, 7, e, s, s + 1, &loss);
        CHECK(!st, "rank %d epoch %lld step %lld: %s", r, (long long)e, (long long)s, kiln_context_message(ctx));
        if (!st) st = kiln_dist_mean_f32(d, &loss, 1);
        if (ref && !st) {
            st = kiln_trainer_train_epoch(ref, x, y, b * W, 7, e, s, s + 1, &ref_loss);
            CHECK(!st, "single epoch %lld step %lld: %s", (long long)e, (long long)s, kiln_context_message(ctx));
            const double err = fabs((double)loss - ref_loss), tol = 1e-5 + 1e-4 * fabs(ref_loss);
            if (err / tol > worst) worst = err / tol;
            CHECK(err <= tol, "epoch %lld step %lld: the ranks' mean loss %.7f, the single process's %.7f", (long long)e,
                  (long long)s, loss, ref_loss);
            if (k < 3 || k == STEPS * accumulate - 1 || k == STEPS * accumulate || k == total - 1)
                printf("epoch %lld step %2lld: loss %.6f (ranks' mean) %.6f (one process)\n", (long long)e, (long long)s,
                       loss, ref_loss);
        }
    }
    if (ref && t && !fails) {
        double max_err = 0, budget = 0;
        for (int k = 0; k < t->n_params; k++) {
            const float *a = t->params[k].value->data, *e = ref->params[k].value->data;
            for (int64_t i = 0; i < t->params[k].numel; i++) {
                const double err = fabs((double)a[i] - e[i]), tol = 2e-5 + 1e-3 * fabs(e[i]);
                if (err > max_err) max_err = err;
                if (err / tol > budget) budget = err / tol;
            }
        }
        printf("%d ranks, %d + %d steps: weights max |diff| %.3g (%.0f%% of the budget), losses %.0f%% of theirs\n", W,
               STEPS, RESUMED, max_err, 100 * budget, 100 * worst);
        CHECK(budget <= 1, "the weights differ from the single process's: max |diff| %.3g", max_err);
        /* the running statistics (SyncBatchNorm: over every rank's batch) */
        double stat_err = 0;
        for (int k = 0; k < t->n_states; k++) {
            const float *a = t->states[k].value->data, *e = ref->states[k].value->data;
            for (int64_t i = 0; i < kiln_tensor_numel(t->states[k].value); i++) {
                const double err = fabs((double)a[i] - e[i]) / (1e-5 + 1e-4 * fabs(e[i]));
                if (err > stat_err) stat_err = err;
            }
        }
        if (t->n_states) printf("running statistics: %.0f%% of the budget\n", 100 * stat_err);
        CHECK(stat_err <= 1, "the running statistics differ from the single process's");
    }
    /* every rank's weights bitwise the same */
    if (t) {
        st = kiln_dist_check_same(d, "weights after training", weights_hash(t));
        CHECK(!st, "rank %d: %s", r, kiln_context_message(ctx));
    }
    kiln_trainer_free(t);
    kiln_trainer_free(ref);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
}

static void run_mismatch(kiln_context *ctx, kiln_dist *d, const char *dir) {
    const int W = kiln_dist_size(d), r = kiln_dist_rank(d);
    char want[32];
    snprintf(want, sizeof want, "rank %d's", W - 1);
    kiln_status st;
    kiln_trainer *t = make_trainer(ctx, d, r == W - 1, 1, &st);
    CHECK(!t && st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_context_message(ctx), want),
          "rank %d: a rank with another graph: %s", r, t ? "created" : kiln_context_message(ctx));
    if (!t) printf("rank %d: %s\n", r, kiln_context_message(ctx));
    kiln_trainer_free(t);
    t = make_trainer(ctx, d, 0, 1, &st);
    CHECK(t, "rank %d: the same graph: %s", r, kiln_context_message(ctx));
    kiln_tensor *x = NULL, *y = NULL;
    if (t && !load(ctx, dir, &x, &y)) {
        st = kiln_trainer_train_epoch(t, x, y, r == W - 1 ? 16 : 32, 7, 0, 0, 1, NULL);
        CHECK(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_context_message(ctx), want),
              "rank %d: a rank with another batch: %s", r, st ? kiln_context_message(ctx) : "trained");
        if (st) printf("rank %d: %s\n", r, kiln_context_message(ctx));
    }
    kiln_trainer_free(t);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
}

/* rank 1 hangs (hang) or dies (kill) at step 3; the others must fail (exit non-zero). */
static int run_fault(kiln_context *ctx, kiln_dist *d, const char *dir, bool kill_it) {
    const int r = kiln_dist_rank(d);
    kiln_tensor *x = NULL, *y = NULL;
    kiln_status st = load(ctx, dir, &x, &y);
    kiln_trainer *t = st ? NULL : make_trainer(ctx, d, 0, 1, &st);
    for (int s = 0; s < STEPS && !st; s++) {
        if (r == 1 && s == 3) {
            fflush(stdout);
            if (kill_it) raise(SIGKILL);
            for (;;) pause();
        }
        st = kiln_trainer_train_epoch(t, x, y, BATCH, 7, 0, s, s + 1, NULL);
    }
    if (st) printf("rank %d: %s\n", r, kiln_context_message(ctx));
    else printf("rank %d: FAIL: all %d steps ran although rank 1 stopped\n", r, STEPS);
    fflush(stdout);
    kiln_trainer_free(t);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    return 1; /* either way this rank did not finish cleanly */
}

/* `steps` batches of l into out (its indices; at most cap), checking each batch's epoch;
 * returns the samples taken, -1 on a loader error. */
static int64_t take(kiln_loader *l, int64_t steps, int64_t epoch, int64_t *out, int64_t cap, int64_t *sizes) {
    int64_t k = 0;
    for (int64_t s = 0; s < steps; s++) {
        const kiln_batch *b = NULL;
        if (kiln_loader_next(l, &b)) return -1;
        if (b->epoch != epoch) {
            kiln_loader_release(l, b);
            return -1;
        }
        if (sizes) sizes[s] = b->size;
        for (int64_t i = 0; i < b->size; i++) {
            if (k < cap) out[k] = b->indices[i];
            k++;
        }
        kiln_loader_release(l, b);
    }
    return k;
}

#define RN 23 /* the largest data set of the resume sweep */

/* Resuming mid-epoch on another number of ranks (kiln_loader_seek_sample): for data sets
 * of N samples, W ranks of batch B consume k steps of epoch 1 (with or without shuffle,
 * padded or cut shards, with or without drop_last), then W2 ranks of batch B2 continue at
 * the position the first ones give. The first part must be exactly the first k*B*W
 * samples of the epoch's order; the second must hold every sample of the rest once, each
 * rank the same count, padded (fewer than W2 repeats of the first samples) or cut (fewer
 * than W2 of the last ones missing); the same W and B must go on as the uninterrupted
 * run; the next epoch must be a W2-rank run's. */
static void run_resume_loader(kiln_context *ctx) {
    static const int64_t ns[] = {1, 2, 3, 5, 7, 10, 13, 16, 23};
    const int64_t xd[2] = {RN, 1}, yd[1] = {RN};
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, xd), *y = kiln_tensor_new(ctx, KILN_I64, 1, yd);
    int64_t combos = 0;
    for (int i = 0; i < RN; i++) ((float *)x->data)[i] = (float)i, ((int64_t *)y->data)[i] = i;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] && !fails; ni++)
        for (int W = 1; W <= 4; W++)
            for (int B = 1; B <= 4; B++)
                for (int W2 = 1; W2 <= 4; W2++)
                    for (int B2 = 1; B2 <= 4; B2++)
                        for (int flags = 0; flags < 8 && !fails; flags++) {
                            const int64_t n = ns[ni];
                            const bool drop = flags & 1, drop_last = flags & 2, shuffle = !(flags & 4);
                            x->dims[0] = y->dims[0] = n;
                            int64_t perm[RN], at[RN]; /* the epoch's order and each sample's place in it */
                            if (shuffle) kiln_loader_permutation(perm, n, 11, 1);
                            else
                                for (int64_t i = 0; i < n; i++) perm[i] = i;
                            for (int64_t i = 0; i < n; i++) at[perm[i]] = i;
                            kiln_loader_options lo = kiln_loader_options_default();
                            lo.seed = 11;
                            lo.workers = 0;
                            lo.shuffle = shuffle;
                            lo.drop_last = drop_last;
                            lo.shard_drop = drop;
                            kiln_loader *a[4] = {0}, *b[4] = {0}, *c = NULL;
                            bool ok = true;
                            lo.batch_size = B;
                            lo.shard_count = W;
                            for (int r = 0; r < W && ok; r++) {
                                lo.shard_rank = r;
                                ok = !kiln_loader_create(ctx, x, y, &lo, &a[r]);
                            }
                            lo.batch_size = B2;
                            lo.shard_count = W2;
                            for (int r = 0; r < W2 && ok; r++) {
                                lo.shard_rank = r;
                                ok = !kiln_loader_create(ctx, x, y, &lo, &b[r]);
                            }
                            if (!ok) { /* no batch at these sizes: the loader says so */
                                for (int r = 0; r < 4; r++) kiln_loader_free(a[r]), kiln_loader_free(b[r]);
                                continue;
                            }
                            const int64_t steps = kiln_loader_steps_per_epoch(a[0]);
                            char what[160];
                            for (int64_t k = 0; k < steps && !fails; k++) {
                                combos++;
                                snprintf(what, sizeof what, "N=%lld W=%d B=%d -> W'=%d B'=%d after %lld steps%s%s%s",
                                         (long long)n, W, B, W2, B2, (long long)k, drop ? " (cut)" : "",
                                         drop_last ? " (drop_last)" : "", shuffle ? "" : " (no shuffle)");
                                int64_t seen[RN] = {0}, got[4 * RN], sizes[4][RN], rest[4][RN], cont[RN];
                                /* the first W ranks: epoch 1's first k steps */
                                for (int r = 0; r < W; r++) {
                                    CHECK(!kiln_loader_seek(a[r], 1, 0), "%s: seek", what);
                                    const int64_t m = take(a[r], k, 1, got, 4 * RN, NULL);
                                    CHECK(m == k * B, "%s: rank %d took %lld samples, want %lld", what, r, (long long)m,
                                          (long long)(k * B));
                                    for (int64_t i = 0; i < m && i < 4 * RN; i++) seen[got[i]]++;
                                }
                                const int64_t o = kiln_loader_epoch_sample(a[0], 1, k);
                                CHECK(o == k * B * W, "%s: position %lld, want %lld", what, (long long)o,
                                      (long long)(k * B * W));
                                for (int64_t i = 0; i < n; i++)
                                    CHECK(seen[i] == (at[i] < o), "%s: sample %lld (place %lld) taken %lld times before",
                                          what, (long long)i, (long long)at[i], (long long)seen[i]);
                                /* the W2 ranks: the rest of epoch 1 */
                                int64_t count[4] = {0}, repeats = 0, missing = 0;
                                int64_t e = -1, st = -1;
                                for (int r = 0; r < W2; r++) {
                                    CHECK(!kiln_loader_seek_sample(b[r], 1, o), "%s: seek_sample: %s", what,
                                          kiln_context_message(ctx));
                                    kiln_loader_position(b[r], &e, &st);
                                    const int64_t left = e == 1 ? kiln_loader_steps_per_epoch(b[r]) - st : 0;
                                    CHECK(kiln_loader_epoch_sample(b[r], e, st) == (e == 1 ? o : 0),
                                          "%s: rank %d's position after the seek", what, r);
                                    count[r] = take(b[r], left, 1, rest[r], RN, sizes[r]);
                                    CHECK(count[r] >= 0 && count[r] <= RN, "%s: rank %d: %lld samples", what, r,
                                          (long long)count[r]);
                                    for (int64_t s = 0; s + 1 < left; s++)
                                        CHECK(sizes[r][s] == B2, "%s: rank %d: batch %lld of %lld", what, r, (long long)s,
                                              (long long)sizes[r][s]);
                                    if (drop_last && left) CHECK(sizes[r][left - 1] == B2, "%s: a partial batch", what);
                                    CHECK(count[r] == count[0], "%s: rank %d %lld samples, rank 0 %lld", what, r,
                                          (long long)count[r], (long long)count[0]);
                                    for (int64_t i = 0; i < count[r] && i < RN; i++) seen[rest[r][i]]++;
                                    /* then epoch 2 as a W2-rank run's */
                                    int64_t want[RN];
                                    const int64_t per = kiln_loader_shard(want, n, 11, 2, shuffle, r, W2, drop);
                                    const int64_t m = take(b[r], 1, 2, got, 4 * RN, NULL);
                                    for (int64_t i = 0; i < m && i < per; i++)
                                        CHECK(got[i] == want[i], "%s: rank %d: epoch 2's sample %lld is %lld, want %lld",
                                              what, r, (long long)i, (long long)got[i], (long long)want[i]);
                                }
                                for (int64_t i = 0; i < n; i++) {
                                    if (seen[i] > 1) repeats += seen[i] - 1;
                                    if (seen[i] == 0) missing++;
                                    /* only the order's last samples may be cut, only its first repeated */
                                    if (seen[i] == 0)
                                        CHECK(drop || drop_last, "%s: sample %lld (place %lld) never taken", what,
                                              (long long)i, (long long)at[i]);
                                    if (seen[i] > 1)
                                        CHECK(!drop && at[i] < W2,
                                              "%s: sample %lld (place %lld) taken %lld times", what, (long long)i,
                                              (long long)at[i], (long long)seen[i]);
                                }
                                const int64_t left_over = n - o;
                                if (!drop_last) {
                                    const int64_t per = drop ? left_over / W2 : (left_over + W2 - 1) / W2;
                                    CHECK(count[0] == per, "%s: %lld samples per rank, want %lld",
                                          what, (long long)count[0], (long long)per);
                                    CHECK(missing < W2 && repeats < W2, "%s: %lld missing, %lld repeated", what,
                                          (long long)missing, (long long)repeats);
                                }
                                /* the same ranks and batch: the uninterrupted run */
                                if (W2 == W && B2 == B)
                                    for (int r = 0; r < W; r++) {
                                        lo.shard_rank = r;
                                        if (kiln_loader_create(ctx, x, y, &lo, &c)) break;
                                        kiln_loader_seek(c, 1, 0);
                                        take(c, k, 1, cont, RN, NULL);
                                        const int64_t m = take(c, steps - k, 1, cont, RN, NULL);
                                        CHECK(m == count[r], "%s: rank %d: %lld samples resumed, %lld uninterrupted", what,
                                              r, (long long)count[r], (long long)m);
                                        for (int64_t i = 0; i < m && i < count[r] && i < RN; i++)
                                            CHECK(cont[i] == rest[r][i], "%s: rank %d sample %lld: %lld resumed, %lld "
                                                  "uninterrupted", what, r, (long long)i, (long long)rest[r][i],
                                                  (long long)cont[i]);
                                        kiln_loader_free(c);
                                        c = NULL;
                                    }
                            }
                            for (int r = 0; r < 4; r++) kiln_loader_free(a[r]), kiln_loader_free(b[r]);
                        }
    x->dims[0] = y->dims[0] = RN;
    printf("resume: %lld (N, W, B, W', B', steps done) combinations\n", (long long)combos);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
}

/* DistributedSampler's shards, and a loader taking one */
static int run_shard(void) {
    for (int64_t n = 1; n <= 13; n++)
        for (int W = 1; W <= 5; W++)
            for (int drop = 0; drop <= 1; drop++) {
                int64_t perm[13], shard[13];
                kiln_loader_permutation(perm, n, 5, 2);
                const int64_t per = drop ? n / W : (n + W - 1) / W;
                for (int r = 0; r < W; r++) {
                    const int64_t got = kiln_loader_shard(shard, n, 5, 2, true, r, W, drop);
                    CHECK(got == per, "n=%lld W=%d drop=%d rank %d: %lld samples, want %lld", (long long)n, W, drop, r,
                          (long long)got, (long long)per);
                    for (int64_t i = 0; i < got && i < per; i++) {
                        const int64_t at = r + (int64_t)W * i; /* position in the padded order */
                        const int64_t want = perm[at < n ? at : (at - n) % n];
                        CHECK(shard[i] == want, "n=%lld W=%d drop=%d rank %d: sample %lld is %lld, want %lld",
                              (long long)n, W, drop, r, (long long)i, (long long)shard[i], (long long)want);
                    }
                }
            }
    /* a loader over shard 1 of 3 of 10 samples: batches of 2 from (1, 4, 7, 0) of the order */
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    const int64_t xd[2] = {10, 1}, yd[1] = {10};
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_F32, 2, xd), *y = kiln_tensor_new(ctx, KILN_I64, 1, yd);
    for (int i = 0; i < 10; i++) ((float *)x->data)[i] = (float)i, ((int64_t *)y->data)[i] = i % 10;
    kiln_loader_options lo = kiln_loader_options_default();
    lo.batch_size = 2;
    lo.seed = 9;
    lo.workers = 0;
    lo.shard_rank = 1;
    lo.shard_count = 3;
    kiln_loader *l = NULL;
    kiln_status st = kiln_loader_create(ctx, x, y, &lo, &l);
    CHECK(!st, "loader: %s", kiln_context_message(ctx));
    int64_t perm[10];
    kiln_loader_permutation(perm, 10, 9, 0);
    const int64_t want[4] = {perm[1], perm[4], perm[7], perm[0]};
    CHECK(!st && kiln_loader_steps_per_epoch(l) == 2, "a shard of 4 in batches of 2: %lld steps",
          st ? -1LL : (long long)kiln_loader_steps_per_epoch(l));
    for (int s = 0; s < 2 && !st; s++) {
        const kiln_batch *b = NULL;
        st = kiln_loader_next(l, &b);
        CHECK(!st && b->size == 2, "batch %d", s);
        for (int i = 0; !st && i < 2; i++)
            CHECK(b->indices[i] == want[2 * s + i] && b->images[i] == (float)want[2 * s + i],
                  "batch %d sample %d: index %lld, want %lld", s, i, (long long)b->indices[i], (long long)want[2 * s + i]);
        if (!st) kiln_loader_release(l, b);
    }
    if (!fails) run_resume_loader(ctx);
    lo.shard_rank = 3;
    kiln_loader *bad = NULL;
    CHECK(kiln_loader_create(ctx, x, y, &lo, &bad) == KILN_ERR_INVALID_ARGUMENT, "shard 3 of 3 accepted");
    kiln_loader_free(bad);
    kiln_loader_free(l);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_context_free(ctx);
    printf(fails ? "FAILED\n" : "ok\n");
    return fails != 0;
}

/* ------------------------------------------------------- resuming on other ranks */

#define RESUME_STEPS 4 /* of epoch 0, before the checkpoint */

/* every rank's `n` int64s (n the same everywhere) into all (size * n) */
static kiln_status gather_i64(kiln_dist *d, const int64_t *mine, int64_t *all, int64_t n) {
    return d->host->allgather(d, mine, all, sizeof(int64_t) * (size_t)n);
}

/* `steps` training steps from l, the samples' indices appended to idx at *count. */
static kiln_status train_from(kiln_trainer *t, kiln_loader *l, int64_t steps, int64_t *idx, int64_t *count) {
    kiln_status st = KILN_OK;
    for (int64_t s = 0; s < steps && !st; s++) {
        const kiln_batch *b = NULL;
        st = kiln_loader_next(l, &b);
        if (st) break;
        kiln_tensor *in[2] = {b->x, b->y};
        st = kiln_trainer_step(t, 2, in, NULL);
        for (int64_t i = 0; i < b->size && *count < N_DATA; i++) idx[(*count)++] = b->indices[i];
        kiln_loader_release(l, b);
    }
    return st;
}

static kiln_loader *resume_loader(kiln_context *ctx, kiln_dist *d, const kiln_tensor *x, const kiln_tensor *y,
                                  int64_t batch) {
    kiln_loader_options lo = kiln_loader_options_default();
    lo.batch_size = batch;
    lo.seed = 7;
    lo.workers = 1;
    lo.shard_rank = kiln_dist_rank(d);
    lo.shard_count = kiln_dist_size(d);
    kiln_loader *l = NULL;
    return kiln_loader_create(ctx, x, y, &lo, &l) ? NULL : l;
}

static void run_resume(kiln_context *ctx, kiln_dist *d, const char *dir, const char *ck, int64_t batch, bool save) {
    const int W = kiln_dist_size(d), r = kiln_dist_rank(d);
    char path[1100];
    kiln_tensor *x = NULL, *y = NULL;
    kiln_status st = load(ctx, dir, &x, &y);
    CHECK(!st, "rank %d: loading %s: %s", r, dir, kiln_context_message(ctx));
    sync_bn = 1; /* BatchNormalization's running statistics the same on every rank */
    kiln_trainer *t = st ? NULL : make_trainer(ctx, d, 0, 1, &st);
    kiln_loader *l = t ? resume_loader(ctx, d, x, y, batch ? batch : BATCH) : NULL;
    CHECK(l, "rank %d: trainer and loader: %s", r, kiln_context_message(ctx));
    int64_t *idx = calloc(N_DATA, sizeof *idx), *all = calloc((size_t)W * N_DATA, sizeof *all), count = 0;
    const int64_t steps = l ? kiln_loader_steps_per_epoch(l) : 0;
    if (!l || !idx || !all) goto out;
    if (save) {
        st = train_from(t, l, RESUME_STEPS, idx, &count);
        CHECK(!st, "rank %d: training: %s", r, kiln_context_message(ctx));
        const kiln_train_position pos = {.epoch = 0, .sample = kiln_loader_epoch_sample(l, 0, RESUME_STEPS),
                                         .step_in_epoch = RESUME_STEPS, .world_size = W, .batch = batch};
        CHECK(pos.sample == RESUME_STEPS * batch * W, "position %lld after %d steps", (long long)pos.sample,
              RESUME_STEPS);
        if (!st) st = gather_i64(d, idx, all, N_DATA);
        if (!st && r == 0) {
            st = kiln_trainer_save_position(t, ck, &pos);
            CHECK(!st, "save: %s", kiln_context_message(ctx));
            snprintf(path, sizeof path, "%s.idx", ck);
            FILE *f = fopen(path, "wb");
            CHECK(f, "cannot write %s", path);
            if (f) {
                for (int k = 0; k < W; k++) fwrite(all + (size_t)k * N_DATA, sizeof *all, (size_t)count, f);
                fclose(f);
            }
        }
        /* the uninterrupted run: the epoch's rest */
        count = 0;
        if (!st) st = train_from(t, l, steps - RESUME_STEPS, idx, &count);
        CHECK(!st, "rank %d: the epoch's rest: %s", r, kiln_context_message(ctx));
        if (!st && r == 0) {
            snprintf(path, sizeof path, "%s.hash", ck);
            FILE *f = fopen(path, "w");
            if (f) fprintf(f, "%d %lld %016llx\n", W, (long long)batch, (unsigned long long)weights_hash(t));
            CHECK(f && !fclose(f), "cannot write %s", path);
        }
        goto out;
    }
    kiln_train_position pos;
    if (batch == 0) { /* resume-bad: rank 1 lacks the file */
        const uint64_t before = weights_hash(t);
        snprintf(path, sizeof path, "%s.missing", ck);
        st = kiln_trainer_load_position(t, r == 1 ? path : ck, &pos);
        CHECK(st && (r == 1 || strstr(kiln_context_message(ctx), "rank 1 of")),
              "rank %d: a rank without the checkpoint: %s", r, st ? kiln_context_message(ctx) : "loaded");
        CHECK(weights_hash(t) == before, "rank %d: the weights changed although the load failed", r);
        if (st) printf("rank %d: %s\n", r, kiln_context_message(ctx));
        goto out;
    }
    st = kiln_trainer_load_position(t, ck, &pos);
    CHECK(!st, "rank %d: load: %s", r, kiln_context_message(ctx));
    if (st) goto out;
    CHECK(pos.epoch == 0 && pos.step_in_epoch == RESUME_STEPS && pos.world_size >= 1 &&
              pos.sample == RESUME_STEPS * pos.world_size * pos.batch,
          "position: epoch %lld step %lld sample %lld, %lld ranks of %lld", (long long)pos.epoch,
          (long long)pos.step_in_epoch, (long long)pos.sample, (long long)pos.world_size, (long long)pos.batch);
    st = kiln_loader_seek_sample(l, pos.epoch, pos.sample);
    int64_t e = -1, first = -1;
    kiln_loader_position(l, &e, &first);
    CHECK(!st && e == 0 && first >= 0 && first < steps, "rank %d: seek: epoch %lld step %lld: %s", r, (long long)e,
          (long long)first, kiln_context_message(ctx));
    if (pos.world_size != W || pos.batch != batch) { /* the schedule: this run's steps (as kiln train does) */
        st = kiln_trainer_set_steps(t, e * steps + first);
        kiln_train_stats ts;
        kiln_trainer_stats(t, &ts);
        CHECK(!st && ts.steps == first && ts.micro_steps == first, "set_steps: %lld, want %lld", (long long)ts.steps,
              (long long)first);
    }
    if (!st) st = train_from(t, l, steps - first, idx, &count);
    CHECK(!st, "rank %d: the epoch's rest: %s", r, kiln_context_message(ctx));
    /* the ranks' counts, then their indices */
    int64_t counts[64] = {0};
    if (!st && W <= 64) st = gather_i64(d, &count, counts, 1);
    if (!st) st = gather_i64(d, idx, all, N_DATA);
    for (int k = 0; k < W && !st && k < 64; k++)
        CHECK(counts[k] == counts[0], "rank %d took %lld samples, rank 0 %lld", k, (long long)counts[k], (long long)counts[0]);
    if (!st && r == 0) {
        int64_t perm[N_DATA], at[N_DATA], seen[N_DATA] = {0}, before = 0, v;
        kiln_loader_permutation(perm, N_DATA, 7, 0);
        for (int64_t i = 0; i < N_DATA; i++) at[perm[i]] = i;
        snprintf(path, sizeof path, "%s.idx", ck);
        FILE *f = fopen(path, "rb");
        CHECK(f, "cannot read %s", path);
        while (f && fread(&v, sizeof v, 1, f) == 1)
            if (v >= 0 && v < N_DATA) seen[v]++, before++;
        if (f) fclose(f);
        CHECK(before == pos.sample, "%s holds %lld samples, the checkpoint says %lld", path, (long long)before,
              (long long)pos.sample);
        for (int k = 0; k < W; k++)
            for (int64_t i = 0; i < counts[0] && i < N_DATA; i++) seen[all[(size_t)k * N_DATA + i]]++;
        int64_t repeats = 0;
        for (int64_t i = 0; i < N_DATA; i++) {
            CHECK(seen[i] >= 1, "sample %lld (place %lld of the order) never taken", (long long)i, (long long)at[i]);
            CHECK(seen[i] <= 1 || at[i] < W, "sample %lld (place %lld) taken %lld times", (long long)i, (long long)at[i],
                  (long long)seen[i]);
            if (seen[i] > 1) repeats += seen[i] - 1;
        }
        CHECK(repeats == counts[0] * W - (N_DATA - pos.sample), "%lld repeats, want the padding's %lld",
              (long long)repeats, (long long)(counts[0] * W - (N_DATA - pos.sample)));
        printf("%d rank(s) of %lld resumed %lld ranks of %lld at sample %lld (step %lld of %lld): every sample once, "
               "%lld padded\n", W, (long long)batch, (long long)pos.world_size, (long long)pos.batch,
               (long long)pos.sample, (long long)first, (long long)steps, (long long)repeats);
    }
    /* the same weights everywhere; the uninterrupted run's at its world size and batch */
    if (!st) {
        st = kiln_dist_check_same(d, "weights after resuming", weights_hash(t));
        CHECK(!st, "rank %d: %s", r, kiln_context_message(ctx));
    }
    if (!st && r == 0 && pos.world_size == W && pos.batch == batch) {
        int w = 0;
        long long b = 0;
        unsigned long long h = 0;
        snprintf(path, sizeof path, "%s.hash", ck);
        FILE *f = fopen(path, "r");
        CHECK(f && fscanf(f, "%d %lld %llx", &w, &b, &h) == 3 && w == W && b == batch, "cannot read %s", path);
        if (f) fclose(f);
        CHECK(h == weights_hash(t), "the resumed run's weights differ from the uninterrupted run's");
        if (h == weights_hash(t)) printf("the weights are bitwise the uninterrupted run's\n");
    }
    /* the next epoch: a W-rank run's */
    if (!st) {
        int64_t want[N_DATA], got = 0;
        kiln_loader_shard(want, N_DATA, 7, 1, true, r, W, false);
        const kiln_batch *b = NULL;
        st = kiln_loader_next(l, &b);
        CHECK(!st && b->epoch == 1 && b->step == 0, "rank %d: the next batch", r);
        for (int64_t i = 0; !st && i < b->size; i++) got += b->indices[i] != want[i];
        CHECK(!st && got == 0, "rank %d: epoch 1's first batch is not a %d-rank run's", r, W);
        if (!st) kiln_loader_release(l, b);
    }
out:
    free(idx);
    free(all);
    kiln_loader_free(l);
    kiln_trainer_free(t);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
}

/* The NCCL id's TCP rendezvous as torchrun sets it up (no MPI, no GPU): a stand-in for
 * torchrun's agent holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), W forked ranks
 * meet on the port above it and each must hold rank 0's id; with the agent's variable
 * unset the ranks would meet on the agent's own port: rank 0 must fail, naming the port,
 * within the timeout (the others too, with a dead rank 0). */
static int rendezvous_ranks(int W, int port, bool agent, double timeout_s, int *failed) {
    pid_t pids[8];
    fflush(stdout); /* the children's output only once */
    for (int r = 0; r < W; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char v[16];
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", v, 1);
            unsetenv("KILN_RENDEZVOUS_PORT");
            if (agent) setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
            else unsetenv("TORCHELASTIC_USE_AGENT_STORE");
            kiln_context *c = NULL;
            if (kiln_context_create(&c)) _exit(3);
            kiln_dist d = {.ctx = c, .rank = r, .size = W, .timeout_s = timeout_s};
            unsigned char id[KILN_NCCL_ID_BYTES], want[KILN_NCCL_ID_BYTES];
            for (int i = 0; i < KILN_NCCL_ID_BYTES; i++) want[i] = (unsigned char)(i * 7 + 3);
            memcpy(id, r == 0 ? want : (unsigned char[KILN_NCCL_ID_BYTES]){0}, sizeof id);
            kiln_status st = kiln_dist_rendezvous(&d, id);
            if (st) printf("rank %d: %s\n", r, kiln_context_message(c));
            fflush(stdout);
            _exit(st ? 1 : memcmp(id, want, sizeof id) ? 2 : 0);
        }
    }
    int ok = 0;
    *failed = 0;
    for (int r = 0; r < W; r++) {
        int ws = 0;
        waitpid(pids[r], &ws, 0);
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) ok++;
        else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 2) printf("rank %d: got another id than rank 0's\n", r);
        else (*failed)++;
    }
    return ok;
}

/* Whether nothing holds TCP port p (a bind to it succeeds; the socket is closed again). */
static bool port_free(int p) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = htons((uint16_t)p)};
    const bool ok = s >= 0 && p <= 65535 && bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0) close(s);
    return ok;
}

static int run_rendezvous(void) {
    /* the agent's store: a listening socket on a free port whose successor, where the ranks
     * meet, is free too (else rank 0 cannot listen there and the others would talk to
     * whatever holds it: in one CI run, it seems, an MPI job of another test) */
    int ls = -1, port = 0;
    for (int tries = 0; tries < 64 && ls < 0; tries++) {
        ls = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = 0};
        socklen_t len = sizeof a;
        if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 8) ||
            getsockname(ls, (struct sockaddr *)&a, &len)) {
            printf("skip: no TCP socket to stand in for torchrun's agent\n");
            if (ls >= 0) close(ls);
            return 77;
        }
        port = ntohs(a.sin_port);
        if (!port_free(port + 1)) {
            close(ls);
            ls = -1;
        }
    }
    if (ls < 0) {
        printf("skip: no free pair of TCP ports (torchrun's agent and the port above it) in 64 tries\n");
        return 77;
    }
    int failed = 0;
    for (int W = 2; W <= 4; W++) {
        const int ok = rendezvous_ranks(W, port, true, 30, &failed);
        CHECK(ok == W, "torchrun (agent on MASTER_PORT %d): %d of %d ranks got rank 0's id", port, ok, W);
        if (ok == W) printf("ok   %d ranks met on port %d (MASTER_PORT %d held by the agent)\n", W, port + 1, port);
    }
    /* without the agent's variable: MASTER_PORT itself, which the agent holds */
    const int ok = rendezvous_ranks(2, port, false, 2, &failed);
    CHECK(ok == 0 && failed == 2, "the rendezvous on a port another process holds: %d ranks succeeded, %d failed", ok,
          failed);
    close(ls);
    printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "shard")) return run_shard();
    if (argc == 2 && !strcmp(argv[1], "rendezvous")) return run_rendezvous();
    if (argc < 3) {
        fprintf(stderr, "usage: test_dist same|accumulate|syncbn|mismatch|hang|kill DATA_DIR, resume-save DATA_DIR CK, "
                        "resume-load DATA_DIR CK BATCH, resume-bad DATA_DIR CK\n");
        return 2;
    }
    if (access(argv[2], R_OK)) {
        printf("skip: no data set at %s\n", argv[2]);
        return 77;
    }
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    kiln_dist_options o = KILN_DIST_OPTIONS_INIT;
    o.kind = KILN_DIST_MPI;
    o.timeout_s = !strcmp(argv[1], "hang") ? 3 : 120;
    kiln_dist *d = NULL;
    kiln_status st = kiln_dist_create(ctx, &o, &d);
    if (st) {
        printf("FAIL kiln_dist_create: %s\n", kiln_context_message(ctx));
        kiln_context_free(ctx);
        return 1;
    }
    int rc = 0;
    if (!strcmp(argv[1], "same")) run_same(ctx, d, argv[2], 1);
    else if (!strcmp(argv[1], "syncbn")) {
        sync_bn = 1;
        run_same(ctx, d, argv[2], 1);
    }
    else if (!strcmp(argv[1], "accumulate")) run_same(ctx, d, argv[2], 2);
    else if (!strcmp(argv[1], "mismatch")) run_mismatch(ctx, d, argv[2]);
    else if (!strcmp(argv[1], "resume-save") && argc == 4) run_resume(ctx, d, argv[2], argv[3], BATCH, true);
    else if (!strcmp(argv[1], "resume-load") && argc == 5 && atoll(argv[4]) > 0)
        run_resume(ctx, d, argv[2], argv[3], atoll(argv[4]), false);
    else if (!strcmp(argv[1], "resume-bad") && argc == 4) run_resume(ctx, d, argv[2], argv[3], 0, false);
    else if (!strcmp(argv[1], "hang")) rc = run_fault(ctx, d, argv[2], false);
    else if (!strcmp(argv[1], "kill")) rc = run_fault(ctx, d, argv[2], true);
    else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        rc = 2;
    }
    if (!rc) {
        /* every rank reports whether all passed */
        float f = (float)fails;
        if (kiln_dist_mean_f32(d, &f, 1) || f != 0) rc = 1;
        if (kiln_dist_rank(d) == 0) printf(rc ? "FAILED on some rank\n" : "ok (%d ranks)\n", kiln_dist_size(d));
    }
    kiln_dist_free(d);
    kiln_context_free(ctx);
    return rc ? rc : fails != 0;
}
