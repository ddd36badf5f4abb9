/*
 * pool_grad.cu — gradients of the average and global pools, as the CPU references
 * compute them (src/ops/global_average_pool.c, global_max_pool.c, average_pool.c), in
 * f32 / f16 / bf16 (dY, dX of one dtype; X's values are read by GlobalMaxPoolGrad only).
 *
 *   kiln.GlobalAveragePoolGrad(dY, X) -> dX: dY (N, C, 1..1) / S over each (n, c) plane of
 *     S elements. dX NCHW, or 4-D NHWC (dY's bytes are the same in both layouts).
 *   kiln.GlobalMaxPoolGrad(dY, X) -> dX: dY on each plane's first maximum, or its first
 *     NaN, 0 elsewhere. One warp per plane finds the position (the lowest index among the
 *     lanes' candidates), then writes the plane. X and dX NCHW, or both 4-D NHWC.
 *   kiln.AveragePoolGrad(dY, X) -> dX, 1 to 3 spatial dims: each window's dY / divisor
 *     added to its taps inside X, the divisor as the forward's (taps inside X, or with
 *     count_include_pad = 1 taps inside the padded input [-pad_begin, in + pad_end)).
 *     Gathered: one thread per element of dX sums the windows that cover it (no atomics,
 *     each dX written once). dY and dX NCHW, or both 4-D NHWC (channels innermost).
 */
#include "dtype.cuh"
#include "norm_train.h"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }
bool is_nhwc(const kiln_tensor *t) { return t && t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }
const char *lay(const kiln_tensor *t) { return is_nhwc(t) ? "NHWC" : "NCHW"; }

/* dY (input 0) and dX of one float dtype, X present with rank >= 3 and dX's dims. */
bool grad_io(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 2 || !present(c, 1)) {
        snprintf(why, n, "inputs dY and X are required");
        return false;
    }
    const kiln_tensor *dy = c->in[0], *x = c->in[1], *dx = c->out[0];
    if (!kiln_cuda_float_dtype(dy->dtype) || dx->dtype != dy->dtype) {
        snprintf(why, n, "dY of dtype %s and dX of %s (one of f32, f16, bf16)", kiln_dtype_name(dy->dtype),
                 kiln_dtype_name(dx->dtype));
        return false;
    }
    bool same = x->ndim == dx->ndim && x->ndim >= 3;
    for (int d = 0; same && d < x->ndim; d++) same = x->dims[d] == dx->dims[d];
    if (!same) {
        snprintf(why, n, "dX must have X's shape, rank >= 3");
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ GlobalAveragePoolGrad */

// dy: (N*C); dx: (N, C, S) or NHWC (N, S, C)
template <typename T, bool NHWC>
__global__ void gap_grad(const T *dy, T *dx, int64_t total, int64_t C, int64_t S) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t nc = NHWC ? (i / (S * C)) * C + i % C : i / S;
        dx[i] = from_f<T>((float)((double)to_f(dy[nc]) / (double)S));
    }
}

// NHWC with C a multiple of V (16 bytes of T) and 16-byte aligned pointers: a thread takes V
// channels of one image, divides their dY by S once (gap_grad's arithmetic) and writes that
// vector at each of the S positions; neighbouring threads take neighbouring channel groups,
// so each position's row is written whole. gap_grad's 64-bit index divisions and 2-byte
// stores ran ResNet-50's (256, 2048, 7, 7) f16 gradient at ~0.55 TB/s (93 us).
template <typename T>
__global__ void gap_grad_nhwc_vec(const T *__restrict__ dy, T *__restrict__ dx, uint32_t groups, uint32_t CV,
                                  uint32_t S) {
    using Vec = typename VecOf<T>::type;
    constexpr int V = VecOf<T>::N;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += gridDim.x * blockDim.x) {
        const uint32_t n = i / CV, cg = i - n * CV;
        const Vec d = *(const Vec *)(dy + (size_t)i * V); /* dY (N, C): group i is channels cg*V.. of image n */
        Vec o;
#pragma unroll
        for (int e = 0; e < V; e++) o.v[e] = from_f<T>((float)((double)to_f(d.v[e]) / (double)S));
        Vec *row = (Vec *)dx + (size_t)n * S * CV + cg;
        for (uint32_t s = 0; s < S; s++) row[(size_t)s * CV] = o;
    }
}

template <typename T>
kiln_status launch_gap_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, void *dx, int64_t total, int64_t C,
                            int64_t S, bool nhwc) {
    if (total == 0) return KILN_OK;
    constexpr int64_t V = VecOf<T>::N;
    if (nhwc && C % V == 0 && aligned16(dy, dx) && total / S <= 0x7fffffff && S <= 0x7fffffff) {
        const int64_t groups = total / S / V; /* (N * C) / V */
        gap_grad_nhwc_vec<T><<<kiln_cuda_blocks(cu, groups, THREADS), THREADS, 0, cu->stream>>>(
            (const T *)dy, (T *)dx, (uint32_t)groups, (uint32_t)(C / V), (uint32_t)S);
        KILN_CUDA_LAUNCHED(ctx, "gap_grad_nhwc_vec");
        return KILN_OK;
    }
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    if (nhwc) gap_grad<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, total, C, S);
    else gap_grad<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, total, C, S);
    KILN_CUDA_LAUNCHED(ctx, "gap_grad");
    return KILN_OK;
}

/* -------------------------------------------------------------- GlobalMaxPoolGrad */

/* a before b in the reference's scan: a NaN first (the scan stops there), then the larger
 * value, then the lower index; idx < 0: no candidate */
__device__ __forceinline__ bool better(float va, int64_t ia, float vb, int64_t ib) {
    if (ib < 0) return ia >= 0;
    if (ia < 0) return false;
    const bool na = va != va, nb = vb != vb;
    if (na != nb) return na;
    if (!na && va != vb) return va > vb;
    return ia < ib;
}

// dy: (N*C); x, dx: (N, C, S) or NHWC (N, S, C). One warp per plane.
template <typename T, bool NHWC>
__global__ void gmp_grad(const T *dy, const T *x, T *dx, int64_t NC, int64_t C, int64_t S) {
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int lane = threadIdx.x & 31;
    for (int64_t nc = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; nc < NC; nc += warps) {
        const int64_t base = NHWC ? (nc / C) * S * C + nc % C : nc * S, step = NHWC ? C : 1;
        float best = 0.f;
        int64_t at = -1;
        for (int64_t s = lane; s < S; s += 32) {
            const float v = to_f(x[base + s * step]);
            if (better(v, s, best, at)) {
                best = v;
                at = s;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float vo = __shfl_xor_sync(0xffffffffu, best, o);
            const int64_t io = __shfl_xor_sync(0xffffffffu, at, o);
            if (better(vo, io, best, at)) {
                best = vo;
                at = io;
            }
        }
        const T g = dy[nc], zero = from_f<T>(0.f);
        for (int64_t s = lane; s < S; s += 32) dx[base + s * step] = s == at ? g : zero;
    }
}

template <typename T>
kiln_status launch_gmp_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, const void *x, void *dx, int64_t NC,
                            int64_t C, int64_t S, bool nhwc) {
    if (NC * S == 0) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, NC * 32, THREADS);
    if (nhwc) gmp_grad<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (const T *)x, (T *)dx, NC, C, S);
    else gmp_grad<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (const T *)x, (T *)dx, NC, C, S);
    KILN_CUDA_LAUNCHED(ctx, "gmp_grad");
    return KILN_OK;
}

/* ---------------------------------------------------------------- AveragePoolGrad */

/* The window right-aligned into 3 slots (unused leading slots: size 1, kernel 1). */
struct Geo3 {
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
};

Geo3 geo3(const kiln_cuda_window &w) {
    Geo3 g;
    for (int t = 0; t < 3; t++) {
        const int src = t - (3 - w.nd);
        const bool used = src >= 0;
        g.in[t] = used ? w.in[src] : 1;
        g.out[t] = used ? w.out[src] : 1;
        g.k[t] = used ? w.k[src] : 1;
        g.s[t] = used ? w.s[src] : 1;
        g.d[t] = used ? w.d[src] : 1;
        g.pb[t] = used ? w.pb[src] : 0;
        g.pe[t] = used ? w.pe[src] : 0;
    }
    return g;
}

/* Taps of window o along slot t inside X, or inside the padded input (include_pad). */
__device__ __forceinline__ int64_t taps(const Geo3 &g, int t, int64_t o, bool include_pad) {
    const int64_t start = o * g.s[t] - g.pb[t];
    int64_t count = 0;
    for (int64_t j = 0; j < g.k[t]; j++) {
        const int64_t p = start + j * g.d[t];
        count += include_pad ? (p >= -g.pb[t] && p < g.in[t] + g.pe[t]) : (p >= 0 && p < g.in[t]);
    }
    return count;
}

// dy: (NC, O0, O1, O2); dx: (NC, I0, I1, I2), or NHWC with C innermost in both
template <typename T, bool NHWC>
__global__ void avgpool_grad(const T *dy, T *dx, int64_t total, int64_t C, Geo3 g, bool include_pad) {
    const int64_t I = g.in[0] * g.in[1] * g.in[2], O = g.out[0] * g.out[1] * g.out[2];
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        int64_t pos, plane_out, ch_step;
        if (NHWC) { /* i = ((n * I) + pos) * C + c */
            const int64_t c = i % C, r = i / C;
            pos = r % I;
            plane_out = (r / I) * O * C + c;
            ch_step = C;
        } else {
            pos = i % I;
            plane_out = (i / I) * O;
            ch_step = 1;
        }
        const int64_t p[3] = {pos / (g.in[1] * g.in[2]), (pos / g.in[2]) % g.in[1], pos % g.in[2]};
        float acc = 0.f;
        for (int64_t j0 = 0; j0 < g.k[0]; j0++) {
            const int64_t q0 = p[0] + g.pb[0] - j0 * g.d[0];
            if (q0 < 0 || q0 % g.s[0] || q0 / g.s[0] >= g.out[0]) continue;
            const int64_t o0 = q0 / g.s[0], c0 = taps(g, 0, o0, include_pad);
            for (int64_t j1 = 0; j1 < g.k[1]; j1++) {
                const int64_t q1 = p[1] + g.pb[1] - j1 * g.d[1];
                if (q1 < 0 || q1 % g.s[1] || q1 / g.s[1] >= g.out[1]) continue;
                const int64_t o1 = q1 / g.s[1], c1 = taps(g, 1, o1, include_pad);
                for (int64_t j2 = 0; j2 < g.k[2]; j2++) {
                    const int64_t q2 = p[2] + g.pb[2] - j2 * g.d[2];
                    if (q2 < 0 || q2 % g.s[2] || q2 / g.s[2] >= g.out[2]) continue;
                    const int64_t o2 = q2 / g.s[2], count = c0 * c1 * taps(g, 2, o2, include_pad);
                    if (count == 0) continue;
                    const int64_t at = plane_out + ((o0 * g.out[1] + o1) * g.out[2] + o2) * ch_step;
                    acc += (float)((double)to_f(dy[at]) / (double)count);
                }
            }
        }
        dx[i] = from_f<T>(acc);
    }
}

template <typename T>
kiln_status launch_avgpool_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, void *dx, int64_t total, int64_t C,
                                Geo3 g, bool include_pad, bool nhwc) {
    if (total == 0) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    if (nhwc)
        avgpool_grad<T, true><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, total, C, g, include_pad);
    else
        avgpool_grad<T, false><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, total, C, g, include_pad);
    KILN_CUDA_LAUNCHED(ctx, "avgpool_grad");
    return KILN_OK;
}

void plane_dims(const kiln_tensor *x, int64_t *NC, int64_t *C, int64_t *S) {
    *C = x->dims[1];
    *NC = x->dims[0] * x->dims[1];
    *S = 1;
    for (int d = 2; d < x->ndim; d++) *S *= x->dims[d];
}

} // namespace

/* ------------------------------------------------------------------ entry points */

/* kiln.GlobalAveragePoolGrad(dY, X): X's values and layout are not read (only its shape). */
extern "C" bool kiln_cuda_sup_gap_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!grad_io(c, why, n)) return false;
    if (kiln_tensor_numel(c->in[0]) != c->in[1]->dims[0] * c->in[1]->dims[1]) {
        snprintf(why, n, "dY must hold one value per (n, c) plane");
        return false;
    }
    if (c->in[0]->ndim == 4 && is_nhwc(c->in[0]) && !kiln_cuda_layout_free(c->in[0])) {
        snprintf(why, n, "dY is laid out NHWC");
        return false;
    }
    return true;
}

extern "C" kiln_status kiln_cuda_k_gap_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    int64_t NC, C, S;
    plane_dims(c->in[1], &NC, &C, &S);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_gap_grad, cu, c->kctx, c->in[0]->data,
                           c->out[0]->data, NC * S, C, S, is_nhwc(c->out[0]));
    return st;
}

/* kiln.GlobalMaxPoolGrad(dY, X): X and dX in one layout, X of dY's dtype. */
extern "C" bool kiln_cuda_sup_gmp_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!grad_io(c, why, n)) return false;
    if (c->in[1]->dtype != c->in[0]->dtype) {
        snprintf(why, n, "X has dtype %s, dY %s", kiln_dtype_name(c->in[1]->dtype), kiln_dtype_name(c->in[0]->dtype));
        return false;
    }
    if (kiln_tensor_numel(c->in[0]) != c->in[1]->dims[0] * c->in[1]->dims[1]) {
        snprintf(why, n, "dY must hold one value per (n, c) plane");
        return false;
    }
    if (is_nhwc(c->in[1]) != is_nhwc(c->out[0]) || (is_nhwc(c->in[0]) && !kiln_cuda_layout_free(c->in[0]))) {
        snprintf(why, n, "X is %s, dY %s and dX %s (X and dX in one layout)", lay(c->in[1]), lay(c->in[0]),
                 lay(c->out[0]));
        return false;
    }
    return true;
}

extern "C" kiln_status kiln_cuda_k_gmp_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    int64_t NC, C, S;
    plane_dims(c->in[1], &NC, &C, &S);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_gmp_grad, cu, c->kctx, c->in[0]->data,
                           c->in[1]->data, c->out[0]->data, NC, C, S, is_nhwc(c->out[0]));
    return st;
}

/* kiln.AveragePoolGrad(dY, X): dY and dX in one layout (X's is not read). */
extern "C" bool kiln_cuda_sup_avgpool_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (!grad_io(c, why, n)) return false;
    if (is_nhwc(c->in[0]) != is_nhwc(c->out[0])) {
        snprintf(why, n, "dY is %s and dX %s (one layout for both)", lay(c->in[0]), lay(c->out[0]));
        return false;
    }
    kiln_cuda_window w;
    return kiln_cuda_window_get(c, c->in[1], c->in[0], NULL, &w, why, n);
}

extern "C" kiln_status kiln_cuda_k_avgpool_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_cuda_window w;
    char why[256] = "";
    if (!kiln_cuda_window_get(c, c->in[1], c->in[0], NULL, &w, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%s", why);
    const bool include_pad = kiln_attr_int(c->node, "count_include_pad", 0) != 0;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, c->in[0]->dtype, launch_avgpool_grad, cu, c->kctx, c->in[0]->data,
                           c->out[0]->data, kiln_tensor_numel(c->out[0]), c->out[0]->dims[1], geo3(w), include_pad,
                           is_nhwc(c->out[0]));
    return st;
}
