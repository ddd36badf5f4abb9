/* cuda_plan.h — a plan lowered onto CUDA (see cuda_plan.c). C interface. */
#ifndef KILN_CUDA_PLAN_H
#define KILN_CUDA_PLAN_H

#include "cuda_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cuda_plan kiln_cuda_plan;

/* Build the host plan for these inputs, check every node has a CUDA kernel, lay out and
 * allocate the plan's device memory, upload its constants. */
kiln_status kiln_cuda_plan_create(kiln_cuda *cu, kiln_model *m, kiln_tensor *const *inputs, bool fold,
                                  kiln_cuda_plan **out);
/* The same, with graph input i read from resident device memory bound[i] (a trainer's
 * weights) where bound[i] is not NULL: no slot is allocated for it and runs never upload
 * it. use_graph false: never capture (every run launches the kernels one by one). */
kiln_status kiln_cuda_plan_create_bound(kiln_cuda *cu, kiln_model *m, kiln_tensor *const *inputs, bool fold,
                                        void *const *bound, bool use_graph, kiln_cuda_plan **out);
/* Device address of value v's data in this plan (NULL when it has none). */
void *kiln_cuda_plan_value_ptr(kiln_cuda_plan *cp, int v);
/* Work enqueued after the run list on every run, and captured with it into the CUDA
 * graph (e.g. the optimizer update): fn must only enqueue on the stream. */
void kiln_cuda_plan_set_epilogue(kiln_cuda_plan *cp, kiln_status (*fn)(void *arg), void *arg);
/* Work enqueued before the run list on every run and captured with it (e.g. gathering the
 * batch from a data set on the device into the input slots). */
void kiln_cuda_plan_set_prologue(kiln_cuda_plan *cp, kiln_status (*fn)(void *arg), void *arg);
/* Forget the captured CUDA graph: the next enqueue captures the run list again (after a
 * prologue's or epilogue's buffers moved: the graph holds the addresses it was captured with). */
void kiln_cuda_plan_drop_graph(kiln_cuda_plan *cp);
void kiln_cuda_plan_free(kiln_cuda_plan *cp);
bool kiln_cuda_plan_matches(const kiln_cuda_plan *cp, kiln_tensor *const *inputs);
struct kiln_plan *kiln_cuda_plan_host(kiln_cuda_plan *cp);
/* Upload inputs and enqueue the run (replaying the captured CUDA graph from the second run
 * on when use_graph); returns without waiting for the device. inputs NULL: upload nothing
 * (a prologue fills the input slots). */
kiln_status kiln_cuda_plan_enqueue(kiln_cuda_plan *cp, kiln_tensor *const *inputs, bool use_graph);
/* Enqueue, download the outputs into host buffers owned by the plan, and wait. */
kiln_status kiln_cuda_plan_run(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int n_outputs,
                               const kiln_tensor **outputs);
/* Enqueue and write output j into outputs[j] (host memory, converted to its layout, or
 * this device's memory); inputs may be host or device tensors. Waits unless the context
 * has the caller's stream and every input and output is on the device. */
kiln_status kiln_cuda_plan_run_into(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int n_outputs,
                                    kiln_tensor *const *outputs);

/* Benchmark timing (see cuda_plan.c): compute_ms has iters entries. inputs NULL: nothing
 * uploaded (a prologue fills the input slots). */
kiln_status kiln_cuda_plan_time(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int iters, double *compute_ms,
                                double *h2d_ms, double *d2h_ms);

/* Per-node profile: `iters` passes running the nodes one by one with events around each;
 * ms and start_ms have iters * n_exec entries (pass-major), start_ms from the pass start.
 * Nodes are the host plan's run list (kiln_plan_view of kiln_cuda_plan_host). pro_ms /
 * epi_ms (iters entries, or NULL): the prologue / epilogue run in each pass too, timed on
 * their own (inputs NULL: nothing uploaded, the prologue fills the input slots). */
kiln_status kiln_cuda_plan_profile(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int iters, double *ms,
                                   double *start_ms, double *pro_ms, double *epi_ms);

#ifdef __cplusplus
}
#endif
#endif
