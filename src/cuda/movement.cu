/*
 * movement.cu — data movement on the device. These ops never look at values, so they
 * take every dtype as opaque elements of 1, 2, 4 or 8 bytes (bool included).
 *
 *   Flatten / Reshape / Identity / Squeeze / Unsqueeze (and Dropout at inference): one
 *     device-to-device copy, or nothing when the planner made the output share the
 *     input's storage.
 *   Concat along `axis`: the output viewed as (outer, dims[axis] * inner); each input is
 *     one strided 2-D copy (cudaMemcpy2DAsync) into its column block. NHWC (4-D, the
 *     parts NHWC or with the same bytes in both layouts): along the channels, one kernel
 *     for up to 12 parts, each a (pixels, channels) block at the whole's pixel stride, in
 *     16-byte units where sizes and addresses allow (a DenseNet layer's 32 f16 channels:
 *     4 units per pixel); along another axis the 2-D copies over the physical dims. Split,
 *     kiln.ConcatGrad and kiln.SplitGrad cut the same blocks (kiln_cuda_axis_blocks).
 *   Transpose (perm, default reversed): size-1 dims dropped and runs of input dims that
 *     stay adjacent in the output merged on the host, then one thread per output element
 *     computes its input offset from the merged dims (in 16-byte units where the innermost
 *     dim is contiguous on both sides); where the output's innermost dim is not the input's,
 *     shared-memory tiles (perm_tile.h). 4-D inputs and outputs in either layout (NHWC read
 *     at its strides, written in its order).
 *   kiln.RowGather (src/ops/row_gather.h: pad and roll, view, permute, view, roll and crop,
 *     the innermost dim never moving): one thread per 16-byte unit of an output row (or the
 *     row's widest unit), which decodes its row back through the stages that move anything
 *     (FastDiv where indices fit 32 bits) to an input row or a row of zeros. X's bytes are
 *     read as X' and Y's written as Y' (in_nhwc / out_nhwc: an NHWC tensor's bytes).
 *   kiln.ChannelShuffle (groups g): output channel a * g + b is input channel b * C/g + a;
 *     one thread per output element, NCHW (planes) or NHWC (within each pixel).
 *   Gather along `axis` with int32 or int64 indices: data viewed as (outer, dim, inner),
 *     output as (outer, n, inner). Negative indices count from the end. An index outside
 *     [-dim, dim) zeroes its output elements and raises the device error flag, which the
 *     next kiln_cuda_sync reports (the CPU reference rejects it before writing anything).
 *
 *   kiln.ToNHWC / kiln.ToNCHW: a batch of 2-D transposes, (N, C, H*W) <-> (N, H*W, C). A
 *     pixel's channels up to 64 bytes (a network's 3- or 8-channel input): one thread per
 *     pixel, its channels as 16-byte vectors where sizes and alignment allow, its planes
 *     read (or written) at neighbouring addresses by neighbouring threads. Wider: without a
 *     dtype change or zero channels, Transpose's vectorized tiles (perm_tile.h); else 32x32
 *     shared-memory tiles so that reads and writes are both coalesced. A plain copy when
 *     C == 1 or H*W == 1 (the bytes are the same in both layouts). ToNHWC's `to` (among
 *     f32, f16, bf16; Cast's rounding) and `zero_channels` happen on the way, in the same
 *     pass.
 *
 *   Helpers for conv.c: zero padding of an NCHW or NHWC tensor, and its inverse (the
 *   interior of a padded NCHW tensor); the first channels of a channel-padded input and
 *   its weights (narrow.h).
 */
#include "dtype.cuh"
#include "fast_div.cuh"
#include "../ops/channel_gather.h"
#include "narrow.h"
#include "perm_tile.h"
#include "row_unit.h"

extern "C" {
#include "../ops/roll.h"
#include "../ops/row_gather.h"
}

#include <string.h>
#include <type_traits>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* ------------------------------------------------------------------ transpose */

struct TransposeArgs {
    int nd;
    int64_t dims[KILN_MAX_DIMS];   /* output dims (merged) */
    int64_t stride[KILN_MAX_DIMS]; /* input element stride of each output dim */
};

// E: an unsigned integer type of the element size
template <typename E> __global__ void transpose_kernel(const E *x, E *y, int64_t n, TransposeArgs a) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        int64_t r = i, off = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            off += (r % a.dims[d]) * a.stride[d];
            r /= a.dims[d];
        }
        y[i] = x[off];
    }
}

template <typename E>
kiln_status launch_transpose(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t n,
                             const TransposeArgs &a) {
    transpose_kernel<E><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)x, (E *)y, n, a);
    KILN_CUDA_LAUNCHED(ctx, "transpose_kernel");
    return KILN_OK;
}

/* A permutation through shared-memory tiles (perm_tile.h): block (bx, ay) moves the tile of
 * B-run elements [bx * T, +T) by A-run elements [ay * T, +T) of each tile pair z, z +
 * gridDim.z, ...: read along b (contiguous in X), written along a (contiguous in Y), 256
 * threads as T columns by 256 / T rows, each moving T * T / 256 elements (all its loads
 * issued before the first store: the loops unroll). The runs' offsets are worked out once
 * per block and each tile pair's by one thread, into shared memory (64-bit divisions per
 * element would cost more than the bytes). Rows padded to a 4-byte bank's worth beyond
 * the tile, so a column of 1- or 2-byte elements falls in distinct banks. */
template <typename E, int T> __global__ void __launch_bounds__(256) perm_tile_kernel(const E *__restrict__ x, E *__restrict__ y, kiln_perm_tile t) {
    constexpr int ROWS = 256 / T, PAD = sizeof(E) >= 4 ? 1 : 4 / (int)sizeof(E);
    __shared__ E tile[T][T + PAD];
    __shared__ int64_t s_in_a[T], s_out_b[T], s_base[2];
    const int64_t a0 = (int64_t)blockIdx.y * T, b0 = (int64_t)blockIdx.x * T;
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, lin = ty * T + tx;
    if (lin < T) s_in_a[lin] = a0 + lin < t.A ? kiln_perm_tile_in_a(&t, a0 + lin) : 0;
    else if (lin < 2 * T) s_out_b[lin - T] = b0 + lin - T < t.B ? kiln_perm_tile_out_b(&t, b0 + lin - T) : 0;
    const bool b_in = b0 + tx < t.B, a_in = a0 + tx < t.A; /* this thread's column, reading / writing */
    for (int64_t o = blockIdx.z; o < t.outer; o += gridDim.z) {
        if (lin == 0) kiln_perm_tile_outer(&t, o, &s_base[0], &s_base[1]);
        __syncthreads();
        const E *xb = x + s_base[0] + b0 + tx;
        E *yb = y + s_base[1] + a0 + tx;
#pragma unroll
        for (int i = 0; i < T / ROWS; i++) {
            const int k = ty + i * ROWS;
            if (b_in && a0 + k < t.A) tile[k][tx] = xb[s_in_a[k]];
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < T / ROWS; i++) {
            const int k = ty + i * ROWS;
            if (a_in && b0 + k < t.B) yb[s_out_b[k]] = tile[tx][k];
        }
        __syncthreads();
    }
}

/* Offsets in index type I (32-bit where the tensor fits): element i of a run, and tile
 * pair o's input and output bases (perm_tile.h's kiln_perm_tile_run / _outer). */
template <typename I> __device__ __forceinline__ I pt_run(const int64_t *size, const int64_t *stride, int n, I i) {
    I off = 0;
    for (int k = 0; k < n; k++) {
        const I sz = (I)size[k], q = i / sz;
        off += (i - q * sz) * (I)stride[k];
        i = q;
    }
    return off;
}

template <typename I> __device__ __forceinline__ void pt_outer(const kiln_perm_tile &t, I o, I *in, I *out) {
    I i = 0, j = 0;
    for (int d = t.no - 1; d >= 0; d--) {
        const I sz = (I)t.osize[d], q = o / sz, k = o - q * sz;
        o = q;
        i += k * (I)t.oin[d];
        j += k * (I)t.oout[d];
    }
    *in = i;
    *out = j;
}

template <int BYTES> struct VecOf;
template <> struct VecOf<16> { using T = uint4; };
template <> struct VecOf<8> { using T = uint2; };
template <> struct VecOf<4> { using T = uint32_t; };

/* perm_tile_kernel's tile with the reads in VEC-element vectors (16, 8 or 4 bytes) along the
 * B run and TB = 256 bytes of it per tile: TA x TB elements, read as TB / VEC vector columns
 * by 256 / (TB / VEC) rows, written as TA columns by 256 / TA rows. Every thread computes
 * the pair's bases itself (no serial step between barriers), in 32-bit indices where the
 * tensor fits. bench/perm_bench.cu measured this shape (64 x 128 f16, 16-byte loads) at the
 * copy's bandwidth on [256, 64, 3136] (2,610 GB/s) where perm_tile_kernel's 64 x 64 tiles of
 * single elements moved maxvit_t's partitions at 490-670 GB/s. Needs (launch_perm_tile
 * checks): B a multiple of VEC, every input offset of a tile row (A run strides, the outer
 * dims' input strides, x) a multiple of VEC elements. */
template <typename E, int TA, int TB, int VEC, typename I>
__global__ void __launch_bounds__(256)
    perm_tile_vec_kernel(const E *__restrict__ x, E *__restrict__ y, kiln_perm_tile t) {
    using V = typename VecOf<VEC * (int)sizeof(E)>::T;
    constexpr int RC = TB / VEC, RR = 256 / RC, WR = 256 / TA, PAD = sizeof(E) >= 4 ? 1 : 4 / (int)sizeof(E);
    static_assert(256 % RC == 0 && TA % RR == 0 && 256 % TA == 0 && TB % WR == 0, "tile shape");
    __shared__ E tile[TA][TB + PAD];
    __shared__ I s_in_a[TA], s_out_b[TB];
    const I A = (I)t.A, B = (I)t.B, a0 = (I)blockIdx.y * TA, b0 = (I)blockIdx.x * TB;
    const int tid = (int)threadIdx.x;
    if (tid < TA) s_in_a[tid] = a0 + tid < A ? pt_run<I>(t.asize, t.ain, t.na, a0 + tid) : 0;
    if (tid >= 256 - TB) {
        const int k = tid - (256 - TB);
        s_out_b[k] = b0 + k < B ? pt_run<I>(t.bsize, t.bout, t.nb, b0 + k) : 0;
    }
    const int rc = tid % RC, rr = tid / RC, wc = tid % TA, wr = tid / TA;
    const I b = b0 + (I)rc * VEC;
    for (I o = blockIdx.z; o < (I)t.outer; o += gridDim.z) {
        I bin, bout;
        pt_outer<I>(t, o, &bin, &bout);
        __syncthreads(); /* the tables (first pass); the last pass's reads of the tile */
        if (b < B) {
#pragma unroll
            for (int r = rr; r < TA; r += RR)
                if (a0 + r < A) {
                    const V v = *reinterpret_cast<const V *>(x + bin + s_in_a[r] + b);
                    const E *e = reinterpret_cast<const E *>(&v);
#pragma unroll
                    for (int k = 0; k < VEC; k++) tile[r][rc * VEC + k] = e[k];
                }
        }
        __syncthreads();
        if (a0 + wc < A) {
            E *yb = y + bout + a0 + wc;
#pragma unroll
            for (int r = wr; r < TB; r += WR)
                if (b0 + r < B) yb[s_out_b[r]] = tile[wc][r];
        }
    }
}

template <typename E, int TA, int TB, int VEC>
void launch_pt_vec(kiln_cuda *cu, const void *x, void *y, const kiln_perm_tile &t, bool small) {
    const int64_t gx = (t.B + TB - 1) / TB, gy = (t.A + TA - 1) / TA, gz = t.outer < 65535 ? t.outer : 65535;
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz);
    if (small) perm_tile_vec_kernel<E, TA, TB, VEC, uint32_t><<<grid, 256, 0, cu->stream>>>((const E *)x, (E *)y, t);
    else perm_tile_vec_kernel<E, TA, TB, VEC, int64_t><<<grid, 256, 0, cu->stream>>>((const E *)x, (E *)y, t);
}

/* Tiles of 256-byte rows of B (wide), or 128-byte ones where the B run is shorter. */
template <typename E, int TA, int VEC>
void launch_pt_vec_rows(kiln_cuda *cu, const void *x, void *y, const kiln_perm_tile &t, bool small, bool wide) {
    constexpr int TB = 256 / (int)sizeof(E);
    if (wide) launch_pt_vec<E, TA, TB, VEC>(cu, x, y, t, small);
    else launch_pt_vec<E, TA, TB / 2, VEC>(cu, x, y, t, small);
}

/* The widest vector (elements, 16 bytes at most) the tile rows' input offsets allow: 1 when
 * none of 2 or more does. */
static int perm_tile_vec(const void *x, size_t es, const kiln_perm_tile &t) {
    for (int v = (int)(16 / es); v >= 2; v /= 2) {
        bool ok = (uintptr_t)x % ((size_t)v * es) == 0 && t.B % v == 0;
        for (int k = 0; k < t.na && ok; k++) ok = t.ain[k] % v == 0;
        for (int d = 0; d < t.no && ok; d++) ok = t.oin[d] % v == 0;
        if (ok) return v;
    }
    return 1;
}

template <typename E>
kiln_status launch_perm_tile(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, const kiln_perm_tile &t) {
    const int T = t.side;
    const int vec = sizeof(E) == 2 || sizeof(E) == 4 ? perm_tile_vec(x, sizeof(E), t) : 1;
    if (vec > 1 && cu->perm_tile_vec) {
        const bool small = t.A * t.B * t.outer < ((int64_t)1 << 31);
        const bool wide = t.B >= (int64_t)(256 / sizeof(E)); /* a whole 256-byte tile row of B */
        if constexpr (sizeof(E) == 2) {
            if (T == 64) {
                if (vec == 8) launch_pt_vec_rows<E, 64, 8>(cu, x, y, t, small, wide);
                else if (vec == 4) launch_pt_vec_rows<E, 64, 4>(cu, x, y, t, small, wide);
                else launch_pt_vec_rows<E, 64, 2>(cu, x, y, t, small, wide);
                KILN_CUDA_LAUNCHED(ctx, "perm_tile_vec_kernel");
                return KILN_OK;
            }
        }
        if constexpr (sizeof(E) == 4) {
            if (T == 32) {
                if (vec == 4) launch_pt_vec_rows<E, 32, 4>(cu, x, y, t, small, wide);
                else launch_pt_vec_rows<E, 32, 2>(cu, x, y, t, small, wide);
                KILN_CUDA_LAUNCHED(ctx, "perm_tile_vec_kernel");
                return KILN_OK;
            }
        }
    }
    const int64_t gx = (t.B + T - 1) / T, gy = (t.A + T - 1) / T, gz = t.outer < 65535 ? t.outer : 65535;
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz), block((unsigned)T, (unsigned)(256 / T));
    if (T == 64) perm_tile_kernel<E, 64><<<grid, block, 0, cu->stream>>>((const E *)x, (E *)y, t);
    else perm_tile_kernel<E, 32><<<grid, block, 0, cu->stream>>>((const E *)x, (E *)y, t);
    KILN_CUDA_LAUNCHED(ctx, "perm_tile_kernel");
    return KILN_OK;
}

/* ------------------------------------------------- channel blocks of NHWC tensors */

/* Concat / Split / ConcatGrad / SplitGrad along the channels of NHWC tensors: each part is
 * a (P pixels, cb units) block whose rows sit at a pixel stride in the source and another
 * in the destination (src / dst already offset to the part's first channel). One launch
 * for up to MAX_CHAN_PARTS parts (blockIdx.y: the part); units of 16, 8, 4, 2 or 1 bytes,
 * the widest that every size, stride and address allows. A NULL src zero-fills. */
constexpr int MAX_CHAN_PARTS = 12;

struct ChanPart {
    const void *src;
    void *dst;
    int64_t cb, s_stride, d_stride; /* units */
};

struct ChanParts {
    int64_t pixels;
    ChanPart p[MAX_CHAN_PARTS];
};

template <typename U, typename I> __global__ void channel_blocks_kernel(ChanParts a) {
    const ChanPart q = a.p[blockIdx.y];
    const I cb = (I)q.cb, total = (I)(a.pixels * q.cb);
    const U *s = (const U *)q.src;
    U *d = (U *)q.dst;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I px = i / cb, c = i - px * cb;
        U v{};
        if (s) v = s[(int64_t)px * q.s_stride + c];
        d[(int64_t)px * q.d_stride + c] = v;
    }
}

template <typename U>
kiln_status launch_channel_blocks(kiln_cuda *cu, kiln_context *ctx, const ChanParts &a, int n, int64_t max_total) {
    const unsigned bx = kiln_cuda_blocks(cu, max_total, THREADS);
    const dim3 grid(bx, (unsigned)n);
    if (max_total < ((int64_t)1 << 31))
        channel_blocks_kernel<U, uint32_t><<<grid, THREADS, 0, cu->stream>>>(a);
    else
        channel_blocks_kernel<U, int64_t><<<grid, THREADS, 0, cu->stream>>>(a);
    KILN_CUDA_LAUNCHED(ctx, "channel_blocks_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ channel shuffle */

/* kiln.ChannelShuffle: output channel c = a * g + b reads input channel b * k + a (k = C/g),
 * within each pixel's C channels (NHWC) or as whole planes of S pixels (NCHW). */
template <typename E, typename I>
__global__ void channel_shuffle_kernel(const E *x, E *y, I total, I C, I g, I k, I S, bool nhwc) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I c, base;
        if (nhwc) {
            c = i % C;
            base = i - c;
            const I src = (c % g) * k + c / g;
            y[i] = x[base + src];
        } else {
            const I s = i % S, nc = i / S;
            c = nc % C;
            base = (nc - c) * S + s;
            const I src = (c % g) * k + c / g;
            y[i] = x[base + src * S];
        }
    }
}

template <typename E>
kiln_status launch_channel_shuffle(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t total, int64_t C,
                                   int64_t g, int64_t S, bool nhwc) {
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    if (total < ((int64_t)1 << 31))
        channel_shuffle_kernel<E, uint32_t><<<blocks, THREADS, 0, cu->stream>>>(
            (const E *)x, (E *)y, (uint32_t)total, (uint32_t)C, (uint32_t)g, (uint32_t)(C / g), (uint32_t)S, nhwc);
    else
        channel_shuffle_kernel<E, int64_t><<<blocks, THREADS, 0, cu->stream>>>((const E *)x, (E *)y, total, C, g, C / g,
                                                                            S, nhwc);
    KILN_CUDA_LAUNCHED(ctx, "channel_shuffle_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ channel gather */

/* kiln.ChannelGather: output j's channel c is map[off[j] + c] (input * SHIFT + channel, or
 * -1: zero), every input and output in one layout. The map travels as the kernel's
 * parameter (at most KILN_CHANNEL_GATHER_MAX_MAP entries, 12 KB) and is copied to shared
 * memory per block, so that lanes reading different entries do not serialize on the
 * constant cache; blockIdx.y is the output. A thread per output element, in the output's
 * storage order (coalesced writes; a pixel's reads fall in the inputs' same pixels). */
struct GatherArgs {
    const void *x[KILN_CHANNEL_GATHER_MAX_IO];
    void *y[KILN_CHANNEL_GATHER_MAX_IO];
    int cin[KILN_CHANNEL_GATHER_MAX_IO], cout[KILN_CHANNEL_GATHER_MAX_IO], off[KILN_CHANNEL_GATHER_MAX_IO];
    long long n, s; /* batch; pixels per image (H * W) */
    int map[KILN_CHANNEL_GATHER_MAX_MAP];
};

template <typename E, typename I>
__global__ void channel_gather_kernel(const __grid_constant__ GatherArgs a, bool nhwc) {
    __shared__ int smap[KILN_CHANNEL_GATHER_MAX_MAP];
    __shared__ const E *sx[KILN_CHANNEL_GATHER_MAX_IO];
    __shared__ int scin[KILN_CHANNEL_GATHER_MAX_IO];
    const int j = (int)blockIdx.y, C = a.cout[j];
    for (int k = (int)threadIdx.x; k < C; k += (int)blockDim.x) smap[k] = a.map[a.off[j] + k];
    if (threadIdx.x < KILN_CHANNEL_GATHER_MAX_IO) {
        sx[threadIdx.x] = (const E *)a.x[threadIdx.x];
        scin[threadIdx.x] = a.cin[threadIdx.x];
    }
    __syncthreads();
    E *y = (E *)a.y[j];
    const I S = (I)a.s, total = (I)a.n * (I)C * S;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I c, p, n = 0, px = 0;
        if (nhwc) {
            p = i / (I)C; /* the pixel (n, h, w) */
            c = i - p * (I)C;
        } else {
            px = i % S;
            const I nc = i / S;
            n = nc / (I)C;
            c = nc - n * (I)C;
            p = 0;
        }
        const int e = smap[c];
        E v{};
        if (e >= 0) {
            const int src = e / KILN_CHANNEL_GATHER_SHIFT, ch = e % KILN_CHANNEL_GATHER_SHIFT;
            const I cin = (I)scin[src];
            v = nhwc ? sx[src][p * cin + (I)ch] : sx[src][(n * cin + (I)ch) * S + px];
        }
        y[i] = v;
    }
}

/* Bytes [off, off + len) of src to dst (shared memory), by the block: 16-byte units where
 * both ends and the pointers allow, else 4-byte, else single bytes. */
__device__ __forceinline__ void block_copy(char *dst, const char *src, size_t len) {
    const int t = (int)threadIdx.x, nt = (int)blockDim.x;
    if (((uintptr_t)src | (uintptr_t)dst | len) % 16 == 0) {
        for (size_t i = t; i < len / 16; i += nt)
            reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(src)[i];
    } else if (((uintptr_t)src | (uintptr_t)dst | len) % 4 == 0) {
        for (size_t i = t; i < len / 4; i += nt)
            reinterpret_cast<uint32_t *>(dst)[i] = reinterpret_cast<const uint32_t *>(src)[i];
    } else {
        for (size_t i = t; i < len; i += nt) dst[i] = src[i];
    }
}

/* NHWC: a block stages P pixels of every input in shared memory (their channels are one
 * contiguous run per input: one vector copy each), then writes each output's P pixels, also
 * one contiguous run, in 16-byte vectors of elements picked from the staged pixels (or single
 * elements where the run is not 16-byte aligned). Reads and writes both full-width: the
 * element-wise kernel above moved ShuffleNet's boundaries at ~1,000 GB/s. dev/channel_gather_sim.py
 * transcribes its loops and index math into Python and checks them against the op. */
template <typename E>
__global__ void __launch_bounds__(256) channel_gather_nhwc_kernel(const __grid_constant__ GatherArgs a, int P, int n_in,
                                                                   int n_out) {
    extern __shared__ __align__(16) unsigned char gather_smem[];
    __shared__ int smap[KILN_CHANNEL_GATHER_MAX_MAP];
    __shared__ int sbase[KILN_CHANNEL_GATHER_MAX_IO];
    const int nm = a.off[n_out - 1] + a.cout[n_out - 1];
    for (int k = (int)threadIdx.x; k < nm; k += (int)blockDim.x) smap[k] = a.map[k];
    if (threadIdx.x == 0) { /* each input's staged pixels: [P][cin] at element offset sbase */
        int at = 0;
        for (int i = 0; i < KILN_CHANNEL_GATHER_MAX_IO; i++) {
            sbase[i] = at;
            at += P * a.cin[i];
        }
    }
    E *stage = reinterpret_cast<E *>(gather_smem);
    const long long pixels = a.n * a.s;
    for (long long p0 = (long long)blockIdx.x * P; p0 < pixels; p0 += (long long)gridDim.x * P) {
        const int np = (int)(pixels - p0 < P ? pixels - p0 : P);
        __syncthreads(); /* smap, sbase; the last tile's reads of the stage */
        for (int i = 0; i < n_in; i++)
            block_copy(reinterpret_cast<char *>(stage + sbase[i]),
                       reinterpret_cast<const char *>((const E *)a.x[i] + p0 * a.cin[i]),
                       (size_t)np * a.cin[i] * sizeof(E));
        __syncthreads();
        for (int j = 0; j < n_out; j++) {
            const int C = a.cout[j], len = np * C;
            E *y = (E *)a.y[j] + p0 * C;
            const int *mj = smap + a.off[j];
            constexpr int VE = 16 / (int)sizeof(E);
            const bool vec = ((uintptr_t)y | (size_t)len * sizeof(E)) % 16 == 0;
            for (int q = (int)threadIdx.x * (vec ? VE : 1); q < len; q += (int)blockDim.x * (vec ? VE : 1)) {
                alignas(16) E v[VE];
                const int cnt = vec ? VE : 1;
                int px = q / C, c = q - px * C;
                for (int k = 0; k < cnt; k++) {
                    const int e = mj[c], src = e / KILN_CHANNEL_GATHER_SHIFT;
                    v[k] = e < 0 ? E{} : stage[sbase[src] + px * a.cin[src] + e % KILN_CHANNEL_GATHER_SHIFT];
                    if (++c == C) c = 0, px++;
                }
                if (vec) *reinterpret_cast<uint4 *>(y + q) = *reinterpret_cast<const uint4 *>(v);
                else y[q] = v[0];
            }
        }
    }
}

/* Pixels a block stages: what 32 KB of shared memory holds of every input's channels, at most
 * 64, a multiple of 8 from 8 up (tiles then start 16-byte aligned); 0: not one pixel fits. */
static int gather_pixels(const GatherArgs &a, size_t es, int *cin_total) {
    int ct = 0;
    for (int i = 0; i < KILN_CHANNEL_GATHER_MAX_IO; i++) ct += a.cin[i];
    *cin_total = ct;
    int p = ct > 0 ? (int)((32 * 1024) / ((size_t)ct * es)) : 0;
    p = p < 64 ? p : 64;
    return p >= 8 ? p / 8 * 8 : p;
}

template <typename E>
kiln_status launch_channel_gather(kiln_cuda *cu, kiln_context *ctx, const GatherArgs &a, int n_in, int n_out,
                                  int64_t max_total, bool nhwc) {
    int cin_total = 0;
    const int P = nhwc ? gather_pixels(a, sizeof(E), &cin_total) : 0;
    if (P > 0 && cu->gather_staged) {
        const int64_t tiles = (a.n * a.s + P - 1) / P;
        const size_t smem = (size_t)P * (size_t)cin_total * sizeof(E);
        channel_gather_nhwc_kernel<E><<<kiln_cuda_blocks(cu, tiles * THREADS, THREADS), THREADS, smem, cu->stream>>>(
            a, P, n_in, n_out);
        KILN_CUDA_LAUNCHED(ctx, "channel_gather_nhwc_kernel");
        return KILN_OK;
    }
    const dim3 grid(kiln_cuda_blocks(cu, max_total, THREADS), (unsigned)n_out);
    if (max_total < ((int64_t)1 << 31))
        channel_gather_kernel<E, uint32_t><<<grid, THREADS, 0, cu->stream>>>(a, nhwc);
    else
        channel_gather_kernel<E, int64_t><<<grid, THREADS, 0, cu->stream>>>(a, nhwc);
    KILN_CUDA_LAUNCHED(ctx, "channel_gather_kernel");
    return KILN_OK;
}

/* ----------------------------------------------------------------------- roll */

/* kiln.Roll in storage order: nd outer dims (rolled or not) over rows of `inner` units
 * (the trailing dims that are not rolled, in units of U); output unit i = (o, r) reads
 * unit (src(o), r), src(o) moving each outer coordinate back by its shift. */
struct RollArgs {
    int nd;
    long long dims[KILN_MAX_DIMS], shift[KILN_MAX_DIMS];
    long long inner, total;
};

template <typename U, typename I> __global__ void roll_kernel(const U *x, U *y, RollArgs a) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)a.total; i += (I)gridDim.x * blockDim.x) {
        const I r = i % (I)a.inner;
        I o = i / (I)a.inner, src = 0, mul = 1;
        for (int d = a.nd - 1; d >= 0; d--) {
            const I n = (I)a.dims[d], c = o % n;
            o /= n;
            I sc = c + n - (I)a.shift[d]; /* shift in [0, n) */
            if (sc >= n) sc -= n;
            src += sc * mul;
            mul *= n;
        }
        y[i] = x[src * (I)a.inner + r];
    }
}

template <typename U> kiln_status launch_roll(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, RollArgs a) {
    const unsigned blocks = kiln_cuda_blocks(cu, a.total, THREADS);
    if (a.total < ((long long)1 << 31))
        roll_kernel<U, uint32_t><<<blocks, THREADS, 0, cu->stream>>>((const U *)x, (U *)y, a);
    else
        roll_kernel<U, int64_t><<<blocks, THREADS, 0, cu->stream>>>((const U *)x, (U *)y, a);
    KILN_CUDA_LAUNCHED(ctx, "roll_kernel");
    return KILN_OK;
}

/* ----------------------------------------------------------------- row gather */

/* kiln.RowGather (src/ops/row_gather.h's stages) in units of U, the row's widest unit:
 * unit i = (row r, unit u of it); r runs back through the crop and roll of W, the
 * permutation of V, and the roll and pad of S to an input row, or to none (zeros). The
 * row is every stage's last dim, so only the outer dims are decoded, and a stage that moves
 * nothing has no dims here (ny, nt or nx 0). 32-bit indices divide by FastDiv; 64-bit ones
 * by plain division (tensors of 2^31 units or more). */
struct RowGatherArgs {
    int ny, nt, nx;
    long long ydim[KILN_MAX_DIMS], yshift[KILN_MAX_DIMS], wdim[KILN_MAX_DIMS]; /* Y's outer dims and W's */
    long long tdim[KILN_MAX_DIMS], tstride[KILN_MAX_DIMS]; /* T's outer dims, each's stride in V's rows */
    long long sdim[KILN_MAX_DIMS], sshift[KILN_MAX_DIMS], xdim[KILN_MAX_DIMS]; /* S's outer dims and X's */
    FastDiv yd[KILN_MAX_DIMS], td[KILN_MAX_DIMS], sd[KILN_MAX_DIMS], ud; /* 32-bit: the dividers */
    long long units, total; /* units a row; units of Y */
};

/* n / d into the quotient, n mod d into *r. */
template <typename I> __device__ __forceinline__ I rg_divmod(I n, long long d, const FastDiv &f, I *r) {
    I q;
    if constexpr (sizeof(I) == 4) q = fdiv(n, f);
    else q = n / (I)d;
    *r = n - q * (I)d;
    return q;
}

template <typename U, typename I>
__global__ void row_gather_kernel(const U *__restrict__ x, U *__restrict__ y, const RowGatherArgs a) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)a.total; i += (I)gridDim.x * blockDim.x) {
        I u, r = rg_divmod<I>(i, a.units, a.ud, &u), l = r, mul = 1;
        if (a.ny) { /* Y -> W: the crop keeps indices, the roll moves each back */
            l = 0;
            for (int d = a.ny - 1; d >= 0; d--) {
                I c;
                r = rg_divmod<I>(r, a.ydim[d], a.yd[d], &c);
                I w = c + (I)a.wdim[d] - (I)a.yshift[d];
                if (w >= (I)a.wdim[d]) w -= (I)a.wdim[d];
                l += w * mul;
                mul *= (I)a.wdim[d];
            }
        }
        I src = l;
        if (a.nt) { /* W's row is T's (a view); T's index is V's permuted */
            src = 0;
            for (int k = a.nt - 1; k >= 0; k--) {
                I c;
                l = rg_divmod<I>(l, a.tdim[k], a.td[k], &c);
                src += c * (I)a.tstride[k];
            }
        }
        I xr = src;
        bool zero = false;
        if (a.nx) { /* V's row is S's (a view): back through the roll, then past the pad */
            xr = 0;
            mul = 1;
            for (int d = a.nx - 1; d >= 0; d--) {
                I c;
                src = rg_divmod<I>(src, a.sdim[d], a.sd[d], &c);
                I j = c + (I)a.sdim[d] - (I)a.sshift[d];
                if (j >= (I)a.sdim[d]) j -= (I)a.sdim[d];
                zero |= j >= (I)a.xdim[d];
                xr += j * mul;
                mul *= (I)a.xdim[d];
            }
        }
        y[i] = zero ? U{} : x[xr * (I)a.units + u];
    }
}

template <typename U>
kiln_status launch_row_gather(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, RowGatherArgs a, bool fits32) {
    const unsigned blocks = kiln_cuda_blocks(cu, a.total, THREADS);
    if (fits32) {
        a.ud = fast_div((uint32_t)a.units);
        for (int d = 0; d < a.ny; d++) a.yd[d] = fast_div((uint32_t)a.ydim[d]);
        for (int k = 0; k < a.nt; k++) a.td[k] = fast_div((uint32_t)a.tdim[k]);
        for (int d = 0; d < a.nx; d++) a.sd[d] = fast_div((uint32_t)a.sdim[d]);
        row_gather_kernel<U, uint32_t><<<blocks, THREADS, 0, cu->stream>>>((const U *)x, (U *)y, a);
    } else {
        row_gather_kernel<U, int64_t><<<blocks, THREADS, 0, cu->stream>>>((const U *)x, (U *)y, a);
    }
    KILN_CUDA_LAUNCHED(ctx, "row_gather_kernel");
    return KILN_OK;
}

/* --------------------------------------------------------------------- gather */

template <typename E, typename I>
__global__ void gather_kernel(const E *x, const I *idx, E *y, int64_t total, int64_t n,
                              int64_t inner, int64_t dim, kiln_cuda_flag *flag) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t j = i % inner, k = (i / inner) % n, o = i / (inner * n);
        int64_t v = (int64_t)idx[k];
        const int64_t orig = v;
        if (v < 0) v += dim;
        if (v < 0 || v >= dim) {
            y[i] = 0;
            if (atomicCAS(&flag->code, 0, KILN_CUDA_FLAG_GATHER_INDEX) == 0) flag->value = orig;
            continue;
        }
        y[i] = x[(o * dim + v) * inner + j];
    }
}

template <typename E>
kiln_status launch_gather(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *idx,
                          bool idx64, void *y, int64_t total, int64_t n, int64_t inner, int64_t dim) {
    const unsigned blocks = kiln_cuda_blocks(cu, total, THREADS);
    if (idx64)
        gather_kernel<E, int64_t><<<blocks, THREADS, 0, cu->stream>>>(
            (const E *)x, (const int64_t *)idx, (E *)y, total, n, inner, dim, cu->flag);
    else
        gather_kernel<E, int32_t><<<blocks, THREADS, 0, cu->stream>>>(
            (const E *)x, (const int32_t *)idx, (E *)y, total, n, inner, dim, cu->flag);
    KILN_CUDA_LAUNCHED(ctx, "gather_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------------------ pad */

// src: (NC, H, W); dst: (NC, H + pt + pb, W + pl + pr)
template <typename E>
__global__ void pad_kernel(const E *src, E *dst, int64_t total, int64_t H, int64_t W, int64_t Ho,
                           int64_t Wo, int64_t pt, int64_t pl) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t w = i % Wo - pl, h = (i / Wo) % Ho - pt, nc = i / (Wo * Ho);
        dst[i] = (h >= 0 && h < H && w >= 0 && w < W) ? src[(nc * H + h) * W + w] : (E)0;
    }
}

template <typename E>
kiln_status launch_pad(kiln_cuda *cu, kiln_context *ctx, const void *src, void *dst, int64_t total,
                       int64_t H, int64_t W, int64_t Ho, int64_t Wo, int64_t pt, int64_t pl) {
    pad_kernel<E><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)src, (E *)dst, total, H, W, Ho, Wo, pt, pl);
    KILN_CUDA_LAUNCHED(ctx, "pad_kernel");
    return KILN_OK;
}

// src: (N, H, W, C); dst: (N, H + pt + pb, W + pl + pr, C)
template <typename E>
__global__ void pad_nhwc_kernel(const E *src, E *dst, int64_t total, int64_t C, int64_t H, int64_t W,
                                int64_t Ho, int64_t Wo, int64_t pt, int64_t pl) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t c = i % C, r = i / C;
        const int64_t w = r % Wo - pl, h = (r / Wo) % Ho - pt, n = r / (Wo * Ho);
        dst[i] = (h >= 0 && h < H && w >= 0 && w < W) ? src[((n * H + h) * W + w) * C + c] : (E)0;
    }
}

// src: (NC, H + pt + pb, W + pl + pr); dst: (NC, H, W)
template <typename E>
__global__ void crop_kernel(const E *src, E *dst, int64_t total, int64_t H, int64_t W, int64_t Hp,
                            int64_t Wp, int64_t pt, int64_t pl) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t w = i % W, h = (i / W) % H, nc = i / (W * H);
        dst[i] = src[(nc * Hp + h + pt) * Wp + w + pl];
    }
}

template <typename E>
kiln_status launch_crop(kiln_cuda *cu, kiln_context *ctx, const void *src, void *dst, int64_t total,
                        int64_t H, int64_t W, int64_t Hp, int64_t Wp, int64_t pt, int64_t pl) {
    crop_kernel<E><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)src, (E *)dst, total, H, W, Hp, Wp, pt, pl);
    KILN_CUDA_LAUNCHED(ctx, "crop_kernel");
    return KILN_OK;
}

// src: (N, H + pt + pb, W + pl + pr, C); dst: (N, H, W, C)
template <typename E>
__global__ void crop_nhwc_kernel(const E *src, E *dst, int64_t total, int64_t C, int64_t H, int64_t W,
                                 int64_t Hp, int64_t Wp, int64_t pt, int64_t pl) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t c = i % C, r = i / C;
        const int64_t w = r % W, h = (r / W) % H, n = r / (W * H);
        dst[i] = src[((n * Hp + h + pt) * Wp + w + pl) * C + c];
    }
}

template <typename E>
kiln_status launch_crop_nhwc(kiln_cuda *cu, kiln_context *ctx, const void *src, void *dst, int64_t total,
                             int64_t C, int64_t H, int64_t W, int64_t Hp, int64_t Wp, int64_t pt, int64_t pl) {
    crop_nhwc_kernel<E><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)src, (E *)dst, total, C, H, W, Hp, Wp, pt, pl);
    KILN_CUDA_LAUNCHED(ctx, "crop_nhwc_kernel");
    return KILN_OK;
}

template <typename E>
kiln_status launch_pad_nhwc(kiln_cuda *cu, kiln_context *ctx, const void *src, void *dst, int64_t total,
                            int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo, int64_t pt, int64_t pl) {
    pad_nhwc_kernel<E><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)src, (E *)dst, total, C, H, W, Ho, Wo, pt, pl);
    KILN_CUDA_LAUNCHED(ctx, "pad_nhwc_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------- layout changes */

/* Element formats of the layout kernels: S is the storage type (bits). Same formats copy
 * bits; f32 / f16 / bf16 convert through float, round to nearest even: Cast's rules for
 * these (one rounding, convert.cu's typed path). */
template <typename E> struct Raw {
    using S = E;
};
struct F32 {
    using S = uint32_t;
    static __device__ __forceinline__ float get(S v) { return __uint_as_float(v); }
    static __device__ __forceinline__ S put(float f) { return __float_as_uint(f); }
};
struct F16 {
    using S = uint16_t;
    static __device__ __forceinline__ float get(S v) { return __half2float(__ushort_as_half(v)); }
    static __device__ __forceinline__ S put(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
struct BF16 {
    using S = uint16_t;
    static __device__ __forceinline__ float get(S v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
    static __device__ __forceinline__ S put(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

template <typename I, typename O> __device__ __forceinline__ typename O::S convert(typename I::S v) {
    if constexpr (std::is_same<I, O>::value) return v;
    else return O::put(I::get(v));
}

constexpr int TILE = 32, TILE_ROWS = 8;

// x: (N, Ai, B) -> y: (N, B, Ao), Ao >= Ai, y's columns Ai..Ao-1 zero (ToNHWC's zero
// channels; Ai == Ao elsewhere). A block moves one 32x32 tile of one matrix: rows of x
// read along B and rows of y written along A, both coalesced; the +1 column keeps the
// column reads of the tile off a single shared-memory bank. The tile holds O's bits.
template <typename I, typename O>
__global__ void tile_transpose_kernel(const typename I::S *__restrict__ x, typename O::S *__restrict__ y, int64_t N,
                                      int64_t Ai, int64_t Ao, int64_t B) {
    using So = typename O::S;
    __shared__ So tile[TILE][TILE + 1];
    const int64_t a0 = (int64_t)blockIdx.y * TILE, b0 = (int64_t)blockIdx.x * TILE;
    for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
        const typename I::S *xn = x + n * Ai * B;
        So *yn = y + n * Ao * B;
        for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
            const int64_t a = a0 + k, b = b0 + threadIdx.x;
            if (a < Ao && b < B) tile[k][threadIdx.x] = a < Ai ? convert<I, O>(xn[a * B + b]) : (So)0;
        }
        __syncthreads();
        for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
            const int64_t b = b0 + k, a = a0 + threadIdx.x;
            if (a < Ao && b < B) yn[b * Ao + a] = tile[threadIdx.x][k];
        }
        __syncthreads();
    }
}

/* VB bytes of elements S, one vector access. */
template <typename S, int VB> struct alignas(VB) Pack {
    static constexpr int N = VB / (int)sizeof(S);
    S v[N];
};

// x: (N, Cx, S) -> y: (N, S, Cy), channels Cx..Cy-1 zero; Cy * sizeof(O::S) a multiple of
// VB, y VB-aligned, every index below 2^31. For few channels (a network's input): one
// thread per pixel (n, s) writes its Cy channels as VB-byte vectors, so a warp writes one
// contiguous run, and reads element s of each of its image's Cx planes, which neighbouring
// threads read at neighbouring addresses. No shared memory: a 32x32 tile would leave most
// of its rows empty (ResNet's padded input has 8 channels).
template <typename I, typename O, int VB>
__global__ void to_nhwc_narrow_kernel(const typename I::S *__restrict__ x, typename O::S *__restrict__ y,
                                      uint32_t pixels, uint32_t S, uint32_t Cx, uint32_t Cy) {
    using So = typename O::S;
    using V = Pack<So, VB>;
    const uint32_t chunks = Cy / V::N;
    for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < pixels; p += gridDim.x * blockDim.x) {
        const uint32_t n = p / S, s = p - n * S;
        const typename I::S *xp = x + n * Cx * S + s;
        V *yp = reinterpret_cast<V *>(y + p * Cy);
        for (uint32_t k = 0; k < chunks; k++) {
            V v;
#pragma unroll
            for (int j = 0; j < V::N; j++) {
                const uint32_t c = k * V::N + j;
                v.v[j] = c < Cx ? convert<I, O>(xp[c * S]) : (So)0;
            }
            yp[k] = v;
        }
    }
}

// x: (N, S, C) -> y: (N, C, S), same element format; C * sizeof(E) a multiple of VB, x
// VB-aligned, every index below 2^31. The mirror of to_nhwc_narrow_kernel: one thread per
// pixel reads its C channels as vectors and writes element s of each plane.
template <typename E, int VB>
__global__ void to_nchw_narrow_kernel(const E *__restrict__ x, E *__restrict__ y, uint32_t pixels, uint32_t S,
                                      uint32_t C) {
    using V = Pack<E, VB>;
    const uint32_t chunks = C / V::N;
    for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < pixels; p += gridDim.x * blockDim.x) {
        const uint32_t n = p / S, s = p - n * S;
        const V *xp = reinterpret_cast<const V *>(x + p * C);
        E *yp = y + n * C * S + s;
        for (uint32_t k = 0; k < chunks; k++) {
            const V v = xp[k];
#pragma unroll
            for (int j = 0; j < V::N; j++) yp[(k * V::N + j) * S] = v.v[j];
        }
    }
}

/* Bytes of one pixel's channels up to which the narrow kernels run: a thread then stores
 * (or loads) at most four 16-byte vectors. Wider pixels take the tiles. */
constexpr int64_t NARROW_BYTES = 64;

/* The widest vector (16, 8 or 4 bytes, else one element) dividing a pixel's `bytes` whose
 * alignment p has. */
static int vector_bytes(const void *p, int64_t bytes, size_t es) {
    for (int vb = 16; vb >= 4 && vb > (int)es; vb /= 2)
        if (bytes % vb == 0 && (uintptr_t)p % (uintptr_t)vb == 0) return vb;
    return (int)es;
}

static bool fits32(int64_t v) { return v >= 0 && v <= 0x7fffffff; }

template <typename I, typename O, int VB>
kiln_status launch_to_nhwc_narrow(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t Cx,
                                  int64_t Cy, int64_t S) {
    const int64_t pixels = N * S;
    to_nhwc_narrow_kernel<I, O, VB><<<kiln_cuda_blocks(cu, pixels, THREADS), THREADS, 0, cu->stream>>>(
        (const typename I::S *)x, (typename O::S *)y, (uint32_t)pixels, (uint32_t)S, (uint32_t)Cx, (uint32_t)Cy);
    KILN_CUDA_LAUNCHED(ctx, "to_nhwc_narrow_kernel");
    return KILN_OK;
}

template <typename E, int VB>
kiln_status launch_to_nchw_narrow(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t C,
                                  int64_t S) {
    const int64_t pixels = N * S;
    to_nchw_narrow_kernel<E, VB><<<kiln_cuda_blocks(cu, pixels, THREADS), THREADS, 0, cu->stream>>>(
        (const E *)x, (E *)y, (uint32_t)pixels, (uint32_t)S, (uint32_t)C);
    KILN_CUDA_LAUNCHED(ctx, "to_nchw_narrow_kernel");
    return KILN_OK;
}

template <typename I, typename O>
kiln_status launch_tile_transpose(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t Ai,
                                  int64_t Ao, int64_t B) {
    const int64_t gx = (B + TILE - 1) / TILE, gy = (Ao + TILE - 1) / TILE;
    const int64_t gz = N < 65535 ? N : 65535;
    if (gx > 0x7fffffff || gy > 65535)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "a layout change of a (%lld, %lld) matrix", (long long)Ao,
                         (long long)B);
    tile_transpose_kernel<I, O><<<dim3((unsigned)gx, (unsigned)gy, (unsigned)gz), dim3(TILE, TILE_ROWS), 0,
                                  cu->stream>>>((const typename I::S *)x, (typename O::S *)y, N, Ai, Ao, B);
    KILN_CUDA_LAUNCHED(ctx, "tile_transpose_kernel");
    return KILN_OK;
}

/* A layout change from element format I to O (the same unless ToNHWC converts): x (N, Cx,
 * S) in one layout, y (N, Cy, S) in the other, Cy >= Cx (ToNHWC's zero channels). */
template <typename I, typename O>
kiln_status launch_layout(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t Cx, int64_t Cy,
                          int64_t S, bool to_nhwc) {
    using Si = typename I::S;
    using So = typename O::S;
    if (to_nhwc) {
        const int64_t bytes = Cy * (int64_t)sizeof(So);
        if (bytes <= NARROW_BYTES && fits32(N * Cx * S) && fits32(N * Cy * S)) {
            switch (vector_bytes(y, bytes, sizeof(So))) {
            case 16: return launch_to_nhwc_narrow<I, O, 16>(cu, ctx, x, y, N, Cx, Cy, S);
            case 8: return launch_to_nhwc_narrow<I, O, (sizeof(So) > 8 ? sizeof(So) : 8)>(cu, ctx, x, y, N, Cx, Cy, S);
            case 4: return launch_to_nhwc_narrow<I, O, (sizeof(So) > 4 ? sizeof(So) : 4)>(cu, ctx, x, y, N, Cx, Cy, S);
            default: return launch_to_nhwc_narrow<I, O, sizeof(So)>(cu, ctx, x, y, N, Cx, Cy, S);
            }
        }
        return launch_tile_transpose<I, O>(cu, ctx, x, y, N, Cx, Cy, S);
    }
    if constexpr (std::is_same<I, O>::value) { /* ToNCHW: Cx == Cy */
        const int64_t bytes = Cx * (int64_t)sizeof(Si);
        if (bytes <= NARROW_BYTES && fits32(N * Cx * S)) {
            switch (vector_bytes(x, bytes, sizeof(Si))) {
            case 16: return launch_to_nchw_narrow<Si, 16>(cu, ctx, x, y, N, Cx, S);
            case 8: return launch_to_nchw_narrow<Si, (sizeof(Si) > 8 ? sizeof(Si) : 8)>(cu, ctx, x, y, N, Cx, S);
            case 4: return launch_to_nchw_narrow<Si, (sizeof(Si) > 4 ? sizeof(Si) : 4)>(cu, ctx, x, y, N, Cx, S);
            default: return launch_to_nchw_narrow<Si, sizeof(Si)>(cu, ctx, x, y, N, Cx, S);
            }
        }
        return launch_tile_transpose<I, O>(cu, ctx, x, y, N, S, S, Cx);
    }
    return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "kiln.ToNCHW converts no dtypes");
}

/* A layout change with no conversion on the way. Pixels of more than NARROW_BYTES and no
 * zero channels: the permutation (N, C, S) <-> (N, S, C) through Transpose's tiles
 * (launch_perm_tile: 16-byte vector reads; maxvit_t's f16 ToNHWCs of 64-256 channels ran at
 * ~0.7 TB/s in tile_transpose_kernel's 32 x 32 tiles of single elements on an H200). */
template <typename E>
kiln_status launch_layout_raw(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t Cx,
                              int64_t Cy, int64_t S, bool to_nhwc) {
    if (cu->layout_tile && cu->perm_tile && Cx == Cy && Cx * (int64_t)sizeof(E) > NARROW_BYTES) {
        /* the output's dims in the order it is written, at the input's strides */
        const int64_t d3[3] = {N, to_nhwc ? S : Cx, to_nhwc ? Cx : S}, s3[3] = {Cx * S, 1, to_nhwc ? S : Cx};
        int64_t dims[3], st[3];
        int nd = 0;
        for (int k = 0; k < 3; k++)
            if (d3[k] > 1) {
                dims[nd] = d3[k];
                st[nd++] = s3[k];
            }
        kiln_perm_tile t;
        const int side = kiln_perm_tile_side((int64_t)sizeof(E));
        if (kiln_perm_tile_plan(nd, dims, st, side, &t) && t.A <= 65535LL * side && t.B <= 0x7fffffffLL * side)
            return launch_perm_tile<E>(cu, ctx, x, y, t);
    }
    return launch_layout<Raw<E>, Raw<E>>(cu, ctx, x, y, N, Cx, Cy, S, to_nhwc);
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_k_layout(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N, Cx, H, W) in one layout
    kiln_tensor *y = c->out[0];      // (N, Cy, H, W) in the other (ToNHWC: Cy >= Cx, maybe another dtype)
    const int64_t N = x->dims[0], Cx = x->dims[1], Cy = y->dims[1], S = x->dims[2] * x->dims[3];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    const bool to_nhwc = y->format == KILN_FORMAT_NHWC;
    const kiln_dtype a = x->dtype, b = y->dtype;
    if (a == b && Cx == Cy && (Cx == 1 || S == 1)) {
        if (y->data != x->data)
            KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, kiln_tensor_nbytes(x), cudaMemcpyDeviceToDevice,
                                                     cu->stream));
        return KILN_OK;
    }
    kiln_status st;
    if (a == b) {
        KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(a), launch_layout_raw, cu, c->kctx, x->data, y->data, N, Cx,
                              Cy, S, to_nhwc);
        return st;
    }
#define KILN_LAYOUT_PAIR(A, B, I, O) \
    if (a == A && b == B) return launch_layout<I, O>(cu, c->kctx, x->data, y->data, N, Cx, Cy, S, to_nhwc);
    KILN_LAYOUT_PAIR(KILN_F32, KILN_F16, F32, F16)
    KILN_LAYOUT_PAIR(KILN_F32, KILN_BF16, F32, BF16)
    KILN_LAYOUT_PAIR(KILN_F16, KILN_F32, F16, F32)
    KILN_LAYOUT_PAIR(KILN_BF16, KILN_F32, BF16, F32)
    KILN_LAYOUT_PAIR(KILN_F16, KILN_BF16, F16, BF16)
    KILN_LAYOUT_PAIR(KILN_BF16, KILN_F16, BF16, F16)
#undef KILN_LAYOUT_PAIR
    return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "a layout change from %s to %s", kiln_dtype_name(a),
                     kiln_dtype_name(b));
}

extern "C" kiln_status kiln_cuda_pad_nhwc(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                                          const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                                          int64_t pt, int64_t pb, int64_t pl, int64_t pr) {
    const int64_t Ho = H + pt + pb, Wo = W + pl + pr, total = N * Ho * Wo * C;
    if (total == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, ctx, kiln_dtype_size(dt), launch_pad_nhwc, cu, ctx, src, dst, total, C, H, W, Ho,
                          Wo, pt, pl);
    return st;
}

// dst (rows, keep) = src (rows, row)[:, :keep]
template <typename E>
__global__ void narrow_rows_kernel(const E *src, E *dst, int64_t total, int64_t row, int64_t keep) {
    for (int64_t i = thread_index(); i < total; i += grid_stride()) dst[i] = src[i / keep * row + i % keep];
}

template <typename E>
kiln_status launch_narrow_rows(kiln_cuda *cu, kiln_context *ctx, const void *src, void *dst, int64_t total,
                               int64_t row, int64_t keep) {
    narrow_rows_kernel<E><<<kiln_cuda_blocks(cu, total, THREADS), THREADS, 0, cu->stream>>>((const E *)src, (E *)dst,
                                                                                           total, row, keep);
    KILN_CUDA_LAUNCHED(ctx, "narrow_rows_kernel");
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_narrow_rows(kiln_cuda *cu, kiln_context *ctx, size_t es, void *dst, const void *src,
                                             int64_t rows, int64_t row, int64_t keep) {
    if (keep < 1 || keep > row || rows < 0)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "narrowing rows of %lld elements to %lld", (long long)row,
                         (long long)keep);
    const int64_t total = rows * keep;
    if (total == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, ctx, es, launch_narrow_rows, cu, ctx, src, dst, total, row, keep);
    return st;
}

extern "C" kiln_status kiln_cuda_k_copy(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const size_t bytes = kiln_tensor_nbytes(y);
    if (y->data == x->data || bytes == 0) return KILN_OK;
    KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, bytes, cudaMemcpyDeviceToDevice, cu->stream));
    return KILN_OK;
}

/* The blocks of `whole` along `axis`, in order, of sizes[k] on that axis (or like[k]'s size
 * there when sizes is NULL): to_parts copies them into parts[k] (Split, ConcatGrad; a NULL
 * part is skipped), else parts[k] into them (Concat, SplitGrad; a NULL part zeroes its
 * block). One 2-D copy per part. */
/* The channel blocks of an NHWC `whole` (4-D, logical dims (N, C, H, W); the parts NHWC
 * too, or with the same bytes in both layouts), part k of sizes[k] (or like[k]'s) channels. */
static kiln_status nhwc_channel_blocks(kiln_cuda *cu, kiln_context *kctx, const kiln_tensor *whole, int n,
                                       const int64_t *sizes, const kiln_tensor *const *like,
                                       kiln_tensor *const *parts, bool to_parts) {
    const size_t es = kiln_dtype_size(whole->dtype);
    const int64_t C = whole->dims[1], P = whole->dims[0] * whole->dims[2] * whole->dims[3];
    if (P == 0 || C == 0) return KILN_OK;
    int64_t at = 0;
    for (int k0 = 0; k0 < n; k0 += MAX_CHAN_PARTS) {
        ChanParts a;
        memset(&a, 0, sizeof a);
        a.pixels = P;
        int m = 0;
        size_t unit = 16;
        int64_t max_cb = 0;
        for (int k = k0; k < n && k < k0 + MAX_CHAN_PARTS; k++) {
            const int64_t cb = sizes ? sizes[k] : like[k]->dims[1]; /* logical NCHW dims */
            char *w = (char *)whole->data + (size_t)at * es;
            at += cb;
            const kiln_tensor *t = parts[k];
            if (cb == 0 || (to_parts && !t)) continue;
            ChanPart *q = &a.p[m++];
            q->src = to_parts ? (const void *)w : t ? t->data : NULL;
            q->dst = to_parts ? t->data : (void *)w;
            q->cb = cb * (int64_t)es;                      /* bytes for now */
            q->s_stride = (to_parts ? C : cb) * (int64_t)es;
            q->d_stride = (to_parts ? cb : C) * (int64_t)es;
            const uintptr_t bits = (uintptr_t)q->src | (uintptr_t)q->dst | (uintptr_t)q->cb | (uintptr_t)q->s_stride |
                                   (uintptr_t)q->d_stride;
            while (unit > 1 && (bits & (unit - 1))) unit /= 2;
        }
        if (m == 0) continue;
        for (int j = 0; j < m; j++) {
            a.p[j].cb /= (int64_t)unit;
            a.p[j].s_stride /= (int64_t)unit;
            a.p[j].d_stride /= (int64_t)unit;
            if (a.p[j].cb > max_cb) max_cb = a.p[j].cb;
        }
        kiln_status st;
        switch (unit) {
        case 16: st = launch_channel_blocks<uint4>(cu, kctx, a, m, P * max_cb); break;
        case 8: st = launch_channel_blocks<uint2>(cu, kctx, a, m, P * max_cb); break;
        case 4: st = launch_channel_blocks<uint32_t>(cu, kctx, a, m, P * max_cb); break;
        case 2: st = launch_channel_blocks<uint16_t>(cu, kctx, a, m, P * max_cb); break;
        default: st = launch_channel_blocks<uint8_t>(cu, kctx, a, m, P * max_cb); break;
        }
        if (st) return st;
    }
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_axis_blocks(kiln_cuda *cu, kiln_context *kctx, kiln_tensor *whole, int64_t axis, int n,
                                             const int64_t *sizes, const kiln_tensor *const *like,
                                             kiln_tensor *const *parts, bool to_parts) {
    const size_t es = kiln_dtype_size(whole->dtype);
    /* NHWC: the channel kernel, or the same 2-D copies over the physical dims (N, H, W, C)
     * (the parts' sizes still read on the logical axis) */
    const int64_t lax = axis;
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, whole->dims, sizeof dims);
    if (whole->ndim == 4 && whole->format == KILN_FORMAT_NHWC) {
        if (axis == 1) return nhwc_channel_blocks(cu, kctx, whole, n, sizes, like, parts, to_parts);
        static const int64_t to_phys[4] = {0, 3, 1, 2};
        dims[1] = whole->dims[2];
        dims[2] = whole->dims[3];
        dims[3] = whole->dims[1];
        axis = to_phys[axis];
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int d = (int)axis + 1; d < whole->ndim; d++) inner *= dims[d];
    const size_t row = (size_t)(dims[axis] * inner) * es; /* bytes of one row of `whole` */
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        const size_t block = (size_t)((sizes ? sizes[k] : like[k]->dims[lax]) * inner) * es;
        char *w = (char *)whole->data + at;
        at += block;
        if (block == 0 || outer == 0) continue;
        if (to_parts && parts[k])
            KILN_CUDA_CHECK(kctx, cudaMemcpy2DAsync(parts[k]->data, block, w, row, block, (size_t)outer,
                                                    cudaMemcpyDeviceToDevice, cu->stream));
        else if (!to_parts && parts[k])
            KILN_CUDA_CHECK(kctx, cudaMemcpy2DAsync(w, row, parts[k]->data, block, block, (size_t)outer,
                                                    cudaMemcpyDeviceToDevice, cu->stream));
        else if (!to_parts)
            KILN_CUDA_CHECK(kctx, cudaMemset2DAsync(w, row, 0, block, (size_t)outer, cu->stream));
    }
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_concat(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, y->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    return kiln_cuda_axis_blocks(cu, c->kctx, y, axis, c->n_in, NULL, (const kiln_tensor *const *)c->in,
                                 (kiln_tensor *const *)c->in, false);
}

extern "C" kiln_status kiln_cuda_k_transpose(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int r = x->ndim;
    int64_t perm[KILN_MAX_DIMS];
    int np = 0;
    const int64_t *p = kiln_attr_ints(c->node, "perm", &np);
    if (p && np != r) return kiln_fail(c->kctx, KILN_ERR_SHAPE, "perm has %d entries for rank %d", np, r);
    for (int d = 0; d < r; d++) perm[d] = p ? p[d] : r - 1 - d;
    const int64_t n = kiln_tensor_numel(x);
    const size_t es = kiln_dtype_size(x->dtype);
    if (n == 0) return KILN_OK;

    /* Input strides, then output dims in order with size-1 dims dropped, merging an output
     * dim into the previous one when it is the next input dim (it is then walked as one
     * run: stride(prev) == stride(this) * size(this)). A 4-D NHWC input has its logical
     * (N, C, H, W) dims at NHWC strides; a 4-D NHWC output is written in (N, H, W, C)
     * order: its dims walked in that order. Transposes between a layout and the logical
     * channels-last order (the layout pass's, around ConvNeXt's LayerNorms) thus become
     * plain copies. */
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(r, x->dims, xs);
    if (r == 4 && x->format == KILN_FORMAT_NHWC) {
        xs[1] = 1;
        xs[3] = x->dims[1];
        xs[2] = x->dims[3] * x->dims[1];
        xs[0] = x->dims[2] * xs[2];
    }
    const bool y_nhwc = r == 4 && y->format == KILN_FORMAT_NHWC;
    TransposeArgs a;
    memset(&a, 0, sizeof a);
    const int nd = kiln_perm_merge(r, x->dims, xs, perm, y_nhwc, a.dims, a.stride);
    if (nd == 0 || (nd == 1 && a.stride[0] == 1)) { /* the order does not change */
        if (x->data == y->data) return KILN_OK; /* a view (the planner's alias_when) */
        KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, (size_t)n * es,
                                                 cudaMemcpyDeviceToDevice, cu->stream));
        return KILN_OK;
    }
    a.nd = nd;
    /* The innermost output dim contiguous in X too (a batched transpose of rows, e.g.
     * (L, N, D) -> (N, L, D) in a transformer: ViT-B/16's 24 of them ran at ~670 GB/s
     * element by element on an H100): moved in units of up to 16 bytes, which every
     * stride, the run's length and both addresses must allow. */
    /* Neither side contiguous element by element (the output's innermost dim is not the
     * input's): through shared-memory tiles where both runs hold a few elements */
    kiln_perm_tile t;
    const int side = kiln_perm_tile_side((int64_t)es);
    if (cu->perm_tile && a.stride[nd - 1] != 1 && kiln_perm_tile_plan(nd, a.dims, a.stride, side, &t) &&
        t.A <= 65535LL * side && t.B <= 0x7fffffffLL * side) {
        kiln_status st;
        KILN_CU_SIZE_DISPATCH(st, c->kctx, es, launch_perm_tile, cu, c->kctx, x->data, y->data, t);
        return st;
    }
    const size_t unit = a.stride[nd - 1] == 1 ? kiln_cuda_row_unit(es, a.dims[nd - 1], a.stride, nd - 1, 0, x->data, y->data)
                                              : es;
    int64_t units = n;
    if (unit != es) {
        const int64_t k = (int64_t)(unit / es);
        a.dims[nd - 1] /= k;
        for (int d = 0; d < nd - 1; d++) a.stride[d] /= k;
        units = n / k;
    }
    kiln_status st;
    if (unit == 16) st = launch_transpose<uint4>(cu, c->kctx, x->data, y->data, units, a);
    else KILN_CU_SIZE_DISPATCH(st, c->kctx, unit, launch_transpose, cu, c->kctx, x->data, y->data, units, a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_channel_shuffle(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int64_t total = kiln_tensor_numel(y), C = x->dims[1], g = kiln_attr_int(c->node, "groups", 1);
    if (total == 0) return KILN_OK;
    if (g < 1 || C % g != 0)
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "groups = %lld does not divide %lld channels", (long long)g,
                         (long long)C);
    const size_t es = kiln_dtype_size(x->dtype);
    if (g == 1 || g == C) { /* the identity permutation */
        KILN_CUDA_CHECK(c->kctx, cudaMemcpyAsync(y->data, x->data, (size_t)total * es, cudaMemcpyDeviceToDevice,
                                                 cu->stream));
        return KILN_OK;
    }
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, es, launch_channel_shuffle, cu, c->kctx, x->data, y->data, total, C, g,
                          x->dims[2] * x->dims[3], x->format == KILN_FORMAT_NHWC);
    return st;
}

extern "C" kiln_status kiln_cuda_k_channel_gather(kiln_cuda *cu, kiln_op_ctx *c) {
    int nm = 0;
    const int64_t *map = kiln_attr_ints(c->node, "map", &nm);
    const kiln_tensor *x0 = c->in[0];
    if (c->n_in > KILN_CHANNEL_GATHER_MAX_IO || c->n_out > KILN_CHANNEL_GATHER_MAX_IO || !map ||
        nm > KILN_CHANNEL_GATHER_MAX_MAP)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%d inputs, %d outputs and %d mapped channels", c->n_in,
                         c->n_out, nm);
    static thread_local GatherArgs a; /* 12 KB, off the stack; each launch copies it */
    memset(&a, 0, sizeof a);
    a.n = x0->dims[0];
    a.s = x0->dims[2] * x0->dims[3];
    for (int i = 0; i < c->n_in; i++) {
        a.x[i] = c->in[i]->data;
        a.cin[i] = (int)c->in[i]->dims[1];
    }
    int64_t max_total = 0, off = 0;
    for (int j = 0; j < c->n_out; j++) {
        a.y[j] = c->out[j]->data;
        a.cout[j] = (int)c->out[j]->dims[1];
        a.off[j] = (int)off;
        off += a.cout[j];
        const int64_t t = kiln_tensor_numel(c->out[j]);
        if (t > max_total) max_total = t;
    }
    if (off != nm)
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "the outputs have %lld channels, the map %d", (long long)off, nm);
    for (int e = 0; e < nm; e++) a.map[e] = (int)map[e];
    if (max_total == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, kiln_dtype_size(x0->dtype), launch_channel_gather, cu, c->kctx, a, c->n_in,
                          c->n_out, max_total, x0->format == KILN_FORMAT_NHWC);
    return st;
}

extern "C" kiln_status kiln_cuda_k_roll(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    const int r = x->ndim;
    if (r < 1 || r > KILN_MAX_DIMS)
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "Roll node '%s': input of rank %d", c->node->name, r);
    int64_t lsh[KILN_MAX_DIMS];
    const kiln_status sst = kiln_roll_shifts(c, x, lsh);
    if (sst) return sst;
    const int64_t total = kiln_tensor_numel(y);
    if (total == 0) return KILN_OK;
    /* storage order: an NHWC tensor's logical (N, C, H, W) dims lie as (N, H, W, C) */
    static const int nhwc_order[4] = {0, 2, 3, 1};
    const bool nhwc = r == 4 && x->format == KILN_FORMAT_NHWC;
    int64_t dims[KILN_MAX_DIMS], sh[KILN_MAX_DIMS];
    for (int d = 0; d < r; d++) {
        const int l = nhwc ? nhwc_order[d] : d;
        dims[d] = x->dims[l];
        sh[d] = lsh[l];
    }
    /* the trailing dims not rolled are one row, copied in units of up to 16 bytes */
    int nd = r;
    int64_t inner = 1;
    while (nd > 0 && sh[nd - 1] == 0) inner *= dims[--nd];
    const size_t es = kiln_dtype_size(x->dtype);
    size_t unit = es;
    while (unit < 16 && (inner * (int64_t)es) % (int64_t)(unit * 2) == 0 && (uintptr_t)x->data % (unit * 2) == 0 &&
           (uintptr_t)y->data % (unit * 2) == 0)
        unit *= 2;
    RollArgs a = {};
    a.nd = nd;
    for (int d = 0; d < nd; d++) {
        a.dims[d] = dims[d];
        a.shift[d] = sh[d];
    }
    a.inner = inner * (int64_t)es / (int64_t)unit;
    a.total = total * (int64_t)es / (int64_t)unit;
    kiln_status st;
    if (unit == 16) st = launch_roll<uint4>(cu, c->kctx, x->data, y->data, a);
    else KILN_CU_SIZE_DISPATCH(st, c->kctx, unit, launch_roll, cu, c->kctx, x->data, y->data, a);
    return st;
}

extern "C" kiln_status kiln_cuda_k_row_gather(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    kiln_row_gather g;
    const kiln_status gst = kiln_row_gather_geometry(c, x, &g);
    if (gst) return gst;
    const int64_t total = kiln_tensor_numel(y);
    if (total == 0) return KILN_OK;
    const size_t es = kiln_dtype_size(x->dtype);
    const size_t unit = kiln_cuda_row_unit(es, g.row, NULL, 0, 0, x->data, y->data);
    RowGatherArgs a = {};
    a.units = g.row * (int64_t)es / (int64_t)unit;
    a.total = total / g.row * a.units;
    bool ymoves = false, tmoves = false, xmoves = false;
    for (int d = 0; d + 1 < g.rw; d++) ymoves |= g.oshift[d] != 0 || g.y[d] != g.w[d];
    for (int k = 0; k + 1 < g.rv; k++) tmoves |= g.perm[k] != k;
    for (int d = 0; d + 1 < g.rx; d++) xmoves |= g.shift[d] != 0 || g.pad[d] != 0;
    if (ymoves) {
        a.ny = g.rw - 1;
        for (int d = 0; d < a.ny; d++) {
            a.ydim[d] = g.y[d];
            a.yshift[d] = g.oshift[d];
            a.wdim[d] = g.w[d];
        }
    }
    if (tmoves) {
        int64_t vstride[KILN_MAX_DIMS];
        for (int d = g.rv - 2; d >= 0; d--) vstride[d] = d == g.rv - 2 ? 1 : vstride[d + 1] * g.v[d + 1];
        a.nt = g.rv - 1;
        for (int k = 0; k < a.nt; k++) {
            a.tdim[k] = g.v[g.perm[k]];
            a.tstride[k] = vstride[g.perm[k]];
        }
    }
    if (xmoves) {
        a.nx = g.rx - 1;
        for (int d = 0; d < a.nx; d++) {
            a.sdim[d] = g.s[d];
            a.sshift[d] = g.shift[d];
            a.xdim[d] = g.x[d];
        }
    }
    /* 32-bit when every index fits (the padded S is the largest of X's and V's) */
    const int64_t big = (int64_t)1 << 31;
    int64_t srows = 1;
    for (int d = 0; d + 1 < g.rx; d++) srows *= g.s[d];
    const bool fits32 = a.total < big && srows * a.units < big;
    kiln_status st;
    if (unit == 16) st = launch_row_gather<uint4>(cu, c->kctx, x->data, y->data, a, fits32);
    else KILN_CU_SIZE_DISPATCH(st, c->kctx, unit, launch_row_gather, cu, c->kctx, x->data, y->data, a, fits32);
    return st;
}

extern "C" kiln_status kiln_cuda_k_gather(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    if (!kiln_norm_axis(&axis, x->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    const int64_t dim = x->dims[axis], n = kiln_tensor_numel(ix);
    int64_t inner = 1;
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    const int64_t total = kiln_tensor_numel(y);
    if (total == 0) return KILN_OK;
    const size_t es = kiln_dtype_size(x->dtype);
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, c->kctx, es, launch_gather, cu, c->kctx, x->data, ix->data,
                          ix->dtype == KILN_I64, y->data, total, n, inner, dim);
    return st;
}

extern "C" kiln_status kiln_cuda_pad_nchw(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                                          const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                                          int64_t pt, int64_t pb, int64_t pl, int64_t pr) {
    const int64_t Ho = H + pt + pb, Wo = W + pl + pr, total = N * C * Ho * Wo;
    if (total == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, ctx, kiln_dtype_size(dt), launch_pad, cu, ctx, src, dst, total, H, W, Ho,
                          Wo, pt, pl);
    return st;
}

extern "C" kiln_status kiln_cuda_crop_nchw(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                                           const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                                           int64_t pt, int64_t pb, int64_t pl, int64_t pr) {
    const int64_t total = N * C * H * W;
    if (total == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, ctx, kiln_dtype_size(dt), launch_crop, cu, ctx, src, dst, total, H, W,
                          H + pt + pb, W + pl + pr, pt, pl);
    return st;
}

extern "C" kiln_status kiln_cuda_crop_nhwc(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *dst,
                                           const void *src, int64_t N, int64_t C, int64_t H, int64_t W,
                                           int64_t pt, int64_t pb, int64_t pl, int64_t pr) {
    const int64_t total = N * H * W * C;
    if (total == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_SIZE_DISPATCH(st, ctx, kiln_dtype_size(dt), launch_crop_nhwc, cu, ctx, src, dst, total, C, H, W,
                          H + pt + pb, W + pl + pr, pt, pl);
    return st;
}
