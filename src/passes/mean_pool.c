/*
 * mean_pool.c — a mean over every spatial axis as GlobalAveragePool (KILN_PASS_MEAN_POOL).
 *
 *   y = ReduceMean(x, axes = 2..r-1, keepdims = 1)  ->  y = GlobalAveragePool(x)
 *   y = ReduceMean(x, axes = 2..r-1, keepdims = 0)  ->  y = Flatten(GlobalAveragePool(x), axis = 1)
 *
 * torch's x.mean([2, 3]) (MNASNet's and ShuffleNetV2's heads, and many a user's) exports as
 * ReduceMean, which the precision pass keeps in f32 (a general reduction sums many terms) and
 * the layout pass keeps NCHW: on CUDA at batch 256 in fp16, ShuffleNetV2 x2.0's head converted
 * its last NHWC map back to NCHW (0.17 ms), cast it to f32 and reduced it at 388 GB/s
 * (0.27 ms) of a 5.5 ms run. GlobalAveragePool is the same mean (ONNX defines both as the
 * sum over the axes divided by their size; kiln's kernels sum in f32 or wider either way)
 * and reads the NHWC low-precision map as it is.
 *
 * When: a default-domain ReduceMean with one output whose X has the same rank r >= 3 in both
 * shape probes, a float dtype, and axes (the attribute before opset 18, a constant input
 * from 18, negatives counted from the end) naming each of 2..r-1 exactly once. Empty or absent
 * axes (all axes, or none with noop_with_empty_axes) are left alone. The rewritten node keeps
 * the ReduceMean's name and output when keepdims is 1; with keepdims 0 the pool writes a new
 * value and an appended Flatten writes the output ((N, C, 1, ...) has N * C elements in the
 * same order in either layout).
 */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether `axes` (n entries) name each of 2..r-1 exactly once. */
static bool spatial_axes(const int64_t *axes, int n, int r) {
    if (n != r - 2) return false;
    unsigned seen = 0;
    for (int k = 0; k < n; k++) {
        const int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
        if (a < 2 || a >= r || (seen >> a & 1u)) return false;
        seen |= 1u << a;
    }
    return true;
}

/* The axes of ReduceMean node n: *n_axes entries at *axes (attribute or constant input), or
 * false where they are not known before the run or absent. */
static bool axes_of(const kiln_model *m, const int *producer, const kiln_node *n, const int64_t **axes, int *n_axes) {
    if (n->opset < 18) {
        *axes = kiln_attr_ints(n, "axes", n_axes);
        return *axes != NULL;
    }
    const int v = kiln_pass_opt_in(n, 1);
    const kiln_tensor *t = v >= 0 ? kiln_pass_constant_through(m, producer, v) : NULL;
    if (!t || t->dtype != KILN_I64 || t->ndim != 1) return false;
    *axes = t->data;
    *n_axes = (int)t->dims[0];
    return true;
}

static bool is_float(kiln_dtype dt) { return dt == KILN_F32 || dt == KILN_F16 || dt == KILN_BF16 || dt == KILN_F64; }

kiln_status kiln_pass_mean_pool(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], "ReduceMean"); /* op-pattern */
    if (!any) return KILN_OK;
    kiln_shape_probes pr;
    kiln_status st;
    if (!kiln_pass_shape_probes_or_skip(m, &pr, &st)) return st;
    int *producer = kiln_pass_producers(m);
    if (!producer) st = KILN_ERR_OUT_OF_MEMORY;
    bool done = false;
    const int nn = m->n_nodes;
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *n = &m->nodes[i];
        /* op-pattern: ReduceMean over the spatial axes -> GlobalAveragePool [-> Flatten] */
        if (!kiln_pass_is(n, "ReduceMean") || n->n_in < 1 || n->in[0] < 0 || n->n_out != 1 || n->out[0] < 0) continue;
        const int x = n->in[0], y = n->out[0];
        if (x >= pr.n || y >= pr.n) continue;
        const int r = pr.one[x].ndim;
        if (r < 3 || pr.three[x].ndim != r || !is_float(pr.one[x].dtype)) continue;
        const int64_t *axes = NULL;
        int n_axes = 0;
        if (!axes_of(m, producer, n, &axes, &n_axes) || !spatial_axes(axes, n_axes, r)) continue;
        const bool keep = kiln_attr_int(n, "keepdims", 1) != 0;
        int pooled = y;
        if (!keep) {
            char hint[220];
            snprintf(hint, sizeof hint, "%.200s_pooled", m->values[y].name);
            if ((pooled = kiln_pass_new_value(m, hint)) < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
                break;
            }
            m->values[pooled].dtype = pr.one[x].dtype;
        }
        char name[300];
        snprintf(name, sizeof name, "%.200s#flatten%d", n->name, i);
        if ((st = kiln_pass_rewrite(m, i, "", "GlobalAveragePool", 1, &x, NULL)) != KILN_OK) break;
        if (!keep) {
            if ((st = kiln_pass_set_output(m, i, 0, pooled)) != KILN_OK) break;
            kiln_attr *a = NULL;
            int na = 0;
            if ((st = kiln_attrs_parse(m->ctx, "axis=1", &a, &na)) != KILN_OK) break;
            const int f = kiln_model_add_node_raw(m, "Flatten", name, "", 1, &pooled, 1, &y, na, a);
            if (f < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
                break;
            }
            m->nodes[f].opset = 13;
        }
        done = true;
    }
    if (!st && done) {
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    free(producer);
    kiln_pass_shape_probes_free(&pr);
    return st;
}
