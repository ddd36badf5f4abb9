/*
 * perm_bench.cu — what limits kiln's transposes of 2-byte elements? (bench/NOTES.md, the
 * eighteenth session: maxvit_t's partitions through movement.cu's tiles and kiln.ToNHWC's
 * classic 32x32 tiles both ran f16 at ~600-700 GB/s on an H100, far below a copy.)
 *
 * Standalone (no kiln): y[n][b][a] = x[n][a][b] for 2-byte elements, N x A x B, moved by
 * tiles of TA x TB elements through shared memory with 256 threads, each thread loading
 * VEC contiguous elements along B (VEC 1: 2-byte loads, 8: 16-byte loads) and storing along
 * A. Variants differ in TB (the length of each contiguous read run: 64 to 512 bytes) and
 * VEC; a vectorized copy of the same bytes gives the ceiling. Every variant's output is
 * compared with a naive transpose's before it is timed.
 *
 *   perm_bench [N A B]   (default 256 64 3136: maxvit_t's and ToNHWC's f16 problem)
 *
 * Prints, per variant: median ms of 20 runs after 3 warm-ups (CUDA events), GB/s
 * (read + write), and mismatches against the naive transpose (must be 0).
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "perm_bench: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), \
                         __LINE__);                                                               \
            std::exit(1);                                                                         \
        }                                                                                         \
    } while (0)

typedef uint16_t E;

__global__ void fill(E *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = (E)(i * 2654435761u >> 7);
}

__global__ void naive(const E *x, E *y, int64_t N, int64_t A, int64_t B) {
    const int64_t n_all = N * A * B;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t a = i % A, b = i / A % B, n = i / (A * B); /* y index i = (n, b, a) */
        y[i] = x[(n * A + a) * B + b];
    }
}

__global__ void count_diff(const E *p, const E *q, int64_t n, unsigned long long *bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (p[i] != q[i]) atomicAdd(bad, 1ull);
}

__global__ void copy16(const uint4 *x, uint4 *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i];
}

/* Tile (TA rows of A) x (TB columns of B) of matrix n = blockIdx.z: 256 threads read it as
 * TB / VEC columns of VEC-element vectors by 256 / (TB / VEC) rows, and write it as TA
 * columns by 256 / TA rows of single elements. Requires B % VEC == 0 for VEC > 1. */
template <int TA, int TB, int VEC>
__global__ void __launch_bounds__(256) tiled(const E *__restrict__ x, E *__restrict__ y, int64_t A, int64_t B) {
    constexpr int RC = TB / VEC, RR = 256 / RC; /* read: columns (vectors), rows per pass */
    constexpr int WR = 256 / TA;                /* write: rows per pass */
    static_assert(RC <= 256 && 256 % RC == 0 && TA % RR == 0 && 256 % TA == 0 && TB % WR == 0, "shape");
    __shared__ E tile[TA][TB + 2];
    const int64_t n = blockIdx.z, a0 = (int64_t)blockIdx.y * TA, b0 = (int64_t)blockIdx.x * TB;
    const E *xn = x + n * A * B;
    E *yn = y + n * A * B;
    const int t = threadIdx.x;
    {
        const int c = t % RC, r0 = t / RC;
        const int64_t b = b0 + (int64_t)c * VEC;
#pragma unroll
        for (int r = r0; r < TA; r += RR) {
            const int64_t a = a0 + r;
            if (a >= A) continue;
            if (VEC == 8) {
                if (b + 8 <= B) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(xn + a * B + b);
                    const E *e = reinterpret_cast<const E *>(&v);
#pragma unroll
                    for (int k = 0; k < 8; k++) tile[r][c * 8 + k] = e[k];
                }
            } else if (b < B) {
                tile[r][c] = xn[a * B + b];
            }
        }
    }
    __syncthreads();
    {
        const int c = t % TA, r0 = t / TA;
        const int64_t a = a0 + c;
#pragma unroll
        for (int r = r0; r < TB; r += WR) {
            const int64_t b = b0 + r;
            if (a < A && b < B) yn[b * A + a] = tile[c][r];
        }
    }
}

/* Median ms of 20 runs of launch() after 3 warm-ups (CUDA events). */
template <typename F> static double median_ms(F launch) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float m = 0;
        CK(cudaEventElapsedTime(&m, e0, e1));
        if (i >= 3) ms.push_back(m);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

template <int TA, int TB, int VEC>
static void run_tiled(const char *name, const E *x, E *y, const E *ref, int64_t N, int64_t A, int64_t B,
                      unsigned long long *d_bad) {
    if (VEC > 1 && B % VEC) {
        std::printf("%-28s skipped (B %% %d != 0)\n", name, VEC);
        return;
    }
    const dim3 grid((unsigned)((B + TB - 1) / TB), (unsigned)((A + TA - 1) / TA), (unsigned)N);
    CK(cudaMemset(y, 0xff, (size_t)(N * A * B) * sizeof(E)));
    tiled<TA, TB, VEC><<<grid, 256>>>(x, y, A, B);
    CK(cudaGetLastError());
    CK(cudaMemset(d_bad, 0, sizeof *d_bad));
    count_diff<<<1024, 256>>>(y, ref, N * A * B, d_bad);
    unsigned long long bad = 0;
    CK(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    const double med = median_ms([&] { tiled<TA, TB, VEC><<<grid, 256>>>(x, y, A, B); });
    const double bytes = 2.0 * (double)(N * A * B) * sizeof(E);
    std::printf("%-28s %8.4f ms %8.1f GB/s  mismatches %llu\n", name, med, bytes / med / 1e6, bad);
}

int main(int argc, char **argv) {
    const int64_t N = argc > 3 ? std::atoll(argv[1]) : 256, A = argc > 3 ? std::atoll(argv[2]) : 64,
                  B = argc > 3 ? std::atoll(argv[3]) : 3136;
    if (N < 1 || A < 1 || B < 1 || N > 65535) {
        std::fprintf(stderr, "perm_bench: N A B must be positive (N at most 65535)\n");
        return 2;
    }
    const int64_t n = N * A * B;
    E *x, *y, *ref;
    unsigned long long *d_bad;
    CK(cudaMalloc(&x, (size_t)n * sizeof(E) + 16));
    CK(cudaMalloc(&y, (size_t)n * sizeof(E) + 16));
    CK(cudaMalloc(&ref, (size_t)n * sizeof(E)));
    CK(cudaMalloc(&d_bad, sizeof *d_bad));
    fill<<<1024, 256>>>(x, n);
    naive<<<4096, 256>>>(x, ref, N, A, B);
    CK(cudaDeviceSynchronize());
    std::printf("f16 [%lld, %lld, %lld] -> [%lld, %lld, %lld], %.1f MB each way\n", (long long)N, (long long)A,
                (long long)B, (long long)N, (long long)B, (long long)A, (double)n * sizeof(E) / 1e6);
    { /* the ceiling: a 16-byte copy of the same bytes */
        const int64_t n16 = (int64_t)((size_t)n * sizeof(E) / 16);
        const double med = median_ms([&] { copy16<<<132 * 16, 256>>>((const uint4 *)x, (uint4 *)y, n16); });
        std::printf("%-28s %8.4f ms %8.1f GB/s\n", "copy (16-byte)", med, 2.0 * (double)n16 * 16 / med / 1e6);
    }
    run_tiled<32, 32, 1>("32x32, 2-byte loads", x, y, ref, N, A, B, d_bad);   /* kiln.ToNHWC's */
    run_tiled<64, 64, 1>("64x64, 2-byte loads", x, y, ref, N, A, B, d_bad);   /* perm_tile's f16 */
    run_tiled<64, 128, 1>("64x128, 2-byte loads", x, y, ref, N, A, B, d_bad);
    run_tiled<64, 256, 1>("64x256, 2-byte loads", x, y, ref, N, A, B, d_bad);
    run_tiled<32, 256, 1>("32x256, 2-byte loads", x, y, ref, N, A, B, d_bad);
    run_tiled<64, 64, 8>("64x64, 16-byte loads", x, y, ref, N, A, B, d_bad);
    run_tiled<64, 128, 8>("64x128, 16-byte loads", x, y, ref, N, A, B, d_bad);
    run_tiled<64, 256, 8>("64x256, 16-byte loads", x, y, ref, N, A, B, d_bad);
    run_tiled<32, 512, 8>("32x512, 16-byte loads", x, y, ref, N, A, B, d_bad);
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(ref));
    CK(cudaFree(d_bad));
    return 0;
}
