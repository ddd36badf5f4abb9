/*
 * lt_repro.c — one cuBLASLt product as kiln's 1x1 convolutions run it (Y = X W^T + bias + Z,
 * f16, row-major X (M, K), W (N, K), Y and Z (M, N)), on one of the heuristic's candidates,
 * launched ITERS times back to back (each behind a memset of another buffer, as a graph of
 * convolutions runs them: no host synchronization in between), then one synchronization.
 * Prints the candidate's configuration and "ok" or the error. Written for efficientnet_b7's
 * intermittent "unspecified launch failure" (bench/NOTES.md, the seventeenth session); a
 * failure leaves the context unusable, so run one candidate per process:
 *
 *   lt_repro M N K BETA(0|1) BIAS(0|1) CANDIDATE [CLUSTER_SHAPE_ID (-1: as given)] [ITERS]
 *
 * Built with -DKILN_BENCH=ON (target lt_repro).
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_));                                                       \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)
#define LK(x)                                                                                                          \
    do {                                                                                                               \
        cublasStatus_t s_ = (x);                                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                             \
            printf("FAIL %s: cuBLAS status %d (%s)\n", #x, (int)s_, cudaGetErrorString(cudaGetLastError()));         \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* f32 -> f16 bits (truncating; the values here are small normals or zero) */
static uint16_t f2h(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;
    return (uint16_t)(sign | ((uint32_t)e << 10) | ((u >> 13) & 0x3ffu));
}

static int fill(void *dev, size_t n, unsigned seed) {
    uint16_t *h = malloc(n * sizeof *h);
    if (!h) return 1;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = f2h((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f);
    }
    const cudaError_t e = cudaMemcpy(dev, h, n * sizeof *h, cudaMemcpyHostToDevice);
    free(h);
    return e != cudaSuccess;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: lt_repro M N K BETA BIAS CANDIDATE [CLUSTER_SHAPE_ID] [ITERS]\n");
        return 2;
    }
    const int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]);
    const float beta = (float)atof(argv[4]), alpha = 1.f;
    const int bias_on = atoi(argv[5]), cand = atoi(argv[6]);
    const int cluster = argc > 7 ? atoi(argv[7]) : -1, iters = argc > 8 ? atoi(argv[8]) : 200;
    void *x, *w, *y, *z, *b, *ws, *other;
    const size_t WS = (size_t)32 << 20, OTHER = (size_t)256 << 20;
    CK(cudaMalloc(&x, (size_t)(M * K) * 2));
    CK(cudaMalloc(&w, (size_t)(N * K) * 2));
    CK(cudaMalloc(&y, (size_t)(M * N) * 2));
    CK(cudaMalloc(&z, (size_t)(M * N) * 2));
    CK(cudaMalloc(&b, (size_t)N * 2 + 256));
    CK(cudaMalloc(&ws, WS));
    CK(cudaMalloc(&other, OTHER));
    if (fill(x, (size_t)(M * K), 1) || fill(w, (size_t)(N * K), 2) || fill(z, (size_t)(M * N), 3) ||
        fill(b, (size_t)N, 4)) {
        printf("FAIL fill\n");
        return 1;
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasLtHandle_t lt;
    LK(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t op;
    LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias_on) {
        const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
    }
    /* column-major: W as (K, N) transposed, X as (K, M), Y as (N, M) */
    cublasLtMatrixLayout_t la, lb, ly;
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, (uint64_t)K, (uint64_t)N, K));
    LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, (uint64_t)K, (uint64_t)M, K));
    LK(cublasLtMatrixLayoutCreate(&ly, CUDA_R_16F, (uint64_t)N, (uint64_t)M, N));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = WS;
    const uint32_t al = 256;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ly, ly, pref, 8, res, &found));
    if (cand >= found) {
        printf("skip: candidate %d of %d\n", cand, found);
        return 0;
    }
    cublasLtMatmulAlgo_t algo = res[cand].algo;
    size_t need = res[cand].workspaceSize;
    if (cluster >= 0) {
        const uint16_t cl = (uint16_t)cluster;
        LK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl));
        cublasLtMatmulHeuristicResult_t chk;
        LK(cublasLtMatmulAlgoCheck(lt, op, la, lb, ly, ly, &algo, &chk));
        need = chk.workspaceSize;
    }
    int tile = -1, stages = -1, custom = -1;
    uint16_t cl = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl, NULL);
    printf("M=%lld N=%lld K=%lld beta=%g bias=%d cand %d/%d: tile %d stages %d custom %d cluster %u ws %zu: ",
           (long long)M, (long long)N, (long long)K, (double)beta, bias_on, cand, found, tile, stages, custom,
           (unsigned)cl, need);
    fflush(stdout);
    for (int i = 0; i < iters; i++) {
        CK(cudaMemsetAsync(other, i & 0xff, OTHER, s));
        LK(cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, z, ly, y, ly, &algo, ws, WS, s));
    }
    CK(cudaStreamSynchronize(s));
    printf("ok (%d back to back)\n", iters);
    return 0;
}
