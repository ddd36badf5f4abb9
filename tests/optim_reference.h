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
        }
    }
}

#endif
