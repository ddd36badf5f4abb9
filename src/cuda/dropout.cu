/*
 * dropout.cu — Dropout (inference and training, with the mask output), kiln.DropoutGrad,
 * and the device-side run seed random kernels read. f32, f16 and bf16.
 *
 *   Dropout (opset 12+): inputs data, optional ratio (float scalar, default 0.5) and
 *   optional training_mode (bool scalar, default false), both read ON THE DEVICE, so one
 *   captured graph serves whatever values they hold. Not training, or ratio 0: Y = X and
 *   the mask is all true. Training: element i is kept when u_i >= ratio, where u_i is the
 *   top 53 bits of splitmix64(key + (i + 1) * golden) over 2^53 and
 *       key = mix64(seed); key = mix64(key ^ mix64(attr_seed + golden)) if the node has a
 *       `seed` attribute; key = mix64(key ^ node->out[0]) when the node has outputs,
 *   bit for bit the counter-based stream of the CPU reference (src/ops/dropout.c), so the
 *   CPU and the GPU draw the same masks for the same run seed. Y = X * scale with scale
 *   = 1 / (1 - ratio) in double, rounded to float and then to the dtype (as the
 *   reference's kiln_set_f64 does). A training ratio outside [0, 1) zeroes Y and raises
 *   the device error flag (the reference fails before writing). Opsets < 12: Y = X.
 *
 *   The run seed is not c->seed (a host value that a captured graph would freeze) but a
 *   uint64 in device memory on the kiln_cuda: kiln_cuda_rng_set writes it, and
 *   kiln_cuda_rng_next advances it from a device counter inside a captured graph (see
 *   cuda_backend.h).
 *
 *   kiln.DropoutGrad(dY, mask, ratio?, training_mode?, Y?): training: g = mask ? dY * scale
 *   : 0 (f32: dY times the float-rounded scale, as the reference; other dtypes through
 *   double); otherwise g = dY. dX = g, or with attribute relu = 1 (the fuse-pool pass's
 *   fold of a Relu's kiln.UnaryGrad) dX = Y > 0 ? g : 0, g rounded to the dtype first and
 *   passed as it is (NaN and inf too) where Y > 0, as the two unfused kernels write it. A
 *   training ratio outside [0, 1) zeroes dX and raises the device error flag.
 *
 * Grid-stride; the mask is one byte per element (bool). When the data (Y too) are aligned
 * to 4 elements and the mask to 4 bytes, a thread takes 4 elements (vector loads and
 * stores, a 4-byte mask word, 32-bit indices); otherwise one element per thread.
 *
 * Across layouts (the layout pass, src/passes/layout.c: the conversion next to Dropout in
 * a CNN's training step folded into it). Dims are logical NCHW, as everywhere:
 *   Dropout with a 4-D NHWC X, Y and the mask NCHW (any mode): element i of the NCHW
 *     outputs is X's element at logical position i, and the mask is drawn by that NCHW
 *     index i, so Y and the mask are bit for bit those of the NCHW kernel on ToNCHW(X).
 *   kiln.DropoutGrad with dY and the mask NCHW and a 4-D NHWC dX: dX = ToNHWC of the NCHW
 *     result, bit for bit. Not with relu = 1 (table.c refuses it; the fuse-pool pass folds
 *     the Relu only where dY, the mask, Y and dX are all NCHW).
 *   Both move 32x32 tiles through shared memory, (N, H*W, C) <-> (N, C, H*W), as
 *   kiln.ToNCHW / kiln.ToNHWC do for more than a few channels, so that NHWC and NCHW
 *   accesses are both coalesced. A plain gather (one thread per NCHW element reading X at
 *   stride C) would touch one 32-byte sector per element on the NHWC side: at mnist-net's
 *   64 channels that is 8 (f32) to 16 (f16) times the memory transactions of a coalesced
 *   walk over the same bytes, for a kernel whose point is to cost no more than the
 *   elementwise one; the tile costs two __syncthreads per 32x32 block of work. The random
 *   stream (two 64-bit mixes per element) runs in the NCHW phase of either kernel.
 */
#include "dtype.cuh"
#include "reduce.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr uint64_t GOLDEN = 0x9E3779B97F4A7C15ull;

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* What the host knows about a Dropout node; the rest is read on the device. */
struct DropoutArgs {
    const void *ratio;   /* scalar of ratio_dt, or NULL (0.5) */
    int ratio_dt;
    const uint8_t *train; /* bool scalar, or NULL (false) */
    bool legacy;         /* opset < 12: always the identity */
    bool has_attr_seed;
    uint64_t attr_mix;   /* mix64(seed attribute + golden) */
    bool has_out;
    uint64_t out0;       /* node->out[0] */
    const uint64_t *seed; /* the run seed */
};

__device__ __forceinline__ double read_ratio(const void *p, int dt) { return p ? load_any(p, dt, 0) : 0.5; }

/* Four elements of T in one aligned access (16 bytes of f32, 8 of f16). */
template <typename T> struct alignas(4 * sizeof(T)) Quad {
    T v[4];
};

/* Whether element i is kept: u_i >= ratio, u_i = m_i / 2^53 from the counter-based
 * stream (m_i the top 53 bits). As integers: m_i >= thr = ceil(ratio * 2^53), exact (both
 * sides are integers scaled by a power of two), with no conversion to double per element. */
__device__ __forceinline__ uint64_t keep_threshold(double ratio) {
    if (!(ratio > 0)) return 0;                  /* everything kept (NaN too: callers zero that case) */
    if (ratio >= 1) return 1ull << 53;          /* nothing kept: m_i < 2^53 */
    return (uint64_t)ceil(ratio * 0x1.0p53);
}
/* z: the stream position of element i, key + (i + 1) * golden (kernels walking rows step it) */
__device__ __forceinline__ bool kept_at(uint64_t z, uint64_t thr) { return (mix64(z) >> 11) >= thr; }
__device__ __forceinline__ bool kept(uint64_t key, uint64_t i, uint64_t thr) { return kept_at(key + (i + 1) * GOLDEN, thr); }

// x, y: (n); mask: (n) or NULL. QUAD: x, y and mask aligned to 4 elements; a thread
// takes 4 neighbouring elements (one vector load and store, one 4-byte mask store), the
// same stream position per element, so the same mask.
template <typename T, bool QUAD>
__global__ void dropout_kernel(const T *x, T *y, uint8_t *mask, int64_t n, DropoutArgs a,
                               kiln_cuda_flag *flag) {
    const double ratio = read_ratio(a.ratio, a.ratio_dt);
    const bool train = !a.legacy && a.train && *a.train && ratio != 0;
    if (!train) {
        for (int64_t i = thread_index(); i < n; i += grid_stride()) {
            if (y != x) y[i] = x[i];
            if (mask) mask[i] = 1;
        }
        return;
    }
    if (!(ratio > 0 && ratio < 1)) {
        for (int64_t i = thread_index(); i < n; i += grid_stride()) {
            y[i] = from_f<T>(0.f);
            if (mask) mask[i] = 0;
        }
        if (thread_index() == 0 && atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_DROPOUT_RATIO) == 0)
            flag->value = (long long)(ratio * 1e6);
        return;
    }
    uint64_t key = mix64(*a.seed);
    if (a.has_attr_seed) key = mix64(key ^ a.attr_mix);
    if (a.has_out) key = mix64(key ^ a.out0);
    const double scale = 1.0 / (1.0 - ratio);
    const uint64_t thr = keep_threshold(ratio);
    int64_t start = thread_index();
    if constexpr (QUAD) {
        const uint32_t nq = (uint32_t)(n / 4);
        for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += gridDim.x * blockDim.x) {
            const Quad<T> xv = reinterpret_cast<const Quad<T> *>(x)[q];
            Quad<T> yv;
            uint32_t bits = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const bool keep = kept(key, (uint64_t)q * 4 + e, thr);
                bits |= (uint32_t)keep << (8 * e); /* byte e of a little-endian word */
                yv.v[e] = from_f<T>(keep ? (float)((double)to_f(xv.v[e]) * scale) : 0.f);
            }
            if (mask) reinterpret_cast<uint32_t *>(mask)[q] = bits;
            reinterpret_cast<Quad<T> *>(y)[q] = yv;
        }
        start += (int64_t)nq * 4;
    }
    for (int64_t i = start; i < n; i += grid_stride()) {
        const bool keep = kept(key, (uint64_t)i, thr);
        if (mask) mask[i] = keep;
        y[i] = from_f<T>(keep ? (float)((double)to_f(x[i]) * scale) : 0.f);
    }
}

/* Whether the 4-element path may take n elements at these pointers (a, b and c each NULL
 * or aligned to 4 elements of its type, the mask to 4 bytes; indices of quads within 32
 * bits). */
template <typename T>
bool quad_ok(const void *a, const void *b, const void *mask, int64_t n, const void *c = nullptr) {
    const uintptr_t al = 4 * sizeof(T);
    return n / 4 <= 0x7fffffff && (uintptr_t)a % al == 0 && (uintptr_t)b % al == 0 && (uintptr_t)c % al == 0 &&
           (uintptr_t)mask % 4 == 0;
}

template <typename T>
kiln_status launch_dropout(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, uint8_t *mask,
                           int64_t n, DropoutArgs a) {
    if (n == 0) return KILN_OK;
    if (quad_ok<T>(x, y, mask, n))
        dropout_kernel<T, true><<<kiln_cuda_blocks(cu, n / 4 + 1, THREADS), THREADS, 0, cu->stream>>>(
            (const T *)x, (T *)y, mask, n, a, cu->flag);
    else
        dropout_kernel<T, false><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
            (const T *)x, (T *)y, mask, n, a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "dropout_kernel");
    return KILN_OK;
}

constexpr int TILE = 32, TILE_ROWS = 8;

/* The pool of kiln.MaxPoolDropout / kiln.MaxPoolDropoutGrad in front of the tiled kernels:
 * windows kh x kw at stride (kh, kw), no padding, X's H and W multiples of them, so the
 * pooled pixel s = oh * ow_count + ow covers X's rows oh*kh.. and columns ow*kw... One
 * image of X has fewer than 2^31 elements (table.c checks), so window positions are 32-bit
 * integer arithmetic: one division per window, none per element. The kernels' POOL
 * template argument: 0 no pool (plain Dropout / DropoutGrad), 2 windows of 2x2 (unrolled),
 * 1 any other size. */
struct Pool {
    int kh, kw;
    int ow_count; /* the pooled width */
    bool relu;    /* the gradient goes on through the Relu whose output X is */
};

template <int P> __device__ __forceinline__ int pool_kh(const Pool &p) { return P == 2 ? 2 : p.kh; }
template <int P> __device__ __forceinline__ int pool_kw(const Pool &p) { return P == 2 ? 2 : p.kw; }

/* NHWC offset, within one image of C channels, of channel c of the first element of pooled
 * pixel s's window; element (i, j) of the window is at + (i * W + j) * C more. */
template <int P> __device__ __forceinline__ int window_base(const Pool &p, int s, int C, int c) {
    const int oh = s / p.ow_count, ow = s - oh * p.ow_count;
    return (oh * pool_kh<P>(p) * p.ow_count * pool_kw<P>(p) + ow * pool_kw<P>(p)) * C + c;
}

/* MaxPool's value of a window, as pool.cu's kernels take it (reduce.cuh's nan_max: NaN
 * when any element is NaN, else the maximum, exact). */
template <typename T, int P> __device__ __forceinline__ T window_max(const T *xn, const Pool &p, int s, int C, int c) {
    const int kh = pool_kh<P>(p), kw = pool_kw<P>(p), base = window_base<P>(p, s, C, c), row = p.ow_count * kw * C;
    float best = -INFINITY;
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) best = nan_max(best, to_f(xn[base + i * row + j * C]));
    return from_f<T>(best);
}

/* kiln.MaxPoolDropoutGrad's write of one window: g to the element MaxPoolGrad picks (the
 * first maximum, or the first NaN, in row-major window order: pool.cu's window_pick, the
 * reference's rule), through the Relu (the pick > 0) when p.relu; zero to the others. */
template <typename T, int P> __device__ __forceinline__ void window_scatter(const T *xn, T *dxn, const Pool &p, int s, int C, int c, T g) {
    const int kh = pool_kh<P>(p), kw = pool_kw<P>(p), base = window_base<P>(p, s, C, c), row = p.ow_count * kw * C;
    float best = to_f(xn[base]);
    bool nan = best != best;
    int at = 0;
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
            const float v = to_f(xn[base + i * row + j * C]);
            if (v > best || (v != v && !nan)) {
                best = v;
                at = i * kw + j;
            }
            nan |= v != v;
        }
    const T zero = from_f<T>(0.f), out = !p.relu || best > 0.f ? g : zero;
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) dxn[base + i * row + j * C] = i * kw + j == at ? out : zero;
}

// x: (N, S, C) NHWC -> y, mask (or NULL): (N, C, S) NCHW, S = H*W. Block (TILE, TILE_ROWS)
// takes the tile of pixels s0.. (blockIdx.x) and channels c0.. (blockIdx.y) of images
// blockIdx.z, +gridDim.z...: X's rows read along C into the tile, Y and the mask written
// along S, each element's mask drawn by its NCHW index. The +1 column keeps the tile's
// column reads off a single bank. Modes as dropout_kernel's, decided once per launch.
// POOL (kiln.MaxPoolDropout): X is (N, S*kh*kw, C) and a tile element is its window's
// maximum, read along C as well.
template <typename T, int POOL>
__global__ void dropout_nhwc_in_kernel(const T *__restrict__ x, T *__restrict__ y, uint8_t *__restrict__ mask,
                                       int64_t N, int64_t C, int64_t S, Pool p, DropoutArgs a,
                                       kiln_cuda_flag *flag) {
    __shared__ T tile[TILE][TILE + 1];
    const double ratio = read_ratio(a.ratio, a.ratio_dt);
    const bool train = !a.legacy && a.train && *a.train && ratio != 0;
    const bool bad = train && !(ratio > 0 && ratio < 1); /* Y and the mask zero, the flag raised */
    if (bad && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0 &&
        atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_DROPOUT_RATIO) == 0)
        flag->value = (long long)(ratio * 1e6);
    uint64_t key = mix64(*a.seed);
    if (a.has_attr_seed) key = mix64(key ^ a.attr_mix);
    if (a.has_out) key = mix64(key ^ a.out0);
    const double scale = 1.0 / (1.0 - ratio);
    const uint64_t thr = keep_threshold(ratio);
    /* tile_grid checked that an image's offsets fit in 32 bits; indices into the whole
     * tensor, and the stream positions, are 64-bit, stepped per row rather than multiplied */
    const int Ci = (int)C, Si = (int)S, s0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    const int64_t rowstep = (int64_t)TILE_ROWS * S; /* Y's NCHW index from channel c to c + TILE_ROWS */
    const uint64_t zstep = (uint64_t)rowstep * GOLDEN;
    const int64_t per_image = S * C * (POOL ? pool_kh<POOL>(p) * pool_kw<POOL>(p) : 1);
    for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
        const T *xn = x + n * per_image;
        if (c0 + (int)threadIdx.x < Ci) {
#pragma unroll
            for (int r = 0; r < TILE / TILE_ROWS; r++) {
                const int k = threadIdx.y + r * TILE_ROWS, s = s0 + k, c = c0 + threadIdx.x;
                if (s >= Si) break;
                if constexpr (POOL != 0) tile[k][threadIdx.x] = window_max<T, POOL>(xn, p, s, Ci, c);
                else tile[k][threadIdx.x] = xn[s * Ci + c];
            }
        }
        __syncthreads();
        if (s0 + (int)threadIdx.x < Si) {
            /* element (n, c0 + threadIdx.y, s): the NCHW index, the mask's stream position */
            const int64_t i0 = (n * C + c0 + threadIdx.y) * S + s0 + threadIdx.x;
            uint64_t z = key + (uint64_t)(i0 + 1) * GOLDEN; /* kept()'s argument, stepped */
            T *yp = y + i0;
            uint8_t *mp = mask ? mask + i0 : nullptr;
#pragma unroll
            for (int r = 0; r < TILE / TILE_ROWS; r++) {
                const int k = threadIdx.y + r * TILE_ROWS;
                if (c0 + k >= Ci) break;
                T v = tile[threadIdx.x][k];
                bool keep = true;
                if (bad) {
                    keep = false;
                    v = from_f<T>(0.f);
                } else if (train) {
                    keep = kept_at(z, thr);
                    v = from_f<T>(keep ? (float)((double)to_f(v) * scale) : 0.f);
                }
                yp[r * rowstep] = v;
                if (mp) mp[r * rowstep] = keep;
                z += zstep;
            }
        }
        __syncthreads();
    }
}

/* Grid of the tiled kernels over (N, C, S): pixels' tiles on x, channels' on y (up to
 * 65535), images on z (a loop past 65535). One image (S * C elements, times kk = the pool's
 * window for X) must fit 32-bit offsets. */
kiln_status tile_grid(kiln_context *ctx, const char *what, int64_t N, int64_t C, int64_t S, int64_t kk, dim3 *grid) {
    const int64_t gx = (S + TILE - 1) / TILE, gy = (C + TILE - 1) / TILE, gz = N < 65535 ? N : 65535;
    if (gy > 65535 || S * C * kk > INT32_MAX - TILE)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s across layouts with %lld channels of %lld pixels%s", what,
                         (long long)C, (long long)S, gy > 65535 ? "" : " (an image past 2^31 elements)");
    *grid = dim3((unsigned)gx, (unsigned)gy, (unsigned)gz);
    return KILN_OK;
}

/* pool.kh == 0: plain Dropout. */
template <typename T>
kiln_status launch_dropout_nhwc_in(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, uint8_t *mask,
                                   int64_t N, int64_t C, int64_t S, Pool pool, DropoutArgs a) {
    if (N == 0 || C == 0 || S == 0) return KILN_OK;
    dim3 grid;
    const kiln_status st = tile_grid(ctx, pool.kh ? "kiln.MaxPoolDropout" : "Dropout", N, C, S, pool.kh ? pool.kh * pool.kw : 1, &grid);
    if (st) return st;
    const dim3 block(TILE, TILE_ROWS);
    if (pool.kh == 2 && pool.kw == 2)
        dropout_nhwc_in_kernel<T, 2><<<grid, block, 0, cu->stream>>>((const T *)x, (T *)y, mask, N, C, S, pool, a, cu->flag);
    else if (pool.kh)
        dropout_nhwc_in_kernel<T, 1><<<grid, block, 0, cu->stream>>>((const T *)x, (T *)y, mask, N, C, S, pool, a, cu->flag);
    else
        dropout_nhwc_in_kernel<T, 0><<<grid, block, 0, cu->stream>>>((const T *)x, (T *)y, mask, N, C, S, pool, a, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "dropout_nhwc_in_kernel");
    return KILN_OK;
}

/* One element of dX in float: f32 is dY times the float-rounded scale, as the reference;
 * other dtypes go through double. */
template <typename T> __device__ __forceinline__ float dropout_grad_one(float g, unsigned keep, double scale, float sf) {
    if constexpr (sizeof(T) == 4) return keep ? __fmul_rn(g, sf) : 0.f;
    else return keep ? (float)((double)g * scale) : 0.f;
}

/* The Relu's gradient after the dropout's (kiln.DropoutGrad relu = 1): g where the Relu's
 * output y is positive, else zero whatever g is. */
template <typename T> __device__ __forceinline__ T relu_grad(T g, T y) { return to_f(y) > 0.f ? g : from_f<T>(0.f); }

// dy, dx: (n); mask: (n); y: (n), read when RELU (relu = 1). QUAD as in dropout_kernel
// (y then aligned as dy and dx are).
template <typename T, bool QUAD, bool RELU>
__global__ void dropout_grad_kernel(const T *dy, const uint8_t *mask, const T *y, T *dx, int64_t n,
                                    const void *ratio_p, int ratio_dt, const uint8_t *train_p,
                                    kiln_cuda_flag *flag) {
    const double ratio = read_ratio(ratio_p, ratio_dt);
    if (!(train_p && *train_p)) {
        if constexpr (RELU) {
            for (int64_t i = thread_index(); i < n; i += grid_stride()) dx[i] = relu_grad<T>(dy[i], y[i]);
        } else if (dx != dy) {
            for (int64_t i = thread_index(); i < n; i += grid_stride()) dx[i] = dy[i];
        }
        return;
    }
    if (!(ratio >= 0 && ratio < 1)) {
        for (int64_t i = thread_index(); i < n; i += grid_stride()) dx[i] = from_f<T>(0.f);
        if (thread_index() == 0 && atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_DROPOUT_RATIO) == 0)
            flag->value = (long long)(ratio * 1e6);
        return;
    }
    const double scale = 1.0 / (1.0 - ratio);
    const float sf = (float)scale;
    int64_t start = thread_index();
    if constexpr (QUAD) {
        const uint32_t nq = (uint32_t)(n / 4);
        for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += gridDim.x * blockDim.x) {
            const Quad<T> g = reinterpret_cast<const Quad<T> *>(dy)[q];
            const uint32_t bits = reinterpret_cast<const uint32_t *>(mask)[q];
            Quad<T> out;
#pragma unroll
            for (int e = 0; e < 4; e++)
                out.v[e] = from_f<T>(dropout_grad_one<T>(to_f(g.v[e]), (bits >> (8 * e)) & 0xffu, scale, sf));
            if constexpr (RELU) {
                const Quad<T> yv = reinterpret_cast<const Quad<T> *>(y)[q];
#pragma unroll
                for (int e = 0; e < 4; e++) out.v[e] = relu_grad<T>(out.v[e], yv.v[e]);
            }
            reinterpret_cast<Quad<T> *>(dx)[q] = out;
        }
        start += (int64_t)nq * 4;
    }
    for (int64_t i = start; i < n; i += grid_stride()) {
        const T g = from_f<T>(dropout_grad_one<T>(to_f(dy[i]), mask[i], scale, sf));
        if constexpr (RELU) dx[i] = relu_grad<T>(g, y[i]);
        else dx[i] = g;
    }
}

template <typename T, bool QUAD, bool RELU>
void start_dropout_grad(kiln_cuda *cu, const void *dy, const uint8_t *mask, const void *y, void *dx, int64_t n,
                        const void *ratio, int ratio_dt, const uint8_t *train) {
    dropout_grad_kernel<T, QUAD, RELU><<<kiln_cuda_blocks(cu, QUAD ? n / 4 + 1 : n, THREADS), THREADS, 0, cu->stream>>>(
        (const T *)dy, mask, (const T *)y, (T *)dx, n, ratio, ratio_dt, train, cu->flag);
}

/* y: the Relu's output (relu = 1), or NULL. */
template <typename T>
kiln_status launch_dropout_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, const uint8_t *mask,
                                const void *y, void *dx, int64_t n, const void *ratio, int ratio_dt,
                                const uint8_t *train) {
    if (n == 0) return KILN_OK;
    const bool quad = quad_ok<T>(dy, dx, mask, n, y);
    if (y && quad) start_dropout_grad<T, true, true>(cu, dy, mask, y, dx, n, ratio, ratio_dt, train);
    else if (y) start_dropout_grad<T, false, true>(cu, dy, mask, y, dx, n, ratio, ratio_dt, train);
    else if (quad) start_dropout_grad<T, true, false>(cu, dy, mask, y, dx, n, ratio, ratio_dt, train);
    else start_dropout_grad<T, false, false>(cu, dy, mask, y, dx, n, ratio, ratio_dt, train);
    KILN_CUDA_LAUNCHED(ctx, "dropout_grad_kernel");
    return KILN_OK;
}

// dy, mask: (N, C, S) NCHW -> dx: (N, S, C) NHWC, S = H*W. The mirror of
// dropout_nhwc_in_kernel: dY and the mask read along S into the tile (dX computed on the
// way in, as dropout_grad_kernel does), dX written along C.
// POOL (kiln.MaxPoolDropoutGrad): x and dx are (N, S*kh*kw, C); each tile element goes to
// the element of its window that MaxPoolGrad picks from X, and through the Relu (X > 0)
// when p.relu; the window's other elements get zero. Windows tile X, so every element of
// dX is written once.
template <typename T, int POOL>
__global__ void dropout_grad_nhwc_out_kernel(const T *__restrict__ dy, const uint8_t *__restrict__ mask,
                                             const T *__restrict__ x, T *__restrict__ dx, int64_t N, int64_t C,
                                             int64_t S, Pool p, const void *ratio_p, int ratio_dt,
                                             const uint8_t *train_p, kiln_cuda_flag *flag) {
    __shared__ T tile[TILE][TILE + 1];
    const double ratio = read_ratio(ratio_p, ratio_dt);
    const bool train = train_p && *train_p;
    const bool bad = train && !(ratio >= 0 && ratio < 1); /* dX zero, the flag raised */
    if (bad && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0 &&
        atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_DROPOUT_RATIO) == 0)
        flag->value = (long long)(ratio * 1e6);
    const double scale = 1.0 / (1.0 - ratio);
    const float sf = (float)scale;
    /* indices as in the first version: stepping them per row as the forward kernel
     * does, with the rows unrolled, made this kernel ~1.2 us slower in f16 (12.2 against
     * 11.0 us; bench/NOTES.md, v1.8), unlike the forward (11.1 -> 9.9 us) */
    const int64_t s0 = (int64_t)blockIdx.x * TILE, c0 = (int64_t)blockIdx.y * TILE;
    const int64_t per_image = S * C * (POOL ? pool_kh<POOL>(p) * pool_kw<POOL>(p) : 1);
    for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
        for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
            const int64_t c = c0 + k, s = s0 + threadIdx.x;
            if (c >= C || s >= S) continue;
            const int64_t i = (n * C + c) * S + s;
            T v = dy[i];
            if (bad) v = from_f<T>(0.f);
            else if (train) v = from_f<T>(dropout_grad_one<T>(to_f(v), mask[i], scale, sf));
            tile[k][threadIdx.x] = v;
        }
        __syncthreads();
        T *dxn = dx + n * per_image;
        for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
            const int64_t s = s0 + k, c = c0 + threadIdx.x;
            if (s >= S || c >= C) continue;
            if constexpr (POOL != 0)
                window_scatter<T, POOL>(x + n * per_image, dxn, p, (int)s, (int)C, (int)c, tile[threadIdx.x][k]);
            else
                dxn[s * C + c] = tile[threadIdx.x][k];
        }
        __syncthreads();
    }
}

/* pool.kh == 0: plain kiln.DropoutGrad (x unused). */
template <typename T>
kiln_status launch_dropout_grad_nhwc_out(kiln_cuda *cu, kiln_context *ctx, const void *dy, const uint8_t *mask,
                                         const void *x, void *dx, int64_t N, int64_t C, int64_t S, Pool pool,
                                         const void *ratio, int ratio_dt, const uint8_t *train) {
    if (N == 0 || C == 0 || S == 0) return KILN_OK;
    dim3 grid;
    const kiln_status st = tile_grid(ctx, pool.kh ? "kiln.MaxPoolDropoutGrad" : "kiln.DropoutGrad", N, C, S, pool.kh ? pool.kh * pool.kw : 1,
                                     &grid);
    if (st) return st;
    const dim3 block(TILE, TILE_ROWS);
    if (pool.kh == 2 && pool.kw == 2)
        dropout_grad_nhwc_out_kernel<T, 2><<<grid, block, 0, cu->stream>>>(
            (const T *)dy, mask, (const T *)x, (T *)dx, N, C, S, pool, ratio, ratio_dt, train, cu->flag);
    else if (pool.kh)
        dropout_grad_nhwc_out_kernel<T, 1><<<grid, block, 0, cu->stream>>>(
            (const T *)dy, mask, (const T *)x, (T *)dx, N, C, S, pool, ratio, ratio_dt, train, cu->flag);
    else
        dropout_grad_nhwc_out_kernel<T, 0><<<grid, block, 0, cu->stream>>>(
            (const T *)dy, mask, (const T *)x, (T *)dx, N, C, S, pool, ratio, ratio_dt, train, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "dropout_grad_nhwc_out_kernel");
    return KILN_OK;
}

__global__ void rng_set_kernel(uint64_t *seed, uint64_t value) { *seed = value; }

__global__ void rng_next_kernel(uint64_t *seed, uint64_t base, int64_t *counter) {
    const int64_t k = *counter;
    *seed = base + (uint64_t)k;
    *counter = k + 1;
}

bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }

bool nhwc4(const kiln_tensor *t) { return t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }

/* What the host knows of a Dropout or kiln.MaxPoolDropout node (ratio input 1, training_mode
 * input 2; the mask stream keyed by the node's seed attribute and first output). */
DropoutArgs dropout_args(kiln_cuda *cu, const kiln_op_ctx *c, bool legacy) {
    DropoutArgs a;
    memset(&a, 0, sizeof a);
    a.legacy = legacy;
    if (present(c, 1)) {
        a.ratio = c->in[1]->data;
        a.ratio_dt = c->in[1]->dtype;
    }
    if (present(c, 2)) a.train = (const uint8_t *)c->in[2]->data;
    const kiln_attr *sa = kiln_node_attr(c->node, "seed");
    if (sa) {
        a.has_attr_seed = true;
        a.attr_mix = mix64((uint64_t)sa->i + GOLDEN);
    }
    if (c->node->out && c->node->n_out > 0) {
        a.has_out = true;
        a.out0 = (uint64_t)c->node->out[0];
    }
    a.seed = cu->rng_seed;
    return a;
}

/* The pool of a fused node from X's dims and the pooled dims (table.c checked the
 * windows: kernel == strides, no padding, dilations 1, H and W multiples of the kernel). */
Pool pool_of(const kiln_tensor *x, const kiln_tensor *pooled, bool relu) {
    Pool p;
    p.kh = (int)(x->dims[2] / pooled->dims[2]);
    p.kw = (int)(x->dims[3] / pooled->dims[3]);
    p.ow_count = (int)pooled->dims[3];
    p.relu = relu;
    return p;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_dropout(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    uint8_t *mask = c->n_out > 1 && c->out[1] ? (uint8_t *)c->out[1]->data : nullptr;
    const DropoutArgs a = dropout_args(cu, c, c->node->opset < 12);
    kiln_status st;
    if (nhwc4(x) && !nhwc4(y)) { /* Y and the mask NCHW (kiln_cuda_supports checked the mask) */
        const Pool none = {0, 0, 0, false};
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_dropout_nhwc_in, cu, c->kctx, x->data, y->data, mask,
                               x->dims[0], x->dims[1], x->dims[2] * x->dims[3], none, a);
        return st;
    }
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_dropout, cu, c->kctx, x->data, y->data, mask,
                           kiln_tensor_numel(x), a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_dropout_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *mask = c->in[1];
    kiln_tensor *dx = c->out[0];
    kiln_status st;
    if (nhwc4(dx)) { /* dY and the mask NCHW, relu = 0 (kiln_cuda_supports checked) */
        const Pool none = {0, 0, 0, false};
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, dy->dtype, launch_dropout_grad_nhwc_out, cu, c->kctx, dy->data,
                               (const uint8_t *)mask->data, nullptr, dx->data, dx->dims[0], dx->dims[1],
                               dx->dims[2] * dx->dims[3], none, present(c, 2) ? c->in[2]->data : nullptr,
                               present(c, 2) ? (int)c->in[2]->dtype : 0,
                               present(c, 3) ? (const uint8_t *)c->in[3]->data : nullptr);
        return st;
    }
    /* relu = 1: Y is input 4, NCHW like the rest (kiln_cuda_supports checked) */
    const void *y = kiln_attr_int(c->node, "relu", 0) != 0 && present(c, 4) ? c->in[4]->data : nullptr;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dy->dtype, launch_dropout_grad, cu, c->kctx, dy->data,
                           (const uint8_t *)mask->data, y, c->out[0]->data, kiln_tensor_numel(dy),
                           present(c, 2) ? c->in[2]->data : nullptr,
                           present(c, 2) ? (int)c->in[2]->dtype : 0,
                           present(c, 3) ? (const uint8_t *)c->in[3]->data : nullptr);
    return st;
}

/* kiln.MaxPoolDropout(X, ratio?, training_mode?) -> Y, mask?: X NHWC, Y and the mask NCHW. */
extern "C" kiln_status kiln_cuda_k_maxpool_dropout(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    uint8_t *mask = c->n_out > 1 && c->out[1] ? (uint8_t *)c->out[1]->data : nullptr;
    const DropoutArgs a = dropout_args(cu, c, false);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_dropout_nhwc_in, cu, c->kctx, x->data, y->data, mask,
                           y->dims[0], y->dims[1], y->dims[2] * y->dims[3], pool_of(x, y, false), a);
    return st;
}

/* kiln.MaxPoolDropoutGrad(dY, X, mask, ratio?, training_mode?) -> dX: dY and the mask NCHW,
 * X and dX NHWC. */
extern "C" kiln_status kiln_cuda_k_maxpool_dropout_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1], *mask = c->in[2];
    kiln_tensor *dx = c->out[0];
    const bool relu = kiln_attr_int(c->node, "relu", 0) != 0;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dy->dtype, launch_dropout_grad_nhwc_out, cu, c->kctx, dy->data,
                           (const uint8_t *)mask->data, x->data, dx->data, dy->dims[0], dy->dims[1],
                           dy->dims[2] * dy->dims[3], pool_of(x, dy, relu), present(c, 3) ? c->in[3]->data : nullptr,
                           present(c, 3) ? (int)c->in[3]->dtype : 0,
                           present(c, 4) ? (const uint8_t *)c->in[4]->data : nullptr);
    return st;
}

extern "C" uint64_t *kiln_cuda_rng_seed(kiln_cuda *cu) { return cu->rng_seed; }

extern "C" kiln_status kiln_cuda_rng_set(kiln_cuda *cu, uint64_t seed) {
    KILN_CUDA_CHECK(cu->ctx, cudaSetDevice(cu->device));
    rng_set_kernel<<<1, 1, 0, cu->stream>>>(cu->rng_seed, seed);
    KILN_CUDA_LAUNCHED(cu->ctx, "rng_set_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_rng_next(kiln_cuda *cu, uint64_t base, int64_t *counter) {
    if (!counter) return kiln_fail(cu->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_rng_next: counter is NULL");
    KILN_CUDA_CHECK(cu->ctx, cudaSetDevice(cu->device));
    rng_next_kernel<<<1, 1, 0, cu->stream>>>(cu->rng_seed, base, counter);
    KILN_CUDA_LAUNCHED(cu->ctx, "rng_next_kernel");
    return KILN_OK;
}
