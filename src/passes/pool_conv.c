/*
 * pool_conv.c — an average pool and a 1x1 convolution next to it put in the cheaper order
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
 * And the other way, where the pool is cheaper first:
 *
 *   c = Conv(x, W[, B])          1x1 as above, W (M, C, 1, 1)
 *   y = AveragePool(c)           strides s (product S), C < M x S
 *   ->
 *   t = AveragePool(x)
 *   y = Conv(t, W[, B])
 *
 * The pool then reads C channels instead of M and the convolution sees 1 / S of the positions:
 * pool first moves C + 2C/S + M/S elements a position of X against C + 2M + M/S, and does 1/S
 * of the products. DenseNet's transitions (a 1x1 convolution halving the channels, then a 2x2
 * average pool of stride 2) are this case. With a bias only where it commutes (below).
 *
 * The bias: where a window counts padding (count_include_pad = 1 with pads, auto_pad SAME_*
 * or ceil_mode), the pool of (W x + B) is not pool(W x) + B at the borders (the padding holds
 * 0, not B), so there the bias leaves the convolution for an Add after the pool
 * (fuse-eltwise joins it to a following activation), and the other way is not taken.
 * Otherwise (bias_commutes: no padding, or count_include_pad = 0, the divisor counting only
 * real taps) the average of W x + B is the average of W x plus B, and the bias stays.
 *
 * When (the first way; the other alike, the Conv's output read by nothing but the pool): a
 * default-domain AveragePool of one output over a 4-D X (both shape probes), strides
 * 1 (or absent), dilations 1 (or absent); its output read by nothing but that Conv (input 0)
 * and no graph output; the Conv default-domain, one output, group 1, strides, pads and
 * dilations 1 / 0 / 1 (or absent), auto_pad NOTSET or VALID, W 4-D (M, C, 1, 1) in both
 * probes with M < C; a bias that must move is a constant (an initializer or Constant) of
 * shape (M). In a training graph the first way is not taken (the pool's output is also read by
 * the convolution's weight gradient); the other way changes how the forward computes Y, not
 * what the gradients read (X, W and dY: an average pool's gradient reads no values). Before
 * fuse-conv (which would take the convolution's activation) and after fold-bn (a
 * BatchNormalization between them would no longer meet its convolution).
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
    return *M >= 1 && *C >= 1;
}

/* Conv node n: default domain, X and W given, one output, group 1, strides 1, no padding,
 * dilations 1 (the 1x1 shape: conv_1x1). */
static bool plain_conv(const kiln_node *n) {
    if (n->domain[0] || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || n->n_out != 1 || n->out[0] < 0) return false;
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    return kiln_attr_int(n, "group", 1) == 1 && kiln_pass_all_ints(n, "strides", 1) && kiln_pass_all_ints(n, "pads", 0) &&
           kiln_pass_all_ints(n, "dilations", 1) && (strcmp(ap, "NOTSET") == 0 || strcmp(ap, "VALID") == 0);
}

/* AveragePool node n: default domain, X given, one output (2-D windows: its X is 4-D,
 * checked by the caller), dilations 1. */
static bool plain_pool(const kiln_node *n) {
    return kiln_pass_is(n, "AveragePool") && n->n_in >= 1 && n->in[0] >= 0 && n->n_out == 1 && n->out[0] >= 0 &&
           kiln_pass_all_ints(n, "dilations", 1);
}

/* The product of AveragePool node n's strides (absent: 1). */
static int64_t stride_product(const kiln_node *n) {
    int c = 0;
    const int64_t *s = kiln_attr_ints(n, "strides", &c);
    int64_t p = 1;
    for (int k = 0; s && k < c; k++) p *= s[k] > 0 ? s[k] : 1;
    return p;
}

/* Whether every window of AveragePool node n weighs its taps 1 / (their number), so that a
 * constant passes through unchanged (a bias commutes with it): no window counts padding. */
static bool bias_commutes(const kiln_node *n) {
    if (kiln_attr_int(n, "count_include_pad", 0) == 0) return true;
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    return (strcmp(ap, "NOTSET") == 0 || strcmp(ap, "VALID") == 0) && kiln_pass_all_ints(n, "pads", 0) &&
           kiln_attr_int(n, "ceil_mode", 0) == 0;
}

/* The node that writes value v if node `reader` is v's single reader, else -1. */
static int producer_for(kiln_model *m, int v, int reader, kiln_status *st) {
    if (kiln_pass_single_consumer(m, v) != reader) return -1;
    int *producer = kiln_pass_producers(m);
    if (!producer) {
        *st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        return -1;
    }
    const int j = producer[v];
    free(producer);
    return j;
}

/* Conv node i behind the pool that feeds it (see the top); *done when rewritten. */
static kiln_status swap(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done) {
    (void)dead;
    *done = false;
    const kiln_node *cv = &m->nodes[i];
    if (!plain_conv(cv)) return KILN_OK;
    const int p = cv->in[0];
    kiln_status st = KILN_OK;
    const int pi = producer_for(m, p, i, &st); /* the pool */
    if (pi < 0) return st;
    const kiln_node *pn = &m->nodes[pi];
    /* op-pattern: AveragePool (stride 1) -> Conv 1x1 (narrowing) => Conv 1x1 -> AveragePool [-> Add bias] */
    if (!plain_pool(pn) || stride_product(pn) != 1) return KILN_OK;
    const int x = pn->in[0];
    if (x >= pr->n || pr->one[x].ndim != 4 || pr->three[x].ndim != 4) return KILN_OK;
    int64_t C = 0, M = 0;
    if (!conv_1x1(pr, cv, &C, &M) || M >= C) return KILN_OK;
    const int b = cv->n_in > 2 ? cv->in[2] : -1, y = cv->out[0];
    const bool move_bias = b >= 0 && !bias_commutes(pn);
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
    st = kiln_pass_set_input(m, i, 0, x); /* the Conv reads X, writes t */
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

/* AveragePool node i ahead of the 1x1 convolution that feeds it (see the top); *done when
 * rewritten. */
static kiln_status swap_back(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done) {
    (void)dead;
    *done = false;
    const kiln_node *pn = &m->nodes[i];
    if (!plain_pool(pn)) return KILN_OK;
    const int c = pn->in[0];
    kiln_status st = KILN_OK;
    const int ci = producer_for(m, c, i, &st); /* the Conv */
    if (ci < 0) return st;
    const kiln_node *cv = &m->nodes[ci];
    /* op-pattern: Conv 1x1 -> AveragePool (C < M x strides) => AveragePool -> Conv 1x1 */
    if (!kiln_pass_is(cv, "Conv") || !plain_conv(cv)) return KILN_OK;
    int64_t C = 0, M = 0;
    const int x = cv->in[0], y = pn->out[0];
    if (!conv_1x1(pr, cv, &C, &M) || C >= M * stride_product(pn)) return KILN_OK;
    if (cv->n_in > 2 && cv->in[2] >= 0 && !bias_commutes(pn)) return KILN_OK;
    char name[256];
    snprintf(name, sizeof name, "%.200s/pool_before", cv->name);
    const int t = kiln_pass_new_value(m, name);
    if (t < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
    m->values[t].dtype = m->values[y].dtype ? m->values[y].dtype : pr->one[y].dtype;
    st = kiln_pass_set_input(m, i, 0, x); /* the pool reads X, writes t */
    if (!st) st = kiln_pass_set_output(m, i, 0, t);
    if (!st) st = kiln_pass_set_input(m, ci, 0, t); /* the Conv reads t, writes y */
    if (!st) st = kiln_pass_set_output(m, ci, 0, y);
    if (!st) *done = true;
    return st;
}

kiln_status kiln_pass_pool_conv(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    const char *env = getenv("KILN_POOL_CONV");
    if (env && !strcmp(env, "0")) return KILN_OK;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], "AveragePool"); /* op-pattern */
    if (!any) return KILN_OK;
    kiln_status st = kiln_pass_each_node(m, "Conv", swap, changed); /* op-pattern */
    if (!st) st = kiln_pass_each_node(m, "AveragePool", swap_back, changed); /* op-pattern */
    return st;
}
