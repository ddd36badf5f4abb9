/* optimizer_step.c — kiln.OptimizerStep: one optimizer step over every trained tensor of a
 * model (a fused multi-tensor op, the training graph's last node):
 *
 *   inputs   0            step       i64 scalar: updates applied so far (the schedule's,
 *                                    Adam's bias correction's and SGD momentum's step)
 *            1 (optional) found_inf  f32 scalar: non-zero skips the update (the gradients
 *                                    had inf/NaN; kiln.NonFiniteCheck)
 *            2 (optional) inv_scale  f32 scalar: each gradient is multiplied by it as it is
 *                                    read (1 / the loss scale; kiln.NonFiniteCheck)
 *            3 .. 3+n          the n parameters, f32
 *            3+n .. 3+2n       their gradients, f32, f16 or bf16 (one dtype), each with its
 *                              parameter's element count
 *            3+2n + k*S + j    state j of parameter k (S per parameter: SGD with momentum 1,
 *                              the momentum buffer; Adam / AdamW 2, exp_avg and exp_avg_sq;
 *                              Adadelta 2, square_avg and acc_delta; LARS 1, the momentum
 *                              buffer; LAMB 2, exp_avg and exp_avg_sq), f32, the parameter's shape
 *   outputs  0            step + 1 (step when skipped)
 *            1 .. 1+n          the updated parameters
 *            1+n + k*S + j     the updated states
 *   attributes  n (the parameter count), optimizer (kiln_optimizer: 0 SGD, 1 Adam, 2 AdamW,
 *            3 Adadelta, 4 LARS, 5 LAMB), lr, momentum, nesterov, weight_decay, beta1, beta2,
 *            eps, rho, schedule (kiln_schedule: 0 constant, 1 step, 2 cosine, 3 poly),
 *            step_size, gamma, total_steps, warmup_steps, lars_eta, clip_grad_norm:
 *            kiln_train_options' meanings and defaults; no_decay (ints, n of them, optional):
 *            1 where parameter k takes no weight decay (and, for LARS / LAMB, no trust ratio).
 *
 * The learning rate is the schedule at `step` (optim_math.h, shared with the CUDA kernel).
 * With clip_grad_norm, LARS or LAMB the update first takes sums of squares (in double) over
 * whole tensors: all gradients (the global norm; clipping multiplies each gradient as read
 * by kiln_om_clip_coef), then per tensor the weights and gradient (LARS) or the weights and
 * LAMB's update direction, recomputed in the update pass with the same operations.
 * Every output is element i of its input updated from element i of the inputs, read
 * before it is written: an output may share its input's storage (an in-place update), and
 * the results are the same bits either way. Bit for bit the arithmetic of the trainer's
 * loop (kiln_optimizer_update, tests/optim_reference.h), checked by tests/test_optim_graph.c. */
#include "../core/optest.h"
#include "optim_math.h"

#include <stdio.h>
#include <string.h>

typedef struct config {
    int n, ns;
    kiln_om_hyper h;
    kiln_om_schedule s;
} config;

/* The attributes with kiln_train_options' defaults (trainer.c's fill_defaults). */
static kiln_status read_config(kiln_op_ctx *c, config *f) {
    const kiln_node *nd = c->node;
    const int opt = (int)kiln_attr_int(nd, "optimizer", KILN_OM_SGD);
    KILN_OP_CHECK(c, opt >= KILN_OM_SGD && opt <= KILN_OM_LAMB, KILN_ERR_INVALID_ARGUMENT,
                  "optimizer=%d (0 SGD, 1 Adam, 2 AdamW, 3 Adadelta, 4 LARS, 5 LAMB)", opt);
    memset(f, 0, sizeof *f);
    f->n = (int)kiln_attr_int(nd, "n", 0);
    f->h.opt = opt;
    f->h.wd = kiln_attr_float(nd, "weight_decay", 0.f);
    f->h.mom = kiln_attr_float(nd, "momentum", 0.f);
    f->h.nesterov = kiln_attr_int(nd, "nesterov", 0) != 0;
    f->h.b1 = kiln_attr_float(nd, "beta1", 0.9f);
    f->h.b2 = kiln_attr_float(nd, "beta2", 0.999f);
    f->h.eps = kiln_attr_float(nd, "eps", opt == KILN_OM_ADADELTA || opt == KILN_OM_LAMB ? 1e-6f : 1e-8f);
    f->h.rho = kiln_attr_float(nd, "rho", 0.9f);
    f->h.eta = kiln_attr_float(nd, "lars_eta", 0.001f);
    f->h.clip = kiln_attr_float(nd, "clip_grad_norm", 0.f);
    f->s.lr = kiln_attr_float(nd, "lr", opt == KILN_OM_ADADELTA ? 1.0f
                                        : opt == KILN_OM_SGD    ? 0.01f
                                        : opt == KILN_OM_LARS   ? 0.1f
                                                                : 1e-3f);
    f->s.kind = (int)kiln_attr_int(nd, "schedule", KILN_OM_CONSTANT);
    f->s.step_size = kiln_attr_int(nd, "step_size", 0);
    f->s.gamma = kiln_attr_float(nd, "gamma", 0.1f);
    f->s.total_steps = kiln_attr_int(nd, "total_steps", 0);
    f->s.warmup_steps = kiln_attr_int(nd, "warmup_steps", 0);
    f->ns = kiln_om_states(opt, f->h.mom);
    KILN_OP_CHECK(c, f->n >= 1, KILN_ERR_INVALID_ARGUMENT, "attribute n (the parameter count) must be >= 1, got %d", f->n);
    KILN_OP_CHECK(c, f->s.lr > 0 && f->h.mom >= 0 && f->h.wd >= 0 && f->h.rho < 1 && f->h.b1 < 1 && f->h.b2 < 1,
                  KILN_ERR_INVALID_ARGUMENT, "hyper-parameters out of range (lr %g, momentum %g, weight decay %g)",
                  f->s.lr, f->h.mom, f->h.wd);
    KILN_OP_CHECK(c, f->s.kind >= KILN_OM_CONSTANT && f->s.kind <= KILN_OM_POLY, KILN_ERR_INVALID_ARGUMENT,
                  "schedule=%d (0 constant, 1 step, 2 cosine, 3 poly)", f->s.kind);
    KILN_OP_CHECK(c, f->s.kind != KILN_OM_POLY || f->s.total_steps > f->s.warmup_steps, KILN_ERR_INVALID_ARGUMENT,
                  "the poly schedule needs total_steps (%lld) > warmup_steps (%lld)", (long long)f->s.total_steps,
                  (long long)f->s.warmup_steps);
    KILN_OP_CHECK(c, (f->h.opt != KILN_OM_LARS || f->h.eta > 0) && f->h.clip >= 0, KILN_ERR_INVALID_ARGUMENT,
                  "lars_eta must be > 0 (got %g) and clip_grad_norm >= 0 (got %g)", f->h.eta, f->h.clip);
    int nd_count = 0;
    const int64_t *nd_flags = kiln_attr_ints(nd, "no_decay", &nd_count);
    KILN_OP_CHECK(c, !nd_flags || nd_count == f->n, KILN_ERR_INVALID_ARGUMENT,
                  "no_decay has %d entries for n=%d parameters", nd_count, f->n);
    KILN_OP_CHECK(c, f->s.kind != KILN_OM_STEP || f->s.step_size > 0, KILN_ERR_INVALID_ARGUMENT,
                  "the step schedule needs step_size > 0");
    KILN_OP_CHECK(c, f->s.kind != KILN_OM_COSINE || f->s.total_steps > 0, KILN_ERR_INVALID_ARGUMENT,
                  "the cosine schedule needs total_steps > 0");
    KILN_OP_CHECK(c, c->n_in == 3 + f->n * (2 + f->ns) && c->n_out == 1 + f->n * (1 + f->ns), KILN_ERR_INVALID_ARGUMENT,
                  "n=%d parameters with %d states each take %d inputs and %d outputs, got %d and %d", f->n, f->ns,
                  3 + f->n * (2 + f->ns), 1 + f->n * (1 + f->ns), c->n_in, c->n_out);
    return KILN_OK;
}

bool kiln_optimizer_step_decays(const struct kiln_node *nd, int k) {
    int count = 0;
    const int64_t *flags = kiln_attr_ints(nd, "no_decay", &count);
    return !flags || k >= count || flags[k] == 0;
}

int kiln_optimizer_step_config(struct kiln_op_ctx *c, kiln_om_hyper *h, kiln_om_schedule *s, int *n, int *ns) {
    config f;
    kiln_status st = read_config(c, &f);
    if (st) return st;
    *h = f.h;
    *s = f.s;
    *n = f.n;
    *ns = f.ns;
    return KILN_OK;
}

static bool f32_scalar(const kiln_tensor *t) { return t->dtype == KILN_F32 && kiln_tensor_numel(t) == 1; }

static kiln_status infer(kiln_op_ctx *c) {
    config f;
    kiln_status st = read_config(c, &f);
    if (st) return st;
    KILN_OP_CHECK(c, c->in[0] && c->in[0]->dtype == KILN_I64 && kiln_tensor_numel(c->in[0]) == 1, KILN_ERR_TYPE,
                  "step must be an i64 scalar");
    KILN_OP_CHECK(c, !c->in[1] || f32_scalar(c->in[1]), KILN_ERR_TYPE, "found_inf must be an f32 scalar");
    KILN_OP_CHECK(c, !c->in[2] || f32_scalar(c->in[2]), KILN_ERR_TYPE, "inv_scale must be an f32 scalar");
    const kiln_dtype gdt = c->in[3 + f.n] ? c->in[3 + f.n]->dtype : KILN_DTYPE_UNDEFINED;
    KILN_OP_CHECK(c, gdt == KILN_F32 || gdt == KILN_F16 || gdt == KILN_BF16, KILN_ERR_TYPE,
                  "gradients must be f32, f16 or bf16");
    for (int k = 0; k < f.n; k++) {
        const kiln_tensor *p = c->in[3 + k], *g = c->in[3 + f.n + k];
        KILN_OP_CHECK(c, p && p->dtype == KILN_F32, KILN_ERR_TYPE, "parameter %d must be f32", k);
        KILN_OP_CHECK(c, g && g->dtype == gdt, KILN_ERR_TYPE, "gradient %d must be %s as gradient 0", k,
                      kiln_dtype_name(gdt));
        KILN_OP_CHECK(c, kiln_tensor_numel(g) == kiln_tensor_numel(p), KILN_ERR_SHAPE,
                      "gradient %d has %lld elements, its parameter %lld", k, (long long)kiln_tensor_numel(g),
                      (long long)kiln_tensor_numel(p));
        kiln_tensor_set_shape(c->out[1 + k], KILN_F32, p->ndim, p->dims);
        c->out[1 + k]->format = p->format;
        for (int j = 0; j < f.ns; j++) {
            const int i = 3 + 2 * f.n + k * f.ns + j;
            const kiln_tensor *s = c->in[i];
            KILN_OP_CHECK(c, s && s->dtype == KILN_F32 && kiln_tensor_numel(s) == kiln_tensor_numel(p), KILN_ERR_SHAPE,
                          "state %d of parameter %d (input %d) must be f32 with the parameter's %lld elements", j, k, i,
                          (long long)kiln_tensor_numel(p));
            kiln_tensor_set_shape(c->out[1 + f.n + k * f.ns + j], KILN_F32, p->ndim, p->dims);
            c->out[1 + f.n + k * f.ns + j]->format = p->format;
        }
    }
    kiln_tensor_set_shape(c->out[0], KILN_I64, c->in[0]->ndim, c->in[0]->dims);
    return KILN_OK;
}

static inline float grad_at(const void *g, kiln_dtype dt, int64_t i) {
    switch (dt) {
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)g)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)g)[i]);
    default: return ((const float *)g)[i];
    }
}

static inline float grad_in(const void *g, kiln_dtype dt, int64_t i, bool unscale, float inv) {
    const float v = grad_at(g, dt, i);
    return unscale ? KILN_OM_MUL(v, inv) : v;
}

/* The gradient as the update reads it: unscaled, then clipped (clip 1: not). */
static inline float grad_clip(const void *g, kiln_dtype dt, int64_t i, bool unscale, float inv, float clip) {
    const float v = grad_in(g, dt, i, unscale, inv);
    return clip != 1.f ? KILN_OM_MUL(v, clip) : v;
}

/* The update of one parameter (w0 -> w1, states a0 -> a1, b0 -> b1), its gradient element
 * i being GRAD, with the hyper-parameters hp and step constants k (the tensor's). */
#define UPDATE_LOOPS(GRAD)                                                                         \
    do {                                                                                           \
        switch (hp.opt) {                                                                          \
        case KILN_OM_SGD:                                                                          \
            if (a0)                                                                                \
                for (int64_t i = 0; i < len; i++) {                                                \
                    float w = w0[i], a = a0[i];                                                    \
                    kiln_om_sgd1(&hp, &k, &w, GRAD, &a);                                           \
                    w1[i] = w;                                                                     \
                    a1[i] = a;                                                                     \
                }                                                                                  \
            else                                                                                   \
                for (int64_t i = 0; i < len; i++) {                                                \
                    float w = w0[i], a = 0.f;                                                      \
                    kiln_om_sgd1(&hp, &k, &w, GRAD, &a);                                           \
                    w1[i] = w;                                                                     \
                }                                                                                  \
            break;                                                                                 \
        case KILN_OM_ADAM:                                                                         \
        case KILN_OM_ADAMW:                                                                        \
            for (int64_t i = 0; i < len; i++) {                                                    \
                float w = w0[i], a = a0[i], b = b0[i];                                             \
                kiln_om_adam1(&hp, &k, &w, GRAD, &a, &b);                                          \
                w1[i] = w;                                                                         \
                a1[i] = a;                                                                         \
                b1[i] = b;                                                                         \
            }                                                                                      \
            break;                                                                                 \
        case KILN_OM_LARS:                                                                         \
            for (int64_t i = 0; i < len; i++) {                                                    \
                float w = w0[i], a = a0[i];                                                        \
                kiln_om_lars1(&hp, &k, &w, GRAD, &a);                                              \
                w1[i] = w;                                                                         \
                a1[i] = a;                                                                         \
            }                                                                                      \
            break;                                                                                 \
        case KILN_OM_LAMB:                                                                         \
            for (int64_t i = 0; i < len; i++) {                                                    \
                float w = w0[i], a = a0[i], b = b0[i];                                             \
                kiln_om_lamb1(&hp, &k, &w, GRAD, &a, &b);                                          \
                w1[i] = w;                                                                         \
                a1[i] = a;                                                                         \
                b1[i] = b;                                                                         \
            }                                                                                      \
            break;                                                                                 \
        default:                                                                                   \
            for (int64_t i = 0; i < len; i++) {                                                    \
                float w = w0[i], a = a0[i], b = b0[i];                                             \
                kiln_om_adadelta1(&hp, &k, &w, GRAD, &a, &b);                                      \
                w1[i] = w;                                                                         \
                a1[i] = a;                                                                         \
                b1[i] = b;                                                                         \
            }                                                                                      \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

static void copy_if_apart(kiln_tensor *out, const kiln_tensor *in) {
    if (out->data != in->data) memcpy(out->data, in->data, kiln_tensor_nbytes(in));
}

/* Sum of squares of a gradient as read (unscaled, not clipped). */
static double grad_sq(const kiln_tensor *gt, bool unscale, float inv) {
    double acc = 0;
    const int64_t len = kiln_tensor_numel(gt);
    for (int64_t i = 0; i < len; i++) acc = kiln_om_sq_add(acc, grad_in(gt->data, gt->dtype, i, unscale, inv));
    return acc;
}

static double f32_sq(const float *x, int64_t len) {
    double acc = 0;
    for (int64_t i = 0; i < len; i++) acc = kiln_om_sq_add(acc, x[i]);
    return acc;
}

/* LAMB's sum of squares of u over a tensor, the moments' next values computed and dropped. */
static double lamb_sq(const kiln_om_hyper *hp, const kiln_om_step *k, const float *w0, const float *a0,
                      const float *b0, const kiln_tensor *gt, bool unscale, float inv, int64_t len) {
    double acc = 0;
    for (int64_t i = 0; i < len; i++) {
        float a = a0[i], b = b0[i];
        const float g = grad_clip(gt->data, gt->dtype, i, unscale, inv, k->clip);
        acc = kiln_om_sq_add(acc, kiln_om_lamb_u(hp, k, w0[i], g, &a, &b));
    }
    return acc;
}

static kiln_status forward(kiln_op_ctx *c) {
    config f;
    kiln_status st = read_config(c, &f);
    if (st) return st;
    const int64_t step = ((const int64_t *)c->in[0]->data)[0];
    const bool skip = c->in[1] && ((const float *)c->in[1]->data)[0] != 0.f;
    const bool unscale = c->in[2] != NULL;
    const float inv = unscale ? ((const float *)c->in[2]->data)[0] : 1.f;
    kiln_om_step k0 = kiln_om_step_at(&f.h, &f.s, step);
    if (!skip && f.h.clip > 0.f) { /* the global norm first: every gradient as read */
        double total = 0;
        for (int p = 0; p < f.n; p++) total = KILN_OM_DADD(total, grad_sq(c->in[3 + f.n + p], unscale, inv));
        k0.clip = kiln_om_clip_coef(total, f.h.clip);
    }
    for (int p = 0; p < f.n; p++) {
        const kiln_tensor *win = c->in[3 + p], *gt = c->in[3 + f.n + p];
        const kiln_tensor *s0in = f.ns > 0 ? c->in[3 + 2 * f.n + p * f.ns] : NULL;
        const kiln_tensor *s1in = f.ns > 1 ? c->in[3 + 2 * f.n + p * f.ns + 1] : NULL;
        kiln_tensor *wout = c->out[1 + p];
        kiln_tensor *s0out = f.ns > 0 ? c->out[1 + f.n + p * f.ns] : NULL;
        kiln_tensor *s1out = f.ns > 1 ? c->out[1 + f.n + p * f.ns + 1] : NULL;
        if (skip) { /* the weights and states as they were */
            copy_if_apart(wout, win);
            if (s0in) copy_if_apart(s0out, s0in);
            if (s1in) copy_if_apart(s1out, s1in);
            continue;
        }
        const int64_t len = kiln_tensor_numel(win);
        const float *w0 = win->data, *a0 = s0in ? s0in->data : NULL, *b0 = s1in ? s1in->data : NULL;
        float *w1 = wout->data, *a1 = s0out ? s0out->data : NULL, *b1 = s1out ? s1out->data : NULL;
        const void *g = gt->data;
        const kiln_dtype gdt = gt->dtype;
        const bool decay = kiln_optimizer_step_decays(c->node, p);
        kiln_om_hyper hp = f.h;
        if (!decay) hp.wd = 0.f;
        kiln_om_step k = k0;
        /* the tensor's norms, all read before any of it is written */
        if (hp.opt == KILN_OM_LARS)
            k.lr_t = kiln_om_lars_lr(&hp, k.lr, f32_sq(w0, len), grad_sq(gt, unscale, inv), k.clip, decay);
        else if (hp.opt == KILN_OM_LAMB)
            k.lr_t = kiln_om_lamb_lr(k.lr, f32_sq(w0, len), lamb_sq(&hp, &k, w0, a0, b0, gt, unscale, inv, len), decay);
        /* each element read before it is written: in place or not, the same. f32 gradients
         * without unscaling or clipping (the common case) are read directly; the loops are
         * spelled out per optimizer so that none tests the dtype or the optimizer per element */
        if (gdt == KILN_F32 && !unscale && k.clip == 1.f) {
            const float *g32 = g;
            UPDATE_LOOPS(g32[i]);
        } else {
            UPDATE_LOOPS(grad_clip(g, gdt, i, unscale, inv, k.clip));
        }
    }
    ((int64_t *)c->out[0]->data)[0] = skip ? step : step + 1;
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* ---------------------------------------------------------------- test cases
 * Expected values from PyTorch's formulas (torch.optim.SGD / Adam / AdamW / Adadelta and
 * the schedulers' closed forms), worked out in double here or by hand. */

static kiln_tensor *v2(double a, double b) { return kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(a, b)); }

/* One parameter [w0, w1] with gradient [g0, g1] and the given states (NULL: none). */
static int one_param(const char *attrs, int64_t step, double found, double inv, const double *w, const double *g,
                     int ns, const double *s_in, const double *w_want, const double *s_want, int64_t step_want,
                     double tol, const char *label) {
    kiln_tensor *in[8] = {kt_scalar(KILN_I64, (double)step), found >= 0 ? kt_scalar(KILN_F32, found) : NULL,
                          inv > 0 ? kt_scalar(KILN_F32, inv) : NULL, v2(w[0], w[1]), v2(g[0], g[1])};
    kiln_tensor *want[4] = {kt_scalar(KILN_I64, (double)step_want), v2(w_want[0], w_want[1])};
    for (int j = 0; j < ns; j++) {
        in[5 + j] = v2(s_in[2 * j], s_in[2 * j + 1]);
        want[2 + j] = s_want ? v2(s_want[2 * j], s_want[2 * j + 1]) : NULL;
    }
    char a[256];
    snprintf(a, sizeof a, "n=1;%s", attrs);
    return kiln_optest("OptimizerStep", a, 5 + ns, in, 2 + ns, want, tol, tol, label);
}

static int test(void) {
    int fails = 0;
    const double w[2] = {1, -2}, g[2] = {0.5, 0.25};
    {   /* SGD, momentum 0.9, weight decay 0.01, step 0: buf = g + wd w; w - lr buf */
        const double s[2] = {7, 7}; /* ignored on the first step */
        const double buf[2] = {0.5 + 0.01 * 1, 0.25 + 0.01 * -2};
        const double ww[2] = {1 - 0.1 * buf[0], -2 - 0.1 * buf[1]};
        fails += one_param("optimizer=0;lr=0.1;momentum=0.9;weight_decay=0.01", 0, -1, -1, w, g, 1, s, ww, buf, 1,
                           1e-6, "SGD momentum, first step");
    }
    {   /* SGD Nesterov, step 1: buf = 0.9 buf + d; w - lr (d + 0.9 buf) */
        const double s[2] = {0.1, 0.2}, d[2] = {0.51, 0.23};
        const double buf[2] = {0.9 * 0.1 + d[0], 0.9 * 0.2 + d[1]};
        const double ww[2] = {1 - 0.1 * (d[0] + 0.9 * buf[0]), -2 - 0.1 * (d[1] + 0.9 * buf[1])};
        fails += one_param("optimizer=0;lr=0.1;momentum=0.9;nesterov=1;weight_decay=0.01", 1, -1, -1, w, g, 1, s, ww,
                           buf, 2, 1e-6, "SGD Nesterov");
        /* literal: 1 - 0.1 * (0.51 + 0.9 * 0.6) = 0.895 */
        const double lit[2] = {0.895, -2.0599};
        fails += one_param("optimizer=0;lr=0.1;momentum=0.9;nesterov=1;weight_decay=0.01", 1, -1, -1, w, g, 1, s, lit,
                           NULL, 2, 1e-6, "SGD Nesterov (by hand)");
    }
    {   /* plain SGD, step schedule: lr 1 * 0.1^floor(3 / 2) = 0.1 at step 3 */
        const double ww[2] = {1 - 0.1 * 0.5, -2 - 0.1 * 0.25};
        fails += one_param("optimizer=0;lr=1.0;schedule=1;step_size=2;gamma=0.1", 3, -1, -1, w, g, 0, NULL, ww, NULL,
                           4, 1e-6, "SGD, step schedule");
    }
    {   /* cosine over 10 steps with 4 warm-up steps, at step 2: 0.5 (1 + cos(pi 2/10)) * 3/4 */
        const double lr = 0.5 * 0.5 * (1 + cos(3.14159265358979323846 * 0.2)) * 0.75;
        const double ww[2] = {1 - lr * 0.5, -2 - lr * 0.25};
        fails += one_param("optimizer=0;lr=0.5;schedule=2;total_steps=10;warmup_steps=4", 2, -1, -1, w, g, 0, NULL,
                           ww, NULL, 3, 1e-6, "SGD, cosine with warm-up");
    }
    for (int decoupled = 0; decoupled < 2; decoupled++) { /* Adam / AdamW at step 1 (t = 2) */
        const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, s[4] = {0.2, -0.1, 0.03, 0.01};
        double ww[2], st[4];
        for (int i = 0; i < 2; i++) {
            double wi = w[i], d = g[i];
            if (decoupled) wi *= 1 - lr * wd;
            else d += wd * wi;
            const double m = b1 * s[i] + (1 - b1) * d, v = b2 * s[2 + i] + (1 - b2) * d * d;
            const double mhat = m / (1 - b1 * b1), vhat = v / (1 - b2 * b2);
            ww[i] = wi - lr * mhat / (sqrt(vhat) + eps);
            st[i] = m;
            st[2 + i] = v;
        }
        /* states are laid out per parameter: exp_avg (2 elements) then exp_avg_sq */
        const double s_in[4] = {s[0], s[1], s[2], s[3]};
        fails += one_param(decoupled ? "optimizer=2;lr=0.01;weight_decay=0.1" : "optimizer=1;lr=0.01;weight_decay=0.1",
                           1, -1, -1, w, g, 2, s_in, ww, st, 2, 1e-6, decoupled ? "AdamW" : "Adam");
    }
    {   /* Adam's first step moves each weight by about lr: 1 - 0.1 * 0.5 / (0.5 + 1e-8) */
        const double s[4] = {0, 0, 0, 0}, ww[2] = {1 - 0.1 * 0.5 / (0.5 + 1e-8), -2 - 0.1 * 0.25 / (0.25 + 1e-8)};
        fails += one_param("optimizer=1;lr=0.1", 0, -1, -1, w, g, 2, s, ww, NULL, 1, 1e-6, "Adam, first step (by hand)");
    }
    {   /* Adadelta, lr 1, rho 0.9, eps 1e-6, weight decay 0.01 */
        const double rho = 0.9, eps = 1e-6, s[4] = {0.04, 0.0, 0.001, 0.0};
        double ww[2], st[4];
        for (int i = 0; i < 2; i++) {
            const double d = g[i] + 0.01 * w[i];
            const double sq = rho * s[i] + (1 - rho) * d * d;
            const double delta = sqrt(s[2 + i] + eps) / sqrt(sq + eps) * d;
            st[i] = sq;
            st[2 + i] = rho * s[2 + i] + (1 - rho) * delta * delta;
            ww[i] = w[i] - delta;
        }
        fails += one_param("optimizer=3;weight_decay=0.01", 5, -1, -1, w, g, 2, s, ww, st, 6, 1e-6, "Adadelta");
    }
    {   /* inf/NaN found: nothing moves, the step count stays */
        const double s[4] = {0.2, -0.1, 0.03, 0.01};
        fails += one_param("optimizer=1;lr=0.1", 4, 1, 0.5, w, g, 2, s, w, s, 4, 0, "skipped step");
    }
    {   /* gradients unscaled as read: inv_scale 0.25 on 4 g is g */
        const double g4[2] = {2, 1}, ww[2] = {1 - 0.1 * 0.5, -2 - 0.1 * 0.25};
        fails += one_param("optimizer=0;lr=0.1", 0, 0, 0.25, w, g4, 0, NULL, ww, NULL, 1, 1e-6, "unscaled gradients");
    }
    {   /* f16 gradients, two parameters of different sizes */
        kiln_tensor *in[7] = {kt_scalar(KILN_I64, 0), NULL, NULL, v2(1, 2),
                              kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 4, 5)), kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, -1)),
                              kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(2, 0.25, -0.125))};
        kiln_tensor *want[3] = {kt_scalar(KILN_I64, 1), v2(1 - 0.5 * 0.5, 2 + 0.5),
                                kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3 - 1, 4 - 0.125, 5 + 0.0625))};
        fails += kiln_optest("OptimizerStep", "n=2;lr=0.5", 7, in, 3, want, 1e-6, 1e-6, "two parameters, f16 gradients");
    }
    {   /* LARS at step 1: trust = eta ||w|| / (||g|| + wd ||w||); v = 0.9 v + lr trust (g + wd w); w -= v */
        const double lr = 0.5, eta = 0.02, wd = 0.01, s[2] = {0.1, 0.2};
        const double wn = sqrt(1 + 4), gn = sqrt(0.25 + 0.0625), trust = eta * wn / (gn + wd * wn);
        double v[2], ww[2];
        for (int i = 0; i < 2; i++) {
            v[i] = 0.9 * s[i] + lr * trust * (g[i] + wd * w[i]);
            ww[i] = w[i] - v[i];
        }
        fails += one_param("optimizer=4;lr=0.5;momentum=0.9;weight_decay=0.01;lars_eta=0.02", 1, -1, -1, w, g, 1, s, ww,
                           v, 2, 1e-6, "LARS");
        /* excluded from decay (no_decay): plain momentum SGD in LARS's form, v = 0.9 v + lr g */
        for (int i = 0; i < 2; i++) {
            v[i] = 0.9 * s[i] + lr * g[i];
            ww[i] = w[i] - v[i];
        }
        fails += one_param("optimizer=4;lr=0.5;momentum=0.9;weight_decay=0.01;lars_eta=0.02;no_decay=[1]", 1, -1, -1, w,
                           g, 1, s, ww, v, 2, 1e-6, "LARS, excluded tensor");
    }
    {   /* LAMB at step 1 (t = 2): u = m^ / (sqrt(v^) + eps) + wd w, w -= lr ||w|| / ||u|| u */
        const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-6, wd = 0.1, s[4] = {0.2, -0.1, 0.03, 0.01};
        double st[4], u[2], un = 0, ww[2];
        for (int i = 0; i < 2; i++) {
            st[i] = b1 * s[i] + (1 - b1) * g[i];
            st[2 + i] = b2 * s[2 + i] + (1 - b2) * g[i] * g[i];
            u[i] = (st[i] / (1 - b1 * b1)) / (sqrt(st[2 + i] / (1 - b2 * b2)) + eps) + wd * w[i];
            un += u[i] * u[i];
        }
        for (int i = 0; i < 2; i++) ww[i] = w[i] - lr * sqrt(5.0) / sqrt(un) * u[i];
        fails += one_param("optimizer=5;lr=0.01;weight_decay=0.1", 1, -1, -1, w, g, 2, s, ww, st, 2, 1e-6, "LAMB");
    }
    {   /* clipping: ||g|| = sqrt(0.3125) > 0.1: g times 0.1 / (||g|| + 1e-6); under the bound: as is */
        const double c = 0.1 / (sqrt(0.3125) + 1e-6);
        const double ww[2] = {1 - 0.1 * c * 0.5, -2 - 0.1 * c * 0.25}, wk[2] = {1 - 0.1 * 0.5, -2 - 0.1 * 0.25};
        fails += one_param("optimizer=0;lr=0.1;clip_grad_norm=0.1", 0, -1, -1, w, g, 0, NULL, ww, NULL, 1, 1e-6,
                           "SGD, gradients clipped");
        fails += one_param("optimizer=0;lr=0.1;clip_grad_norm=0.6", 0, -1, -1, w, g, 0, NULL, wk, NULL, 1, 1e-6,
                           "SGD, gradients under the clipping bound");
        /* after unscaling: inv_scale 0.25 of 4 g is g, then clipped */
        const double g4[2] = {2, 1};
        fails += one_param("optimizer=0;lr=0.1;clip_grad_norm=0.1", 0, 0, 0.25, w, g4, 0, NULL, ww, NULL, 1, 1e-6,
                           "SGD, clipped after unscaling");
    }
    {   /* no_decay: SGD without the weight decay term */
        const double ww[2] = {1 - 0.1 * 0.5, -2 - 0.1 * 0.25};
        fails += one_param("optimizer=0;lr=0.1;weight_decay=0.5;no_decay=[1]", 0, -1, -1, w, g, 0, NULL, ww, NULL, 1,
                           1e-6, "SGD, no weight decay");
    }
    {   /* poly: lr 1, warm-up 2, total 6, at step 4: (1 - 2/4)^2 = 0.25 */
        const double ww[2] = {1 - 0.25 * 0.5, -2 - 0.25 * 0.25};
        fails += one_param("optimizer=0;lr=1.0;schedule=3;total_steps=6;warmup_steps=2", 4, -1, -1, w, g, 0, NULL, ww,
                           NULL, 5, 1e-6, "SGD, poly schedule");
    }
    fails += kiln_optest_fails("OptimizerStep", "n=1;schedule=3;total_steps=2;warmup_steps=2",
                               5, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), NULL, NULL, v2(1, 2), v2(1, 1)}, 2,
                               KILN_ERR_INVALID_ARGUMENT, "poly without steps after the warm-up");
    fails += kiln_optest_fails("OptimizerStep", "n=1;no_decay=[0,1]",
                               5, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), NULL, NULL, v2(1, 2), v2(1, 1)}, 2,
                               KILN_ERR_INVALID_ARGUMENT, "no_decay of another length than n");
    /* rejected: a gradient of another size, a state missing, an unknown optimizer */
    fails += kiln_optest_fails("OptimizerStep", "n=1",
                               4 + 1, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), NULL, NULL, v2(1, 2),
                                                        kt_make(KILN_F32, 1, KT_DIMS(3), NULL)},
                               2, KILN_ERR_SHAPE, "gradient of another size");
    fails += kiln_optest_fails("OptimizerStep", "n=1;optimizer=1",
                               5, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), NULL, NULL, v2(1, 2), v2(1, 1)}, 2,
                               KILN_ERR_INVALID_ARGUMENT, "Adam without its states");
    fails += kiln_optest_fails("OptimizerStep", "n=1;optimizer=7",
                               5, (kiln_tensor *[]){kt_scalar(KILN_I64, 0), NULL, NULL, v2(1, 2), v2(1, 1)}, 2,
                               KILN_ERR_INVALID_ARGUMENT, "unknown optimizer");
    return fails;
}
#endif /* KILN_OPTESTS */

/* step' over step, each parameter and state over its input */
static int inplace_input(const kiln_node *nd, int out) {
    const int n = (int)kiln_attr_int(nd, "n", 0);
    const int ns = kiln_om_states((int)kiln_attr_int(nd, "optimizer", KILN_OM_SGD), kiln_attr_float(nd, "momentum", 0.f));
    if (n < 1 || out < 0 || out >= 1 + n * (1 + ns) || nd->n_in != 3 + n * (2 + ns)) return -1;
    return out == 0 ? 0 : out <= n ? 2 + out : 2 + n + out;
}

const kiln_op_def kiln_op_optimizer_step = {
    .precision = KILN_PREC_FP32, /* f32 parameters, states and counters; low-precision gradients are cast up */
    .name = "OptimizerStep", .domain = "kiln", .min_inputs = 1, .max_inputs = -1, .min_outputs = 2,
    .max_outputs = -1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .inplace_input = inplace_input,
};
