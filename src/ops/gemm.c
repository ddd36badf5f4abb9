/*
 * gemm.c — Gemm (opsets 11..21): Y = alpha * A' @ B' + beta * C.
 *   A (M, K), or (K, M) with transA; B (K, N), or (N, K) with transB; optional C broadcast
 *   unidirectionally to (M, N): a scalar, (N), (1, N), (M, 1), (1, 1) or (M, N).
 *   Y (M, N). Attributes alpha, beta (default 1), transA, transB (default 0).
 *   Dtypes: f32 and f64 through cblas_sgemm / cblas_dgemm; f16 / bf16 computed in f32.
 *   Integer Gemm is rejected (KILN_ERR_TYPE): float alpha/beta have no agreed integer
 *   meaning and no exporter emits it.
 * Method: Y is filled with beta * C (broadcast), then one gemm with beta = 1 adds the
 *   product, split over the threads by kiln_gemm.
 * Gradient: dA and dB are Gemm nodes (transA / transB absorb the transposes), dC is
 *   kiln.ReduceSumTo(dY, C) when beta = 1, else kiln.GemmGradC(dY, C) = beta * that sum.
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <math.h>
#include <stdio.h>

typedef struct gemm_shape {
    int64_t M, N, K;
    bool ta, tb;
} gemm_shape;

static kiln_status shape_get(kiln_op_ctx *c, gemm_shape *s) {
    const kiln_tensor *a = c->in[0], *b = c->in[1];
    const kiln_tensor *cc = c->n_in > 2 ? c->in[2] : NULL;
    char as[128], bs[128];
    KILN_OP_CHECK(c, kiln_dtype_is_float(a->dtype), KILN_ERR_TYPE,
                  "A dtype %s is not supported (float dtypes only)", kiln_dtype_name(a->dtype));
    KILN_OP_CHECK(c, b->dtype == a->dtype && (!cc || cc->dtype == a->dtype), KILN_ERR_TYPE,
                  "B and C must have A's dtype %s", kiln_dtype_name(a->dtype));
    KILN_OP_CHECK(c, a->ndim == 2 && b->ndim == 2, KILN_ERR_SHAPE,
                  "A and B must be matrices (rank 2)");
    s->ta = kiln_attr_int(c->node, "transA", 0) != 0;
    s->tb = kiln_attr_int(c->node, "transB", 0) != 0;
    s->M = a->dims[s->ta ? 1 : 0];
    s->K = a->dims[s->ta ? 0 : 1];
    s->N = b->dims[s->tb ? 0 : 1];
    int64_t kb = b->dims[s->tb ? 1 : 0];
    KILN_OP_CHECK(c, kb == s->K, KILN_ERR_SHAPE,
                  "inner dims differ: A %s%s gives K = %lld, B %s%s gives K = %lld",
                  kiln_shape_str(a, as, sizeof as), s->ta ? " (transposed)" : "",
                  (long long)s->K, kiln_shape_str(b, bs, sizeof bs),
                  s->tb ? " (transposed)" : "", (long long)kb);
    if (cc) {
        KILN_OP_CHECK(c, cc->ndim <= 2, KILN_ERR_SHAPE, "C must have rank <= 2");
        bool ok = true;
        if (cc->ndim >= 1) ok = cc->dims[cc->ndim - 1] == 1 || cc->dims[cc->ndim - 1] == s->N;
        if (cc->ndim == 2) ok = ok && (cc->dims[0] == 1 || cc->dims[0] == s->M);
        KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "C does not broadcast to (M, N) = (%lld, %lld)",
                      (long long)s->M, (long long)s->N);
    }
    KILN_OP_CHECK(c, kiln_blas_fits(s->M) && kiln_blas_fits(s->N) && kiln_blas_fits(s->K),
                  KILN_ERR_UNSUPPORTED, "(M, N, K) = (%lld, %lld, %lld) exceeds the BLAS int range",
                  (long long)s->M, (long long)s->N, (long long)s->K);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    gemm_shape s = {0};
    kiln_status st = shape_get(c, &s);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, 2, KT_DIMS(s.M, s.N));
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) +
           (c->n_in > 2 ? kiln_stage_size(c->in[2]) : 0) + kiln_stage_size(c->out[0]);
}

/* y (M, N) = beta * C broadcast; C's strides are 0 along its broadcast dims. */
static void fill_c(bool dbl, void *y, const void *cp, const kiln_tensor *ct, int64_t M,
                   int64_t N, double beta) {
    int64_t rs = 0, cs = 0;
    if (ct->ndim >= 1 && ct->dims[ct->ndim - 1] == N && N > 1) cs = 1;
    if (ct->ndim == 2 && ct->dims[0] == M && M > 1) rs = ct->dims[1];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            if (dbl)
                ((double *)y)[i * N + j] = beta * ((const double *)cp)[i * rs + j * cs];
            else
                ((float *)y)[i * N + j] = (float)beta * ((const float *)cp)[i * rs + j * cs];
        }
}

static kiln_status forward(kiln_op_ctx *c) {
    gemm_shape s = {0};
    kiln_status st = shape_get(c, &s);
    if (st != KILN_OK) return st;
    const bool dbl = c->in[0]->dtype == KILN_F64;
    const kiln_tensor *ct = c->n_in > 2 ? c->in[2] : NULL;
    const double alpha = kiln_attr_float(c->node, "alpha", 1.0f);
    const double beta = kiln_attr_float(c->node, "beta", 1.0f);
    char *ws = c->workspace;
    const void *A = kiln_stage_in(c->in[0], &ws);  // (M, K) or (K, M)
    const void *B = kiln_stage_in(c->in[1], &ws);  // (K, N) or (N, K)
    const void *C = kiln_stage_in(ct, &ws);        // broadcast to (M, N), or NULL
    void *Y = kiln_stage_out(c->out[0], &ws);      // (M, N)
    /* beta == 0 ignores C entirely (as onnxruntime does), so an inf in C gives no NaN. */
    const bool use_c = C && beta != 0;
    if (use_c) fill_c(dbl, Y, C, ct, s.M, s.N, beta);
    kiln_gemm(dbl, s.ta, s.tb, s.M, s.N, s.K, alpha, A, s.ta ? s.M : s.K, B, s.tb ? s.K : s.N,
              use_c ? 1.0 : 0.0, Y, s.N);
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ gradient */

/* With A' = op(A), B' = op(B): dA' = alpha dY B'^T and dB' = alpha A'^T dY, each one Gemm
 * whose transA / transB absorb the transposes (dA = dA'^T when transA, dB likewise):
 *   dA = Gemm(dY, B, transB = !transB)            dA = Gemm(B, dY, transA = transB, transB = 1)
 *   dB = Gemm(A, dY, transA = !transA)            dB = Gemm(dY, A, transA = 1, transB = transA)
 * (left: without the transpose, right: with it). dC = beta dY summed over C's broadcast
 * dims: kiln.ReduceSumTo when beta = 1, else kiln.GemmGradC. */
static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    const bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
    const double alpha = kiln_attr_float(n, "alpha", 1.0f);
    const double beta = kiln_attr_float(n, "beta", 1.0f);
    const int a = n->in[0], b = n->in[1], c = n->n_in > 2 ? n->in[2] : -1, dy = g->dy[0];
    char attrs[96];
    if (g->need[0]) {
        snprintf(attrs, sizeof attrs, "alpha=%.9g;transA=%d;transB=%d", alpha, ta ? tb : 0,
                 ta ? 1 : !tb);
        g->dx[0] = kiln_grad_emit(g, NULL, "Gemm", 2, ta ? (int[]){b, dy} : (int[]){dy, b}, 1,
                                  NULL, false, attrs);
        if (g->dx[0] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (g->need[1]) {
        snprintf(attrs, sizeof attrs, "alpha=%.9g;transA=%d;transB=%d", alpha, tb ? 1 : !ta,
                 tb ? ta : 0);
        g->dx[1] = kiln_grad_emit(g, NULL, "Gemm", 2, tb ? (int[]){dy, a} : (int[]){a, dy}, 1,
                                  NULL, false, attrs);
        if (g->dx[1] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (c >= 0 && g->need[2]) {
        if (beta == 1) {
            g->dx[2] = kiln_grad_unbroadcast(g, dy, c);
        } else {
            snprintf(attrs, sizeof attrs, "beta=%.9g", beta);
            g->dx[2] = kiln_grad_emit(g, "kiln", "GemmGradC", 2, (int[]){dy, c}, 1, NULL, false,
                                      attrs);
        }
        if (g->dx[2] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

/* kiln.GemmGradC(dY, C) -> dC = beta * dY (M, N) summed down to C's shape (C broadcasts
 * to (M, N) as Gemm allows; only C's shape is read). Sums in double. */
static kiln_status gc_infer(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *cc = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(dy->dtype) && cc->dtype == dy->dtype, KILN_ERR_TYPE,
                  "dY and C must have the same float dtype");
    KILN_OP_CHECK(c, dy->ndim == 2 && cc->ndim <= 2, KILN_ERR_SHAPE,
                  "dY must be a matrix and C have rank <= 2");
    const int64_t M = dy->dims[0], N = dy->dims[1];
    bool ok = true;
    if (cc->ndim >= 1) ok = cc->dims[cc->ndim - 1] == 1 || cc->dims[cc->ndim - 1] == N;
    if (cc->ndim == 2) ok = ok && (cc->dims[0] == 1 || cc->dims[0] == M);
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "C does not broadcast to dY's (%lld, %lld)",
                  (long long)M, (long long)N);
    kiln_tensor_set_shape(c->out[0], dy->dtype, cc->ndim, cc->dims);
    return KILN_OK;
}

static size_t gc_workspace(const kiln_op_ctx *c) {
    return (size_t)kiln_tensor_numel(c->in[1]) * sizeof(double);
}

static kiln_status gc_forward(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *cc = c->in[1];
    const int64_t M = dy->dims[0], N = dy->dims[1], nc = kiln_tensor_numel(cc);
    const double beta = kiln_attr_float(c->node, "beta", 1.0f);
    /* C's strides over (M, N), 0 along broadcast dims (as fill_c reads it) */
    int64_t rs = 0, cs = 0;
    if (cc->ndim >= 1 && cc->dims[cc->ndim - 1] == N && N > 1) cs = 1;
    if (cc->ndim == 2 && cc->dims[0] == M && M > 1) rs = cc->dims[1];
    double *acc = c->workspace;
    for (int64_t k = 0; k < nc; k++) acc[k] = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const int64_t e = i * N + j;
            const double v = dy->dtype == KILN_F32   ? ((const float *)dy->data)[e]
                             : dy->dtype == KILN_F64 ? ((const double *)dy->data)[e]
                                                     : kiln_get_f64(dy, e);
            acc[i * rs + j * cs] += v;
        }
    /* beta = 0: the forward never read C, so its gradient is exactly 0 (even where dY is
     * not finite) */
    for (int64_t k = 0; k < nc; k++) kiln_set_f64(c->out[0], k, beta == 0 ? 0 : beta * acc[k]);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* The oracle for the BLAS path: the textbook triple loop in double. */
static kiln_tensor *direct(const kiln_tensor *a, const kiln_tensor *b, const kiln_tensor *cc,
                           bool ta, bool tb, double alpha, double beta, int64_t M, int64_t N,
                           int64_t K) {
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(M, N), NULL);
    if (!y) return NULL;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += kiln_get_f64(a, ta ? k * M + i : i * K + k) *
                       kiln_get_f64(b, tb ? j * K + k : k * N + j);
            /* cc is (M, N) or (N) in these tests */
            double cv = cc ? kiln_get_f64(cc, cc->ndim == 2 ? i * N + j : j) : 0;
            kiln_set_f64(y, i * N + j, alpha * acc + beta * cv);
        }
    return y;
}

static int random_case(const char *label, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                       double alpha, double beta, int c_rank, uint64_t seed) {
    char attrs[128];
    snprintf(attrs, sizeof attrs, "transA=%d;transB=%d;alpha=%.4f;beta=%.4f", ta, tb, alpha,
             beta);
    kiln_tensor *in[3] = {
        ta ? kt_rand(KILN_F32, 2, KT_DIMS(K, M), -1, 1, seed)
           : kt_rand(KILN_F32, 2, KT_DIMS(M, K), -1, 1, seed),
        tb ? kt_rand(KILN_F32, 2, KT_DIMS(N, K), -1, 1, seed + 1)
           : kt_rand(KILN_F32, 2, KT_DIMS(K, N), -1, 1, seed + 1),
        c_rank == 2   ? kt_rand(KILN_F32, 2, KT_DIMS(M, N), -1, 1, seed + 2)
        : c_rank == 1 ? kt_rand(KILN_F32, 1, KT_DIMS(N), -1, 1, seed + 2)
                      : NULL};
    kiln_tensor *want = direct(in[0], in[1], in[2], ta, tb, alpha, beta, M, N, K);
    return kiln_optest("Gemm", attrs, 3, in, 1, &want, 1e-6 * (double)K, 1e-5, label);
}

static int test(void) {
    int fails = 0;
    /* Fixed cases; expected values computed once with numpy (alpha * A' @ B' + beta * C). */
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 2, KT_DIMS(4, 3), KT_VALS(2, -3, -2, -2, -2, 2, 3, 1, -3, -3, -1,
                0)),
            kt_make(KILN_F32, 2, KT_DIMS(5, 4), KT_VALS(1, 0, -2, -2, 1, 2, -3, -3, 0, -1, 3, 0,
                -1, 0, 1, 1, -2, 2, 2, 3)),
            kt_make(KILN_F32, 2, KT_DIMS(1, 5), KT_VALS(2, -2, -1, 1, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 5), KT_VALS(1.2, -1.2, 2.4, -0.15, -2.4, -0.05,
                -2.45, 0.9, 1.1, 0.6, 1.7, 2.05, -3.1, 0.1, 0.85)),
        };
        fails += kiln_optest("Gemm", "alpha=0.25;beta=0.35;transA=1;transB=1", 3, in, 1, want,
                             1e-6, 1e-6, "gemm all attributes, C (1,N)");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 3, -1, 3, -3, -3, 3, 3, -1, -3, -1,
                -3)),
            kt_make(KILN_F32, 2, KT_DIMS(4, 2), KT_VALS(3, 1, 1, -2, 0, -2, 2, 0)),
            kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(-3, -2, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(9, -6, -8, -5, -11, 8)),
        };
        fails += kiln_optest("Gemm", "", 3, in, 1, want, 0, 0, "gemm C (M,1)");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 3, -1, 3, -3, -3, 3, 3, -1, -3, -1,
                -3)),
            kt_make(KILN_F32, 2, KT_DIMS(4, 2), KT_VALS(3, 1, 1, -2, 0, -2, 2, 0)),
            kt_scalar(KILN_F32, 2.5),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(17, 2, -1, 2, -7, 12)),
        };
        fails += kiln_optest("Gemm", "beta=2", 3, in, 1, want, 0, 0,
                             "gemm scalar C, integer beta text");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 3, -1, 3, -3, -3, 3, 3, -1, -3, -1,
                -3)),
            kt_make(KILN_F32, 2, KT_DIMS(4, 2), KT_VALS(3, 1, 1, -2, 0, -2, 2, 0)),
            kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, -1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(-12, 2, 6, 2, 12, -8)),
        };
        fails += kiln_optest("Gemm", "alpha=-1.0", 3, in, 1, want, 0, 0, "gemm C (N)");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 3, -1, 3, -3, -3, 3, 3, -1, -3, -1,
                -3)),
            kt_make(KILN_F32, 2, KT_DIMS(4, 2), KT_VALS(3, 1, 1, -2, 0, -2, 2, 0)),
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(-2, -3, 1, 1, 0, 3)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(10, -6, -5, -2, -12, 10)),
        };
        fails += kiln_optest("Gemm", "", 3, in, 1, want, 0, 0, "gemm C (M,N)");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(1, 3, -1, 3, -3, -3, 3, 3, -1, -3, -1,
                -3)),
            kt_make(KILN_F32, 2, KT_DIMS(4, 2), KT_VALS(3, 1, 1, -2, 0, -2, 2, 0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(12, -3, -6, -3, -12, 7)),
        };
        fails += kiln_optest("Gemm", "", 2, in, 1, want, 0, 0, "gemm no C");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(-0.586, 0.26, -0.404, 0.484, 0.444,
                -0.563)),
            kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(0.66, 0.315, 0.366, 0.64, -0.143,
                0.517)),
            kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.757, -0.795)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-0.300586, -1.329132, 0.758363,
                -0.4647045)),
        };
        fails += kiln_optest("Gemm", "alpha=1.5;beta=0.5;transB=1", 3, in, 1, want, 1e-12, 0,
                             "gemm f64 transB");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F16, 2, KT_DIMS(3, 2), KT_VALS(1, 2, 1, -1, 3, 0)),
            kt_make(KILN_F16, 2, KT_DIMS(3, 3), KT_VALS(-1, -2, -2, 1, 2, -1, 1, 3, -2)),
            kt_make(KILN_F16, 2, KT_DIMS(1, 1), KT_VALS(-2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 2, KT_DIMS(2, 3), KT_VALS(1, 7, -11, -5, -8, -5)),
        };
        fails += kiln_optest("Gemm", "transA=1", 3, in, 1, want, 0, 0, "gemm f16 transA C (1,1)");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_BF16, 2, KT_DIMS(3, 2), KT_VALS(1, 2, 1, -1, 3, 0)),
            kt_make(KILN_BF16, 2, KT_DIMS(3, 3), KT_VALS(-1, -2, -2, 1, 2, -1, 1, 3, -2)),
            kt_make(KILN_BF16, 2, KT_DIMS(1, 1), KT_VALS(-2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_BF16, 2, KT_DIMS(2, 3), KT_VALS(1, 7, -11, -5, -8, -5)),
        };
        fails += kiln_optest("Gemm", "transA=1", 3, in, 1, want, 0, 0,
                             "gemm bf16 transA C (1,1)");
    }

    /* BLAS path against the triple loop on random inputs. */
    fails += random_case("gemm random", 37, 29, 53, false, false, 1.0, 1.0, 2, 201);
    fails += random_case("gemm random transposed", 70, 45, 130, true, true, 0.75, -1.5, 1, 211);
    fails += random_case("gemm random large", 192, 160, 256, false, true, 1.0, 0.0, 0, 221);
    /* wider than tall: kiln_gemm splits the columns of C (blocks of B's rows or columns) */
    fails += random_case("gemm random wide", 40, 150, 100, false, false, 1.0, 1.0, 2, 231);
    fails += random_case("gemm random wide transposed", 40, 150, 100, true, true, 0.5, 2.0, 1,
                         241);
    /* Gradient rule against finite differences: all transposes, alpha and beta (beta = 1
     * sums C's gradient with ReduceSumTo, other values with GemmGradC), every C shape. */
    static const struct {
        bool ta, tb;
        const char *ab;
        int c_rank;
        int64_t c0, c1;
    } gc[] = {
        {false, false, "", 2, 3, 4},
        {true, false, "alpha=0.5;beta=-1.5", 2, 3, 4},
        {false, true, "alpha=-2.0", 1, 4, 0},
        {true, true, "alpha=1.25;beta=0.75", 2, 1, 4},
        {false, false, "beta=2.0", 2, 3, 1},
        {false, true, "alpha=0.5", 2, 1, 1},
        {true, false, "beta=0.0", 0, 0, 0},
        {false, false, "alpha=1.5", -1, 0, 0},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) {
        const int64_t M = 3, N = 4, K = 5;
        char attrs[96], label[128];
        snprintf(attrs, sizeof attrs, "transA=%d;transB=%d%s%s", gc[i].ta, gc[i].tb,
                 gc[i].ab[0] ? ";" : "", gc[i].ab);
        static const char *const c_shape[] = {"no C", "scalar C", "C (N)", "C 2-D"};
        snprintf(label, sizeof label, "gemm grad %s, %s (%lld,%lld)", attrs,
                 c_shape[gc[i].c_rank + 1], (long long)gc[i].c0, (long long)gc[i].c1);
        kiln_tensor *in[3] = {
            gc[i].ta ? kt_rand(KILN_F64, 2, KT_DIMS(K, M), -1, 1, 300 + i)
                     : kt_rand(KILN_F64, 2, KT_DIMS(M, K), -1, 1, 300 + i),
            gc[i].tb ? kt_rand(KILN_F64, 2, KT_DIMS(N, K), -1, 1, 400 + i)
                     : kt_rand(KILN_F64, 2, KT_DIMS(K, N), -1, 1, 400 + i),
            gc[i].c_rank < 0 ? NULL
                             : kt_rand(KILN_F64, gc[i].c_rank, KT_DIMS(gc[i].c0, gc[i].c1), -1, 1,
                                       500 + i)};
        fails += kiln_gradcheck("Gemm", attrs, 0, 3, in, NULL, label);
    }

    /* errors */
    kiln_tensor *in[3];
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(4, 5), NULL);
    fails += kiln_optest_fails("Gemm", "", 2, in, 1, KILN_ERR_SHAPE, "gemm K mismatch");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    fails += kiln_optest_fails("Gemm", "", 3, in, 1, KILN_ERR_SHAPE, "gemm C not broadcastable");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    fails += kiln_optest_fails("Gemm", "", 2, in, 1, KILN_ERR_SHAPE, "gemm rank 3");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(3, 4), NULL);
    fails += kiln_optest_fails("Gemm", "", 2, in, 1, KILN_ERR_TYPE, "gemm int32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Gemm", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(17, 33), -1, 1, 221),
                                                kt_rand(KILN_F32, 2, KT_DIMS(33, 19), -1, 1, 222),
                                                kt_rand(KILN_F32, 1, KT_DIMS(19), -1, 1, 223)},
                               1, "gemm random 17x33x19");
    fails += kiln_optest_sweep("Gemm", "transA=1;transB=1;alpha=0.5;beta=2.0", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(33, 17), -1, 1, 224),
                                                kt_rand(KILN_F32, 2, KT_DIMS(19, 33), -1, 1, 225),
                                                kt_rand(KILN_F32, 2, KT_DIMS(17, 19), -1, 1, 226)},
                               1, "gemm random transposed, alpha, beta");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Gemm", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 7), -2, 2, 1222),
                                                kt_rand(KILN_F32, 2, KT_DIMS(7, 3), -2, 2, 1223),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), -2, 2, 1224)},
                               1, "gemm C row");
    fails += kiln_optest_sweep("Gemm", "transA=1;transB=1;alpha=0.5;beta=2.0", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(7, 5), -2, 2, 1225),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1226),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 1227)},
                               1, "gemm transposed, C full");
    fails += kiln_optest_sweep("Gemm", "transB=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 4), -2, 2, 1228),
                                                kt_rand(KILN_F32, 2, KT_DIMS(9, 4), -2, 2, 1229),
                                                kt_rand(KILN_F32, 2, KT_DIMS(6, 1), -2, 2, 1230)},
                               1, "gemm C column");
    fails += kiln_optest_sweep("Gemm", "alpha=1.5", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1231),
                                                kt_rand(KILN_F32, 2, KT_DIMS(6, 5), -2, 2, 1232),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1233)},
                               1, "gemm C scalar");
    fails += kiln_optest_sweep("Gemm", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(33, 17), -2, 2, 1234),
                                                kt_rand(KILN_F32, 2, KT_DIMS(17, 45), -2, 2, 1235)},
                               1, "gemm no C");
    fails += kiln_optest_sweep("Gemm", "beta=0.0", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(8, 8), -2, 2, 1236),
                                                kt_rand(KILN_F32, 2, KT_DIMS(8, 8), -2, 2, 1237),
                                                kt_rand(KILN_F32, 1, KT_DIMS(8), -2, 2, 1238)},
                               1, "gemm beta 0");
    fails += kiln_optest_sweep("Gemm", "transA=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(96, 64), -2, 2, 1239),
                                                kt_rand(KILN_F32, 2, KT_DIMS(96, 80), -2, 2, 1240),
                                                kt_rand(KILN_F32, 1, KT_DIMS(80), -2, 2, 1241)},
                               1, "gemm larger");
    fails += kiln_optest_sweep_tol("GemmGradC", "beta=0.5", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 3088),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), -2, 2, 3089)},
                                   1, 0.0001, 0, "gemmgradc C row");
    fails += kiln_optest_sweep_tol("GemmGradC", "beta=2.0", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 3090),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 1), -2, 2, 3091)},
                                   1, 0.0001, 0, "gemmgradc C column");
    fails += kiln_optest_sweep_tol("GemmGradC", "beta=-1.5", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 3092),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 3093)},
                                   1, 0.0001, 0, "gemmgradc C full");
    fails += kiln_optest_sweep_tol("GemmGradC", "beta=0.25", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 3094),
                                                kt_rand(KILN_F32, 0, NULL, 0, 1, 3095)},
                                   1, 0.0001, 0, "gemmgradc C scalar");
    fails += kiln_optest_sweep_tol("GemmGradC", "beta=0.0", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 3096),
                                                kt_rand(KILN_F32, 1, KT_DIMS(3), -2, 2, 3097)},
                                   1, 0.0001, 0, "gemmgradc beta 0");
    fails += kiln_optest_sweep("Gemm", "transB=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 9216), -2, 2, 3157),
                                                kt_rand(KILN_F32, 2, KT_DIMS(128, 9216), -2, 2, 3158),
                                                kt_rand(KILN_F32, 1, KT_DIMS(128), -2, 2, 3159)},
                               1, "gemm mnist fc1");
    fails += kiln_optest_sweep("Gemm", "alpha=1.0;transA=0;transB=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -2, 2, 3160),
                                                kt_rand(KILN_F32, 2, KT_DIMS(10, 128), -2, 2, 3161)},
                               1, "gemm mnist fc2 dX");
    fails += kiln_optest_sweep("Gemm", "alpha=1.0;transA=1;transB=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -2, 2, 3162),
                                                kt_rand(KILN_F32, 2, KT_DIMS(64, 128), -2, 2, 3163)},
                               1, "gemm mnist fc2 dW");
    fails += kiln_optest_sweep("Gemm", "alpha=1.0;transA=1;transB=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 128), -2, 2, 3164),
                                                kt_rand(KILN_F32, 2, KT_DIMS(64, 9216), -2, 2, 3165)},
                               1, "gemm mnist fc1 dW");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Profile FLOPs: 2 * outputs * K. */
static double flops(const kiln_op_ctx *c) {
    const kiln_tensor *a = c->n_in > 0 ? c->in[0] : NULL, *y = c->n_out > 0 ? c->out[0] : NULL;
    if (!a || c->n_in < 2 || !c->in[1] || !y || a->ndim != 2) return 0;
    return 2.0 * (double)kiln_tensor_numel(y) * (double)(kiln_attr_int(c->node, "transA", 0) ? a->dims[0] : a->dims[1]);
}

const kiln_op_def kiln_op_gemm = {
    .precision = KILN_PREC_LOW, .flops = flops,
    .name = "Gemm", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

#ifdef KILN_OPTESTS
/* GemmGradC; expected values by hand: beta times the row / column / total sums of dY. */
static int test_grad_c(void) {
    int fails = 0;
    static const double dy[] = {1, 2, 3, 4, 5, 6}; /* (2, 3) */
    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), dy),
                          kt_make(KILN_F32, 1, KT_DIMS(3), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(10, 14, 18));
    fails += kiln_optest("GemmGradC", "beta=2.0", 2, in, 1, &want, 0, 0, "gemm dC (N)");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), dy);
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 1), NULL);
    want = kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(-3, -7.5));
    fails += kiln_optest("GemmGradC", "beta=-0.5", 2, in, 1, &want, 0, 0, "gemm dC (M,1) f64");
    in[0] = kt_make(KILN_F16, 2, KT_DIMS(2, 3), dy);
    in[1] = kt_make(KILN_F16, 0, NULL, NULL);
    want = kt_make(KILN_F16, 0, NULL, KT_VALS(5.25));
    fails += kiln_optest("GemmGradC", "beta=0.25", 2, in, 1, &want, 0, 0, "gemm dC scalar f16");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), dy);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(3, 6, 9, 12, 15, 18));
    fails += kiln_optest("GemmGradC", "beta=3", 2, in, 1, &want, 0, 0, "gemm dC (M,N)");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, INFINITY, 3, 4, 5, 6));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0, 0, 0));
    fails += kiln_optest("GemmGradC", "beta=0.0", 2, in, 1, &want, 0, 0,
                         "gemm dC is 0 for beta = 0, whatever dY");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("GemmGradC", "", 2, in, 1, KILN_ERR_SHAPE,
                               "gemm dC not broadcastable");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_gemm_grad_c = {
    .precision = KILN_PREC_FP32,
    .name = "GemmGradC", .domain = "kiln", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
    .max_outputs = 1, .shape_only_inputs = 1u << 1, .infer = gc_infer, .cpu_forward = gc_forward,
    .cpu_workspace = gc_workspace, .test = KILN_OP_TESTS(test_grad_c),
};
