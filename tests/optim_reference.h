/* optim_reference.h — the trainer's historical CPU optimizer update, frozen as the
 * reference the optimizer's graph op (kiln.OptimizerStep, src/ops/optimizer_step.c) and the
 * CUDA fused update (src/cuda/optim.cu) are checked against bit for bit: PyTorch's SGD
 * (momentum, Nesterov, weight decay), Adam, AdamW and Adadelta, one step over every
 * parameter (p->value by p->grad, states p->state[]), at learning rate lr. Until the
 * optimizer became graph nodes this was the CPU trainer's own loop (src/cpu/train.c). */
#ifndef KILN_TEST_OPTIM_REFERENCE_H
#define KILN_TEST_OPTIM_REFERENCE_H

#include "core/backend.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

static void kiln_optimizer_update(const kiln_train_options *o, int64_t step, float lr, int n, kiln_param *ps) {
    const float wd = o->weight_decay, mom = o->momentum;
    const double bc1 = 1 - pow(o->beta1, (double)(step + 1)), bc2 = 1 - pow(o->beta2, (double)(step + 1));
    for (int k = 0; k < n; k++) {
        kiln_param *p = &ps[k];
        float *w = p->value->data, *s0 = p->state[0], *s1 = p->state[1];
        const float *g = p->grad;
        const int64_t len = p->numel;
        switch (o->optimizer) {
        case KILN_OPTIM_SGD:
            for (int64_t i = 0; i < len; i++) {
                float d = g[i] + wd * w[i];
                if (mom != 0) {
                    s0[i] = step == 0 ? d : mom * s0[i] + d; /* PyTorch: the first step takes the gradient */
                    d = o->nesterov ? d + mom * s0[i] : s0[i];
                }
                w[i] -= lr * d;
            }
            break;
        case KILN_OPTIM_ADAM:
        case KILN_OPTIM_ADAMW: {
            const bool decoupled = o->optimizer == KILN_OPTIM_ADAMW;
            const float b1 = o->beta1, b2 = o->beta2, eps = o->eps;
            for (int64_t i = 0; i < len; i++) {
                float d = g[i];
                if (decoupled) w[i] *= 1 - lr * wd;
                else d += wd * w[i];
                s0[i] = b1 * s0[i] + (1 - b1) * d;
                s1[i] = b2 * s1[i] + (1 - b2) * d * d;
                float mhat = (float)(s0[i] / bc1), vhat = (float)(s1[i] / bc2);
                w[i] -= lr * mhat / (sqrtf(vhat) + eps);
            }
            break;
        }
        case KILN_OPTIM_ADADELTA: {
            const float rho = o->rho, eps = o->eps;
            for (int64_t i = 0; i < len; i++) {
                float d = g[i] + wd * w[i];
                s0[i] = rho * s0[i] + (1 - rho) * d * d;               /* square_avg */
                float delta = sqrtf(s1[i] + eps) / sqrtf(s0[i] + eps) * d;
                s1[i] = rho * s1[i] + (1 - rho) * delta * delta;       /* acc_delta */
                w[i] -= lr * delta;
            }
            break;
        }
        default: break; /* LARS, LAMB: kiln_reference_update below */
        }
    }
}

/* The large-batch options, written out plainly from their papers' and PyTorch's formulas
 * (not from src/ops/optim_math.h), as the reference kiln.OptimizerStep is checked against
 * within rounding: clip_grad_norm (PyTorch's clip_grad_norm_ over all gradients, norms in
 * double), no_decay[k] (parameter k takes no weight decay; LARS / LAMB: no trust ratio),
 * LARS (MLPerf's: v = m v + lr trust (g + wd w), w -= v) and LAMB (Adam moments with bias
 * correction, u = m^/(sqrt(v^) + eps) + wd w, w -= lr ||w||/||u|| u); the other optimizers
 * go through kiln_optimizer_update on the clipped gradients with the tensor's weight decay. */
static inline void kiln_reference_update(const kiln_train_options *o, int64_t step, float lr, int n, kiln_param *ps,
                                  const bool *no_decay) {
    double total = 0;
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < ps[k].numel; i++) total += (double)ps[k].grad[i] * (double)ps[k].grad[i];
    double coef = 1;
    if (o->clip_grad_norm > 0) {
        const double c = o->clip_grad_norm / (sqrt(total) + 1e-6);
        if (c < 1) coef = c;
    }
    for (int k = 0; k < n; k++) {
        kiln_param *p = &ps[k];
        const int64_t len = p->numel;
        float *w = p->value->data, *s0 = p->state[0], *s1 = p->state[1];
        const bool nd = no_decay && no_decay[k];
        const float wd = nd ? 0.f : o->weight_decay;
        float *g = (float *)malloc(sizeof(float) * (size_t)(len > 0 ? len : 1));
        for (int64_t i = 0; i < len; i++) g[i] = (float)((double)p->grad[i] * coef);
        double wn = 0, gn = 0;
        for (int64_t i = 0; i < len; i++) {
            wn += (double)w[i] * w[i];
            gn += (double)g[i] * g[i];
        }
        wn = sqrt(wn);
        gn = sqrt(gn);
        if (o->optimizer == KILN_OPTIM_LARS) {
            const double trust = !nd && wn > 0 && gn > 0 ? o->lars_eta * wn / (gn + wd * wn) : 1.0;
            for (int64_t i = 0; i < len; i++) {
                s0[i] = (float)(o->momentum * (double)s0[i] + lr * trust * ((double)g[i] + wd * (double)w[i]));
                w[i] -= s0[i];
            }
        } else if (o->optimizer == KILN_OPTIM_LAMB) {
            const double bc1 = 1 - pow(o->beta1, (double)(step + 1)), bc2 = 1 - pow(o->beta2, (double)(step + 1));
            double *u = (double *)malloc(sizeof(double) * (size_t)(len > 0 ? len : 1)), un = 0;
            for (int64_t i = 0; i < len; i++) {
                s0[i] = (float)(o->beta1 * (double)s0[i] + (1 - o->beta1) * (double)g[i]);
                s1[i] = (float)(o->beta2 * (double)s1[i] + (1 - o->beta2) * (double)g[i] * g[i]);
                u[i] = (s0[i] / bc1) / (sqrt(s1[i] / bc2) + o->eps) + wd * (double)w[i];
                un += u[i] * u[i];
            }
            un = sqrt(un);
            const double trust = !nd && wn > 0 && un > 0 ? wn / un : 1.0;
            for (int64_t i = 0; i < len; i++) w[i] = (float)(w[i] - lr * trust * u[i]);
            free(u);
        } else {
            kiln_train_options ok = *o;
            ok.weight_decay = wd;
            kiln_param q = *p;
            q.grad = g;
            kiln_optimizer_update(&ok, step, lr, 1, &q);
        }
        free(g);
    }
}

#endif
