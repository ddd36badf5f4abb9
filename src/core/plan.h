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

/* Build a plan for these inputs (n_inputs == m->n_inputs). fold: constant folding. */
kiln_status kiln_plan_build(kiln_model *m, kiln_tensor *const *inputs, bool fold,
                            kiln_plan **out);
void kiln_plan_free(kiln_plan *p);
/* True if the plan was built for inputs of these shapes (and, for inputs whose values
 * shape the graph, these values). */
bool kiln_plan_matches(const kiln_plan *p, kiln_tensor *const *inputs);
/* Execute on the CPU. outputs: borrowed tensors valid until the next run. */
kiln_status kiln_plan_run_cpu(kiln_plan *p, kiln_tensor *const *inputs, uint64_t seed,
                              int n_outputs, const kiln_tensor **outputs);
void kiln_plan_get_stats(const kiln_plan *p, kiln_plan_stats *out);

#endif
