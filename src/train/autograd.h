/* autograd.h — building the backward graph. */
#ifndef KILN_AUTOGRAD_H
#define KILN_AUTOGRAD_H

#include "../core/internal.h"

/* Extend the open model m (forward nodes in topological order) with nodes computing
 * dL/d(params[i]) for the scalar value `loss`, written to grads[i] (value indices). */
kiln_status kiln_autograd(kiln_model *m, int loss, int n_params, const int *params, int *grads);
/* The same with dL/dloss read from value `seed` (e.g. a graph input holding the fp16 loss
 * scale) instead of the constant 1. */
kiln_status kiln_autograd_seeded(kiln_model *m, int loss, int seed, int n_params, const int *params, int *grads);

#endif
