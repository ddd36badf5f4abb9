/*
 * matmul.c — Gemm and MatMul through cuBLASLt, f32 / f16 / bf16.
 *
 *   Row-major products on a column-major library: a row-major (r, c) matrix is the
 *   column-major (c, r) matrix with the same leading dimension, so Y = A B (row-major) is
 *   computed as Y^T = B^T A^T (column-major): cuBLASLt's "A" is our B and its "B" is our A.
 *
 *   Precision: CUBLAS_COMPUTE_32F with f32 scale (never the TF32 compute types), so f32
 *   matches the CPU reference to rounding; f16 / bf16 inputs accumulate in f32 and the
 *   result is rounded once.
 *
 *   Gemm (opsets 11+): Y = alpha * op(A) op(B) + beta * C, A (M,K) or (K,M) with transA,
 *   B (K,N) or (N,K) with transB, C optional and broadcastable to (M,N) (rank 0, 1 or 2).
 *   A row-vector C (N) or (1,N) with beta = 1 is the bias of cuBLASLt's BIAS epilogue;
 *   any other C is first broadcast into Y, which cuBLASLt then reads as its C with beta.
 *
 *   kiln.FusedGemm (FUSED.md): Gemm's attributes plus `activation`: Y = act(Gemm). Relu
 *   rides on cuBLASLt's RELU_BIAS / RELU epilogues, GeluTanh (and Gelu in f16 / bf16:
 *   gelu_epilogue) on its GELU_BIAS / GELU ones; the other activations (and those when
 *   no epilogue applies) run as an in-place kernel on Y after the product. A residual Z
 *   (its fourth input) is cuBLASLt's C, or added by one pass after the product where that
 *   was timed faster (gemm_residual).
 *
 *   MatMul: numpy semantics. 1-D A is (1,K) and 1-D B is (K,1) (the 1 is dropped from
 *   the output); batch dims broadcast. Each operand's batch is either full (stride M*K /
 *   K*N) or broadcast (stride 0): one strided-batched call, or, when A's batch is full,
 *   not transposed and B is shared, one call with A's batches stacked into M. Mixed
 *   broadcasts ((2,1,..) x (1,3,..)), and shared operands that cuBLASLt declines, fall
 *   back to one call per output matrix.
 *
 *   Pointer alignment is passed to the heuristic (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), so
 *   buffers at any element-aligned offset are handled. Workspace: up to MATMUL_WS bytes.
 *
 *   Algorithm: with autotuning on (the kiln_cuda's, as for convolutions), the first call
 *   of a problem outside a stream capture times the heuristic's first LT_CANDIDATES
 *   algorithms on the caller's buffers (a warm-up, then the best of three) and keeps the
 *   rank of the fastest, in memory and in the disk cache beside the convolutions' choices
 *   (the key names cuBLASLt's version: the heuristic's order is the library's); the
 *   heuristic's first otherwise, when C is Y itself (timing would add C again), and for
 *   products under LT_TUNE_MIN_FLOPS (launch-bound: their single-call times are noise).
 */
#include "cuda_internal.h"
#include "grad_movegrad.h"
#include "../ops/einsum.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MATMUL_WS KILN_CUDA_GEMM_WS
#define LT_CANDIDATES 8
#define LT_TUNE_MIN_FLOPS 1e8

typedef struct mm {
    kiln_dtype dt;
    int64_t M, N, K;
    bool ta, tb;     /* A stored (K,M), B stored (N,K) */
    const void *A, *B;
    void *Y;
    int64_t batch;
    int64_t sA, sB, sY; /* batch strides in elements (0: shared) */
    float alpha, beta;  /* beta != 0: C (Y itself when C is NULL) is added */
    const void *C;      /* (M,N) like Y, read with beta; NULL: Y holds the C term already */
    cublasLtEpilogue_t epilogue; /* 0 (left unset: cuBLASLt's DEFAULT) or BIAS / RELU / RELU_BIAS */
    const void *bias;   /* (N): added to every row of Y by the *_BIAS epilogues */
    int64_t lda, ldb, ldy; /* row strides of A, B (as stored) and Y; 0: packed (K or M, N or K, N) */
} mm;

/* The largest power of two up to 256 that divides the address and the batch stride. */
static uint32_t align_of(const void *p, int64_t stride_bytes) {
    uintptr_t v = (uintptr_t)p | (uintptr_t)stride_bytes;
    uint32_t a = 256;
    while (a > 1 && v % a) a >>= 1;
    return a;
}

static cudaDataType_t lt_type(kiln_dtype t) {
    return t == KILN_F16 ? CUDA_R_16F : t == KILN_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static kiln_status set_batch(kiln_context *ctx, cublasLtMatrixLayout_t l, int64_t batch, int64_t stride) {
    if (batch <= 1) return KILN_OK;
    const int32_t count = (int32_t)batch;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                              &count, sizeof count));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &stride, sizeof stride));
    return KILN_OK;
}

kiln_status kiln_cuda_lt_reserve(kiln_cuda *cu, kiln_context *ctx) {
    if (cu->lt_ws_mode != KILN_CUDA_LT_WS_OWN) return KILN_OK;
    for (int i = 0; i <= cu->n_side; i++) {
        if (cu->lt_ws[i]) continue;
        const cudaError_t e = cudaMalloc(&cu->lt_ws[i], MATMUL_WS);
        if (e != cudaSuccess) {
            cu->lt_ws[i] = NULL;
            return kiln_fail(ctx, e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE,
                             "cudaMalloc of cuBLASLt's %zu-byte workspace for stream %d failed: %s", (size_t)MATMUL_WS,
                             i, cudaGetErrorString(e));
        }
    }
    return KILN_OK;
}

/* The workspace a product on cu's current stream gets (see lt_ws_mode): the stream's own,
 * the node's (ws), or none. Where the own one was never reserved (a product outside a plan),
 * it is made now, or, inside a graph capture, the product runs without one. */
static void lt_workspace(kiln_cuda *cu, kiln_context *ctx, void **ws, size_t *ws_bytes) {
    if (cu->lt_ws_mode == KILN_CUDA_LT_WS_SHARED) return;
    *ws = NULL;
    *ws_bytes = 0;
    if (cu->lt_ws_mode == KILN_CUDA_LT_WS_NONE) return;
    int k = 0;
    for (int i = 0; i < cu->n_side; i++)
        if (cu->stream == cu->side[i]) k = i + 1;
    if (!cu->lt_ws[k]) {
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(cu->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone ||
            kiln_cuda_lt_reserve(cu, ctx) != KILN_OK) {
            (void)cudaGetLastError();
            return;
        }
    }
    *ws = cu->lt_ws[k];
    *ws_bytes = MATMUL_WS;
}

/* A timed product's candidates in the stats log (KILN_CUDA_CONV_STATS_LOG=1): each one's
 * configuration as cuBLASLt describes it, its workspace and time, and the pick. */
static void note_timed(kiln_context *ctx, const char *key, const cublasLtMatmulHeuristicResult_t *res, int found,
                       const float *times, int pick) {
    char line[1600];
    int at = snprintf(line, sizeof line, "%s: ", key);
    for (int i = 0; i < found && at > 0 && (size_t)at < sizeof line; i++) {
        int id = -1, tile = -1, stages = -1, splitk = -1, red = -1, swz = -1, custom = -1;
        uint16_t cluster = 0;
        const cublasLtMatmulAlgo_t *a = &res[i].algo;
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom, NULL);
        cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, NULL);
        at += snprintf(line + at, sizeof line - (size_t)at, "%s[%d] id %d tile %d st %d sk %d red %d swz %d cu %d cl %u ws %zu: %.4f",
                       i ? ", " : "", i, id, tile, stages, splitk, red, swz, custom, (unsigned)cluster,
                       res[i].workspaceSize, (double)times[i]);
    }
    kiln_cuda_conv_stats_note(ctx, "gemm timed %s; picked [%d]", line, pick);
}

/* Whether candidate a may run product m. cuBLASLt 13.1 on an H100 faults ("unspecified launch
 * failure", the context lost) on one candidate of efficientnet_b7's 1x1 projections at batch
 * 128 (f16, M=401408 N=48 K=288, the bias epilogue and C = the residual, beta 1): tile 326
 * with a 1x4x1 cluster, when launched back to back (alone, with a memset between launches:
 * 4 of 4 runs of 300; the same algorithm with a 1x2x1, 2x1x1 or 1x1x1 cluster, or without
 * the bias or C, runs clean; bench/lt_repro.c, bench/NOTES.md). Autotune picked it on most
 * runs (0.1152 ms against 0.1167 for the next). So a product with a bias and C keeps to
 * clusters of at most 2 CTAs (or cuBLASLt's automatic choice). */
static bool lt_algo_safe(const mm *m, const cublasLtMatmulAlgo_t *a) {
    if (!m->bias || m->beta == 0.f) return true;
    uint16_t cl = CUBLASLT_CLUSTER_SHAPE_AUTO;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl, NULL) !=
        CUBLAS_STATUS_SUCCESS)
        return true;
    return cl == CUBLASLT_CLUSTER_SHAPE_AUTO || cl == CUBLASLT_CLUSTER_SHAPE_1x1x1 ||
           cl == CUBLASLT_CLUSTER_SHAPE_2x1x1 || cl == CUBLASLT_CLUSTER_SHAPE_1x2x1;
}

/* One cuBLASLt call for m. KILN_ERR_UNSUPPORTED when the heuristic offers no algorithm. */
static kiln_status lt_matmul(kiln_cuda *cu, kiln_context *ctx, const mm *m, void *ws, size_t ws_bytes) {
    cublasLtHandle_t lt;
    kiln_status st = kiln_cuda_lt(cu, ctx, &lt);
    if (st) return st;
    lt_workspace(cu, ctx, &ws, &ws_bytes);
    const cudaDataType_t t = lt_type(m->dt);
    const int64_t es = (int64_t)kiln_dtype_size(m->dt);
    const int64_t M = m->M, N = m->N, K = m->K;

    cublasLtMatmulDescOpaque_t op_store;
    cublasLtMatmulDesc_t op = &op_store;
    const cublasComputeType_t ct = m->dt == KILN_F32 && cu->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulDescInit(op, ct, CUDA_R_32F));
    const int32_t op_a = m->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our B */
    const int32_t op_b = m->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (m->epilogue != 0) {
        /* in the column-major view Y is (N, M): the bias runs along its N rows, i.e. it is
           indexed by our column, as a row vector C broadcast over Y's rows */
        KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &m->epilogue,
                                                                sizeof m->epilogue));
        if (m->bias)
            KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &m->bias,
                                                                    sizeof m->bias));
    }

    /* column-major views: our B as (N,K) [or (K,N) to transpose], our A as (K,M) [or
     * (M,K)], Y as (N,M) */
    cublasLtMatrixLayoutOpaque_t la_s, lb_s, ly_s;
    cublasLtMatrixLayout_t la = &la_s, lb = &lb_s, ly = &ly_s;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutInit(la, t, (uint64_t)(m->tb ? K : N),
                                                      (uint64_t)(m->tb ? N : K), m->ldb ? m->ldb : m->tb ? K : N));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutInit(lb, t, (uint64_t)(m->ta ? M : K),
                                                      (uint64_t)(m->ta ? K : M), m->lda ? m->lda : m->ta ? M : K));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatrixLayoutInit(ly, t, (uint64_t)N, (uint64_t)M, m->ldy ? m->ldy : N));
    if ((st = set_batch(ctx, la, m->batch, m->sB)) != KILN_OK ||
        (st = set_batch(ctx, lb, m->batch, m->sA)) != KILN_OK ||
        (st = set_batch(ctx, ly, m->batch, m->sY)) != KILN_OK)
        return st;

    cublasLtMatmulPreferenceOpaque_t pref_s;
    cublasLtMatmulPreference_t pref = &pref_s;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceInit(pref));
    const uint64_t wsb = ws ? (uint64_t)ws_bytes : 0;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &wsb, sizeof wsb));
    const bool batched = m->batch > 1;
    const uint32_t al_a = align_of(m->B, batched ? m->sB * es : 0);
    const uint32_t al_b = align_of(m->A, batched ? m->sA * es : 0);
    const uint32_t al_y = align_of(m->Y, batched ? m->sY * es : 0);
    const uint32_t al_c = m->C ? align_of(m->C, batched ? m->sY * es : 0) : al_y;
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                  &al_a, sizeof al_a));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                  &al_b, sizeof al_b));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                  &al_c, sizeof al_c));
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                  &al_y, sizeof al_y));

    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    memset(res, 0, sizeof res);
    int found = 0;
    /* small products are launch-bound: single-call times of a few µs rank algorithms by
     * noise (mnist-net's 64x10x128 products got 3 µs slower; bench/NOTES.md, v1.3), so they keep the
     * heuristic's first */
    const double flops = 2.0 * (double)M * (double)N * (double)K * (double)(m->batch > 1 ? m->batch : 1);
    const bool tune = cu->autotune && (m->C || m->beta == 0.f) && flops >= LT_TUNE_MIN_FLOPS;
    const bool guarded = m->bias && m->beta != 0.f; /* lt_algo_safe may turn the first down */
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ly, ly, pref,
                                                            tune || guarded ? LT_CANDIDATES : 1, res, &found));
    if (found < 1 || res[0].state != CUBLAS_STATUS_SUCCESS)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                         "cuBLASLt has no algorithm for a %s product (M=%lld N=%lld K=%lld batch=%lld, "
                         "%zu bytes of workspace)",
                         kiln_dtype_name(m->dt), (long long)M, (long long)N, (long long)K,
                         (long long)m->batch, ws_bytes);
    const void *c_in = m->C ? m->C : m->Y;
    bool safe[LT_CANDIDATES];
    int pick = -1;
    for (int i = 0; i < found; i++) {
        safe[i] = res[i].state == CUBLAS_STATUS_SUCCESS && lt_algo_safe(m, &res[i].algo);
        if (!safe[i] && res[i].state == CUBLAS_STATUS_SUCCESS) cu->stats.gemm_candidates_skipped++;
        if (safe[i] && pick < 0) pick = i;
    }
    if (pick < 0) pick = 0; /* none passes lt_algo_safe: the heuristic's first, as there is no other */
    if (tune && found > 1) {
        char key[KILN_ALGO_KEY];
        int kn = snprintf(key, sizeof key, "gemm cublasLt=%zu %s M=%lld N=%lld K=%lld ta=%d tb=%d batch=%lld ep=%d bias=%d beta=%g "
                 "align=%u,%u,%u,%u ws<=%zu",
                 cublasLtGetVersion(), kiln_dtype_name(m->dt), (long long)M, (long long)N, (long long)K, m->ta, m->tb,
                 (long long)m->batch, (int)m->epilogue, m->bias != NULL, (double)m->beta, al_a, al_b, al_c, al_y,
                 (size_t)wsb);
        if ((m->lda || m->ldb || m->ldy) && kn > 0 && (size_t)kn < sizeof key) /* strided operands */
            snprintf(key + kn, sizeof key - (size_t)kn, " ld=%lld,%lld,%lld s=%lld,%lld,%lld", (long long)m->lda,
                     (long long)m->ldb, (long long)m->ldy, (long long)m->sA, (long long)m->sB, (long long)m->sY);
        kiln_algo_entry *e = kiln_algo_cache_find(cu->algos, cu->n_algos, key);
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        const bool kept = e && e->algo >= 0 && e->algo < found && safe[e->algo];
        if (kept) {
            pick = e->algo;
        } else if (cudaStreamIsCapturing(cu->stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone) {
            /* not timed yet, or kept before lt_algo_safe turned it down: timed (again) */
            float best = INFINITY, times[LT_CANDIDATES];
            for (int i = 0; i < LT_CANDIDATES; i++) times[i] = INFINITY;
            cudaEvent_t ev[2];
            KILN_CUDA_CHECK(ctx, cudaEventCreate(&ev[0]));
            if (cudaEventCreate(&ev[1]) != cudaSuccess) {
                cudaEventDestroy(ev[0]);
                return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
            }
            for (int i = 0; i < found; i++) {
                if (!safe[i]) continue;
                float t_best = INFINITY;
                for (int r = 0; r < 4; r++) { /* the first run warms up */
                    float ms = 0.f;
                    if (cudaEventRecord(ev[0], cu->stream) != cudaSuccess ||
                        cublasLtMatmul(lt, op, &m->alpha, m->B, la, m->A, lb, &m->beta, c_in, ly, m->Y, ly, &res[i].algo,
                                       ws, ws ? ws_bytes : 0, cu->stream) != CUBLAS_STATUS_SUCCESS ||
                        cudaEventRecord(ev[1], cu->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
                        cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess) {
                        t_best = INFINITY;
                        (void)cudaGetLastError();
                        break;
                    }
                    if (r > 0 && ms < t_best) t_best = ms;
                }
                times[i] = t_best;
                if (t_best < best) {
                    best = t_best;
                    pick = i;
                }
            }
            cudaEventDestroy(ev[0]);
            cudaEventDestroy(ev[1]);
            note_timed(ctx, key, res, found, times, pick);
            kiln_algo_entry ne;
            memset(&ne, 0, sizeof ne);
            memcpy(ne.key, key, sizeof ne.key);
            ne.algo = pick;
            ne.ms = best < INFINITY ? best : 0.f;
            ne.fused = -1;
            if (!kiln_algo_cache_put(&cu->algos, &cu->n_algos, &cu->cap_algos, &ne))
                return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the matrix product algorithm cache");
            cu->stats.gemms_timed++;
            if (cu->algo_path[0] && kiln_algo_cache_store(cu->algo_path, cu->algo_prefix, &ne) == 0)
                cu->stats.algos_written++;
        }
    }
    KILN_CUBLASLT_CHECK(ctx, cublasLtMatmul(lt, op, &m->alpha, m->B, la, m->A, lb, &m->beta, c_in, ly, m->Y, ly,
                                            &res[pick].algo, ws, ws ? ws_bytes : 0, cu->stream));
    return KILN_OK;
}

kiln_status kiln_cuda_gemm_nt(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, int64_t rows, int64_t n, int64_t k,
                              const void *x, const void *w, const void *bias, const void *z, bool relu, void *y,
                              void *ws, size_t ws_bytes) {
    if (rows == 0 || n == 0) return KILN_OK;
    mm m;
    memset(&m, 0, sizeof m);
    m.dt = dt;
    m.M = rows;
    m.N = n;
    m.K = k;
    m.tb = true;
    m.A = x;
    m.B = w;
    m.Y = y;
    m.batch = 1;
    m.alpha = 1.f;
    m.beta = z ? 1.f : 0.f;
    m.C = z;
    m.bias = bias;
    m.epilogue = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                      : (relu ? CUBLASLT_EPILOGUE_RELU : (cublasLtEpilogue_t)0);
    if (bias && (uintptr_t)bias % 16) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "a bias at a less than 16-byte aligned address");
    return lt_matmul(cu, ctx, &m, ws, ws_bytes);
}

kiln_status kiln_cuda_ws_matmul(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    /* the node's workspace only where cuBLASLt takes it (KILN_CUDA_LT_WS=shared) */
    *bytes = cu->lt_ws_mode == KILN_CUDA_LT_WS_SHARED ? MATMUL_WS : 0;
    return kiln_cuda_lt_reserve(cu, c->kctx);
}

/* Whether cuBLASLt's GELU epilogues (the tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3)))) compute activation `kind` on dtype dt: GeluTanh always; ONNX's erf Gelu
 * in f16 / bf16 unless KILN_CUDA_GELU_EXACT=1. The two forms differ by at most 4.7e-4
 * (at x = -2.70, where Gelu is -0.0094), about a quarter of f16's spacing at 1 and below
 * bf16's at 0.125: the product's own rounding to the dtype is of that order. It saves the
 * pass over Y that the in-place activation costs (convnext_tiny's 18 GELUs after its
 * Linears: ~3.6 ms of 18.9 at batch 256 fp16 on an H100). f32 keeps the exact erf. */
static bool gelu_epilogue(kiln_cuda_act_kind kind, kiln_dtype dt) {
    if (kind == KILN_ACT_GELU_TANH) return true;
    if (kind != KILN_ACT_GELU || dt == KILN_F32) return false;
    const char *e = getenv("KILN_CUDA_GELU_EXACT");
    return !(e && strcmp(e, "1") == 0);
}

/* The host's monotonic clock, ms. */
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The residual as cuBLASLt's C (f: beta 1, the bias and an activation cuBLASLt has in its
 * epilogue), the others in place after it. */
static kiln_status residual_fused(kiln_cuda *cu, kiln_op_ctx *c, const mm *f, bool inside, const kiln_cuda_act *act) {
    kiln_status st = lt_matmul(cu, c->kctx, f, c->workspace, c->workspace_size);
    return !st && !inside ? kiln_cuda_act_inplace(cu, c->kctx, f->dt, f->Y, f->M * f->N, act) : st;
}

/* The same sum split: the product with the bias only (beta 0), then one pass Y = act(Y + Z)
 * (Z not in Y's storage). */
static kiln_status residual_split(kiln_cuda *cu, kiln_op_ctx *c, const mm *f, const void *z, const kiln_cuda_act *act) {
    mm p = *f;
    p.beta = 0.f;
    p.C = NULL;
    p.epilogue = p.bias ? CUBLASLT_EPILOGUE_BIAS : (cublasLtEpilogue_t)0;
    kiln_status st = lt_matmul(cu, c->kctx, &p, c->workspace, c->workspace_size);
    return st ? st : kiln_cuda_conv_epilogue(cu, c->kctx, f->dt, f->Y, NULL, z, f->M, f->N, 1, act);
}

/* Whether the residual product f runs split (residual_split) rather than fused: cuBLASLt's
 * algorithms with beta 1 ran slower than their beta 0 ones by more than C's bytes explain
 * (ViT-B/32's 12,800-row products at batch 256, bench/NOTES.md z23b), so with autotune both
 * are timed the first time the problem is met (outside a stream capture; each way a warm-up
 * that also times its cuBLASLt algorithms, then the best of three), the choice kept with the
 * algorithm choices (on the disk too). Fused otherwise, or when Z is in Y's storage;
 * KILN_CUDA_GEMM_RES=fused / split forces one way (cu->gemm_res). */
static kiln_status residual_choice(kiln_cuda *cu, kiln_op_ctx *c, const mm *f, const void *z, bool inside,
                                   const kiln_cuda_act *act, bool *split) {
    kiln_context *ctx = c->kctx;
    *split = cu->gemm_res == 2 && f->C;
    if (!cu->autotune || !f->C || cu->gemm_res) return KILN_OK;
    char key[KILN_ALGO_KEY];
    snprintf(key, sizeof key, "gemm-residual cublasLt=%zu %s M=%lld N=%lld K=%lld ta=%d tb=%d ep=%d act=%d align=%u,%u,%u,%u",
             cublasLtGetVersion(), kiln_dtype_name(f->dt), (long long)f->M, (long long)f->N, (long long)f->K, f->ta,
             f->tb, (int)f->epilogue, (int)act->kind, align_of(f->A, 0), align_of(f->B, 0), align_of(f->Y, 0),
             align_of(z, 0));
    const kiln_algo_entry *e = kiln_algo_cache_find(cu->algos, cu->n_algos, key);
    if (e) {
        *split = e->algo == 1;
        return KILN_OK;
    }
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cu->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) return KILN_OK;
    cudaEvent_t ev[2];
    KILN_CUDA_CHECK(ctx, cudaEventCreate(&ev[0]));
    if (cudaEventCreate(&ev[1]) != cudaSuccess) {
        cudaEventDestroy(ev[0]);
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
    }
    float t[2] = {INFINITY, INFINITY};
    kiln_status st = KILN_OK;
    for (int way = 0; way < 2 && !st; way++) {
        double host = 0.0; /* the host's enqueue time of the run before, ms */
        for (int r = 0; r < 4 && !st; r++) { /* the first run warms up (and times cuBLASLt's algorithms) */
            float ms = 0.f;
            /* the GPU held while the host enqueues (cuBLASLt's heuristic call, the launches), so
             * the events time the GPU's work: a captured graph replays it with no host work
             * (without the hold, vit_b_32's fc2 timed 0.42 ms fused, ~0.11 in the graph) */
            if (r > 0) st = kiln_cuda_delay(cu, 1.5 * host * 1e3 + 50.0 < 5000.0 ? 1.5 * host * 1e3 + 50.0 : 5000.0);
            if (!st && cudaEventRecord(ev[0], cu->stream) != cudaSuccess)
                st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventRecord failed");
            const double h0 = now_ms();
            if (!st) st = way ? residual_split(cu, c, f, z, act) : residual_fused(cu, c, f, inside, act);
            host = now_ms() - h0;
            if (!st && (cudaEventRecord(ev[1], cu->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
                        cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess))
                st = kiln_fail(ctx, KILN_ERR_DEVICE, "timing a residual product: %s", cudaGetErrorString(cudaGetLastError()));
            if (!st && r > 0 && ms < t[way]) t[way] = ms;
        }
        if (st == KILN_ERR_UNSUPPORTED && way == 1) { /* no algorithm for the split product: fused */
            st = KILN_OK;
            t[1] = INFINITY;
            break;
        }
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    if (st) return st;
    *split = t[1] < t[0];
    kiln_algo_entry ne;
    memset(&ne, 0, sizeof ne);
    snprintf(ne.key, sizeof ne.key, "%s", key);
    ne.algo = *split;
    ne.ms = t[*split];
    ne.fused = -1;
    if (!kiln_algo_cache_put(&cu->algos, &cu->n_algos, &cu->cap_algos, &ne))
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for the matrix product algorithm cache");
    if (cu->algo_path[0] && kiln_algo_cache_store(cu->algo_path, cu->algo_prefix, &ne) == 0) cu->stats.algos_written++;
    kiln_cuda_conv_stats_note(ctx, "gemm residual %s M=%lld N=%lld K=%lld: C in the product %.4f ms, split %.4f ms: %s",
             kiln_dtype_name(f->dt), (long long)f->M, (long long)f->N, (long long)f->K, t[0], t[1],
             *split ? "split" : "fused");
    return KILN_OK;
}

/* kiln.FusedGemm with a residual Z (Y's shape; C absent or a row with beta 1: the op's infer):
 * Z is cuBLASLt's C with beta 1, the row C its bias epilogue (RELU_BIAS / GELU_BIAS with the
 * activation inside where it has one), so the sum is written once: a transformer's second MLP
 * product and the residual Add after it; or, where residual_choice timed it faster (activation
 * none or Relu), the product with its bias and then one pass adding Z. Z in Y's storage: Y
 * holds the C term (fused, not timed: each timed run would add Z again). Without an algorithm
 * for the epilogue: the plain product with Z as C, the bias and activation by kiln's pass. */
static kiln_status gemm_residual(kiln_cuda *cu, kiln_op_ctx *c, const mm *m0, const kiln_tensor *cc,
                                 const kiln_tensor *z, const kiln_cuda_act *act, bool relu, bool gelu) {
    kiln_context *ctx = c->kctx;
    mm e = *m0;
    e.beta = 1.f;
    e.C = z->data == e.Y ? NULL : z->data;
    const bool bias = cc && (uintptr_t)cc->data % 16 == 0; /* cuBLASLt may reject a less aligned bias */
    const bool inside = relu || gelu;                       /* the activation in cuBLASLt's epilogue */
    if (bias || (!cc && inside)) {
        mm f = e;
        f.bias = bias ? cc->data : NULL;
        f.epilogue = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                          : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU);
        /* split only where the epilogue kernel computes the same activation (none or Relu:
         * cuBLASLt's GELU is the tanh form) */
        bool split = false;
        kiln_status st = act->kind == KILN_ACT_NONE || act->kind == KILN_ACT_RELU
                             ? residual_choice(cu, c, &f, z->data, inside, act, &split)
                             : KILN_OK;
        if (!st) st = split ? residual_split(cu, c, &f, z->data, act) : residual_fused(cu, c, &f, inside, act);
        if (st != KILN_ERR_UNSUPPORTED) return st;
    }
    if (!cc) { /* the plain product with Z as its C, then the activation's pass */
        kiln_status st = lt_matmul(cu, ctx, &e, c->workspace, c->workspace_size);
        return st ? st : kiln_cuda_act_inplace(cu, ctx, m0->dt, m0->Y, m0->M * m0->N, act);
    }
    /* a row C without its epilogue (no algorithm, or a less aligned bias): Y = Z (unless it
     * is Z) plus C's row on every row, then the product on top with Y as its C */
    if (e.C) KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(e.Y, z->data, kiln_tensor_nbytes(z), cudaMemcpyDeviceToDevice,
                                                  cu->stream));
    kiln_status st = kiln_cuda_add_channel_bias(cu, ctx, m0->dt, e.Y, cc->data, m0->M, m0->N, 1);
    e.C = NULL; /* Y holds Z + C */
    if (!st) st = lt_matmul(cu, ctx, &e, c->workspace, c->workspace_size);
    return st ? st : kiln_cuda_act_inplace(cu, ctx, m0->dt, m0->Y, m0->M * m0->N, act);
}

/* Gemm and kiln.FusedGemm: Y = act(alpha * op(A) op(B) + beta * C). With C a row vector
 * (N) or (1, N) and beta = 1, C goes to cuBLASLt as the bias of its BIAS / RELU_BIAS
 * epilogue (no broadcast of C into Y first); without C (or beta = 0) a Relu is the RELU
 * epilogue. Otherwise, or when cuBLASLt offers no algorithm with the epilogue, C is
 * broadcast into Y and read back with beta, and the activation runs in place after. */
static kiln_status gemm(kiln_cuda *cu, kiln_op_ctx *c, const kiln_cuda_act *act) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *a = c->in[0], *b = c->in[1]; // (M,K) or (K,M); (K,N) or (N,K)
    const kiln_tensor *cc = c->n_in > 2 ? c->in[2] : NULL;
    kiln_tensor *y = c->out[0]; // (M,N)
    mm m;
    memset(&m, 0, sizeof m);
    m.dt = y->dtype;
    m.ta = kiln_attr_int(c->node, "transA", 0) != 0;
    m.tb = kiln_attr_int(c->node, "transB", 0) != 0;
    m.M = m.ta ? a->dims[1] : a->dims[0];
    m.K = m.ta ? a->dims[0] : a->dims[1];
    m.N = m.tb ? b->dims[0] : b->dims[1];
    m.alpha = kiln_attr_float(c->node, "alpha", 1.0f);
    m.beta = kiln_attr_float(c->node, "beta", 1.0f);
    m.A = a->data;
    m.B = b->data;
    m.Y = y->data;
    m.batch = 1;
    if (m.M * m.N == 0) return KILN_OK;
    if (!cc) m.beta = 0.f;
    const bool row = cc && ((cc->ndim == 1 && cc->dims[0] == m.N) ||
                            (cc->ndim == 2 && cc->dims[0] == 1 && cc->dims[1] == m.N));
    const bool plain = act->kind == KILN_ACT_NONE, relu = act->kind == KILN_ACT_RELU;
    const bool gelu = gelu_epilogue(act->kind, m.dt);
    /* Silu, and Gelu where cuBLASLt's epilogue does not compute it: the bias epilogue, then
     * the activation in place, as the Gemm + FusedElementwise they replace did (not a pass
     * writing C into Y first) */
    const bool after = !gelu && (act->kind == KILN_ACT_SILU || act->kind == KILN_ACT_GELU ||
                                 act->kind == KILN_ACT_GELU_TANH);
    const kiln_tensor *z = c->n_in > 3 ? c->in[3] : NULL;
    if (z) return gemm_residual(cu, c, &m, cc, z, act, relu, gelu);
    if ((plain || relu || gelu || after) && row && m.beta == 1.f &&
        (uintptr_t)cc->data % 16 == 0 /* cuBLASLt may reject a less aligned bias */) {
        mm e = m;
        e.epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
        e.bias = cc->data;
        e.beta = 0.f;
        kiln_status st = lt_matmul(cu, ctx, &e, c->workspace, c->workspace_size);
        if (!st && after) st = kiln_cuda_act_inplace(cu, ctx, m.dt, y->data, m.M * m.N, act);
        if (st != KILN_ERR_UNSUPPORTED) return st;
    } else if ((relu || gelu) && m.beta == 0.f) {
        mm e = m;
        e.epilogue = relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU;
        kiln_status st = lt_matmul(cu, ctx, &e, c->workspace, c->workspace_size);
        if (st != KILN_ERR_UNSUPPORTED) return st;
    }
    if (cc && m.beta != 0.f) {
        const int64_t cm = cc->ndim == 2 ? cc->dims[0] : 1;
        const int64_t cn = cc->ndim >= 1 ? cc->dims[cc->ndim - 1] : 1;
        kiln_status st = kiln_cuda_broadcast_2d(cu, ctx, m.dt, y->data, cc->data, m.M, m.N, cm, cn);
        if (st) return st;
    } else {
        m.beta = 0.f; /* without C, Y is not read */
    }
    kiln_status st = lt_matmul(cu, ctx, &m, c->workspace, c->workspace_size);
    if (!st) st = kiln_cuda_act_inplace(cu, ctx, m.dt, y->data, m.M * m.N, act);
    return st;
}

kiln_status kiln_cuda_k_gemm(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_cuda_act none = {KILN_ACT_NONE, 0.f, 0.f};
    return gemm(cu, c, &none);
}

kiln_status kiln_cuda_k_fused_gemm(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_cuda_act act;
    char why[128];
    if (!kiln_cuda_act_get(c->node, true, &act, why, sizeof why))
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%s", why);
    return gemm(cu, c, &act);
}

/* Einsum whose plan is one GEMM (kiln_einsum_as_gemm): one strided-batched cuBLASLt
 * call on the operands where they lie (transposes as op flags, row strides as leading
 * dimensions). KILN_ERR_UNSUPPORTED when cuBLASLt has no algorithm (the caller falls back
 * to the elementwise kernel). */
kiln_status kiln_cuda_einsum_gemm(kiln_cuda *cu, kiln_op_ctx *c, const kiln_einsum_gemm *g) {
    mm m;
    memset(&m, 0, sizeof m);
    m.dt = c->out[0]->dtype;
    m.M = g->M;
    m.N = g->N;
    m.K = g->K;
    m.ta = g->ta;
    m.tb = g->tb;
    m.lda = g->lda;
    m.ldb = g->ldb;
    m.ldy = g->ldy;
    m.A = c->in[g->a]->data;
    m.B = c->in[g->b]->data;
    m.Y = c->out[0]->data;
    m.batch = g->batch;
    m.sA = g->sa;
    m.sB = g->sb;
    m.sY = g->sy;
    m.alpha = 1.f;
    return lt_matmul(cu, c->kctx, &m, c->workspace, c->workspace_size);
}

/* How operand batch strides (in matrices, over the output's batch dims) map to one
 * strided batch: 0 shared, 1 full, -1 neither. */
static int batch_kind(int nd, const int64_t *dims, const int64_t *st) {
    bool zero = true, full = true;
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (dims[d] == 1) continue; /* any stride will do on a size-1 dim */
        zero = zero && st[d] == 0;
        full = full && st[d] == s;
        s *= dims[d];
    }
    return zero ? 0 : full ? 1 : -1;
}

kiln_status kiln_cuda_k_matmul(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *a = c->in[0], *b = c->in[1]; // (..., M, K) or (K); (..., K, N) or (K)
    kiln_tensor *y = c->out[0];
    const bool a1 = a->ndim == 1, b1 = b->ndim == 1;
    mm m;
    memset(&m, 0, sizeof m);
    m.dt = y->dtype;
    m.M = a1 ? 1 : a->dims[a->ndim - 2];
    m.K = a->dims[a->ndim - 1];
    m.N = b1 ? 1 : b->dims[b->ndim - 1];
    m.alpha = 1.f;
    m.beta = 0.f;
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    if (m.K == 0) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "an empty inner dimension");

    /* batch dims: the output's, and each operand's strides over them (in matrices) */
    const int na = a1 ? 0 : a->ndim - 2, nb = b1 ? 0 : b->ndim - 2;
    int nd = 0;
    int64_t bd[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    if (!kiln_broadcast_shape(na, a->dims, nb, b->dims, &nd, bd))
        return kiln_fail(ctx, KILN_ERR_SHAPE, "batch dims do not broadcast");
    kiln_broadcast_strides(na, a->dims, nd, bd, sa);
    kiln_broadcast_strides(nb, b->dims, nd, bd, sb);
    const int64_t batch = kiln_numel(nd, bd);
    const int64_t mk = m.M * m.K, kn = m.K * m.N, mn = m.M * m.N;
    const int ka = batch_kind(nd, bd, sa), kb = batch_kind(nd, bd, sb);
    void *ws = c->workspace;
    const size_t ws_bytes = c->workspace_size;

    if (ka >= 0 && kb >= 0) {
        m.A = a->data;
        m.B = b->data;
        m.Y = y->data;
        if (ka == 1 && kb == 0 && !m.ta) { /* A's batches stacked into M against one B */
            m.M *= batch;
            m.batch = 1;
        } else {
            m.batch = batch;
            m.sA = ka ? mk : 0;
            m.sB = kb ? kn : 0;
            m.sY = mn;
        }
        kiln_status st = lt_matmul(cu, ctx, &m, ws, ws_bytes);
        /* a shared operand (batch stride 0) that no algorithm takes: one call per matrix */
        if (st != KILN_ERR_UNSUPPORTED || m.batch <= 1 || (m.sA && m.sB)) return st;
        m.M = a1 ? 1 : a->dims[a->ndim - 2];
    }
    /* mixed broadcast: one product per output matrix */
    const size_t es = kiln_dtype_size(m.dt);
    int64_t idx[KILN_MAX_DIMS] = {0};
    m.batch = 1;
    for (int64_t i = 0; i < batch; i++) {
        int64_t oa = 0, ob = 0, r = i;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = r % bd[d];
            r /= bd[d];
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
        }
        m.A = (const char *)a->data + (size_t)(oa * mk) * es;
        m.B = (const char *)b->data + (size_t)(ob * kn) * es;
        m.Y = (char *)y->data + (size_t)(i * mn) * es;
        kiln_status st = lt_matmul(cu, ctx, &m, ws, ws_bytes);
        if (st) return st;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------ MatMul's gradients */

/* kiln.MatMulGradA(dY, A, B) = dY @ B^T and kiln.MatMulGradB(dY, A, B) = A^T @ dY per batch
 * entry of Y, summed over the entries that broadcast the operand, in its shape (1-D
 * included: (K) is (1, K) for A and (K, 1) for B, as in MatMul). The operand's batch full:
 * one strided-batched call (dA with a shared B: dY's batches stacked into M). dB with a
 * shared B and a full A: one call with the batches stacked into the inner dim (A and dY as
 * (batch*M, K) and (batch*M, N)). Otherwise one call per entry of Y, the first of each
 * output matrix writing it and the later ones adding to it (beta = 1). */
static kiln_status matmul_grad(kiln_cuda *cu, kiln_op_ctx *c, bool grad_b) {
    kiln_context *ctx = c->kctx;
    const kiln_tensor *dy = c->in[0], *a = c->in[1], *b = c->in[2]; // (batch.., M, N), (.., M, K), (.., K, N)
    kiln_tensor *out = c->out[0];                                   // like A (grad_b: like B)
    const bool a1 = a->ndim == 1, b1 = b->ndim == 1;
    const int64_t M = a1 ? 1 : a->dims[a->ndim - 2], K = a->dims[a->ndim - 1], N = b1 ? 1 : b->dims[b->ndim - 1];
    const size_t es = kiln_dtype_size(out->dtype);
    if (kiln_tensor_numel(out) == 0) return KILN_OK;
    const int na = a1 ? 0 : a->ndim - 2, nb = b1 ? 0 : b->ndim - 2;
    int nd = 0;
    int64_t bd[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    if (!kiln_broadcast_shape(na, a->dims, nb, b->dims, &nd, bd))
        return kiln_fail(ctx, KILN_ERR_SHAPE, "batch dims do not broadcast");
    kiln_broadcast_strides(na, a->dims, nd, bd, sa);
    kiln_broadcast_strides(nb, b->dims, nd, bd, sb);
    const int64_t batch = kiln_numel(nd, bd);
    const int64_t mk = M * K, kn = K * N, mn = M * N;
    const int ka = batch_kind(nd, bd, sa), kb = batch_kind(nd, bd, sb);
    const int64_t *so = grad_b ? sb : sa; /* the operand's batch strides */
    const int ko = grad_b ? kb : ka;
    const int64_t inner = grad_b ? M : N;
    if (inner == 0 || batch == 0) { /* an empty sum */
        KILN_CUDA_CHECK(ctx, cudaMemsetAsync(out->data, 0, kiln_tensor_nbytes(out), cu->stream));
        return KILN_OK;
    }
    void *ws = c->workspace;
    const size_t ws_bytes = c->workspace_size;
    /* one product: out (P, Q) = L (P, inner) R (inner, Q) */
    mm m;
    memset(&m, 0, sizeof m);
    m.dt = out->dtype;
    m.alpha = 1.f;
    if (!grad_b) { /* dA (M, K) = dY (M, N) B^T, B stored (K, N) */
        m.M = M;
        m.N = K;
        m.K = N;
        m.tb = true;
    } else { /* dB (K, N) = A^T dY, A stored (M, K) */
        m.M = K;
        m.N = N;
        m.K = M;
        m.ta = true;
    }
    const int64_t so_mat = grad_b ? kn : mk; /* elements of one output matrix */
    if (ko == 1 && (grad_b ? ka : kb) >= 0) {
        m.A = grad_b ? a->data : dy->data;
        m.B = grad_b ? dy->data : b->data;
        m.Y = out->data;
        if (!grad_b && kb == 0) { /* dY's batches stacked into M against one B */
            m.M *= batch;
            m.batch = 1;
        } else {
            m.batch = batch;
            m.sA = grad_b ? (ka ? mk : 0) : mn;
            m.sB = grad_b ? mn : (kb ? kn : 0);
            m.sY = so_mat;
        }
        kiln_status st = lt_matmul(cu, ctx, &m, ws, ws_bytes);
        if (st != KILN_ERR_UNSUPPORTED || m.batch <= 1 || (m.sA && m.sB)) return st;
        m.M = grad_b ? K : M; /* a shared operand no algorithm takes: the loop below */
    } else if (grad_b && ko == 0 && ka == 1) {
        m.K = batch * M; /* A (batch*M, K) and dY (batch*M, N) */
        m.A = a->data;
        m.B = dy->data;
        m.Y = out->data;
        m.batch = 1;
        return lt_matmul(cu, ctx, &m, ws, ws_bytes);
    }
    /* one product per entry of Y; an entry whose index is 0 on every dim the operand is
     * broadcast over is the first to reach its output matrix */
    m.batch = 1;
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t i = 0; i < batch; i++) {
        int64_t oa = 0, ob = 0, oo = 0, r = i;
        bool first = true;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = r % bd[d];
            r /= bd[d];
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
            oo += idx[d] * so[d];
            if (so[d] == 0 && idx[d] != 0) first = false;
        }
        const void *dyi = (const char *)dy->data + (size_t)(i * mn) * es;
        m.A = grad_b ? (const void *)((const char *)a->data + (size_t)(oa * mk) * es) : dyi;
        m.B = grad_b ? dyi : (const void *)((const char *)b->data + (size_t)(ob * kn) * es);
        m.Y = (char *)out->data + (size_t)(oo * so_mat) * es;
        m.beta = first ? 0.f : 1.f;
        m.C = NULL;
        kiln_status st = lt_matmul(cu, ctx, &m, ws, ws_bytes);
        if (st) return st;
    }
    return KILN_OK;
}

kiln_status kiln_cuda_k_matmul_grad_a(kiln_cuda *cu, kiln_op_ctx *c) { return matmul_grad(cu, c, false); }

kiln_status kiln_cuda_k_matmul_grad_b(kiln_cuda *cu, kiln_op_ctx *c) { return matmul_grad(cu, c, true); }
