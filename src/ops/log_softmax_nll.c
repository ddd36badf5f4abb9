/*
 * log_softmax_nll.c — the training loss chain LogSoftmax -> NegativeLogLikelihoodLoss as one
 * internal op, and its gradient as another (made by the fuse-loss pass,
 * src/passes/fuse_loss.c; never reachable from ONNX files).
 *
 * kiln.LogSoftmaxNLL(X, target, weight?) -> loss, log_prob?
 *   X (N, C) scores in f32, f16, bf16 (or f64), target (N) class indices (any int dtype),
 *   weight (C) optional. Attributes as NegativeLogLikelihoodLoss's: reduction "mean"
 *   (default) or "sum" ("none" is not fused), ignore_index. log_prob = LogSoftmax(X) along
 *   C; loss = NLL(log_prob, target, weight) as loss_common.h defines it.
 *   The outputs are f32 whatever X's float dtype (f64 for an f64 X): a low-precision X
 *   is read as it is and the arithmetic is at least f32, so the precision pass leaves X
 *   in f16/bf16 with no Cast, and the loss keeps f32's precision. log_prob is only an
 *   output where something else reads it.
 *
 * kiln.LogSoftmaxNLLGrad(X, target, weight?, dLoss?, dLogProb?) -> dX in X's dtype,
 *   dX_f32? (the same values in f32, for the precision pass: where an fp32 op also reads
 *   a low dX, the bias gradient's sum, this output replaces a Cast back to f32),
 *   loss? (the forward's loss, bit for bit what kiln.LogSoftmaxNLL computes from the same
 *   X, target, weight and attributes, by the same code: where the forward keeps no
 *   log_prob and dLoss does not depend on the loss, the fuse-loss pass drops the forward
 *   node and takes the loss from here, one kernel instead of two on the step's path)
 *   (the input order and the rule of kiln.SoftmaxCrossEntropyLossGrad, loss_common.h):
 *   dX[n,k] = coef[n] * (p[n,k] - [k = t]) + dLogProb[n,k] - p[n,k] * sum_k dLogProb[n,k]
 *   with p = softmax(X) recomputed from X (X is what the forward read, so the backward
 *   sees the same probabilities; saving log_prob would cost an f32 (N, C) write and read
 *   instead of re-reading X). dLoss and dLogProb have the forward outputs' dtype (f32, or
 *   f64 for an f64 X), so under AMP a loss scale arrives in f32 and dX leaves in f16/bf16.
 *
 * The CPU references compute in double (loss_common.c); the CUDA kernels in
 * src/cuda/loss.cu in f32 per row with double sums. Target and weight get no gradient.
 */
#include "../core/optest.h"
#include "loss_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* f32 outputs, f64 for an f64 X. */
static kiln_dtype out_dtype(kiln_dtype x) { return x == KILN_F64 ? KILN_F64 : KILN_F32; }

static kiln_status check_common(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, x->dtype == KILN_F32 || x->dtype == KILN_F16 || x->dtype == KILN_BF16 || x->dtype == KILN_F64,
                  KILN_ERR_TYPE, "X dtype %s is not supported (f32, f16, bf16, f64)", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim == 2, KILN_ERR_UNSUPPORTED, "X must be (N, C), got rank %d", x->ndim);
    const char *red = kiln_attr_string(c->node, "reduction", "mean");
    KILN_OP_CHECK(c, strcmp(red, "mean") == 0 || strcmp(red, "sum") == 0, KILN_ERR_UNSUPPORTED,
                  "reduction='%s' is not one of mean, sum", red);
    /* target (N), weight (C), integer targets: NegativeLogLikelihoodLoss's checks, with the
     * loss's shape into scratch */
    kiln_tensor loss = {0}, *loss_p = &loss;
    kiln_op_ctx fwd = *c;
    fwd.n_in = c->n_in < 3 ? c->n_in : 3;
    fwd.n_out = 1;
    fwd.out = &loss_p;
    return kiln_nll_infer(&fwd);
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_status st = check_common(c);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    const kiln_dtype dt = out_dtype(x->dtype);
    kiln_tensor_set_shape(c->out[0], dt, 0, NULL);
    if (c->n_out > 1 && c->out[1]) kiln_tensor_set_shape(c->out[1], dt, x->ndim, x->dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) { return (size_t)kiln_tensor_numel(c->in[0]) * sizeof(double); }

/* The loss of X (N, C) into `loss`, with log_prob = LogSoftmax(X) in double left in lp
 * (N, C): what kiln.LogSoftmaxNLL computes, and the gradient's output 2 with it, bit for
 * bit (inputs X, target, weight?; c's attributes). */
static kiln_status loss_of(kiln_op_ctx *c, kiln_tensor *loss, double *lp) {
    const kiln_tensor *x = c->in[0];
    const int64_t N = x->dims[0], C = x->dims[1];

    #pragma omp parallel for if (N * C > (1 << 15)) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < C; k++) {
            const double v = kiln_get_f64(x, n * C + k);
            if (v > mx || isnan(v)) mx = v;
        }
        for (int64_t k = 0; k < C; k++) sum += exp(kiln_get_f64(x, n * C + k) - mx);
        const double log_sum = log(sum);
        /* (v - mx) first, as LogSoftmax's reference does */
        for (int64_t k = 0; k < C; k++) lp[n * C + k] = (kiln_get_f64(x, n * C + k) - mx) - log_sum;
    }
    kiln_tensor view = {.dtype = KILN_F64, .ndim = 2, .dims = {N, C}, .data = lp};
    kiln_op_ctx fwd = *c;
    fwd.n_in = c->n_in < 3 ? c->n_in : 3;
    fwd.n_out = 1;
    fwd.out = &loss;
    return kiln_nll_forward(&fwd, &view);
}

static kiln_status forward(kiln_op_ctx *c) {
    double *lp = c->workspace; // (N, C)
    kiln_status st = loss_of(c, c->out[0], lp);
    if (!st && c->n_out > 1 && c->out[1])
        for (int64_t i = 0; i < kiln_tensor_numel(c->in[0]); i++) kiln_set_f64(c->out[1], i, lp[i]);
    return st;
}

/* The rule: kiln.LogSoftmaxNLLGrad(X, target, weight, dLoss, dLogProb). */
static kiln_status grad(kiln_grad_ctx *g) { return kiln_nll_grad_rule(g, "LogSoftmaxNLLGrad"); }

static kiln_status infer_grad(kiln_op_ctx *c) {
    kiln_status st = check_common(c);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    const kiln_tensor *dl = c->n_in > 3 ? c->in[3] : NULL, *dlp = c->n_in > 4 ? c->in[4] : NULL;
    const kiln_dtype dt = out_dtype(x->dtype);
    KILN_OP_CHECK(c, dl || dlp, KILN_ERR_SHAPE, "dLoss or dLogProb is required");
    KILN_OP_CHECK(c, !dl || (dl->dtype == dt && kiln_tensor_numel(dl) == 1 && dl->ndim <= 1), KILN_ERR_SHAPE,
                  "dLoss must be a %s scalar (the loss's dtype and shape), got %s rank %d", kiln_dtype_name(dt),
                  kiln_dtype_name(dl->dtype), dl->ndim);
    if (dlp) {
        bool same = dlp->dtype == dt && dlp->ndim == 2 && dlp->dims[0] == x->dims[0] && dlp->dims[1] == x->dims[1];
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dLogProb must be %s (N, C) like log_prob", kiln_dtype_name(dt));
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    if (c->n_out > 1 && c->out[1]) kiln_tensor_set_shape(c->out[1], dt, x->ndim, x->dims);
    if (c->n_out > 2 && c->out[2]) kiln_tensor_set_shape(c->out[2], dt, 0, NULL);
    return KILN_OK;
}

static bool wants_loss(const kiln_op_ctx *c) { return c->n_out > 2 && c->out[2]; }

/* the forward's log_prob scratch, when the loss is asked for */
static size_t workspace_grad(const kiln_op_ctx *c) { return wants_loss(c) ? workspace(c) : 0; }

static kiln_status forward_grad(kiln_op_ctx *c) {
    if (wants_loss(c)) {
        kiln_status st = loss_of(c, c->out[2], c->workspace);
        if (st) return st;
    }
    if (c->n_out < 2 || !c->out[1]) return kiln_nll_grad_forward(c, true);
    /* dX_f32 first (rounded once from double), then dX from it */
    kiln_op_ctx wide = *c;
    wide.out = &c->out[1];
    wide.n_out = 1;
    kiln_status st = kiln_nll_grad_forward(&wide, true);
    for (int64_t i = 0; !st && i < kiln_tensor_numel(c->out[0]); i++)
        kiln_set_f64(c->out[0], i, kiln_get_f64(c->out[1], i));
    return st;
}

/* ---------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* X = ((0, ln 3), (0, 0)): p = ((1/4, 3/4), (1/2, 1/2)); targets (0, 1) lose ln 4 and ln 2 */
static kiln_tensor *x22(kiln_dtype dt) { return kt_make(dt, 2, KT_DIMS(2, 2), KT_VALS(0, 1.0986122886681098, 0, 0)); }
static kiln_tensor *t22(void) { return kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 1)); }

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *out[2];
    const double ln4 = 1.3862943611198906, ln2 = 0.6931471805599453;
    in[0] = x22(KILN_F32);
    in[1] = t22();
    out[0] = kt_scalar(KILN_F32, (ln4 + ln2) / 2);
    out[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-ln4, -0.2876820724517809, -ln2, -ln2));
    fails += kiln_optest("LogSoftmaxNLL", "", 2, in, 2, out, 1e-7, 1e-6, "logsoftmax-nll mean with log_prob");
    /* weights (2, 1): sum 2 ln 4 + ln 2, mean over the weight sum 3 */
    in[0] = x22(KILN_F32);
    in[1] = t22();
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 1));
    out[0] = kt_scalar(KILN_F32, 2 * ln4 + ln2);
    fails += kiln_optest("LogSoftmaxNLL", "reduction=sum", 3, in, 1, out, 1e-7, 1e-6, "logsoftmax-nll weighted sum");
    in[0] = x22(KILN_F32);
    in[1] = t22();
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 1));
    out[0] = kt_scalar(KILN_F32, (2 * ln4 + ln2) / 3);
    fails += kiln_optest("LogSoftmaxNLL", "", 3, in, 1, out, 1e-7, 1e-6, "logsoftmax-nll weighted mean");
    /* ignore_index drops row 1 from the sum and from the weights */
    in[0] = x22(KILN_F64);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, -100));
    out[0] = kt_scalar(KILN_F64, ln4);
    fails += kiln_optest("LogSoftmaxNLL", "ignore_index=-100", 2, in, 1, out, 1e-15, 1e-14,
                         "logsoftmax-nll f64 ignore_index");
    /* f16 and bf16 X: f32 outputs from X's rounded values (ln 3 is 1.0986328125 in f16,
     * 1.1015625 in bf16) */
    in[0] = x22(KILN_F16);
    in[1] = t22();
    out[0] = kt_scalar(KILN_F32, (log(1 + exp(1.0986328125)) + ln2) / 2);
    out[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2),
                     KT_VALS(-log(1 + exp(1.0986328125)), 1.0986328125 - log(1 + exp(1.0986328125)), -ln2, -ln2));
    fails += kiln_optest("LogSoftmaxNLL", "", 2, in, 2, out, 1e-7, 1e-6, "logsoftmax-nll f16 X, f32 outputs");
    in[0] = x22(KILN_BF16);
    in[1] = t22();
    out[0] = kt_scalar(KILN_F32, (log(1 + exp(1.1015625)) + ln2) / 2);
    fails += kiln_optest("LogSoftmaxNLL", "reduction=mean", 2, in, 1, out, 1e-7, 1e-6, "logsoftmax-nll bf16 X");

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 1), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), NULL);
    fails += kiln_optest_fails("LogSoftmaxNLL", "", 2, in, 1, KILN_ERR_UNSUPPORTED, "logsoftmax-nll rank 3");
    in[0] = x22(KILN_F32);
    in[1] = t22();
    fails += kiln_optest_fails("LogSoftmaxNLL", "reduction=none", 2, in, 1, KILN_ERR_UNSUPPORTED,
                               "logsoftmax-nll reduction none");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), NULL);
    in[1] = t22();
    fails += kiln_optest_fails("LogSoftmaxNLL", "", 2, in, 1, KILN_ERR_TYPE, "logsoftmax-nll integer X");
    in[0] = x22(KILN_F32);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("LogSoftmaxNLL", "", 2, in, 1, KILN_ERR_SHAPE, "logsoftmax-nll target of 3 rows");
    in[0] = x22(KILN_F32);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 2));
    fails += kiln_optest_fails("LogSoftmaxNLL", "", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "logsoftmax-nll target out of range");

    /* gradients against finite differences (through kiln.LogSoftmaxNLLGrad) */
    static const bool x_only[3] = {true, false, false};
    fails += kiln_gradcheck("LogSoftmaxNLL", "", 13, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(5, 7), -3, 3, 1),
                                              kt_make(KILN_I64, 1, KT_DIMS(5), KT_VALS(1, 0, 6, 3, 3))},
                            x_only, "logsoftmax-nll grad mean");
    fails += kiln_gradcheck("LogSoftmaxNLL", "reduction=sum;ignore_index=2", 13, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(4, 3), -3, 3, 2),
                                              kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(2, 0, 1, 2)),
                                              kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.2, 1.0, 0.7))},
                            x_only, "logsoftmax-nll grad weighted sum ignore_index");
    fails += kiln_gradcheck("LogSoftmaxNLL", "ignore_index=0", 13, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -3, 3, 3),
                                              kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(3, 0, 1)),
                                              kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(0.5, 1.5, 1.0, 2.0))},
                            x_only, "logsoftmax-nll grad weighted mean ignore_index");
    /* with log_prob in the loss too: the dLogProb term */
    fails += kiln_gradcheck_ex("LogSoftmaxNLL", "", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 5), -2, 2, 4),
                                                 kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(4, 0, 2))},
                               x_only, 2, 1.0, "logsoftmax-nll grad with log_prob");
    return fails;
}

/* Run op (domain kiln) on in[] with the outputs marked in want[] (the others absent, as a
 * graph's -1 slots reach the op: out[k] NULL); out[k] new tensors or NULL. */
static kiln_status eval_slots(const char *op, const char *attrs, int n_in, kiln_tensor **in, int n_out,
                              const bool *want, kiln_tensor **out) {
    kiln_context ctx = {0};
    kiln_clear_error(&ctx); /* messages are per thread, keyed by address: start empty */
    kiln_node node = {.op_type = (char *)op, .name = (char *)"case", .domain = (char *)"kiln", .opset = 21,
                      .n_in = n_in, .n_out = n_out};
    node.op = kiln_op_index_domain("kiln", op);
    const kiln_op_def *d = kiln_op_get(node.op);
    kiln_tensor shapes[3] = {{0}}, *o[3];
    void *ws = NULL;
    for (int k = 0; k < n_out; k++) {
        out[k] = NULL;
        o[k] = want[k] ? &shapes[k] : NULL;
    }
    kiln_op_ctx c = {.kctx = &ctx, .node = &node, .n_in = n_in, .in = in, .n_out = n_out, .out = o};
    kiln_status st = d && n_out <= 3 ? kiln_attrs_parse(&ctx, attrs, &node.attrs, &node.n_attrs) : KILN_ERR_INTERNAL;
    if (!st) st = d->infer(&c);
    for (int k = 0; k < n_out && !st; k++)
        if (want[k] && !(o[k] = out[k] = kiln_tensor_new(&ctx, shapes[k].dtype, shapes[k].ndim, shapes[k].dims)))
            st = KILN_ERR_OUT_OF_MEMORY;
    const size_t bytes = !st && d->cpu_workspace ? (d->cpu_workspace(&c) + 63) / 64 * 64 : 0;
    if (bytes && !(ws = aligned_alloc(64, bytes))) st = KILN_ERR_OUT_OF_MEMORY;
    c.workspace = ws;
    c.workspace_size = bytes;
    if (!st) st = d->cpu_forward(&c);
    if (st) printf("     %s: %s: %s\n", op, kiln_status_name(st), kiln_context_message(&ctx));
    free(ws);
    for (int i = 0; i < node.n_attrs; i++) kiln_attr_clear(&node.attrs[i]);
    free(node.attrs);
    return st;
}

/* kiln.LogSoftmaxNLLGrad's loss output against kiln.LogSoftmaxNLL on the same random X,
 * targets (two of them ignore_index 2 where given) and weight: equal to the last bit; dX
 * (and dX_f32 where asked for) equal to the last bit to those of the gradient without the
 * loss output. dx32: -1 absent (slot 1 empty), else asked for. */
static int loss_output_case(kiln_dtype dt, const char *attrs, bool weighted, bool dx32, uint64_t seed,
                            const char *label) {
    enum { N = 6, C = 5 };
    const kiln_dtype lt = out_dtype(dt);
    kiln_tensor *in[4] = {kt_rand(dt, 2, KT_DIMS(N, C), -4, 4, seed),
                          kt_make(KILN_I64, 1, KT_DIMS(N), KT_VALS(2, 0, 4, 2, 1, 3)),
                          weighted ? kt_make(KILN_F32, 1, KT_DIMS(C), KT_VALS(0.5, 2, 1, 0.25, 3)) : NULL,
                          kt_scalar(lt, 0.75)};
    kiln_tensor *fwd[1] = {0}, *with[3] = {0}, *without[2] = {0};
    int fails = 0;
    kiln_status st = in[0] && in[1] && in[3] && (!weighted || in[2]) ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (!st) st = eval_slots("LogSoftmaxNLL", attrs, weighted ? 3 : 2, in, 1, (const bool[]){true}, fwd);
    if (!st) st = eval_slots("LogSoftmaxNLLGrad", attrs, 4, in, 3, (const bool[]){true, dx32, true}, with);
    if (!st) st = eval_slots("LogSoftmaxNLLGrad", attrs, 4, in, 2, (const bool[]){true, dx32}, without);
    if (st) {
        printf("FAIL %s: the ops failed\n", label);
        fails = 1;
    } else {
        char l[200];
        snprintf(l, sizeof l, "%s: loss", label);
        fails += with[2]->dtype != lt || with[2]->ndim != 0;
        fails += kiln_tensor_compare(with[2], fwd[0], 0, 0, l);
        snprintf(l, sizeof l, "%s: dX", label);
        fails += kiln_tensor_compare(with[0], without[0], 0, 0, l);
        snprintf(l, sizeof l, "%s: dX_f32", label);
        if (dx32) fails += kiln_tensor_compare(with[1], without[1], 0, 0, l);
        else fails += with[1] != NULL;
        /* a loss that is a number, not 0: the case can tell a wrong one */
        fails += !(fabs(kiln_get_f64(fwd[0], 0)) > 0.01);
        if (fails) printf("FAIL %s\n", label);
    }
    for (int i = 0; i < 4; i++) kiln_tensor_free(in[i]);
    kiln_tensor_free(fwd[0]);
    for (int k = 0; k < 3; k++) kiln_tensor_free(with[k]);
    for (int k = 0; k < 2; k++) kiln_tensor_free(without[k]);
    return fails ? 1 : 0;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[5], *dx;
    /* row 0: p = (1/4, 3/4), target 0, weight 2, sum, dLoss 1: 2 (p - (1, 0)) = (-1.5, 1.5);
     * row 1 ignored */
    in[0] = x22(KILN_F32);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 1));
    in[3] = kt_scalar(KILN_F32, 1);
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-1.5, 1.5, 0, 0));
    fails += kiln_optest("LogSoftmaxNLLGrad", "reduction=sum;ignore_index=-1", 4, in, 1, &dx, 1e-6, 1e-6,
                         "logsoftmax-nll grad weighted sum ignore_index");
    /* mean over 2 rows, dLoss 4 (a loss scale): coef 2; row 0 2 (p - (1, 0)) = (-1.5, 1.5),
     * row 1 2 ((1/2, 1/2) - (0, 1)) = (1, -1); an f16 X takes an f32 dLoss, gives f16 dX */
    in[0] = x22(KILN_F16);
    in[1] = t22();
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F32, 4);
    dx = kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(-1.5, 1.5, 1, -1));
    fails += kiln_optest("LogSoftmaxNLLGrad", "", 4, in, 1, &dx, 1e-3, 1e-3, "logsoftmax-nll grad f16 mean");
    /* the f32 copy: X = (0, ln 3) in bf16 is (0, 1.1015625), p = (0.24945..., 0.75054...);
     * coef 2 (dLoss 4 over 2 rows) */
    const double p0 = 1 / (1 + exp(1.1015625));
    kiln_tensor *outs[2];
    in[0] = x22(KILN_BF16);
    in[1] = t22();
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F32, 4);
    outs[0] = kt_make(KILN_BF16, 2, KT_DIMS(2, 2), KT_VALS(2 * (p0 - 1), 2 * (1 - p0), 1, -1));
    outs[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2 * (p0 - 1), 2 * (1 - p0), 1, -1));
    fails += kiln_optest("LogSoftmaxNLLGrad", "", 4, in, 2, outs, 1e-7, 1e-6, "logsoftmax-nll grad bf16 with dX_f32");
    in[0] = x22(KILN_BF16);
    in[1] = t22();
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F32, 4);
    dx = kt_make(KILN_BF16, 2, KT_DIMS(2, 2), KT_VALS(-1.5, 1.5, 1, -1));
    fails += kiln_optest("LogSoftmaxNLLGrad", "", 4, in, 1, &dx, 1e-2, 1e-2, "logsoftmax-nll grad bf16 mean");
    /* dLogProb (1, 2) on row 1 (p = (1/2, 1/2)): dLogProb - p * 3 = (-0.5, 0.5), no dLoss */
    in[0] = x22(KILN_F64);
    in[1] = t22();
    in[2] = NULL;
    in[3] = NULL;
    in[4] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0, 0, 1, 2));
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0, 0, -0.5, 0.5));
    fails += kiln_optest("LogSoftmaxNLLGrad", "", 5, in, 1, &dx, 1e-15, 1e-15, "logsoftmax-nll grad dLogProb only");

    in[0] = x22(KILN_F16);
    in[1] = t22();
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F16, 1);
    fails += kiln_optest_fails("LogSoftmaxNLLGrad", "", 4, in, 1, KILN_ERR_SHAPE,
                               "logsoftmax-nll grad f16 dLoss (must be f32)");
    in[0] = x22(KILN_F32);
    in[1] = t22();
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("LogSoftmaxNLLGrad", "", 4, in, 1, KILN_ERR_SHAPE,
                               "logsoftmax-nll grad dLoss of 2 elements");
    in[0] = x22(KILN_F32);
    in[1] = t22();
    fails += kiln_optest_fails("LogSoftmaxNLLGrad", "", 2, in, 1, KILN_ERR_SHAPE, "logsoftmax-nll grad no dLoss");

    /* the loss as output 2: row 0 loses ln 4, row 1 ln 2 (x22); mean, dLoss 1: dX as above
     * over 2 rows */
    kiln_tensor *outs3[3];
    in[0] = x22(KILN_F32);
    in[1] = t22();
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F32, 1);
    outs3[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-0.375, 0.375, 0.25, -0.25));
    outs3[1] = NULL;
    outs3[2] = kt_scalar(KILN_F32, (1.3862943611198906 + 0.6931471805599453) / 2);
    fails += kiln_optest("LogSoftmaxNLLGrad", "", 4, in, 3, outs3, 1e-7, 1e-6, "logsoftmax-nll grad with the loss");
    in[0] = x22(KILN_F32);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 2));
    in[2] = NULL;
    in[3] = kt_scalar(KILN_F32, 1);
    fails += kiln_optest_fails("LogSoftmaxNLLGrad", "", 4, in, 3, KILN_ERR_INVALID_ARGUMENT,
                               "logsoftmax-nll grad with the loss, target out of range");
    fails += loss_output_case(KILN_F32, "", false, false, 41, "logsoftmax-nll grad loss f32 mean, dX_f32 slot empty");
    fails += loss_output_case(KILN_F32, "reduction=sum;ignore_index=2", true, false, 42,
                              "logsoftmax-nll grad loss f32 weighted sum ignore_index, dX_f32 slot empty");
    fails += loss_output_case(KILN_F16, "ignore_index=2", true, true, 43,
                              "logsoftmax-nll grad loss f16 weighted mean ignore_index with dX_f32");
    fails += loss_output_case(KILN_F16, "reduction=sum", false, false, 44,
                              "logsoftmax-nll grad loss f16 sum, dX_f32 slot empty");
    fails += loss_output_case(KILN_BF16, "", true, true, 45, "logsoftmax-nll grad loss bf16 weighted mean with dX_f32");
    fails += loss_output_case(KILN_F64, "reduction=mean;ignore_index=2", false, false, 46,
                              "logsoftmax-nll grad loss f64 mean ignore_index, dX_f32 slot empty");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_log_softmax_nll = {
    .precision = KILN_PREC_MIXED, .out_dtype = {KILN_DT_F32, KILN_DT_F32},
    .name = "LogSoftmaxNLL", .domain = "kiln", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 2, .nondiff_inputs = (1u << 1) | (1u << 2), .infer = infer, .cpu_forward = forward,
    .cpu_workspace = workspace, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_log_softmax_nll_grad = {
    .precision = KILN_PREC_MIXED, .prec_flags = KILN_PREC_LIKE_X, .out_dtype = {KILN_DT_IN0, KILN_DT_F32, KILN_DT_F32},
    .name = "LogSoftmaxNLLGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 5, .min_outputs = 1,
    .max_outputs = 3, .infer = infer_grad, .cpu_forward = forward_grad, .cpu_workspace = workspace_grad,
    .test = KILN_OP_TESTS(test_grad),
};
