/*
 * schedule.h — the learning-rate schedule, written once (kiln_lr_at): the CPU trainer, the
 * CUDA step end (src/cuda/optim.cu, on the device) and the optimizer ops (src/ops/optim_math.h)
 * compile this same function, in double.
 */
#ifndef KILN_SCHEDULE_H
#define KILN_SCHEDULE_H

#include "kiln.h"

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

/* The learning rate of optimizer step `step` (0-based): lr, times the step or cosine
 * schedule, times the linear warm-up. The one formula: the trainer (kiln_lr_schedule) and the
 * optimizer ops' CPU reference and CUDA kernels (kiln_om_lr_at, src/ops/optim_math.h) call it.
 * kind: a kiln_schedule value; step_size > 0 for STEP, total_steps > 0 for COSINE and
 * total_steps > warmup_steps for POLY. */
KILN_HOST_DEVICE static inline float kiln_lr_at(float lr0, int kind, int64_t step_size, float gamma,
                                                int64_t total_steps, int64_t warmup_steps, int64_t step) {
    double lr = lr0;
    if (kind == KILN_SCHEDULE_STEP) lr *= pow((double)gamma, (double)(step / step_size));
    else if (kind == KILN_SCHEDULE_COSINE)
        lr *= 0.5 * (1 + cos(3.14159265358979323846 * (double)(step < total_steps ? step : total_steps) /
                             (double)total_steps));
    else if (kind == KILN_SCHEDULE_POLY && step > warmup_steps) {
        /* power 2 over the steps after the warm-up (MLPerf's LARS schedule): 1 at its start, 0 at total */
        const int64_t span = total_steps - warmup_steps, t = step - warmup_steps;
        const double f = t < span ? 1.0 - (double)t / (double)span : 0.0;
        lr *= f * f;
    }
    if (warmup_steps > 0 && step < warmup_steps) lr *= (double)(step + 1) / (double)warmup_steps;
    return (float)lr;
}

KILN_HOST_DEVICE static inline float kiln_lr_schedule(const kiln_train_options *o, int64_t step) {
    return kiln_lr_at(o->lr, (int)o->schedule, o->step_size, o->gamma, o->total_steps, o->warmup_steps, step);
}

#endif
