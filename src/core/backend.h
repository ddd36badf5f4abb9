/*
 * backend.h — the one interface every backend implements (as ggml's ggml_backend_i or
 * SQLite's VFS): a table of functions per backend. Sessions, passes and the trainer hold a
 * kiln_backend_i pointer and an instance, and never ask which backend it is; the only
 * place that knows which backends this build has is the registration (src/backend/registry.c).
 *
 *   CPU:  src/cpu/backend.c (plans: src/core/plan.c), training: src/cpu/train.c
 *   CUDA: src/cuda/backend.c (plans: src/cuda/cuda_plan.c), training: src/cuda/train.c
 *
 * The dependency goes one way: train -> this interface <- backends. A backend never calls
 * into src/train/; what it needs of a trainer comes in a kiln_train_view.
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kiln_plan;

/* How a backend instance is opened (a session's or a trainer's settings). */
typedef struct kiln_backend_options {
    int allow_tf32;     /* f32 convolutions and products may use TF32 (CUDA) */
    int no_autotune;    /* cuDNN's heuristic instead of timing algorithms (CUDA) */
    int deterministic;  /* only deterministic algorithms (CUDA) */
    int no_conv_gemm;   /* 1x1 convolutions always through cuDNN (CUDA) */
    int no_conv_direct; /* one-channel convolutions always through cuDNN (CUDA) */
    int no_conv_depthwise; /* depthwise convolutions (and dX) always through cuDNN (CUDA) */
    int no_flash_attention; /* kiln.Attention never on the flash kernel (CUDA) */
    int no_conv_dw_grad;   /* depthwise gradients always through cuDNN (CUDA) */
    int no_streams;     /* a captured plan on one stream only (CUDA) */
    int device_index;   /* which device of the backend's kind (CUDA: the ordinal) */
    void *stream;       /* the caller's stream runs are ordered with (CUDA; NULL: none) */
} kiln_backend_options;

/* How a plan is built. */
typedef struct kiln_backend_plan_options {
    bool fold;                /* constant folding */
    bool use_graph;           /* replay one captured device graph where the backend can */
    /* graph input i lives, resident, at bound[i] (backend memory) where bound[i] is not
     * NULL: runs never copy it in (a trainer's weights). NULL: none. The CPU reads every
     * input from the tensors a run is given. */
    void *const *bound;
} kiln_backend_plan_options;

/* Work enqueued before (prologue) and after (epilogue) a plan's run list on every run, and
 * captured with it where the backend captures: fn must only enqueue work. */
typedef kiln_status (*kiln_backend_hook)(void *arg);

typedef struct kiln_backend_train_i kiln_backend_train_i;

typedef struct kiln_backend_i {
    const char *name; /* "cpu", "cuda" */
    kiln_device device;

    /* ---------------------------------------------------------------- instance */
    kiln_status (*create)(kiln_context *ctx, const kiln_backend_options *o, void **out);
    void (*free)(void *be);

    /* --------------------------------------------------------------------- ops */
    /* Whether op (a registry index) has a kernel at all (passes ask before they rewrite
     * into an op, e.g. a fusion waiting for its kernel). */
    bool (*has_op)(int op);
    /* KILN_OK when node c->node with c's dtypes, shapes and attributes runs here;
     * otherwise KILN_ERR_UNSUPPORTED with the reason on c->kctx. */
    kiln_status (*supports)(kiln_op_ctx *c);
    /* The bytes of device scratch node c's kernel needs (c's dtypes, shapes and attributes;
     * its tensors need no data), which a plan sets aside per stream: memory planning counts
     * them (src/train/memory.c). NULL: none beyond the host plan's cpu_workspace. */
    kiln_status (*workspace_size)(void *be, kiln_op_ctx *c, size_t *bytes);

    /* ------------------------------------------------------------------- plans */
    /* A plan for these input shapes: the host plan (kiln_plan_build) lowered onto the
     * backend, its memory laid out and allocated. */
    kiln_status (*plan_create)(void *be, kiln_model *m, kiln_tensor *const *inputs,
                               const kiln_backend_plan_options *o, void **out);
    void (*plan_free)(void *plan);
    /* The host plan behind it (shapes, run list, stats, profiles). */
    struct kiln_plan *(*plan_host)(void *plan);
    /* Where value v lives during a run (backend memory; NULL when it has none). */
    void *(*plan_value)(void *plan, int v);
    void (*plan_set_hooks)(void *plan, kiln_backend_hook prologue, kiln_backend_hook epilogue, void *arg);
    /* Run, writing output j into the caller's outputs[j] (host or this backend's device
     * memory, checked by the session: dtype, dims, device; device outputs NCHW), inputs
     * read from host or this backend's device tensors. Waits, unless the instance has the
     * caller's stream and every input and output is on the device. NULL: the session runs
     * plan_run and copies on the host. */
    kiln_status (*plan_run_into)(void *plan, kiln_tensor *const *inputs, uint64_t seed, int n_outputs,
                                 kiln_tensor *const *outputs);
    /* Run and wait; outputs: host tensors owned by the plan, valid until the next run. */
    kiln_status (*plan_run)(void *plan, kiln_tensor *const *inputs, uint64_t seed, int n_outputs,
                            const kiln_tensor **outputs);
    /* Enqueue a run (prologue, run list, epilogue) and return without waiting. inputs
     * NULL: nothing copied in (a prologue fills the input slots). */
    kiln_status (*plan_enqueue)(void *plan, kiln_tensor *const *inputs, uint64_t seed);
    /* Device timing of `iters` runs (kiln_session_bench's compute_ms, h2d_ms, d2h_ms);
     * NULL: the host clock's times stand. */
    kiln_status (*plan_time)(void *plan, kiln_tensor *const *inputs, int iters, double *compute_ms, double *h2d_ms,
                             double *d2h_ms);
    /* Per-node profile: `iters` passes of the run list node by node; ms and start_ms
     * pass-major (iters * n_exec); pro_ms / epi_ms (iters, or NULL): the hooks timed on
     * their own. */
    kiln_status (*plan_profile)(void *plan, kiln_tensor *const *inputs, uint64_t seed, int iters, double *ms,
                                double *start_ms, double *pro_ms, double *epi_ms);

    /* ------------------------------------------------------- memory and copies */
    kiln_status (*alloc)(void *be, size_t bytes, void **out);
    void (*dealloc)(void *be, void *p);
    /* Host -> backend memory and back, in order with the work enqueued; download waits. */
    kiln_status (*upload)(void *be, void *dst, const void *src, size_t bytes);
    kiln_status (*download)(void *be, void *dst, const void *src, size_t bytes);
    /* Wait for everything enqueued; report errors found on the device. */
    kiln_status (*sync)(void *be);
    /* The stream runs are ordered on (kiln_session_stream), or NULL. */
    void *(*stream)(void *be);

    /* Device memory outside any instance, for tensors on the device (kiln_tensor_create_on,
     * kiln_tensor_copy); NULL for the host. device_index: the device of that kind.
     * mem_copy copies between host (dev -1) and device memory, or within the device, and
     * returns when done. */
    kiln_status (*mem_alloc)(kiln_context *ctx, int device_index, size_t bytes, void **out);
    void (*mem_free)(int device_index, void *p);
    kiln_status (*mem_copy)(kiln_context *ctx, void *dst, int dst_dev, const void *src, int src_dev, size_t bytes);
    /* KILN_OK when the device of that index exists (else KILN_ERR_DEVICE naming it). */
    kiln_status (*check_device)(kiln_context *ctx, int device_index);
    /* The device's free and total memory in bytes (kiln_device_memory); NULL: the host's. */
    kiln_status (*mem_info)(kiln_context *ctx, int device_index, size_t *free_bytes, size_t *total_bytes);
    /* Host memory the device copies from fastest (CUDA: page-locked), for kiln_host_alloc;
     * NULL: plain host memory serves. */
    kiln_status (*host_alloc)(kiln_context *ctx, size_t bytes, void **out);
    void (*host_free)(void *p);

    /* ---------------------------------------------------------------- training */
    const kiln_backend_train_i *train;
    /* Whether a trainer's session runs the inference passes over the training graph (the
     * CPU), or plans it as the trainer already rewrote it for the device (CUDA: fusions
     * and layout chosen with the backward graph in view). */
    bool train_session_passes;
} kiln_backend_i;

/* The backend of a device in this build, or NULL when it was built without it
 * (src/backend/registry.c: the registration). */
const kiln_backend_i *kiln_backend_for(kiln_device device);
/* The same, failing with a message naming the device. */
kiln_status kiln_backend_get(kiln_context *ctx, kiln_device device, const kiln_backend_i **out);

/* ================================================================== training
 *
 * What a backend's training engine sees of a trainer (src/train/trainer.c fills it): the
 * training graph (forward + backward: src/train/trainer.c's header), the host copies of
 * the trained tensors, the feeds and the trainer's counters, which the engine advances.
 */

/* A trained tensor: its value (bound to the training graph as an input) and optimizer
 * state (SGD: momentum buffer; Adam: m, v; Adadelta: square_avg, acc_delta: the data of the
 * trainer's carried state tensors); grad: what the frozen reference update reads
 * (tests/optim_reference.h). */
typedef struct kiln_param {
    int fwd_value;      /* value index in the forward model (and its clone) */
    int grad_value;     /* value index of its gradient in the training graph */
    kiln_tensor *value; /* f32, owned */
    int64_t numel;
    const float *grad;  /* kiln_optimizer_update's gradient */
    float *state[2];
} kiln_param;

/* BatchNormalization running statistics: input value and the updated output. */
typedef struct kiln_state {
    int fwd_value;
    int out_value;
    kiln_tensor *value; /* owned */
} kiln_state;

/* The trainer's counters, advanced by the engine's steps. */
typedef struct kiln_train_counters {
    int64_t micro_steps, steps, skipped_steps;
    float loss_scale;    /* fp16: the dynamic loss scale (GradScaler); 1 otherwise */
    int64_t clean_steps; /* fp16: steps since the scale last changed */
} kiln_train_counters;

typedef struct kiln_train_view {
    kiln_context *ctx;
    const kiln_train_options *opts;
    kiln_model *train;          /* forward + backward: inputs data, parameters, states[, loss scale];
                                   outputs: below */
    kiln_session *sess;         /* the session the training graph runs in */
    int n_data_inputs, n_params, n_states;
    kiln_param *params;
    kiln_state *states;
    kiln_tensor **feeds;        /* the training graph's inputs, in its order */
    const kiln_tensor **outs;   /* its outputs, in its order */
    kiln_tensor *scale_input;   /* fp16/bf16: the scalar fed as dL/dloss (the loss scale); else NULL */
    int64_t param_count;
    kiln_train_counters *n;
    /* The optimizer update is nodes of the training graph (src/train/optim_graph.h): the
     * graph's inputs are data, then the carried state
     * (parameters, optimizer states, counters, loss scale, accumulation sums) and the
     * statistics, in feeds[0 .. n_feeds); its outputs the loss, then the carried state's
     * next values (outs[1 + j] is the next value of feeds[carried_feed[j]]), then the
     * updated statistics (outs[1 + n_carried + k]). The i64 scalar counters (NULL where the
     * graph has none): optimizer steps taken, clean steps since the loss scale last moved,
     * skipped steps; the loss scale is scale_input. The engine reads the counters into *n
     * after each step (and counts micro-steps itself); the trainer writes them back. */
    int n_feeds, n_outs, n_carried;
    const int *carried_feed;
    kiln_tensor *step_count, *growth_count, *skipped_count;
} kiln_train_view;

/* A training engine: one per trainer, on its session's backend instance. */
struct kiln_backend_train_i {
    kiln_status (*create)(const kiln_train_view *v, void **out);
    void (*free)(void *tr);
    /* Host copies of weights, optimizer state and statistics (and the counters) to the
     * backend (after create and a checkpoint load), and back (before they are read). */
    kiln_status (*upload)(void *tr);
    kiln_status (*download)(void *tr);
    /* One step: forward, backward, then the optimizer update: the training graph's own
     * nodes (on CUDA lowered to the fused update captured with the step). The batch is
     * in v->feeds[0 .. n_data_inputs), or, resident, gathered by the batch source. *loss
     * (may be NULL) is the step's loss and waits for it. */
    kiln_status (*step)(void *tr, bool resident, float *loss);

    /* The batch source of kiln_trainer_train_epoch: a data set (images f32 (N, ...),
     * labels i64 (N)) in the order of one epoch (kiln_loader_permutation). begin takes
     * the data set and positions it at step `start` of the epoch's samples from position
     * `offset` of its order on (0: the whole epoch; a resumed one: the rest, sharded over
     * the ranks as kiln_loader_shard_from does, `start` counted from its first step);
     * batch(s, b), s the epoch's step as kiln_loader_seek_sample numbers it, puts step s's batch of b
     * samples into v->feeds[0..1] and says whether it is resident (gathered inside the
     * step: the CUDA engine keeps the data set on the device and gathers there) or in the
     * feeds' host memory (the CPU engine gathers on the host). */
    kiln_status (*epoch_begin)(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                               uint64_t seed, int64_t epoch, int64_t offset, int64_t start);
    kiln_status (*epoch_batch)(void *tr, int64_t step, int64_t b, bool *resident);

    /* kiln_trainer_warmup (NULL: nothing to warm up) and kiln_trainer_profile, with the
     * arguments checked; both leave the training state as it was. */
    kiln_status (*warmup)(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch);
    kiln_status (*profile)(void *tr, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch, int iters,
                           int replays, kiln_profile *out, double *step_ms);
};

/* The backend and instance a session runs on (the trainer's engine plans on them). */
const kiln_backend_i *kiln_session_backend(kiln_session *s, void **instance);
/* A session that plans m as given (no passes: a training graph already rewritten for its
 * device) or after the passes; its backend instance is opened with the options that opts
 * ask for, as kiln_session_create's. */
kiln_status kiln_session_create_ex(kiln_model *m, const kiln_session_options *opts, bool apply_passes,
                                   kiln_session **out);

/* ------------------------------------------- shared by the training engines */

/* "adadelta"... for messages and profiles. */
const char *kiln_optimizer_name(kiln_optimizer o);
/* Bytes one optimizer update moves (weights, gradients, states; the statistics copied):
 * for a profile's GB/s. */
double kiln_train_update_bytes(const kiln_train_view *v);
/* Optimizer state tensors per parameter (SGD: 1 with momentum, else 0; Adam, AdamW,
 * Adadelta: 2). */
int kiln_optimizer_states(const kiln_train_options *o);
/* An engine that runs the update nodes its own way (CUDA: its fused tail kernel, captured
 * with the step) plans this instead of v->train: the training graph with the
 * outputs it has without the update, the loss, each parameter's gradient as the update node
 * reads it (f32, after the graph's casts and layout conversions), the updated statistics,
 * and only the nodes they need. Same inputs as v->train (v->feeds fit it). */
kiln_status kiln_train_lower_update(const kiln_train_view *v, kiln_model **out);
/* The dropout seed base of a run: micro-step k runs with base + k. */
static inline uint64_t kiln_train_seed_base(const kiln_train_options *o) {
    return o->seed * 0x9E3779B97F4A7C15ull;
}

#ifdef __cplusplus
}
#endif
#endif
