/*
 * loss_train.c — what the training losses of table.c's block "training: normalization,
 * pools, reductions, losses" take on CUDA.
 *
 * SoftmaxCrossEntropyLoss(X, target, weight?) -> loss, log_prob? and its gradient
 * kiln.SoftmaxCrossEntropyLossGrad(X, target, weight?, dLoss?, dLogProb?) -> dX compute,
 * for X (N, C) in f32 and a mean or sum reduction, exactly what kiln.LogSoftmaxNLL and
 * kiln.LogSoftmaxNLLGrad compute (src/ops/log_softmax_nll.c: the same inputs in the same
 * order, the same attributes, f32 outputs), so they run those kernels (loss.cu). The
 * precision pass keeps the loss f32 (KILN_PREC_FP32), so training graphs meet only f32;
 * other ranks, dtypes and reduction none are refused with the reason.
 */
#include "norm_train.h"

#include <stdio.h>
#include <string.h>

static bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }

bool kiln_cuda_sup_sce(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_tensor *x = c->in[0];
    if (x->dtype != KILN_F32 || x->ndim != 2) {
        snprintf(why, n, "X is %s of rank %d (f32 (N, C) is supported)", kiln_dtype_name(x->dtype), x->ndim);
        return false;
    }
    if (!present(c, 1) || (c->in[1]->dtype != KILN_I32 && c->in[1]->dtype != KILN_I64)) {
        snprintf(why, n, "targets must be int32 or int64");
        return false;
    }
    if (present(c, 2) && !kiln_cuda_float_dtype(c->in[2]->dtype) && c->in[2]->dtype != KILN_F64) {
        snprintf(why, n, "weight has dtype %s", kiln_dtype_name(c->in[2]->dtype));
        return false;
    }
    const char *red = kiln_attr_string(c->node, "reduction", "mean");
    if (strcmp(red, "mean") != 0 && strcmp(red, "sum") != 0) {
        snprintf(why, n, "reduction '%s' (mean and sum are supported)", red);
        return false;
    }
    for (int i = 3; i < c->n_in; i++)
        if (present(c, i) && c->in[i]->dtype != KILN_F32) {
            snprintf(why, n, "input %d has dtype %s (f32 expected)", i, kiln_dtype_name(c->in[i]->dtype));
            return false;
        }
    if (c->n_in > 5) {
        snprintf(why, n, "%d inputs (at most 5)", c->n_in);
        return false;
    }
    for (int k = 0; k < c->n_out; k++)
        if (c->out[k] && c->out[k]->dtype != KILN_F32) {
            snprintf(why, n, "output %d has dtype %s", k, kiln_dtype_name(c->out[k]->dtype));
            return false;
        }
    return true;
}
