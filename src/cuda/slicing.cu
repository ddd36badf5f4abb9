/*
 * slicing.cu — data movement ops whose output elements each copy one input element (or a
 * fill value), any dtype as opaque elements of 1, 2, 4 or 8 bytes (bool included):
 *
 *   Slice (starts / ends / axes / steps: values known when the plan is built, read from
 *     c->host_in with the clamping rules of src/ops/slice.c; x and y both NHWC: walked in
 *     that order (ShuffleNet's channel halves)), Expand (bidirectional
 *     broadcast to the output) and Tile (repeats = output dims / input dims) are one
 *     strided gather: output element (j0..jn-1) reads the input at base + sum jd * sd.
 *     Tile views each axis as (repeat, dim) with strides (0, stride), up to 16 dims.
 *     Size-1 dims are dropped and dims walked as one run merged on the host; what is left
 *     as one contiguous run is a device-to-device copy; an innermost contiguous run moves
 *     in units of up to 16 bytes where sizes, strides and addresses allow.
 *   Pad (opset 11+: pads and the opset-18 axes from c->host_in; negative pads crop; x and
 *     y both NHWC: walked in that order, e.g. the pad-channels pass's zero channels):
 *     per output element and axis the source index by `mode` as src/ops/pad.c computes
 *     it: constant (the optional scalar constant_value input, read on the device, else
 *     0), reflect (mirrored without repeating the edge, also past one period), edge,
 *     wrap (opset 19). Nothing padded: a copy. The innermost walked axis not padded
 *     (zero fill): rows in units of up to 16 bytes.
 *   Split along `axis`: part sizes are the outputs' dims (no values needed); each output
 *     is one strided 2-D copy (cudaMemcpy2DAsync) out of its column block, the inverse
 *     of Concat.
 */
#include "dtype.cuh"
#include "row_unit.h"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int MAX_STRIDED = 2 * KILN_MAX_DIMS; /* Tile's (repeat, dim) pairs */

/* ------------------------------------------------------------ strided gather */

struct Strided {
    int nd;
    int64_t base;                  /* input offset of output element 0 */
    int64_t dims[MAX_STRIDED];     /* output dims, outermost first */
    int64_t stride[MAX_STRIDED];   /* input element stride of each (may be 0 or negative) */
};

/* Drop size-1 dims and merge a dim into the previous one when the pair is walked as one
 * run (outer stride == inner stride * inner size; also broadcast pairs: 0 == 0 * n). */
void simplify(Strided *s) {
    int nd = 0;
    for (int d = 0; d < s->nd; d++) {
        const int64_t size = s->dims[d], stride = s->stride[d];
        if (size == 1) continue;
        if (nd > 0 && s->stride[nd - 1] == stride * size) {
            s->dims[nd - 1] *= size;
            s->stride[nd - 1] = stride;
        } else {
            s->dims[nd] = size;
            s->stride[nd] = stride;
            nd++;
        }
    }
    s->nd = nd;
}

template <typename E> __global__ void strided_kernel(const E *x, E *y, int64_t n, Strided a) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t r = i, off = a.base;
        for (int d = a.nd - 1; d >= 0; d--) {
            off += (r % a.dims[d]) * a.stride[d];
            r /= a.dims[d];
        }
        y[i] = x[off];
    }
}

template <typename E>
kiln_status launch_strided(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t n,
                           const Strided &a) {
    strided_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)x, (E *)y, n, a);
    KILN_CUDA_LAUNCHED(ctx, "strided_kernel");
    return KILN_OK;
}

/* y (n elements of es bytes) = the gather a over x. */
kiln_status strided_copy(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t n, size_t es,
                         Strided a) {
    if (n == 0) return KILN_OK;
    simplify(&a);
    if (a.nd == 0 || (a.nd == 1 && a.stride[0] == 1)) { /* one contiguous run */
        KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(y, (const char *)x + a.base * (int64_t)es, (size_t)n * es,
                                             cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    /* The innermost dim a contiguous run (Swin's shifted-window and patch-merging Slices of
     * NHWC rows: ~975 GB/s element by element on an H100): moved in units of up to 16
     * bytes, which the run's length, every stride, the base and both addresses allow. */
    const int nd = a.nd;
    const size_t unit = a.stride[nd - 1] == 1 ? kiln_cuda_row_unit(es, a.dims[nd - 1], a.stride, nd - 1, a.base, x, y) : es;
    if (unit != es) {
        const int64_t k = (int64_t)(unit / es);
        a.dims[nd - 1] /= k;
        a.base /= k;
        for (int d = 0; d < nd - 1; d++) a.stride[d] /= k;
        n /= k;
    }
    kiln_status st;
    if (unit == 16) st = launch_strided<uint4>(cu, ctx, x, y, n, a);
    else KILN_CU_SIZE_DISPATCH(st, ctx, unit, launch_strided, cu, ctx, x, y, n, a);
    return st;
}

/* ------------------------------------------------------------------------ pad */

enum PadMode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP };

struct PadArgs {
    int nd, mode;
    int64_t ydims[KILN_MAX_DIMS], xdims[KILN_MAX_DIMS], xstride[KILN_MAX_DIMS];
    int64_t begin[KILN_MAX_DIMS];
};

/* The source index of padded position q (shifted by the begin pad) on an axis of size n,
 * or -1 for the constant (src/ops/pad.c's source()). */
__device__ __forceinline__ int64_t pad_source(int mode, int64_t q, int64_t n) {
    if (q >= 0 && q < n) return q;
    switch (mode) {
    case PAD_EDGE: return q < 0 ? 0 : n - 1;
    case PAD_WRAP: return ((q % n) + n) % n;
    case PAD_REFLECT: {
        if (n == 1) return 0;
        const int64_t period = 2 * (n - 1), m = ((q % period) + period) % period;
        return m < n ? m : period - m;
    }
    default: return -1;
    }
}

// x: (xdims); y: (ydims); value: one element or NULL (0)
template <typename E> __global__ void pad_kernel(const E *x, E *y, const E *value, int64_t n, PadArgs a) {
    E fill{}; /* zero, also for 16-byte units (uint4) */
    if (value) fill = *value;
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t r = i, off = 0;
        bool inside = true;
        for (int d = a.nd - 1; d >= 0; d--) {
            const int64_t j = r % a.ydims[d];
            r /= a.ydims[d];
            const int64_t s = pad_source(a.mode, j - a.begin[d], a.xdims[d]);
            if (s < 0) inside = false;
            off += s * a.xstride[d];
        }
        y[i] = inside ? x[off] : fill;
    }
}

template <typename E>
kiln_status launch_pad(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, const void *value, int64_t n,
                       const PadArgs &a) {
    pad_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)x, (E *)y, (const E *)value, n, a);
    KILN_CUDA_LAUNCHED(ctx, "pad_kernel");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------- host-side planning */

/* Slice: per axis of data the first index and the step (count: the output dims), from
 * the host values of starts, ends, axes and steps (inputs 1..4), as src/ops/slice.c. */
extern "C" bool kiln_cuda_slice_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *start,
                                     int64_t *step, char *why, size_t wn) {
    const kiln_tensor *x = c->in[0];
    int64_t starts[KILN_MAX_DIMS], ends[KILN_MAX_DIMS], axes[KILN_MAX_DIMS], steps[KILN_MAX_DIMS];
    int ns, ne, na = -1, nst = -1;
    const kiln_tensor *ta = c->n_in > 3 ? hin[3] : NULL, *tst = c->n_in > 4 ? hin[4] : NULL;
    if (c->node->opset < 10) {
        /* opsets 1..9: starts, ends and axes as attributes, steps 1 */
        const int64_t *as = kiln_attr_ints(c->node, "starts", &ns), *ae = kiln_attr_ints(c->node, "ends", &ne);
        const int64_t *aa = kiln_attr_ints(c->node, "axes", &na);
        if (!as || !ae || ns != ne || ns > KILN_MAX_DIMS || (aa && na != ns)) {
            snprintf(why, wn, "an opset-%d Slice without matching starts and ends attributes", c->node->opset);
            return false;
        }
        for (int k = 0; k < ns; k++) {
            starts[k] = as[k];
            ends[k] = ae[k];
            axes[k] = aa ? aa[k] : k;
            steps[k] = 1;
        }
        ta = tst = NULL;
        nst = na = ns;
        goto planned;
    }
    if (c->n_in < 3 || !hin[1] || !hin[2]) {
        snprintf(why, wn, "starts and ends are required");
        return false;
    }
    if (!kiln_cuda_host_ints(hin[1], "starts", starts, KILN_MAX_DIMS, &ns, why, wn) ||
        !kiln_cuda_host_ints(hin[2], "ends", ends, KILN_MAX_DIMS, &ne, why, wn) ||
        (ta && !kiln_cuda_host_ints(ta, "axes", axes, KILN_MAX_DIMS, &na, why, wn)) ||
        (tst && !kiln_cuda_host_ints(tst, "steps", steps, KILN_MAX_DIMS, &nst, why, wn)))
        return false;
    if (ne != ns || (ta && na != ns) || (tst && nst != ns)) {
        snprintf(why, wn, "starts, ends, axes and steps differ in length");
        return false;
    }
    for (int k = 0; k < ns; k++) {
        if (!ta) axes[k] = k;
        if (!tst) steps[k] = 1;
    }
planned:
    for (int d = 0; d < x->ndim; d++) {
        start[d] = 0;
        step[d] = 1;
    }
    for (int k = 0; k < ns; k++) {
        int64_t a = axes[k];
        if (!kiln_norm_axis(&a, x->ndim) || steps[k] == 0) {
            snprintf(why, wn, "axes[%d] or steps[%d] is invalid", k, k);
            return false;
        }
        const int64_t dim = x->dims[a];
        const int64_t st = steps[k] < -INT64_MAX ? -INT64_MAX : steps[k];
        int64_t s = starts[k];
        if (s < 0) s += dim;
        if (st > 0) s = s < 0 ? 0 : s > dim ? dim : s;
        else s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
        /* an empty slice along a reads nothing: its start does not matter */
        start[a] = c->out[0]->dims[a] > 0 ? s : 0;
        step[a] = st;
    }
    return true;
}

/* Pad: the begin pads per axis of data from the host values of pads (input 1) and axes
 * (input 3, opset 18), and the mode. */
extern "C" bool kiln_cuda_pad_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *begin, int *mode,
                                   char *why, size_t wn) {
    const kiln_tensor *x = c->in[0];
    const char *m = kiln_attr_string(c->node, "mode", "constant");
    if (strcmp(m, "constant") == 0) *mode = PAD_CONSTANT;
    else if (strcmp(m, "reflect") == 0) *mode = PAD_REFLECT;
    else if (strcmp(m, "edge") == 0) *mode = PAD_EDGE;
    else if (strcmp(m, "wrap") == 0) *mode = PAD_WRAP;
    else {
        snprintf(why, wn, "mode '%s'", m);
        return false;
    }
    int64_t pads[2 * KILN_MAX_DIMS], axes[KILN_MAX_DIMS];
    int np, na;
    const kiln_tensor *ta = c->n_in > 3 ? hin[3] : NULL;
    if (c->node->opset < 11) {
        /* opsets 1..10: pads (opset 1: paddings) as an attribute, zero fill only */
        const int64_t *ap = kiln_attr_ints(c->node, c->node->opset < 2 ? "paddings" : "pads", &np);
        if (!ap || np > 2 * KILN_MAX_DIMS || c->n_in > 1) {
            snprintf(why, wn, "an opset-%d Pad without a pads attribute", c->node->opset);
            return false;
        }
        if (kiln_attr_float(c->node, "value", 0.0f) != 0.0f) {
            snprintf(why, wn, "an opset-%d Pad with a nonzero value attribute", c->node->opset);
            return false;
        }
        for (int k = 0; k < np; k++) pads[k] = ap[k];
        ta = NULL;
    } else if (c->n_in < 2 || !hin[1]) {
        snprintf(why, wn, "pads is required");
        return false;
    } else if (!kiln_cuda_host_ints(hin[1], "pads", pads, 2 * KILN_MAX_DIMS, &np, why, wn) ||
               (ta && !kiln_cuda_host_ints(ta, "axes", axes, KILN_MAX_DIMS, &na, why, wn))) {
        return false;
    }
    if (!ta) {
        na = x->ndim;
        for (int d = 0; d < na; d++) axes[d] = d;
    }
    if (np != 2 * na) {
        snprintf(why, wn, "pads has %d values for %d axes", np, na);
        return false;
    }
    for (int d = 0; d < x->ndim; d++) begin[d] = 0;
    for (int k = 0; k < na; k++) {
        int64_t a = axes[k];
        if (!kiln_norm_axis(&a, x->ndim)) {
            snprintf(why, wn, "axes[%d] is out of range", k);
            return false;
        }
        begin[a] = pads[k];
    }
    return true;
}

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_slice(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], xs[KILN_MAX_DIMS];
    char why[160];
    if (!kiln_cuda_slice_plan(c, c->host_in, start, step, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    kiln_strides(x->ndim, x->dims, xs);
    /* the logical dims in the order the bytes are walked: (N, H, W, C) for NHWC x and y */
    int order[KILN_MAX_DIMS];
    for (int d = 0; d < y->ndim; d++) order[d] = d;
    if (x->ndim == 4 && x->format == KILN_FORMAT_NHWC) {
        const int phys[4] = {0, 2, 3, 1};
        memcpy(order, phys, sizeof phys);
        xs[1] = 1;
        xs[3] = x->dims[1];
        xs[2] = x->dims[3] * x->dims[1];
        xs[0] = x->dims[2] * xs[2];
    }
    Strided a;
    memset(&a, 0, sizeof a);
    a.nd = y->ndim;
    for (int d = 0; d < y->ndim; d++) a.base += start[d] * xs[d];
    for (int j = 0; j < y->ndim; j++) {
        const int d = order[j];
        a.dims[j] = y->dims[d];
        a.stride[j] = step[d] * xs[d];
    }
    return strided_copy(cu, c->kctx, x->data, y->data, n, kiln_dtype_size(x->dtype), a);
}

extern "C" kiln_status kiln_cuda_k_expand(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    Strided a;
    memset(&a, 0, sizeof a);
    a.nd = y->ndim;
    kiln_broadcast_strides(x->ndim, x->dims, y->ndim, y->dims, a.stride);
    for (int d = 0; d < y->ndim; d++) a.dims[d] = y->dims[d];
    return strided_copy(cu, c->kctx, x->data, y->data, kiln_tensor_numel(y), kiln_dtype_size(x->dtype), a);
}

extern "C" kiln_status kiln_cuda_k_tile(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK; /* then some input dim or repeat is 0 */
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, xs);
    Strided a;
    memset(&a, 0, sizeof a);
    a.nd = 2 * x->ndim;
    for (int d = 0; d < x->ndim; d++) { /* output axis d = (repeat, dim) */
        a.dims[2 * d] = y->dims[d] / x->dims[d];
        a.stride[2 * d] = 0;
        a.dims[2 * d + 1] = x->dims[d];
        a.stride[2 * d + 1] = xs[d];
    }
    return strided_copy(cu, c->kctx, x->data, y->data, n, kiln_dtype_size(x->dtype), a);
}

extern "C" kiln_status kiln_cuda_k_pad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    PadArgs a;
    memset(&a, 0, sizeof a);
    char why[160];
    if (!kiln_cuda_pad_plan(c, c->host_in, a.begin, &a.mode, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    a.nd = y->ndim;
    kiln_strides(x->ndim, x->dims, a.xstride);
    for (int d = 0; d < y->ndim; d++) {
        a.ydims[d] = y->dims[d];
        a.xdims[d] = x->dims[d];
    }
    const bool no_value = c->n_in < 3 || !c->in[2];
    if (x->ndim == 4 && x->format == KILN_FORMAT_NHWC && a.mode == PAD_CONSTANT && no_value && a.begin[0] == 0 &&
        a.begin[1] == 0 && a.begin[2] == 0 && a.begin[3] == 0 && y->dims[0] == x->dims[0] && y->dims[2] == x->dims[2] &&
        y->dims[3] == x->dims[3] && y->dims[1] >= x->dims[1]) {
        /* zero channels at the end (the pad-channels pass's): x and a zero block, joined as
         * Concat joins NHWC channel blocks */
        const int64_t sizes[2] = {x->dims[1], y->dims[1] - x->dims[1]};
        kiln_tensor *parts[2] = {(kiln_tensor *)x, NULL};
        return kiln_cuda_axis_blocks(cu, c->kctx, y, 1, 2, sizes, NULL, parts, false);
    }
    if (x->ndim == 4 && x->format == KILN_FORMAT_NHWC) { /* walk (N, H, W, C): x and y both NHWC */
        const int64_t C = x->dims[1], H = x->dims[2], W = x->dims[3], b1 = a.begin[1];
        const int64_t st[4] = {H * W * C, W * C, C, 1};
        for (int j = 0; j < 4; j++) a.xstride[j] = st[j];
        a.ydims[1] = y->dims[2], a.ydims[2] = y->dims[3], a.ydims[3] = y->dims[1];
        a.xdims[1] = H, a.xdims[2] = W, a.xdims[3] = C;
        a.begin[1] = a.begin[2], a.begin[2] = a.begin[3], a.begin[3] = b1;
    }
    const kiln_tensor *v = c->n_in > 2 ? c->in[2] : NULL;
    const void *value = v && kiln_tensor_numel(v) == 1 ? v->data : NULL;
    const size_t es = kiln_dtype_size(x->dtype);
    bool same = true; /* nothing padded or cropped (Swin pads to whole windows: 56 by 0) */
    for (int d = 0; d < a.nd; d++) same = same && a.begin[d] == 0 && a.ydims[d] == a.xdims[d];
    if (same) {
        if (x->data != y->data)
            KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, (size_t)n * es, cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    /* The innermost walked axis neither padded nor cropped (pads on H and W of NHWC): its
     * rows move whole, in units of up to 16 bytes when the fill is zero (no value input)
     * and the row's bytes and both addresses allow. */
    int64_t units = n;
    const int last = a.nd - 1;
    const size_t unit = last >= 0 && !value && a.begin[last] == 0 && a.ydims[last] == a.xdims[last]
                            ? kiln_cuda_row_unit(es, a.xdims[last], NULL, 0, 0, x->data, y->data)
                            : es;
    if (unit != es) { /* the outer strides are multiples of the row, hence of k */
        const int64_t k = (int64_t)(unit / es);
        a.xdims[last] /= k;
        a.ydims[last] /= k;
        for (int d = 0; d < last; d++) a.xstride[d] /= k;
        units /= k;
    }
    if (unit == 16) st = launch_pad<uint4>(cu, c->kctx, x->data, y->data, NULL, units, a);
    else KILN_CU_SIZE_DISPATCH(st, c->kctx, unit, launch_pad, cu, c->kctx, x->data, y->data, value, units, a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_split(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *x = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, x->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    for (int k = 0; k < c->n_out; k++)
        if (!c->out[k]) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "output %d is missing", k);
    return kiln_cuda_axis_blocks(cu, c->kctx, x, axis, c->n_out, NULL, (const kiln_tensor *const *)c->out, c->out,
                                 true);
}
