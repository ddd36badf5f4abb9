/* conv_bn_stats.c — a training BatchNormalization takes its batch statistics from the
 * convolution that wrote its input (issue 12; when kiln_pass_options.conv_bn_stats is set,
 * as the trainer does for CUDA training unless KILN_PASS_CONV_BN_STATS is disabled or the
 * environment variable KILN_CUDA_CONV_STATS=0 is set):
 *
 *   y = Conv(x, W, B?)                          (or kiln.FusedConv(x, W, B?, Z?) act=...)
 *   ... = BatchNormalization(y, scale, B, mean, var[, Z]) training_mode=1 [relu=1]
 *     -> y, s, q = kiln.FusedConv(x, W, B?)    (the Conv's attributes; outputs 1, 2: per
 *                                              channel sum and sum of squares of y as written)
 *        ... = BatchNormalization(y, scale, B, mean, var, Z or -, s, q)  (inputs 6, 7)
 *
 * Why: each of ResNet-50's 53 training BNs reads its input twice (the statistics, then the
 * apply pass); with the sums from the convolution's epilogue (cuDNN's ConvolutionFwd ->
 * GenStats, src/cuda/cudnn_graph.c) the statistics read goes: one pass over every BN input
 * (5.7 GB a step at batch 256, ~1.9 ms on an H100; bench/NOTES.md "t7 prediction"). Where
 * cuDNN has no engine for the pattern the CUDA kernel runs the convolution, then a
 * statistics pass (correct, no gain).
 *
 * When: a BatchNormalization in training mode (opset >= 14, training_mode 1) without inputs
 * 6 and 7, whose X is output 0 of a Conv (one output) or of a kiln.FusedConv without the
 * statistics outputs yet (or with them: a second BN of the same X shares them). Other
 * readers of y are left as they are (the sums are of the same values). The function is
 * unchanged but for the rounding of the statistics: mean = s / M, var = q / M - mean^2 from
 * the sums (src/ops/batch_normalization.c), as the CUDA kernels compute them from their
 * partial sums; the sums f64 in f32 training, f32 under amp (cuDNN's GenStats). BatchNormGrad is untouched (it recomputes its statistics from X).
 * Runs last (after fuse-bn, which fuses only BNs with five inputs; formats final). */
#include "passes.h"

#include "../ops/fused_conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kiln_pass_conv_bn_stats_env(void) {
    const char *e = getenv("KILN_CUDA_CONV_STATS");
    return !(e && strcmp(e, "0") == 0);
}

static int opt_out(const kiln_node *n, int k) { return k < n->n_out ? n->out[k] : -1; }

static bool training_bn(const kiln_node *n) {
    return kiln_pass_is(n, "BatchNormalization") && n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0 &&
           n->n_in >= 5 && n->in[0] >= 0 && kiln_pass_opt_in(n, 6) < 0 && kiln_pass_opt_in(n, 7) < 0 && n->n_out >= 1;
}

/* A new (C) value for a statistics output of node p (C from y's dims where known), of the
 * dtype the convolution writes for y's (f64 for f32 training; src/ops/fused_conv.c). */
static int stats_value(kiln_model *m, int p, int y, kiln_dtype ydt, const char *what) {
    char hint[200];
    snprintf(hint, sizeof hint, "%s:%s", m->nodes[p].name, what);
    const int v = kiln_pass_new_value(m, hint);
    if (v < 0) return -1;
    kiln_value *val = &m->values[v];
    val->dtype = kiln_fused_conv_stats_dtype(ydt);
    if (m->values[y].ndim >= 2) {
        val->ndim = 1;
        val->dims[0] = m->values[y].dims[1];
    }
    return v;
}

kiln_status kiln_pass_conv_bn_stats(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!o->conv_bn_stats || !kiln_pass_device_has(o, "FusedConv")) return KILN_OK;
    int *prod = kiln_pass_producers(m);
    if (!prod) return KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor *types = NULL; /* the values' dtypes where the graph leaves them unset (symbolic batch) */
    kiln_status st = KILN_OK;
    for (int bi = 0; bi < m->n_nodes && !st; bi++) {
        if (!training_bn(&m->nodes[bi])) continue;
        const int y = m->nodes[bi].in[0], p = y < m->n_values ? prod[y] : -1;
        if (p < 0) continue;
        const kiln_node *cv = &m->nodes[p];
        /* op-pattern: Conv -> BatchNormalization, kiln.FusedConv -> BatchNormalization */
        const bool conv = kiln_pass_is(cv, "Conv") && cv->n_out == 1;
        const bool fused = kiln_pass_is_kiln(cv, "FusedConv");
        if ((!conv && !fused) || cv->n_out < 1 || cv->out[0] != y) continue;
        int s = fused ? opt_out(cv, 1) : -1, q = fused ? opt_out(cv, 2) : -1;
        if ((s < 0) != (q < 0)) continue; /* one statistics output alone: not ours */
        if (conv) {
            int in[3] = {-1, -1, -1};
            const int n_in = cv->n_in < 3 ? cv->n_in : 3;
            memcpy(in, cv->in, (size_t)n_in * sizeof *in);
            /* op-pattern: Conv -> FusedConv (no activation: the same convolution) */
            if ((st = kiln_pass_rewrite(m, p, "kiln", "FusedConv", n_in, in, &m->nodes[p]))) break;
        }
        if (s < 0) {
            kiln_dtype ydt = m->values[y].dtype;
            if (ydt == KILN_DTYPE_UNDEFINED && !types && (st = kiln_pass_infer_types(m, &types))) break;
            if (ydt == KILN_DTYPE_UNDEFINED) ydt = types[y].dtype; /* (y is a value of the graph as it came) */
            if ((s = stats_value(m, p, y, ydt, "sum")) < 0 || (q = stats_value(m, p, y, ydt, "sumsq")) < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
                break;
            }
            if ((st = kiln_pass_set_output(m, p, 1, s)) || (st = kiln_pass_set_output(m, p, 2, q))) break;
        }
        if ((st = kiln_pass_set_input(m, bi, 6, s)) || (st = kiln_pass_set_input(m, bi, 7, q))) break;
        *changed = true;
    }
    free(prod);
    free(types);
    return st;
}
