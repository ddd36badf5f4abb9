/*
 * batch_normalization.c — BatchNormalization over X (N,C,D1..Dn), per channel c:
 *   y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]
 *
 * Inference (training_mode=0, the default): mean and var are the inputs input_mean and
 * input_var, and Y is the only output.
 * Training (training_mode=1, opset 14+): mean and var are the batch statistics of X over
 * every dim but C (population variance, divided by N*D1*..*Dn), and the optional outputs
 * are running_mean = input_mean * momentum + mean * (1 - momentum) and likewise
 * running_var (momentum default 0.9).
 * Opsets 9..21; the opset 9-13 training outputs (mean, var, saved_mean, saved_var) are
 * rejected as unsupported. X, scale/B and mean/var may have different float dtypes (as
 * opset 15 allows); statistics are computed in double.
 *
 * Gradient: kiln.BatchNormGrad(dY, X, scale, B, input_mean, input_var) -> (dX, dScale, dB
 * [, dMean, dVar]) with the forward node's attributes. In training mode it recomputes the
 * batch statistics from X (nothing saved from the forward is needed) and, per channel
 * over its M = N*D1*..*Dn elements, with xhat = (x - mean) / sqrt(var + eps):
 *   dB = sum(dY), dScale = sum(dY * xhat),
 *   dX = scale / sqrt(var + eps) * (dY - dB / M - xhat * dScale / M);
 * Y does not depend on input_mean/input_var there, so dMean = dVar = 0, and the running
 * statistics outputs have no gradient (the rule refuses a graph where they reach the loss).
 * In inference mode the statistics are the inputs and every input gets its gradient:
 *   dX = scale / sqrt(var + eps) * dY, dMean = -scale / sqrt(var + eps) * sum(dY),
 *   dVar = -scale / 2 / (var + eps) * sum(dY * xhat).
 *
 * Fused ReLU (kiln's attribute relu = 1, made by the fuse-bn pass, src/passes/fuse_bn.c, in
 * training graphs): Y = Relu(BatchNormalization(X, ...)) as one node (Relu maps NaN to 0),
 * or with kiln's input 5, Z (X's dtype and shape; relu = 1 only), Relu(BN(X, ...) + Z):
 * ResNet's BN -> Add(residual) -> Relu, the sum rounded once (FUSED.md's contract);
 * its gradient kiln.BatchNormGrad(dY, X, scale, B, input_mean, input_var, Y) relu = 1 takes
 * the ReLU's output Y and reads dY masked by Y > 0, as kiln.UnaryGrad op=Relu (the gradient
 * rule emits that for a node with relu = 1). Plain composition here; one pass each way on
 * CUDA (src/cuda/norm_train.cu).
 *
 * The mask from X (kiln's attribute relu_mask_from_x = 1 on kiln.BatchNormGrad with relu = 1,
 * made by the fuse-bn pass where KILN_BN_MASK_FROM_X=1 asks for it; issue 12, bench/NOTES.md
 * "t7"): the gradient reads no Y. Its input 6 is S instead, the forward's saved batch
 * statistics, BatchNormalization's kiln output 3 in training mode: (2, C), row 0 the batch
 * mean, row 1 the batch (population) variance, f64, exactly as the forward used them (any
 * float dtype is accepted as input). The mask is the forward's Y > 0 recomputed from X:
 *   a = scale / sqrt(var + epsilon), b = B - mean * a,  mask = round(x * a + b) > 0
 * with round() to X's dtype as the forward writes Y (f16: f16(x * a + b) > 0, not
 * x * a + b > 0), in double here as the forward here (the same expression, bn_affine): on
 * the CPU the mask is the CPU forward's Y > 0 bit for bit. The CUDA kernels recompute it
 * as the CUDA forward computes Y (src/cuda/norm_train.cu, bn_affine there: float
 * coefficients from the same S, one fused multiply-add), so there it is the CUDA forward's
 * Y > 0 bit for bit; the two backends differ only where x * a + b is within float rounding
 * of 0. The non-residual form only: no input 7 (dY2), no output 5, training_mode = 1.
 * Why: the gradient of a BN -> ReLU pair then reads X, dY twice and S instead of X, dY and
 * Y twice (a third fewer bytes).
 *
 * The residual's gradient (the fuse-bn pass, ResNet's blocks): kiln.BatchNormGrad's optional
 * input 7, dY2 (dY's dtype and shape), is a second term of the gradient, dY = in0 + dY2
 * before the mask (Sum(a, b) -> BatchNormGrad as one node; the sum in double here, rounded
 * to the dtype once by the CUDA kernels, as Sum writes it); its
 * optional output 5 is the gradient it reads, (in0 + dY2) masked by Y > 0 under relu = 1
 * (what kiln.UnaryGrad op=Relu would give the shortcut), else in0 + dY2. Outputs 3 and 4 may
 * be absent beside it.
 *
 * The apply's coefficients (issue 12; the conv-bn-prologue pass, src/passes/conv_bn_prologue.c,
 * CUDA training graphs): kiln's output 4 in training mode, P, f32 (2, C): row 0
 * a = scale / sqrt(var + epsilon), row 1 k = B - mean * a, from the batch statistics the
 * node used (so Y = act(a * X + k) up to the rounding of a and k to f32). With it, kiln's
 * attribute write_y = 0 leaves Y unwritten (output 0 an empty tensor of X's dtype, or absent):
 * the convolutions that read Y read X through P instead (kiln.FusedConv's input 4,
 * kiln.ConvGradWeight's input 3). Not with a residual Z. write_y = 0 beside S (output 3)
 * alone: kiln.BnReluMaxPool recomputes Y from X and S (the fuse-pool pass; src/ops/
 * bn_relu_max_pool.c).
 *
 * Statistics from the convolution (issue 12; the conv-bn-stats pass, src/passes/conv_bn_stats.c,
 * CUDA training graphs): kiln's inputs 6 and 7, given together in training mode only, are the
 * per-channel sum and sum of squares of X (f32 or f64 (C), kiln.FusedConv's outputs 1 and 2,
 * the convolution that wrote X: f64 in f32 training). The node then takes its batch statistics from them instead of
 * summing X: mean = sum / M, var = sumsq / M - mean^2 clamped at 0 (M = N*D1*..*Dn), in
 * double, as the CUDA kernels' finalize computes them from their partial sums
 * (src/cuda/norm_train.cu) — not the reference's two-pass variance, so within f32 rounding
 * of the sums and E[x^2] - mean^2's cancellation of the plain node. Under SyncBatchNorm the
 * sums and the count are all-reduced over the ranks (in double, one all-reduce) as the CUDA
 * kernels all-reduce their partial sums. The gradient rule reads the sums as X's own
 * statistics (which the pass guarantees): kiln.BatchNormGrad as without them (it recomputes
 * the statistics from X), X's gradient the training-mode one, and none for inputs 6 and 7.
 *
 * SyncBatchNorm (data parallelism, kiln_train_options.sync_bn): the trainer sets the
 * attribute sync_comm (a communicator's id, src/dist/dist.h) on the training node, which
 * its gradient node copies; both then take the batch statistics over every rank's batch
 * (the per-channel sums all-reduced in double: sum and count, then the squared deviations;
 * in the gradient also the sums of dY and dY * (x - mean)), so every rank computes what one
 * process holding the whole batch would. dScale and dB stay this rank's sums (the gradient
 * all-reduce averages them with the other parameters').
 */
#include "batch_normalization.h"

#include "../core/optest.h"
#include "../dist/dist.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool has_out(const kiln_op_ctx *c, int i) { return c->n_out > i && c->out[i] != NULL; }

static bool training(const kiln_op_ctx *c) {
    return c->node->opset >= 14 && kiln_attr_int(c->node, "training_mode", 0) != 0;
}

/* attribute relu (0 or 1): the fused ReLU */
static bool fused_relu(const kiln_op_ctx *c) { return kiln_attr_int(c->node, "relu", 0) != 0; }

/* kiln.BatchNormGrad's attribute relu_mask_from_x (0 or 1): input 6 is S, not Y */
static bool mask_from_x(const kiln_op_ctx *c) { return kiln_attr_int(c->node, "relu_mask_from_x", 0) != 0; }

/* (the forward's affine and Y's rounding: kiln_bn_affine, kiln_bn_round_as in
 * batch_normalization.h, one expression for the forward, the mask from X and
 * kiln.BnReluMaxPool so all round alike) */

/* Y, when the node writes it: attribute write_y = 0 (beside output 4, the apply's
 * coefficients) leaves output 0 an empty tensor nothing reads */
static kiln_tensor *y_out(const kiln_op_ctx *c) {
    return has_out(c, 0) && kiln_attr_int(c->node, "write_y", 1) != 0 ? c->out[0] : NULL;
}

/* BatchNormalization's input 5 (kiln's): Z, the fused residual added before the ReLU */
static const kiln_tensor *resid(const kiln_op_ctx *c) { return c->n_in > 5 ? c->in[5] : NULL; }

/* BatchNormalization's inputs 6 and 7 (kiln's): the sum and sum of squares of X per channel */
static const kiln_tensor *in_sum(const kiln_op_ctx *c) { return c->n_in > 7 ? c->in[6] : NULL; }
static const kiln_tensor *in_sumsq(const kiln_op_ctx *c) { return c->n_in > 7 ? c->in[7] : NULL; }

/* mean and variance (population, clamped at 0) from a channel's sum and sum of squares over
 * count elements */
static void stats_from_sums(double sum, double sq, double count, double *mean, double *var) {
    *mean = count > 0 ? sum / count : 0;
    const double v = count > 0 ? sq / count - *mean * *mean : 0;
    *var = v > 0 ? v : 0;
}

/* y = max(y, 0) in place, NaN to 0 (Relu's semantics) */
static void relu_inplace(kiln_tensor *y) {
    const int64_t n = kiln_tensor_numel(y);
    if (y->dtype == KILN_F32) {
        float *p = y->data;
        for (int64_t i = 0; i < n; i++) p[i] = p[i] > 0 ? p[i] : 0.f;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const double v = kiln_get_f64(y, i);
        kiln_set_f64(y, i, v > 0 ? v : 0.0);
    }
}

static kiln_status infer(kiln_op_ctx *c) {
    static const char *const names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input X dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "input X must be (N,C,...), got rank %d",
                  x->ndim);
    for (int i = 1; i < 5; i++) {
        const kiln_tensor *p = c->in[i];
        KILN_OP_CHECK(c, p != NULL, KILN_ERR_SHAPE, "input %s is required", names[i]);
        KILN_OP_CHECK(c, kiln_dtype_is_float(p->dtype), KILN_ERR_TYPE,
                      "input %s dtype %s is not supported", names[i], kiln_dtype_name(p->dtype));
        KILN_OP_CHECK(c, p->ndim == 1 && p->dims[0] == x->dims[1], KILN_ERR_SHAPE,
                      "input %s must have shape (C)=(%lld)", names[i], (long long)x->dims[1]);
    }
    const int64_t relu = kiln_attr_int(c->node, "relu", 0);
    KILN_OP_CHECK(c, relu == 0 || relu == 1, KILN_ERR_INVALID_ARGUMENT, "attribute relu must be 0 or 1, got %lld",
                  (long long)relu);
    const kiln_tensor *z = resid(c);
    if (z) {
        bool same = z->dtype == x->dtype && z->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = z->dims[d] == x->dims[d];
        KILN_OP_CHECK(c, relu == 1, KILN_ERR_INVALID_ARGUMENT, "input 5 (Z, a fused residual) needs relu = 1");
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "input 5 (Z) must have X's dtype and shape");
    }
    const bool s6 = c->n_in > 6 && c->in[6], s7 = c->n_in > 7 && c->in[7];
    if (s6 || s7) { /* the statistics from the convolution: both, training mode, f32 or f64 (C) */
        KILN_OP_CHECK(c, s6 && s7, KILN_ERR_INVALID_ARGUMENT,
                      "inputs 6 and 7 (sum and sum of squares of X per channel) are given together, got only input %d",
                      s6 ? 6 : 7);
        KILN_OP_CHECK(c, training(c), KILN_ERR_INVALID_ARGUMENT,
                      "inputs 6 and 7 (X's sums) need training_mode=1 (opset >= 14)");
        for (int i = 6; i <= 7; i++)
            KILN_OP_CHECK(c, (c->in[i]->dtype == KILN_F32 || c->in[i]->dtype == KILN_F64) && c->in[i]->ndim == 1 &&
                              c->in[i]->dims[0] == x->dims[1],
                          KILN_ERR_SHAPE, "input %d (%s of X per channel) must be f32 or f64 (C)=(%lld), got %s of rank %d", i,
                          i == 6 ? "sum" : "sum of squares", (long long)x->dims[1], kiln_dtype_name(c->in[i]->dtype),
                          c->in[i]->ndim);
        KILN_OP_CHECK(c, c->in[6]->dtype == c->in[7]->dtype, KILN_ERR_SHAPE,
                      "inputs 6 and 7 (X's sums) must have one dtype, got %s and %s", kiln_dtype_name(c->in[6]->dtype),
                      kiln_dtype_name(c->in[7]->dtype));
    }
    bool extra = has_out(c, 1) || has_out(c, 2) || has_out(c, 3) || has_out(c, 4);
    if (c->node->opset < 14) {
        KILN_OP_CHECK(c, !extra, KILN_ERR_UNSUPPORTED,
                      "training outputs of BatchNormalization-%d are not supported",
                      c->node->opset);
    } else {
        KILN_OP_CHECK(c, training(c) || !extra, KILN_ERR_UNSUPPORTED,
                      "outputs running_mean/running_var (and kiln's output 3) need training_mode=1");
    }
    /* kiln's output 3 (training, opset >= 14): S, the saved batch statistics (mean; var);
     * output 4: P, the apply's coefficients (a; k), f32 (2, C), for a convolution's prologue,
     * Y (output 0) then optional */
    const int64_t wy = kiln_attr_int(c->node, "write_y", 1);
    KILN_OP_CHECK(c, wy == 0 || wy == 1, KILN_ERR_INVALID_ARGUMENT, "attribute write_y must be 0 or 1, got %lld",
                  (long long)wy);
    KILN_OP_CHECK(c, (wy && has_out(c, 0)) || has_out(c, 4) || (has_out(c, 3) && training(c)),
                  KILN_ERR_INVALID_ARGUMENT,
                  "Y (output 0) may be left out (write_y = 0) only beside output 4 (the apply's coefficients) or, "
                  "in training mode, output 3 (the saved statistics)");
    KILN_OP_CHECK(c, !has_out(c, 4) || !resid(c), KILN_ERR_INVALID_ARGUMENT,
                  "output 4 (the apply's coefficients a; k) cannot stand for a fused residual Z (input 5)");
    if (has_out(c, 0)) {
        if (wy) kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
        else kiln_tensor_set_shape(c->out[0], x->dtype, 1, (const int64_t[]){0}); /* not written: empty */
    }
    if (has_out(c, 4)) kiln_tensor_set_shape(c->out[4], KILN_F32, 2, (const int64_t[]){2, x->dims[1]});
    for (int i = 1; i <= 2; i++)
        if (has_out(c, i)) kiln_tensor_set_shape(c->out[i], c->in[2 + i]->dtype, 1, &x->dims[1]);
    if (has_out(c, 3)) kiln_tensor_set_shape(c->out[3], KILN_F64, 2, (const int64_t[]){2, x->dims[1]});
    return KILN_OK;
}

/* y[n,c,:] = x[n,c,:] * a + b (+ z[n,c,:], the fused residual, when z) over the S spatial
 * elements of every n, rounded once */
static void affine_channel(const kiln_tensor *x, const kiln_tensor *z, kiln_tensor *y, int64_t N, int64_t C,
                           int64_t S, int64_t ch, double a, double b) {
    bool f32 = x->dtype == KILN_F32;
    for (int64_t n = 0; n < N; n++) {
        int64_t base = (n * C + ch) * S;
        if (z) {
            for (int64_t s = 0; s < S; s++)
                kiln_set_f64(y, base + s, kiln_get_f64(x, base + s) * a + b + kiln_get_f64(z, base + s));
        } else if (f32) {
            const float *xp = (const float *)x->data + base; // (S)
            float *yp = (float *)y->data + base;
            for (int64_t s = 0; s < S; s++) yp[s] = (float)kiln_bn_affine(xp[s], a, b);
        } else {
            for (int64_t s = 0; s < S; s++)
                kiln_set_f64(y, base + s, kiln_bn_affine(kiln_get_f64(x, base + s), a, b));
        }
    }
}

/* The apply of channel ch: Y (when output 0 is there) and output 4's a, k (when it is) */
static void apply_channel(const kiln_op_ctx *c, const kiln_tensor *x, kiln_tensor *y, int64_t N, int64_t C, int64_t S,
                          int64_t ch, double a, double b) {
    if (has_out(c, 4)) {
        ((float *)c->out[4]->data)[ch] = (float)a;
        ((float *)c->out[4]->data)[C + ch] = (float)b;
    }
    if (y) affine_channel(x, resid(c), y, N, C, S, ch, a, b);
}

static kiln_status forward_sync(kiln_op_ctx *c);
static kiln_status forward_grad_sync(kiln_op_ctx *c);
static bool synced(const kiln_op_ctx *c) { return kiln_attr_int(c->node, "sync_comm", 0) != 0 && training(c); }

static kiln_status forward_plain(kiln_op_ctx *c);

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_status st = synced(c) ? forward_sync(c) : forward_plain(c);
    if (!st && fused_relu(c) && y_out(c)) relu_inplace(c->out[0]);
    return st;
}

static kiln_status forward_plain(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N,C,D1..Dn)
    const kiln_tensor *scale = c->in[1], *bias = c->in[2]; // (C)
    const kiln_tensor *mean_in = c->in[3], *var_in = c->in[4]; // (C)
    kiln_tensor *y = y_out(c);
    double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    double momentum = kiln_attr_float(c->node, "momentum", 0.9f);
    bool train = training(c);
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    bool f32 = x->dtype == KILN_F32;

    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        double mean = kiln_get_f64(mean_in, ch), var = kiln_get_f64(var_in, ch);
        if (train && in_sum(c)) { /* inputs 6, 7: X's sums, from the convolution */
            double bm, bv;
            stats_from_sums(kiln_get_f64(in_sum(c), ch), kiln_get_f64(in_sumsq(c), ch),
                            (double)(N * S), &bm, &bv);
            if (has_out(c, 1)) kiln_set_f64(c->out[1], ch, mean * momentum + bm * (1 - momentum));
            if (has_out(c, 2)) kiln_set_f64(c->out[2], ch, var * momentum + bv * (1 - momentum));
            mean = bm;
            var = bv;
            if (has_out(c, 3)) { /* S: what the affine below uses (the mask from X reads it) */
                kiln_set_f64(c->out[3], ch, bm);
                kiln_set_f64(c->out[3], C + ch, bv);
            }
        } else if (train) {
            /* two passes in double: the mean, then squared deviations from it */
            double sum = 0, sq = 0, count = (double)(N * S);
            for (int64_t n = 0; n < N; n++) {
                int64_t base = (n * C + ch) * S;
                for (int64_t s = 0; s < S; s++)
                    sum += f32 ? ((const float *)x->data)[base + s] : kiln_get_f64(x, base + s);
            }
            double bm = sum / count;
            for (int64_t n = 0; n < N; n++) {
                int64_t base = (n * C + ch) * S;
                for (int64_t s = 0; s < S; s++) {
                    double v = f32 ? ((const float *)x->data)[base + s] : kiln_get_f64(x, base + s);
                    sq += (v - bm) * (v - bm);
                }
            }
            double bv = sq / count;
            if (has_out(c, 1)) kiln_set_f64(c->out[1], ch, mean * momentum + bm * (1 - momentum));
            if (has_out(c, 2)) kiln_set_f64(c->out[2], ch, var * momentum + bv * (1 - momentum));
            mean = bm;
            var = bv;
            if (has_out(c, 3)) { /* S: what the affine below uses */
                kiln_set_f64(c->out[3], ch, bm);
                kiln_set_f64(c->out[3], C + ch, bv);
            }
        }
        double a, b;
        kiln_bn_coef(kiln_get_f64(scale, ch), kiln_get_f64(bias, ch), mean, var, eps, &a, &b);
        apply_channel(c, x, y, N, C, S, ch, a, b);
    }
    return KILN_OK;
}

/* ----------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    for (int k = 1; k < n->n_out; k++)
        if (g->dy[k] >= 0)
            return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                             "BatchNormalization node '%s': output %d (a running statistic) has no gradient",
                             n->name, k);
    if (g->dy[0] < 0) return KILN_OK;
    bool stats = g->need[3] || g->need[4];
    /* relu = 1 (copied with the attributes): the gradient also reads Y, the ReLU's output */
    const bool relu = kiln_attr_int(n, "relu", 0) != 0;
    int in[7] = {g->dy[0], n->in[0], n->in[1], n->in[2], n->in[3], n->in[4], n->out[0]};
    /* read before emitting: kiln_grad_emit may move the node array (n) */
    const int z = n->n_in > 5 ? n->in[5] : -1, y = n->out[0];
    int outs[5];
    if (kiln_grad_emit(g, "kiln", "BatchNormGrad", relu ? 7 : 6, in, stats ? 5 : 3, outs, true, NULL) < 0)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < 5; k++)
        if (g->need[k]) g->dx[k] = outs[k];
    /* Z (relu = 1): dZ = dY masked by Y > 0, as the Add -> Relu it stands for */
    if (z >= 0 && g->need[5]) {
        const int zin[3] = {g->dy[0], -1, y};
        if ((g->dx[5] = kiln_grad_emit(g, "kiln", "UnaryGrad", 3, zin, 1, NULL, false, "op=Relu")) < 0)
            return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    static const char *const names[6] = {"dY", "X", "scale", "B", "input_mean", "input_var"};
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) && dy->dtype == x->dtype, KILN_ERR_TYPE,
                  "X and dY must be the same float dtype");
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "input X must be (N,C,...), got rank %d", x->ndim);
    bool same = dy->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = dy->dims[d] == x->dims[d];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have X's shape");
    const int64_t relu = kiln_attr_int(c->node, "relu", 0);
    KILN_OP_CHECK(c, relu == 0 || relu == 1, KILN_ERR_INVALID_ARGUMENT, "attribute relu must be 0 or 1, got %lld",
                  (long long)relu);
    const kiln_tensor *y = c->n_in > 6 ? c->in[6] : NULL;
    const int64_t mx = kiln_attr_int(c->node, "relu_mask_from_x", 0);
    KILN_OP_CHECK(c, mx == 0 || mx == 1, KILN_ERR_INVALID_ARGUMENT, "attribute relu_mask_from_x must be 0 or 1, got %lld",
                  (long long)mx);
    if (mx) { /* input 6 is S, the forward's saved batch statistics (mean; var): no Y */
        KILN_OP_CHECK(c, relu == 1 && training(c), KILN_ERR_INVALID_ARGUMENT,
                      "relu_mask_from_x = 1 needs relu = 1 and training_mode = 1 (opset >= 14)");
        KILN_OP_CHECK(c, y != NULL, KILN_ERR_INVALID_ARGUMENT,
                      "relu_mask_from_x = 1 needs input 6 (S, BatchNormalization's saved statistics (2, C)=(2, %lld))",
                      (long long)x->dims[1]);
        KILN_OP_CHECK(c, kiln_dtype_is_float(y->dtype) && y->ndim == 2 && y->dims[0] == 2 && y->dims[1] == x->dims[1],
                      KILN_ERR_SHAPE, "input 6 (S, the saved statistics) must be a float tensor (2, C)=(2, %lld), got %s of rank %d (%lld, %lld%s)%s",
                      (long long)x->dims[1], kiln_dtype_name(y->dtype), y->ndim, (long long)(y->ndim > 0 ? y->dims[0] : 0),
                      (long long)(y->ndim > 1 ? y->dims[1] : 0), y->ndim > 2 ? ", ..." : "",
                      y->ndim == 2 ? "" : " (relu_mask_from_x = 1 reads S there, not Y)");
        KILN_OP_CHECK(c, !(c->n_in > 7 && c->in[7]) && !has_out(c, 5), KILN_ERR_INVALID_ARGUMENT,
                      "relu_mask_from_x = 1 is the non-residual form: no input 7 (dY2), no output 5");
        y = NULL;
    }
    KILN_OP_CHECK(c, mx || (relu != 0) == (y != NULL), KILN_ERR_INVALID_ARGUMENT,
                  "input 6 (Y, the fused ReLU's output) is given exactly when relu = 1");
    if (y) {
        same = y->dtype == dy->dtype && y->ndim == dy->ndim;
        for (int d = 0; same && d < y->ndim; d++) same = y->dims[d] == dy->dims[d];
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "input 6 (Y) must have dY's dtype and shape");
    }
    const kiln_tensor *dy2 = c->n_in > 7 ? c->in[7] : NULL;
    if (dy2) {
        same = dy2->dtype == dy->dtype && dy2->ndim == dy->ndim;
        for (int d = 0; same && d < dy2->ndim; d++) same = dy2->dims[d] == dy->dims[d];
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "input 7 (dY2, a second gradient term) must have dY's dtype and shape");
    }
    for (int i = 2; i < 6; i++) {
        const kiln_tensor *p = c->in[i];
        KILN_OP_CHECK(c, kiln_dtype_is_float(p->dtype), KILN_ERR_TYPE,
                      "input %s dtype %s is not supported", names[i], kiln_dtype_name(p->dtype));
        KILN_OP_CHECK(c, p->ndim == 1 && p->dims[0] == x->dims[1], KILN_ERR_SHAPE,
                      "input %s must have shape (C)=(%lld)", names[i], (long long)x->dims[1]);
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    for (int k = 1; k < c->n_out && k < 5; k++)
        if (c->out[k]) kiln_tensor_set_shape(c->out[k], c->in[1 + k]->dtype, 1, &x->dims[1]);
    if (has_out(c, 5)) kiln_tensor_set_shape(c->out[5], dy->dtype, dy->ndim, dy->dims); /* the gradient read */
    return KILN_OK;
}

/* The mask from X of one channel (relu_mask_from_x = 1): the forward's affine from S */
typedef struct bn_xmask {
    const kiln_tensor *x;
    double a, b;
} bn_xmask;

/* channel ch's affine as the forward computed it from S (mean S[0][ch], var S[1][ch]) */
static bn_xmask xmask_of(const kiln_op_ctx *c, int64_t ch) {
    const kiln_tensor *s = c->in[6];
    const int64_t C = c->in[1]->dims[1];
    const double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    double a, b;
    kiln_bn_coef(kiln_get_f64(c->in[2], ch), kiln_get_f64(c->in[3], ch), kiln_get_f64(s, ch), kiln_get_f64(s, C + ch),
                 eps, &a, &b);
    return (bn_xmask){.x = c->in[1], .a = a, .b = b};
}

/* The forward's Y > 0 at element i (xv = X's value there): round(x * a + b) > 0 */
static bool xmask_pos(const bn_xmask *mk, double xv) {
    return kiln_bn_round_as(mk->x->dtype, kiln_bn_affine(xv, mk->a, mk->b)) > 0;
}

/* Element i of the gradient BatchNormGrad reads: dY (+ dY2, input 7), masked by Y > 0
 * (input 6) under relu = 1, or by the mask from X (mk) */
static double grad_in(const kiln_tensor *dy, const kiln_tensor *dy2, const kiln_tensor *yr, const bn_xmask *mk,
                      int64_t i) {
    if (yr && !(kiln_get_f64(yr, i) > 0)) return 0.0;
    if (mk && !xmask_pos(mk, kiln_get_f64(mk->x, i))) return 0.0;
    return dy2 ? kiln_get_f64(dy, i) + kiln_get_f64(dy2, i) : kiln_get_f64(dy, i);
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    if (synced(c)) return forward_grad_sync(c);
    const kiln_tensor *dy = c->in[0], *x = c->in[1]; // (N,C,D1..Dn) both
    const kiln_tensor *scale = c->in[2], *mean_in = c->in[4], *var_in = c->in[5]; // (C)
    kiln_tensor *dx = c->out[0];
    kiln_tensor *dscale = has_out(c, 1) ? c->out[1] : NULL, *dbias = has_out(c, 2) ? c->out[2] : NULL;
    kiln_tensor *dmean = has_out(c, 3) ? c->out[3] : NULL, *dvar = has_out(c, 4) ? c->out[4] : NULL;
    double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    bool train = training(c);
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    double M = (double)(N * S);
    bool f32 = x->dtype == KILN_F32;
    const float *xf = x->data, *dyf = dy->data; // (N,C,S) when f32
    float *dxf = dx->data;
    /* relu = 1: dY masked by the ReLU's output Y > 0; with relu_mask_from_x by the mask from
     * X (mx; input 6 is S, no Y) */
    const bool mx = fused_relu(c) && mask_from_x(c);
    const kiln_tensor *yr = fused_relu(c) && !mx ? c->in[6] : NULL;
    const float *yf = yr ? yr->data : NULL;
    /* input 7: a second gradient term added before the mask; output 5: the gradient read */
    const kiln_tensor *dy2 = c->n_in > 7 ? c->in[7] : NULL;
    kiln_tensor *gout = has_out(c, 5) ? c->out[5] : NULL;
#define XV(i) (f32 ? (double)xf[i] : kiln_get_f64(x, i))
#define DYV(i)                                                                                               \
    (dy2 ? grad_in(dy, dy2, yr, mx ? &mk : NULL, i)                                                          \
     : yr && !(f32 ? yf[i] > 0 : kiln_get_f64(yr, i) > 0) ? 0.0                                             \
     : mx && !xmask_pos(&mk, XV(i))                      ? 0.0                                             \
     : f32                                               ? (double)dyf[i]                                  \
                                                         : kiln_get_f64(dy, i))

    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const bn_xmask mk = mx ? xmask_of(c, ch) : (bn_xmask){0};
        double mean = kiln_get_f64(mean_in, ch), var = kiln_get_f64(var_in, ch);
        if (train) {
            double sum = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t s = 0, base = (n * C + ch) * S; s < S; s++) sum += XV(base + s);
            mean = M > 0 ? sum / M : 0;
        }
        /* one pass for the variance (training) and the two sums of dY */
        double sq = 0, sum_dy = 0, sum_dy_xc = 0;
        for (int64_t n = 0; n < N; n++) {
            for (int64_t s = 0, base = (n * C + ch) * S; s < S; s++) {
                double xc = XV(base + s) - mean, g = DYV(base + s);
                sq += xc * xc;
                sum_dy += g;
                sum_dy_xc += g * xc;
            }
        }
        if (train) var = M > 0 ? sq / M : 0;
        double istd = 1.0 / sqrt(var + eps), sc = kiln_get_f64(scale, ch);
        double sum_dy_xhat = sum_dy_xc * istd;
        /* dX = a * dY + b * x + k, per channel */
        double a = sc * istd, b = 0, k = 0;
        if (train && M > 0) {
            b = -a * istd * sum_dy_xhat / M;
            k = -a * sum_dy / M - b * mean;
        }
        for (int64_t n = 0; n < N; n++) {
            int64_t base = (n * C + ch) * S;
            if (gout)
                for (int64_t s = 0; s < S; s++) kiln_set_f64(gout, base + s, DYV(base + s));
            if (f32 && !yr && !dy2 && !mx) {
                for (int64_t s = 0; s < S; s++) dxf[base + s] = (float)(a * dyf[base + s] + b * xf[base + s] + k);
            } else if (f32) {
                for (int64_t s = 0; s < S; s++) dxf[base + s] = (float)(a * DYV(base + s) + b * xf[base + s] + k);
            } else {
                for (int64_t s = 0; s < S; s++) kiln_set_f64(dx, base + s, a * DYV(base + s) + b * XV(base + s) + k);
            }
        }
        if (dscale) kiln_set_f64(dscale, ch, sum_dy_xhat);
        if (dbias) kiln_set_f64(dbias, ch, sum_dy);
        if (dmean) kiln_set_f64(dmean, ch, train ? 0.0 : -a * sum_dy);
        if (dvar) kiln_set_f64(dvar, ch, train ? 0.0 : -0.5 * a * istd * sum_dy_xhat);
    }
#undef XV
#undef DYV
    return KILN_OK;
}

/* ------------------------------------------------------------ SyncBatchNorm */

/* Scratch: 6 C + 2 doubles (sums, count, reduced and local sums of the gradient). */
static size_t workspace_sync(const kiln_op_ctx *c) {
    /* X: kiln.BatchNormGrad's input 1 (6 to 8 inputs), BatchNormalization's input 0 (5, or 6 with Z) */
    const kiln_tensor *x = c->in[strcmp(c->node->op_type, "BatchNormGrad") == 0 ? 1 : 0];
    return synced(c) && x && x->ndim >= 2 ? sizeof(double) * (size_t)(6 * x->dims[1] + 2) : 0;
}

/* The per-channel sum of X over every rank and the total count: mean[ch] in sum[ch]. */
static kiln_status global_mean(kiln_op_ctx *c, kiln_dist *d, const kiln_tensor *x, double *sum, double *count) {
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int k = 2; k < x->ndim; k++) S *= x->dims[k];
    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        double acc = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0, base = (n * C + ch) * S; s < S; s++) acc += kiln_get_f64(x, base + s);
        sum[ch] = acc;
    }
    sum[C] = (double)(N * S);
    kiln_status st = d->host->allreduce_f64(d, sum, C + 1);
    if (st) return st;
    *count = sum[C];
    for (int64_t ch = 0; ch < C; ch++) sum[ch] = *count > 0 ? sum[ch] / *count : 0;
    return KILN_OK;
}

static kiln_status forward_sync(kiln_op_ctx *c) {
    kiln_dist *d = kiln_dist_of(c, "sync_comm");
    if (!d) return KILN_ERR_INVALID_ARGUMENT;
    const kiln_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2]; // (N,C,S), (C)
    const kiln_tensor *mean_in = c->in[3], *var_in = c->in[4];
    const double eps = kiln_attr_float(c->node, "epsilon", 1e-5f), momentum = kiln_attr_float(c->node, "momentum", 0.9f);
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int k = 2; k < x->ndim; k++) S *= x->dims[k];
    double *mean = c->workspace, *sq = mean + C + 1, count = 0; // (C + 1), (C)
    kiln_status st;
    if (in_sum(c)) { /* inputs 6, 7: sums, sums of squares and the count over every rank, one all-reduce */
        double *red = mean; /* (2C + 1) in the (C + 1) + (C) above */
        for (int64_t ch = 0; ch < C; ch++) {
            red[ch] = kiln_get_f64(in_sum(c), ch);
            red[C + 1 + ch] = kiln_get_f64(in_sumsq(c), ch);
        }
        red[C] = (double)(N * S);
        if ((st = d->host->allreduce_f64(d, red, 2 * C + 1))) return st;
        count = red[C];
        for (int64_t ch = 0; ch < C; ch++) {
            double bm, bv;
            stats_from_sums(red[ch], red[C + 1 + ch], count, &bm, &bv);
            mean[ch] = bm;
            sq[ch] = bv * count; /* as the squared deviations below */
        }
    } else {
        if ((st = global_mean(c, d, x, mean, &count))) return st;
        #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
        for (int64_t ch = 0; ch < C; ch++) {
            double acc = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t s = 0, base = (n * C + ch) * S; s < S; s++) {
                    const double v = kiln_get_f64(x, base + s) - mean[ch];
                    acc += v * v;
                }
            sq[ch] = acc;
        }
        if ((st = d->host->allreduce_f64(d, sq, C))) return st;
    }
    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const double bm = mean[ch], bv = count > 0 ? sq[ch] / count : 0;
        if (has_out(c, 1)) kiln_set_f64(c->out[1], ch, kiln_get_f64(mean_in, ch) * momentum + bm * (1 - momentum));
        if (has_out(c, 2)) kiln_set_f64(c->out[2], ch, kiln_get_f64(var_in, ch) * momentum + bv * (1 - momentum));
        if (has_out(c, 3)) {
            kiln_set_f64(c->out[3], ch, bm);
            kiln_set_f64(c->out[3], C + ch, bv);
        }
        const double a = kiln_get_f64(scale, ch) / sqrt(bv + eps);
        apply_channel(c, x, y_out(c), N, C, S, ch, a, kiln_get_f64(bias, ch) - bm * a);
    }
    return KILN_OK;
}

static kiln_status forward_grad_sync(kiln_op_ctx *c) {
    kiln_dist *d = kiln_dist_of(c, "sync_comm");
    if (!d) return KILN_ERR_INVALID_ARGUMENT;
    const kiln_tensor *dy = c->in[0], *x = c->in[1], *scale = c->in[2]; // (N,C,S) both, (C)
    kiln_tensor *dx = c->out[0];
    const bool mx = fused_relu(c) && mask_from_x(c);              /* relu = 1, input 6 S: the mask from X */
    const kiln_tensor *yr = fused_relu(c) && !mx ? c->in[6] : NULL; /* relu = 1: dY masked by Y > 0 */
    const kiln_tensor *dy2 = c->n_in > 7 ? c->in[7] : NULL;   /* a second gradient term */
    kiln_tensor *gout = has_out(c, 5) ? c->out[5] : NULL;     /* the gradient read */
#define GV(i) grad_in(dy, dy2, yr, mx ? &mk : NULL, i)
    const double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int k = 2; k < x->ndim; k++) S *= x->dims[k];
    double *mean = c->workspace, *red = mean + C + 1, *loc = red + 3 * C, M = 0; // (C+1), (3C): sq, dy, dy*xc; (2C)
    kiln_status st = global_mean(c, d, x, mean, &M);
    if (st) return st;
    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const bn_xmask mk = mx ? xmask_of(c, ch) : (bn_xmask){0};
        double sq = 0, sdy = 0, sdyxc = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0, base = (n * C + ch) * S; s < S; s++) {
                const double xc = kiln_get_f64(x, base + s) - mean[ch], g = GV(base + s);
                sq += xc * xc;
                sdy += g;
                sdyxc += g * xc;
            }
        red[ch] = sq;
        red[C + ch] = loc[ch] = sdy;
        red[2 * C + ch] = loc[C + ch] = sdyxc;
    }
    if ((st = d->host->allreduce_f64(d, red, 3 * C))) return st;
    #pragma omp parallel for if (N * C * S > (1 << 15)) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const bn_xmask mk = mx ? xmask_of(c, ch) : (bn_xmask){0};
        const double var = M > 0 ? red[ch] / M : 0, istd = 1.0 / sqrt(var + eps), sc = kiln_get_f64(scale, ch);
        /* dX from the sums over every rank (one process's whole batch), per element
         * a * dY + b * x + k; dScale and dB this rank's */
        const double a = sc * istd, b = M > 0 ? -a * istd * red[2 * C + ch] * istd / M : 0;
        const double k = M > 0 ? -a * red[C + ch] / M - b * mean[ch] : 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0, base = (n * C + ch) * S; s < S; s++) {
                if (gout) kiln_set_f64(gout, base + s, GV(base + s));
                kiln_set_f64(dx, base + s, a * GV(base + s) + b * kiln_get_f64(x, base + s) + k);
            }
        if (has_out(c, 1)) kiln_set_f64(c->out[1], ch, loc[C + ch] * istd);
        if (has_out(c, 2)) kiln_set_f64(c->out[2], ch, loc[ch]);
        if (has_out(c, 3)) kiln_set_f64(c->out[3], ch, 0.0);
        if (has_out(c, 4)) kiln_set_f64(c->out[4], ch, 0.0);
    }
#undef GV
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* (2,2,2,2) input and per-channel parameters shared by the cases; expected values from
 * numpy in float64 (x - m) / sqrt(v + eps) * s + b, batch statistics via mean/var. */
static void make_inputs(kiln_dtype dt, kiln_tensor **in) {
    in[0] = kt_make(dt, 4, KT_DIMS(2, 2, 2, 2),
                    KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, -1, 0, 1, 2, 3, 3, 3, 3));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1.5, -0.5));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0.25, 2));
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3, 1));
    in[4] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(4, 0.5));
}

static kiln_tensor **bn_rand(int ndim, const int64_t *dims, uint64_t seed);
static kiln_tensor **bn_rand32(int ndim, const int64_t *dims, uint64_t seed);
static kiln_tensor **bn_grad_rand(int ndim, const int64_t *dims, uint64_t seed);

static void free_all(kiln_tensor **t, int n) {
    for (int i = 0; i < n; i++) kiln_tensor_free(t[i]);
}

/* relu = 1 with Z against Relu(Add(BatchNormalization(X, ...), Z)) in dtype dt, within
 * rtol of the output's max (the fused sum is rounded once, the composition twice); and the
 * case can fail (Z changes the output, the ReLU zeroes some). */
static int fused_add_case(kiln_dtype dt, int ndim, const int64_t *dims, uint64_t seed, double rtol, const char *label) {
    kiln_tensor **p = bn_rand32(ndim, dims, seed), *in[6];
    for (int i = 1; i < 5; i++) in[i] = p[i];
    kiln_tensor_free(p[0]);
    in[0] = kt_rand(dt, ndim, dims, -2, 3, seed * 10 + 8);
    in[5] = kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 7);
    kiln_tensor *bn = NULL, *sum = NULL, *want = NULL, *got = NULL, *plain = NULL;
    bool ok = kiln_optest_eval("", "BatchNormalization", "training_mode=1", 15, 5, in, 1, &bn, label) &&
              kiln_optest_eval("", "Add", "", 14, 2, (kiln_tensor *[]){bn, in[5]}, 1, &sum, label) &&
              kiln_optest_eval("", "Relu", "", 14, 1, &sum, 1, &want, label) &&
              kiln_optest_eval("", "Relu", "", 14, 1, &bn, 1, &plain, label) &&
              kiln_optest_eval("", "BatchNormalization", "training_mode=1;relu=1", 15, 6, in, 1, &got, label);
    int fails = !ok;
    if (ok) {
        double mx = 0, moved = 0;
        int64_t zero = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(want); i++) {
            mx = fmax(mx, fabs(kiln_get_f64(want, i)));
            moved = fmax(moved, fabs(kiln_get_f64(want, i) - kiln_get_f64(plain, i)));
            zero += kiln_get_f64(want, i) == 0;
        }
        fails += kiln_tensor_compare(got, want, rtol * mx, 0, label) || zero == 0 || moved < 0.1;
    }
    printf("%s %s\n", fails ? "FAIL" : "ok  ", label);
    free_all(in, 6);
    free_all((kiln_tensor *[]){bn, sum, want, got, plain}, 5);
    return fails != 0;
}

/* relu = 1 against the composition it stands for, on the CPU, in dtype dt:
 * Relu(BatchNormalization(X, ...)) and BatchNormGrad(UnaryGrad(dY, -, Y) op=Relu, X, ...),
 * bit for bit; and the case can fail (the ReLU zeroes some outputs and passes others). */
static int fused_relu_case(kiln_dtype dt, int ndim, const int64_t *dims, uint64_t seed, const char *label) {
    kiln_tensor **p = bn_rand32(ndim, dims, seed), *in[7];
    for (int i = 0; i < 5; i++) in[1 + i] = p[i];
    in[0] = kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 9);
    kiln_tensor *x = kt_rand(dt, ndim, dims, -2, 3, seed * 10 + 8);
    kiln_tensor_free(in[1]);
    in[1] = x;
    kiln_tensor *bn = NULL, *want = NULL, *got = NULL, *dym = NULL, *gw[3] = {0}, *gg[3] = {0};
    const char *attrs = "training_mode=1;epsilon=0.001";
    bool ok = kiln_optest_eval("", "BatchNormalization", attrs, 15, 5, &in[1], 1, &bn, label) &&
              kiln_optest_eval("", "Relu", "", 14, 1, &bn, 1, &want, label) &&
              kiln_optest_eval("", "BatchNormalization", "training_mode=1;epsilon=0.001;relu=1", 15, 5, &in[1], 1, &got,
                               label);
    int fails = !ok;
    if (ok) {
        int64_t pos = 0, zero = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(bn); i++) {
            pos += kiln_get_f64(bn, i) > 0;
            zero += kiln_get_f64(want, i) == 0;
        }
        fails += kiln_tensor_same_bits(got, want, label) || pos == 0 || zero == 0;
        in[6] = want; /* the gradient: Y the ReLU's output */
        ok = kiln_optest_eval("kiln", "UnaryGrad", "op=Relu", 1, 3, (kiln_tensor *[]){in[0], NULL, want}, 1, &dym,
                              label) &&
             kiln_optest_eval("kiln", "BatchNormGrad", attrs, 15, 6, (kiln_tensor *[]){dym, in[1], in[2], in[3], in[4], in[5]},
                              3, gw, label) &&
             kiln_optest_eval("kiln", "BatchNormGrad", "training_mode=1;epsilon=0.001;relu=1", 15, 7, in, 3, gg, label);
        fails += !ok;
        for (int k = 0; k < 3 && ok; k++) fails += kiln_tensor_same_bits(gg[k], gw[k], label);
    }
    printf("%s %s\n", fails ? "FAIL" : "ok  ", label);
    free_all(in, 6);
    free_all((kiln_tensor *[]){bn, want, got, dym, gw[0], gw[1], gw[2], gg[0], gg[1], gg[2]}, 10);
    return fails != 0;
}

/* kiln.BatchNormGrad with input 7 (a second gradient term) and output 5 (the gradient it
 * reads) against the composition it stands for: Sum(dY, dY2), masked by UnaryGrad op=Relu
 * under relu, then BatchNormGrad; dX, dScale, dB and output 5 within tol (the fused sum is
 * rounded once). The case can fail: dY2 moves the sum, the mask zeroes some elements and
 * passes others. */
static int residual_grad_case(kiln_dtype dt, int ndim, const int64_t *dims, uint64_t seed, bool relu, double tol,
                              const char *label) {
    kiln_tensor **g = bn_grad_rand(ndim, dims, seed), *in[8];
    for (int k = 0; k < 6; k++) in[k] = g[k];
    kiln_tensor_free(in[0]);
    kiln_tensor_free(in[1]);
    in[0] = kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 5);
    in[1] = kt_rand(dt, ndim, dims, -2, 3, seed * 10 + 6);
    in[6] = relu ? kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 7) : NULL;
    in[7] = kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 8);
    const char *attrs = relu ? "training_mode=1;epsilon=0.001;relu=1" : "training_mode=1;epsilon=0.001";
    kiln_tensor *sum = NULL, *masked = NULL, *want[3] = {0};
    bool ok = kiln_optest_eval("", "Sum", "", 13, 2, (kiln_tensor *[]){in[0], in[7]}, 1, &sum, label) &&
              (!relu || kiln_optest_eval("kiln", "UnaryGrad", "op=Relu", 1, 3, (kiln_tensor *[]){sum, NULL, in[6]}, 1,
                                         &masked, label)) &&
              kiln_optest_eval("kiln", "BatchNormGrad", "training_mode=1;epsilon=0.001", 15, 6,
                               (kiln_tensor *[]){relu ? masked : sum, in[1], in[2], in[3], in[4], in[5]}, 3, want, label);
    int fails = !ok;
    if (ok) {
        int64_t zero = 0, moved = 0;
        const kiln_tensor *gm = relu ? masked : sum;
        for (int64_t i = 0; i < kiln_tensor_numel(gm); i++) {
            zero += kiln_get_f64(gm, i) == 0;
            moved += kiln_get_f64(sum, i) != kiln_get_f64(in[0], i);
        }
        fails += (relu && zero == 0) || zero == kiln_tensor_numel(gm) || moved == 0;
        if (fails) printf("FAIL %s: the case cannot fail (zeroed %lld, moved %lld)\n", label, (long long)zero, (long long)moved);
    }
    if (fails) {
        free_all(in, 8);
        free_all((kiln_tensor *[]){sum, masked, want[0], want[1], want[2]}, 5);
        return 1;
    }
    /* the whole node as one case (of the GPU sweep too); output 5 against the masked sum */
    kiln_tensor *expect[6] = {want[0], want[1], want[2], NULL, NULL, relu ? masked : sum};
    kiln_tensor_free(relu ? sum : masked);
    return kiln_optest_opset("BatchNormGrad", attrs, 15, 8, in, 6, expect, tol, tol, label);
}

/* relu_mask_from_x = 1 against relu = 1 with Y on the same data, in dtype dt: the forward
 * BatchNormalization relu = 1 writes Y and S (output 3; Y the same bits as without S), then
 * kiln.BatchNormGrad relu = 1 reading Y and relu = 1;relu_mask_from_x = 1 reading S give
 * dX, dScale, dB bit for bit; and the case can fail (the mask zeroes some of dY and passes
 * some). */
static int xmask_case(kiln_dtype dt, int ndim, const int64_t *dims, uint64_t seed, const char *label) {
    kiln_tensor **p = bn_rand32(ndim, dims, seed), *in[7];
    for (int i = 0; i < 5; i++) in[1 + i] = p[i];
    kiln_tensor_free(in[1]);
    in[1] = kt_rand(dt, ndim, dims, -2, 3, seed * 10 + 8);
    in[0] = kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 9);
    in[6] = NULL;
    const char *fwd = "training_mode=1;epsilon=0.001;relu=1";
    kiln_tensor *fo[4] = {0}, *y0 = NULL, *gy[3] = {0}, *gs[3] = {0};
    bool ok = kiln_optest_eval("", "BatchNormalization", fwd, 15, 5, &in[1], 4, fo, label) &&
              kiln_optest_eval("", "BatchNormalization", fwd, 15, 5, &in[1], 1, &y0, label);
    int fails = !ok;
    if (ok) {
        int64_t pos = 0, zero = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(fo[0]); i++) {
            pos += kiln_get_f64(fo[0], i) > 0;
            zero += kiln_get_f64(fo[0], i) == 0;
        }
        fails += kiln_tensor_same_bits(fo[0], y0, label) || pos == 0 || zero == 0;
        fails += fo[3]->dtype != KILN_F64 || fo[3]->ndim != 2 || fo[3]->dims[0] != 2 || fo[3]->dims[1] != dims[1];
        in[6] = fo[0];
        ok = kiln_optest_eval("kiln", "BatchNormGrad", fwd, 15, 7, in, 3, gy, label);
        in[6] = fo[3];
        ok = ok && kiln_optest_eval("kiln", "BatchNormGrad", "training_mode=1;epsilon=0.001;relu=1;relu_mask_from_x=1",
                                    15, 7, in, 3, gs, label);
        in[6] = NULL;
        fails += !ok;
        for (int k = 0; k < 3 && ok; k++) fails += kiln_tensor_same_bits(gs[k], gy[k], label);
    }
    printf("%s %s\n", fails ? "FAIL" : "ok  ", label);
    free_all(in, 6);
    free_all((kiln_tensor *[]){fo[0], fo[1], fo[2], fo[3], y0, gy[0], gy[1], gy[2], gs[0], gs[1], gs[2]}, 11);
    return fails != 0;
}

/* The mask rounds as the forward's Y (f16 X): channel 0 with mean 0, var + epsilon = 1,
 * scale 1, B = 1e-8, so x * a + b = x + 1e-8: for x = 0 that is > 0 but f16(1e-8) = 0 (Y is 0
 * there), for x = 1, 2 positive, for x = -1 negative. The mask is (0, 1, 0, 1): dX, dScale
 * and dB are BatchNormGrad's on dY * (0, 1, 0, 1), bit for bit, and not those on dY * (1, 1,
 * 0, 1) (the unrounded mask's; the case can fail). */
static int xmask_rounding_case(void) {
    const char *label = "bn grad relu_mask_from_x f16: the mask is f16(x * a + b) > 0";
    const double eps = 1e-5f;
    kiln_tensor *in[7], *got[3] = {0}, *want[3] = {0}, *wrong[3] = {0};
    bool ok = true;
    for (int v = 0; v < 3 && ok; v++) {
        static const double dys[3][4] = {{1, 2, 3, 4}, {0, 2, 0, 4}, {1, 2, 0, 4}};
        in[0] = kt_make(KILN_F16, 2, KT_DIMS(4, 1), dys[v]);
        in[1] = kt_make(KILN_F16, 2, KT_DIMS(4, 1), KT_VALS(0, 1, -1, 2));
        in[2] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(1));
        in[3] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(1e-8));
        in[4] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(0));
        in[5] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(1));
        in[6] = v == 0 ? kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(0, 1 - eps)) : NULL;
        ok = kiln_optest_eval("kiln", "BatchNormGrad", v == 0 ? "training_mode=1;relu=1;relu_mask_from_x=1" : "training_mode=1",
                              15, v == 0 ? 7 : 6, in, 3, v == 0 ? got : v == 1 ? want : wrong, label);
        free_all(in, v == 0 ? 7 : 6);
    }
    int fails = !ok;
    for (int k = 0; k < 3 && ok; k++) fails += kiln_tensor_same_bits(got[k], want[k], label);
    if (ok && kiln_get_f64(got[0], 0) == kiln_get_f64(wrong[0], 0) && kiln_get_f64(got[2], 0) == kiln_get_f64(wrong[2], 0)) {
        printf("FAIL %s: the unrounded mask gives the same result (the case cannot fail)\n", label);
        fails++;
    }
    printf("%s %s\n", fails ? "FAIL" : "ok  ", label);
    free_all((kiln_tensor *[]){got[0], got[1], got[2], want[0], want[1], want[2], wrong[0], wrong[1], wrong[2]}, 9);
    return fails != 0;
}

/* relu_mask_from_x = 1 by finite differences (f64, central, step 1e-6): with S from the
 * forward (relu = 1, output 3), dX, dScale and dB of the gradient node fed dY = R are the
 * derivatives of sum(R * Relu(BatchNormalization(X, scale, B))) (training mode) within
 * 1e-6 + 1e-5 |n|; no element of the case within 1e-3 of the ReLU's kink. */
static int xmask_fd_case(const char *label) {
    const int64_t dims[4] = {2, 3, 2, 2}, C = 3;
    const char *fwd = "training_mode=1;relu=1";
    kiln_tensor **p = bn_rand(4, dims, 21), *in[5], *r = kt_rand(KILN_F64, 4, dims, -1, 1, 2190);
    for (int i = 0; i < 5; i++) in[i] = p[i];
    kiln_tensor *fo[4] = {0}, *g[3] = {0}, *yt = NULL;
    bool ok = r && kiln_optest_eval("", "BatchNormalization", fwd, 15, 5, in, 4, fo, label);
    double margin = INFINITY;
    for (int64_t i = 0; ok && i < kiln_tensor_numel(fo[0]); i++) { /* y before the ReLU: from S */
        const int64_t ch = (i / 4) % C;
        const double a = kiln_get_f64(in[1], ch) / sqrt(kiln_get_f64(fo[3], C + ch) + (double)1e-5f);
        margin = fmin(margin, fabs(kiln_get_f64(in[0], i) * a + kiln_get_f64(in[2], ch) - kiln_get_f64(fo[3], ch) * a));
    }
    if (ok)
        ok = kiln_optest_eval("kiln", "BatchNormGrad", "training_mode=1;relu=1;relu_mask_from_x=1", 15, 7,
                              (kiln_tensor *[]){r, in[0], in[1], in[2], in[3], in[4], fo[3]}, 3, g, label);
    int fails = !ok || margin < 1e-3;
    double worst = 0;
    for (int w = 0; w < 3 && ok; w++) { /* X, scale, B */
        kiln_tensor *t = in[w];
        for (int64_t i = 0; i < kiln_tensor_numel(t) && ok; i++) {
            const double v = kiln_get_f64(t, i);
            double l[2] = {0, 0};
            for (int sgn = 0; sgn < 2 && ok; sgn++) {
                kiln_set_f64(t, i, v + (sgn ? -1e-6 : 1e-6));
                ok = kiln_optest_eval("", "BatchNormalization", fwd, 15, 5, in, 1, &yt, label);
                for (int64_t j = 0; ok && j < kiln_tensor_numel(yt); j++) l[sgn] += kiln_get_f64(yt, j) * kiln_get_f64(r, j);
                kiln_tensor_free(yt);
                yt = NULL;
            }
            kiln_set_f64(t, i, v);
            const double n = (l[0] - l[1]) / 2e-6, a = kiln_get_f64(g[w], i), err = fabs(a - n) / (1e-6 + 1e-5 * fabs(n));
            worst = fmax(worst, err);
            if (err > 1) {
                printf("FAIL %s: d/d(input %d)[%lld] = %.9g, finite differences %.9g\n", label, w, (long long)i, a, n);
                fails++;
            }
        }
    }
    printf("%s %s (margin %.3g, %.0f%% of the error budget)\n", fails ? "FAIL" : "ok  ", label, margin, 100 * worst);
    free_all(in, 5);
    free_all((kiln_tensor *[]){r, fo[0], fo[1], fo[2], fo[3], g[0], g[1], g[2]}, 8);
    return fails != 0;
}

/* kiln.BatchNormGrad relu = 1;relu_mask_from_x = 1 inputs for the backend sweep: dY, X,
 * scale (|scale| in [0.5, 1.5)), B, mean, var and S (f64: mean in [-1, 1), var in
 * [0.5, 1.5)), X moved away from the mask's edge (|x * a + b| >= 0.1 with the inputs'
 * values, so that the backends' roundings of it, f16/bf16 inputs included, agree on the
 * mask). */
static double xmask_margin; /* xmask_grad_rand's smallest |x * a + b| */
static kiln_tensor **xmask_grad_rand(int ndim, const int64_t *dims, uint64_t seed) {
    static kiln_tensor *in[7];
    kiln_tensor **g = bn_grad_rand(ndim, dims, seed);
    for (int i = 0; i < 6; i++) in[i] = g[i];
    const int64_t C = dims[1];
    int64_t S = 1;
    for (int d = 2; d < ndim; d++) S *= dims[d];
    in[6] = kt_rand(KILN_F64, 2, KT_DIMS(2, C), 0, 1, seed * 10 + 7);
    for (int64_t ch = 0; ch < C; ch++) {
        const double sc = kiln_get_f64(in[2], ch);
        kiln_set_f64(in[2], ch, sc < 0 ? sc - 0.5 : sc + 0.5);
        kiln_set_f64(in[6], ch, 2 * kiln_get_f64(in[6], ch) - 1);
        kiln_set_f64(in[6], C + ch, 0.5 + kiln_get_f64(in[6], C + ch));
    }
    for (int64_t i = 0; i < kiln_tensor_numel(in[1]); i++) {
        const int64_t ch = (i / S) % C;
        const double a = kiln_get_f64(in[2], ch) / sqrt(kiln_get_f64(in[6], C + ch) + (double)1e-5f);
        const double b = kiln_get_f64(in[3], ch) - kiln_get_f64(in[6], ch) * a, x = kiln_get_f64(in[1], i);
        const double y = x * a + b;
        if (fabs(y) < 0.1) kiln_set_f64(in[1], i, x + (y < 0 ? -0.2 : 0.2) / a);
    }
    /* the margin left with every input rounded as the sweep rounds it (f32, f16, bf16) */
    xmask_margin = INFINITY;
    static const kiln_dtype dts[3] = {KILN_F32, KILN_F16, KILN_BF16};
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < kiln_tensor_numel(in[1]); i++) {
            const int64_t ch = (i / S) % C;
#define RV(k, j) kiln_bn_round_as(dts[t], kiln_get_f64(in[k], j))
            const double a = RV(2, ch) / sqrt(RV(6, C + ch) + (double)1e-5f);
            xmask_margin = fmin(xmask_margin, fabs(RV(1, i) * a + RV(3, ch) - RV(6, ch) * a));
#undef RV
        }
    return in;
}

/* A training BatchNormalization given X's sums (inputs 6, 7) against the same node without
 * them (its own statistics pass): Y and the running statistics within tol of the outputs'
 * max; with Z (relu = 1) when resid. The case can fail: given wrong sums (the sum 1.5 times
 * too large) the outputs move by more than tol. */
static int sums_case(kiln_dtype dt, int ndim, const int64_t *dims, uint64_t seed, const char *attrs, bool resid,
                     double tol, const char *label) {
    kiln_tensor **p = bn_rand32(ndim, dims, seed), *in[8] = {0};
    for (int i = 1; i < 5; i++) in[i] = p[i];
    kiln_tensor_free(p[0]);
    in[0] = kt_rand(dt, ndim, dims, -2, 3, seed * 10 + 8);
    in[5] = resid ? kt_rand(dt, ndim, dims, -1, 1, seed * 10 + 7) : NULL;
    kiln_tensor *want[3] = {0}, *bad[3] = {0}, *wrong[2] = {0};
    bool ok = kiln_optest_eval("", "BatchNormalization", attrs, 15, resid ? 6 : 5, in, 3, want, label);
    kt_channel_sums(in[0], 1.5, &wrong[0], &wrong[1]);
    in[6] = wrong[0];
    in[7] = wrong[1];
    ok = ok && kiln_optest_eval("", "BatchNormalization", attrs, 15, 8, in, 3, bad, label);
    int fails = !ok;
    if (ok) {
        double mx = 0, moved = 0;
        for (int64_t i = 0; i < kiln_tensor_numel(want[0]); i++) {
            mx = fmax(mx, fabs(kiln_get_f64(want[0], i)));
            moved = fmax(moved, fabs(kiln_get_f64(want[0], i) - kiln_get_f64(bad[0], i)));
        }
        if (moved <= 10 * tol * mx) {
            printf("FAIL %s: wrong sums move Y by %g only (the case cannot fail)\n", label, moved);
            fails++;
        }
    }
    free_all(wrong, 2);
    free_all(bad, 3);
    if (fails) {
        free_all(in, 6);
        free_all(want, 3);
        return 1;
    }
    double mx = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(want[0]); i++) mx = fmax(mx, fabs(kiln_get_f64(want[0], i)));
    kt_channel_sums(in[0], 1.0, &in[6], &in[7]);
    return kiln_optest_opset("BatchNormalization", attrs, 15, 8, in, 3, want, tol * mx, tol, label);
}

/* A sweep case (tests/gpu/test_backend_ops.c) of a training BatchNormalization given X's
 * sums: f32 X, the sums of its values (the GPU's f16 / bf16 runs read the rounded X against
 * sums of the f32 one: within their tolerances). */
static int sums_sweep(int ndim, const int64_t *dims, uint64_t seed, const char *attrs, bool resid, const char *label) {
    kiln_tensor **p = bn_rand32(ndim, dims, seed), *in[8];
    for (int i = 0; i < 5; i++) in[i] = p[i];
    in[5] = resid ? kt_rand(KILN_F32, ndim, dims, -1, 1, seed * 10 + 7) : NULL;
    kt_channel_sums(in[0], 1.0, &in[6], &in[7]);
    return kiln_optest_sweep("BatchNormalization", attrs, 15, 8, in, 3, label);
}

static int test_sums(void) {
    int fails = 0;
    /* the statistics from the convolution (inputs 6, 7) against the node's own */
    fails += sums_case(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), 7700, "training_mode=1;momentum=0.8", false, 1e-5,
                       "bn training with X's sums f32 = without");
    fails += sums_case(KILN_F64, 4, KT_DIMS(3, 4, 5, 2), 7710, "training_mode=1", false, 1e-6,
                       "bn training with X's sums f64 = without");
    fails += sums_case(KILN_F16, 4, KT_DIMS(3, 8, 3, 5), 7720, "training_mode=1", false, 2e-3,
                       "bn training with X's sums f16 = without");
    fails += sums_case(KILN_F32, 2, KT_DIMS(9, 4), 7730, "training_mode=1;epsilon=0.001", false, 1e-5,
                       "bn training with X's sums (N, C) = without");
    fails += sums_case(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), 7740, "training_mode=1;relu=1", false, 1e-5,
                       "bn training relu=1 with X's sums = without");
    fails += sums_case(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), 7750, "training_mode=1;relu=1", true, 1e-5,
                       "bn training relu=1 + Z with X's sums = without");
    /* the GPU sweep: NHWC vector kernels (C a multiple of 8), the scalar ones */
    fails += sums_sweep(4, KT_DIMS(8, 64, 20, 20), 7760, "training_mode=1", false,
                        "batchnorm training with X's sums random 8x64x20x20");
    fails += sums_sweep(4, KT_DIMS(3, 24, 13, 11), 7761, "training_mode=1;relu=1;momentum=0.8", false,
                        "batchnorm relu=1 training with X's sums random 3x24x13x11");
    fails += sums_sweep(4, KT_DIMS(8, 64, 20, 20), 7762, "training_mode=1;relu=1", true,
                        "batchnorm relu=1 + Z training with X's sums random 8x64x20x20");
    fails += sums_sweep(4, KT_DIMS(2, 5, 7, 9), 7763, "training_mode=1", false,
                        "batchnorm training with X's sums random 2x5x7x9 (scalar kernels)");
    /* rejected: one sum alone, the sums without training mode, sums of the wrong length or dtype */
    static const struct {
        int which; /* 0: input 6 only; 1: no training_mode; 2: wrong length; 3: f64 and f32; 4: i64 */
        kiln_status want;
        const char *label;
    } bad[] = {{0, KILN_ERR_INVALID_ARGUMENT, "bn sum without the sum of squares rejected"},
               {1, KILN_ERR_INVALID_ARGUMENT, "bn X's sums without training_mode rejected"},
               {2, KILN_ERR_SHAPE, "bn X's sums of the wrong length rejected"},
               {3, KILN_ERR_SHAPE, "bn X's sums of two dtypes rejected"},
               {4, KILN_ERR_SHAPE, "bn X's sums i64 rejected"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_tensor **p = bn_rand32(4, KT_DIMS(2, 3, 2, 2), 7770 + i), *in[8];
        for (int k = 0; k < 5; k++) in[k] = p[k];
        in[5] = NULL;
        const int64_t C = bad[i].which == 2 ? 4 : 3;
        const kiln_dtype dt = bad[i].which == 3 ? KILN_F64 : bad[i].which == 4 ? KILN_I64 : KILN_F32;
        in[6] = kt_rand(dt, 1, &C, 0, 1, 7780 + i);
        in[7] = bad[i].which == 0 ? NULL : kt_rand(dt == KILN_F64 ? KILN_F32 : dt, 1, &C, 0, 1, 7790 + i);
        fails += kiln_optest_fails("BatchNormalization", bad[i].which == 1 ? "" : "training_mode=1", 8, in, 1,
                                   bad[i].want, bad[i].label);
    }
    return fails;
}

static int test(void) {
    int fails = test_sums();
    kiln_tensor *in[5], *out[5];

    make_inputs(KILN_F32, in);
    out[0] = kt_make(KILN_F32, 4, KT_DIMS(2, 2, 2, 2),
                     KT_VALS(-1.2499981250035157, -0.49999906250175785, 0.25, 0.9999990625017579,
                             -0.8283988408992, -1.5354985511239998, -2.2425982613487996,
                             -2.9496979715736, -2.7499962500070314, -1.999997187505273,
                             -1.2499981250035157, -0.49999906250175785, 0.5858005795504,
                             0.5858005795504, 0.5858005795504, 0.5858005795504));
    fails += kiln_optest("BatchNormalization", "", 5, in, 1, out, 1e-6, 1e-6, "bn inference f32");

    make_inputs(KILN_F16, in);
    out[0] = kt_make(KILN_F16, 4, KT_DIMS(2, 2, 2, 2),
                     KT_VALS(-1.2499981250035157, -0.49999906250175785, 0.25, 0.9999990625017579,
                             -0.8283988408992, -1.5354985511239998, -2.2425982613487996,
                             -2.9496979715736, -2.7499962500070314, -1.999997187505273,
                             -1.2499981250035157, -0.49999906250175785, 0.5858005795504,
                             0.5858005795504, 0.5858005795504, 0.5858005795504));
    fails += kiln_optest("BatchNormalization", "", 5, in, 1, out, 2e-3, 2e-3,
                         "bn inference f16 with f32 params");

    /* batch mean (1.5, 4.75), batch var (2.25, 3.6875) */
    make_inputs(KILN_F32, in);
    out[0] = kt_make(KILN_F32, 4, KT_DIMS(2, 2, 2, 2),
                     KT_VALS(-0.24999888889259259, 0.7499988888925926, 1.7499966666777778,
                             2.7499944444629625, 1.934905632773077, 1.674528163865385,
                             1.414150694957693, 1.153773226050001, -2.2499944444629625,
                             -1.2499966666777778, -0.24999888889259259, 0.7499988888925926,
                             2.455660570588461, 2.455660570588461, 2.455660570588461,
                             2.455660570588461));
    out[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2.25, 2.875));
    out[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3.125, 2.09375));
    fails += kiln_optest("BatchNormalization", "training_mode=1;momentum=0.5", 5, in, 3, out,
                         1e-6, 1e-6, "bn training f32");
    /* kiln's output 3, S: the batch statistics the forward used (mean; population var) */
    make_inputs(KILN_F32, in);
    out[0] = out[1] = out[2] = NULL;
    out[3] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1.5, 4.75, 2.25, 3.6875));
    fails += kiln_optest("BatchNormalization", "training_mode=1;relu=1", 5, in, 4, out, 1e-12, 1e-12,
                         "bn training relu=1 output 3 (S, saved statistics)");
    make_inputs(KILN_F32, in);
    fails += kiln_optest_fails("BatchNormalization", "relu=1", 5, in, 4, KILN_ERR_UNSUPPORTED,
                               "bn output 3 (S) without training_mode rejected");
    /* kiln's output 4, P: the apply's a = scale / sqrt(var + eps) and k = B - mean * a from S
     * above (f32) */
    make_inputs(KILN_F32, in);
    out[0] = out[1] = out[2] = out[3] = NULL;
    out[4] = kt_make(KILN_F32, 2, KT_DIMS(2, 2),
                     KT_VALS(0.9999977777851852, -0.260377468907692, -1.2499966666777778, 3.236792977311537));
    fails += kiln_optest("BatchNormalization", "training_mode=1;relu=1", 5, in, 5, out, 1e-6, 1e-6,
                         "bn training output 4 (P, the apply's coefficients)");
    /* write_y = 0: Y not written (an empty output), P and S as before */
    make_inputs(KILN_F32, in);
    out[0] = out[1] = out[2] = NULL;
    out[3] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1.5, 4.75, 2.25, 3.6875));
    out[4] = kt_make(KILN_F32, 2, KT_DIMS(2, 2),
                     KT_VALS(0.9999977777851852, -0.260377468907692, -1.2499966666777778, 3.236792977311537));
    fails += kiln_optest("BatchNormalization", "training_mode=1;relu=1;write_y=0", 5, in, 5, out, 1e-6, 1e-6,
                         "bn training write_y=0: S and P, no Y");
    make_inputs(KILN_F32, in);
    fails += kiln_optest_fails("BatchNormalization", "training_mode=1;write_y=0", 5, in, 3, KILN_ERR_INVALID_ARGUMENT,
                               "bn write_y=0 without output 4 (P) rejected");
    make_inputs(KILN_F32, in);
    fails += kiln_optest_fails("BatchNormalization", "", 5, in, 5, KILN_ERR_UNSUPPORTED,
                               "bn output 4 (P) without training_mode rejected");

    make_inputs(KILN_F64, in);
    out[0] = NULL;
    out[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2.85, 1.375));
    out[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3.825, 0.8187499999999999));
    fails += kiln_optest("BatchNormalization", "training_mode=1", 5, in, 3, out, 1e-6, 1e-6,
                         "bn training running stats, default momentum");

    /* rank 2 (N,C): no spatial dims */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(3, 2), KT_VALS(1, 2, 3, 4, 5, 0));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1.5, -0.5));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.25, 2));
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(3, 1));
    in[4] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(4, 0.5));
    out[0] = kt_make(KILN_F64, 2, KT_DIMS(3, 2),
                     KT_VALS(-1.2498125351489273, 1.2935992666991463, 0.25, -0.11920219990256165,
                             1.7498125351489273, 2.7064007333008537));
    /* epsilon is a float attribute: 1e-3 arrives as 1e-3f, hence 1e-8 rather than 1e-14 */
    fails += kiln_optest_opset("BatchNormalization", "epsilon=1e-3", 9, 5, in, 1, out, 1e-8,
                               1e-8, "bn rank 2 opset 9");

    make_inputs(KILN_F32, in);
    kiln_tensor_free(in[4]);
    in[4] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("BatchNormalization", "", 5, in, 1, KILN_ERR_SHAPE,
                               "bn var of the wrong length");
    make_inputs(KILN_F32, in);
    fails += kiln_optest_fails("BatchNormalization", "", 5, in, 3, KILN_ERR_UNSUPPORTED,
                               "bn running outputs without training_mode");

    /* gradients in training mode (batch statistics; input_mean/var get exact zeros) */
    fails += kiln_gradcheck("BatchNormalization", "training_mode=1", 15, 5, bn_rand(4, KT_DIMS(2, 3, 2, 2), 1), NULL,
                            "bn grad training (N,C,H,W)");
    fails += kiln_gradcheck("BatchNormalization", "training_mode=1;epsilon=0.01;momentum=0.7", 14, 5,
                            bn_rand(2, KT_DIMS(5, 3), 2), NULL, "bn grad training (N,C) opset 14");
    fails += kiln_gradcheck("BatchNormalization", "training_mode=1", 21, 5, bn_rand(3, KT_DIMS(3, 2, 4), 3), NULL,
                            "bn grad training (N,C,L)");
    /* inference mode: every input, the statistics included */
    fails += kiln_gradcheck("BatchNormalization", "", 15, 5, bn_rand(4, KT_DIMS(2, 3, 2, 2), 4), NULL,
                            "bn grad inference (N,C,H,W)");
    fails += kiln_gradcheck("BatchNormalization", "epsilon=0.1", 9, 5, bn_rand(2, KT_DIMS(4, 3), 5), NULL,
                            "bn grad inference opset 9");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("BatchNormalization", "epsilon=0.001", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 271),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), 0.5, 2, 272),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -1, 1, 273),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -1, 1, 274),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), 0.5, 2, 275)},
                               1, "batchnorm random inference 2x5x7x9");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("BatchNormalization", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1280),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), -2, 2, 1281),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), -2, 2, 1282),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), -2, 2, 1283),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), 0.5, 2, 1284)},
                               1, "batchnormalization 4-D");
    fails += kiln_optest_sweep("BatchNormalization", "epsilon=0.001", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1285),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 1286),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 1287),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 1288),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), 0.5, 2, 1289)},
                               1, "batchnormalization 2-D");
    fails += kiln_optest_sweep("BatchNormalization", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 4, 5), -2, 2, 5044),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 5045),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 5046),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 5047),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), 0.5, 2, 5048)},
                               1, "batchnormalization (NHWC) 4-D");
    /* training mode for the backend sweep: batch statistics and running statistics; a
     * channel's elements over several statistics blocks (4*48*48 = 9216 per channel), the
     * rows layout of (N, C), and Y alone (its gradient graph sweeps kiln.BatchNormGrad in
     * training mode; the running statistics have no gradient) */
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;momentum=0.8", 15, 5,
                               bn_rand32(4, KT_DIMS(3, 5, 7, 9), 7130), 3, "batchnorm training random 3x5x7x9");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;epsilon=0.001", 15, 5,
                               bn_rand32(4, KT_DIMS(4, 3, 48, 48), 7140), 3, "batchnorm training random 4x3x48x48");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1", 15, 5, bn_rand32(2, KT_DIMS(37, 40), 7150), 3,
                               "batchnorm training random (N, C) 37x40");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1", 15, 5, bn_rand32(4, KT_DIMS(2, 6, 5, 7), 7160),
                               1, "batchnorm training random Y only 2x6x5x7");
    /* channels a multiple of 8 (16-byte rows of f16/bf16, of 4 f32: the NHWC vector
     * kernels), rows not a multiple of the block's, several statistics blocks */
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;momentum=0.8", 15, 5,
                               bn_rand32(4, KT_DIMS(3, 24, 13, 11), 7210), 3, "batchnorm training random 3x24x13x11");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1", 15, 5, bn_rand32(4, KT_DIMS(8, 64, 20, 20), 7220),
                               1, "batchnorm training random 8x64x20x20");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1", 15, 5, bn_rand32(2, KT_DIMS(300, 48), 7230), 3,
                               "batchnorm training random (N, C) 300x48");
    /* relu = 1 (the fuse-bn pass): Relu(BatchNormalization) as one node; with Z,
     * Relu(BatchNormalization + Z) */
    fails += fused_add_case(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), 7400, 1e-6, "bn relu=1 + Z f32 = Relu(BN + Z)");
    fails += fused_add_case(KILN_F64, 2, KT_DIMS(9, 4), 7410, 1e-12, "bn relu=1 + Z f64 (N, C) = Relu(BN + Z)");
    fails += fused_add_case(KILN_F16, 4, KT_DIMS(3, 8, 3, 5), 7420, 2e-3, "bn relu=1 + Z f16 = Relu(BN + Z)");
    {
        kiln_tensor **p = bn_rand(4, KT_DIMS(2, 3, 2, 2), 12), *zin[6];
        for (int i = 0; i < 5; i++) zin[i] = p[i];
        zin[5] = kt_rand(KILN_F64, 4, KT_DIMS(2, 3, 2, 2), -1, 1, 7430);
        fails += kiln_gradcheck("BatchNormalization", "training_mode=1;relu=1", 15, 6, zin, NULL,
                                "bn relu=1 + Z grad training (N,C,H,W)");
    }
    static const struct {
        int ndim;
        int64_t dims[4];
        const char *label;
    } zshapes[] = {{4, {3, 24, 13, 11}, "batchnorm relu=1 + Z training random 3x24x13x11"},
                   {4, {8, 64, 20, 20}, "batchnorm relu=1 + Z training random 8x64x20x20"},
                   {4, {2, 5, 7, 9}, "batchnorm relu=1 + Z training random 2x5x7x9 (scalar kernels)"}};
    for (size_t i = 0; i < sizeof zshapes / sizeof zshapes[0]; i++) {
        kiln_tensor **p = bn_rand32(zshapes[i].ndim, zshapes[i].dims, 7440 + i), *zin[6];
        for (int k = 0; k < 5; k++) zin[k] = p[k];
        zin[5] = kt_rand(KILN_F32, zshapes[i].ndim, zshapes[i].dims, -1, 1, 7450 + i);
        fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;relu=1", 15, 6, zin, 3, zshapes[i].label);
    }
    {
        kiln_tensor **p = bn_rand32(4, KT_DIMS(2, 3, 2, 2), 7460), *zin[6];
        for (int k = 0; k < 5; k++) zin[k] = p[k];
        zin[5] = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 2, 2), -1, 1, 7461);
        fails += kiln_optest_fails("BatchNormalization", "training_mode=1", 6, zin, 1, KILN_ERR_INVALID_ARGUMENT,
                                   "bn Z without relu=1 rejected");
    }
    fails += fused_relu_case(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), 7240, "bn relu=1 f32 = Relu(BN), its gradient too");
    fails += fused_relu_case(KILN_F16, 4, KT_DIMS(3, 8, 3, 5), 7250, "bn relu=1 f16 = Relu(BN), its gradient too");
    fails += fused_relu_case(KILN_F64, 2, KT_DIMS(9, 4), 7260, "bn relu=1 f64 (N, C) = Relu(BN), its gradient too");
    fails += kiln_gradcheck("BatchNormalization", "training_mode=1;relu=1", 15, 5, bn_rand(4, KT_DIMS(2, 3, 2, 2), 11),
                            NULL, "bn relu=1 grad training (N,C,H,W)");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;relu=1;momentum=0.8", 15, 5,
                               bn_rand32(4, KT_DIMS(3, 24, 13, 11), 7270), 3, "batchnorm relu=1 training random 3x24x13x11");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;relu=1", 15, 5,
                               bn_rand32(4, KT_DIMS(8, 64, 20, 20), 7280), 1, "batchnorm relu=1 training random 8x64x20x20");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;relu=1", 15, 5, bn_rand32(4, KT_DIMS(2, 5, 7, 9), 7290),
                               1, "batchnorm relu=1 training random 2x5x7x9 (scalar kernels)");
    /* output 3 (S, the saved statistics the gradient's mask from X reads) */
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;relu=1", 15, 5,
                               bn_rand32(4, KT_DIMS(8, 64, 20, 20), 7291), 4, "batchnorm relu=1 training + S 8x64x20x20");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1", 15, 5, bn_rand32(4, KT_DIMS(2, 5, 7, 9), 7292), 4,
                               "batchnorm training + S 2x5x7x9 (scalar kernels)");
    fails += kiln_optest_sweep("BatchNormalization", "training_mode=1;relu=1", 15, 5, bn_rand32(2, KT_DIMS(300, 48), 7293),
                               4, "batchnorm relu=1 training + S (N, C) 300x48");
    make_inputs(KILN_F32, in);
    fails += kiln_optest_fails("BatchNormalization", "training_mode=1;relu=2", 5, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "bn relu=2 rejected");
    return fails;
}

/* X in [-2, 2), scale, B and mean in [-1, 1), var in [0.5, 1.5): f64, for gradchecks */
static kiln_tensor **bn_rand(int ndim, const int64_t *dims, uint64_t seed) {
    static kiln_tensor *in[5];
    in[0] = kt_rand(KILN_F64, ndim, dims, -2, 2, seed * 10);
    for (int i = 1; i < 5; i++)
        in[i] = kt_rand(KILN_F64, 1, &dims[1], i == 4 ? 0.5 : -1, i == 4 ? 1.5 : 1, seed * 10 + (uint64_t)i);
    return in;
}

/* X in [-2, 3) (a mean away from 0), scale, B and mean in [-1, 1), var in [0.5, 1.5): f32 */
static kiln_tensor **bn_rand32(int ndim, const int64_t *dims, uint64_t seed) {
    static kiln_tensor *in[5];
    in[0] = kt_rand(KILN_F32, ndim, dims, -2, 3, seed * 10);
    for (int i = 1; i < 5; i++)
        in[i] = kt_rand(KILN_F32, 1, &dims[1], i == 4 ? 0.5 : -1, i == 4 ? 1.5 : 1, seed * 10 + (uint64_t)i);
    return in;
}

/* dY, X and the four parameters of kiln.BatchNormGrad, f32 random */
static kiln_tensor **bn_grad_rand(int ndim, const int64_t *dims, uint64_t seed) {
    static kiln_tensor *in[6];
    in[0] = kt_rand(KILN_F32, ndim, dims, -1, 1, seed * 10 + 9);
    kiln_tensor **p = bn_rand32(ndim, dims, seed);
    for (int i = 0; i < 5; i++) in[1 + i] = p[i];
    return in;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[6], *out[5];
    /* training, (1,2,3): channel 0 x = (-1,-1,2): mean 0, var 2, eps 2 -> 1/std 0.5,
     * xhat = (-0.5,-0.5,1), scale 2, dY = (1,0,2): dB 3, dScale 1.5,
     * dX = (dY - 1 - 0.5 xhat) = (0.25,-0.75,0.5). Channel 1 is constant (xhat 0), scale -1,
     * dY = (1,2,3): dB 6, dScale 0, dX = -(dY - 2) / sqrt(0 + 2). */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(1, 0, 2, 1, 2, 3));
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(-1, -1, 2, 1, 1, 1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, -1));
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 1));
    in[4] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(7, 7));
    in[5] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(9, 9));
    out[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3),
                     KT_VALS(0.25, -0.75, 0.5, 0.7071067811865476, 0, -0.7071067811865476));
    out[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1.5, 0));
    out[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3, 6));
    out[3] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 0));
    out[4] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 0));
    fails += kiln_optest_opset("BatchNormGrad", "training_mode=1;epsilon=2.0", 15, 6, in, 5, out, 1e-6, 1e-6,
                               "bn grad training by hand");
    /* inference, (2,1): x = (1,3), mean 1, var 3, eps 1 -> 1/std 0.5, xhat (0,1), scale 2,
     * dY = (1,2): dX = dY, dB 3, dScale 2, dMean = -1 * 3, dVar = -0.5 * 2 * 0.25 * 2 */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(1, 2));
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(1, 3));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(2));
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(5));
    in[4] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(1));
    in[5] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(3));
    out[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(1, 2));
    out[1] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(2));
    out[2] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(3));
    out[3] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(-3));
    out[4] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(-0.5));
    fails += kiln_optest("BatchNormGrad", "epsilon=1.0", 6, in, 5, out, 1e-14, 1e-14, "bn grad inference by hand");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c): training and inference
     * mode, several statistics blocks per channel (9216 elements), the (N, C) rows layout,
     * NHWC where the sweep lays 4-D tensors out so */
    fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1", 15, 6, bn_grad_rand(4, KT_DIMS(3, 5, 7, 9), 7170), 5,
                               "bn grad training random 3x5x7x9");
    fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1;epsilon=0.001", 15, 6,
                               bn_grad_rand(4, KT_DIMS(4, 3, 48, 48), 7180), 3, "bn grad training random 4x3x48x48");
    fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1", 15, 6, bn_grad_rand(2, KT_DIMS(37, 40), 7190), 3,
                               "bn grad training random (N, C) 37x40");
    fails += kiln_optest_sweep("BatchNormGrad", "", 15, 6, bn_grad_rand(4, KT_DIMS(2, 6, 5, 7), 7200), 5,
                               "bn grad inference random 2x6x5x7");
    /* channels a multiple of 8 (the NHWC vector kernels) */
    fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1", 15, 6, bn_grad_rand(4, KT_DIMS(3, 24, 13, 11), 7310),
                               3, "bn grad training random 3x24x13x11");
    fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1", 15, 6, bn_grad_rand(4, KT_DIMS(8, 64, 20, 20), 7320),
                               3, "bn grad training random 8x64x20x20");
    fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1", 15, 6, bn_grad_rand(2, KT_DIMS(300, 48), 7330), 3,
                               "bn grad training random (N, C) 300x48");
    /* relu = 1: input 6 the ReLU's output Y (both signs), dY masked by Y > 0 */
    static const struct {
        int ndim;
        int64_t dims[4];
        const char *label;
    } rshapes[] = {{4, {3, 24, 13, 11}, "bn grad relu=1 training random 3x24x13x11"},
                   {4, {8, 64, 20, 20}, "bn grad relu=1 training random 8x64x20x20"},
                   {4, {2, 5, 7, 9}, "bn grad relu=1 training random 2x5x7x9 (scalar kernels)"},
                   {2, {300, 48}, "bn grad relu=1 training random (N, C) 300x48"}};
    for (size_t i = 0; i < sizeof rshapes / sizeof rshapes[0]; i++) {
        kiln_tensor **g = bn_grad_rand(rshapes[i].ndim, rshapes[i].dims, 7340 + i), *gin[7];
        for (int k = 0; k < 6; k++) gin[k] = g[k];
        gin[6] = kt_rand(KILN_F32, rshapes[i].ndim, rshapes[i].dims, -1, 1, 7350 + i);
        fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1;relu=1", 15, 7, gin, 3, rshapes[i].label);
    }
    /* input 7 (a second gradient term, the residual's Sum folded) and output 5 (the gradient
     * read: the shortcut's, under relu = 1), against Sum -> UnaryGrad -> BatchNormGrad; the
     * vector (C a multiple of 8, NHWC in the sweep), rows and NCHW kernels */
    fails += residual_grad_case(KILN_F64, 4, KT_DIMS(2, 3, 4, 5), 7500, true, 1e-12, "bn grad relu=1 + dY2, out 5 f64");
    fails += residual_grad_case(KILN_F32, 4, KT_DIMS(3, 24, 13, 11), 7510, true, 1e-5, "bn grad relu=1 + dY2, out 5 3x24x13x11");
    fails += residual_grad_case(KILN_F32, 4, KT_DIMS(8, 64, 20, 20), 7520, true, 1e-5, "bn grad relu=1 + dY2, out 5 8x64x20x20");
    fails += residual_grad_case(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), 7530, true, 1e-5,
                                "bn grad relu=1 + dY2, out 5 2x5x7x9 (scalar kernels)");
    fails += residual_grad_case(KILN_F32, 2, KT_DIMS(300, 48), 7540, true, 1e-5, "bn grad relu=1 + dY2, out 5 (N, C) 300x48");
    fails += residual_grad_case(KILN_F32, 4, KT_DIMS(8, 64, 20, 20), 7550, false, 1e-5, "bn grad + dY2, out 5 8x64x20x20");
    fails += residual_grad_case(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), 7560, false, 1e-5, "bn grad + dY2, out 5 2x5x7x9");
    fails += residual_grad_case(KILN_F16, 4, KT_DIMS(3, 8, 3, 5), 7570, true, 2e-2, "bn grad relu=1 + dY2, out 5 f16");
    /* the pass's other forms: output 5 without input 7 (relu = 1, the residual's ReLU
     * gradient only), input 7 without output 5 (dX the kernels' scratch for the sum) */
    {
        static const struct {
            int64_t dims[4];
            bool relu, add;
            int n_out;
            const char *label;
        } forms[] = {{{8, 64, 20, 20}, true, false, 6, "bn grad relu=1, out 5 8x64x20x20"},
                     {{2, 5, 7, 9}, true, false, 6, "bn grad relu=1, out 5 2x5x7x9 (scalar kernels)"},
                     {{8, 64, 20, 20}, true, true, 3, "bn grad relu=1 + dY2 8x64x20x20"},
                     {{8, 64, 20, 20}, false, true, 3, "bn grad + dY2 8x64x20x20"},
                     {{3, 24, 13, 11}, false, true, 3, "bn grad + dY2 3x24x13x11"},
                     {{2, 5, 7, 9}, false, true, 3, "bn grad + dY2 2x5x7x9 (scalar kernels)"}};
        for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
            kiln_tensor **g = bn_grad_rand(4, forms[i].dims, 7580 + i), *gin[8];
            for (int k = 0; k < 6; k++) gin[k] = g[k];
            gin[6] = forms[i].relu ? kt_rand(KILN_F32, 4, forms[i].dims, -1, 1, 7590 + i) : NULL;
            gin[7] = forms[i].add ? kt_rand(KILN_F32, 4, forms[i].dims, -1, 1, 7600 + i) : NULL;
            fails += kiln_optest_sweep("BatchNormGrad", forms[i].relu ? "training_mode=1;relu=1" : "training_mode=1", 15,
                                       8, gin, forms[i].n_out, forms[i].label);
        }
    }
    {
        kiln_tensor **g = bn_grad_rand(4, KT_DIMS(2, 3, 2, 2), 7610), *gin[8];
        for (int k = 0; k < 6; k++) gin[k] = g[k];
        gin[6] = NULL;
        gin[7] = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 2, 3), -1, 1, 7611);
        fails += kiln_optest_fails("BatchNormGrad", "training_mode=1", 8, gin, 3, KILN_ERR_SHAPE,
                                   "bn grad dY2 of another shape rejected");
    }
    /* relu_mask_from_x = 1: input 6 S (the forward's saved statistics), the mask from X;
     * against relu = 1 with Y bit for bit (the vector, rows and NCHW shapes), rounded as Y,
     * by finite differences; for the sweep with X away from the mask's edge */
    fails += xmask_case(KILN_F32, 4, KT_DIMS(3, 24, 13, 11), 7700, "bn grad relu_mask_from_x = relu=1 with Y, f32 3x24x13x11");
    fails += xmask_case(KILN_F16, 4, KT_DIMS(3, 8, 3, 5), 7710, "bn grad relu_mask_from_x = relu=1 with Y, f16 3x8x3x5");
    fails += xmask_case(KILN_BF16, 4, KT_DIMS(2, 16, 5, 3), 7720, "bn grad relu_mask_from_x = relu=1 with Y, bf16 2x16x5x3");
    fails += xmask_case(KILN_F64, 2, KT_DIMS(9, 4), 7730, "bn grad relu_mask_from_x = relu=1 with Y, f64 (N, C) 9x4");
    fails += xmask_rounding_case();
    fails += xmask_fd_case("bn grad relu_mask_from_x by finite differences (N,C,H,W)");
    static const struct {
        int ndim;
        int64_t dims[4];
        const char *label;
    } xshapes[] = {{4, {3, 24, 13, 11}, "bn grad relu_mask_from_x training random 3x24x13x11"},
                   {4, {8, 64, 20, 20}, "bn grad relu_mask_from_x training random 8x64x20x20"},
                   {4, {2, 5, 7, 9}, "bn grad relu_mask_from_x training random 2x5x7x9 (scalar kernels)"},
                   {2, {300, 48}, "bn grad relu_mask_from_x training random (N, C) 300x48"}};
    for (size_t i = 0; i < sizeof xshapes / sizeof xshapes[0]; i++) {
        kiln_tensor **g = xmask_grad_rand(xshapes[i].ndim, xshapes[i].dims, 7740 + i);
        if (!(xmask_margin > 1e-3)) { /* the backends' float roundings could flip a mask bit */
            printf("FAIL %s: an element within %.3g of the mask's edge\n", xshapes[i].label, xmask_margin);
            fails++;
        }
        fails += kiln_optest_sweep("BatchNormGrad", "training_mode=1;relu=1;relu_mask_from_x=1", 15, 7, g, 3,
                                   xshapes[i].label);
    }
    { /* rejected: S of the wrong shape, S missing, Y where S belongs, without relu = 1, with
       * dY2 (the residual form keeps Y), in inference mode, a value other than 0 and 1 */
        static const struct {
            const char *attrs;
            int s; /* input 6: 0 none, 1 S (2, C), 2 S (2, C + 1), 3 Y (X's shape) */
            bool dy2;
            kiln_status want;
            const char *label;
        } bad[] = {{"training_mode=1;relu=1;relu_mask_from_x=1", 2, false, KILN_ERR_SHAPE, "bn grad relu_mask_from_x S (2, C+1) rejected"},
                   {"training_mode=1;relu=1;relu_mask_from_x=1", 0, false, KILN_ERR_INVALID_ARGUMENT, "bn grad relu_mask_from_x without S rejected"},
                   {"training_mode=1;relu=1;relu_mask_from_x=1", 3, false, KILN_ERR_SHAPE, "bn grad relu_mask_from_x with Y as input 6 rejected"},
                   {"training_mode=1;relu_mask_from_x=1", 1, false, KILN_ERR_INVALID_ARGUMENT, "bn grad relu_mask_from_x without relu=1 rejected"},
                   {"training_mode=1;relu=1;relu_mask_from_x=1", 1, true, KILN_ERR_INVALID_ARGUMENT, "bn grad relu_mask_from_x with dY2 rejected"},
                   {"relu=1;relu_mask_from_x=1", 1, false, KILN_ERR_INVALID_ARGUMENT, "bn grad relu_mask_from_x in inference mode rejected"},
                   {"training_mode=1;relu=1;relu_mask_from_x=2", 1, false, KILN_ERR_INVALID_ARGUMENT, "bn grad relu_mask_from_x=2 rejected"}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            kiln_tensor **g = bn_grad_rand(4, KT_DIMS(2, 3, 2, 2), 7760 + i), *gin[8];
            for (int k = 0; k < 6; k++) gin[k] = g[k];
            gin[6] = bad[i].s == 1   ? kt_rand(KILN_F64, 2, KT_DIMS(2, 3), 0.5, 1, 7770 + i)
                     : bad[i].s == 2 ? kt_rand(KILN_F64, 2, KT_DIMS(2, 4), 0.5, 1, 7770 + i)
                     : bad[i].s == 3 ? kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 2, 2), -1, 1, 7770 + i)
                                     : NULL;
            gin[7] = bad[i].dy2 ? kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 2, 2), -1, 1, 7780 + i) : NULL;
            fails += kiln_optest_fails("BatchNormGrad", bad[i].attrs, bad[i].dy2 ? 8 : 7, gin, 3, bad[i].want, bad[i].label);
        }
    }
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(1, 0, 2, 1, 2, 3));
    kiln_tensor **p = bn_grad_rand(3, KT_DIMS(1, 2, 3), 7360);
    for (int k = 1; k < 6; k++) in[k] = p[k];
    kiln_tensor_free(p[0]);
    fails += kiln_optest_fails("BatchNormGrad", "training_mode=1;relu=1", 6, in, 3, KILN_ERR_INVALID_ARGUMENT,
                               "bn grad relu=1 without Y rejected");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Training: training_mode = 1 (opset 15), the running mean and variance (inputs 3, 4;
 * initializers) updated from outputs 1, 2. */
static const kiln_op_training training_form = {
    .mode_attr = "training_mode", .min_opset = 15, .n_outputs = 3,
    .output_names = {NULL, "running_mean", "running_var"}, .state_inputs = 0x18u, .state_output = 1,
};

/* Under fp16/bf16 (src/passes/precision.c) X and Y are L, in training mode too (the CUDA
 * kernels sum in double and f32; the reference in double); the statistics stay f32. */
const kiln_op_def kiln_op_batch_normalization = {
    .precision = KILN_PREC_LOW,
    .f32_inputs = 0xDEu /* scale, B, mean, var: statistics keep their precision; X's sums (6, 7) */,
    .f32_outputs = 0x1Eu /* running_mean, running_var */,
    .layout = KILN_LAYOUT_BN, .training = &training_form,
    .name = "BatchNormalization", .min_inputs = 5,
    .max_inputs = 8 /* kiln's Z, with relu = 1; X's sum and sum of squares (training) */,
    .min_outputs = 1, .max_outputs = 5,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
    .cpu_workspace = workspace_sync,
};

/* dY, X and dX L under fp16/bf16; scale, B, mean, var and the parameter gradients f32 (the
 * optimizer's master gradients: no Cast between). */
const kiln_op_def kiln_op_batch_norm_grad = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_BN_GRAD,
    .f32_inputs = 0x3Cu /* scale, B, input_mean, input_var */,
    .f32_outputs = 0x1Eu /* dScale, dB, dMean, dVar */,
    .name = "BatchNormGrad", .domain = "kiln", .min_inputs = 6, .max_inputs = 8 /* Y, dY2 */,
    .min_outputs = 3, .max_outputs = 6 /* the gradient read */,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
    .cpu_workspace = workspace_sync,
};
