/*
 * table.c — the CUDA kernel table: for each op with a CUDA kernel, the kernel, the
 * check of what it supports (dtypes, ranks, attributes) and its workspace function.
 * kiln_cuda_kernel_for maps a registry index to its entry by domain and name, so the
 * table does not depend on the order of ops.def (nor on which op files a build has).
 * kiln's internal ops (domain "kiln": the gradient ops autograd emits, the fused ops the
 * passes make, the layout conversions) are listed as "kiln.<name>"; a node whose op is not
 * registered (a test of a kernel whose CPU reference lives on another branch) is looked
 * up by its domain and op_type. An op missing here is an explicit "not supported on cuda"
 * error, never a silent fallback to the CPU. Kernels with one-time work per shape
 * (compiling generated code) also have a prepare hook (the `prepares` table).
 *
 * Layouts: entries marked nhwc handle 4-D NHWC tensors (their supports functions check
 * how); for every other entry a 4-D NHWC input or output is "not supported".
 */
#include "cuda_internal.h"
#include "norm_train.h"
#include "grad_movegrad.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef bool (*supports_fn)(const kiln_op_ctx *c, char *why, size_t n);
typedef kiln_status (*workspace_fn)(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
typedef kiln_status (*prepare_fn)(kiln_cuda *cu, kiln_op_ctx *c);

typedef struct entry {
    const char *name;
    kiln_cuda_fn run;
    supports_fn supports;
    workspace_fn workspace; /* NULL: none */
    bool nhwc;              /* takes 4-D NHWC tensors (its supports function checks how) */
} entry;

/* ------------------------------------------------------------------ checks */

static bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }
static bool has_out(const kiln_op_ctx *c, int i) { return i < c->n_out && c->out[i] != NULL; }

static bool float_input(const kiln_op_ctx *c, int i, char *why, size_t n) {
    if (kiln_cuda_float_dtype(c->in[i]->dtype)) return true;
    snprintf(why, n, "input %d has dtype %s (f32, f16 and bf16 are supported)", i,
             kiln_dtype_name(c->in[i]->dtype));
    return false;
}

/* Every present input has input 0's float dtype. */
static bool same_float(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    for (int i = 1; i < c->n_in; i++)
        if (present(c, i) && c->in[i]->dtype != c->in[0]->dtype) {
            snprintf(why, n, "input %d has dtype %s, input 0 has %s", i,
                     kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(c->in[0]->dtype));
            return false;
        }
    return true;
}

/* ---------------------------------------------------------------- layouts */

static bool is_nhwc(const kiln_tensor *t) { return t && t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }

static const char *layout_name(const kiln_tensor *t) { return is_nhwc(t) ? "NHWC" : "NCHW"; }

/* The first 4-D NHWC input or output, for kernels that read NCHW only. */
static bool nchw_only(const kiln_op_ctx *c, char *why, size_t n) {
    for (int i = 0; i < c->n_in; i++)
        if (present(c, i) && is_nhwc(c->in[i])) {
            snprintf(why, n, "input %d is laid out NHWC (this kernel reads NCHW only)", i);
            return false;
        }
    for (int i = 0; i < c->n_out; i++)
        if (has_out(c, i) && is_nhwc(c->out[i])) {
            snprintf(why, n, "output %d is laid out NHWC (this kernel writes NCHW only)", i);
            return false;
        }
    return true;
}

/* Input 0 and output 0 in one layout (elementwise kernels, pools, BatchNormalization). */
static bool same_layout(const kiln_op_ctx *c, char *why, size_t n) {
    if (is_nhwc(c->in[0]) == is_nhwc(c->out[0])) return true;
    snprintf(why, n, "input 0 is %s and output 0 %s", layout_name(c->in[0]), layout_name(c->out[0]));
    return false;
}

static bool sup_unary(const kiln_op_ctx *c, char *why, size_t n) {
    if (!same_float(c, why, n) || !same_layout(c, why, n)) return false;
    for (int i = 1; i < c->n_in; i++) /* Clip's bounds */
        if (present(c, i) && is_nhwc(c->in[i])) {
            snprintf(why, n, "input %d is laid out NHWC", i);
            return false;
        }
    return true;
}

/* An NHWC output is walked in its physical order (N, H, W, C): every operand must be
 * 4-D NHWC or have the same bytes in both layouts (right-aligned to 4-D: C == 1 or
 * H*W == 1). An NCHW output takes NCHW operands only. */
static bool sup_binary(const kiln_op_ctx *c, char *why, size_t n) {
    for (int i = 0; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    if (!same_float(c, why, n)) return false;
    const bool nhwc = is_nhwc(c->out[0]);
    for (int i = 0; i < c->n_in; i++) {
        const kiln_tensor *t = c->in[i];
        if (!nhwc && is_nhwc(t)) {
            snprintf(why, n, "input %d is laid out NHWC and the output NCHW", i);
            return false;
        }
        if (!nhwc || is_nhwc(t)) continue;
        int64_t a[4] = {1, 1, 1, 1};
        if (t->ndim > 4) {
            snprintf(why, n, "input %d has rank %d for an NHWC output", i, t->ndim);
            return false;
        }
        for (int d = 0; d < t->ndim; d++) a[4 - t->ndim + d] = t->dims[d];
        if (a[1] != 1 && a[2] * a[3] != 1) {
            snprintf(why, n, "input %d is laid out NCHW and broadcast into an NHWC output", i);
            return false;
        }
    }
    return true;
}


/* A convolution of x by w giving y: the tensors a gradient op has in those roles; its
 * output 0 (named out_name) is written in their layout. */
static bool conv_check(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                       const kiln_tensor *y, const char *out_name, char *why, size_t n) {
    if (!same_float(c, why, n)) return false;
    if (x->ndim != 3 && x->ndim != 4) {
        snprintf(why, n, "%d spatial dims (1-D and 2-D convolutions are supported)", x->ndim - 2);
        return false;
    }
    if (w->ndim != x->ndim || y->ndim != x->ndim) {
        snprintf(why, n, "W and Y must have X's rank %d", x->ndim);
        return false;
    }
    /* one layout for the three, except that a tensor with the same bytes in both (C == 1 or
     * H*W == 1) may carry either label */
    const bool nhwc = is_nhwc(x) || is_nhwc(w) || is_nhwc(y);
    const kiln_tensor *const t3[3] = {x, w, y};
    for (int i = 0; nhwc && i < 3; i++)
        if (!is_nhwc(t3[i]) && !kiln_cuda_layout_free(t3[i])) {
            snprintf(why, n, "X is %s, W %s and Y %s (one layout for all three)", layout_name(x), layout_name(w),
                     layout_name(y));
            return false;
        }
    /* conv.c writes the output (dX like X, dW like W) in that layout whatever its label:
     * one labelled otherwise, unless its bytes are the same in both, would be misread */
    const kiln_tensor *o = has_out(c, 0) ? c->out[0] : NULL;
    if (o && is_nhwc(o) != nhwc && !kiln_cuda_layout_free(o)) {
        snprintf(why, n, "%s is laid out %s and X, W and dY %s (the output takes the convolution's layout)",
                 out_name, layout_name(o), nhwc ? "NHWC" : "NCHW");
        return false;
    }
    kiln_cuda_window win;
    if (!kiln_cuda_window_get(c, x, y, w->dims + 2, &win, why, n)) return false;
    const int64_t sizes[] = {kiln_tensor_numel(x), kiln_tensor_numel(w), kiln_tensor_numel(y)};
    for (int i = 0; i < 3; i++)
        if (sizes[i] == 0) {
            snprintf(why, n, "empty tensors");
            return false;
        }
    for (int d = 0; d < x->ndim; d++)
        if (x->dims[d] > INT_MAX / 2 || y->dims[d] > INT_MAX / 2) {
            snprintf(why, n, "dims beyond cuDNN's int range");
            return false;
        }
    return true;
}

static bool sup_conv(const kiln_op_ctx *c, char *why, size_t n) {
    return same_float(c, why, n) && kiln_cuda_conv_supported(c, false, why, n);
}

static bool sup_fused_conv(const kiln_op_ctx *c, char *why, size_t n) {
    /* outputs 1, 2 (the statistics, conv_stats.c): the convolution's check on Y alone;
     * input 4 (the prologue P, conv_stats.c) its own */
    if (!kiln_cuda_sup_conv_prologue(c, 4, why, n)) return false;
    kiln_op_ctx v = *c;
    if (v.n_out > 1) v.n_out = 1;
    if (v.n_in > 4) v.n_in = 4;
    return kiln_cuda_sup_fused_conv_stats(c, why, n) && same_float(&v, why, n) && kiln_cuda_conv_supported(&v, true, why, n);
}

/* kiln.ToNHWC: NCHW in, NHWC out; kiln.ToNCHW the other way; 4-D, any element size.
 * ToNHWC may also append zero channels and convert among f32, f16 and bf16. */
static bool sup_layout(const kiln_op_ctx *c, char *why, size_t n) {
    const bool to_nhwc = strcmp(c->node->op_type, "ToNHWC") == 0;
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    const size_t es = kiln_dtype_size(x->dtype);
    if (x->ndim != 4 || y->ndim != 4) {
        snprintf(why, n, "rank %d (layouts are for 4-D tensors)", x->ndim);
        return false;
    }
    if (x->dtype == y->dtype ? es != 1 && es != 2 && es != 4 && es != 8
                             : !to_nhwc || !kiln_cuda_float_dtype(x->dtype) || !kiln_cuda_float_dtype(y->dtype)) {
        snprintf(why, n, "dtype %s to %s", kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
        return false;
    }
    if (y->dims[0] != x->dims[0] || y->dims[2] != x->dims[2] || y->dims[3] != x->dims[3] ||
        y->dims[1] < x->dims[1] || (!to_nhwc && y->dims[1] != x->dims[1])) {
        snprintf(why, n, "output channels %lld for input channels %lld", (long long)y->dims[1], (long long)x->dims[1]);
        return false;
    }
    if (is_nhwc(x) == to_nhwc || is_nhwc(y) != to_nhwc) {
        snprintf(why, n, "input %s and output %s", layout_name(x), layout_name(y));
        return false;
    }
    return true;
}

/* kiln.ConvGradInput(dY, W, X) */
static bool sup_conv_grad_input(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 3 || !present(c, 1) || !present(c, 2)) {
        snprintf(why, n, "inputs dY, W and X are required");
        return false;
    }
    return conv_check(c, c->in[2], c->in[1], c->in[0], "dX", why, n);
}

/* kiln.ConvGradWeight(X, dY, W) */
static bool sup_conv_grad_weight(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 3 || !present(c, 1) || !present(c, 2)) {
        snprintf(why, n, "inputs X, dY and W are required");
        return false;
    }
    /* input 3, the prologue P (f32 whatever X's dtype): its own check; the convolution's on the rest */
    kiln_op_ctx v = *c;
    if (v.n_in > 3) v.n_in = 3;
    return kiln_cuda_sup_conv_prologue(c, 3, why, n) && conv_check(&v, c->in[0], c->in[2], c->in[1], "dW", why, n);
}

static bool fits_products(const int64_t *v, int count, char *why, size_t n) {
    for (int i = 0; i < count; i++)
        if (v[i] > INT_MAX) {
            snprintf(why, n, "a matrix dim or batch of %lld exceeds cuBLASLt's range", (long long)v[i]);
            return false;
        }
    return true;
}

static bool sup_gemm(const kiln_op_ctx *c, char *why, size_t n) {
    if (!same_float(c, why, n)) return false;
    const kiln_tensor *a = c->in[0], *b = c->in[1];
    if (a->ndim != 2 || b->ndim != 2 || (present(c, 2) && c->in[2]->ndim > 2)) {
        snprintf(why, n, "A and B must be matrices and C of rank <= 2");
        return false;
    }
    if (a->dims[0] == 0 || a->dims[1] == 0) {
        snprintf(why, n, "an empty inner dimension");
        return false;
    }
    const int64_t v[] = {a->dims[0], a->dims[1], b->dims[0], b->dims[1]};
    return fits_products(v, 4, why, n);
}

/* kiln.FusedGemm: Gemm's checks and a known activation. */
static bool sup_fused_gemm(const kiln_op_ctx *c, char *why, size_t n) {
    kiln_cuda_act act;
    return sup_gemm(c, why, n) && kiln_cuda_act_get(c->node, true, &act, why, n);
}

static bool sup_matmul(const kiln_op_ctx *c, char *why, size_t n) {
    if (!same_float(c, why, n)) return false;
    const kiln_tensor *a = c->in[0], *b = c->in[1], *y = c->out[0];
    if (a->ndim < 1 || b->ndim < 1) {
        snprintf(why, n, "scalar operands");
        return false;
    }
    if (a->dims[a->ndim - 1] == 0) {
        snprintf(why, n, "an empty inner dimension");
        return false;
    }
    int64_t batch = 1;
    for (int d = 0; d + 2 < y->ndim; d++) batch *= y->dims[d];
    const int64_t v[] = {a->dims[a->ndim - 1], y->ndim ? y->dims[y->ndim - 1] : 1,
                         a->ndim >= 2 ? a->dims[a->ndim - 2] * batch : batch, batch};
    return fits_products(v, 4, why, n);
}

/* The pick kernels' 32-bit indices take pool c's X and Y (MaxPool's picks, their readers). */
static bool picks_fit(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *y, char *why, size_t n) {
    if (kiln_cuda_picks_fit((kiln_op_ctx *)c, x, y)) return true;
    snprintf(why, n, "X of %lld elements: the pool's picks index at most 2^30 (kiln train --disable fuse-pool)",
             (long long)kiln_tensor_numel(x));
    return false;
}

static bool sup_pool(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n) || !same_layout(c, why, n)) return false;
    /* MaxPool's picks (picks = 1, src/ops/max_pool.h): uint8, Y's layout */
    if (has_out(c, 1) && !(kiln_attr_int(c->node, "picks", 0) != 0 && c->out[1]->dtype == KILN_U8 &&
                           is_nhwc(c->out[1]) == is_nhwc(c->out[0]))) {
        snprintf(why, n, "the Indices output");
        return false;
    }
    kiln_cuda_window w;
    if (!kiln_cuda_window_get(c, c->in[0], c->out[0], NULL, &w, why, n)) return false;
    return !has_out(c, 1) || picks_fit(c, c->in[0], c->out[0], why, n);
}

/* Y (N, C, 1, 1) has the same bytes in both layouts: any X layout, any Y label. */
static bool sup_gap(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (c->in[0]->ndim < 3) {
        snprintf(why, n, "rank %d input", c->in[0]->ndim);
        return false;
    }
    return true;
}

static bool sup_batchnorm(const kiln_op_ctx *c, char *why, size_t n) {
    /* write_y = 0 (the conv-bn-prologue pass): Y is an empty rank-1 tensor, of no layout */
    const bool write_y = kiln_attr_int(c->node, "write_y", 1) != 0;
    if (!float_input(c, 0, why, n) || (write_y && !same_layout(c, why, n))) return false;
    for (int i = 1; i < 5; i++) {
        kiln_dtype t = present(c, i) ? c->in[i]->dtype : KILN_DTYPE_UNDEFINED;
        if (!kiln_cuda_float_dtype(t) && t != KILN_F64) {
            snprintf(why, n, "parameter input %d has dtype %s", i, kiln_dtype_name(t));
            return false;
        }
    }
    if (kiln_cuda_bn_training(c)) return kiln_cuda_sup_bn_train(c, why, n); /* norm_train.cu */
    if (kiln_attr_int(c->node, "relu", 0) != 0) { /* the fuse-bn pass fuses training nodes only */
        snprintf(why, n, "relu = 1 in inference mode");
        return false;
    }
    if (has_out(c, 1) || has_out(c, 2) || has_out(c, 3) || has_out(c, 4)) {
        snprintf(why, n, "training mode (inference only)");
        return false;
    }
    return true;
}

static bool sup_softmax(const kiln_op_ctx *c, char *why, size_t n) { return float_input(c, 0, why, n); }

static bool sup_any(const kiln_op_ctx *c, char *why, size_t n) {
    if (kiln_dtype_size(c->out[0]->dtype) > 0) return true;
    snprintf(why, n, "dtype %s", kiln_dtype_name(c->out[0]->dtype));
    return false;
}

static bool bool_scalar(const kiln_op_ctx *c, int i, const char *what, char *why, size_t n) {
    if (!present(c, i) || (c->in[i]->dtype == KILN_BOOL && kiln_tensor_numel(c->in[i]) == 1)) return true;
    snprintf(why, n, "%s must be a bool scalar", what);
    return false;
}

/* A float scalar of any float dtype (read on the device), or absent. */
static bool float_scalar(const kiln_op_ctx *c, int i, const char *what, char *why, size_t n) {
    if (!present(c, i)) return true;
    const kiln_dtype t = c->in[i]->dtype;
    if ((kiln_cuda_float_dtype(t) || t == KILN_F64) && kiln_tensor_numel(c->in[i]) == 1) return true;
    snprintf(why, n, "%s must be a float scalar", what);
    return false;
}

/* Identity copies bytes: any layout, as long as Y is labelled like X. */
static bool sup_same_bytes(const kiln_op_ctx *c, char *why, size_t n) {
    return same_layout(c, why, n) && sup_any(c, why, n);
}

/* Dropout: ratio and training_mode are read on the device; the mask output is bool, and
 * NCHW (drawn by NCHW flat index, the reference's order). An NHWC X is walked as laid out
 * with Y following it at inference only (no mask output, no training_mode input), or
 * read into an NCHW Y and mask in any mode (the layout pass's fold of a kiln.ToNCHW). */
static bool sup_dropout(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    const bool x_nhwc = is_nhwc(c->in[0]), y_nhwc = is_nhwc(c->out[0]);
    if (y_nhwc && !x_nhwc) {
        snprintf(why, n, "input 0 is NCHW and output 0 NHWC");
        return false;
    }
    if (has_out(c, 1) && is_nhwc(c->out[1])) {
        snprintf(why, n, "the mask output is laid out NHWC (it is written NCHW)");
        return false;
    }
    if (y_nhwc && (has_out(c, 1) || present(c, 2))) {
        snprintf(why, n, "a mask output or a training_mode input with an NHWC output");
        return false;
    }
    if (has_out(c, 1) && c->out[1]->dtype != KILN_BOOL) {
        snprintf(why, n, "the mask output must be bool");
        return false;
    }
    return float_scalar(c, 1, "ratio", why, n) && bool_scalar(c, 2, "training_mode", why, n);
}

/* RandomUniform(Like), RandomNormal(Like), Bernoulli (random.cu): a float output (f32,
 * f16, bf16), NCHW; Bernoulli's probabilities in a float dtype. The Like forms read only
 * their input's shape. */
static bool sup_random(const kiln_op_ctx *c, char *why, size_t n) {
    if (!kiln_cuda_float_dtype(c->out[0]->dtype)) {
        snprintf(why, n, "output dtype %s (f32, f16 and bf16 are supported)", kiln_dtype_name(c->out[0]->dtype));
        return false;
    }
    if (strcmp(c->node->op_type, "Bernoulli") == 0 && !float_input(c, 0, why, n)) return false;
    return true;
}

/* kiln.DropoutGrad(dY, mask, ratio?, training_mode?, Y?): dY and the mask NCHW; dX NCHW, or
 * NHWC (the layout pass's fold of a kiln.ToNHWC). With relu = 1 (the fuse-pool pass's fold
 * of a Relu's gradient) Y of dY's dtype, and all four of dY, the mask, Y and dX NCHW: the
 * tiled kernel that writes an NHWC dX applies no Relu. */
static bool sup_dropout_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (!present(c, 1) || c->in[1]->dtype != KILN_BOOL) {
        snprintf(why, n, "the mask must be bool");
        return false;
    }
    for (int i = 0; i < 2; i++)
        if (is_nhwc(c->in[i])) {
            snprintf(why, n, "input %d is laid out NHWC (dY and the mask are read NCHW)", i);
            return false;
        }
    if (kiln_attr_int(c->node, "relu", 0) != 0) {
        if (!present(c, 4) || c->in[4]->dtype != c->in[0]->dtype) {
            snprintf(why, n, "relu = 1 needs input 4, Y, of dY's dtype");
            return false;
        }
        if (is_nhwc(c->in[4]) || is_nhwc(c->out[0])) {
            snprintf(why, n, "relu = 1 with %s laid out NHWC (the Relu is applied with dY, the mask, Y and dX all NCHW)",
                     is_nhwc(c->in[4]) ? "Y" : "dX");
            return false;
        }
    }
    return float_scalar(c, 2, "ratio", why, n) && bool_scalar(c, 3, "training_mode", why, n);
}

static bool sup_unary_grad(const kiln_op_ctx *c, char *why, size_t n);

static bool sup_softmax_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 2 || !present(c, 1)) {
        snprintf(why, n, "inputs Y and dY are required");
        return false;
    }
    return same_float(c, why, n);
}

/* kiln.MaxPoolGrad(dY, X, picks?) */
static bool sup_maxpool_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 2 || !present(c, 1)) {
        snprintf(why, n, "inputs dY and X are required");
        return false;
    }
    if (!float_input(c, 0, why, n)) return false;
    if (c->in[1]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "X has dtype %s, dY %s", kiln_dtype_name(c->in[1]->dtype), kiln_dtype_name(c->in[0]->dtype));
        return false;
    }
    if (present(c, 2) && (c->in[2]->dtype != KILN_U8 || is_nhwc(c->in[2]) != is_nhwc(c->in[0]))) {
        snprintf(why, n, "the picks are %s %s, dY %s", kiln_dtype_name(c->in[2]->dtype), layout_name(c->in[2]),
                 layout_name(c->in[0]));
        return false;
    }
    if (present(c, 2) && !picks_fit(c, c->in[1], c->in[0], why, n)) return false;
    if (is_nhwc(c->in[0]) != is_nhwc(c->in[1]) || is_nhwc(c->out[0]) != is_nhwc(c->in[1])) {
        snprintf(why, n, "dY is %s, X %s and dX %s (one layout for all three)", layout_name(c->in[0]),
                 layout_name(c->in[1]), layout_name(c->out[0]));
        return false;
    }
    kiln_cuda_window w;
    return kiln_cuda_window_get(c, c->in[1], c->in[0], NULL, &w, why, n);
}

/* kiln.BnReluMaxPool(X, scale, B, S) -> Y, picks? */
static bool sup_bn_relu_max_pool(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n) || !same_layout(c, why, n)) return false;
    for (int i = 1; i <= 3; i++)
        if (!present(c, i) || (!kiln_cuda_float_dtype(c->in[i]->dtype) && c->in[i]->dtype != KILN_F64)) {
            snprintf(why, n, "input %d is not a float tensor", i);
            return false;
        }
    if (has_out(c, 1) && (c->out[1]->dtype != KILN_U8 || is_nhwc(c->out[1]) != is_nhwc(c->out[0]))) {
        snprintf(why, n, "the picks are not uint8 in Y's layout");
        return false;
    }
    kiln_cuda_window w;
    if (!kiln_cuda_window_get(c, c->in[0], c->out[0], NULL, &w, why, n)) return false;
    return !has_out(c, 1) || picks_fit(c, c->in[0], c->out[0], why, n);
}

/* A sum of dY (input 0) down to a smaller shape: ConvGradBias, ReduceSumTo, GemmGradC. */
static bool sup_sum_down(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (c->out[0]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "the output must have the input's dtype");
        return false;
    }
    return true;
}

/* kiln.ConvGradBias(dY): dY NCHW, or NHWC (summed as (N*H*W, M)). */
static bool sup_conv_grad_bias(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_sum_down(c, why, n)) return false;
    if (c->in[0]->ndim < 2) {
        snprintf(why, n, "dY has rank %d (at least 2)", c->in[0]->ndim);
        return false;
    }
    return true;
}

/* NegativeLogLikelihoodLoss and its gradient: integer targets of 32 or 64 bits. */
static bool sup_nll(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (!present(c, 1) || (c->in[1]->dtype != KILN_I32 && c->in[1]->dtype != KILN_I64)) {
        snprintf(why, n, "targets must be int32 or int64");
        return false;
    }
    if (present(c, 2) && !kiln_cuda_float_dtype(c->in[2]->dtype) && c->in[2]->dtype != KILN_F64) {
        snprintf(why, n, "weight has dtype %s", kiln_dtype_name(c->in[2]->dtype));
        return false;
    }
    if (present(c, 3) && c->in[3]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "dLoss must have the input's dtype");
        return false;
    }
    if (c->n_in > 4) {
        snprintf(why, n, "%d inputs (at most 4)", c->n_in);
        return false;
    }
    return true;
}

/* kiln.LogSoftmaxNLL(X, target, weight?) and kiln.LogSoftmaxNLLGrad(X, target, weight?,
 * dLoss?, dLogProb?): X (N, C) of a float dtype, targets int32/int64, the loss side (dLoss,
 * dLogProb, the forward's outputs and the gradient's dX_f32 and loss) f32, dX in X's dtype. */
static bool sup_logsoftmax_nll(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (c->in[0]->ndim != 2) {
        snprintf(why, n, "X has rank %d (N, C expected)", c->in[0]->ndim);
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
    for (int i = 3; i < c->n_in; i++)
        if (present(c, i) && c->in[i]->dtype != KILN_F32) {
            snprintf(why, n, "input %d (%s) has dtype %s (f32 expected)", i, i == 3 ? "dLoss" : "dLogProb",
                     kiln_dtype_name(c->in[i]->dtype));
            return false;
        }
    const bool grad = strcmp(c->node->op_type, "LogSoftmaxNLLGrad") == 0; /* dX in X's dtype */
    for (int i = 0; i < c->n_out; i++)
        if (has_out(c, i) && c->out[i]->dtype != (grad && i == 0 ? c->in[0]->dtype : KILN_F32)) {
            snprintf(why, n, "output %d has dtype %s", i, kiln_dtype_name(c->out[i]->dtype));
            return false;
        }
    return true;
}

/* SoftmaxCrossEntropyLoss(X, target, weight?) -> loss, log_prob? and its gradient
 * kiln.SoftmaxCrossEntropyLossGrad(X, target, weight?, dLoss?, dLogProb?) compute exactly
 * what kiln.LogSoftmaxNLL(Grad) compute (src/ops/log_softmax_nll.c: the same inputs in the
 * same order, the same attributes), so they run those kernels (loss.cu), for X (N, C) in
 * f32 (the precision pass keeps the loss f32) and a mean or sum reduction. */
static bool sup_sce(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->in[0]->dtype != KILN_F32) {
        snprintf(why, n, "X is %s (f32 is supported)", kiln_dtype_name(c->in[0]->dtype));
        return false;
    }
    const char *red = kiln_attr_string(c->node, "reduction", "mean");
    if (strcmp(red, "mean") != 0 && strcmp(red, "sum") != 0) {
        snprintf(why, n, "reduction '%s' (mean and sum are supported)", red);
        return false;
    }
    if (c->n_in > 5) {
        snprintf(why, n, "%d inputs (at most 5)", c->n_in);
        return false;
    }
    return sup_logsoftmax_nll(c, why, n);
}

/* Concat, Split, kiln.ConcatGrad: a whole tensor and its parts along an axis. NHWC when
 * the whole is (4-D): every part NHWC or with the same bytes in both layouts; an NCHW
 * whole takes no NHWC part but such. Part k: input first + k (join) or output k. */
static bool parts_layout(const kiln_op_ctx *c, const kiln_tensor *whole, bool join, int first, char *why, size_t n) {
    const bool nhwc = is_nhwc(whole);
    const int np = join ? c->n_in - first : c->n_out;
    for (int k = 0; k < np; k++) {
        const kiln_tensor *t = join ? (present(c, first + k) ? c->in[first + k] : NULL) : has_out(c, k) ? c->out[k] : NULL;
        if (!t || is_nhwc(t) == nhwc || (t->ndim == 4 && kiln_cuda_layout_free(t))) continue;
        snprintf(why, n, "%s %d is %s and the %s %s", join ? "input" : "output", join ? first + k : k, layout_name(t),
                 join ? "output" : "input", layout_name(whole));
        return false;
    }
    return true;
}

static bool sup_concat(const kiln_op_ctx *c, char *why, size_t n) {
    for (int i = 0; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    return sup_any(c, why, n) && parts_layout(c, c->out[0], true, 0, why, n);
}

static bool sup_elements(const kiln_op_ctx *c, char *why, size_t n) {
    const size_t es = kiln_dtype_size(c->in[0]->dtype);
    if (es == 1 || es == 2 || es == 4 || es == 8) return true;
    snprintf(why, n, "dtype %s", kiln_dtype_name(c->in[0]->dtype));
    return false;
}

/* kiln.ChannelShuffle and kiln.Roll: X and Y in one layout, any element size. */
static bool sup_channel_shuffle(const kiln_op_ctx *c, char *why, size_t n) {
    return sup_elements(c, why, n) && same_layout(c, why, n);
}

/* kiln.RowGather: the kernel reads X's bytes as X' (NHWC bytes where in_nhwc, else NCHW)
 * and writes Y's as Y' (NHWC where out_nhwc), any element size: each 4-D end in the layout
 * its attribute names, or with the same bytes in both. */
static bool sup_row_gather(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_elements(c, why, n)) return false;
    const bool want_in = kiln_attr_int(c->node, "in_nhwc", 0) != 0, want_out = kiln_attr_int(c->node, "out_nhwc", 0) != 0;
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    if (x->ndim == 4 && is_nhwc(x) != want_in && !kiln_cuda_layout_free(x)) {
        snprintf(why, n, "X is %s where in_nhwc = %d", layout_name(x), want_in);
        return false;
    }
    if (y->ndim == 4 && is_nhwc(y) != want_out && !kiln_cuda_layout_free(y)) {
        snprintf(why, n, "Y is %s where out_nhwc = %d", layout_name(y), want_out);
        return false;
    }
    return true;
}

/* kiln.ChannelGather: every input and output in input 0's layout, any element size. */
static bool sup_channel_gather(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_elements(c, why, n)) return false;
    for (int i = 1; i < c->n_in; i++)
        if (is_nhwc(c->in[i]) != is_nhwc(c->in[0])) {
            snprintf(why, n, "input %d is %s and input 0 %s", i, layout_name(c->in[i]), layout_name(c->in[0]));
            return false;
        }
    for (int j = 0; j < c->n_out; j++)
        if (is_nhwc(c->out[j]) != is_nhwc(c->in[0])) {
            snprintf(why, n, "output %d is %s and input 0 %s", j, layout_name(c->out[j]), layout_name(c->in[0]));
            return false;
        }
    return true;
}

static bool sup_gather(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_elements(c, why, n)) return false;
    if (c->in[1]->dtype != KILN_I32 && c->in[1]->dtype != KILN_I64) {
        snprintf(why, n, "indices of dtype %s", kiln_dtype_name(c->in[1]->dtype));
        return false;
    }
    return true;
}

/* Cast, comparisons, Where: any kiln dtype. */
static bool sup_cast(const kiln_op_ctx *c, char *why, size_t n) {
    if (kiln_dtype_size(c->in[0]->dtype) > 0 && kiln_dtype_size(c->out[0]->dtype) > 0) return true;
    snprintf(why, n, "a cast from %s to %s", kiln_dtype_name(c->in[0]->dtype), kiln_dtype_name(c->out[0]->dtype));
    return false;
}

static bool sup_compare(const kiln_op_ctx *c, char *why, size_t n) {
    if (!present(c, 1)) {
        snprintf(why, n, "input 1 is missing");
        return false;
    }
    if (c->in[0]->dtype != c->in[1]->dtype || kiln_dtype_size(c->in[0]->dtype) == 0) {
        snprintf(why, n, "inputs of dtypes %s and %s", kiln_dtype_name(c->in[0]->dtype),
                 kiln_dtype_name(c->in[1]->dtype));
        return false;
    }
    return true;
}

static bool sup_where(const kiln_op_ctx *c, char *why, size_t n) {
    if (!present(c, 1) || !present(c, 2) || c->in[0]->dtype != KILN_BOOL ||
        c->in[1]->dtype != c->in[2]->dtype) {
        snprintf(why, n, "Where needs a bool condition and X, Y of one dtype");
        return false;
    }
    return sup_any(c, why, n);
}

/* Slice, Pad, Resize, Range and the reductions plan from values known when the plan is
 * built: the checks read them from the host tensors (kiln_cuda_host_inputs). */
static bool sup_slice(const kiln_op_ctx *c, char *why, size_t n) {
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS];
    return sup_elements(c, why, n) && same_layout(c, why, n) &&
           kiln_cuda_slice_plan(c, kiln_cuda_host_inputs(c), start, step, why, n);
}

static bool sup_pad(const kiln_op_ctx *c, char *why, size_t n) {
    int64_t begin[KILN_MAX_DIMS];
    int mode;
    if (!sup_elements(c, why, n) || !same_layout(c, why, n) ||
        !kiln_cuda_pad_plan(c, kiln_cuda_host_inputs(c), begin, &mode, why, n))
        return false;
    if (present(c, 2) && is_nhwc(c->in[2])) {
        snprintf(why, n, "constant_value is laid out NHWC");
        return false;
    }
    if (present(c, 2) && kiln_tensor_numel(c->in[2]) > 1) {
        snprintf(why, n, "constant_value of %lld elements", (long long)kiln_tensor_numel(c->in[2]));
        return false;
    }
    return true;
}

static bool sup_split(const kiln_op_ctx *c, char *why, size_t n) {
    for (int k = 0; k < c->n_out; k++)
        if (!has_out(c, k)) {
            snprintf(why, n, "output %d is missing", k);
            return false;
        }
    return sup_elements(c, why, n) && parts_layout(c, c->in[0], false, 0, why, n);
}

static bool sup_range(const kiln_op_ctx *c, char *why, size_t n) {
    kiln_tensor *const *hin = kiln_cuda_host_inputs(c);
    const kiln_dtype t = c->out[0]->dtype;
    if (!kiln_dtype_is_float(t) && !kiln_dtype_is_int(t)) {
        snprintf(why, n, "dtype %s", kiln_dtype_name(t));
        return false;
    }
    if (!present(c, 2) || !hin[0] || !hin[2] || !hin[0]->data || !hin[2]->data) {
        snprintf(why, n, "the values of start and delta are not known when the plan is built");
        return false;
    }
    return true;
}

static bool sup_resize(const kiln_op_ctx *c, char *why, size_t n) {
    return sup_elements(c, why, n) && kiln_cuda_resize_check(c, kiln_cuda_host_inputs(c), why, n);
}

/* X in f32 / f16 / bf16, the grid in any float dtype, NCHW (NCDHW, NCW) throughout. */
static bool sup_grid_sample(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n) || !nchw_only(c, why, n)) return false;
    if (kiln_cuda_float_dtype(c->in[1]->dtype) || c->in[1]->dtype == KILN_F64) return true;
    snprintf(why, n, "the grid has dtype %s (a float dtype is needed)", kiln_dtype_name(c->in[1]->dtype));
    return false;
}

/* X in f32 / f16 / bf16 laid out NCHW, the regions in any float dtype, i64 / i32 indices. */
static bool sup_roi_align(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n) || !nchw_only(c, why, n)) return false;
    if (kiln_cuda_float_dtype(c->in[1]->dtype) || c->in[1]->dtype == KILN_F64) return true;
    snprintf(why, n, "the regions have dtype %s (a float dtype is needed)", kiln_dtype_name(c->in[1]->dtype));
    return false;
}

static bool sup_reduce(const kiln_op_ctx *c, char *why, size_t n) {
    bool reduced[KILN_MAX_DIMS], noop;
    return float_input(c, 0, why, n) &&
           kiln_cuda_reduce_axes(c, kiln_cuda_host_inputs(c), 1, reduced, &noop, why, n);
}

/* Scale and B: one value per element of a row (dims[axis:]) or one value in all. */
static bool sup_layernorm(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    const kiln_tensor *x = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    if (!kiln_norm_axis(&axis, x->ndim)) {
        snprintf(why, n, "axis out of range");
        return false;
    }
    int64_t row = 1; /* D: the kernel reads parameters by position in the row */
    for (int d = (int)axis; d < x->ndim; d++) row *= x->dims[d];
    for (int i = 1; i < 3; i++) {
        if (!present(c, i)) continue;
        const kiln_tensor *p = c->in[i];
        bool ok = (kiln_cuda_float_dtype(p->dtype) || p->dtype == KILN_F64) &&
                  (kiln_tensor_numel(p) == 1 || kiln_tensor_numel(p) == row);
        for (int d = 0; ok && kiln_tensor_numel(p) != 1 && d < p->ndim; d++) {
            const int xd = x->ndim - p->ndim + d;
            ok = xd < axis ? p->dims[d] == 1 : p->dims[d] == x->dims[xd];
        }
        if (!ok) {
            snprintf(why, n, "input %d must be a float tensor with one value per row element, or one value", i);
            return false;
        }
    }
    for (int k = 1; k < 3; k++)
        if (has_out(c, k) && c->out[k]->dtype != KILN_F32) {
            snprintf(why, n, "output %d of dtype %s (stash_type f32 is supported)", k,
                     kiln_dtype_name(c->out[k]->dtype));
            return false;
        }
    return true;
}

/* ------------------------------------------ the ONNX conformance set's ops */

/* Not: bool; IsNaN, IsInf: float dtypes including f64. */
static bool sup_predicate(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_dtype t = c->in[0]->dtype;
    const bool is_not = strcmp(c->node->op_type, "Not") == 0;
    if (is_not ? t == KILN_BOOL : kiln_cuda_float_dtype(t) || t == KILN_F64) return true;
    snprintf(why, n, "input dtype %s", kiln_dtype_name(t));
    return false;
}

static bool sup_trilu(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_elements(c, why, n)) return false;
    if (present(c, 1) && c->in[1]->dtype != KILN_I64) {
        snprintf(why, n, "k of dtype %s (int64 expected)", kiln_dtype_name(c->in[1]->dtype));
        return false;
    }
    return true;
}

/* ArgMax, ArgMin, Hardmax, CumSum: floats (f64 included) and integers; CumSum's axis
 * known when the plan is built. */
static bool sup_rows(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_dtype t = c->in[0]->dtype;
    const bool fl = kiln_cuda_float_dtype(t) || t == KILN_F64;
    const bool is_hardmax = strcmp(c->node->op_type, "Hardmax") == 0;
    if (!fl && (is_hardmax || !(kiln_dtype_is_int(t) || t == KILN_BOOL))) {
        snprintf(why, n, "input dtype %s", kiln_dtype_name(t));
        return false;
    }
    if (strcmp(c->node->op_type, "CumSum") == 0) {
        kiln_tensor *const *hin = kiln_cuda_host_inputs(c);
        if (!present(c, 1) || !hin[1] || !hin[1]->data) {
            snprintf(why, n, "the axis is not known when the plan is built");
            return false;
        }
    }
    return true;
}

static bool sup_bit_shift(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_dtype t = c->in[0]->dtype;
    if (!present(c, 1) || c->in[1]->dtype != t || (t != KILN_U8 && t != KILN_U16 && t != KILN_U32 && t != KILN_U64)) {
        snprintf(why, n, "BitShift needs two inputs of one unsigned integer dtype");
        return false;
    }
    return true;
}

/* OneHot: indices of an integer or float dtype, values of 1, 2, 4 or 8 bytes. */
static bool sup_one_hot(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_dtype t = c->in[0]->dtype;
    if (!kiln_dtype_is_int(t) && !kiln_cuda_float_dtype(t) && t != KILN_F64) {
        snprintf(why, n, "indices of dtype %s", kiln_dtype_name(t));
        return false;
    }
    return sup_any(c, why, n);
}

/* ScatterElements, Scatter: data of 1, 2, 4 or 8 bytes (the reductions: numeric),
 * int32 / int64 indices. */
static bool sup_scatter_elements(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_gather(c, why, n)) return false;
    const kiln_dtype t = c->in[0]->dtype;
    if (strcmp(kiln_attr_string(c->node, "reduction", "none"), "none") != 0 && !kiln_dtype_is_int(t) &&
        !kiln_cuda_float_dtype(t) && t != KILN_F64) {
        snprintf(why, n, "a reduction of dtype %s", kiln_dtype_name(t));
        return false;
    }
    return true;
}

/* TopK: floats (f64 included) and integers, the Values output in X's dtype. */
static bool sup_top_k(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_dtype t = c->in[0]->dtype;
    if (!kiln_dtype_is_int(t) && !kiln_cuda_float_dtype(t) && t != KILN_F64) {
        snprintf(why, n, "input dtype %s", kiln_dtype_name(t));
        return false;
    }
    return sup_elements(c, why, n);
}

static bool sup_lrn(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->in[0]->dtype == KILN_F64 || float_input(c, 0, why, n)) return true;
    return false;
}

/* Einsum: floats (f64 included) and integers, every input present. */
static bool sup_einsum(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_dtype t = c->in[0]->dtype;
    if (!kiln_dtype_is_int(t) && !kiln_cuda_float_dtype(t) && t != KILN_F64) {
        snprintf(why, n, "input dtype %s", kiln_dtype_name(t));
        return false;
    }
    for (int i = 0; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    return true;
}

/* Compress, NonZero: the size-deciding input (condition; X) known when the plan is built. */
static bool sup_compress(const kiln_op_ctx *c, char *why, size_t n) {
    kiln_tensor *const *hin = kiln_cuda_host_inputs(c);
    if (!present(c, 1) || !hin[1] || (!hin[1]->data && kiln_tensor_numel(hin[1]) > 0)) {
        snprintf(why, n, "the condition is not known when the plan is built");
        return false;
    }
    return sup_any(c, why, n);
}

static bool sup_non_zero(const kiln_op_ctx *c, char *why, size_t n) {
    kiln_tensor *const *hin = kiln_cuda_host_inputs(c);
    if (!hin[0] || (!hin[0]->data && kiln_tensor_numel(hin[0]) > 0)) {
        snprintf(why, n, "X is not known when the plan is built");
        return false;
    }
    return true;
}

/* QuantizeLinear, DequantizeLinear: floats on the float side (f64 included). */
static bool sup_quantize(const kiln_op_ctx *c, char *why, size_t n) {
    const bool quantize = strcmp(c->node->op_type, "QuantizeLinear") == 0;
    const kiln_dtype f = quantize ? c->in[0]->dtype : c->out[0]->dtype;
    if (!kiln_cuda_float_dtype(f) && f != KILN_F64 && !(quantize && f == KILN_I32)) {
        snprintf(why, n, "dtype %s", kiln_dtype_name(f));
        return false;
    }
    return true;
}

/* ------------------------- training: data movement, products, convolutions (movegrad) */

/* kiln.ConcatGrad(dY, X0..Xn-1): every X present (their shapes cut dY); any element size. */
static bool sup_concat_grad(const kiln_op_ctx *c, char *why, size_t n) {
    for (int i = 1; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d (X%d) is missing", i, i - 1);
            return false;
        }
    return c->n_in >= 2 && sup_elements(c, why, n) && parts_layout(c, c->in[0], false, 0, why, n);
}

/* kiln.SplitGrad(X, split?, dY...): part sizes known when the plan is built. */
static bool sup_split_grad(const kiln_op_ctx *c, char *why, size_t n) {
    int64_t axis, sizes[16];
    if (!sup_elements(c, why, n) || !kiln_cuda_split_grad_parts(c, kiln_cuda_host_inputs(c), &axis, sizes, why, n))
        return false;
    for (int i = 2; i < c->n_in; i++)
        if (present(c, i) && c->in[i]->dtype != c->in[0]->dtype) {
            snprintf(why, n, "dY_%d has dtype %s, X %s", i - 2, kiln_dtype_name(c->in[i]->dtype),
                     kiln_dtype_name(c->in[0]->dtype));
            return false;
        }
    return true;
}

/* kiln.SliceGrad(dY, X, starts, ends, axes?, steps?): Slice's plan on X. */
static bool sup_slice_grad(const kiln_op_ctx *c, char *why, size_t n) {
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS];
    return sup_elements(c, why, n) &&
           kiln_cuda_slice_grad_plan(c, kiln_cuda_host_inputs(c), start, step, why, n);
}

/* kiln.PadGrad(dY, X, pads, -, axes?): float dY; Pad's plan on X. */
static bool sup_pad_grad(const kiln_op_ctx *c, char *why, size_t n) {
    int64_t begin[KILN_MAX_DIMS];
    int mode;
    return float_input(c, 0, why, n) &&
           kiln_cuda_pad_grad_plan(c, kiln_cuda_host_inputs(c), begin, &mode, why, n);
}

/* dY (input 0) of a float dtype and dX in it. */
static bool float_dy_dx(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (c->out[0]->dtype == c->in[0]->dtype) return true;
    snprintf(why, n, "dX has dtype %s, dY %s", kiln_dtype_name(c->out[0]->dtype), kiln_dtype_name(c->in[0]->dtype));
    return false;
}

/* kiln.TileGrad(dY, X, repeats) */
static bool sup_tile_grad(const kiln_op_ctx *c, char *why, size_t n) { return float_dy_dx(c, why, n); }

/* kiln.GatherGrad(dY, data, indices): int32 / int64 indices. */
static bool sup_gather_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_dy_dx(c, why, n)) return false;
    if (!present(c, 2) || (c->in[2]->dtype != KILN_I32 && c->in[2]->dtype != KILN_I64)) {
        snprintf(why, n, "indices must be int32 or int64");
        return false;
    }
    return true;
}

/* kiln.MatMulGradA / MatMulGradB(dY, A, B): one float dtype, MatMul's limits. */
static bool sup_matmul_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 3 || !present(c, 1) || !present(c, 2)) {
        snprintf(why, n, "inputs dY, A and B are required");
        return false;
    }
    if (!same_float(c, why, n) || !float_dy_dx(c, why, n)) return false;
    const kiln_tensor *a = c->in[1], *b = c->in[2], *dy = c->in[0];
    if (a->ndim < 1 || b->ndim < 1) {
        snprintf(why, n, "scalar operands");
        return false;
    }
    const int64_t v[] = {a->dims[a->ndim - 1], b->ndim ? b->dims[b->ndim - 1] : 1, kiln_tensor_numel(dy),
                         kiln_tensor_numel(a), kiln_tensor_numel(b)};
    return fits_products(v, 5, why, n);
}

/* A value the one-pass elementwise gradients read (grad_elementwise.cu): f32, f16, bf16,
 * f64, int32 or int64. */
static bool loadable(const kiln_op_ctx *c, int i, char *why, size_t n) {
    const kiln_dtype t = present(c, i) ? c->in[i]->dtype : KILN_DTYPE_UNDEFINED;
    if (kiln_cuda_float_dtype(t) || t == KILN_F64 || t == KILN_I32 || t == KILN_I64) return true;
    snprintf(why, n, "input %d has dtype %s", i, kiln_dtype_name(t));
    return false;
}

/* The layouts of a broadcasting gradient op (grad_elementwise.cu): an NCHW output with NCHW
 * operands, or an NHWC output with each operand NHWC or with the same bytes in both
 * layouts (sup_binary's rule), every output in one layout. */
static bool bcast_layouts(const kiln_op_ctx *c, char *why, size_t n) {
    const bool nhwc = is_nhwc(c->out[0]);
    for (int k = 1; k < c->n_out; k++)
        if (has_out(c, k) && is_nhwc(c->out[k]) != nhwc) {
            snprintf(why, n, "output %d is %s and output 0 %s", k, layout_name(c->out[k]), layout_name(c->out[0]));
            return false;
        }
    for (int i = 0; i < c->n_in; i++) {
        const kiln_tensor *t = present(c, i) ? c->in[i] : NULL;
        if (!t || is_nhwc(t) == nhwc) continue;
        if (!nhwc) {
            snprintf(why, n, "input %d is laid out NHWC and the output NCHW", i);
            return false;
        }
        int64_t a[4] = {1, 1, 1, 1};
        if (t->ndim > 4) {
            snprintf(why, n, "input %d has rank %d for an NHWC output", i, t->ndim);
            return false;
        }
        for (int d = 0; d < t->ndim; d++) a[4 - t->ndim + d] = t->dims[d];
        if (a[1] != 1 && a[2] * a[3] != 1) {
            snprintf(why, n, "input %d is laid out NCHW and broadcast into an NHWC output", i);
            return false;
        }
    }
    return true;
}

/* kiln.PowGrad(X, Y, dZ): dZ and the output of one float dtype, X and Y loadable. */
static bool sup_pow_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!bcast_layouts(c, why, n)) return false;
    if (c->n_in != 3 || !loadable(c, 0, why, n) || !loadable(c, 1, why, n) || !float_input(c, 2, why, n)) {
        if (c->n_in != 3) snprintf(why, n, "inputs X, Y and dZ are required");
        return false;
    }
    if (c->out[0]->dtype != c->in[2]->dtype) {
        snprintf(why, n, "the output has dtype %s, dZ %s", kiln_dtype_name(c->out[0]->dtype),
                 kiln_dtype_name(c->in[2]->dtype));
        return false;
    }
    return true;
}

/* kiln.PReluGrad(X, slope, dY) -> (dX, dSlope): one float dtype. */
static bool sup_prelu_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in != 3 || !present(c, 1) || !present(c, 2) || !has_out(c, 1)) {
        snprintf(why, n, "inputs X, slope, dY and outputs dX, dSlope are required");
        return false;
    }
    if (!same_float(c, why, n)) return false;
    for (int k = 0; k < 2; k++)
        if (c->out[k]->dtype != c->in[0]->dtype) {
            snprintf(why, n, "output %d has dtype %s", k, kiln_dtype_name(c->out[k]->dtype));
            return false;
        }
    return true;
}

/* kiln.MinGrad / MaxGrad(dY, Y, X_0..X_k): dY and dX of a float dtype, Y and the X of one
 * loadable dtype, at most 16 X. */
static bool sup_select_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!bcast_layouts(c, why, n)) return false;
    if (c->n_in < 3 || c->n_in > 18) {
        snprintf(why, n, "%d inputs (dY, Y and 1 to 16 X)", c->n_in);
        return false;
    }
    if (!float_dy_dx(c, why, n) || !loadable(c, 1, why, n)) return false;
    for (int i = 2; i < c->n_in; i++)
        if (!present(c, i) || c->in[i]->dtype != c->in[1]->dtype) {
            snprintf(why, n, "input %d must be present with Y's dtype", i);
            return false;
        }
    return true;
}

/* ConvTranspose, kiln.ConvTransposeGradInput / GradWeight (conv_transpose.c): the checks of
 * the convolution each is seen as (whose pads must not be negative), and Y-shaped sizes
 * that the convolution maps back onto X's (y: the Y-shaped tensor, x: the X-shaped one). */
static bool convt_check(const kiln_op_ctx *c, int which, char *why, size_t n) {
    const bool fwd = which == KILN_CONVT_FORWARD, gin = which == KILN_CONVT_GRAD_INPUT;
    if (c->n_in < 2 || !present(c, 1) || (!fwd && (c->n_in < 3 || !present(c, 2)))) {
        snprintf(why, n, "%s", fwd ? "inputs X and W are required" : "three inputs are required");
        return false;
    }
    if (fwd && present(c, 2)) {
        const kiln_tensor *b = c->in[2];
        if (b->dtype != c->in[0]->dtype || b->ndim != 1 || b->dims[0] != c->out[0]->dims[1]) {
            snprintf(why, n, "B must be a vector of Y's %lld channels in X's dtype", (long long)c->out[0]->dims[1]);
            return false;
        }
    }
    _Alignas(16) char storage[4096];
    if (kiln_cuda_conv_transpose_view_size() > sizeof storage) {
        snprintf(why, n, "internal: the view does not fit");
        return false;
    }
    kiln_op_ctx *v = kiln_cuda_conv_transpose_view((kiln_op_ctx *)c, which, storage, sizeof storage);
    if (!(fwd ? sup_conv_grad_input(v, why, n) : gin ? sup_conv(v, why, n) : sup_conv_grad_weight(v, why, n)))
        return false;
    const kiln_tensor *x = fwd ? c->in[0] : gin ? c->out[0] : c->in[0];
    const kiln_tensor *y = fwd ? c->out[0] : gin ? c->in[0] : c->in[1];
    const kiln_tensor *w = c->in[fwd ? 1 : gin ? 1 : 2];
    kiln_cuda_window win;
    if (!kiln_cuda_window_get(v, y, x, w->dims + 2, &win, why, n)) return false;
    for (int i = 0; i < win.nd; i++) {
        const int64_t ek = (win.k[i] - 1) * win.d[i] + 1, span = win.in[i] + win.pb[i] + win.pe[i] - ek;
        if (span < 0 || span / win.s[i] + 1 != win.out[i]) {
            snprintf(why, n, "spatial dim %d: output size %lld does not map back to the input's %lld (output_padding "
                     "of a stride or more)", i, (long long)win.in[i], (long long)win.out[i]);
            return false;
        }
    }
    return true;
}

static bool sup_conv_transpose(const kiln_op_ctx *c, char *why, size_t n) {
    return convt_check(c, KILN_CONVT_FORWARD, why, n);
}
static bool sup_convt_grad_input(const kiln_op_ctx *c, char *why, size_t n) {
    return convt_check(c, KILN_CONVT_GRAD_INPUT, why, n);
}
static bool sup_convt_grad_weight(const kiln_op_ctx *c, char *why, size_t n) {
    return convt_check(c, KILN_CONVT_GRAD_WEIGHT, why, n);
}

/* kiln.ResizeGrad(dY, X, roi?, scales?, sizes?): float dY, Resize's plan on X. */
static bool sup_resize_grad(const kiln_op_ctx *c, char *why, size_t n) {
    return float_dy_dx(c, why, n) && kiln_cuda_resize_grad_check(c, kiln_cuda_host_inputs(c), why, n);
}

/* kiln.ReduceSumTo(dY, Like): NCHW; or dY NHWC summed to an output whose bytes are the
 * same in both layouts (rank <= 4, right-aligned to (N, C, H, W) with C == 1 or H*W == 1). */
static bool sup_sum_to(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_sum_down(c, why, n)) return false;
    const kiln_tensor *y = c->out[0];
    int64_t a[4] = {1, 1, 1, 1};
    bool free_y = y->ndim <= 4;
    for (int d = 0; free_y && d < y->ndim; d++) a[4 - y->ndim + d] = y->dims[d];
    free_y = free_y && (a[1] == 1 || a[2] * a[3] == 1);
    if ((is_nhwc(c->in[0]) || is_nhwc(y)) && !free_y) {
        snprintf(why, n, "dY is %s and the output %s, whose bytes differ in the two layouts", layout_name(c->in[0]),
                 layout_name(y));
        return false;
    }
    return true;
}

/* PRelu(X, slope), Mean(X...): every input present, one float dtype, at most 18 inputs. */
static bool sup_broadcast_float(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in > 18) {
        snprintf(why, n, "%d inputs (at most 18)", c->n_in);
        return false;
    }
    for (int i = 0; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    return same_float(c, why, n) && float_dy_dx(c, why, n);
}

/* GlobalMaxPool: a float X of rank >= 3, Y in its dtype. */
static bool sup_global_max_pool(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_dy_dx(c, why, n)) return false;
    if (c->in[0]->ndim < 3) {
        snprintf(why, n, "rank %d input", c->in[0]->ndim);
        return false;
    }
    return true;
}

/* -------------------------------------------------------------------- table */

#define UNARY(name) {name, kiln_cuda_k_unary, sup_unary, NULL, true}
#define BINARY(name) {name, kiln_cuda_k_binary, sup_binary, NULL, true}

/* The pool of kiln.MaxPoolDropout(Grad) (dropout.cu): 2-D, X NHWC, the pooled tensor
 * NCHW, windows that tile X exactly (kernel == strides, no padding, dilations 1). */
static bool fused_pool_window(const kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *pooled, char *why,
                              size_t n) {
    if (!is_nhwc(x) || pooled->ndim != 4 || is_nhwc(pooled)) {
        snprintf(why, n, "X is %s and the pooled tensor %s of rank %d (X NHWC, pooled NCHW, 2-D)", layout_name(x),
                 layout_name(pooled), pooled->ndim);
        return false;
    }
    if (x->dims[1] * x->dims[2] * x->dims[3] > INT32_MAX) {
        snprintf(why, n, "an image of X has more than 2^31 - 1 elements");
        return false;
    }
    kiln_cuda_window w;
    if (!kiln_cuda_window_get(c, x, pooled, NULL, &w, why, n)) return false;
    for (int t = 0; t < 2; t++)
        if (w.k[t] != w.s[t] || w.d[t] != 1 || w.pb[t] != 0 || w.pe[t] != 0 || w.out[t] * w.k[t] != w.in[t]) {
            snprintf(why, n, "windows that do not tile X (kernel %lld, stride %lld, dilation %lld, pads %lld/%lld, "
                             "%lld -> %lld)", (long long)w.k[t], (long long)w.s[t], (long long)w.d[t],
                     (long long)w.pb[t], (long long)w.pe[t], (long long)w.in[t], (long long)w.out[t]);
            return false;
        }
    return true;
}

/* kiln.MaxPoolDropout(X, ratio?, training_mode?) -> Y, mask? */
static bool sup_maxpool_dropout(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n) || !fused_pool_window(c, c->in[0], c->out[0], why, n)) return false;
    if (has_out(c, 1) && (c->out[1]->dtype != KILN_BOOL || is_nhwc(c->out[1]))) {
        snprintf(why, n, "the mask output must be bool and NCHW");
        return false;
    }
    return float_scalar(c, 1, "ratio", why, n) && bool_scalar(c, 2, "training_mode", why, n);
}

/* kiln.MaxPoolDropoutGrad(dY, X, mask, ratio?, training_mode?) -> dX */
static bool sup_maxpool_dropout_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 3 || !present(c, 1) || !present(c, 2)) {
        snprintf(why, n, "inputs dY, X and the mask are required");
        return false;
    }
    if (!float_input(c, 0, why, n)) return false;
    if (c->in[1]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "X has dtype %s, dY %s", kiln_dtype_name(c->in[1]->dtype), kiln_dtype_name(c->in[0]->dtype));
        return false;
    }
    if (!fused_pool_window(c, c->in[1], c->in[0], why, n)) return false;
    if (c->in[2]->dtype != KILN_BOOL || is_nhwc(c->in[2]) || !is_nhwc(c->out[0])) {
        snprintf(why, n, "the mask must be bool and NCHW, dX NHWC (it is %s)", layout_name(c->out[0]));
        return false;
    }
    return float_scalar(c, 3, "ratio", why, n) && bool_scalar(c, 4, "training_mode", why, n);
}

/* A fused elementwise program broadcasts in NHWC as the binary ops do (the layout rule is
 * kiln_cuda_sup_fused_elementwise's, which the kernel checks again). */
static bool sup_fused_elementwise(const kiln_op_ctx *c, char *why, size_t n) {
    return kiln_cuda_sup_fused_elementwise(c, why, n);
}

static const entry table[] = {
    UNARY("Relu"), UNARY("LeakyRelu"), UNARY("Sigmoid"), UNARY("Tanh"), UNARY("Elu"),
    UNARY("Selu"), UNARY("Celu"), UNARY("Gelu"), UNARY("HardSigmoid"), UNARY("HardSwish"),
    UNARY("Softplus"), UNARY("Softsign"), UNARY("Clip"), UNARY("Erf"), UNARY("Exp"),
    UNARY("Log"), UNARY("Sqrt"), UNARY("Reciprocal"), UNARY("Abs"), UNARY("Neg"),
    UNARY("Floor"), UNARY("Ceil"),
    UNARY("Sin"), UNARY("Cos"), UNARY("Tan"), UNARY("Asin"), UNARY("Acos"), UNARY("Atan"),
    UNARY("Sinh"), UNARY("Cosh"), UNARY("Asinh"), UNARY("Acosh"), UNARY("Atanh"), UNARY("Round"),
    UNARY("Sign"), UNARY("ThresholdedRelu"), UNARY("Shrink"),
    BINARY("Add"), BINARY("Sub"), BINARY("Mul"), BINARY("Div"), BINARY("Pow"), BINARY("Max"),
    BINARY("Min"), BINARY("Sum"),
    BINARY("Mod"),
    {"Conv", kiln_cuda_k_conv, sup_conv, kiln_cuda_ws_conv, true},
    {"Gemm", kiln_cuda_k_gemm, sup_gemm, kiln_cuda_ws_matmul, false},
    {"MatMul", kiln_cuda_k_matmul, sup_matmul, kiln_cuda_ws_matmul, false},
    {"MaxPool", kiln_cuda_k_maxpool, sup_pool, NULL, true},
    {"AveragePool", kiln_cuda_k_avgpool, sup_pool, NULL, true},
    {"GlobalAveragePool", kiln_cuda_k_gap, sup_gap, kiln_cuda_ws_gap, true},
    {"BatchNormalization", kiln_cuda_k_batchnorm, sup_batchnorm, kiln_cuda_ws_batchnorm, true},
    {"Softmax", kiln_cuda_k_softmax, sup_softmax, NULL, false},
    {"LogSoftmax", kiln_cuda_k_logsoftmax, sup_softmax, NULL, false},
    {"Flatten", kiln_cuda_k_copy, sup_any, NULL, false},
    {"Reshape", kiln_cuda_k_copy, sup_any, NULL, false},
    {"Identity", kiln_cuda_k_copy, sup_same_bytes, NULL, true},
    {"Dropout", kiln_cuda_k_dropout, sup_dropout, NULL, true},
    {"Concat", kiln_cuda_k_concat, sup_concat, NULL, true},
    {"kiln.ChannelShuffle", kiln_cuda_k_channel_shuffle, sup_channel_shuffle, NULL, true},
    {"kiln.Roll", kiln_cuda_k_roll, sup_channel_shuffle, NULL, true},
    {"kiln.RowGather", kiln_cuda_k_row_gather, sup_row_gather, NULL, true},
    {"kiln.ChannelGather", kiln_cuda_k_channel_gather, sup_channel_gather, NULL, true},
    {"kiln.Attention", kiln_cuda_k_attention, kiln_cuda_sup_attention, kiln_cuda_ws_attention, false},
    {"kiln.ConcatAffine", kiln_cuda_k_concat_affine, kiln_cuda_sup_concat_affine, NULL, true},
    {"Transpose", kiln_cuda_k_transpose, sup_elements, NULL, true}, /* 4-D NHWC in and out */
    {"Gather", kiln_cuda_k_gather, sup_gather, NULL, false},
    {"NegativeLogLikelihoodLoss", kiln_cuda_k_nll, sup_nll, NULL, false},
    {"Cast", kiln_cuda_k_cast, sup_cast, NULL, false},
    {"Equal", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"Less", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"Greater", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"Where", kiln_cuda_k_where, sup_where, NULL, false},
    {"Squeeze", kiln_cuda_k_copy, sup_any, NULL, false},
    {"Unsqueeze", kiln_cuda_k_copy, sup_any, NULL, false},
    {"Slice", kiln_cuda_k_slice, sup_slice, NULL, true},
    {"Expand", kiln_cuda_k_expand, sup_elements, NULL, false},
    {"Tile", kiln_cuda_k_tile, sup_elements, NULL, false},
    {"Pad", kiln_cuda_k_pad, sup_pad, NULL, true},
    {"Split", kiln_cuda_k_split, sup_split, NULL, true},
    {"Shape", kiln_cuda_k_shape, sup_any, NULL, false},
    {"Constant", kiln_cuda_k_constant, sup_any, NULL, false},
    {"ConstantOfShape", kiln_cuda_k_constant_of_shape, sup_any, NULL, false},
    {"Range", kiln_cuda_k_range, sup_range, NULL, false},
    {"Resize", kiln_cuda_k_resize, sup_resize, kiln_cuda_ws_resize, false},
    {"GridSample", kiln_cuda_k_grid_sample, sup_grid_sample, NULL, false},
    {"RoiAlign", kiln_cuda_k_roi_align, sup_roi_align, NULL, false},
    {"ReduceSum", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceMean", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceMax", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceMin", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"LayerNormalization", kiln_cuda_k_layernorm, sup_layernorm, NULL, false},
    {"ReduceL1", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceL2", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceSumSquare", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceProd", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceLogSum", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"ReduceLogSumExp", kiln_cuda_k_reduce, sup_reduce, NULL, false},
    {"GreaterOrEqual", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"LessOrEqual", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"And", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"Or", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"Xor", kiln_cuda_k_compare, sup_compare, NULL, false},
    {"BitShift", kiln_cuda_k_bit_shift, sup_bit_shift, NULL, false},
    {"Not", kiln_cuda_k_predicate, sup_predicate, NULL, false},
    {"IsNaN", kiln_cuda_k_predicate, sup_predicate, NULL, false},
    {"IsInf", kiln_cuda_k_predicate, sup_predicate, NULL, false},
    {"Size", kiln_cuda_k_size, sup_any, NULL, false},
    {"Trilu", kiln_cuda_k_trilu, sup_trilu, NULL, false},
    {"GatherElements", kiln_cuda_k_gather_elements, sup_gather, NULL, false},
    {"DepthToSpace", kiln_cuda_k_depth_to_space, sup_elements, NULL, false},
    {"SpaceToDepth", kiln_cuda_k_depth_to_space, sup_elements, NULL, false},
    {"ArgMax", kiln_cuda_k_rows, sup_rows, NULL, false},
    {"ArgMin", kiln_cuda_k_rows, sup_rows, NULL, false},
    {"Hardmax", kiln_cuda_k_rows, sup_rows, NULL, false},
    {"CumSum", kiln_cuda_k_rows, sup_rows, NULL, false},
    {"EyeLike", kiln_cuda_k_eye_like, sup_any, NULL, false},
    {"OneHot", kiln_cuda_k_one_hot, sup_one_hot, NULL, false},
    {"ScatterElements", kiln_cuda_k_scatter_elements, sup_scatter_elements, NULL, false},
    {"Scatter", kiln_cuda_k_scatter_elements, sup_scatter_elements, NULL, false},
    {"GatherND", kiln_cuda_k_gather_nd, sup_gather, NULL, false},
    {"ScatterND", kiln_cuda_k_scatter_nd, sup_scatter_elements, NULL, false},
    {"TopK", kiln_cuda_k_top_k, sup_top_k, NULL, false},
    {"LRN", kiln_cuda_k_lrn, sup_lrn, NULL, false},
    {"ReverseSequence", kiln_cuda_k_reverse_sequence, sup_elements, NULL, false},
    {"Einsum", kiln_cuda_k_einsum, sup_einsum, kiln_cuda_ws_matmul, false},
    {"Compress", kiln_cuda_k_compress, sup_compress, NULL, false},
    {"NonZero", kiln_cuda_k_non_zero, sup_non_zero, NULL, false},
    {"HannWindow", kiln_cuda_k_window, sup_any, NULL, false},
    {"HammingWindow", kiln_cuda_k_window, sup_any, NULL, false},
    {"BlackmanWindow", kiln_cuda_k_window, sup_any, NULL, false},
    {"QuantizeLinear", kiln_cuda_k_quantize, sup_quantize, NULL, false},
    {"DequantizeLinear", kiln_cuda_k_quantize, sup_quantize, NULL, false},
    {"DynamicQuantizeLinear", kiln_cuda_k_dynamic_quantize, sup_any, NULL, false},
    {"MaxUnpool", kiln_cuda_k_max_unpool, sup_elements, NULL, false},
    /* kiln's gradient ops */
    {"kiln.UnaryGrad", kiln_cuda_k_unary_grad, sup_unary_grad, NULL, true},
    {"kiln.DropoutGrad", kiln_cuda_k_dropout_grad, sup_dropout_grad, NULL, true},
    {"RandomUniform", kiln_cuda_k_random, sup_random, NULL, false},
    {"RandomNormal", kiln_cuda_k_random, sup_random, NULL, false},
    {"RandomUniformLike", kiln_cuda_k_random, sup_random, NULL, false},
    {"RandomNormalLike", kiln_cuda_k_random, sup_random, NULL, false},
    {"Bernoulli", kiln_cuda_k_random, sup_random, NULL, false},
    {"kiln.ConvGradInput", kiln_cuda_k_conv_grad_input, sup_conv_grad_input, kiln_cuda_ws_conv_grad_input, true},
    {"kiln.ConvGradWeight", kiln_cuda_k_conv_grad_weight_prologue, sup_conv_grad_weight,
     kiln_cuda_ws_conv_grad_weight_prologue, true},
    {"kiln.ConvGradBias", kiln_cuda_k_conv_grad_bias, sup_conv_grad_bias, kiln_cuda_ws_channel_sum, true},
    {"kiln.ReduceSumTo", kiln_cuda_k_sum_to, sup_sum_to, kiln_cuda_ws_sum_to, true}, /* movegrad: NHWC dY */
    {"kiln.GemmGradC", kiln_cuda_k_gemm_grad_c, sup_sum_down, kiln_cuda_ws_channel_sum, false},
    {"kiln.MaxPoolGrad", kiln_cuda_k_maxpool_grad, sup_maxpool_grad, kiln_cuda_ws_maxpool_grad, true},
    {"kiln.SoftmaxGrad", kiln_cuda_k_softmax_grad, sup_softmax_grad, NULL, false},
    {"kiln.LogSoftmaxGrad", kiln_cuda_k_softmax_grad, sup_softmax_grad, NULL, false},
    {"kiln.NegativeLogLikelihoodLossGrad", kiln_cuda_k_nll_grad, sup_nll, kiln_cuda_ws_nll_grad, false},
    {"kiln.LogSoftmaxNLLGrad", kiln_cuda_k_logsoftmax_nll_grad, sup_logsoftmax_nll, kiln_cuda_ws_logsoftmax_nll_grad,
     false},
    /* kiln's fused ops and layout conversions (FUSED.md) */
    {"kiln.FusedElementwise", kiln_cuda_k_fused_elementwise, sup_fused_elementwise, NULL, true},
    {"kiln.FusedGemm", kiln_cuda_k_fused_gemm, sup_fused_gemm, kiln_cuda_ws_matmul, false},
    {"kiln.FusedConv", kiln_cuda_k_fused_conv_stats, sup_fused_conv, kiln_cuda_ws_fused_conv_stats, true},
    {"kiln.LogSoftmaxNLL", kiln_cuda_k_logsoftmax_nll, sup_logsoftmax_nll, NULL, false},
    {"kiln.MaxPoolDropout", kiln_cuda_k_maxpool_dropout, sup_maxpool_dropout, NULL, true},
    {"kiln.MaxPoolDropoutGrad", kiln_cuda_k_maxpool_dropout_grad, sup_maxpool_dropout_grad, NULL, true},
    {"kiln.BnReluMaxPool", kiln_cuda_k_bn_relu_max_pool, sup_bn_relu_max_pool, kiln_cuda_ws_bn_relu_max_pool, true},
    {"kiln.ToNHWC", kiln_cuda_k_layout, sup_layout, NULL, true},
    {"kiln.ToNCHW", kiln_cuda_k_layout, sup_layout, NULL, true},
    /* the training step's tail (optim.cu; the parameters' layouts are checked there) */
    {"kiln.OptimizerStep", kiln_cuda_k_optimizer_step, kiln_cuda_sup_optimizer_step, kiln_cuda_ws_optimizer_step, true},
    {"kiln.NonFiniteCheck", kiln_cuda_k_non_finite_check, kiln_cuda_sup_non_finite_check, NULL, true},
    {"kiln.LossScaleUpdate", kiln_cuda_k_loss_scale_update, kiln_cuda_sup_loss_scale_update, NULL, false},
    /* training: data movement, products, convolutions, elementwise (movegrad) */
    {"kiln.ConcatGrad", kiln_cuda_k_concat_grad, sup_concat_grad, NULL, true},
    {"kiln.SplitGrad", kiln_cuda_k_split_grad, sup_split_grad, NULL, false},
    {"kiln.SliceGrad", kiln_cuda_k_slice_grad, sup_slice_grad, NULL, false},
    {"kiln.PadGrad", kiln_cuda_k_pad_grad, sup_pad_grad, NULL, false},
    {"kiln.TileGrad", kiln_cuda_k_tile_grad, sup_tile_grad, NULL, false},
    {"kiln.GatherGrad", kiln_cuda_k_gather_grad, sup_gather_grad, kiln_cuda_ws_gather_grad, false},
    {"CastLike", kiln_cuda_k_cast, sup_cast, NULL, false}, /* Mean's gradient emits it */
    {"kiln.ResizeGrad", kiln_cuda_k_resize_grad, sup_resize_grad, kiln_cuda_ws_resize_grad, false},
    {"kiln.MatMulGradA", kiln_cuda_k_matmul_grad_a, sup_matmul_grad, kiln_cuda_ws_matmul, false},
    {"kiln.MatMulGradB", kiln_cuda_k_matmul_grad_b, sup_matmul_grad, kiln_cuda_ws_matmul, false},
    {"ConvTranspose", kiln_cuda_k_conv_transpose, sup_conv_transpose, kiln_cuda_ws_conv_transpose, false},
    {"kiln.ConvTransposeGradInput", kiln_cuda_k_conv_transpose_grad_input, sup_convt_grad_input,
     kiln_cuda_ws_conv_transpose_grad_input, false},
    {"kiln.ConvTransposeGradWeight", kiln_cuda_k_conv_transpose_grad_weight, sup_convt_grad_weight,
     kiln_cuda_ws_conv_transpose_grad_weight, false},
    {"GlobalMaxPool", kiln_cuda_k_global_max_pool, sup_global_max_pool, NULL, false},
    {"PRelu", kiln_cuda_k_prelu, sup_broadcast_float, NULL, false},
    {"Mean", kiln_cuda_k_mean, sup_broadcast_float, NULL, false},
    {"kiln.PowGrad", kiln_cuda_k_pow_grad, sup_pow_grad, NULL, true},
    {"kiln.PReluGrad", kiln_cuda_k_prelu_grad, sup_prelu_grad, NULL, false},
    {"kiln.MinGrad", kiln_cuda_k_select_grad, sup_select_grad, NULL, true},
    {"kiln.MaxGrad", kiln_cuda_k_select_grad, sup_select_grad, NULL, true},
    {"kiln.GradAccumulate", kiln_cuda_k_grad_accumulate, kiln_cuda_sup_grad_accumulate, NULL, true},
    /* training: normalization, pools, reductions, losses (normgrad) */
    {"kiln.BatchNormGrad", kiln_cuda_k_bn_grad, kiln_cuda_sup_bn_grad, kiln_cuda_ws_bn_grad, true},
    {"kiln.GlobalAveragePoolGrad", kiln_cuda_k_gap_grad, kiln_cuda_sup_gap_grad, NULL, true},
    {"kiln.GlobalMaxPoolGrad", kiln_cuda_k_gmp_grad, kiln_cuda_sup_gmp_grad, NULL, true},
    {"kiln.AveragePoolGrad", kiln_cuda_k_avgpool_grad, kiln_cuda_sup_avgpool_grad, NULL, true},
    {"SoftmaxCrossEntropyLoss", kiln_cuda_k_logsoftmax_nll, sup_sce, NULL, false},
    {"kiln.SoftmaxCrossEntropyLossGrad", kiln_cuda_k_logsoftmax_nll_grad, sup_sce,
     kiln_cuda_ws_logsoftmax_nll_grad, false},
    {"kiln.ReduceSumGrad", kiln_cuda_k_reduce_grad, kiln_cuda_sup_reduce_grad, kiln_cuda_ws_reduce_grad, false},
    {"kiln.ReduceMeanGrad", kiln_cuda_k_reduce_grad, kiln_cuda_sup_reduce_grad, kiln_cuda_ws_reduce_grad, false},
    {"kiln.ReduceMaxGrad", kiln_cuda_k_reduce_grad, kiln_cuda_sup_reduce_grad, kiln_cuda_ws_reduce_grad, false},
    {"kiln.ReduceMinGrad", kiln_cuda_k_reduce_grad, kiln_cuda_sup_reduce_grad, kiln_cuda_ws_reduce_grad, false},
    {"kiln.ReduceL2Grad", kiln_cuda_k_reduce_grad, kiln_cuda_sup_reduce_grad, kiln_cuda_ws_reduce_grad, false},
    {"kiln.LayerNormGrad", kiln_cuda_k_ln_grad, kiln_cuda_sup_ln_grad, NULL, false},
    {"InstanceNormalization", kiln_cuda_k_instnorm, kiln_cuda_sup_instnorm, NULL, false},
    {"kiln.InstanceNormGrad", kiln_cuda_k_instnorm_grad, kiln_cuda_sup_instnorm_grad, kiln_cuda_ws_instnorm_grad,
     false},
    {"kiln.AllReduce", kiln_cuda_k_all_reduce, kiln_cuda_sup_all_reduce, NULL, true},
};

/* Prepare hooks of the entries that have one-time work per shape and attributes, run by
 * kiln_cuda_prepare before the first run (the planner calls it when a plan is created). */
static const struct {
    const char *name;
    prepare_fn prepare;
} prepares[] = {
    {"kiln.FusedElementwise", kiln_cuda_prep_fused_elementwise},
    {"kiln.Attention", kiln_cuda_prep_attention},
};

#define N_ENTRIES ((int)(sizeof table / sizeof table[0]))

/* kiln.UnaryGrad runs where the forward op named by attribute `op` has a unary kernel. */
static bool sup_unary_grad(const kiln_op_ctx *c, char *why, size_t n) {
    const char *op = kiln_attr_string(c->node, "op", "");
    bool known = false;
    for (int i = 0; i < N_ENTRIES && !known; i++)
        known = table[i].run == kiln_cuda_k_unary && strcmp(table[i].name, op) == 0;
    if (!known) {
        snprintf(why, n, "op=%s has no CUDA derivative", op);
        return false;
    }
    if (!same_float(c, why, n)) return false;
    /* elementwise over the bytes: dY, X, Y and dX in one layout */
    for (int i = 0; i < c->n_in; i++)
        if (present(c, i) && is_nhwc(c->in[i]) != is_nhwc(c->out[0])) {
            snprintf(why, n, "input %d is %s and dX %s (one layout for all)", i, layout_name(c->in[i]),
                     layout_name(c->out[0]));
            return false;
        }
    return true;
}

/* The registry's domain of a table name: "kiln.X" is X of domain "kiln". */
static bool entry_is(const entry *e, const char *domain, const char *name) {
    const bool internal = strncmp(e->name, "kiln.", 5) == 0;
    if (internal != (strcmp(domain, "kiln") == 0)) return false;
    return strcmp(internal ? e->name + 5 : e->name, name) == 0;
}

static const entry *entry_named(const char *domain, const char *name) {
    for (int i = 0; i < N_ENTRIES; i++)
        if (entry_is(&table[i], domain ? domain : "", name)) return &table[i];
    return NULL;
}

static const entry *entry_for(int op) {
    const kiln_op_def *d = kiln_op_get(op);
    return d ? entry_named(d->domain, d->name) : NULL;
}

/* By the registry when the node's op is registered; by its domain and op_type otherwise
 * (tests of a kiln op's kernel in a build without the op's CPU reference). */
static const entry *entry_for_node(const kiln_node *n) {
    return n->op >= 0 ? entry_for(n->op) : entry_named(n->domain, n->op_type);
}

int kiln_cuda_kernel_count(void) { return N_ENTRIES; }

const char *kiln_cuda_kernel_name(int i) { return i >= 0 && i < N_ENTRIES ? table[i].name : NULL; }

kiln_cuda_fn kiln_cuda_kernel_for(int op) {
    const entry *e = entry_for(op);
    return e ? e->run : NULL;
}

kiln_status kiln_cuda_supports(kiln_op_ctx *c) {
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    char why[256] = "";
    const bool needs_input = kiln_op_get(c->node->op)->min_inputs > 0; /* not Constant */
    if ((needs_input && (c->n_in < 1 || !c->in[0])) || c->n_out < 1 || !c->out[0])
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "not supported on cuda: missing input 0 or output 0");
    if ((!e->nhwc && !nchw_only(c, why, sizeof why)) || !e->supports(c, why, sizeof why))
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "not supported on cuda: %s", why);
    return KILN_OK;
}

kiln_status kiln_cuda_workspace_size(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    *bytes = 0;
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    if (!e->workspace) return KILN_OK;
    kiln_status st = e->workspace(cu, c, bytes);
    if (st) kiln_msg_prefix(c->kctx, "%s node '%s' on cuda (workspace): ", c->node->op_type, c->node->name);
    return st;
}

kiln_status kiln_cuda_prepare(kiln_cuda *cu, kiln_op_ctx *c) {
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    for (size_t i = 0; i < sizeof prepares / sizeof prepares[0]; i++) {
        if (strcmp(prepares[i].name, e->name) != 0) continue;
        kiln_status st = KILN_OK;
        KILN_CUDA_TRY(st, c->kctx, cudaSetDevice(cu->device));
        if (st == KILN_OK) st = prepares[i].prepare(cu, c);
        if (st) kiln_msg_prefix(c->kctx, "%s node '%s' on cuda (prepare): ", c->node->op_type, c->node->name);
        return st;
    }
    return KILN_OK;
}

kiln_status kiln_cuda_run(kiln_cuda *cu, kiln_op_ctx *c) {
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    kiln_status st = KILN_OK;
    KILN_CUDA_TRY(st, c->kctx, cudaSetDevice(cu->device));
    /* Leftovers of library calls between kernels are not this kernel's launch errors.
     * Faults of earlier kernels are sticky and still show in the next call. */
    (void)cudaGetLastError();
    /* a view the memory plan made (the op's alias_when): no kernel */
    const kiln_op_def *d = kiln_node_def(c->node);
    if (st == KILN_OK && d && d->alias_when && c->n_in > 0 && c->in[0] && c->out[0]->data == c->in[0]->data)
        return KILN_OK;
    if (st == KILN_OK) st = e->run(cu, c);
    if (st) kiln_msg_prefix(c->kctx, "%s node '%s' on cuda: ", c->node->op_type, c->node->name);
    return st;
}
