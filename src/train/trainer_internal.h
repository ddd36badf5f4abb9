/* trainer_internal.h — the trainer's state, shared by trainer.c and checkpoint.c. */
#ifndef KILN_TRAINER_INTERNAL_H
#define KILN_TRAINER_INTERNAL_H

#include "../core/internal.h"

/* A trained tensor: its value (bound to the training graph as an input), the gradient of
 * the last step, optimizer state (SGD: momentum buffer; Adam: m, v; Adadelta: square_avg,
 * acc_delta) and, with accumulation, the summed gradient. */
typedef struct kiln_param {
    int fwd_value;      /* value index in the forward model (and its clone) */
    int grad_value;     /* value index of its gradient in the training graph */
    kiln_tensor *value; /* f32, owned */
    int64_t numel;
    const float *grad;  /* gradient used by the next update (arena or acc) */
    float *state[2];
    float *acc;
} kiln_param;

/* BatchNormalization running statistics: input value and the updated output. */
typedef struct kiln_state {
    int fwd_value;
    int out_value;
    kiln_tensor *value; /* owned */
} kiln_state;

/* The CUDA side of a trainer (trainer_cuda.c); NULL for CPU training. */
typedef struct kiln_trainer_cuda kiln_trainer_cuda;

struct kiln_trainer {
    kiln_context *ctx;
    kiln_train_options opts;
    kiln_model *fwd;     /* a private copy of the forward model */
    kiln_model *train;   /* forward + backward graph */
    kiln_session *sess;
    char *loss_name;
    int n_data_inputs;
    int n_params, n_states;
    kiln_param *params;
    kiln_state *states;
    int true_value;      /* the constant `true` fed to Dropout's training_mode */
    kiln_tensor **feeds; /* data inputs, then parameters, then states */
    const kiln_tensor **outs;
    int64_t micro_steps, steps, skipped_steps, param_count;
    float loss_scale;         /* fp16: the dynamic loss scale (GradScaler); 1 otherwise */
    int64_t clean_steps;      /* fp16: steps since the scale last changed */
    kiln_tensor *scale_input; /* fp16/bf16: the scalar fed as dL/dloss (the loss scale) */
    kiln_trainer_cuda *cuda;
};

float kiln_trainer_lr_at(const kiln_train_options *o, int64_t step);
/* CUDA training: copy weights and state to the host copies (no-op on the CPU). */
kiln_status kiln_trainer_sync_host(kiln_trainer *t);

#ifdef KILN_HAVE_CUDA
/* trainer_cuda.c: weights resident on the device, one captured CUDA graph per step. */
kiln_status kiln_trainer_cuda_create(kiln_trainer *t, kiln_trainer_cuda **out);
void kiln_trainer_cuda_free(kiln_trainer_cuda *tc);
/* A step on t->feeds (data inputs set by the caller); *loss (may be NULL) synchronizes. */
kiln_status kiln_trainer_cuda_step(kiln_trainer_cuda *tc, float *loss);
/* Host copies of weights and state from the device, and back. */
kiln_status kiln_trainer_cuda_download(kiln_trainer_cuda *tc);
kiln_status kiln_trainer_cuda_upload(kiln_trainer_cuda *tc);
/* Steps [start, end) of an epoch over a data set copied to the device once. */
kiln_status kiln_trainer_cuda_epoch(kiln_trainer_cuda *tc, const kiln_tensor *images, const kiln_tensor *labels,
                                    int64_t batch, uint64_t seed, int64_t epoch, int64_t start, int64_t end,
                                    float *last_loss);
/* kiln_trainer_warmup on CUDA (arguments checked by the caller). */
kiln_status kiln_trainer_cuda_warmup(kiln_trainer_cuda *tc, const kiln_tensor *images, const kiln_tensor *labels,
                                     int64_t batch);
/* kiln_trainer_profile on CUDA (arguments checked by the caller). */
kiln_status kiln_trainer_cuda_profile(kiln_trainer_cuda *tc, const kiln_tensor *images, const kiln_tensor *labels,
                                      int64_t batch, int iters, int replays, kiln_profile *out, double *step_ms);
#endif
/* "adadelta"... for messages and profiles. */
const char *kiln_optimizer_name(kiln_optimizer o);
/* Bytes one optimizer update moves (weights, gradients, states; the statistics copied):
 * for a profile's GB/s. */
double kiln_trainer_update_bytes(const kiln_trainer *t);
/* One optimizer step over every parameter (the fused update). */
void kiln_optimizer_update(const kiln_train_options *o, int64_t step, float lr, int n, kiln_param *ps);

#endif
