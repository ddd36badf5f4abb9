/*
 * shapes.c — host-side shape arithmetic shared by the CUDA kernels: broadcast plans with
 * merged dims (elementwise ops) and sliding-window geometry (Conv, pools), computed by
 * the same rules as the CPU reference so both backends agree on every index; and the
 * activation of a fused op (kiln.FusedGemm, kiln.FusedConv) read from its attributes.
 */
#include "cuda_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void kiln_cuda_bcast_init(kiln_cuda_bcast *b, int ndim, const int64_t *dims, int nin,
                          const kiln_tensor *const *in) {
    int64_t st[3][KILN_MAX_DIMS];
    memset(b, 0, sizeof *b);
    b->nin = nin;
    b->numel = kiln_numel(ndim, dims);
    for (int k = 0; k < nin; k++)
        kiln_broadcast_strides(in[k]->ndim, in[k]->dims, ndim, dims, st[k]);
    /* Drop size-1 dims; merge dim d into the previous merged dim when every input walks
     * the pair as one run: outer stride == inner stride * inner size (also true when
     * both are broadcast: 0 == 0 * n). */
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < nin && merge; k++) merge = b->st[k][nd - 1] == st[k][d] * dims[d];
        if (merge) {
            b->dims[nd - 1] *= dims[d];
            for (int k = 0; k < nin; k++) b->st[k][nd - 1] = st[k][d];
        } else {
            b->dims[nd] = dims[d];
            for (int k = 0; k < nin; k++) b->st[k][nd] = st[k][d];
            nd++;
        }
    }
    if (nd == 0) { /* a scalar, or all dims 1 */
        b->dims[0] = 1;
        for (int k = 0; k < nin; k++) b->st[k][0] = 0;
        nd = 1;
    }
    b->nd = nd;
}

/* An INTS attribute of exactly want values (absent: dflt everywhere). */
static bool read_ints(const kiln_op_ctx *c, const char *name, int want, int64_t dflt,
                      int64_t *out, bool *present, char *why, size_t n) {
    int count = 0;
    const int64_t *v = kiln_attr_ints(c->node, name, &count);
    if (present) *present = v != NULL;
    if (!v) {
        for (int i = 0; i < want; i++) out[i] = dflt;
        return true;
    }
    if (count != want) {
        snprintf(why, n, "attribute %s has %d values, %d expected", name, count, want);
        return false;
    }
    for (int i = 0; i < want; i++) out[i] = v[i];
    return true;
}

bool kiln_cuda_window_get(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y,
                          const int64_t *kernel, kiln_cuda_window *w, char *why, size_t n) {
    memset(w, 0, sizeof *w);
    if (x->ndim < 3 || x->ndim > 5 || y->ndim != x->ndim) {
        snprintf(why, n, "input rank %d (1 to 3 spatial dims are supported)", x->ndim);
        return false;
    }
    int nd = x->ndim - 2;
    w->nd = nd;
    int64_t pads[6];
    bool has_ks;
    if (!read_ints(c, "kernel_shape", nd, 0, w->k, &has_ks, why, n) ||
        !read_ints(c, "strides", nd, 1, w->s, NULL, why, n) ||
        !read_ints(c, "dilations", nd, 1, w->d, NULL, why, n) ||
        !read_ints(c, "pads", 2 * nd, 0, pads, NULL, why, n))
        return false;
    if (kernel && !has_ks)
        for (int i = 0; i < nd; i++) w->k[i] = kernel[i];
    const char *ap = kiln_attr_string(c->node, "auto_pad", "NOTSET");
    bool same_upper = strcmp(ap, "SAME_UPPER") == 0, same_lower = strcmp(ap, "SAME_LOWER") == 0;
    bool valid = strcmp(ap, "VALID") == 0;
    if (!same_upper && !same_lower && !valid && strcmp(ap, "NOTSET") != 0 && ap[0] != '\0') {
        snprintf(why, n, "auto_pad '%s' is unknown", ap);
        return false;
    }
    for (int i = 0; i < nd; i++) {
        w->in[i] = x->dims[2 + i];
        w->out[i] = y->dims[2 + i];
        if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1) {
            snprintf(why, n, "spatial dim %d: kernel %lld, stride %lld, dilation %lld", i,
                     (long long)w->k[i], (long long)w->s[i], (long long)w->d[i]);
            return false;
        }
        if (same_upper || same_lower) {
            int64_t ek = (w->k[i] - 1) * w->d[i] + 1;
            int64_t total = (w->out[i] - 1) * w->s[i] + ek - w->in[i];
            if (total < 0) total = 0;
            w->pb[i] = same_upper ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        } else if (!valid) {
            w->pb[i] = pads[i];
            w->pe[i] = pads[nd + i];
        }
        if (w->pb[i] < 0 || w->pe[i] < 0) {
            snprintf(why, n, "negative pads on spatial dim %d", i);
            return false;
        }
    }
    return true;
}

bool kiln_cuda_act_get(const kiln_node *n, bool gemm, kiln_cuda_act *act, char *why, size_t wn) {
    /* kernel-table: the epilogue kernels by activation (tests/test_op_props.c) */
    static const struct {
        const char *name;
        kiln_cuda_act_kind kind;
        float a, b; /* ONNX's defaults */
    } acts[] = {
        {"", KILN_ACT_NONE, 0, 0},
        {"Relu", KILN_ACT_RELU, 0, 0},
        {"LeakyRelu", KILN_ACT_LEAKYRELU, 0.01f, 0},
        {"Clip", KILN_ACT_CLIP, -INFINITY, INFINITY},
        {"Sigmoid", KILN_ACT_SIGMOID, 0, 0},
        {"HardSwish", KILN_ACT_HARDSWISH, 0, 0},
        {"HardSigmoid", KILN_ACT_HARDSIGMOID, 0.2f, 0.5f},
        {"Tanh", KILN_ACT_TANH, 0, 0},
        {"Silu", KILN_ACT_SILU, 0, 0},
        {"Gelu", KILN_ACT_GELU, 0, 0},
        {"GeluTanh", KILN_ACT_GELU_TANH, 0, 0},
    };
    const char *name = kiln_attr_string(n, "activation", "");
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(acts[i].name, name) != 0) continue;
        act->kind = acts[i].kind;
        if (act->kind == KILN_ACT_CLIP) {
            act->a = kiln_attr_float(n, "act_min", acts[i].a);
            act->b = kiln_attr_float(n, "act_max", acts[i].b);
        } else {
            act->a = kiln_attr_float(n, gemm ? "act_alpha" : "alpha", acts[i].a);
            act->b = kiln_attr_float(n, gemm ? "act_beta" : "beta", acts[i].b);
        }
        return true;
    }
    snprintf(why, wn, "activation '%s' is unknown", name);
    return false;
}

kiln_tensor *const *kiln_cuda_host_inputs(const kiln_op_ctx *c) { return c->host_in ? c->host_in : c->in; }

kiln_status kiln_cuda_need_host(kiln_op_ctx *c) {
    if (c->host_in) return KILN_OK;
    return kiln_fail(c->kctx, KILN_ERR_INTERNAL,
                     "the kernel needs the host copies of its value inputs (kiln_op_ctx.host_in)");
}

bool kiln_cuda_host_ints(const kiln_tensor *t, const char *what, int64_t *vals, int max, int *n,
                         char *why, size_t wn) {
    *n = 0;
    if (!t) return true;
    if ((t->dtype != KILN_I64 && t->dtype != KILN_I32) || t->ndim > 1) {
        snprintf(why, wn, "%s must be int32 or int64 of rank <= 1", what);
        return false;
    }
    const int64_t count = kiln_tensor_numel(t);
    if (count > max) {
        snprintf(why, wn, "%s has %lld values, at most %d fit", what, (long long)count, max);
        return false;
    }
    if (count > 0 && !t->data) {
        snprintf(why, wn, "the values of %s are not known when the plan is built", what);
        return false;
    }
    for (int64_t k = 0; k < count; k++) vals[k] = kiln_get_i64(t, k);
    *n = (int)count;
    return true;
}
