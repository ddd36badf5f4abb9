/*
 * grad_movement.cu — the gradients of the data-movement ops, as their CPU references in
 * src/ops/ compute them (all NCHW: these forward ops have no NHWC rule in the layout pass):
 *
 *   kiln.ConcatGrad(dY, X0..Xn-1) -> dX0..dXn-1: dY cut along axis into the Xi's blocks
 *     (one cudaMemcpy2DAsync per part, Split's copy); any element size.
 *   kiln.SplitGrad(X, split?, dY0..dYn-1) -> dX: the parts side by side, a zero block for
 *     a part whose dY is absent (part sizes by src/ops/split.c's rules: the split input's
 *     host values, the opset < 13 attribute, num_outputs, or equal parts); any element size.
 *   kiln.SliceGrad(dY, X, starts, ends, axes?, steps?) -> dX: zeros, then each dY element
 *     stored at the position the slice read it from (slice positions are distinct: no
 *     conflicts); any element size. The plan is Slice's (kiln_cuda_slice_plan) on X.
 *   kiln.PadGrad(dY, X, pads, -, axes?) -> dX (mode and opset of the Pad): constant mode a
 *     gather of dY at i + begin (0 where cropped); reflect, edge and wrap a deterministic
 *     gather: each dX element sums, in a fixed order, the dY positions whose source it is
 *     (per axis the positions q with pad_source(q - begin) == i; f32 accumulation).
 *   kiln.TileGrad(dY, X, repeats) -> dX: each dX element sums its copies over the tiles
 *     (f32 accumulation, tiles in row-major order).
 *   kiln.GatherGrad(dY, data, indices) -> dX (attribute axis): atomic scatter-add of dY
 *     rows into an f32 accumulator (dX itself for f32, the workspace for f16 / bf16, then
 *     rounded once); negative indices count from the end; out-of-range indices (the CPU
 *     reference rejects them) are skipped. The order of the adds is not fixed.
 * PadGrad, TileGrad and GatherGrad take f32, f16 and bf16 (table.c checks).
 */
#include "dtype.cuh"
#include "grad_movegrad.h"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* ------------------------------------------------------------ SliceGrad: scatter */

struct Scatter {
    int nd;
    int64_t base;                 /* dX offset of dY element 0 */
    int64_t dims[KILN_MAX_DIMS];  /* dY dims */
    int64_t stride[KILN_MAX_DIMS]; /* dX element stride of each (may be negative) */
};

// dy: (dims); dx: stored at base + sum j_d * stride_d
template <typename E> __global__ void scatter_kernel(const E *dy, E *dx, int64_t n, Scatter a) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t r = i, off = a.base;
        for (int d = a.nd - 1; d >= 0; d--) {
            off += (r % a.dims[d]) * a.stride[d];
            r /= a.dims[d];
        }
        dx[off] = dy[i];
    }
}

template <typename E>
kiln_status launch_scatter(kiln_cuda *cu, kiln_context *ctx, const void *dy, void *dx, int64_t n, const Scatter &a) {
    scatter_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const E *)dy, (E *)dx, n, a);
    KILN_CUDA_LAUNCHED(ctx, "scatter_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ PadGrad: gather */

enum PadMode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP }; /* as slicing.cu's */

struct PadGradArgs {
    int nd, mode;
    int64_t xdims[KILN_MAX_DIMS];   /* dX dims */
    int64_t ydims[KILN_MAX_DIMS];   /* dY dims */
    int64_t ystride[KILN_MAX_DIMS]; /* dY element strides */
    int64_t begin[KILN_MAX_DIMS];   /* pads before each axis (negative: cropped) */
};

/* slicing.cu's pad_source: the X index padded position q (shifted by begin) copies. */
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

/* The first dY position >= q0 along axis d whose source is i, or ydims[d]. */
__device__ __forceinline__ int64_t next_source(const PadGradArgs &a, int d, int64_t i, int64_t q0) {
    int64_t q = q0;
    if (a.mode == PAD_CONSTANT) { /* only i + begin */
        const int64_t p = i + a.begin[d];
        return p >= q && p < a.ydims[d] ? p : a.ydims[d];
    }
    for (; q < a.ydims[d]; q++)
        if (pad_source(a.mode, q - a.begin[d], a.xdims[d]) == i) return q;
    return q;
}

// dy: (ydims); dx: (xdims)
template <typename T> __global__ void pad_grad_kernel(const T *dy, T *dx, int64_t n, PadGradArgs a) {
    for (int64_t e = thread_index(); e < n; e += grid_stride()) {
        int64_t idx[KILN_MAX_DIMS], q[KILN_MAX_DIMS], first[KILN_MAX_DIMS];
        int64_t r = e;
        for (int d = a.nd - 1; d >= 0; d--) {
            idx[d] = r % a.xdims[d];
            r /= a.xdims[d];
        }
        bool any = true;
        for (int d = 0; d < a.nd; d++) {
            first[d] = q[d] = next_source(a, d, idx[d], 0);
            any = any && q[d] < a.ydims[d];
        }
        float s = 0.f;
        while (any) { /* an odometer over the product of the axes' source lists */
            int64_t off = 0;
            for (int d = 0; d < a.nd; d++) off += q[d] * a.ystride[d];
            s += to_f(dy[off]);
            int d = a.nd - 1;
            for (; d >= 0; d--) {
                q[d] = next_source(a, d, idx[d], q[d] + 1);
                if (q[d] < a.ydims[d]) break;
                q[d] = first[d];
            }
            any = d >= 0;
        }
        dx[e] = from_f<T>(s);
    }
}

template <typename T>
kiln_status launch_pad_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, void *dx, int64_t n,
                            const PadGradArgs &a) {
    pad_grad_kernel<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, n, a);
    KILN_CUDA_LAUNCHED(ctx, "pad_grad_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ TileGrad: gather */

struct TileGradArgs {
    int nd;
    int64_t xdims[KILN_MAX_DIMS];   /* dX dims */
    int64_t reps[KILN_MAX_DIMS];    /* repeats (dY dim / dX dim) */
    int64_t ystride[KILN_MAX_DIMS]; /* dY element strides */
};

// dy: (xdims * reps); dx: (xdims)
template <typename T> __global__ void tile_grad_kernel(const T *dy, T *dx, int64_t n, int64_t tiles, TileGradArgs a) {
    for (int64_t e = thread_index(); e < n; e += grid_stride()) {
        int64_t base = 0, r = e;
        for (int d = a.nd - 1; d >= 0; d--) {
            base += (r % a.xdims[d]) * a.ystride[d];
            r /= a.xdims[d];
        }
        float s = 0.f;
        for (int64_t t = 0; t < tiles; t++) {
            int64_t off = base, u = t;
            for (int d = a.nd - 1; d >= 0; d--) {
                off += (u % a.reps[d]) * a.xdims[d] * a.ystride[d];
                u /= a.reps[d];
            }
            s += to_f(dy[off]);
        }
        dx[e] = from_f<T>(s);
    }
}

template <typename T>
kiln_status launch_tile_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, void *dx, int64_t n, int64_t tiles,
                             const TileGradArgs &a) {
    tile_grad_kernel<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, n,
                                                                                       tiles, a);
    KILN_CUDA_LAUNCHED(ctx, "tile_grad_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ GatherGrad: scatter-add */

// dy: (outer, nidx, inner); acc: (outer, dim, inner) f32, zeroed
template <typename T, typename I>
__global__ void gather_grad_kernel(const T *dy, const I *ix, float *acc, int64_t n, int64_t nidx, int64_t inner,
                                   int64_t dim) {
    for (int64_t e = thread_index(); e < n; e += grid_stride()) {
        const int64_t t = e % inner, k = (e / inner) % nidx, o = e / (inner * nidx);
        int64_t i = (int64_t)ix[k];
        if (i < 0) i += dim;
        if (i < 0 || i >= dim) continue; /* rejected by the CPU reference */
        atomicAdd(&acc[(o * dim + i) * inner + t], to_f(dy[e]));
    }
}

template <typename T> __global__ void round_kernel(const float *acc, T *y, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = from_f<T>(acc[i]);
}

struct GatherGradArgs {
    const void *dy, *ix;
    bool ix64;
    void *dx;
    float *acc; /* f32 accumulator: dx itself for f32 */
    int64_t n, nidx, inner, dim, nx;
};

template <typename T> kiln_status launch_gather_grad(kiln_cuda *cu, kiln_context *ctx, const GatherGradArgs &a) {
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(a.acc, 0, (size_t)a.nx * sizeof(float), cu->stream));
    if (a.n > 0) {
        const unsigned blocks = kiln_cuda_blocks(cu, a.n, THREADS);
        if (a.ix64)
            gather_grad_kernel<T, int64_t><<<blocks, THREADS, 0, cu->stream>>>(
                (const T *)a.dy, (const int64_t *)a.ix, a.acc, a.n, a.nidx, a.inner, a.dim);
        else
            gather_grad_kernel<T, int32_t><<<blocks, THREADS, 0, cu->stream>>>(
                (const T *)a.dy, (const int32_t *)a.ix, a.acc, a.n, a.nidx, a.inner, a.dim);
        KILN_CUDA_LAUNCHED(ctx, "gather_grad_kernel");
    }
    if ((void *)a.acc != a.dx) {
        round_kernel<T><<<kiln_cuda_blocks(cu, a.nx, THREADS), THREADS, 0, cu->stream>>>(a.acc, (T *)a.dx, a.nx);
        KILN_CUDA_LAUNCHED(ctx, "round_kernel");
    }
    return KILN_OK;
}

/* A context whose inputs start at c's input `at` and whose output 0 is `out`: the
 * forward op's view of a gradient op's inputs, for the forward's host-side plans. */
struct Shifted {
    kiln_op_ctx c;
    kiln_tensor *out;
};
void shifted(const kiln_op_ctx *c, int at, kiln_tensor *out, Shifted *s) {
    s->c = *c;
    s->c.in = c->in + at;
    s->c.n_in = c->n_in - at;
    s->out = out;
    s->c.out = &s->out;
    s->c.n_out = 1;
    s->c.host_in = c->host_in ? c->host_in + at : NULL;
}

} // namespace

/* ------------------------------------------------------------------ host-side checks */

/* SliceGrad and PadGrad: the forward's plan on (X, ...) with dY as its output. */
extern "C" bool kiln_cuda_slice_grad_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *start,
                                          int64_t *step, char *why, size_t wn) {
    if (c->n_in < 3 || !c->in[1]) {
        snprintf(why, wn, "inputs dY, X, starts and ends are required");
        return false;
    }
    Shifted s;
    shifted(c, 1, c->in[0], &s);
    return kiln_cuda_slice_plan(&s.c, hin + 1, start, step, why, wn);
}

extern "C" bool kiln_cuda_pad_grad_plan(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *begin, int *mode,
                                        char *why, size_t wn) {
    if (c->n_in < 3 || !c->in[1]) {
        snprintf(why, wn, "inputs dY, X and pads are required");
        return false;
    }
    Shifted s;
    shifted(c, 1, c->in[0], &s);
    return kiln_cuda_pad_plan(&s.c, hin + 1, begin, mode, why, wn);
}

/* SplitGrad's part sizes along its axis (src/ops/split.c's get_spec / part_size), from the
 * host value of split (input 1). */
extern "C" bool kiln_cuda_split_grad_parts(const kiln_op_ctx *c, kiln_tensor *const *hin, int64_t *axis_out,
                                           int64_t *sizes, char *why, size_t wn) {
    const kiln_tensor *x = c->in[0];
    const int n = c->n_in - 2;
    if (n < 1 || n > 16 || !x) {
        snprintf(why, wn, "%d parts (1 to 16)", n);
        return false;
    }
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, x->ndim)) {
        snprintf(why, wn, "axis out of range");
        return false;
    }
    const int64_t dim = x->dims[axis];
    int count = -1;
    if (c->node->opset >= 13 && c->n_in > 1 && c->in[1]) {
        if (!kiln_cuda_host_ints(hin[1], "split", sizes, 16, &count, why, wn)) return false;
    } else if (c->node->opset < 13 && kiln_node_attr(c->node, "split")) {
        const int64_t *s = kiln_attr_ints(c->node, "split", &count);
        for (int k = 0; k < count && k < 16; k++) sizes[k] = s[k];
    }
    if (count >= 0) {
        if (count != n) {
            snprintf(why, wn, "split has %d sizes for %d parts", count, n);
            return false;
        }
    } else {
        int64_t chunk;
        if (c->node->opset >= 18 && kiln_node_attr(c->node, "num_outputs")) chunk = (dim + n - 1) / n;
        else if (dim % n == 0) chunk = dim / n;
        else {
            snprintf(why, wn, "axis of size %lld does not split into %d equal parts", (long long)dim, n);
            return false;
        }
        for (int k = 0; k < n; k++) sizes[k] = k == n - 1 ? dim - (int64_t)k * chunk : chunk;
    }
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if (sizes[k] < 0) {
            snprintf(why, wn, "a negative part size");
            return false;
        }
        total += sizes[k];
    }
    if (total != dim) {
        snprintf(why, wn, "part sizes add up to %lld, the axis has %lld", (long long)total, (long long)dim);
        return false;
    }
    *axis_out = axis;
    return true;
}

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_concat_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *dy = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, dy->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    /* input 1 + k: the forward's input k, for its size; dX_k may be absent */
    return kiln_cuda_axis_blocks(cu, c->kctx, dy, axis, c->n_out, NULL, (const kiln_tensor *const *)c->in + 1, c->out,
                                 true);
}

extern "C" kiln_status kiln_cuda_k_split_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *dx = c->out[0];
    if (kiln_tensor_numel(dx) == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    int64_t axis, sizes[16];
    char why[160];
    if (!kiln_cuda_split_grad_parts(c, c->host_in, &axis, sizes, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    /* inputs 2 + k: dY_k (absent: zeros) */
    return kiln_cuda_axis_blocks(cu, c->kctx, dx, axis, c->n_in - 2, sizes, NULL, (kiln_tensor *const *)c->in + 2,
                                 false);
}

extern "C" kiln_status kiln_cuda_k_slice_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    const int64_t nx = kiln_tensor_numel(dx), n = kiln_tensor_numel(dy);
    if (nx == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], xs[KILN_MAX_DIMS];
    char why[160];
    if (!kiln_cuda_slice_grad_plan(c, c->host_in, start, step, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    const size_t es = kiln_dtype_size(dx->dtype);
    KILN_CUDA_CHECK(c->kctx, cudaMemsetAsync(dx->data, 0, (size_t)nx * es, cu->stream));
    if (n == 0) return KILN_OK;
    kiln_strides(dx->ndim, dx->dims, xs);
    Scatter a;
    memset(&a, 0, sizeof a);
    a.nd = dy->ndim;
    for (int d = 0; d < dy->ndim; d++) {
        a.base += start[d] * xs[d];
        a.dims[d] = dy->dims[d];
        a.stride[d] = step[d] * xs[d];
    }
    KILN_CU_SIZE_DISPATCH(st, c->kctx, es, launch_scatter, cu, c->kctx, dy->data, dx->data, n, a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_pad_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    const int64_t n = kiln_tensor_numel(dx);
    if (n == 0) return KILN_OK;
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    PadGradArgs a;
    memset(&a, 0, sizeof a);
    char why[160];
    if (!kiln_cuda_pad_grad_plan(c, c->host_in, a.begin, &a.mode, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s", why);
    a.nd = dx->ndim;
    kiln_strides(dy->ndim, dy->dims, a.ystride);
    for (int d = 0; d < dx->ndim; d++) {
        a.xdims[d] = dx->dims[d];
        a.ydims[d] = dy->dims[d];
    }
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dx->dtype, launch_pad_grad, cu, c->kctx, dy->data, dx->data, n, a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_tile_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    const int64_t n = kiln_tensor_numel(dx);
    if (n == 0) return KILN_OK;
    TileGradArgs a;
    memset(&a, 0, sizeof a);
    a.nd = dx->ndim;
    kiln_strides(dy->ndim, dy->dims, a.ystride);
    int64_t tiles = 1;
    for (int d = 0; d < dx->ndim; d++) {
        a.xdims[d] = dx->dims[d];
        a.reps[d] = dy->dims[d] / dx->dims[d]; /* dx->dims[d] > 0: n > 0 */
        tiles *= a.reps[d];
    }
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dx->dtype, launch_tile_grad, cu, c->kctx, dy->data, dx->data, n, tiles, a);
    return st;
}

/* f16 / bf16: an f32 accumulator of dX's element count. */
extern "C" kiln_status kiln_cuda_ws_gather_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = c->out[0]->dtype == KILN_F32 ? 0 : (size_t)kiln_tensor_numel(c->out[0]) * sizeof(float);
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_gather_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *ix = c->in[2];
    kiln_tensor *dx = c->out[0];
    GatherGradArgs a;
    memset(&a, 0, sizeof a);
    a.nx = kiln_tensor_numel(dx);
    if (a.nx == 0) return KILN_OK;
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, dx->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    a.inner = 1;
    for (int d = (int)axis + 1; d < dx->ndim; d++) a.inner *= dx->dims[d];
    a.dim = dx->dims[axis];
    a.nidx = kiln_tensor_numel(ix);
    a.n = kiln_tensor_numel(dy);
    a.dy = dy->data;
    a.ix = ix->data;
    a.ix64 = ix->dtype == KILN_I64;
    a.dx = dx->data;
    if (dx->dtype == KILN_F32) a.acc = (float *)dx->data;
    else if (c->workspace && c->workspace_size >= (size_t)a.nx * sizeof(float)) a.acc = (float *)c->workspace;
    else return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "GatherGrad's f32 accumulator (workspace) is missing");
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dx->dtype, launch_gather_grad, cu, c->kctx, a);
    return st;
}

/* ------------------------------------------------------------ kiln.ReduceSumTo, NHWC dY */

namespace {

/* An NHWC dY (N, C, H, W) summed to an output whose bytes are the same in both layouts
 * (table.c checks) is the NCHW sum of dY's bytes read as (N, H, W, C) to the output's
 * dims in that order: reduce_sum.cu's kernel on that view. */
struct SumToView {
    kiln_op_ctx c;
    kiln_tensor x, like, y;
    kiln_tensor *in[2], *out[1];
};

bool sum_to_view(const kiln_op_ctx *c, SumToView *v) {
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    if (x->ndim != 4 || x->format != KILN_FORMAT_NHWC || y->ndim > 4) return false;
    int64_t a[4] = {1, 1, 1, 1};
    for (int d = 0; d < y->ndim; d++) a[4 - y->ndim + d] = y->dims[d];
    v->x = *x;
    v->x.format = KILN_FORMAT_NCHW;
    v->x.dims[1] = x->dims[2];
    v->x.dims[2] = x->dims[3];
    v->x.dims[3] = x->dims[1];
    v->y = *y;
    v->y.format = KILN_FORMAT_NCHW;
    v->y.ndim = 4;
    v->y.dims[0] = a[0];
    v->y.dims[1] = a[2];
    v->y.dims[2] = a[3];
    v->y.dims[3] = a[1];
    v->like = v->y;
    v->in[0] = &v->x;
    v->in[1] = &v->like;
    v->out[0] = &v->y;
    v->c = *c;
    v->c.in = v->in;
    v->c.n_in = 2;
    v->c.out = v->out;
    v->c.n_out = 1;
    return true;
}

} // namespace

extern "C" kiln_status kiln_cuda_ws_sum_to(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    SumToView v;
    return kiln_cuda_ws_channel_sum(cu, sum_to_view(c, &v) ? &v.c : c, bytes);
}

extern "C" kiln_status kiln_cuda_k_sum_to(kiln_cuda *cu, kiln_op_ctx *c) {
    /* the planner's alias (alias_outputs; sizes equal: nothing summed, and table.c takes
     * an NHWC dY only with an output whose bytes are the same in both layouts) */
    if (c->out[0]->data == c->in[0]->data) return KILN_OK;
    SumToView v;
    return kiln_cuda_k_reduce_sum_to(cu, sum_to_view(c, &v) ? &v.c : c);
}
