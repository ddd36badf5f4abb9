/*
 * rearrange.cu — the ops of the ONNX conformance set that select, rearrange or scan
 * elements, each as the CPU reference in src/ops/<op>.c computes it:
 *
 *   Not (bool), IsNaN and IsInf (float dtypes incl. f64, bool out): elementwise.
 *   Trilu: any element size; k read on the device (input 1, int64) or 0.
 *   GatherElements: any element size, int32 / int64 indices (negative ones count from the
 *     end; one out of range, which the CPU reference rejects, gives zero bytes, never a
 *     read outside data).
 *   DepthToSpace (DCR, CRD) and SpaceToDepth: 4-D NCHW, any element size.
 *   Hardmax, ArgMax, ArgMin, CumSum: one thread per row (outer x inner positions, the row
 *     at stride inner). Values are loaded as double (floats, f64 included) or int64
 *     (integers; uint64 compares unsigned); NaN counts as the largest value for Hardmax
 *     and ArgMax and the smallest for ArgMin, as numpy. CumSum sums floats in double and
 *     integers in wrapping uint64, its axis read from the host value (a value input).
 *
 *   EyeLike (any dtype), OneHot (values copied as elements of their size; indices of any
 *     numeric dtype, floats truncated, out of range: all off).
 *   ScatterElements and Scatter: data copied, then one thread applies the updates in
 *     order (the reference's order: a repeated index keeps the last update or combines
 *     in that order). Slow for large updates, exact.
 *
 *   GatherND (batch_dims) gathers element by element; ScatterND copies data, then one
 *     thread applies the tuples in order (as ScatterElements). An index out of range gives
 *     zeros (GatherND) or is skipped (ScatterND); the CPU reference rejects both.
 *   TopK: one thread per row, k rounds each taking the first element (in TopK's order:
 *     NaN as the largest, ties by index) after the previous one: O(n k), no scratch.
 *   LRN: floats (f64 included) in double, as the reference. ReverseSequence: any element
 *     size, the lengths read on the device (one outside [0, T], which the reference
 *     rejects, copies the batch entry unreversed).
 *
 *   Compress: the condition's host value (a value input) plans one device-to-device copy
 *     per run of selected slices.
 *   HannWindow, HammingWindow, BlackmanWindow: the coefficients of src/ops/window.h, in
 *     double. QuantizeLinear / DequantizeLinear: per tensor or per axis, the quotient in
 *     float unless an operand is f64, as src/ops/quantize_linear.c.
 *   DynamicQuantizeLinear: one block finds the range and quantizes (exact, not fast).
 *   MaxUnpool: y zeroed, then one thread per element of X; repeated indices leave one of
 *     their values (the reference: the last).
 *   Einsum: the plan of src/ops/einsum.h. A float plan that is a batched matrix product
 *     (kiln_einsum_as_gemm: attention's "bhid,bhjd->bhij") is one cuBLASLt call
 *     (matmul.c, f32 accumulation); any other, one thread per output element sums the
 *     products over the summed labels in double (floats) or wrapping int64.
 *
 * Elementwise byte moves dispatch on the element size (KILN_CU_SIZE_DISPATCH).
 */
#include "dtype.cuh"
#include "../ops/einsum.h"
#include "../ops/quantize_linear.h"
#include "../ops/window.h"

#include <math.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* A value of any float or integer dtype, as double (floats) or int64 (integers). */
__device__ __forceinline__ bool is_float_dt(int dt) {
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

__device__ __forceinline__ int64_t load_int(const void *p, int dt, int64_t i) {
    switch (dt) {
    case KILN_I8: return ((const int8_t *)p)[i];
    case KILN_U8: case KILN_BOOL: return ((const uint8_t *)p)[i];
    case KILN_I16: return ((const int16_t *)p)[i];
    case KILN_U16: return ((const uint16_t *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_U32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i]; /* I64, U64 (bit pattern) */
    }
}

__device__ __forceinline__ void store_int(void *p, int dt, int64_t i, int64_t v) {
    switch (dt) {
    case KILN_I8: case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_I16: case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_I32: case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

__device__ __forceinline__ void store_float(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case KILN_F32: ((float *)p)[i] = (float)v; break;
    case KILN_F64: ((double *)p)[i] = v; break;
    case KILN_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    }
}

/* ---------------------------------------------------------------- elementwise */

/* mode 0: Not; 1: IsNaN; 2: IsInf (pos, neg: which infinities count) */
__global__ void predicate_kernel(const void *x, int dt, uint8_t *y, int64_t n, int mode, bool pos, bool neg) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        if (mode == 0) {
            y[i] = ((const uint8_t *)x)[i] == 0;
        } else {
            const double v = load_any(x, dt, i);
            y[i] = mode == 1 ? isnan(v) != 0 : isinf(v) && (v > 0 ? pos : neg);
        }
    }
}

/* ---------------------------------------------------------------------- Trilu */

template <typename E>
__global__ void trilu_kernel(const E *x, E *y, int64_t n, int64_t rows, int64_t cols, const int64_t *kp,
                             bool upper) {
    const int64_t k = kp ? *kp : 0;
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t j = i % cols, r = (i / cols) % rows, d = j - r;
        y[i] = (upper ? d >= k : d <= k) ? x[i] : (E)0;
    }
}

template <typename E>
kiln_status launch_trilu(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t n, int64_t rows,
                         int64_t cols, const int64_t *k, bool upper) {
    trilu_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const E *)x, (E *)y, n, rows,
                                                                                  cols, k, upper);
    KILN_CUDA_LAUNCHED(ctx, "trilu_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------- GatherElements */

struct Dims {
    int nd;
    int64_t dims[KILN_MAX_DIMS];    /* indices' (= output's) dims */
    int64_t xstride[KILN_MAX_DIMS]; /* data's strides */
};

template <typename E>
__global__ void gather_elements_kernel(const E *x, const void *ix, bool ix64, E *y, int64_t n, Dims g, int axis,
                                       int64_t dim) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t v = ix64 ? ((const int64_t *)ix)[i] : ((const int32_t *)ix)[i];
        if (v < 0) v += dim;
        if (v < 0 || v >= dim) {
            y[i] = (E)0;
            continue;
        }
        int64_t rem = i, off = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            const int64_t coord = rem % g.dims[d];
            rem /= g.dims[d];
            off += (d == axis ? v : coord) * g.xstride[d];
        }
        y[i] = x[off];
    }
}

template <typename E>
kiln_status launch_gather_elements(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *ix, bool ix64,
                                   void *y, int64_t n, const Dims &g, int axis, int64_t dim) {
    gather_elements_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)x, ix, ix64, (E *)y, n, g, axis, dim);
    KILN_CUDA_LAUNCHED(ctx, "gather_elements_kernel");
    return KILN_OK;
}

/* ------------------------------------------------- DepthToSpace, SpaceToDepth */

/* Over the space side (N, C, H*b, W*b): the depth side (N, C*b*b, H, W) index of each
 * element; to_space copies depth -> space, else space -> depth. */
template <typename E>
__global__ void d2s_kernel(const E *src, E *dst, int64_t n, int64_t C, int64_t HB, int64_t WB, int64_t b, bool crd,
                           bool to_space) {
    const int64_t H = HB / b, W = WB / b;
    for (int64_t s = thread_index(); s < n; s += grid_stride()) {
        const int64_t wb = s % WB, hb = (s / WB) % HB, ch = (s / (WB * HB)) % C, nn = s / (WB * HB * C);
        const int64_t h = hb / b, b1 = hb % b, w = wb / b, b2 = wb % b;
        const int64_t dc = crd ? (ch * b + b1) * b + b2 : (b1 * b + b2) * C + ch;
        const int64_t d = ((nn * C * b * b + dc) * H + h) * W + w;
        if (to_space) dst[s] = src[d];
        else dst[d] = src[s];
    }
}

template <typename E>
kiln_status launch_d2s(kiln_cuda *cu, kiln_context *ctx, const void *src, void *dst, int64_t n, int64_t C,
                       int64_t HB, int64_t WB, int64_t b, bool crd, bool to_space) {
    d2s_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const E *)src, (E *)dst, n, C, HB,
                                                                                WB, b, crd, to_space);
    KILN_CUDA_LAUNCHED(ctx, "d2s_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------- row scans */

enum RowOp { ROW_ARGMAX, ROW_ARGMIN, ROW_HARDMAX, ROW_CUMSUM };

struct Rows {
    int64_t outer, n, inner;
    int dt;
    bool last;      /* Arg*: select_last_index */
    bool exclusive; /* CumSum */
    bool reverse;   /* CumSum */
};

/* Does a beat the best so far b (ArgMax / Hardmax: larger; ArgMin: smaller; NaN first)? */
__device__ __forceinline__ bool beats_f(double a, double b, bool max) {
    return (max ? a > b : a < b) || (isnan(a) && !isnan(b));
}

__global__ void rows_kernel(const void *x, void *y, Rows r, int op) {
    const bool fl = is_float_dt(r.dt), u64 = r.dt == KILN_U64;
    for (int64_t oi = thread_index(); oi < r.outer * r.inner; oi += grid_stride()) {
        const int64_t base = (oi / r.inner) * r.n * r.inner + oi % r.inner;
        if (op == ROW_CUMSUM) {
            double sf = 0;
            uint64_t si = 0;
            for (int64_t j = 0; j < r.n; j++) {
                const int64_t at = base + (r.reverse ? r.n - 1 - j : j) * r.inner;
                if (fl) {
                    const double v = load_any(x, r.dt, at);
                    if (!r.exclusive) sf += v;
                    store_float(y, r.dt, at, sf);
                    if (r.exclusive) sf += v;
                } else {
                    const uint64_t v = (uint64_t)load_int(x, r.dt, at);
                    if (!r.exclusive) si += v;
                    store_int(y, r.dt, at, (int64_t)si);
                    if (r.exclusive) si += v;
                }
            }
            continue;
        }
        const bool max = op != ROW_ARGMIN;
        const bool last = op != ROW_HARDMAX && r.last;
        int64_t best = 0;
        if (fl) {
            double bv = load_any(x, r.dt, base);
            for (int64_t k = 1; k < r.n; k++) {
                const double v = load_any(x, r.dt, base + k * r.inner);
                const bool tie = v == bv || (isnan(v) && isnan(bv));
                if (beats_f(v, bv, max) || (last && tie)) {
                    bv = v;
                    best = k;
                }
            }
        } else {
            int64_t bv = load_int(x, r.dt, base);
            for (int64_t k = 1; k < r.n; k++) {
                const int64_t v = load_int(x, r.dt, base + k * r.inner);
                const bool better = max ? (u64 ? (uint64_t)v > (uint64_t)bv : v > bv)
                                        : (u64 ? (uint64_t)v < (uint64_t)bv : v < bv);
                if (better || (last && v == bv)) {
                    bv = v;
                    best = k;
                }
            }
        }
        if (op == ROW_HARDMAX) {
            for (int64_t k = 0; k < r.n; k++) store_float(y, r.dt, base + k * r.inner, k == best ? 1.0 : 0.0);
        } else {
            ((int64_t *)y)[oi] = best;
        }
    }
}

kiln_status launch_rows(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, const Rows &r, int op) {
    const int64_t rows = r.outer * r.inner;
    if (rows == 0 || r.n == 0) return KILN_OK;
    rows_kernel<<<kiln_cuda_blocks(cu, rows, THREADS), THREADS, 0, cu->stream>>>(x, y, r, op);
    KILN_CUDA_LAUNCHED(ctx, "rows_kernel");
    return KILN_OK;
}

/* (outer, n, inner) of x around axis: n = dims[axis], or dims[axis:] flattened (old
 * Hardmax). */
Rows rows_of(const kiln_tensor *x, int64_t axis, bool flatten_tail) {
    Rows r = {1, 1, 1, (int)x->dtype, false, false, false};
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) r.outer *= x->dims[d];
        else if (d == axis || flatten_tail) r.n *= x->dims[d];
        else r.inner *= x->dims[d];
    }
    return r;
}

/* ------------------------------------------------------------ EyeLike, OneHot */

__global__ void eye_kernel(void *y, int dt, int64_t rows, int64_t cols, int64_t k) {
    const bool fl = is_float_dt(dt);
    for (int64_t i = thread_index(); i < rows * cols; i += grid_stride()) {
        const bool one = i % cols - i / cols == k;
        if (fl) store_float(y, dt, i, one ? 1.0 : 0.0);
        else if (dt == KILN_BOOL) ((uint8_t *)y)[i] = one;
        else store_int(y, dt, i, one ? 1 : 0);
    }
}

/* y (outer, depth, inner): values[1] where the index of (outer, inner) is j, else values[0] */
template <typename E>
__global__ void one_hot_kernel(const void *ix, int ix_dt, const E *values, E *y, int64_t n, int64_t depth,
                               int64_t inner) {
    const E off = values[0], on = values[1];
    for (int64_t t = thread_index(); t < n; t += grid_stride()) {
        const int64_t i = t % inner, j = (t / inner) % depth, o = t / (inner * depth);
        const int64_t at = o * inner + i;
        int64_t k = is_float_dt(ix_dt) ? (int64_t)trunc(load_any(ix, ix_dt, at)) : load_int(ix, ix_dt, at);
        if (ix_dt == KILN_U64 && k < 0) k = depth;
        if (k < 0) k += depth;
        y[t] = j == k ? on : off;
    }
}

template <typename E>
kiln_status launch_one_hot(kiln_cuda *cu, kiln_context *ctx, const void *ix, int ix_dt, const void *values, void *y,
                           int64_t n, int64_t depth, int64_t inner) {
    one_hot_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(ix, ix_dt, (const E *)values,
                                                                                    (E *)y, n, depth, inner);
    KILN_CUDA_LAUNCHED(ctx, "one_hot_kernel");
    return KILN_OK;
}

/* ---------------------------------------------------------- ScatterElements */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

/* One thread applies the updates in order (row-major in indices), as the reference does:
 * repeated indices then keep the last update (none) or combine in that order. y already
 * holds data. An index out of range (the CPU reference rejects it) is skipped. */
__global__ void scatter_elements_kernel(void *y, const void *ix, bool ix64, const void *u, int dt, size_t es,
                                        int64_t n, Dims g, int axis, int64_t dim, int red) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const bool fl = is_float_dt(dt), uns = dt == KILN_U64;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ix64 ? ((const int64_t *)ix)[i] : ((const int32_t *)ix)[i];
        if (v < 0) v += dim;
        if (v < 0 || v >= dim) continue;
        int64_t rem = i, off = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            const int64_t coord = rem % g.dims[d];
            rem /= g.dims[d];
            off += (d == axis ? v : coord) * g.xstride[d];
        }
        if (red == RED_NONE) {
            for (size_t b = 0; b < es; b++) ((char *)y)[off * es + b] = ((const char *)u)[i * es + b];
        } else if (fl) {
            const double a = load_any(y, dt, off), b = load_any(u, dt, i);
            store_float(y, dt, off, red == RED_ADD ? a + b : red == RED_MUL ? a * b
                                    : red == RED_MAX ? (a >= b || isnan(a) ? a : b) : (a <= b || isnan(a) ? a : b));
        } else {
            const int64_t a = load_int(y, dt, off), b = load_int(u, dt, i);
            const bool gt = uns ? (uint64_t)b > (uint64_t)a : b > a;
            store_int(y, dt, off, red == RED_ADD ? (int64_t)((uint64_t)a + (uint64_t)b)
                                  : red == RED_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                                  : red == RED_MAX ? (gt ? b : a) : (gt || a == b ? a : b));
        }
    }
}

/* ---------------------------------------------------------- GatherND, ScatterND */

struct NdPlan {
    int64_t m, b;                   /* indices' last dim, batch_dims */
    int64_t slice;                  /* elements per gathered slice */
    int64_t per_batch;              /* index tuples per batch */
    int64_t dims[KILN_MAX_DIMS];    /* data's dims */
    int64_t stride[KILN_MAX_DIMS];  /* data's strides */
};

/* data offset of index tuple t, or -1 when an index is out of range */
__device__ int64_t nd_offset(const NdPlan &p, const void *ix, bool ix64, int64_t t) {
    int64_t off = 0;
    int64_t batch = p.b > 0 ? t / p.per_batch : 0;
    for (int64_t d = p.b - 1; d >= 0; d--) {
        off += (batch % p.dims[d]) * p.stride[d];
        batch /= p.dims[d];
    }
    for (int64_t k = 0; k < p.m; k++) {
        int64_t v = ix64 ? ((const int64_t *)ix)[t * p.m + k] : ((const int32_t *)ix)[t * p.m + k];
        const int64_t dim = p.dims[p.b + k];
        if (v < 0) v += dim;
        if (v < 0 || v >= dim) return -1;
        off += v * p.stride[p.b + k];
    }
    return off;
}

template <typename E>
__global__ void gather_nd_kernel(const E *x, const void *ix, bool ix64, E *y, int64_t n, NdPlan p) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t off = nd_offset(p, ix, ix64, i / p.slice);
        y[i] = off < 0 ? (E)0 : x[off + i % p.slice];
    }
}

template <typename E>
kiln_status launch_gather_nd(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *ix, bool ix64, void *y,
                             int64_t n, const NdPlan &p) {
    gather_nd_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const E *)x, ix, ix64, (E *)y,
                                                                                      n, p);
    KILN_CUDA_LAUNCHED(ctx, "gather_nd_kernel");
    return KILN_OK;
}

/* One thread, tuples in order (as the reference); y already holds data. */
__global__ void scatter_nd_kernel(void *y, const void *ix, bool ix64, const void *u, int dt, size_t es, int64_t tuples,
                                  NdPlan p, int red) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const bool fl = is_float_dt(dt), uns = dt == KILN_U64;
    for (int64_t t = 0; t < tuples; t++) {
        const int64_t off = nd_offset(p, ix, ix64, t);
        if (off < 0) continue;
        for (int64_t j = 0; j < p.slice; j++) {
            const int64_t at = off + j, ui = t * p.slice + j;
            if (red == RED_NONE) {
                for (size_t b = 0; b < es; b++) ((char *)y)[at * es + b] = ((const char *)u)[ui * es + b];
            } else if (fl) {
                const double a = load_any(y, dt, at), b = load_any(u, dt, ui);
                store_float(y, dt, at, red == RED_ADD ? a + b : red == RED_MUL ? a * b
                                       : red == RED_MAX ? (a >= b || isnan(a) ? a : b) : (a <= b || isnan(a) ? a : b));
            } else {
                const int64_t a = load_int(y, dt, at), b = load_int(u, dt, ui);
                const bool gt = uns ? (uint64_t)b > (uint64_t)a : b > a;
                store_int(y, dt, at, red == RED_ADD ? (int64_t)((uint64_t)a + (uint64_t)b)
                                     : red == RED_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                                     : red == RED_MAX ? (gt ? b : a) : (gt || a == b ? a : b));
            }
        }
    }
}

NdPlan nd_plan(const kiln_tensor *x, const kiln_tensor *ix, int64_t b) {
    NdPlan p;
    memset(&p, 0, sizeof p);
    p.m = ix->dims[ix->ndim - 1];
    p.b = b;
    for (int d = 0; d < x->ndim; d++) p.dims[d] = x->dims[d];
    kiln_strides(x->ndim, x->dims, p.stride);
    p.slice = p.stride[b + p.m - 1];
    p.per_batch = 1;
    for (int d = (int)b; d < ix->ndim - 1; d++) p.per_batch *= ix->dims[d];
    return p;
}

/* -------------------------------------------------------------------- TopK */

/* Does (va, ia) come before (vb, ib) in TopK's order? largest: NaN first, then larger
 * values; smallest: smaller values, NaN last; ties by index. */
__device__ __forceinline__ bool topk_before(double va, int64_t ia, double vb, int64_t ib, bool largest) {
    const bool na = isnan(va), nb = isnan(vb);
    if (na != nb) return largest ? na : nb;
    if (!na && va != vb) return largest ? va > vb : va < vb;
    return ia < ib;
}

/* One thread per row: k rounds, each picking the first element after the previous pick. */
template <typename E>
__global__ void topk_kernel(const E *x, int dt, E *yv, int64_t *yi, int64_t rows, int64_t n, int64_t inner, int64_t k,
                            bool largest) {
    const bool fl = is_float_dt(dt), u64 = dt == KILN_U64;
    for (int64_t r = thread_index(); r < rows; r += grid_stride()) {
        const int64_t o = r / inner, i = r % inner;
        double pv = 0;
        int64_t pi = -1;
        for (int64_t j = 0; j < k; j++) {
            double bv = 0;
            int64_t bi = -1;
            for (int64_t q = 0; q < n; q++) {
                const int64_t at = (o * n + q) * inner + i;
                const double v = fl ? load_any(x, dt, at)
                                    : u64 ? (double)(uint64_t)load_int(x, dt, at) : (double)load_int(x, dt, at);
                if (pi >= 0 && !topk_before(pv, pi, v, q, largest)) continue; /* already taken */
                if (bi < 0 || topk_before(v, q, bv, bi, largest)) {
                    bv = v;
                    bi = q;
                }
            }
            const int64_t out = (o * k + j) * inner + i;
            yv[out] = x[(o * n + bi) * inner + i];
            if (yi) yi[out] = bi;
            pv = bv;
            pi = bi;
        }
    }
}

template <typename E>
kiln_status launch_topk(kiln_cuda *cu, kiln_context *ctx, const void *x, int dt, void *yv, int64_t *yi, int64_t rows,
                        int64_t n, int64_t inner, int64_t k, bool largest) {
    topk_kernel<E><<<kiln_cuda_blocks(cu, rows, THREADS), THREADS, 0, cu->stream>>>((const E *)x, dt, (E *)yv, yi, rows,
                                                                                   n, inner, k, largest);
    KILN_CUDA_LAUNCHED(ctx, "topk_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ LRN, ReverseSequence */

__global__ void lrn_kernel(const void *x, void *y, int dt, int64_t n, int64_t C, int64_t S, int64_t lo, int64_t hi,
                           double alpha_over_size, double beta, double bias) {
    for (int64_t t = thread_index(); t < n; t += grid_stride()) {
        const int64_t s = t % S, ch = (t / S) % C, nn = t / (S * C);
        double sq = 0;
        for (int64_t k = ch - lo; k <= ch + hi; k++) {
            if (k < 0 || k >= C) continue;
            const double v = load_any(x, dt, (nn * C + k) * S + s);
            sq += v * v;
        }
        store_float(y, dt, t, load_any(x, dt, t) / pow(bias + alpha_over_size * sq, beta));
    }
}

/* rows of `inner` elements indexed by (t, b) or (b, t) */
template <typename E>
__global__ void reverse_sequence_kernel(const E *x, E *y, const int64_t *lens, int64_t n, int64_t B, int64_t T,
                                        int64_t inner, bool time_major) {
    for (int64_t idx = thread_index(); idx < n; idx += grid_stride()) {
        const int64_t row = idx / inner, e = idx % inner;
        const int64_t t = time_major ? row / B : row % T, b = time_major ? row % B : row / T;
        const int64_t l = lens[b];
        const int64_t src = l >= 0 && l <= T && t < l ? l - 1 - t : t;
        y[idx] = x[(time_major ? src * B + b : b * T + src) * inner + e];
    }
}

template <typename E>
kiln_status launch_reverse_sequence(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, const int64_t *lens,
                                    int64_t n, int64_t B, int64_t T, int64_t inner, bool time_major) {
    reverse_sequence_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)x, (E *)y, lens, n, B, T, inner, time_major);
    KILN_CUDA_LAUNCHED(ctx, "reverse_sequence_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------------- Einsum */

struct EinsumIn {
    const void *p[KILN_EINSUM_MAX_IN];
};

/* One thread per output element, the summed labels walked in order (as the reference). */
__global__ void einsum_kernel(EinsumIn in, void *y, int dt, int64_t n, kiln_einsum e) {
    const bool fl = is_float_dt(dt);
    for (int64_t o = thread_index(); o < n; o += grid_stride()) {
        int64_t val[KILN_EINSUM_MAX_LABELS];
        for (int l = 0; l < KILN_EINSUM_MAX_LABELS; l++) val[l] = 0;
        int64_t rem = o;
        for (int d = e.out_nd - 1; d >= 0; d--) {
            val[e.out_lab[d]] = rem % e.size[e.out_lab[d]];
            rem /= e.size[e.out_lab[d]];
        }
        double accf = 0;
        int64_t acci = 0;
        for (int64_t s = 0; s < e.sum_count; s++) {
            int64_t r = s;
            for (int k = e.ns - 1; k >= 0; k--) {
                val[e.sum_lab[k]] = r % e.size[e.sum_lab[k]];
                r /= e.size[e.sum_lab[k]];
            }
            double pf = 1;
            int64_t pi = 1;
            for (int t = 0; t < e.n_in; t++) {
                int64_t off = 0;
                for (int l = 0; l < e.nl; l++) off += val[l] * e.stride[t][l];
                if (fl) pf *= load_any(in.p[t], dt, off);
                else pi = (int64_t)((uint64_t)pi * (uint64_t)load_int(in.p[t], dt, off));
            }
            if (fl) accf += pf;
            else acci = (int64_t)((uint64_t)acci + (uint64_t)pi);
        }
        if (fl) store_float(y, dt, o, accf);
        else store_int(y, dt, o, acci);
    }
}

/* ------------------------------------------------- windows, (De)QuantizeLinear */

__global__ void window_kernel(void *y, int dt, int64_t n, kiln_window_coef w) {
    const double tau = 6.283185307179586476925286766559;
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const double v = w.a0 - w.a1 * cos(tau * (double)i / w.n) + w.a2 * cos(2 * tau * (double)i / w.n);
        if (is_float_dt(dt)) store_float(y, dt, i, v);
        else store_int(y, dt, i, (int64_t)v);
    }
}

/* per element: channel k = (i / inner) % ch (0 when ch == 1); zero point 0 without one */
__global__ void quantize_kernel(const void *x, int xdt, const void *s, int sdt, const void *z, int zdt, void *y,
                                int ydt, int64_t n, int64_t ch, int64_t inner, double lo, double hi, bool f64,
                                bool quantize) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t k = ch > 1 ? (i / inner) % ch : 0;
        const double zp = z ? (double)load_int(z, zdt, k) : 0.0;
        if (quantize) {
            const double xv = is_float_dt(xdt) ? load_any(x, xdt, i) : (double)load_int(x, xdt, i);
            const double sv = load_any(s, sdt, k);
            const double q = f64 ? xv / sv : (double)((float)xv / (float)sv);
            double v = rint(q) + zp;
            v = isnan(v) ? 0 : v < lo ? lo : v > hi ? hi : v;
            store_int(y, ydt, i, (int64_t)v);
        } else {
            store_float(y, ydt, i, ((double)load_int(x, xdt, i) - zp) * load_any(s, sdt, k));
        }
    }
}

/* ------------------------------------------- DynamicQuantizeLinear, MaxUnpool */

/* One block: the range of x (including 0), then the scale, zero point and y, in float as
 * src/ops/dynamic_quantize_linear.c. */
__global__ void dynamic_quantize_kernel(const float *x, uint8_t *y, float *scale_out, uint8_t *zp_out, int64_t n) {
    __shared__ float lo_s[32], hi_s[32];
    float lo = 0.f, hi = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) {
        lo_s[warp] = lo;
        hi_s[warp] = hi;
    }
    __syncthreads();
    lo = 0.f;
    hi = 0.f;
    for (int w = 0; w < nwarps; w++) {
        lo = fminf(lo, lo_s[w]);
        hi = fmaxf(hi, hi_s[w]);
    }
    const float scale = (hi - lo) / 255.f;
    float zp = 0.f;
    if (scale > 0.f) {
        zp = rintf(-lo / scale);
        zp = zp < 0.f ? 0.f : zp > 255.f ? 255.f : zp;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = scale > 0.f ? rintf(x[i] / scale) + zp : 0.f;
        v = v != v ? 0.f : v < 0.f ? 0.f : v > 255.f ? 255.f : v;
        y[i] = (uint8_t)v;
    }
    if (threadIdx.x == 0) {
        if (scale_out) *scale_out = scale;
        if (zp_out) *zp_out = (uint8_t)zp;
    }
}

struct UnpoolDims {
    int nd;
    int64_t def[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
};

/* y is zeroed first; as kiln_unpool_offset (src/ops/max_unpool.h) */
template <typename E>
__global__ void max_unpool_kernel(const E *x, const int64_t *ix, E *y, int64_t n, UnpoolDims u) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t v = ix[i], total = 1;
        for (int d = 0; d < u.nd; d++) total *= u.def[d];
        if (v < 0 || v >= total) continue;
        int64_t off = 0, stride = 1;
        bool ok = true;
        for (int d = u.nd - 1; d >= 0; d--) {
            const int64_t coord = v % u.def[d];
            v /= u.def[d];
            ok &= coord < u.out[d];
            off += coord * stride;
            stride *= u.out[d];
        }
        if (ok) y[off] = x[i];
    }
}

template <typename E>
kiln_status launch_max_unpool(kiln_cuda *cu, kiln_context *ctx, const void *x, const int64_t *ix, void *y, int64_t n,
                              const UnpoolDims &u) {
    max_unpool_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const E *)x, ix, (E *)y, n, u);
    KILN_CUDA_LAUNCHED(ctx, "max_unpool_kernel");
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_predicate(kiln_cuda *cu, kiln_op_ctx *c) {
    const char *op = c->node->op_type;
    const int mode = strcmp(op, "Not") == 0 ? 0 : strcmp(op, "IsNaN") == 0 ? 1 : strcmp(op, "IsInf") == 0 ? 2 : -1;
    if (mode < 0) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "op %s is not a predicate", op);
    const int64_t n = kiln_tensor_numel(c->out[0]);
    if (n == 0) return KILN_OK;
    const bool pos = kiln_attr_int(c->node, "detect_positive", 1) != 0;
    const bool neg = kiln_attr_int(c->node, "detect_negative", 1) != 0;
    predicate_kernel<<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        c->in[0]->data, (int)c->in[0]->dtype, (uint8_t *)c->out[0]->data, n, mode, pos, neg);
    KILN_CUDA_LAUNCHED(c->kctx, "predicate_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_trilu(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    const int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1];
    const int64_t *k = c->n_in > 1 && c->in[1] ? (const int64_t *)c->in[1]->data : nullptr;
    const bool upper = kiln_attr_int(c->node, "upper", 1) != 0;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_trilu, cu, c->kctx, x->data,
                          c->out[0]->data, n, rows, cols, k, upper);
    return st;
}

extern "C" kiln_status kiln_cuda_k_gather_elements(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    const int64_t n = kiln_tensor_numel(c->out[0]);
    if (n == 0) return KILN_OK;
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
    Dims g;
    memset(&g, 0, sizeof g);
    g.nd = ix->ndim;
    for (int d = 0; d < ix->ndim; d++) g.dims[d] = ix->dims[d];
    kiln_strides(x->ndim, x->dims, g.xstride);
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_gather_elements, cu, c->kctx, x->data,
                          ix->data, ix->dtype == KILN_I64, c->out[0]->data, n, g, (int)axis, x->dims[axis]);
    return st;
}

extern "C" kiln_status kiln_cuda_k_depth_to_space(kiln_cuda *cu, kiln_op_ctx *c) {
    const bool to_space = strcmp(c->node->op_type, "DepthToSpace") == 0;
    const kiln_tensor *sp = to_space ? c->out[0] : c->in[0];
    const int64_t n = kiln_tensor_numel(sp);
    if (n == 0) return KILN_OK;
    const int64_t b = kiln_attr_int(c->node, "blocksize", 1);
    const bool crd = to_space && strcmp(kiln_attr_string(c->node, "mode", "DCR"), "CRD") == 0;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(sp->dtype), launch_d2s, cu, c->kctx, c->in[0]->data,
                          c->out[0]->data, n, sp->dims[1], sp->dims[2], sp->dims[3], b, crd, to_space);
    return st;
}

/* ArgMax, ArgMin, Hardmax, CumSum */
extern "C" kiln_status kiln_cuda_k_rows(kiln_cuda *cu, kiln_op_ctx *c) {
    const char *op = c->node->op_type;
    const kiln_tensor *x = c->in[0];
    int64_t axis;
    Rows r;
    int kind;
    if (strcmp(op, "CumSum") == 0) {
        kiln_status st = kiln_cuda_need_host(c);
        if (st) return st;
        const kiln_tensor *a = c->host_in[1];
        if (!a || !a->data) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "CumSum's axis is not known on the host");
        axis = kiln_get_i64(a, 0);
        if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
        r = rows_of(x, axis, false);
        r.exclusive = kiln_attr_int(c->node, "exclusive", 0) != 0;
        r.reverse = kiln_attr_int(c->node, "reverse", 0) != 0;
        kind = ROW_CUMSUM;
    } else if (strcmp(op, "Hardmax") == 0) {
        const bool old = c->node->opset < 13;
        axis = kiln_attr_int(c->node, "axis", old ? 1 : -1);
        if (x->ndim == 0) axis = 0;
        else if (!kiln_norm_axis(&axis, x->ndim) && !(old && axis == x->ndim))
            return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
        r = rows_of(x, axis, old);
        kind = ROW_HARDMAX;
    } else {
        axis = kiln_attr_int(c->node, "axis", 0);
        if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
        r = rows_of(x, axis, false);
        r.last = kiln_attr_int(c->node, "select_last_index", 0) != 0;
        kind = strcmp(op, "ArgMax") == 0 ? ROW_ARGMAX : ROW_ARGMIN;
    }
    return launch_rows(cu, c->kctx, x->data, c->out[0]->data, r, kind);
}

extern "C" kiln_status kiln_cuda_k_eye_like(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    eye_kernel<<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(y->data, (int)y->dtype, y->dims[0],
                                                                            y->dims[1], kiln_attr_int(c->node, "k", 0));
    KILN_CUDA_LAUNCHED(c->kctx, "eye_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_one_hot(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    if (!kiln_norm_axis(&axis, y->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
    int64_t inner = 1;
    for (int d = (int)axis + 1; d < y->ndim; d++) inner *= y->dims[d];
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(y->dtype), launch_one_hot, cu, c->kctx, c->in[0]->data,
                          (int)c->in[0]->dtype, c->in[2]->data, y->data, n, y->dims[axis], inner);
    return st;
}

/* ScatterElements and Scatter */
extern "C" kiln_status kiln_cuda_k_scatter_elements(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1], *u = c->in[2];
    kiln_tensor *y = c->out[0];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, kiln_tensor_nbytes(y), cudaMemcpyDeviceToDevice,
                                             cu->stream));
    const int64_t n = kiln_tensor_numel(ix);
    if (n == 0) return KILN_OK;
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
    const char *r = kiln_attr_string(c->node, "reduction", "none");
    const int red = strcmp(r, "add") == 0 ? RED_ADD : strcmp(r, "mul") == 0 ? RED_MUL
                    : strcmp(r, "max") == 0 ? RED_MAX : strcmp(r, "min") == 0 ? RED_MIN : RED_NONE;
    Dims g;
    memset(&g, 0, sizeof g);
    g.nd = ix->ndim;
    for (int d = 0; d < ix->ndim; d++) g.dims[d] = ix->dims[d];
    kiln_strides(x->ndim, x->dims, g.xstride);
    scatter_elements_kernel<<<1, 1, 0, cu->stream>>>(y->data, ix->data, ix->dtype == KILN_I64, u->data, (int)x->dtype,
                                                     kiln_dtype_size(x->dtype), n, g, (int)axis, x->dims[axis], red);
    KILN_CUDA_LAUNCHED(c->kctx, "scatter_elements_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_gather_nd(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    const NdPlan p = nd_plan(x, ix, kiln_attr_int(c->node, "batch_dims", 0));
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_gather_nd, cu, c->kctx, x->data, ix->data,
                          ix->dtype == KILN_I64, y->data, n, p);
    return st;
}

extern "C" kiln_status kiln_cuda_k_scatter_nd(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1], *u = c->in[2];
    kiln_tensor *y = c->out[0];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, kiln_tensor_nbytes(y), cudaMemcpyDeviceToDevice,
                                             cu->stream));
    const NdPlan p = nd_plan(x, ix, 0);
    const int64_t tuples = kiln_tensor_numel(ix) / p.m;
    if (tuples == 0) return KILN_OK;
    const char *r = kiln_attr_string(c->node, "reduction", "none");
    const int red = strcmp(r, "add") == 0 ? RED_ADD : strcmp(r, "mul") == 0 ? RED_MUL
                    : strcmp(r, "max") == 0 ? RED_MAX : strcmp(r, "min") == 0 ? RED_MIN : RED_NONE;
    scatter_nd_kernel<<<1, 1, 0, cu->stream>>>(y->data, ix->data, ix->dtype == KILN_I64, u->data, (int)x->dtype,
                                               kiln_dtype_size(x->dtype), tuples, p, red);
    KILN_CUDA_LAUNCHED(c->kctx, "scatter_nd_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_top_k(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *yv = c->out[0], *yi = c->n_out > 1 ? c->out[1] : NULL;
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
    const int64_t n = x->dims[axis], k = yv->dims[axis];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    if (outer * inner == 0 || k == 0) return KILN_OK;
    const bool largest = c->node->opset < 11 || kiln_attr_int(c->node, "largest", 1) != 0;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_topk, cu, c->kctx, x->data, (int)x->dtype,
                          yv->data, yi ? (int64_t *)yi->data : nullptr, outer * inner, n, inner, k, largest);
    return st;
}

extern "C" kiln_status kiln_cuda_k_lrn(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    const int64_t size = kiln_attr_int(c->node, "size", 1), lo = (size - 1) / 2, hi = size - 1 - lo;
    const int64_t C = x->dims[1], S = n / (x->dims[0] * C);
    lrn_kernel<<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        x->data, c->out[0]->data, (int)x->dtype, n, C, S, lo, hi, (double)kiln_attr_float(c->node, "alpha", 1e-4f) / size,
        kiln_attr_float(c->node, "beta", 0.75f), kiln_attr_float(c->node, "bias", 1.0f));
    KILN_CUDA_LAUNCHED(c->kctx, "lrn_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_reverse_sequence(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    const int64_t ta = kiln_attr_int(c->node, "time_axis", 0), ba = kiln_attr_int(c->node, "batch_axis", 1);
    const int64_t B = x->dims[ba], T = x->dims[ta], inner = n / (B * T);
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_reverse_sequence, cu, c->kctx, x->data,
                          c->out[0]->data, (const int64_t *)c->in[1]->data, n, B, T, inner, ta == 0);
    return st;
}

extern "C" kiln_status kiln_cuda_k_einsum(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    kiln_einsum e;
    kiln_status st = kiln_einsum_plan(c, &e);
    if (st) return st;
    kiln_einsum_gemm g;
    if (kiln_cuda_float_dtype(y->dtype) && kiln_einsum_as_gemm(&e, &g)) {
        st = kiln_cuda_einsum_gemm(cu, c, &g);
        if (st != KILN_ERR_UNSUPPORTED) return st;
        kiln_clear_error(c->kctx); /* no algorithm: the elementwise kernel below */
    }
    EinsumIn in;
    memset(&in, 0, sizeof in);
    for (int t = 0; t < e.n_in; t++) in.p[t] = c->in[t]->data;
    einsum_kernel<<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(in, y->data, (int)y->dtype, n, e);
    KILN_CUDA_LAUNCHED(c->kctx, "einsum_kernel");
    return KILN_OK;
}

/* Compress: the condition is a value input; each run of selected slices is one
 * device-to-device copy. */
extern "C" kiln_status kiln_cuda_k_compress(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_status st = kiln_cuda_need_host(c);
    if (st) return st;
    const kiln_tensor *x = c->in[0], *cond = c->host_in[1];
    if (!cond || (!cond->data && kiln_tensor_numel(cond) > 0))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "Compress's condition is not known on the host");
    const bool has_axis = kiln_node_attr(c->node, "axis") != NULL;
    int64_t axis = kiln_attr_int(c->node, "axis", 0), outer = 1, inner = 1, len;
    if (has_axis) {
        if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
        for (int d = 0; d < axis; d++) outer *= x->dims[d];
        for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
        len = x->dims[axis];
    } else {
        len = kiln_tensor_numel(x);
    }
    const int64_t n = kiln_tensor_numel(cond) < len ? kiln_tensor_numel(cond) : len;
    const uint8_t *cv = (const uint8_t *)cond->data;
    const size_t row = (size_t)inner * kiln_dtype_size(x->dtype);
    char *y = (char *)c->out[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n;) {
            if (!cv[i]) {
                i++;
                continue;
            }
            int64_t j = i;
            while (j < n && cv[j]) j++;
            const size_t bytes = (size_t)(j - i) * row;
            if (bytes) {
                KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y, (const char *)x->data + (size_t)(o * len + i) * row, bytes,
                                                         cudaMemcpyDeviceToDevice, cu->stream));
            }
            y += bytes;
            i = j;
        }
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_window(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    kiln_window_coef w;
    if (!kiln_window_coef_of(c->node, n, &w))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "op %s is not a window", c->node->op_type);
    window_kernel<<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(y->data, (int)y->dtype, n, w);
    KILN_CUDA_LAUNCHED(c->kctx, "window_kernel");
    return KILN_OK;
}

/* QuantizeLinear and DequantizeLinear */
extern "C" kiln_status kiln_cuda_k_quantize(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    const bool quantize = strcmp(c->node->op_type, "QuantizeLinear") == 0;
    int64_t ch = 1, inner = 1;
    if (s->ndim == 1 && s->dims[0] != 1) {
        int64_t axis = kiln_attr_int(c->node, "axis", 1);
        if (!kiln_norm_axis(&axis, x->ndim)) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "axis out of range");
        ch = s->dims[0];
        for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    }
    double lo = 0, hi = 0;
    if (quantize && !kiln_quant_range(y->dtype, &lo, &hi))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "output dtype %s", kiln_dtype_name(y->dtype));
    quantize_kernel<<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        x->data, (int)x->dtype, s->data, (int)s->dtype, z ? z->data : nullptr, z ? (int)z->dtype : 0, y->data,
        (int)y->dtype, n, ch, inner, lo, hi, x->dtype == KILN_F64 || s->dtype == KILN_F64, quantize);
    KILN_CUDA_LAUNCHED(c->kctx, "quantize_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_dynamic_quantize(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    float *scale = c->n_out > 1 && c->out[1] ? (float *)c->out[1]->data : nullptr;
    uint8_t *zp = c->n_out > 2 && c->out[2] ? (uint8_t *)c->out[2]->data : nullptr;
    dynamic_quantize_kernel<<<1, 1024, 0, cu->stream>>>((const float *)x->data, (uint8_t *)c->out[0]->data, scale, zp,
                                                        kiln_tensor_numel(x));
    KILN_CUDA_LAUNCHED(c->kctx, "dynamic_quantize_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_max_unpool(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    KILN_CUDA_CHECK(c->kctx, cudaMemsetAsync(y->data, 0, kiln_tensor_nbytes(y), cu->stream));
    const int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    UnpoolDims u;
    memset(&u, 0, sizeof u);
    u.nd = x->ndim;
    const int sp = x->ndim - 2;
    int nk = 0, ns = 0, np = 0;
    const int64_t *k = kiln_attr_ints(c->node, "kernel_shape", &nk);
    const int64_t *s = kiln_attr_ints(c->node, "strides", &ns);
    const int64_t *p = kiln_attr_ints(c->node, "pads", &np);
    if (!k || nk != sp) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "kernel_shape");
    u.def[0] = x->dims[0];
    u.def[1] = x->dims[1];
    for (int d = 0; d < sp; d++) u.def[2 + d] = (x->dims[2 + d] - 1) * (s ? s[d] : 1) - (p ? p[d] + p[sp + d] : 0) + k[d];
    for (int d = 0; d < y->ndim; d++) u.out[d] = y->dims[d];
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x->dtype), launch_max_unpool, cu, c->kctx, x->data,
                          (const int64_t *)c->in[1]->data, y->data, n, u);
    return st;
}
