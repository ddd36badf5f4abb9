/*
 * optim_math.h — the training step's arithmetic, written once for the CPU reference
 * (src/ops/optimizer_step.c, loss_scale_update.c) and the CUDA kernels (src/cuda/optim.cu):
 *
 *   kiln_om_lr_at        the learning-rate schedule at a step (kiln_lr_at of
 *                        src/core/schedule.h: the one formula, shared with the trainer)
 *   kiln_om_update1      one element of SGD (momentum, Nesterov, weight decay), Adam,
 *                        AdamW or Adadelta, PyTorch's formulas; LARS and LAMB (MLPerf's /
 *                        NVIDIA's), with the tensor's learning rate from its norms
 *   kiln_om_lars_lr, kiln_om_lamb_lr, kiln_om_clip_coef  what the per-tensor norms and the
 *                        global gradient norm make of the step (sums of squares in double)
 *   kiln_om_scaler_update  PyTorch GradScaler.update: the dynamic loss scale
 *
 * Every float operation is spelled out (KILN_OM_ADD ...): on the device they are the
 * round-to-nearest intrinsics, which the compiler never contracts into FMAs; the host
 * builds do not contract either (no -ffp-contract=fast, no FMA target). So the CPU and
 * CUDA results are the same bits, and the same as the trainer's historical loop
 * (kiln_optimizer_update, frozen in tests/optim_reference.h) operation for operation. The one place
 * they may differ: double pow / cos of the schedule and Adam's bias corrections on the
 * device are within 1-2 ulp of double of the host's libm (rounded to float afterwards).
 *
 * C11 and CUDA C++: static inline functions, __host__ __device__ under nvcc.
 */
#ifndef KILN_OPTIM_MATH_H
#define KILN_OPTIM_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/schedule.h" /* kiln_lr_at: the schedule's one formula */

#ifdef __CUDACC__
#define KILN_OM_FN static __host__ __device__ __forceinline__
#else
#define KILN_OM_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define KILN_OM_ADD(a, b) __fadd_rn((a), (b))
#define KILN_OM_SUB(a, b) __fsub_rn((a), (b))
#define KILN_OM_MUL(a, b) __fmul_rn((a), (b))
#define KILN_OM_DIV(a, b) __fdiv_rn((a), (b))
#define KILN_OM_SQRT(a) __fsqrt_rn(a)
#define KILN_OM_DDIV_F(a, b) __double2float_rn(__ddiv_rn((double)(a), (b)))
#define KILN_OM_DADD(a, b) __dadd_rn((a), (b))
#define KILN_OM_DMUL(a, b) __dmul_rn((a), (b))
#define KILN_OM_DDIV(a, b) __ddiv_rn((a), (b))
#define KILN_OM_DSQRT(a) __dsqrt_rn(a)
#define KILN_OM_D2F(a) __double2float_rn(a)
#else
#define KILN_OM_ADD(a, b) ((a) + (b))
#define KILN_OM_SUB(a, b) ((a) - (b))
#define KILN_OM_MUL(a, b) ((a) * (b))
#define KILN_OM_DIV(a, b) ((a) / (b))
#define KILN_OM_SQRT(a) sqrtf(a)
#define KILN_OM_DDIV_F(a, b) ((float)((double)(a) / (b)))
#define KILN_OM_DADD(a, b) ((a) + (b))
#define KILN_OM_DMUL(a, b) ((a) * (b))
#define KILN_OM_DDIV(a, b) ((a) / (b))
#define KILN_OM_DSQRT(a) sqrt(a)
#define KILN_OM_D2F(a) ((float)(a))
#endif

/* The optimizers (the values of kiln_optimizer in kiln.h) and schedules (kiln_schedule). */
enum { KILN_OM_SGD = 0, KILN_OM_ADAM = 1, KILN_OM_ADAMW = 2, KILN_OM_ADADELTA = 3, KILN_OM_LARS = 4, KILN_OM_LAMB = 5 };
enum { KILN_OM_CONSTANT = 0, KILN_OM_STEP = 1, KILN_OM_COSINE = 2, KILN_OM_POLY = 3 };

/* The learning-rate schedule: lr * gamma^floor(step / step_size) (STEP) or
 * lr * (1 + cos(pi * min(step, total) / total)) / 2 (COSINE), then times (step + 1) / warmup
 * while step < warmup. step_size > 0 for STEP and total_steps > 0 for COSINE (checked by
 * whoever takes the options). */
typedef struct kiln_om_schedule {
    float lr;
    int kind;
    int64_t step_size;
    float gamma;
    int64_t total_steps;
    int64_t warmup_steps;
} kiln_om_schedule;

KILN_OM_FN float kiln_om_lr_at(const kiln_om_schedule *s, int64_t step) {
    return kiln_lr_at(s->lr, s->kind, s->step_size, s->gamma, s->total_steps, s->warmup_steps, step);
}

/* The hyper-parameters an update reads besides the step's. */
typedef struct kiln_om_hyper {
    int opt;
    float wd, mom, b1, b2, eps, rho;
    bool nesterov;
    float eta;  /* LARS's trust coefficient */
    float clip; /* > 0: the gradients' global 2-norm is clipped to it (kiln_om_clip_coef) */
} kiln_om_hyper;

/* What one step shares over all elements (lr_t: over a tensor's). */
typedef struct kiln_om_step {
    float lr;
    bool first;      /* step 0: SGD's momentum buffer takes the gradient */
    double bc1, bc2; /* Adam, LAMB: 1 - beta^(step + 1) */
    float lr_t;      /* LARS, LAMB: this tensor's learning rate (kiln_om_lars_lr / kiln_om_lamb_lr) */
    float clip;      /* every gradient times this (kiln_om_clip_coef; 1: no clipping) */
} kiln_om_step;

KILN_OM_FN kiln_om_step kiln_om_step_at(const kiln_om_hyper *h, const kiln_om_schedule *s, int64_t step) {
    kiln_om_step k;
    k.lr = kiln_om_lr_at(s, step);
    k.first = step == 0;
    k.lr_t = k.lr;
    k.clip = 1.f;
    k.bc1 = k.bc2 = 1;
    if (h->opt == KILN_OM_ADAM || h->opt == KILN_OM_ADAMW || h->opt == KILN_OM_LAMB) {
        k.bc1 = 1 - pow((double)h->b1, (double)(step + 1));
        k.bc2 = 1 - pow((double)h->b2, (double)(step + 1));
    }
    return k;
}

/* Optimizer state per element: SGD with momentum: s0 the momentum buffer; Adam / AdamW:
 * s0 exp_avg, s1 exp_avg_sq; Adadelta: s0 square_avg, s1 acc_delta. */
KILN_OM_FN void kiln_om_sgd1(const kiln_om_hyper *h, const kiln_om_step *k, float *w, float g, float *s0) {
    float d = KILN_OM_ADD(g, KILN_OM_MUL(h->wd, *w));
    if (h->mom != 0.f) {
        *s0 = k->first ? d : KILN_OM_ADD(KILN_OM_MUL(h->mom, *s0), d); /* PyTorch: the first step takes d */
        d = h->nesterov ? KILN_OM_ADD(d, KILN_OM_MUL(h->mom, *s0)) : *s0;
    }
    *w = KILN_OM_SUB(*w, KILN_OM_MUL(k->lr, d));
}

KILN_OM_FN void kiln_om_adam1(const kiln_om_hyper *h, const kiln_om_step *k, float *w, float g, float *s0, float *s1) {
    float d = g;
    if (h->opt == KILN_OM_ADAMW) *w = KILN_OM_MUL(*w, KILN_OM_SUB(1.f, KILN_OM_MUL(k->lr, h->wd)));
    else d = KILN_OM_ADD(d, KILN_OM_MUL(h->wd, *w));
    *s0 = KILN_OM_ADD(KILN_OM_MUL(h->b1, *s0), KILN_OM_MUL(KILN_OM_SUB(1.f, h->b1), d));
    *s1 = KILN_OM_ADD(KILN_OM_MUL(h->b2, *s1), KILN_OM_MUL(KILN_OM_MUL(KILN_OM_SUB(1.f, h->b2), d), d));
    const float mhat = KILN_OM_DDIV_F(*s0, k->bc1), vhat = KILN_OM_DDIV_F(*s1, k->bc2);
    *w = KILN_OM_SUB(*w, KILN_OM_DIV(KILN_OM_MUL(k->lr, mhat), KILN_OM_ADD(KILN_OM_SQRT(vhat), h->eps)));
}

KILN_OM_FN void kiln_om_adadelta1(const kiln_om_hyper *h, const kiln_om_step *k, float *w, float g, float *s0,
                                  float *s1) {
    const float d = KILN_OM_ADD(g, KILN_OM_MUL(h->wd, *w));
    const float one_m = KILN_OM_SUB(1.f, h->rho);
    *s0 = KILN_OM_ADD(KILN_OM_MUL(h->rho, *s0), KILN_OM_MUL(KILN_OM_MUL(one_m, d), d));
    const float delta =
        KILN_OM_MUL(KILN_OM_DIV(KILN_OM_SQRT(KILN_OM_ADD(*s1, h->eps)), KILN_OM_SQRT(KILN_OM_ADD(*s0, h->eps))), d);
    *s1 = KILN_OM_ADD(KILN_OM_MUL(h->rho, *s1), KILN_OM_MUL(KILN_OM_MUL(one_m, delta), delta));
    *w = KILN_OM_SUB(*w, KILN_OM_MUL(k->lr, delta));
}

/* ---- LARS and LAMB. Both scale a tensor's step by a trust ratio of norms over the whole
 * tensor: the update of tensor k reads sums of squares (in double: w2 = sum w^2, g2 = sum g^2
 * of the gradient as read, unscaled but not clipped, u2 = sum u^2 of LAMB's update) taken
 * over all of it before any element moves. A tensor excluded from weight decay (h->wd 0
 * for it, decay false: no_decay_bn_bias) takes no trust ratio either. */

/* The sum of squares so far, plus x^2. */
KILN_OM_FN double kiln_om_sq_add(double acc, float x) { return KILN_OM_DADD(acc, KILN_OM_DMUL((double)x, (double)x)); }

/* PyTorch's clip_grad_norm_: the factor every gradient is multiplied by, from the sum of
 * squares of all of them: max_norm / (norm + 1e-6) when below 1, else 1 (also for a
 * non-finite norm: that step is skipped by the loss scaler, or the NaN goes on as in PyTorch). */
KILN_OM_FN float kiln_om_clip_coef(double g2_total, float max_norm) {
    if (!(max_norm > 0.f)) return 1.f;
    const double c = KILN_OM_DDIV((double)max_norm, KILN_OM_DADD(KILN_OM_DSQRT(g2_total), 1e-6));
    return c < 1.0 ? KILN_OM_D2F(c) : 1.f;
}

/* LARS's learning rate of a tensor: lr * eta * ||w|| / (||g|| + wd ||w||), ||g|| the
 * clipped gradient's norm (clip * sqrt(g2)); lr when a norm is 0 or the tensor is excluded. */
KILN_OM_FN float kiln_om_lars_lr(const kiln_om_hyper *h, float lr, double w2, double g2, float clip, bool decay) {
    if (!decay) return lr;
    const double wn = KILN_OM_DSQRT(w2), gn = KILN_OM_DMUL(KILN_OM_DSQRT(g2), (double)clip);
    if (!(wn > 0) || !(gn > 0)) return lr;
    const double t = KILN_OM_DDIV(KILN_OM_DMUL((double)h->eta, wn), KILN_OM_DADD(gn, KILN_OM_DMUL((double)h->wd, wn)));
    return KILN_OM_D2F(KILN_OM_DMUL((double)lr, t));
}

/* LAMB's learning rate of a tensor: lr * ||w|| / ||u||; lr when a norm is 0 or excluded. */
KILN_OM_FN float kiln_om_lamb_lr(float lr, double w2, double u2, bool decay) {
    if (!decay) return lr;
    const double wn = KILN_OM_DSQRT(w2), un = KILN_OM_DSQRT(u2);
    if (!(wn > 0) || !(un > 0)) return lr;
    return KILN_OM_D2F(KILN_OM_DMUL((double)lr, KILN_OM_DDIV(wn, un)));
}

/* LARS, one element (MLPerf's form: the learning rate inside the momentum buffer):
 * v = momentum v + lr_t (g + wd w); w -= v. s0 is v (zero before the first step). */
KILN_OM_FN void kiln_om_lars1(const kiln_om_hyper *h, const kiln_om_step *k, float *w, float g, float *s0) {
    const float d = KILN_OM_ADD(g, KILN_OM_MUL(h->wd, *w));
    *s0 = KILN_OM_ADD(KILN_OM_MUL(h->mom, *s0), KILN_OM_MUL(k->lr_t, d));
    *w = KILN_OM_SUB(*w, *s0);
}

/* LAMB's update direction of one element, u = m^ / (sqrt(v^) + eps) + wd w, with the
 * moments' next values into s0 (exp_avg) and s1 (exp_avg_sq): the norm pass calls it on
 * copies, the update on the states, the same operations both times. */
KILN_OM_FN float kiln_om_lamb_u(const kiln_om_hyper *h, const kiln_om_step *k, float w, float g, float *s0, float *s1) {
    *s0 = KILN_OM_ADD(KILN_OM_MUL(h->b1, *s0), KILN_OM_MUL(KILN_OM_SUB(1.f, h->b1), g));
    *s1 = KILN_OM_ADD(KILN_OM_MUL(h->b2, *s1), KILN_OM_MUL(KILN_OM_MUL(KILN_OM_SUB(1.f, h->b2), g), g));
    const float mhat = KILN_OM_DDIV_F(*s0, k->bc1), vhat = KILN_OM_DDIV_F(*s1, k->bc2);
    return KILN_OM_ADD(KILN_OM_DIV(mhat, KILN_OM_ADD(KILN_OM_SQRT(vhat), h->eps)), KILN_OM_MUL(h->wd, w));
}

KILN_OM_FN void kiln_om_lamb1(const kiln_om_hyper *h, const kiln_om_step *k, float *w, float g, float *s0, float *s1) {
    const float u = kiln_om_lamb_u(h, k, *w, g, s0, s1);
    *w = KILN_OM_SUB(*w, KILN_OM_MUL(k->lr_t, u));
}

/* One element of any optimizer (s0 / s1 may point at scratch where it keeps none). */
KILN_OM_FN void kiln_om_update1(const kiln_om_hyper *h, const kiln_om_step *k, float *w, float g, float *s0,
                                float *s1) {
    switch (h->opt) {
    case KILN_OM_SGD: kiln_om_sgd1(h, k, w, g, s0); break;
    case KILN_OM_ADAM:
    case KILN_OM_ADAMW: kiln_om_adam1(h, k, w, g, s0, s1); break;
    case KILN_OM_LARS: kiln_om_lars1(h, k, w, g, s0); break;
    case KILN_OM_LAMB: kiln_om_lamb1(h, k, w, g, s0, s1); break;
    default: kiln_om_adadelta1(h, k, w, g, s0, s1); break;
    }
}

/* The per-tensor norms an optimizer step needs: bit 0 w2 and g2 (LARS, and any clipping's
 * g2), bit 1 w2 and u2 (LAMB). */
KILN_OM_FN int kiln_om_norms(const kiln_om_hyper *h) {
    return (h->opt == KILN_OM_LARS || h->clip > 0.f ? 1 : 0) | (h->opt == KILN_OM_LAMB ? 2 : 0);
}

/* The no-weight-decay rule of no_decay_bn_bias (PyTorch's convention): a parameter of at
 * most one dimension (BatchNormalization's scale and bias, biases). */
KILN_OM_FN bool kiln_om_no_decay(int no_decay_bn_bias, int ndim) { return no_decay_bn_bias && ndim <= 1; }

/* Gradient accumulation, one element: the first micro-batch of a step (first) takes the
 * gradient, later ones add it, the last (last) divides the sum by K: the trainer's order. */
KILN_OM_FN float kiln_om_accumulate1(bool first, bool last, int64_t K, float sum, float g) {
    float a = first ? g : KILN_OM_ADD(sum, g);
    if (last) a = KILN_OM_DIV(a, (float)K);
    return a;
}

/* Optimizer state tensors per parameter: SGD 1 with momentum (else 0), LARS 1 (its
 * momentum buffer), the others 2. */
KILN_OM_FN int kiln_om_states(int opt, float momentum) {
    return opt == KILN_OM_SGD ? (momentum != 0.f) : opt == KILN_OM_LARS ? 1 : 2;
}

/* PyTorch's GradScaler.update after a step whose gradients had inf/NaN (found) or not:
 * found: the scale times backoff, the growth tracker 0; else the tracker counts the clean
 * step and, at growth_interval, the scale times growth (kept if that is not finite) and the
 * tracker 0. dynamic false (bf16: a fixed scale of 1): scale and tracker stay. Every found
 * step counts as skipped (the optimizer leaves the weights). */
KILN_OM_FN void kiln_om_scaler_update(bool found, bool dynamic, float growth, float backoff, int64_t interval,
                                      float *scale, int64_t *tracker, int64_t *skipped) {
    if (found) *skipped += 1;
    if (!dynamic) return;
    if (found) {
        *scale = KILN_OM_MUL(*scale, backoff);
        *tracker = 0;
    } else if (*tracker + 1 >= interval) {
        const float grown = KILN_OM_MUL(*scale, growth);
        if (isfinite(grown)) *scale = grown;
        *tracker = 0;
    } else {
        *tracker += 1;
    }
}

/* The attributes of kiln.OptimizerStep (optimizer_step.c) and kiln.LossScaleUpdate
 * (loss_scale_update.c), read and checked as their CPU references read them (and against the
 * node's input and output counts), for the CUDA kernels. A kiln_status; a message on c->kctx. */
#ifdef __cplusplus
extern "C" {
#endif
struct kiln_op_ctx;
int kiln_optimizer_step_config(struct kiln_op_ctx *c, kiln_om_hyper *h, kiln_om_schedule *s, int *n, int *ns);
/* Whether parameter k of a kiln.OptimizerStep node takes weight decay (its no_decay attribute). */
struct kiln_node;
bool kiln_optimizer_step_decays(const struct kiln_node *nd, int k);
int kiln_grad_accumulate_config(struct kiln_op_ctx *c, int *n, int64_t *accumulate);
int kiln_loss_scale_update_config(struct kiln_op_ctx *c, bool *dynamic, float *growth, float *backoff,
                                  int64_t *interval);
#ifdef __cplusplus
}
#endif

#endif
