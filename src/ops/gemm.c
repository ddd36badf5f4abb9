/*
 * gemm.c — Gemm (opsets 11..21): Y = alpha * A' @ B' + beta * C.
 *   A (M, K), or (K, M) with transA; B (K, N), or (N, K) with transB; optional C broadcast
 *   unidirectionally to (M, N): a scalar, (N), (1, N), (M, 1), (1, 1) or (M, N).
 *   Y (M, N). Attributes alpha, beta (default 1), transA, transB (default 0).
 *   Dtypes: f32 and f64 through cblas_sgemm / cblas_dgemm; f16 / bf16 computed in f32.
 *   Integer Gemm is rejected (KILN_ERR_TYPE): float alpha/beta have no agreed integer
 *   meaning and no exporter emits it.
 * Method: Y is filled with beta * C (broadcast), then one gemm with beta = 1 adds the
 *   product; OpenBLAS threads it.
 */
#include "../core/optest.h"
#include "conv_common.h"

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
    gemm_shape s;
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
    gemm_shape s;
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

/* ------------------------------------------------------------------- tests */

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
    return fails;
}

const kiln_op_def kiln_op_gemm = {
    .name = "Gemm", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = test,
};
