/*
 * concat_affine.cu — kiln.ConcatAffine(S, T, X0, ..., Xn-1) -> Y on CUDA (src/ops/concat_affine.c
 * states the op): Y[n, c, ...] = act(concat(X; axis 1)[n, c, ...] * S[c] + T[c]), act Relu
 * (NaN -> 0) or the identity, computed in f32 and rounded once; X and Y f32, f16 or bf16;
 * S and T f32 (what the precision pass keeps), f16, bf16 or f64.
 *
 *   Each piece Xk is read once and written into its channels [c0, c0 + Ck) of Y: a launch
 *   takes up to MAX_PARTS pieces (blockIdx.y: the piece; more pieces, more launches), a
 *   grid-stride loop over the piece's elements.
 *   NHWC (Y 4-D NHWC; every Xk NHWC, or with the same bytes in both layouts: one channel,
 *   or 1x1 images): a piece is (pixels, Ck) rows written at Y's pixel stride C. When every
 *   Ck, c0 and C of the launch is a multiple of V = 16 bytes / element size and the
 *   pointers are 16-byte aligned (DenseNet: 32-channel features, f16), a thread moves V
 *   channels of one pixel as one 16-byte load and store (f32 S and T, aligned, as float4s);
 *   otherwise one element.
 *   NCHW (any rank >= 2): a piece is (N, Ck * S) rows written at Y's row stride C * S,
 *   one element per step.
 *   Index math in 32 bits when Y has fewer than 2^31 elements.
 */
#include "dtype.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int MAX_PARTS = 16;

struct CaPart {
    const void *x;
    int64_t ck, c0; /* channels of the piece, its first channel in Y */
};

struct CaArgs {
    void *y;
    const void *s, *t;
    int dt_s, dt_t;
    int relu;
    int64_t C;     /* Y's channels */
    int64_t outer; /* NHWC: pixels N*H*W; NCHW: N */
    int64_t S;     /* NCHW: elements per channel (1 for NHWC) */
    CaPart p[MAX_PARTS];
};

__device__ __forceinline__ float param(const void *p, int dt, int64_t i) {
    return dt == KILN_F32 ? ((const float *)p)[i] : (float)load_any(p, dt, i);
}

__device__ __forceinline__ float act(float v, int relu) { return relu ? (v > 0.f ? v : 0.f) : v; }

template <typename T, int V> struct alignas(sizeof(T) * V) Pack {
    T v[V];
};

// V consecutive parameters from channel ch: from f32 S / T 16-byte aligned (P32: ch a
// multiple of V, so V >= 4 loads whole float4s), or element by element of any dtype
template <int V, bool P32> __device__ __forceinline__ void params(const void *p, int dt, int64_t ch, float *out) {
    if (P32 && V % 4 == 0) {
#pragma unroll
        for (int j = 0; j < V / 4; j++) {
            const float4 q = ((const float4 *)((const float *)p + ch))[j];
            out[4 * j] = q.x;
            out[4 * j + 1] = q.y;
            out[4 * j + 2] = q.z;
            out[4 * j + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) out[e] = param(p, dt, ch + e);
    }
}

// X piece: (pixels, ck) rows; Y: (pixels, C); V channels per step
template <typename T, int V, bool P32, typename I>
__global__ void concat_affine_nhwc(CaArgs a) {
    const CaPart q = a.p[blockIdx.y];
    const I cv = (I)(q.ck / V), total = (I)a.outer * cv;
    const Pack<T, V> *x = (const Pack<T, V> *)q.x;
    T *y = (T *)a.y;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I px = i / cv, v = i - px * cv;
        const int64_t ch = q.c0 + (int64_t)v * V;
        const Pack<T, V> in = x[i];
        float sv[V], tv[V];
        params<V, P32>(a.s, a.dt_s, ch, sv);
        params<V, P32>(a.t, a.dt_t, ch, tv);
        Pack<T, V> out;
#pragma unroll
        for (int e = 0; e < V; e++) out.v[e] = from_f<T>(act(to_f(in.v[e]) * sv[e] + tv[e], a.relu));
        *(Pack<T, V> *)(y + (int64_t)px * a.C + ch) = out;
    }
}

// X piece: (N, ck, S); Y: (N, C, S)
template <typename T, typename I>
__global__ void concat_affine_nchw(CaArgs a) {
    const CaPart q = a.p[blockIdx.y];
    const I row = (I)(q.ck * a.S), total = (I)a.outer * row, S = (I)a.S;
    const T *x = (const T *)q.x;
    T *y = (T *)a.y;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I n = i / row, r = i - n * row, ch = r / S;
        const int64_t c = q.c0 + (int64_t)ch;
        const float v = act(to_f(x[i]) * param(a.s, a.dt_s, c) + param(a.t, a.dt_t, c), a.relu);
        y[(int64_t)n * a.C * a.S + q.c0 * a.S + (int64_t)r] = from_f<T>(v);
    }
}

template <typename T>
kiln_status launch(kiln_cuda *cu, kiln_context *ctx, const CaArgs &a, int m, bool nhwc, bool vec, int64_t max_total,
                   bool idx32) {
    const dim3 grid(kiln_cuda_blocks(cu, max_total, THREADS), (unsigned)m);
    constexpr int V = 16 / (int)sizeof(T);
    /* S and T f32 and 16-byte aligned: the vector path loads them as float4s */
    const bool p32 = a.dt_s == KILN_F32 && a.dt_t == KILN_F32 && aligned16(a.s, a.t);
    if (nhwc && vec && p32 && idx32) concat_affine_nhwc<T, V, true, uint32_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else if (nhwc && vec && p32) concat_affine_nhwc<T, V, true, int64_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else if (nhwc && vec && idx32) concat_affine_nhwc<T, V, false, uint32_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else if (nhwc && vec) concat_affine_nhwc<T, V, false, int64_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else if (nhwc && idx32) concat_affine_nhwc<T, 1, false, uint32_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else if (nhwc) concat_affine_nhwc<T, 1, false, int64_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else if (idx32) concat_affine_nchw<T, uint32_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else concat_affine_nchw<T, int64_t><<<grid, THREADS, 0, cu->stream>>>(a);
    KILN_CUDA_LAUNCHED(ctx, "concat_affine");
    return KILN_OK;
}

bool is_nhwc(const kiln_tensor *t) { return t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }

} // namespace

extern "C" bool kiln_cuda_sup_concat_affine(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_tensor *y = c->out[0];
    if (c->n_in < 3 || !c->in[0] || !c->in[1]) {
        snprintf(why, n, "S, T and at least one X are needed");
        return false;
    }
    if (!kiln_cuda_float_dtype(y->dtype)) {
        snprintf(why, n, "dtype %s (f32, f16 and bf16 are supported)", kiln_dtype_name(y->dtype));
        return false;
    }
    for (int k = 0; k < 2; k++)
        if (!kiln_cuda_float_dtype(c->in[k]->dtype) && c->in[k]->dtype != KILN_F64) {
            snprintf(why, n, "%s has dtype %s", k ? "T" : "S", kiln_dtype_name(c->in[k]->dtype));
            return false;
        }
    const bool nhwc = is_nhwc(y);
    for (int i = 2; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        if (!x || x->dtype != y->dtype) {
            snprintf(why, n, "input %d is missing or not of Y's dtype", i);
            return false;
        }
        if (is_nhwc(x) != nhwc && !(nhwc && x->ndim == 4 && kiln_cuda_layout_free(x))) {
            snprintf(why, n, "input %d is laid out %s and Y %s", i, is_nhwc(x) ? "NHWC" : "NCHW", nhwc ? "NHWC" : "NCHW");
            return false;
        }
    }
    return true;
}

extern "C" kiln_status kiln_cuda_k_concat_affine(kiln_cuda *cu, kiln_op_ctx *c) {
    char why[200] = "";
    if (!kiln_cuda_sup_concat_affine(c, why, sizeof why))
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "not supported on cuda: %s", why);
    kiln_tensor *y = c->out[0];
    const int64_t total_y = kiln_tensor_numel(y);
    if (total_y == 0) return KILN_OK;
    const bool nhwc = is_nhwc(y);
    const size_t es = kiln_dtype_size(y->dtype);
    const int V = 16 / (int)es;
    CaArgs a;
    memset(&a, 0, sizeof a);
    a.y = y->data;
    a.s = c->in[0]->data;
    a.t = c->in[1]->data;
    a.dt_s = (int)c->in[0]->dtype;
    a.dt_t = (int)c->in[1]->dtype;
    a.relu = kiln_attr_int(c->node, "relu", 0) != 0;
    a.C = y->dims[1];
    a.S = 1;
    for (int d = 2; d < y->ndim; d++) a.S *= y->dims[d];
    a.outer = nhwc ? y->dims[0] * a.S : y->dims[0];
    if (nhwc) a.S = 1;
    const bool idx32 = total_y < ((int64_t)1 << 31);
    int64_t c0 = 0;
    for (int k0 = 2; k0 < c->n_in; k0 += MAX_PARTS) {
        int m = 0;
        int64_t max_total = 0;
        bool vec = nhwc && a.C % V == 0 && (uintptr_t)a.y % 16 == 0;
        for (int k = k0; k < c->n_in && k < k0 + MAX_PARTS; k++) {
            const kiln_tensor *x = c->in[k];
            const int64_t ck = x->dims[1];
            if (ck > 0) {
                CaPart *q = &a.p[m++];
                q->x = x->data;
                q->ck = ck;
                q->c0 = c0;
                vec = vec && ck % V == 0 && c0 % V == 0 && (uintptr_t)x->data % 16 == 0;
                const int64_t tot = a.outer * ck * a.S;
                if (tot > max_total) max_total = tot;
            }
            c0 += ck;
        }
        if (m == 0 || max_total == 0) continue;
        if (vec) max_total /= V;
        kiln_status st;
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, y->dtype, launch, cu, c->kctx, a, m, nhwc, vec, max_total, idx32);
        if (st) return st;
    }
    return KILN_OK;
}
