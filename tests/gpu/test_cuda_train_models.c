/*
 * test_cuda_train_models.c — small CNNs trained end to end on CUDA against the CPU
 * reference (ctest cuda_train_models, label gpu; needs a device: without one it fails).
 *
 * The networks, built here in C (as src/train/models.c builds mnist-net), images
 * (B, 3, 8, 8), 10 classes:
 *   (a) conv-BN-ReLU, a residual block (conv-BN-ReLU-conv-BN + the identity, ReLU),
 *       GlobalAveragePool, Flatten, Gemm, SoftmaxCrossEntropyLoss;
 *   (b) the same with a 2x2 AveragePool (stride 2) between the stem and the block;
 *   (c) (b) with a DenseNet layer before the block: a convolution of the pooled map,
 *       Concat with it on the channels, conv-BN-ReLU back to 8 channels (its training
 *       graph: kiln.ConcatGrad feeding kiln.ConvGradInput, which the layout pass once left
 *       with dY NHWC and W NCHW: kiln train of densenet121 failed on CUDA).
 * Their training graphs hold BatchNormalization in training mode and kiln.BatchNormGrad,
 * kiln.GlobalAveragePoolGrad, kiln.AveragePoolGrad, SoftmaxCrossEntropyLoss and its
 * gradient, besides the convolutions, products and elementwise ops mnist-net uses.
 *
 * Checks:
 *   1. fp32 (strict_fp32 = 1: no TF32): from the same weights and batches, 5 SGD steps
 *      (momentum 0.9) on the CPU and on CUDA give each step's loss within 1e-4 relative,
 *      and then the same weights and BatchNormalization running statistics, each tensor
 *      within 2e-4 of its largest magnitude plus 1e-3 relative. Why these tolerances: the
 *      CPU reference computes each op in double and rounds once, the device sums in other
 *      orders in f32 (cuDNN's convolutions, the products, BN statistics in double then f32
 *      coefficients): about 1e-6 relative per op, a few ops deep per step, carried by 5
 *      steps of lr 0.05. A wrong gradient of any op moves a weight by lr times that
 *      gradient's error (1e-2 and more here) at the first step, which the tolerances do not
 *      hide (the step losses and weights are printed with the share of the budget used).
 *      The same with TF32 allowed (strict_fp32 = 0, the default): the layout pass then
 *      runs the convolution chains NHWC, BatchNormalization's training form and gradient
 *      and the pool gradients included; looser tolerances (fp32_same_as_cpu says why).
 *   2. amp fp16 on CUDA (models b and c): the first step's loss within 2e-2 relative of the CPU's
 *      fp32 loss (fp16 convolutions of random data), and 30 steps on one batch reduce the
 *      loss below 0.7 of the first step's.
 *   3. A training graph holding an op that has no CUDA kernel fails at kiln_trainer_create
 *      or its first step with KILN_ERR_UNSUPPORTED and a message naming the op and the
 *      node (the op is picked among candidates as the first without a kernel in the table).
 *
 *   4. Epochs over data sets kept resident on the device (kiln_trainer_train_epoch), fp32:
 *      data set A, then B (A's values in another host buffer: kiln train's next epoch of
 *      transformed images), then C (larger), then A again — each epoch's last loss within
 *      1e-4 relative of the CPU's. The steps' CUDA graphs gather the batch from the device
 *      copy's addresses: a same-size data set must land in the same memory, another size
 *      must have the graphs captured again (before: an illegal address in kiln train's
 *      second augmented epoch on an H200).
 *   5. An epoch resumed mid-way at a sample that is not on a step of this batch
 *      (kiln_trainer_set_epoch_start: a checkpoint of another world size or batch), fp32:
 *      the rest of the epoch on the device, its last loss within 1e-4 relative of the
 *      CPU's, whose batches come from the loader's kiln_loader_seek_sample (before: kiln
 *      train refused such a resume on CUDA).
 *
 *   6. The mask from X (on by default, against KILN_BN_MASK_FROM_X=0 when the trainer is
 *      created: fuse-bn gives the non-residual BN -> ReLU gradients relu_mask_from_x, reading
 *      the forward's saved statistics instead of Y):
 *      models (a) and (b), fp32 strict (NCHW: the scalar kernels), TF32 NHWC (f32 vector
 *      kernels) and amp fp16 (f16 vector kernels), 5 steps with the variable and without
 *      from the same weights and batches: the CUDA training graph holds such gradients
 *      (the block's first BN -> ReLU's; in (b) also the stem's, whose gradient in (a) is a
 *      Sum that fuse-bn folds instead), and each step's loss and every weight
 *      and running statistic agree within 1e-5 relative (of the tensor's largest magnitude
 *      for the weights): the mask is the forward's Y > 0 bit for bit, so only the
 *      convolutions' run-to-run differences remain (a flipped mask element moves a weight
 *      gradient by ~1e-2 of it here). Printed: whether they were equal bit for bit.
 *   7. BN statistics from the convolution (on by default, against KILN_CUDA_CONV_STATS=0):
 *      the conv-bn-stats pass gives each convolution feeding a training BN its per-channel
 *      sums (kiln.FusedConv outputs 1, 2; BN inputs 6, 7), computed by cuDNN's
 *      ConvolutionFwd -> GenStats graph where it has an engine and was timed faster, else
 *      by the statistics kernel. The same models and precisions, 5 steps each way: the
 *      graph holds such BNs, and losses and weights agree within 1e-4 relative in fp32 (the
 *      sums add in another order) and 1e-2 in fp16 (GenStats sums before the rounding to
 *      f16); a statistic of the wrong channel or a wrong count moves them by their size.
 *      Printed: the largest relative difference seen.
 *
 * --cpu runs the "CUDA" side on the CPU too, in fp32 (a check of the test itself on
 * machines without a device; check 3 then only trains its model on the CPU, and says
 * so). Exits non-zero on any failure.
 */
#include "core/internal.h"
#include "cuda/cuda_backend.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#include "../check.h"

#define BATCH 16
#define CLASSES 10
#define WIDTH 8
#define STEPS 5
#define AMP_STEPS 30

static kiln_context *ctx;
static bool dense; /* build() makes model (c) */
static kiln_device gpu = KILN_DEVICE_CUDA;
static kiln_amp gpu_amp = KILN_AMP_FP16; /* --cpu: off (the CPU trains in fp32) */
static int mx_nodes; /* train(): BatchNormGrad nodes with relu_mask_from_x in its training graph */
static int st_nodes; /* train(): BatchNormalizations reading a convolution's sums (inputs 6, 7) */

/* splitmix64 */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s, double lo, double hi) {
    return lo + (hi - lo) * ((double)(mix(s) >> 11) / 9007199254740992.0);
}

static kiln_tensor *rand_tensor(int ndim, const int64_t *dims, double lo, double hi, uint64_t *rng) {
    kiln_tensor *t = NULL;
    if (kiln_tensor_create(ctx, KILN_F32, ndim, dims, &t)) return NULL;
    float *p = t->data;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) p[i] = (float)uniform(rng, lo, hi);
    return t;
}

static kiln_status add_rand(kiln_model *m, const char *name, int ndim, const int64_t *dims, double bound,
                            uint64_t *rng) {
    kiln_tensor *t = rand_tensor(ndim, dims, -bound, bound, rng);
    if (!t) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

static kiln_status add_const(kiln_model *m, const char *name, int64_t n, float v) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(ctx, KILN_F32, 1, &n, &t);
    if (st) return st;
    for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = v;
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

/* Conv (3x3, pads 1, no bias) named `name` from `in`, then BatchNormalization with random
 * scale and shift, running mean 0 and variance 1, into `out` ("<name>.bn" the BN node). */
static kiln_status conv_bn(kiln_model *m, const char *name, const char *in, int64_t cin, const char *out,
                           uint64_t *rng) {
    char w[64], c[64], s[64], b[64], rm[64], rv[64], bn[64];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(c, sizeof c, "%s.out", name);
    snprintf(s, sizeof s, "%s.bn.weight", name);
    snprintf(b, sizeof b, "%s.bn.bias", name);
    snprintf(rm, sizeof rm, "%s.bn.running_mean", name);
    snprintf(rv, sizeof rv, "%s.bn.running_var", name);
    snprintf(bn, sizeof bn, "%s.bn", name);
    kiln_node *n = NULL;
    kiln_status st = add_rand(m, w, 4, (int64_t[]){WIDTH, cin, 3, 3}, 1.0 / sqrt(9.0 * (double)cin), rng);
    if (!st) st = add_rand(m, s, 1, (int64_t[]){WIDTH}, 1.0, rng);
    for (int v = 0; !st && v < m->n_values; v++) /* scale in [0.5, 1.5): shift the draw */
        if (strcmp(m->values[v].name, s) == 0 && m->values[v].init) {
            float *p = m->values[v].init->data;
            for (int i = 0; i < WIDTH; i++) p[i] = 1.0f + 0.5f * p[i];
        }
    if (!st) st = add_rand(m, b, 1, (int64_t[]){WIDTH}, 0.5, rng);
    if (!st) st = add_const(m, rm, WIDTH, 0.f);
    if (!st) st = add_const(m, rv, WIDTH, 1.f);
    if (!st) st = kiln_model_add_node(m, "Conv", name, 2, (const char *[]){in, w}, 1, (const char *[]){c}, &n);
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
    if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (!st)
        st = kiln_model_add_node(m, "BatchNormalization", bn, 5, (const char *[]){c, s, b, rm, rv}, 1,
                                 (const char *[]){out}, &n);
    if (!st) st = kiln_node_set_float(n, "momentum", 0.8f);
    return st;
}

static kiln_status relu(kiln_model *m, const char *name, const char *in, const char *out) {
    return kiln_model_add_node(m, "Relu", name, 1, (const char *[]){in}, 1, (const char *[]){out}, NULL);
}

/* head: an op (node 'head') that reads the block's output: NULL, GlobalAveragePool; with
 * head_keeps_shape a GlobalAveragePool follows it. pool: the AveragePool of model (b). */
static kiln_model *build(bool pool, const char *head, bool head_keeps_shape, bool head_f64, uint64_t seed) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    uint64_t rng = seed;
    kiln_node *n = NULL;
    kiln_status st = kiln_model_add_input(m, "image", KILN_F32, 4, (int64_t[]){BATCH, 3, 8, 8});
    if (!st) st = kiln_model_add_input(m, "label", KILN_I64, 1, (int64_t[]){BATCH});
    if (!st) st = conv_bn(m, "stem", "image", 3, "stem.bn.out", &rng);
    if (!st) st = relu(m, "stem.relu", "stem.bn.out", "x0");
    const char *x = "x0";
    if (!st && pool) {
        st = kiln_model_add_node(m, "AveragePool", "pool", 1, (const char *[]){"x0"}, 1, (const char *[]){"x1"}, &n);
        if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
        if (!st) st = kiln_node_set_ints(n, "strides", 2, (int64_t[]){2, 2});
        x = "x1";
    }
    if (!st && dense) { /* (c): x' = conv-BN-ReLU(Concat(x, conv(x))), the conv's output concatenated as is */
        st = add_rand(m, "dense.conv1.weight", 4, (int64_t[]){WIDTH, WIDTH, 3, 3}, 1.0 / sqrt(9.0 * WIDTH), &rng);
        if (!st)
            st = kiln_model_add_node(m, "Conv", "dense.conv1", 2, (const char *[]){x, "dense.conv1.weight"}, 1,
                                     (const char *[]){"dense.f1"}, &n);
        if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
        if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
        if (!st)
            st = kiln_model_add_node(m, "Concat", "dense.cat", 2, (const char *[]){x, "dense.f1"}, 1,
                                     (const char *[]){"dense.cat.out"}, &n);
        if (!st) st = kiln_node_set_int(n, "axis", 1);
        if (!st) st = conv_bn(m, "dense.conv2", "dense.cat.out", 2 * WIDTH, "dense.bn2.out", &rng);
        if (!st) st = relu(m, "dense.relu2", "dense.bn2.out", "dense.out");
        x = "dense.out";
    }
    if (!st) st = conv_bn(m, "block.conv1", x, WIDTH, "block.bn1.out", &rng);
    if (!st) st = relu(m, "block.relu1", "block.bn1.out", "block.r1");
    if (!st) st = conv_bn(m, "block.conv2", "block.r1", WIDTH, "block.bn2.out", &rng);
    if (!st)
        st = kiln_model_add_node(m, "Add", "block.add", 2, (const char *[]){"block.bn2.out", x}, 1,
                                 (const char *[]){"block.sum"}, NULL);
    if (!st) st = relu(m, "block.relu2", "block.sum", "block.out");
    /* head_f64: the head runs in f64 between two Casts (no CUDA kernel of a CNN's ops takes
     * f64, the CPU's all do) */
    const char *head_in = "block.out";
    if (!st && head_f64) {
        st = kiln_model_add_node(m, "Cast", "head.to_f64", 1, (const char *[]){"block.out"}, 1,
                                 (const char *[]){"block.out64"}, &n);
        if (!st) st = kiln_node_set_int(n, "to", 11 /* DOUBLE */);
        head_in = "block.out64";
    }
    if (!st)
        st = kiln_model_add_node(m, head ? head : "GlobalAveragePool", "head", 1, (const char *[]){head_in}, 1,
                                 (const char *[]){head_keeps_shape ? "head.out" : "pooled"}, NULL);
    if (!st && head_f64) {
        st = kiln_model_add_node(m, "Cast", "head.to_f32", 1, (const char *[]){"head.out"}, 1,
                                 (const char *[]){"head.out32"}, &n);
        if (!st) st = kiln_node_set_int(n, "to", 1 /* FLOAT */);
    }
    if (!st && head_keeps_shape)
        st = kiln_model_add_node(m, "GlobalAveragePool", "gap", 1, (const char *[]){head_f64 ? "head.out32" : "head.out"},
                                 1, (const char *[]){"pooled"}, NULL);
    if (!st)
        st = kiln_model_add_node(m, "Flatten", "flatten", 1, (const char *[]){"pooled"}, 1, (const char *[]){"flat"},
                                 &n);
    if (!st) st = kiln_node_set_int(n, "axis", 1);
    if (!st) st = add_rand(m, "fc.weight", 2, (int64_t[]){CLASSES, WIDTH}, 1.0 / sqrt((double)WIDTH), &rng);
    if (!st) st = add_rand(m, "fc.bias", 1, (int64_t[]){CLASSES}, 1.0 / sqrt((double)WIDTH), &rng);
    if (!st)
        st = kiln_model_add_node(m, "Gemm", "fc", 3, (const char *[]){"flat", "fc.weight", "fc.bias"}, 1,
                                 (const char *[]){"logits"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st)
        st = kiln_model_add_node(m, "SoftmaxCrossEntropyLoss", "loss_fn", 2, (const char *[]){"logits", "label"}, 1,
                                 (const char *[]){"loss"}, &n);
    if (!st) st = kiln_node_set_string(n, "reduction", "mean");
    if (!st) st = kiln_model_add_output(m, "logits");
    if (!st) st = kiln_model_add_output(m, "loss");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        printf("FAIL building the model: %s\n", kiln_context_message(ctx));
        fails++;
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* STEPS batches of images in [-1, 1) and labels in [0, CLASSES) */
typedef struct data {
    kiln_tensor *images[STEPS], *labels[STEPS];
} data;

static bool make_data(data *d, uint64_t seed) {
    memset(d, 0, sizeof *d);
    uint64_t rng = seed;
    for (int s = 0; s < STEPS; s++) {
        d->images[s] = rand_tensor(4, (int64_t[]){BATCH, 3, 8, 8}, -1, 1, &rng);
        if (kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){BATCH}, &d->labels[s]) || !d->images[s]) return false;
        for (int i = 0; i < BATCH; i++) ((int64_t *)d->labels[s]->data)[i] = (int64_t)(mix(&rng) % CLASSES);
    }
    return true;
}

static void free_data(data *d) {
    for (int s = 0; s < STEPS; s++) {
        kiln_tensor_free(d->images[s]);
        kiln_tensor_free(d->labels[s]);
    }
}

/* Train `steps` steps (batch s % STEPS) of model m on device with amp; losses[s] gets each
 * step's loss, *out the exported inference model (weights and running statistics). */
static bool train(kiln_model *m, kiln_device device, kiln_amp amp, bool strict, const data *d, int steps,
                  float *losses, kiln_model **out, kiln_train_stats *stats, const char *what) {
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.device = device;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.amp = amp;
    o.strict_fp32 = strict;
    kiln_trainer *t = NULL;
    kiln_status st = kiln_trainer_create(m, "loss", &o, &t);
    CHECK(st == KILN_OK, "%s: kiln_trainer_create: %s", what, kiln_context_message(ctx));
    mx_nodes = st_nodes = 0;
    for (int i = 0; !st && i < t->train->n_nodes; i++) {
        const kiln_node *n = &t->train->nodes[i];
        mx_nodes += strcmp(n->op_type, "BatchNormGrad") == 0 && kiln_attr_int(n, "relu_mask_from_x", 0) != 0;
        st_nodes += strcmp(n->op_type, "BatchNormalization") == 0 && n->n_in >= 8 && n->in[6] >= 0;
    }
    for (int s = 0; !st && s < steps; s++) {
        kiln_tensor *in[2] = {d->images[s % STEPS], d->labels[s % STEPS]};
        st = kiln_trainer_step(t, 2, in, &losses[s]);
        CHECK(st == KILN_OK, "%s: step %d: %s", what, s, kiln_context_message(ctx));
        CHECK(st || isfinite(losses[s]), "%s: step %d: loss %g", what, s, losses[s]);
    }
    if (!st && stats) st = kiln_trainer_stats(t, stats);
    if (!st && out) {
        st = kiln_trainer_export(t, "logits", out);
        CHECK(st == KILN_OK, "%s: export: %s", what, kiln_context_message(ctx));
    }
    kiln_trainer_free(t);
    return st == KILN_OK;
}

/* The initializer named name of m, or NULL. */
static const kiln_tensor *init_of(const kiln_model *m, const char *name) {
    for (int v = 0; v < m->n_values; v++)
        if (m->values[v].init && strcmp(m->values[v].name, name) == 0) return m->values[v].init;
    return NULL;
}

/* Every f32 initializer of the CPU's export against the device's: within atol_frac of the
 * tensor's largest magnitude plus rtol relative. */
static void compare_weights(const kiln_model *cpu, const kiln_model *dev, double atol_frac, double rtol,
                            const char *what) {
    int compared = 0;
    for (int v = 0; v < cpu->n_values; v++) {
        const kiln_tensor *a = cpu->values[v].init;
        if (!a || a->dtype != KILN_F32 || kiln_tensor_numel(a) < 2) continue;
        const char *name = cpu->values[v].name;
        const kiln_tensor *b = init_of(dev, name);
        CHECK(b && b->dtype == KILN_F32 && kiln_tensor_numel(b) == kiln_tensor_numel(a), "%s: %s missing on the device",
              what, name);
        if (!b || b->dtype != KILN_F32 || kiln_tensor_numel(b) != kiln_tensor_numel(a)) continue;
        const float *pa = a->data, *pb = b->data;
        double mx = 0, worst = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(a); i++) mx = fmax(mx, fabs(pa[i]));
        for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
            const double budget = atol_frac * mx + rtol * fabs(pa[i]), err = fabs((double)pb[i] - pa[i]);
            const double share = err / budget;
            if (!(share <= worst)) { /* NaN lands here */
                worst = share;
                at = i;
            }
        }
        CHECK(worst <= 1, "%s: %s[%lld] = %.9g on the device, %.9g on the CPU (%.0f%% of the budget)", what, name,
              (long long)at, pb[at], pa[at], 100 * worst);
        if (worst <= 1) printf("ok   %s: %s within %.1f%% of the budget\n", what, name, 100 * worst);
        compared++;
    }
    CHECK(compared >= 10, "%s: only %d tensors compared", what, compared);
    /* the running statistics moved away from their initial (0, 1) */
    const kiln_tensor *rm = init_of(dev, "stem.bn.running_mean");
    CHECK(rm && fabsf(((const float *)rm->data)[0]) > 1e-4f, "%s: the running mean was not updated", what);
}

/* strict: no TF32, so NCHW on CUDA (the tight tolerances of the header); else TF32
 * convolutions and products and the NHWC layout pass (BatchNormalization training and its
 * gradient, the pool gradients NHWC): TF32 rounds operands to 10 mantissa bits (~5e-4
 * relative each), so 2e-2 relative for the losses and 2e-2 of each tensor's largest
 * magnitude for the weights. */
static void fp32_same_as_cpu(bool pool, bool strict, const char *what) {
    const double loss_rtol = strict ? 1e-4 : 2e-2, w_atol = strict ? 2e-4 : 2e-2, w_rtol = strict ? 1e-3 : 2e-2;
    data d;
    if (!make_data(&d, 99)) {
        CHECK(false, "%s: out of memory", what);
        free_data(&d);
        return;
    }
    /* (c): weights whose 5 CPU steps lower the loss (the check below; random labels) */
    kiln_model *m = build(pool, NULL, false, false, 1234 + (dense ? 3 : 0));
    float lc[STEPS] = {0}, lg[STEPS] = {0};
    kiln_model *ec = NULL, *eg = NULL;
    char wc[96], wg[96];
    snprintf(wc, sizeof wc, "%s cpu", what);
    snprintf(wg, sizeof wg, "%s cuda", what);
    if (m && train(m, KILN_DEVICE_CPU, KILN_AMP_OFF, true, &d, STEPS, lc, &ec, NULL, wc) &&
        train(m, gpu, KILN_AMP_OFF, strict, &d, STEPS, lg, &eg, NULL, wg)) {
        for (int s = 0; s < STEPS; s++) {
            const double err = fabs((double)lg[s] - lc[s]), budget = loss_rtol * fabs(lc[s]);
            CHECK(err <= budget, "%s: step %d loss %.9g on the device, %.9g on the CPU", what, s, lg[s], lc[s]);
            if (err <= budget)
                printf("ok   %s: step %d loss %.7g (CPU %.7g), %.1f%% of the budget\n", what, s, lg[s], lc[s],
                       100 * err / budget);
        }
        CHECK(lc[STEPS - 1] < lc[0], "%s: the CPU's loss did not go down (%g -> %g)", what, lc[0], lc[STEPS - 1]);
        compare_weights(ec, eg, w_atol, w_rtol, what);
    }
    kiln_model_free(ec);
    kiln_model_free(eg);
    kiln_model_free(m);
    free_data(&d);
}

/* Checks 6 and 7 (the header): a switch that is on by default (env: its environment
 * variable; KILN_BN_MASK_FROM_X the mask from X, else KILN_CUDA_CONV_STATS the BN statistics
 * from the convolution) against the same training with it off (env=0) on the device, same
 * weights and batches. */
static void switch_same(const char *env, bool pool, kiln_amp amp, bool strict, const char *what) {
    const bool mask = strcmp(env, "KILN_BN_MASK_FROM_X") == 0;
    const int f0 = fails;
    data d;
    if (!make_data(&d, 55)) {
        CHECK(false, "%s: out of memory", what);
        free_data(&d);
        return;
    }
    kiln_model *m = build(pool, NULL, false, false, 777);
    float ly[STEPS] = {0}, lx[STEPS] = {0};
    kiln_model *ey = NULL, *ex = NULL;
    char wy[128], wx[128];
    const char *on = mask ? "the mask from X" : "the convolution's sums";
    /* the mask is the forward's Y > 0 bit for bit: only the convolutions' run-to-run
     * differences remain; the sums add in another order (fp32), or before the rounding
     * to f16 (cuDNN's GenStats), moving the statistics by up to 2^-11 in fp16 */
    const double tol = mask ? 1e-5 : amp != KILN_AMP_OFF ? 1e-2 : 1e-4;
    snprintf(wy, sizeof wy, "%s, %s=0", what, env);
    snprintf(wx, sizeof wx, "%s, %s", what, on);
    setenv(env, "0", 1);
    bool ok = m && train(m, gpu, amp, strict, &d, STEPS, ly, &ey, NULL, wy);
    const int off_nodes = mask ? mx_nodes : st_nodes;
    unsetenv(env);
    ok = ok && train(m, gpu, amp, strict, &d, STEPS, lx, &ex, NULL, wx);
    const int on_nodes = mask ? mx_nodes : st_nodes;
    if (ok) {
        printf("     %s: %d %s with %s (with %s=0: %d)\n", what, on_nodes, mask ? "BatchNormGrad" : "BatchNormalization",
               on, env, off_nodes);
        const int want = mask ? (pool ? 2 : 1) : 3; /* each of the three convolutions feeds a training BN */
        if (gpu == KILN_DEVICE_CUDA)
            CHECK(on_nodes == want && off_nodes == 0, "%s: %d nodes with %s, want %d (and %d with %s=0, want 0)", what,
                  on_nodes, on, want, off_nodes, env);
        bool same = true;
        double most = 0; /* the largest relative difference, loss or weight */
        for (int s = 0; s < STEPS; s++) {
            same &= lx[s] == ly[s];
            const double e = fabs((double)lx[s] - ly[s]) / fmax(fabs(ly[s]), 1e-30);
            most = fmax(most, e);
            CHECK(e <= tol, "%s: step %d loss %.9g with %s, %.9g without", what, s, lx[s], on, ly[s]);
        }
        for (int v = 0; v < ey->n_values; v++) {
            const kiln_tensor *a = ey->values[v].init, *b = a ? init_of(ex, ey->values[v].name) : NULL;
            if (!a || a->dtype != KILN_F32) continue;
            CHECK(b && b->dtype == KILN_F32 && kiln_tensor_numel(b) == kiln_tensor_numel(a), "%s: %s missing", what,
                  ey->values[v].name);
            if (!b || b->dtype != KILN_F32 || kiln_tensor_numel(b) != kiln_tensor_numel(a)) continue;
            const float *pa = a->data, *pb = b->data;
            double mx = 0, worst = 0;
            for (int64_t i = 0; i < kiln_tensor_numel(a); i++) mx = fmax(mx, fabs(pa[i]));
            for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
                const double e = fabs((double)pb[i] - pa[i]);
                if (!(e <= worst)) worst = e;
                same &= pa[i] == pb[i];
            }
            if (mx > 0) most = fmax(most, worst / mx);
            CHECK(worst <= tol * mx, "%s: %s differs by %.3g (largest magnitude %.3g)", what, ey->values[v].name, worst, mx);
        }
        printf("%s %s: losses and weights with %s %s those without (largest difference %.3g relative; budget %g)\n",
               fails > f0 ? "FAIL" : "ok  ", what, on, same ? "bit for bit" : "within the budget of", most, tol);
    }
    kiln_model_free(ey);
    kiln_model_free(ex);
    kiln_model_free(m);
    free_data(&d);
}

static void amp_fp16_learns(void) {
    data d;
    if (!make_data(&d, 7)) {
        CHECK(false, "amp: out of memory");
        free_data(&d);
        return;
    }
    kiln_model *m = build(true, NULL, false, false, 4321);
    float lc[1] = {0}, lg[AMP_STEPS] = {0};
    data one = d; /* the same batch every step: the loss must fall */
    for (int s = 0; s < STEPS; s++) {
        one.images[s] = d.images[0];
        one.labels[s] = d.labels[0];
    }
    kiln_train_stats ts;
    memset(&ts, 0, sizeof ts);
    if (m && train(m, KILN_DEVICE_CPU, KILN_AMP_OFF, true, &one, 1, lc, NULL, NULL, "amp reference (cpu fp32)") &&
        train(m, gpu, gpu_amp, false, &one, AMP_STEPS, lg, NULL, &ts, "amp fp16 cuda")) {
        const double err = fabs((double)lg[0] - lc[0]);
        CHECK(err <= 2e-2 * fabs(lc[0]), "amp fp16: first loss %.7g, CPU fp32 %.7g", lg[0], lc[0]);
        printf("%s amp fp16: first loss %.7g (CPU fp32 %.7g), after %d steps %.7g (%lld skipped)\n",
               lg[AMP_STEPS - 1] < 0.7f * lg[0] ? "ok  " : "FAIL", lg[0], lc[0], AMP_STEPS, lg[AMP_STEPS - 1],
               (long long)ts.skipped_steps);
        CHECK(lg[AMP_STEPS - 1] < 0.7f * lg[0], "amp fp16: the loss went from %g to %g in %d steps", lg[0],
              lg[AMP_STEPS - 1], AMP_STEPS);
        CHECK(ts.skipped_steps < AMP_STEPS / 2, "amp fp16: %lld of %d steps skipped", (long long)ts.skipped_steps,
              AMP_STEPS);
    }
    kiln_model_free(m);
    free_data(&d);
}

/* The first candidate op (ONNX domain, one input, NCHW 4-D in) that has no CUDA kernel;
 * NULL when every candidate has one (since the gradient audit, grad_coverage, every
 * differentiable op has): then the case is a kernel that refuses its input, Relu in f64. */
static const char *op_without_kernel(bool *keeps_shape) {
    static const struct {
        const char *op;
        bool keeps_shape;
    } candidates[] = {{"GlobalMaxPool", false}, {"Mean", true}, {"GlobalLpPool", false}};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        const int op = kiln_op_index_domain("", candidates[i].op);
        if (op >= 0 && !kiln_cuda_kernel_for(op)) {
            *keeps_shape = candidates[i].keeps_shape;
            return candidates[i].op;
        }
    }
    return NULL;
}

static void unsupported_op_named(void) {
    bool keeps = true, f64 = false;
    const char *op = op_without_kernel(&keeps);
    if (!op) {
        op = "Relu";
        keeps = f64 = true;
    }
    data d;
    if (!make_data(&d, 5)) {
        CHECK(false, "unsupported: out of memory");
        free_data(&d);
        return;
    }
    kiln_model *m = build(false, op, keeps, f64, 77);
    if (gpu == KILN_DEVICE_CPU) { /* --cpu: the model itself trains (on the CPU) */
        float loss[1] = {0};
        CHECK(m && train(m, KILN_DEVICE_CPU, KILN_AMP_OFF, true, &d, 1, loss, NULL, NULL, "unsupported-op model"),
              "the model with a %s head does not train on the CPU", op);
        printf("--cpu: a %s head trains on the CPU (loss %g); on cuda it must be refused\n", op, loss[0]);
        kiln_model_free(m);
        free_data(&d);
        return;
    }
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.device = KILN_DEVICE_CUDA;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    kiln_trainer *t = NULL;
    kiln_status st = m ? kiln_trainer_create(m, "loss", &o, &t) : KILN_ERR_INVALID_ARGUMENT;
    if (st == KILN_OK) {
        kiln_tensor *in[2] = {d.images[0], d.labels[0]};
        float loss = 0;
        st = kiln_trainer_step(t, 2, in, &loss);
    }
    const char *msg = kiln_context_message(ctx);
    /* the forward node 'head' (or its gradient, 'head/...') */
    CHECK(st == KILN_ERR_UNSUPPORTED && strstr(msg, op) && strstr(msg, "'head"),
          "a %s node on cuda: status %d, message '%s' (want KILN_ERR_UNSUPPORTED naming %s and node 'head')", op,
          (int)st, msg, op);
    if (st == KILN_ERR_UNSUPPORTED) printf("ok   a %s node on cuda is refused: %s\n", op, msg);
    kiln_trainer_free(t);
    kiln_model_free(m);
    free_data(&d);
}

/* Check 4: resident data sets replaced between epochs (same size, then larger). */
static bool epochs_over(kiln_model *m, kiln_device device, kiln_tensor *const *xs, kiln_tensor *const *ys, float *last,
                        const char *what) {
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.device = device;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.strict_fp32 = 1;
    kiln_trainer *t = NULL;
    kiln_status st = kiln_trainer_create(m, "loss", &o, &t);
    CHECK(st == KILN_OK, "%s: kiln_trainer_create: %s", what, kiln_context_message(ctx));
    for (int e = 0; e < 4 && !st; e++) {
        const int64_t steps = kiln_tensor_dim(xs[e], 0) / BATCH;
        st = kiln_trainer_train_epoch(t, xs[e], ys[e], BATCH, 5, e, 0, steps, &last[e]);
        CHECK(st == KILN_OK, "%s: epoch %d: %s", what, e, kiln_context_message(ctx));
    }
    kiln_trainer_free(t);
    return st == KILN_OK;
}

static void resident_data_sets(void) {
    const char *what = "(a) epochs over replaced resident data sets";
    uint64_t rng = 77;
    kiln_tensor *a = rand_tensor(4, (int64_t[]){4 * BATCH, 3, 8, 8}, -1, 1, &rng);
    kiln_tensor *c = rand_tensor(4, (int64_t[]){6 * BATCH, 3, 8, 8}, -1, 1, &rng);
    kiln_tensor *b = NULL, *ya = NULL, *yc = NULL;
    kiln_status st = !a || !c ? KILN_ERR_OUT_OF_MEMORY : kiln_tensor_create(ctx, KILN_F32, 4, a->dims, &b);
    if (!st) st = kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){4 * BATCH}, &ya);
    if (!st) st = kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){6 * BATCH}, &yc);
    kiln_model *m = st ? NULL : build(false, NULL, false, false, 4321);
    if (m) {
        memcpy(b->data, a->data, kiln_tensor_nbytes(a));
        for (int i = 0; i < 4 * BATCH; i++) ((int64_t *)ya->data)[i] = (int64_t)(mix(&rng) % CLASSES);
        for (int i = 0; i < 6 * BATCH; i++) ((int64_t *)yc->data)[i] = (int64_t)(mix(&rng) % CLASSES);
        kiln_tensor *xs[4] = {a, b, c, a}, *ys[4] = {ya, ya, yc, ya};
        float lc[4] = {0}, lg[4] = {0};
        if (epochs_over(m, KILN_DEVICE_CPU, xs, ys, lc, what) && epochs_over(m, gpu, xs, ys, lg, what))
            for (int e = 0; e < 4; e++) {
                const double err = fabs((double)lg[e] - lc[e]), budget = 1e-4 * fabs(lc[e]);
                CHECK(err <= budget, "%s: epoch %d's last loss %.9g on the device, %.9g on the CPU", what, e, lg[e],
                      lc[e]);
                if (err <= budget) printf("ok   %s: epoch %d loss %.7g (CPU %.7g)\n", what, e, lg[e], lc[e]);
            }
    } else {
        CHECK(false, "%s: out of memory", what);
    }
    kiln_model_free(m);
    kiln_tensor_free(a);
    kiln_tensor_free(b);
    kiln_tensor_free(c);
    kiln_tensor_free(ya);
    kiln_tensor_free(yc);
}

/* Check 5: the rest of an epoch from sample 37 (not a multiple of the batch). */
static bool rest_of_epoch(kiln_model *m, kiln_device device, kiln_tensor *x, kiln_tensor *y, float *last,
                          const char *what) {
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.device = device;
    o.optimizer = KILN_OPTIM_SGD;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.strict_fp32 = 1;
    kiln_trainer *t = NULL;
    kiln_status st = kiln_trainer_create(m, "loss", &o, &t);
    CHECK(st == KILN_OK, "%s: kiln_trainer_create: %s", what, kiln_context_message(ctx));
    const int64_t n = kiln_tensor_dim(x, 0), from = 37, steps = (n + BATCH - 1) / BATCH;
    const int64_t first = steps - (n - from + BATCH - 1) / BATCH;
    if (!st) st = kiln_trainer_set_epoch_start(t, 0, from);
    if (!st) st = kiln_trainer_train_epoch(t, x, y, BATCH, 5, 0, first, steps, last);
    CHECK(st == KILN_OK, "%s: %s", what, kiln_context_message(ctx));
    /* a start step behind the resumed position is refused */
    if (!st) {
        kiln_status bad = kiln_trainer_train_epoch(t, x, y, BATCH, 5, 0, first - 1, steps, NULL);
        CHECK(bad == KILN_ERR_INVALID_ARGUMENT, "%s: start step %lld, behind the resumed position, was not refused",
              what, (long long)(first - 1));
    }
    kiln_trainer_free(t);
    return st == KILN_OK;
}

static void resumed_epoch(void) {
    const char *what = "(a) the rest of an epoch from sample 37";
    uint64_t rng = 78;
    kiln_tensor *x = rand_tensor(4, (int64_t[]){4 * BATCH + 5, 3, 8, 8}, -1, 1, &rng), *y = NULL;
    kiln_status st = !x ? KILN_ERR_OUT_OF_MEMORY : kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){4 * BATCH + 5}, &y);
    kiln_model *m = st ? NULL : build(false, NULL, false, false, 4322);
    if (m) {
        for (int i = 0; i < 4 * BATCH + 5; i++) ((int64_t *)y->data)[i] = (int64_t)(mix(&rng) % CLASSES);
        float lc = 0, lg = 0;
        if (rest_of_epoch(m, KILN_DEVICE_CPU, x, y, &lc, what) && rest_of_epoch(m, gpu, x, y, &lg, what)) {
            const double err = fabs((double)lg - lc), budget = 1e-4 * fabs(lc);
            CHECK(err <= budget, "%s: last loss %.9g on the device, %.9g on the CPU", what, lg, lc);
            if (err <= budget) printf("ok   %s: last loss %.7g (CPU %.7g)\n", what, lg, lc);
        }
    } else {
        CHECK(false, "%s: out of memory", what);
    }
    kiln_model_free(m);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
}

int main(int argc, char **argv) {
    const bool cpu_only = argc > 1 && strcmp(argv[1], "--cpu") == 0;
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    if (cpu_only) {
        gpu = KILN_DEVICE_CPU;
        gpu_amp = KILN_AMP_OFF;
        printf("--cpu: the device side runs on the CPU in fp32 (a check of this test; no CUDA kernel runs)\n");
    }
    fp32_same_as_cpu(false, true, "(a) residual CNN fp32");
    fp32_same_as_cpu(true, true, "(b) residual CNN with AveragePool fp32");
    fp32_same_as_cpu(false, false, "(a) residual CNN fp32 TF32 NHWC");
    fp32_same_as_cpu(true, false, "(b) residual CNN with AveragePool fp32 TF32 NHWC");
    amp_fp16_learns();
    dense = true;
    printf("-- (c) dense CNN (Concat): the checks above again\n");
    fp32_same_as_cpu(true, true, "(c) dense CNN (Concat) fp32");
    fp32_same_as_cpu(true, false, "(c) dense CNN (Concat) fp32 TF32 NHWC");
    amp_fp16_learns();
    dense = false;
    resident_data_sets();
    resumed_epoch();
    unsupported_op_named();
    printf("-- the mask from X (on by default; KILN_BN_MASK_FROM_X=0 against it)\n");
    switch_same("KILN_BN_MASK_FROM_X", false, KILN_AMP_OFF, true, "(a) fp32 (NCHW kernels)");
    switch_same("KILN_BN_MASK_FROM_X", true, KILN_AMP_OFF, false, "(b) fp32 TF32 NHWC (f32 vector kernels)");
    switch_same("KILN_BN_MASK_FROM_X", true, gpu_amp, false, "(b) amp fp16 (f16 vector kernels)");
    printf("-- BN statistics from the convolution (on by default; KILN_CUDA_CONV_STATS=0 against it)\n");
    switch_same("KILN_CUDA_CONV_STATS", false, KILN_AMP_OFF, true, "(a) fp32");
    switch_same("KILN_CUDA_CONV_STATS", true, KILN_AMP_OFF, false, "(b) fp32 TF32 NHWC");
    switch_same("KILN_CUDA_CONV_STATS", true, gpu_amp, false, "(b) amp fp16 (cuDNN's GenStats where timed faster)");
    printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    kiln_context_free(ctx);
    return fails ? 1 : 0;
}
