/* optim_graph.h — the optimizer update as nodes of the training graph.
 *
 * kiln_optim_graph_append extends an open training graph (forward + backward, before
 * kiln_model_finalize) with the step's tail:
 *
 *   without loss scaling (amp off, or no loss_scale value given):
 *     kiln.OptimizerStep(step, -, -, params..., grads..., states...)
 *         -> step', params'..., states'...
 *   with gradient accumulation (accumulate = K > 1; not with loss scaling):
 *     kiln.GradAccumulate(micro, grads..., sums...) -> micro', skip, sums'...
 *     kiln.OptimizerStep(step, skip, -, params..., sums'..., states...)
 *         (the update runs on each step's K-th micro-batch, on the mean of the K gradients)
 *   with loss scaling (loss_scale: the f32 scalar graph input fed as dL/dloss):
 *     kiln.NonFiniteCheck(loss_scale, grads...) -> found_inf, inv_scale
 *     kiln.OptimizerStep(step, found_inf, inv_scale, params..., grads..., states...)
 *         -> step', params'..., states'...     (nothing moves when found_inf is set)
 *     kiln.LossScaleUpdate(loss_scale, found_inf, growth_tracker, skipped)
 *         -> loss_scale', growth_tracker', skipped'   (GradScaler: 2, 0.5, 2000; the scale
 *                                                      moves under fp16 only)
 *
 * The training state is graph inputs: the parameters and the loss scale (the caller's),
 * and the ones this function adds, each an input named "kiln:..." — the step count, the
 * optimizer states (unless the caller passes its own) and, with loss scaling, the growth
 * tracker and the skipped-step count. Each run computes their next values as outputs
 * (value indices in kiln_optim_graph); the caller adds those it wants as graph outputs and
 * feeds them back as the next run's inputs. Every op of the tail is written so that an
 * output may share its input's storage (an in-place update), bit for bit the same.
 *
 * A trainer uses it so (tests/test_optim_graph.c does exactly this against the trainer):
 *   1. build the training graph as today (parameters lifted to inputs, "kiln:loss_scale"
 *      under mixed precision, kiln_autograd_seeded), reset the outputs, add the loss;
 *   2. kiln_optim_graph_append(m, &opts, n, params, grads, NULL, loss_scale_or_-1, &g);
 *   3. kiln_optim_graph_carried(&g, in, next): add each next[i] as a graph output (the
 *      gradients need not be outputs any more), finalize, run the passes, make the session;
 *   4. feed each in[i] a tensor the trainer owns (zeros, the step count 0, the scale
 *      65536 under fp16) and run; on the CPU every next value comes back in its input's
 *      buffer (check outputs[j]->data == the fed tensor's data; copy where not);
 *   5. the counters (steps, skipped steps, loss scale, growth tracker) are those tensors'
 *      values: read them for statistics and checkpoints, write them on resume.
 */
#ifndef KILN_OPTIM_GRAPH_H
#define KILN_OPTIM_GRAPH_H

#include "../core/internal.h"

typedef struct kiln_optim_graph {
    int n_params;
    int n_states;        /* optimizer states per parameter (SGD: 1 with momentum else 0; others 2) */
    /* graph inputs (value indices; -1 where absent) */
    int step;            /* i64 scalar: optimizer steps taken; feed 0 at the start */
    int loss_scale;      /* the f32 scalar given by the caller, or -1 */
    int growth_tracker;  /* i64 scalar: clean steps since the scale last changed (feed 0) */
    int skipped;         /* i64 scalar: steps skipped for inf/NaN (feed 0) */
    int *state_in;       /* (n_params * n_states): state j of parameter k at k * n_states + j;
                            feed zeros at the start (PyTorch's initial state) */
    int *param_in;       /* (n_params) the caller's parameters */
    int micro;           /* gradient accumulation (accumulate > 1): i64 scalar, micro-steps
                            taken (feed 0); else -1 */
    int *acc_in;         /* (n_params) accumulation: the running sums, f32 (feed anything: the
                            first micro-batch overwrites them); else NULL */
    int micro_out, *acc_out;
    /* the next values (value indices; -1 where absent) */
    int step_out, loss_scale_out, growth_tracker_out, skipped_out;
    int found_inf;       /* f32 scalar: 1 when this step's gradients had inf/NaN */
    int *param_out;      /* (n_params) */
    int *state_out;      /* (n_params * n_states) */
} kiln_optim_graph;

/* Append the update of params[k] (value indices of f32 graph inputs) by grads[k] (value
 * indices of their gradients, f32 / f16 / bf16) to the open model m, with o's optimizer,
 * hyper-parameters, schedule and amp mode (o as kiln_trainer_create completes it: lr, betas,
 * eps, rho, gamma filled in). states: value indices of the optimizer states (n_params *
 * n_states, f32 graph inputs of the parameters' shapes), or NULL to have them added as graph
 * inputs "kiln:<param>:state<j>". loss_scale: the f32 scalar input fed as dL/dloss under
 * mixed precision, -1 without. On success *out holds the value indices (free with
 * kiln_optim_graph_clear); on failure the model may hold part of the tail (discard it). */
kiln_status kiln_optim_graph_append(kiln_model *m, const kiln_train_options *o, int n_params, const int *params,
                                    const int *grads, const int *states, int loss_scale, kiln_optim_graph *out);
void kiln_optim_graph_clear(kiln_optim_graph *g);

/* What one step carries to the next: graph input in_values[i] takes the value of
 * next_values[i]. Order: step, the parameters, the states, then (with accumulation)
 * the micro-step count and the sums, then (with loss scaling) loss scale, growth tracker,
 * skipped. Returns the count; the arrays (that many entries) may be
 * NULL to ask for it. Make the next values graph outputs and feed them back (the CPU
 * planner computes each in its input's buffer, so there is nothing to copy: see
 * kiln_op_def.inplace_input). */
int kiln_optim_graph_carried(const kiln_optim_graph *g, int *in_values, int *next_values);

/* The attributes of a kiln.OptimizerStep node for o and n_params (kiln_attr array, owned by
 * the caller: kiln_attr_clear each, then free). For tests that build the node themselves. */
kiln_status kiln_optim_step_attrs(kiln_context *ctx, const kiln_train_options *o, int n_params, kiln_attr **attrs,
                                  int *n_attrs);
/* The same with the no_decay attribute: n_params ints, 1 where parameter k takes no weight
 * decay (NULL: none is excluded). */
kiln_status kiln_optim_step_attrs_nd(kiln_context *ctx, const kiln_train_options *o, int n_params,
                                     const int64_t *no_decay, kiln_attr **attrs, int *n_attrs);

#endif
