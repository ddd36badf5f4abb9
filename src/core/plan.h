/*
 * plan.h — lowering a model for one input shape: shape/dtype inference with constant
 * folding, memory planning into one arena, and the list of nodes a run executes.
 */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include "internal.h"

typedef struct kiln_plan kiln_plan;

/* Infer shapes and dtypes at finalize time when the graph inputs' shapes are static;
 * records them on the model's values. Nodes that need run-time values are skipped. */
kiln_status kiln_infer_static(kiln_model *m);

/* Build a plan for these inputs (n_inputs == m->n_inputs). fold: constant folding.
 * host_memory: allocate the arena and workspace on the host (the CPU backend); a device
 * backend passes false and lays out its own arena from the plan's offsets. */
kiln_status kiln_plan_build(kiln_model *m, kiln_tensor *const *inputs, bool fold, bool host_memory,
                            kiln_plan **out);
/* The same, for a device that replays the run list as one captured graph over a main
 * stream and side_streams more (0..KILN_PLAN_MAX_SIDE_STREAMS): nodes off the run list's
 * longest path are assigned to side streams, each node lists the nodes on other streams it
 * must wait for, and the memory plan keeps every value a side node reads or writes alive
 * for as long as that node may run alongside the main stream. The run list's order, and
 * so a one-stream run of it, is unchanged. */
#define KILN_PLAN_MAX_SIDE_STREAMS 4
kiln_status kiln_plan_build_ex(kiln_model *m, kiln_tensor *const *inputs, bool fold, bool host_memory,
                               int side_streams, kiln_plan **out);

/* The arena and workspace bytes of a plan of these inputs, nothing allocated and nothing
 * run (constants folded): host_layout as a host plan lays it out (the CPU's in-place
 * updates of graph inputs; inputs' data may be NULL), else as a device plan with
 * side_streams. Memory planning (src/train/memory.c). */
kiln_status kiln_plan_measure(kiln_model *m, kiln_tensor *const *inputs, bool host_layout, int side_streams,
                              size_t *arena_bytes, size_t *workspace_bytes);

/* A device kernel's scratch for node c (shapes, dtypes, attributes: c's tensors hold no
 * data), as a backend's workspace_size says (src/core/backend.h). */
typedef kiln_status (*kiln_plan_workspace_fn)(void *user, kiln_op_ctx *c, size_t *bytes);
/* kiln_plan_measure of a device plan (side_streams) whose backend gives each stream its own
 * workspace of the largest scratch any node asks of `ws` (src/cuda/cuda_plan.c): the
 * workspace bytes are that, rounded up to 256, times the plan's streams (0 when ws is NULL). */
kiln_status kiln_plan_measure_device(kiln_model *m, kiln_tensor *const *inputs, int side_streams,
                                     kiln_plan_workspace_fn ws, void *ws_user, size_t *arena_bytes,
                                     size_t *workspace_bytes);

/* What a device backend reads from a plan (all owned by the plan). */
typedef struct kiln_plan_view_t {
    const kiln_model *m;
    int n_values;
    const kiln_tensor *vt;  /* (n_values) dtype and shape of every value; host data for constants */
    const bool *known;      /* (n_values) constant (initializer or folded) */
    const size_t *offset;   /* (n_values) arena offset of values computed by a run, SIZE_MAX otherwise */
    size_t arena_bytes;
    int n_exec;             /* nodes a run executes, in order */
    const void *exec;
    size_t exec_stride;
    /* Streams (kiln_plan_build_ex): n_streams (1: no side streams, stream NULL); stream[e]
     * of run-list node e (0: the main stream); e waits, before it starts, for the nodes
     * waits[wait_at[e] .. wait_at[e + 1]) (on other streams) to finish. Every stream
     * starts after the run's start and is joined into the main stream at its end. */
    int n_streams;
    const int *stream, *wait_at, *waits;
} kiln_plan_view_t;
void kiln_plan_view(const kiln_plan *p, kiln_plan_view_t *v);
/* The (host) op context of run-list entry i: the context's tensors carry shapes and host
 * constants; a device backend builds its own with device pointers. */
const kiln_op_ctx *kiln_plan_exec_op_ctx(const kiln_plan_view_t *v, int i);
void kiln_plan_free(kiln_plan *p);
/* True if the plan was built for inputs of these shapes (and, for inputs whose values
 * shape the graph, these values). */
/* Whether graph input i's values (not only its shape) shape the plan (a Reshape's shape
 * fed by a graph input): plans read them on the host when they are built. */
bool kiln_plan_input_sets_shapes(const kiln_model *m, int i);
bool kiln_plan_matches(const kiln_plan *p, kiln_tensor *const *inputs);
/* Execute on the CPU. outputs: borrowed tensors valid until the next run. */
kiln_status kiln_plan_run_cpu(kiln_plan *p, kiln_tensor *const *inputs, uint64_t seed,
                              int n_outputs, const kiln_tensor **outputs);
void kiln_plan_get_stats(const kiln_plan *p, kiln_plan_stats *out);
/* Per-node host timing on the CPU (kiln bench --profile): `iters` passes of the run list;
 * ms[i * n_exec + e] is node e's time in pass i, start_ms its start from the pass's. */
kiln_status kiln_plan_profile_cpu(kiln_plan *p, kiln_tensor *const *inputs, uint64_t seed, int iters,
                                  double *ms, double *start_ms);
/* A profile (kiln_session_profile's) from `iters` passes over hp's run list: ms and
 * start_ms pass-major (iters * n_exec), as kiln_plan_profile_cpu and
 * kiln_cuda_plan_profile write them. Each node's time is its median; the traced pass
 * (start_ms, dur_ms) is the one of median total. */
kiln_status kiln_profile_from_passes(kiln_context *ctx, kiln_plan *hp, int iters, const double *ms,
                                     const double *start_ms, kiln_profile *out);
/* What a node with c's shapes computes and moves: FLOPs of convolutions and matrix
 * products (Conv, ConvTranspose, Gemm, MatMul, kiln's FusedConv / FusedGemm, and the
 * convolution gradients ConvGradInput / ConvGradWeight: 2 per multiply-add; 0 for other
 * ops) and the bytes of its inputs and outputs. */
void kiln_op_cost(const kiln_op_ctx *c, double *flops, double *bytes);

/* Fuzzing only (fuzz/fuzz_run.c): when set, called by every plan walk (a session's plans
 * and the static inference at finalize) for each node once its output shapes are inferred
 * and before it is folded or planned; a status other than KILN_OK stops the walk with it
 * (the hook leaves the message). Lets a harness refuse a model whose tensors or work are
 * too big before kiln allocates or computes them. */
extern kiln_status (*kiln_plan_node_hook)(kiln_op_ctx *c);

/* kiln_op_eval (internal.h) with extra_ws more bytes of workspace than the op asks for, as a
 * plan's one shared workspace gives every node but its largest user (the op self-tests run
 * each case that way too: an op must not read its thread count or its result off the size). */
kiln_status kiln_op_eval_ws(kiln_context *ctx, const kiln_node *node, int n_in, kiln_tensor **in, int n_out,
                            kiln_tensor **out, size_t extra_ws);

#endif
