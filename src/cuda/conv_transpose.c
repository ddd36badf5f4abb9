/*
 * conv_transpose.c — ConvTranspose and its gradients on cuDNN, as the convolution they are
 * the transposes of. ConvTranspose(X, W) maps X (N, C, ...) to Y (N, M, ...) with W
 * (C, M/group, k...): it is the input gradient of the convolution of Y-shaped tensors by W
 * (M in, C out, group G) that gives X-shaped ones. So, in conv.c's terms:
 *
 *   ConvTranspose(X, W, B?) -> Y           = kiln.ConvGradInput(dY: X, W, X: Y), then + B
 *                                            per output channel (kiln_cuda_channel_bias_add)
 *   kiln.ConvTransposeGradInput(dY, W, X)  = Conv(dY, W) (a forward convolution giving dX)
 *   kiln.ConvTransposeGradWeight(X, dY, W) = kiln.ConvGradWeight(X: dY, dY: X, W)
 *
 * The node's strides, dilations, pads and group are the convolution's as they stand (the
 * transposed conv's begin / end pads crop Y as the conv's pads pad it); with auto_pad
 * SAME_* or output_shape the view carries the pads the transposed rules derive from the
 * sizes. table.c refuses what this view cannot express: an output larger than the natural
 * one (negative pads) and output sizes the convolution would not map back (output_padding
 * of a stride or more). 1-D and 2-D, NCHW or NHWC, f32 / f16 / bf16, as conv.c.
 */
#include "cuda_internal.h"
#include "grad_movegrad.h"

#include <string.h>

#define VIEW_ATTRS 32

/* c seen as the convolution node: inputs a, b, d (d may be NULL: two inputs), output y;
 * with auto_pad SAME_* or output_shape, a copy of the node whose pads are the ones the
 * transposed rules derive (src/ops/conv_transpose.c's shape_get) and that has neither. */
typedef struct view {
    kiln_op_ctx c;
    kiln_tensor *in[3], *out[1];
    kiln_node node;
    kiln_attr attrs[VIEW_ATTRS];
    int64_t pads[2 * KILN_MAX_DIMS];
} view;

static char pads_name[] = "pads";

/* x: the X-shaped tensor (N, C, spatial), y: the Y-shaped one, w: W. */
static void resolve_pads(view *v, const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                         const kiln_tensor *y) {
    const kiln_node *n = c->node;
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    const bool same = strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0;
    if ((!same && !kiln_node_attr(n, "output_shape")) || n->n_attrs >= VIEW_ATTRS || x->ndim < 3 ||
        x->ndim != y->ndim || w->ndim != x->ndim || x->ndim - 2 > KILN_MAX_DIMS)
        return; /* as it stands (table.c refuses what the view cannot take) */
    const int nd = x->ndim - 2;
    int ns = 0, ndl = 0, nop = 0;
    const int64_t *st = kiln_attr_ints(n, "strides", &ns), *dl = kiln_attr_ints(n, "dilations", &ndl);
    const int64_t *op = kiln_attr_ints(n, "output_padding", &nop);
    for (int i = 0; i < nd; i++) {
        const int64_t s = st && ns == nd ? st[i] : 1, d = dl && ndl == nd ? dl[i] : 1, o = op && nop == nd ? op[i] : 0;
        const int64_t full = s * (x->dims[2 + i] - 1) + o + (w->dims[2 + i] - 1) * d + 1;
        const int64_t total = full - y->dims[2 + i];
        if (total < 0) { /* rows past the natural output: not a convolution's pads */
            v->pads[i] = 0;
            v->pads[nd + i] = total;
        } else if (strcmp(ap, "SAME_UPPER") == 0) {
            v->pads[i] = total / 2;
            v->pads[nd + i] = total - total / 2;
        } else {
            v->pads[i] = total - total / 2;
            v->pads[nd + i] = total / 2;
        }
    }
    v->node = *n;
    int k = 0;
    for (int a = 0; a < n->n_attrs; a++) {
        const char *name = n->attrs[a].name;
        if (strcmp(name, "auto_pad") == 0 || strcmp(name, "output_shape") == 0 || strcmp(name, "pads") == 0) continue;
        v->attrs[k++] = n->attrs[a];
    }
    memset(&v->attrs[k], 0, sizeof v->attrs[k]);
    v->attrs[k].name = pads_name;
    v->attrs[k].type = KILN_ATTR_INTS;
    v->attrs[k].n = 2 * nd;
    v->attrs[k].ints = v->pads;
    v->node.attrs = v->attrs;
    v->node.n_attrs = k + 1;
    v->c.node = &v->node;
}

static kiln_op_ctx *make_view(view *v, const kiln_op_ctx *c, kiln_tensor *a, kiln_tensor *b, kiln_tensor *d,
                              kiln_tensor *y) {
    v->c = *c;
    v->in[0] = a;
    v->in[1] = b;
    v->in[2] = d;
    v->out[0] = y;
    v->c.in = v->in;
    v->c.n_in = d ? 3 : 2;
    v->c.out = v->out;
    v->c.n_out = 1;
    v->c.host_in = NULL; /* the convolutions read no values on the host */
    v->c.node = c->node;
    return &v->c;
}

kiln_op_ctx *kiln_cuda_conv_transpose_view(kiln_op_ctx *c, int which, void *storage, size_t size) {
    if (size < sizeof(view)) return NULL;
    view *v = storage;
    kiln_op_ctx *vc;
    if (which == KILN_CONVT_FORWARD) { /* (X, W, B?) -> Y */
        vc = make_view(v, c, c->in[0], c->in[1], c->out[0], c->out[0]);
        resolve_pads(v, c, c->in[0], c->in[1], c->out[0]);
    } else if (which == KILN_CONVT_GRAD_INPUT) { /* (dY, W, X) -> dX */
        vc = make_view(v, c, c->in[0], c->in[1], NULL, c->out[0]);
        if (c->n_in > 2 && c->in[2]) resolve_pads(v, c, c->in[2], c->in[1], c->in[0]);
    } else { /* GradWeight (X, dY, W) -> dW */
        vc = make_view(v, c, c->in[1], c->in[0], c->in[2], c->out[0]);
        if (c->n_in > 2 && c->in[2]) resolve_pads(v, c, c->in[0], c->in[2], c->in[1]);
    }
    return vc;
}

size_t kiln_cuda_conv_transpose_view_size(void) { return sizeof(view); }

kiln_status kiln_cuda_ws_conv_transpose(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    view v;
    return kiln_cuda_ws_conv_grad_input(cu, kiln_cuda_conv_transpose_view(c, KILN_CONVT_FORWARD, &v, sizeof v), bytes);
}

kiln_status kiln_cuda_ws_conv_transpose_grad_input(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    view v;
    return kiln_cuda_ws_conv(cu, kiln_cuda_conv_transpose_view(c, KILN_CONVT_GRAD_INPUT, &v, sizeof v), bytes);
}

kiln_status kiln_cuda_ws_conv_transpose_grad_weight(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    view v;
    return kiln_cuda_ws_conv_grad_weight(cu, kiln_cuda_conv_transpose_view(c, KILN_CONVT_GRAD_WEIGHT, &v, sizeof v),
                                         bytes);
}

kiln_status kiln_cuda_k_conv_transpose(kiln_cuda *cu, kiln_op_ctx *c) {
    view v;
    kiln_status st = kiln_cuda_k_conv_grad_input(cu, kiln_cuda_conv_transpose_view(c, KILN_CONVT_FORWARD, &v, sizeof v));
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL, *y = c->out[0]; // B (M); Y (N, M, ...)
    if (st || !b) return st;
    const bool nhwc = y->ndim == 4 && y->format == KILN_FORMAT_NHWC;
    int64_t hw = 1;
    for (int d = 2; d < y->ndim; d++) hw *= y->dims[d];
    return kiln_cuda_channel_bias_add(cu, c->kctx, y->dtype, y->data, b->data, y->dims[0], y->dims[1], hw, nhwc);
}

kiln_status kiln_cuda_k_conv_transpose_grad_input(kiln_cuda *cu, kiln_op_ctx *c) {
    view v;
    return kiln_cuda_k_conv(cu, kiln_cuda_conv_transpose_view(c, KILN_CONVT_GRAD_INPUT, &v, sizeof v));
}

kiln_status kiln_cuda_k_conv_transpose_grad_weight(kiln_cuda *cu, kiln_op_ctx *c) {
    view v;
    return kiln_cuda_k_conv_grad_weight(cu, kiln_cuda_conv_transpose_view(c, KILN_CONVT_GRAD_WEIGHT, &v, sizeof v));
}
