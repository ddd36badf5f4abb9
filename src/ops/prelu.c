/*
 * prelu.c — PRelu: Y = X < 0 ? slope * X : X, opsets 6..16 (before 7 a 1-D slope of X's
 * channel count is per channel, see legacy_slope). slope broadcasts to X's
 * shape unidirectionally (numpy rules, but the output is always X's shape: a slope of
 * (C,1,1) for X (N,C,H,W) gives per-channel slopes). X and slope have one dtype: a
 * float, or (opset 16) an integer; unsigned X is never negative, so Y = X.
 * Gradient (floats), through kiln.PReluGrad(X, slope, dY) -> (dX, dSlope), one pass
 * instead of five ONNX nodes and a zero constant:
 *   dX = X < 0 ? slope * dY : dY   (X's shape: not broadcast, nothing to sum back)
 *   dSlope = X < 0 ? X * dY : 0    (X's shape, then summed back to slope's)
 * At X = 0 the forward takes the identity branch, and so does the gradient.
 */
#include "../core/optest.h"
#include "binary.h"

#include <string.h>

KILN_ROW_F32(prelu_f32, float, a < 0 ? a * b : a)
static double prelu_f64(double a, double b) { return a < 0 ? a * b : a; }
static int64_t prelu_i64(int64_t a, int64_t b, bool uns) {
    if (uns || a >= 0) return a;
    return (int64_t)((uint64_t)a * (uint64_t)b); /* wraps like Mul */
}
static const kiln_binary_kernels kernels = {prelu_f32, prelu_f64, prelu_i64};

/* Opsets 1 and 6 predate numpy broadcasting: there a 1-D slope of X's channel count (dim
 * 1) gives one slope per channel, as pytorch's opset-6 exports write it. view: slope seen
 * as (C, 1, ..., 1) over X's dims from 1 on. */
static bool legacy_slope(const kiln_op_ctx *c, kiln_tensor *view) {
    const kiln_tensor *x = c->in[0], *s = c->in[1];
    if (c->node->opset >= 7 || s->ndim != 1 || x->ndim < 3 || s->dims[0] != x->dims[1] || s->dims[0] == 1)
        return false;
    *view = *s;
    view->owns_data = false;
    view->ndim = x->ndim - 1;
    for (int d = 1; d < view->ndim; d++) view->dims[d] = 1;
    return true;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_tensor view;
    kiln_tensor *in[2] = {c->in[0], &view};
    kiln_op_ctx lc = *c;
    if (legacy_slope(c, &view)) lc.in = in;
    return kiln_binary_infer(&lc, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_UNIDIR);
}
static kiln_status forward(kiln_op_ctx *c) {
    kiln_tensor view;
    kiln_tensor *in[2] = {c->in[0], &view};
    kiln_op_ctx lc = *c;
    if (legacy_slope(c, &view)) lc.in = in;
    return kiln_binary_forward(&lc, &kernels);
}

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    if (st) return st;
    const kiln_node *n = KILN_GRAD_NODE(g);
    const kiln_value *vx = &g->m->values[n->in[0]], *vs = &g->m->values[n->in[1]];
    if (n->opset < 7 && vs->ndim == 1 && vx->ndim >= 3 && vs->dims[0] == vx->dims[1] && vs->dims[0] != 1)
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "PRelu node '%s': no gradient for the opset-%d per-channel slope", n->name, n->opset);
    int in[3] = {KILN_GRAD_IN(g, 0), KILN_GRAD_IN(g, 1), g->dy[0]}, out[2];
    if (kiln_grad_emit(g, "kiln", "PReluGrad", 3, in, 2, out, false, NULL) < 0) return KILN_ERR_OUT_OF_MEMORY;
    if (g->need[0]) g->dx[0] = out[0];
    if (g->need[1]) st = kiln_binary_grad_input(g, 1, out[1]);
    return st;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *slope = c->in[1], *dy = c->in[2];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) && slope->dtype == x->dtype && dy->dtype == x->dtype,
                  KILN_ERR_TYPE, "X, slope and dY must have one float dtype");
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    bool ok = kiln_broadcast_shape(x->ndim, x->dims, slope->ndim, slope->dims, &nd, dims) &&
              nd == x->ndim && memcmp(dims, x->dims, sizeof(int64_t) * (size_t)nd) == 0;
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "slope does not broadcast to X's shape");
    ok = dy->ndim == x->ndim && memcmp(dy->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim) == 0;
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "dY must have X's shape");
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    kiln_tensor_set_shape(c->out[1], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

typedef struct grad_job {
    const kiln_tensor *x, *slope, *dy;
    kiln_tensor *dx, *ds;
} grad_job;

static void grad_chunk(const kiln_bcast_chunk *ch, void *arg) {
    const grad_job *j = arg;
    if (j->x->dtype == KILN_F32) {
        const float *xp = (const float *)j->x->data + ch->off[0];
        const float *sp = (const float *)j->slope->data + ch->off[1];
        const float *dyp = (const float *)j->dy->data + ch->off[2];
        float *dxp = (float *)j->dx->data + ch->y, *dsp = (float *)j->ds->data + ch->y;
        for (int64_t i = 0; i < ch->n; i++) {
            const float x = xp[i * ch->inc[0]], d = dyp[i * ch->inc[2]];
            dxp[i] = x < 0 ? sp[i * ch->inc[1]] * d : d;
            dsp[i] = x < 0 ? x * d : 0.0f;
        }
        return;
    }
    for (int64_t i = 0; i < ch->n; i++) {
        const double x = kiln_get_f64(j->x, ch->off[0] + i * ch->inc[0]);
        const double d = kiln_get_f64(j->dy, ch->off[2] + i * ch->inc[2]);
        const double s = kiln_get_f64(j->slope, ch->off[1] + i * ch->inc[1]);
        kiln_set_f64(j->dx, ch->y + i, x < 0 ? s * d : d);
        kiln_set_f64(j->ds, ch->y + i, x < 0 ? x * d : 0.0);
    }
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    grad_job j = {c->in[0], c->in[1], c->in[2], c->out[0], c->out[1]};
    kiln_bcast p;
    kiln_bcast_init(&p, j.x->ndim, j.x->dims, 3, (const kiln_tensor *const *)c->in);
    kiln_bcast_run(&p, grad_chunk, &j);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    /* X = (-2, 3, -0.5, 0), slope 0.25, dY = (1, 2, 3, 4):
     * dX = (0.25*1, 2, 0.25*3, 4), dSlope = (-2*1, 0, -0.5*3, 0) */
    kiln_tensor *in[3] = {kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-2, 3, -0.5, 0)),
                          kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0.25)),
                          kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4))};
    kiln_tensor *want[2] = {kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(0.25, 2, 0.75, 4)),
                            kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-2, 0, -1.5, 0))};
    fails += kiln_optest("PReluGrad", "", 3, in, 2, want, 0, 0, "prelugrad f32 scalar slope");
    /* per-channel slope (2,1) on X (2,2), f64 */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-1, 2, -3, -4));
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(0.5, -2));
    in[2] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0.5, 1, 2, -1));
    want[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0.25, 1, -4, 2));
    want[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-0.5, 0, -6, 4));
    fails += kiln_optest("PReluGrad", "", 3, in, 2, want, 0, 0, "prelugrad f64 slope (2,1)");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(1), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("PReluGrad", "", 3, in, 2, KILN_ERR_SHAPE, "prelugrad dY shape mismatch");
    return fails;
}

static int check(const char *label, kiln_tensor *x, kiln_tensor *slope, kiln_tensor *want) {
    kiln_tensor *in[2] = {x, slope};
    return kiln_optest("PRelu", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    /* random, for the CUDA sweep: a per-channel slope (C,1,1), and opset 6's 1-D one */
    fails += kiln_optest_sweep("PRelu", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -1, 1, 981),
                                                 kt_rand(KILN_F32, 3, KT_DIMS(5, 1, 1), 0, 0.5, 982)},
                               1, "prelu random per-channel slope");
    fails += kiln_optest_sweep("PRelu", "", 6, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 3, 4), -1, 1, 983),
                                                 kt_rand(KILN_F32, 1, KT_DIMS(5), 0, 0.5, 984)},
                               1, "prelu random opset 6 per-channel slope");
    {
        /* opset 6: a slope of X's channel count is per channel (dim 1), not numpy's last dim */
        kiln_tensor *in[2] = {kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(-1, 2, -3, -4, 5, -6)),
                              kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0.5, -2))};
        kiln_tensor *y = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(-0.5, 2, -1.5, 8, 5, 12));
        fails += kiln_optest_opset("PRelu", "", 6, 2, in, 1, &y, 0, 0, "prelu opset 6 per-channel slope");
        in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), NULL);
        in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
        fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_SHAPE, "prelu opset 9 slope (2) for (1,2,3)");
    }
    fails += check("prelu f32 (2,3) slope (3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, 2, -3, 4, -5, 6)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.5, 0.25, -2)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-0.5, 2, 6, 4, -1.25, 6)));
    fails += check("prelu f32 (1,2,2,2) slope (2,1,1)",
                   kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-1, 2, -3, 4, -5, 6, -7, 8)),
                   kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(0.5, -1)),
                   kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2),
                           KT_VALS(-0.5, 2, -1.5, 4, 5, 6, 7, 8)));
    fails += check("prelu f32 (2,2) slope (1)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-4, 4, 0, -0.5)),
                   kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0.25)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-1, 4, 0, -0.125)));
    fails += check("prelu f64 slope ()", kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-3, 3)),
                   kt_scalar(KILN_F64, 0.1), kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-3 * 0.1, 3)));
    fails += check("prelu i32 (3) slope (1)", kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-3, 5, -1)),
                   kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(2)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-6, 5, -2)));
    fails += check("prelu u32 unchanged", kt_make(KILN_U32, 1, KT_DIMS(2), KT_VALS(4000000000.0, 1)),
                   kt_make(KILN_U32, 1, KT_DIMS(2), KT_VALS(2, 3)),
                   kt_make(KILN_U32, 1, KT_DIMS(2), KT_VALS(4000000000.0, 1)));

    /* slope (2,3) broadcasts with X (3) to (2,3), but not to X's shape */
    kiln_tensor *in[2] = {kt_make(KILN_F32, 1, KT_DIMS(3), NULL),
                          kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)};
    fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_SHAPE,
                               "prelu X (3) slope (2,3) rejected");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_SHAPE,
                               "prelu X (2,3) slope (2) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_TYPE, "prelu f32/f16 rejected");

    /* X away from the kink at 0 */
    fails += kiln_gradcheck("PRelu", "", 0, 2, (kiln_tensor *[]){kiln_binary_rand_signed(4, KT_DIMS(2, 3, 2, 2), 0.1, 1, 1),
                            kt_rand(KILN_F64, 3, KT_DIMS(3, 1, 1), -1, 1, 2)}, NULL, "prelu grad (2,3,2,2) slope (3,1,1)");
    fails += kiln_gradcheck("PRelu", "", 0, 2, (kiln_tensor *[]){kiln_binary_rand_signed(2, KT_DIMS(4, 3), 0.1, 1, 3),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 4)}, NULL, "prelu grad (4,3) slope (3)");
    fails += kiln_gradcheck("PRelu", "", 0, 2, (kiln_tensor *[]){kiln_binary_rand_signed(2, KT_DIMS(3, 4), 0.1, 1, 5),
                            kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(0.25))}, NULL, "prelu grad (3,4) slope (1)");
    fails += kiln_gradcheck("PRelu", "", 0, 2, (kiln_tensor *[]){kiln_binary_rand_signed(2, KT_DIMS(2, 5), 0.1, 1, 6),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 5), -1, 1, 7)}, NULL, "prelu grad (2,5) slope (2,5)");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_prelu_grad = {
    .precision = KILN_PREC_FP32,
    .name = "PReluGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 3, .min_outputs = 2,
    .max_outputs = 2, .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};

const kiln_op_def kiln_op_prelu = {
    .precision = KILN_PREC_LOW,
    .name = "PRelu", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
