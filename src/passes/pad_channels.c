/*
 * pad_channels.c — input channels of convolutions padded to a multiple of 8 (CUDA with
 * fp16/bf16 only: tensor-core kernels want channel counts in multiples of 8 halves, and
 * cuDNN otherwise falls back to slower ones), except that 1 to 4 channels (the image
 * input of a CNN's stem) are padded to 4: cuDNN has NHWC kernels for 4 channels, and on
 * the H200 ResNet-50's fp16 stem at batch 256 took 0.41 ms with 4 channels, 0.56 ms with
 * its own 3 and 1.24 ms with 8 (bench/NOTES.md, "How many channels for the stem").
 *
 * For a Conv (or kiln.FusedConv) with group 1 whose weight W (M, C, k...) is an initializer
 * and whose C is not already its padded count C8: W becomes a new initializer (M, C8, k...) with zeros
 * in channels C..C8-1, and X is read through Pad(X, pads) adding C8-C zero channels at the
 * end of dim 1 (one Pad per X and width, shared by the convs reading it). The added
 * channels multiply zero weights, so Y is unchanged (exactly: the products are +0). Output
 * channels are left alone: padding them would change Y's shape for its readers.
 *
 * The convolution gets the int attribute used_channels = C: a promise that the weights of
 * input channels C.. are zero, so that a backend may convolve the first C channels alone.
 * cuDNN runs some padded problems far slower than their own (mobilenet_v3's 4-channel stem
 * with 16 outputs: 2.6 ms against 0.29 at batch 256, bench/NOTES.md "Stems"), others
 * faster; only the backend can time both (conv.c: the narrow copy).
 *
 * Output channels first, where the widened value never leaves convolutions (widen): a
 * convolution P of group 1 with initializer weights, no residual and an activation that maps
 * 0 to 0 writes M channels, M not a multiple of 8, read only as X by convolutions that are
 * either of group 1 with an initializer weight, or depthwise (group M, M outputs, initializer
 * weight, no residual, an activation keeping 0) whose outputs are in turn read only so (a
 * ShuffleNetV2 branch: 1x1 + ReLU -> 3x3 depthwise -> 1x1, 122 channels at width 2.0). P
 * then writes M8 channels (zero weight rows and bias), each depthwise reader takes group M8
 * (zero filters and bias), so the added channels stay zeros, and the group-1 readers get M8
 * input channels with zero weights (used_channels = M): no Pad copies the value, and the
 * depthwise convolutions run on kernels that want channels in multiples of 8 (on CUDA, C % 8
 * otherwise falls to a scalar kernel at ~0.7 TB/s).
 */
#include "passes.h"
#include "../ops/fused.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A convolution (X, W, ...): the ops of the layout pass's conv kind (Conv, kiln.FusedConv). */
static bool is_conv(const kiln_node *n) {
    const kiln_op_def *d = kiln_node_def(n);
    return d && d->layout == KILN_LAYOUT_CONV;
}

/* A new initializer value named after hint; takes t over. -1 on OOM. */
static int new_initializer(kiln_model *m, const char *hint, kiln_tensor *t) {
    int v = t ? kiln_pass_new_value(m, hint) : -1;
    if (v < 0) {
        kiln_tensor_free(t);
        return -1;
    }
    kiln_value *val = &m->values[v];
    val->init = t;
    val->dtype = t->dtype;
    val->ndim = t->ndim;
    memcpy(val->dims, t->dims, sizeof val->dims);
    return v;
}

/* W (M, C, k...) with zero channels C..c8-1 appended. */
static kiln_tensor *pad_weight(kiln_context *ctx, const kiln_tensor *w, int64_t c8) {
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, w->dims, sizeof dims);
    dims[1] = c8;
    kiln_tensor *p = kiln_tensor_new(ctx, w->dtype, w->ndim, dims);
    if (!p) return NULL;
    size_t es = kiln_dtype_size(w->dtype);
    int64_t k = 1;
    for (int d = 2; d < w->ndim; d++) k *= w->dims[d];
    size_t row = (size_t)(w->dims[1] * k) * es, prow = (size_t)(c8 * k) * es; /* one output channel */
    for (int64_t o = 0; o < w->dims[0]; o++)
        memcpy((char *)p->data + (size_t)o * prow, (const char *)w->data + (size_t)o * row, row);
    return p;
}

/* A new value: v read through Pad(v, pads) adding c8 - c zero channels at the end of dim 1
 * of a rank-`rank` tensor (the Pad node named after v); -1 on OOM. */
static int pad_value(kiln_model *m, int v, int rank, int64_t c, int64_t c8) {
    kiln_context *ctx = m->ctx;
    char hint[200];
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    pads[rank + 1] = c8 - c; /* the end of dim 1 */
    kiln_tensor *pt = kiln_tensor_new(ctx, KILN_I64, 1, (int64_t[]){2 * rank});
    if (pt) memcpy(pt->data, pads, (size_t)(2 * rank) * sizeof(int64_t));
    snprintf(hint, sizeof hint, "%.150s_pads", m->values[v].name);
    int pv = new_initializer(m, hint, pt);
    snprintf(hint, sizeof hint, "%.150s_pad%d", m->values[v].name, (int)c8);
    int out = pv >= 0 ? kiln_pass_new_value(m, hint) : -1;
    char name[220];
    snprintf(name, sizeof name, "pad_channels_%.150s", m->values[v].name);
    int idx = out >= 0 ? kiln_model_add_node_raw(m, "Pad", name, "", 2, (int[]){v, pv}, 1, &out, 0, NULL) : -1;
    if (idx >= 0 && m->nodes[idx].opset < 11) m->nodes[idx].opset = 11; /* pads as an input */
    return idx < 0 ? -1 : out;
}

/* An i64 vector initializer of one value; -1 on OOM. */
static int i64_scalar_init(kiln_model *m, const char *hint, int64_t v) {
    kiln_tensor *t = kiln_tensor_new(m->ctx, KILN_I64, 1, (int64_t[]){1});
    if (t) ((int64_t *)t->data)[0] = v;
    return new_initializer(m, hint, t);
}

/* Training: the stem, a convolution of group 1 whose X is a graph input of 3 channels (RGB)
 * (no gradient flows to it) and whose W is a parameter (not an initializer, so it cannot be
 * padded once): X and W are read through Pads to 4 channels, and each kiln.ConvGradWeight
 * of that X and W reads the padded pair and writes 4 channels, sliced back to W's 3. cuDNN
 * otherwise pads the 3-channel NHWC X itself inside each call (0.15 ms for ResNet-50's at
 * batch 256, in the forward and again in the weight gradient; bench/NOTES.md, tenth
 * session). The padded channels' weight gradient is dropped by the Slice. */
static kiln_status pad_stem_train(kiln_model *m, int i, int *pad_x, int *pad_c, int *pad_out, int *n_pads,
                                  bool *changed) {
    kiln_context *ctx = m->ctx;
    const kiln_node *n = &m->nodes[i];
    const int x = n->in[0], w = n->in[1];
    const kiln_value *wv = &m->values[w], *xv = &m->values[x]; /* (not used past the first new value) */
    if (!xv->is_input || !kiln_dtype_is_float(wv->dtype) || wv->ndim < 3 || xv->ndim != wv->ndim) return KILN_OK;
    const int64_t c = wv->dims[1], c8 = 4;
    const int rank = wv->ndim;
    if (c != 3 || xv->dims[1] != c) return KILN_OK; /* (1 channel: conv-direct's kernels, not cuDNN's) */
    int xp = -1, wp = -1; /* one Pad per value, shared by the convolutions reading it */
    for (int p = 0; p < *n_pads; p++)
        if (pad_c[p] == (int)c8) {
            if (pad_x[p] == x) xp = pad_out[p];
            if (pad_x[p] == w) wp = pad_out[p];
        }
    for (int k = 0; k < 2; k++) {
        int *pv = k ? &wp : &xp;
        if (*pv >= 0) continue;
        *pv = pad_value(m, k ? w : x, rank, c, c8);
        if (*pv < 0) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        pad_x[*n_pads] = k ? w : x;
        pad_c[*n_pads] = (int)c8;
        pad_out[(*n_pads)++] = *pv;
    }
    m->nodes[i].in[0] = xp;
    m->nodes[i].in[1] = wp;
    kiln_status st = kiln_pass_set_int(m, i, "used_channels", c);
    /* the weight gradients of this X and W (autodiff ran before the passes) */
    for (int j = 0; j < m->n_nodes && !st; j++) {
        kiln_node *g = &m->nodes[j];
        if (!kiln_pass_is_kiln(g, "ConvGradWeight") || g->n_in < 3 || g->n_out < 1 || g->in[0] != x ||
            g->in[2] != w || g->out[0] < 0)
            continue;
        const int dw = g->out[0];
        char hint[200];
        snprintf(hint, sizeof hint, "%.150s_pad%d", m->values[dw].name, (int)c8);
        const int dw4 = kiln_pass_new_value(m, hint);
        snprintf(hint, sizeof hint, "%.150s_starts", m->values[dw].name);
        const int s0 = dw4 >= 0 ? i64_scalar_init(m, hint, 0) : -1;
        snprintf(hint, sizeof hint, "%.150s_ends", m->values[dw].name);
        const int s1 = s0 >= 0 ? i64_scalar_init(m, hint, c) : -1;
        snprintf(hint, sizeof hint, "%.150s_axes", m->values[dw].name);
        const int s2 = s1 >= 0 ? i64_scalar_init(m, hint, 1) : -1;
        char name[220];
        snprintf(name, sizeof name, "unpad_channels_%.150s", m->values[dw].name);
        const int idx =
            s2 >= 0 ? kiln_model_add_node_raw(m, "Slice", name, "", 4, (int[]){dw4, s0, s1, s2}, 1, &dw, 0, NULL) : -1;
        if (idx < 0) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        if (m->nodes[idx].opset < 10) m->nodes[idx].opset = 10; /* starts, ends, axes as inputs */
        g = &m->nodes[j]; /* (the node array may have moved) */
        g->in[0] = xp;
        g->in[2] = wp;
        g->out[0] = dw4;
    }
    if (!st) *changed = true;
    return st;
}

/* ---------------------------------------------------------------- output channels */

/* t (M, ...) with rows M..m8-1 of zeros appended (a weight's output channels, a bias). */
static kiln_tensor *pad_rows(kiln_context *ctx, const kiln_tensor *t, int64_t m8) {
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, t->dims, sizeof dims);
    dims[0] = m8;
    kiln_tensor *p = kiln_tensor_new(ctx, t->dtype, t->ndim, dims);
    if (p) memcpy(p->data, t->data, kiln_tensor_nbytes(t)); /* the rest stays zero */
    return p;
}

/* Input k of n as an initializer tensor, or NULL. */
static const kiln_tensor *init_in(const kiln_model *m, const kiln_node *n, int k) {
    const int v = kiln_pass_opt_in(n, k);
    return v >= 0 ? m->values[v].init : NULL;
}

/* Whether convolution n's output keeps zero channels zero: no residual Z, a float initializer
 * weight (and bias, if any), an activation with act(0) = 0. */
static bool keeps_zero(const kiln_model *m, const kiln_node *n) {
    const kiln_tensor *w = init_in(m, n, 1);
    if (!w || !kiln_dtype_is_float(w->dtype) || w->ndim < 3 || kiln_pass_opt_in(n, 3) >= 0) return false;
    if (kiln_pass_opt_in(n, 2) >= 0 && !init_in(m, n, 2)) return false;
    const char *a = kiln_attr_string(n, "activation", "");
    kiln_act_kind k = KILN_ACT_NONE;
    if (a[0] && !kiln_fused_act_kind(a, &k)) return false;
    switch (k) {
    case KILN_ACT_NONE: case KILN_ACT_RELU: case KILN_ACT_LEAKY_RELU: case KILN_ACT_HARD_SWISH: case KILN_ACT_TANH:
    case KILN_ACT_SILU: case KILN_ACT_GELU: case KILN_ACT_GELU_TANH: return true;
    case KILN_ACT_CLIP: return kiln_attr_float(n, "act_min", -INFINITY) <= 0.f && kiln_attr_float(n, "act_max", INFINITY) >= 0.f;
    default: return false; /* Sigmoid, HardSigmoid: act(0) != 0 */
    }
}

/* Whether n is depthwise over M channels (group M, weight (M, 1, ...)). */
static bool depthwise_of(const kiln_model *m, const kiln_node *n, int64_t M) {
    const kiln_tensor *w = init_in(m, n, 1);
    return w && kiln_attr_int(n, "group", 1) == M && w->dims[0] == M && w->dims[1] == 1;
}

/* Whether every reader of v (M channels) takes zero channels appended to it (see the top):
 * a convolution reading it as X, of group 1 with an initializer weight of M input channels,
 * or depthwise keeping zeros whose output's readers do too (at most `depth` more). */
static bool widenable(const kiln_model *m, int v, int64_t M, int depth) {
    if (m->values[v].is_output) return false;
    int readers = 0;
    for (int j = 0; j < m->n_nodes; j++) {
        const kiln_node *n = &m->nodes[j];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] != v) continue;
            if (k != 0 || !is_conv(n)) return false;
            const kiln_tensor *w = init_in(m, n, 1);
            if (!w || !kiln_dtype_is_float(w->dtype) || w->ndim < 3) return false;
            if (kiln_attr_int(n, "group", 1) == 1) {
                if (w->dims[1] != M) return false;
            } else if (!depthwise_of(m, n, M) || !keeps_zero(m, n) || n->n_out != 1 || n->out[0] < 0 || depth <= 0 ||
                       !widenable(m, n->out[0], M, depth - 1)) {
                return false;
            }
            readers++;
        }
    }
    return readers > 0;
}

/* Value v (M channels in dim 1 of its stored shape) now has m8. */
static void widened_value(kiln_model *m, int v, int64_t M, int64_t m8) {
    kiln_value *val = &m->values[v];
    if (val->ndim >= 2 && val->dims[1] == M) val->dims[1] = m8;
}

/* Input k of node i (an initializer) replaced by t (taken over); the old one dropped when
 * nothing reads it. */
static kiln_status replace_init(kiln_model *m, int i, int k, kiln_tensor *t, const char *tag) {
    const int old = m->nodes[i].in[k];
    char hint[200];
    snprintf(hint, sizeof hint, "%.150s_%s", m->values[old].name, tag);
    const int v = new_initializer(m, hint, t);
    if (v < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    m->nodes[i].in[k] = v;
    kiln_pass_drop_if_unused(m, old);
    return KILN_OK;
}

/* The readers of v (which widenable accepted) take m8 channels: group-1 weights get zero
 * input channels, depthwise ones zero filters and bias and group m8, and so on down. */
static kiln_status widen_readers(kiln_model *m, int v, int64_t M, int64_t m8) {
    kiln_status st = KILN_OK;
    char tag[32];
    snprintf(tag, sizeof tag, "wide%lld", (long long)m8);
    for (int j = 0; j < m->n_nodes && !st; j++) {
        if (m->nodes[j].n_in < 2 || m->nodes[j].in[0] != v) continue;
        const kiln_tensor *w = init_in(m, &m->nodes[j], 1);
        if (!w) continue; /* (widenable took only initializer weights) */
        if (kiln_attr_int(&m->nodes[j], "group", 1) == 1) {
            st = replace_init(m, j, 1, pad_weight(m->ctx, w, m8), tag);
            if (!st) st = kiln_pass_set_int(m, j, "used_channels", M);
            continue;
        }
        st = replace_init(m, j, 1, pad_rows(m->ctx, w, m8), tag);
        const kiln_tensor *b = st ? NULL : init_in(m, &m->nodes[j], 2);
        if (b) st = replace_init(m, j, 2, pad_rows(m->ctx, b, m8), tag);
        if (!st) st = kiln_pass_set_int(m, j, "group", m8);
        if (!st) widened_value(m, m->nodes[j].out[0], M, m8);
        if (!st) st = widen_readers(m, m->nodes[j].out[0], M, m8);
    }
    return st;
}

/* Output channels (see the top), for every convolution that qualifies; none with the
 * environment variable KILN_PAD_WIDEN=0 (to measure what they are worth). */
static kiln_status widen(kiln_model *m, bool *changed) {
    kiln_status st = KILN_OK;
    const char *e = getenv("KILN_PAD_WIDEN");
    if (e && strcmp(e, "0") == 0) return KILN_OK;
    const int n0 = m->n_nodes;
    for (int i = 0; i < n0 && !st; i++) {
        const kiln_node *n = &m->nodes[i];
        if (!is_conv(n) || n->n_out != 1 || n->out[0] < 0 || kiln_attr_int(n, "group", 1) != 1 || !keeps_zero(m, n))
            continue;
        const kiln_tensor *w = init_in(m, n, 1); /* (keeps_zero took only initializer weights) */
        if (!w) continue;
        const int64_t M = w->dims[0], m8 = (M + 7) / 8 * 8;
        if (M <= 4 || M == m8 || !widenable(m, n->out[0], M, 4)) continue;
        char tag[32];
        snprintf(tag, sizeof tag, "wide%lld", (long long)m8);
        st = replace_init(m, i, 1, pad_rows(m->ctx, w, m8), tag);
        const kiln_tensor *b = st ? NULL : init_in(m, &m->nodes[i], 2);
        if (b) st = replace_init(m, i, 2, pad_rows(m->ctx, b, m8), tag);
        if (!st) widened_value(m, m->nodes[i].out[0], M, m8);
        if (!st) st = widen_readers(m, m->nodes[i].out[0], M, m8);
        if (!st) *changed = true;
    }
    return st;
}

kiln_status kiln_pass_pad_channels(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (o->device != KILN_DEVICE_CUDA || o->precision == KILN_PRECISION_FP32) return KILN_OK;
    kiln_context *ctx = m->ctx;
    kiln_status st = widen(m, changed);
    if (st) return st;
    int n0 = m->n_nodes;
    /* Pads already inserted: (value, padded width) -> padded value; at most two per
     * convolution (X, and a trained W) */
    int *pad_x = calloc(2 * (size_t)n0 + 2, sizeof *pad_x), *pad_c = calloc(2 * (size_t)n0 + 2, sizeof *pad_c);
    int *pad_out = calloc(2 * (size_t)n0 + 2, sizeof *pad_out);
    int n_pads = 0;
    if (!pad_x || !pad_c || !pad_out) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < n0 && !st; i++) {
        const kiln_node *n = &m->nodes[i];
        if (!is_conv(n) || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || kiln_attr_int(n, "group", 1) != 1) continue;
        int x = n->in[0], w = n->in[1];
        const kiln_tensor *wt = m->values[w].init;
        if (!wt && !m->values[w].is_input) continue;
        if (!wt) { /* a parameter being trained */
            st = pad_stem_train(m, i, pad_x, pad_c, pad_out, &n_pads, changed);
            continue;
        }
        if (!kiln_dtype_is_float(wt->dtype) || wt->ndim < 3) continue;
        const int64_t c = wt->dims[1], c8 = c <= 4 ? 4 : (c + 7) / 8 * 8;
        if (c == c8) continue;
        char hint[200];
        snprintf(hint, sizeof hint, "%.150s_pad%d", m->values[w].name, (int)c8);
        int wp = new_initializer(m, hint, pad_weight(ctx, wt, c8));
        int xp = -1;
        for (int p = 0; p < n_pads && xp < 0; p++)
            if (pad_x[p] == x && pad_c[p] == c8) xp = pad_out[p];
        if (wp >= 0 && xp < 0) {
            xp = pad_value(m, x, wt->ndim, c, c8);
            pad_x[n_pads] = x;
            pad_c[n_pads] = (int)c8;
            pad_out[n_pads++] = xp;
        }
        if (wp < 0 || xp < 0) {
            st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        m->nodes[i].in[0] = xp;
        m->nodes[i].in[1] = wp;
        if ((st = kiln_pass_set_int(m, i, "used_channels", c))) break;
        if (!kiln_pass_uses(m, w) && !m->values[w].is_input) {
            kiln_tensor_free(m->values[w].init);
            m->values[w].init = NULL;
        }
        *changed = true;
    }
    free(pad_x);
    free(pad_c);
    free(pad_out);
    return st;
}
