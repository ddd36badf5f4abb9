/*
 * pool_conv.c — an average pool moved behind the 1x1 convolution that narrows its channels
 * (KILN_PASS_MEAN_POOL's switch: both rewrite pools; src/passes/mean_pool.c; the environment
 * variable KILN_POOL_CONV=0 turns this one off alone).
 *
 *   p = AveragePool(x)           x (N, C, H, W), stride 1
 *   y = Conv(p, W[, B])          1x1, stride 1, no padding, one group, W (M, C, 1, 1), M < C
 *   ->
 *   t = Conv(x, W[, B])          (the bias here only where the pool reads no padding, below)
 *   y = AveragePool(t)           [-> u; y = Add(u, B as (M, 1, 1))]
 *
 * Both are linear and act on different axes (the pool on each channel's map, the 1x1
 * convolution on each position's channels), so they commute: the pool then averages M
 * channels instead of C. Inception-v3's pool branches (a 3x3 average pool, stride 1, then
 * a 1x1 convolution to 32-192 channels from 192-2048) spend more time in the pools than in
 * those convolutions: on an H200 in fp16 at batch 256 its 9 pools took 1.13 ms of a
 * 6.5 ms run at 0.9 TB/s (bench/NOTES.md, the thirty-second session); behind the
 * convolution they read and write 1/6 to 1/10 of the bytes. The convolution does the same
 * work either way (same map size: the pool's stride is 1).
 *
 * The bias: where a window counts padding (count_include_pad = 1 with pads, or auto_pad
 * SAME_*), the pool of (W x + B) is not pool(W x) + B at the borders (the padding holds 0,
 * not B), so the bias leaves the convolution for an Add after the pool (fuse-eltwise joins
 * it to a following activation). Otherwise (no padding, or count_include_pad = 0: the
 * divisor counts only real taps) the average of W x + B is the average of W x plus B, and the
 * bias stays.
 *
 * When: a default-domain AveragePool of one output over a 4-D X (both shape probes), strides
 * 1 (or absent), dilations 1 (or absent); its output read by nothing but that Conv (input 0)
 * and no graph output; the Conv default-domain, one output, group 1, strides, pads and
 * dilations 1 / 0 / 1 (or absent), auto_pad NOTSET or VALID, W 4-D (M, C, 1, 1) in both
 * probes with M < C; a bias that must move is a constant (an initializer or Constant) of
 * shape (M). Training graphs keep their pools (the pool's output there is also read by the
 * convolution's weight gradient: not a single reader). Before fuse-conv (which would take
 * the convolution's activation) and after fold-bn (a BatchNormalization between them would
 * no longer meet its convolution).
 */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether X and W of Conv node n have the shapes above in both probes: *C, *M. */
static bool conv_1x1(const kiln_shape_probes *pr, const kiln_node *n, int64_t *C, int64_t *M) {
    const int x = n->in[0], w = n->in[1];
    if (x >= pr->n || w >= pr->n) return false;
    for (int p = 0; p < 2; p++) {
        const kiln_tensor *tx = p ? &pr->three[x] : &pr->one[x], *tw = p ? &pr->three[w] : &pr->one[w];
        if (tx->ndim != 4 || tw->ndim != 4 || tw->dims[2] != 1 || tw->dims[3] != 1 || tw->dims[1] != tx->dims[1])
            return false;
        if (p && (tw->dims[0] != *M || tw->dims[1] != *C)) return false;
        *M = tw->dims[0];
        *C = tw->dims[1];
    }
    return *M >= 1 && *M < *C;
}

/* Whether AveragePool node n's windows may count padding (see the top). */
static bool counts_padding(const kiln_node *n) {
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        return kiln_attr_int(n, "count_include_pad", 0) != 0;
    return kiln_attr_int(n, "count_include_pad", 0) != 0 && !kiln_pass_all_ints(n, "pads", 0);
}

/* Conv node i behind the pool that feeds it (see the top); *done when rewritten. */
static kiln_status swap(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done) {
    (void)dead;
    *done = false;
    const kiln_node *cv = &m->nodes[i];
    if (cv->domain[0] || cv->n_in < 2 || cv->in[0] < 0 || cv->in[1] < 0 || cv->n_out != 1 || cv->out[0] < 0) return KILN_OK;
    const char *cap = kiln_attr_string(cv, "auto_pad", "NOTSET");
    if (kiln_attr_int(cv, "group", 1) != 1 || !kiln_pass_all_ints(cv, "strides", 1) || !kiln_pass_all_ints(cv, "pads", 0) ||
        !kiln_pass_all_ints(cv, "dilations", 1) || !(strcmp(cap, "NOTSET") == 0 || strcmp(cap, "VALID") == 0))
        return KILN_OK;
    const int p = cv->in[0];
    if (kiln_pass_single_consumer(m, p) != i) return KILN_OK;
    int pi = -1; /* the pool: p's producer */
    for (int j = 0; j < m->n_nodes && pi < 0; j++)
        for (int k = 0; k < m->nodes[j].n_out; k++)
            if (m->nodes[j].out[k] == p) pi = j;
    if (pi < 0) return KILN_OK;
    const kiln_node *pn = &m->nodes[pi];
    /* op-pattern: AveragePool -> Conv 1x1 (narrowing) => Conv 1x1 -> AveragePool [-> Add bias] */
    if (!kiln_pass_is(pn, "AveragePool") || pn->n_in < 1 || pn->in[0] < 0 || pn->n_out != 1 ||
        !kiln_pass_all_ints(pn, "strides", 1) || !kiln_pass_all_ints(pn, "dilations", 1))
        return KILN_OK;
    const int x = pn->in[0];
    if (x >= pr->n || pr->one[x].ndim != 4 || pr->three[x].ndim != 4) return KILN_OK;
    int64_t C = 0, M = 0;
    if (!conv_1x1(pr, cv, &C, &M)) return KILN_OK;
    const int b = cv->n_in > 2 ? cv->in[2] : -1, y = cv->out[0];
    const bool move_bias = b >= 0 && counts_padding(pn);
    const kiln_tensor *bt = NULL;
    if (move_bias) {
        int *producer = kiln_pass_producers(m);
        if (!producer) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        bt = kiln_pass_constant(m, producer, b);
        free(producer);
        if (!bt || bt->ndim != 1 || bt->dims[0] != M || !bt->data) return KILN_OK;
    }
    const kiln_dtype dt = m->values[y].dtype ? m->values[y].dtype : pr->one[y].dtype;
    char name[256];
    snprintf(name, sizeof name, "%.200s/pool_after", cv->name);
    const int t = kiln_pass_new_value(m, name);
    const int u = move_bias && t >= 0 ? kiln_pass_new_value(m, name) : y;
    if (t < 0 || u < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
    m->values[t].dtype = dt;
    m->values[u].dtype = dt;
    int b3 = -1;
    if (move_bias) { /* B as (M, 1, 1): it broadcasts over the map */
        kiln_tensor *r = kiln_tensor_new(m->ctx, bt->dtype, 3, (int64_t[]){M, 1, 1});
        if (!r) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a bias");
        memcpy(r->data, bt->data, kiln_tensor_nbytes(bt));
        b3 = kiln_pass_add_initializer(m, name, r); /* takes r */
        if (b3 < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a bias");
    }
    kiln_status st = kiln_pass_set_input(m, i, 0, x); /* the Conv reads X, writes t */
    if (!st) st = kiln_pass_set_output(m, i, 0, t);
    if (!st && move_bias) m->nodes[i].n_in = 2; /* the bias, its last input, goes */
    if (!st) st = kiln_pass_set_input(m, pi, 0, t); /* the pool reads t, writes y (or u) */
    if (!st) st = kiln_pass_set_output(m, pi, 0, u);
    if (st) return st;
    if (move_bias && kiln_pass_append_node(m, "Add", name, 2, (int[]){u, b3}, y, NULL, 14) < 0)
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
    *done = true;
    return KILN_OK;
}

kiln_status kiln_pass_pool_conv(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    const char *env = getenv("KILN_POOL_CONV");
    if (env && !strcmp(env, "0")) return KILN_OK;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], "AveragePool"); /* op-pattern */
    if (!any) return KILN_OK;
    return kiln_pass_each_node(m, "Conv", swap, changed); /* op-pattern */
}
