/*
 * schedule.h — the learning-rate schedule, written once: the CPU trainer and the CUDA
 * step end (src/cuda/optim.cu, on the device) compile this same function, in double.
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
 * schedule, times the linear warm-up. */
KILN_HOST_DEVICE static inline float kiln_lr_schedule(const kiln_train_options *o, int64_t step) {
    double lr = o->lr;
    if (o->schedule == KILN_SCHEDULE_STEP) lr *= pow((double)o->gamma, (double)(step / o->step_size));
    else if (o->schedule == KILN_SCHEDULE_COSINE)
        lr *= 0.5 * (1 + cos(3.14159265358979323846 * (double)(step < o->total_steps ? step : o->total_steps) /
                             (double)o->total_steps));
    if (o->warmup_steps > 0 && step < o->warmup_steps) lr *= (double)(step + 1) / (double)o->warmup_steps;
    return (float)lr;
}

#endif
