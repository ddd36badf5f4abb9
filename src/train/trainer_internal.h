/* trainer_internal.h — the trainer's state, shared by trainer.c and checkpoint.c. Its
 * trained tensors (kiln_param, kiln_state) and counters are the backend interface's types
 * (src/core/backend.h): a backend's training engine sees them through a kiln_train_view. */
#ifndef KILN_TRAINER_INTERNAL_H
#define KILN_TRAINER_INTERNAL_H

#include "../core/backend.h"
#include "../core/internal.h"

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
    int64_t param_count;
    kiln_train_counters n;    /* micro_steps, steps, skipped_steps, loss_scale, clean_steps */
    kiln_tensor *scale_input; /* fp16/bf16: the scalar fed as dL/dloss (the loss scale) */
    /* The optimizer update as graph nodes (src/train/optim_graph.h): the carried state,
     * graph input carried_names[j] fed carried[j] (a parameter, the loss scale, or a tensor
     * owned here: optimizer states, whose data the params' state[] point at, counters,
     * accumulation sums), its next value output 1 + j; carried_feed[j]: its feed index. */
    int n_carried, n_feeds, n_outs;
    char **carried_names;
    kiln_tensor **carried;
    bool *carried_owned;
    int *carried_feed;
    kiln_tensor *step_count, *micro_count, *growth_count, *skipped_count;
    /* the training engine of the session's backend: every step goes through it */
    const kiln_backend_train_i *engine;
    void *tr;
    kiln_train_view view; /* what the engine sees of this trainer */
    int64_t from_epoch, from_sample; /* kiln_trainer_set_epoch_start (from_epoch -1: none) */
};

/* A trainer for planning only (kiln_trainer_plan_memory, kiln_trainer_max_batch): the
 * training graph exactly as kiln_trainer_create builds it for o->device (its layout, fusions
 * and precision), with no session and no memory limit fitted, so a host without the device
 * can plan a device's step (tests/test_recompute.c: CUDA's graph on the CPU). A build without
 * the device's backend lays the graph out without the fusions that need its kernels
 * (kiln_pass_device_has). kiln_trainer_step and the rest need a session: not for this one. */
kiln_status kiln_trainer_create_plan(kiln_model *fwd, const char *loss, const kiln_train_options *o,
                                     kiln_trainer **out);

/* The learning rate of step `step` (kiln_lr_schedule, src/core/schedule.h). */
float kiln_trainer_lr_at(const kiln_train_options *o, int64_t step);
/* Weights and state on a device: bring the host copies up to date (no-op on the CPU), and
 * send them back (after a checkpoint load). */
kiln_status kiln_trainer_sync_host(kiln_trainer *t);
kiln_status kiln_trainer_sync_device(kiln_trainer *t);

#endif
