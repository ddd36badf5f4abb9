/*
 * matmul.c — MatMul (opsets 11..21) with numpy.matmul semantics:
 *   A (..., M, K) @ B (..., K, N) -> Y (batch..., M, N), the batch dims broadcast.
 *   A 1-D A (K) is treated as (1, K) and a 1-D B (K) as (K, 1); the added dim is removed
 *   from Y (1-D @ 1-D gives a scalar).
 *   Dtypes: f32 and f64 through cblas_sgemm / cblas_dgemm; f16 / bf16 computed in f32;
 *   integer dtypes through a plain loop accumulating in int64 (wrapping to the dtype).
 * Method: when B has no batch (or all its batch dims are 1) and A is not broadcast, A's
 *   batch folds into M and one gemm does everything. Otherwise one gemm per batch entry;
 *   the entries run side by side with OpenMP unless a few big products are better split
 *   one after the other (kiln_gemm_job_threads).
 * Gradient: kiln.MatMulGradA(dY, A, B) = dY @ B^T and kiln.MatMulGradB(dY, A, B) = A^T @ dY
 *   per batch entry, summed over the entries that broadcast the operand, in its shape
 *   (1-D included); with a shared B and an unbroadcast A each is one folded gemm.
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <stdio.h>
#include <string.h>

typedef struct mm_shape {
    int64_t M, N, K;
    int nb;                                      /* batch rank */
    int64_t bdims[KILN_MAX_DIMS];                /* batch dims of Y */
    int64_t sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS]; /* batch strides in matrices, 0: broadcast */
    int64_t batch, batch_a, batch_b;             /* batch entries of Y, A, B */
    int ydim;
    int64_t ydims[KILN_MAX_DIMS];
} mm_shape;

/* Validate A and B and compute the geometry; shared by MatMul and its gradient ops. */
static kiln_status shape_get(kiln_op_ctx *c, const kiln_tensor *a, const kiln_tensor *b,
                             mm_shape *s) {
    char as[128], bs[128];
    KILN_OP_CHECK(c, kiln_dtype_is_float(a->dtype) || kiln_dtype_is_int(a->dtype), KILN_ERR_TYPE,
                  "A dtype %s is not supported", kiln_dtype_name(a->dtype));
    KILN_OP_CHECK(c, b->dtype == a->dtype, KILN_ERR_TYPE, "B must have A's dtype %s",
                  kiln_dtype_name(a->dtype));
    KILN_OP_CHECK(c, a->ndim >= 1 && b->ndim >= 1, KILN_ERR_SHAPE,
                  "A and B must have rank >= 1 (scalars do not multiply as matrices)");
    const int ra = a->ndim, rb = b->ndim;
    s->M = ra == 1 ? 1 : a->dims[ra - 2];
    s->K = a->dims[ra - 1];
    const int64_t kb = rb == 1 ? b->dims[0] : b->dims[rb - 2];
    s->N = rb == 1 ? 1 : b->dims[rb - 1];
    KILN_OP_CHECK(c, kb == s->K, KILN_ERR_SHAPE,
                  "inner dims differ: A %s has K = %lld, B %s has K = %lld",
                  kiln_shape_str(a, as, sizeof as), (long long)s->K,
                  kiln_shape_str(b, bs, sizeof bs), (long long)kb);
    const int na = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
    KILN_OP_CHECK(c, kiln_broadcast_shape(na, a->dims, nbb, b->dims, &s->nb, s->bdims),
                  KILN_ERR_SHAPE, "batch dims of A %s and B %s do not broadcast",
                  kiln_shape_str(a, as, sizeof as), kiln_shape_str(b, bs, sizeof bs));
    kiln_broadcast_strides(na, a->dims, s->nb, s->bdims, s->sa);
    kiln_broadcast_strides(nbb, b->dims, s->nb, s->bdims, s->sb);
    s->batch = kiln_numel(s->nb, s->bdims);
    s->batch_a = kiln_numel(na, a->dims);
    s->batch_b = kiln_numel(nbb, b->dims);
    s->ydim = 0;
    for (int i = 0; i < s->nb; i++) s->ydims[s->ydim++] = s->bdims[i];
    KILN_OP_CHECK(c, s->ydim + (ra > 1) + (rb > 1) <= KILN_MAX_DIMS, KILN_ERR_UNSUPPORTED,
                  "result rank exceeds %d", KILN_MAX_DIMS);
    if (ra > 1) s->ydims[s->ydim++] = s->M;
    if (rb > 1) s->ydims[s->ydim++] = s->N;
    KILN_OP_CHECK(c, kiln_blas_fits(s->M * s->batch) && kiln_blas_fits(s->N) &&
                     kiln_blas_fits(s->K),
                  KILN_ERR_UNSUPPORTED, "(M, N, K) = (%lld, %lld, %lld) exceeds the BLAS int range",
                  (long long)(s->M * s->batch), (long long)s->N, (long long)s->K);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    mm_shape s;
    kiln_status st = shape_get(c, c->in[0], c->in[1], &s);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, s.ydim, s.ydims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    if (!kiln_dtype_is_float(c->in[0]->dtype)) return 0;
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) + kiln_stage_size(c->out[0]);
}

/* Offsets (in matrices) of batch entry j in A and B. */
static void batch_offsets(const mm_shape *s, int64_t j, int64_t *oa, int64_t *ob) {
    *oa = *ob = 0;
    for (int d = s->nb - 1; d >= 0; d--) {
        const int64_t i = j % s->bdims[d];
        j /= s->bdims[d];
        *oa += i * s->sa[d];
        *ob += i * s->sb[d];
    }
}

static void forward_int(const mm_shape *s, const kiln_tensor *a, const kiln_tensor *b,
                        kiln_tensor *y) {
    const int64_t M = s->M, N = s->N, K = s->K;
    for (int64_t j = 0; j < s->batch; j++) {
        int64_t oa, ob;
        batch_offsets(s, j, &oa, &ob);
        for (int64_t i = 0; i < M; i++)
            for (int64_t n = 0; n < N; n++) {
                /* unsigned accumulation: wraps like the dtype instead of overflowing */
                uint64_t acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += (uint64_t)kiln_get_i64(a, oa * M * K + i * K + k) *
                           (uint64_t)kiln_get_i64(b, ob * K * N + k * N + n);
                kiln_set_i64(y, (j * M + i) * N + n, (int64_t)acc);
            }
    }
}

static kiln_status forward(kiln_op_ctx *c) {
    mm_shape s;
    kiln_status st = shape_get(c, c->in[0], c->in[1], &s);
    if (st != KILN_OK) return st;
    if (!kiln_dtype_is_float(c->in[0]->dtype)) {
        forward_int(&s, c->in[0], c->in[1], c->out[0]);
        return KILN_OK;
    }
    const bool dbl = c->in[0]->dtype == KILN_F64;
    const size_t esz = dbl ? sizeof(double) : sizeof(float);
    char *ws = c->workspace;
    const char *A = kiln_stage_in(c->in[0], &ws);  // (batch_a, M, K)
    const char *B = kiln_stage_in(c->in[1], &ws);  // (batch_b, K, N)
    char *Y = kiln_stage_out(c->out[0], &ws);      // (batch, M, N)
    const int64_t M = s.M, N = s.N, K = s.K;
    if (s.batch_b == 1 && s.batch_a == s.batch) {
        /* B is shared by every batch entry and A is contiguous: one (batch*M, K) product. */
        kiln_gemm(dbl, false, false, s.batch * M, N, K, 1.0, A, K, B, N, 0.0, Y, N);
    } else {
        const int nt = kiln_gemm_job_threads(s.batch, M, N, K);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int64_t j = 0; j < s.batch; j++) {
            int64_t oa, ob;
            batch_offsets(&s, j, &oa, &ob);
            kiln_gemm(dbl, false, false, M, N, K, 1.0, A + (size_t)(oa * M * K) * esz, K,
                      B + (size_t)(ob * K * N) * esz, N, 0.0, Y + (size_t)(j * M * N) * esz, N);
        }
    }
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ gradient */

/* dL/dA = kiln.MatMulGradA(dY, A, B) = dY @ B^T per batch entry, dL/dB = kiln.MatMulGradB(dY,
 * A, B) = A^T @ dY, each summed over the batch entries that broadcast its operand and
 * shaped like it (1-D operands included). They are internal ops rather than MatMul nodes:
 * the transposes and the unbroadcasting depend on the ranks, which a rule does not know. */
static kiln_status grad(kiln_grad_ctx *g) {
    const int a = KILN_GRAD_IN(g, 0), b = KILN_GRAD_IN(g, 1), in[3] = {g->dy[0], a, b};
    if (g->need[0]) {
        g->dx[0] = kiln_grad_emit(g, "kiln", "MatMulGradA", 3, in, 1, NULL, false, NULL);
        if (g->dx[0] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (g->need[1]) {
        g->dx[1] = kiln_grad_emit(g, "kiln", "MatMulGradB", 3, in, 1, NULL, false, NULL);
        if (g->dx[1] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

/* Shared infer of the grad ops (which: 0 for dA, 1 for dB): float dtypes, dY shaped like Y. */
static kiln_status grad_shape_get(kiln_op_ctx *c, mm_shape *s, int which) {
    const kiln_tensor *dy = c->in[0], *a = c->in[1], *b = c->in[2];
    KILN_OP_CHECK(c, kiln_dtype_is_float(a->dtype) && dy->dtype == a->dtype, KILN_ERR_TYPE,
                  "dY, A and B must have the same float dtype");
    kiln_status st = shape_get(c, a, b, s);
    if (st != KILN_OK) return st;
    bool same = dy->ndim == s->ydim;
    for (int i = 0; same && i < dy->ndim; i++) same = dy->dims[i] == s->ydims[i];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have MatMul's output shape");
    const kiln_tensor *like = which ? b : a;
    kiln_tensor_set_shape(c->out[0], like->dtype, like->ndim, like->dims);
    return KILN_OK;
}

static kiln_status ga_infer(kiln_op_ctx *c) {
    mm_shape s;
    return grad_shape_get(c, &s, 0);
}

static kiln_status gb_infer(kiln_op_ctx *c) {
    mm_shape s;
    return grad_shape_get(c, &s, 1);
}

static size_t ga_workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[2]) + kiln_stage_size(c->out[0]);
}

static size_t gb_workspace(const kiln_op_ctx *c) {
    return kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) + kiln_stage_size(c->out[0]);
}

/* dA (batch_a, M, K) from dY (batch, M, N) and B (batch_b, K, N). */
static kiln_status ga_forward(kiln_op_ctx *c) {
    mm_shape s;
    kiln_status st = grad_shape_get(c, &s, 0);
    if (st != KILN_OK) return st;
    const bool dbl = c->in[0]->dtype == KILN_F64;
    const size_t esz = dbl ? sizeof(double) : sizeof(float);
    char *ws = c->workspace;
    const char *dY = kiln_stage_in(c->in[0], &ws);
    const char *B = kiln_stage_in(c->in[2], &ws);
    char *dA = kiln_stage_out(c->out[0], &ws);
    const int64_t M = s.M, N = s.N, K = s.K;
    if (s.batch_b == 1 && s.batch_a == s.batch) {
        /* One B for all entries and dA unbroadcast: one (batch*M, K) product. */
        kiln_gemm(dbl, false, true, s.batch * M, K, N, 1.0, dY, N, B, N, 0.0, dA, K);
    } else if (s.batch_a == s.batch) {
        /* Every entry writes its own slice of dA. */
        const int nt = kiln_gemm_job_threads(s.batch, M, K, N);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int64_t j = 0; j < s.batch; j++) {
            int64_t oa, ob;
            batch_offsets(&s, j, &oa, &ob);
            kiln_gemm(dbl, false, true, M, K, N, 1.0, dY + (size_t)(j * M * N) * esz, N,
                      B + (size_t)(ob * K * N) * esz, N, 0.0, dA + (size_t)(oa * M * K) * esz, K);
        }
    } else {
        /* A is broadcast: entries sharing a slice of dA add into it in turn. */
        memset(dA, 0, (size_t)(s.batch_a * M * K) * esz);
        for (int64_t j = 0; j < s.batch; j++) {
            int64_t oa, ob;
            batch_offsets(&s, j, &oa, &ob);
            kiln_gemm(dbl, false, true, M, K, N, 1.0, dY + (size_t)(j * M * N) * esz, N,
                      B + (size_t)(ob * K * N) * esz, N, 1.0, dA + (size_t)(oa * M * K) * esz, K);
        }
    }
    kiln_stage_finish(c->out[0], dA);
    return KILN_OK;
}

/* dB (batch_b, K, N) from A (batch_a, M, K) and dY (batch, M, N). */
static kiln_status gb_forward(kiln_op_ctx *c) {
    mm_shape s;
    kiln_status st = grad_shape_get(c, &s, 1);
    if (st != KILN_OK) return st;
    const bool dbl = c->in[0]->dtype == KILN_F64;
    const size_t esz = dbl ? sizeof(double) : sizeof(float);
    char *ws = c->workspace;
    const char *dY = kiln_stage_in(c->in[0], &ws);
    const char *A = kiln_stage_in(c->in[1], &ws);
    char *dB = kiln_stage_out(c->out[0], &ws);
    const int64_t M = s.M, N = s.N, K = s.K;
    if (s.batch_b == 1 && s.batch_a == s.batch) {
        /* The batch folds into the inner dim: dB = A^T (K, batch*M) @ dY (batch*M, N). */
        kiln_gemm(dbl, true, false, K, N, s.batch * M, 1.0, A, K, dY, N, 0.0, dB, N);
    } else if (s.batch_b == s.batch) {
        const int nt = kiln_gemm_job_threads(s.batch, K, N, M);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int64_t j = 0; j < s.batch; j++) {
            int64_t oa, ob;
            batch_offsets(&s, j, &oa, &ob);
            kiln_gemm(dbl, true, false, K, N, M, 1.0, A + (size_t)(oa * M * K) * esz, K,
                      dY + (size_t)(j * M * N) * esz, N, 0.0, dB + (size_t)(ob * K * N) * esz, N);
        }
    } else {
        memset(dB, 0, (size_t)(s.batch_b * K * N) * esz);
        for (int64_t j = 0; j < s.batch; j++) {
            int64_t oa, ob;
            batch_offsets(&s, j, &oa, &ob);
            kiln_gemm(dbl, true, false, K, N, M, 1.0, A + (size_t)(oa * M * K) * esz, K,
                      dY + (size_t)(j * M * N) * esz, N, 1.0, dB + (size_t)(ob * K * N) * esz, N);
        }
    }
    kiln_stage_finish(c->out[0], dB);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* The oracle for the BLAS path: a triple loop per batch entry, in double, with the
 * broadcast done by index arithmetic on 4-D shapes (a leading 1 for lower ranks). */
static kiln_tensor *direct(const kiln_tensor *a, const kiln_tensor *b, const int64_t *ab,
                           const int64_t *bb, int64_t M, int64_t N, int64_t K, int yrank) {
    const int64_t yb[2] = {ab[0] > bb[0] ? ab[0] : bb[0], ab[1] > bb[1] ? ab[1] : bb[1]};
    kiln_tensor *y = yrank == 4 ? kt_make(KILN_F32, 4, KT_DIMS(yb[0], yb[1], M, N), NULL)
                                : kt_make(KILN_F32, 3, KT_DIMS(yb[1], M, N), NULL);
    if (!y) return NULL;
    for (int64_t p = 0; p < yb[0]; p++)
        for (int64_t q = 0; q < yb[1]; q++) {
            int64_t ja = (ab[0] == 1 ? 0 : p) * ab[1] + (ab[1] == 1 ? 0 : q);
            int64_t jb = (bb[0] == 1 ? 0 : p) * bb[1] + (bb[1] == 1 ? 0 : q);
            for (int64_t i = 0; i < M; i++)
                for (int64_t n = 0; n < N; n++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++)
                        acc += kiln_get_f64(a, (ja * M + i) * K + k) *
                               kiln_get_f64(b, (jb * K + k) * N + n);
                    kiln_set_f64(y, ((p * yb[1] + q) * M + i) * N + n, acc);
                }
        }
    return y;
}

/* A (ab0, ab1, M, K) @ B (bb0, bb1, K, N); a leading batch dim of 0 drops that operand
 * to rank 3, so both broadcasting and the folded path get covered. */
static int random_case(const char *label, const int64_t ab[2], const int64_t bb[2], int64_t M,
                       int64_t N, int64_t K, uint64_t seed) {
    const int64_t a1[2] = {ab[0] ? ab[0] : 1, ab[1]}, b1[2] = {bb[0] ? bb[0] : 1, bb[1]};
    kiln_tensor *in[2] = {
        ab[0] ? kt_rand(KILN_F32, 4, KT_DIMS(ab[0], ab[1], M, K), -1, 1, seed)
              : kt_rand(KILN_F32, 3, KT_DIMS(ab[1], M, K), -1, 1, seed),
        bb[0] ? kt_rand(KILN_F32, 4, KT_DIMS(bb[0], bb[1], K, N), -1, 1, seed + 1)
              : kt_rand(KILN_F32, 3, KT_DIMS(bb[1], K, N), -1, 1, seed + 1)};
    kiln_tensor *want = direct(in[0], in[1], a1, b1, M, N, K, ab[0] || bb[0] ? 4 : 3);
    return kiln_optest("MatMul", "", 2, in, 1, &want, 1e-6 * (double)K, 1e-5, label);
}

static int test(void) {
    int fails = 0;
    /* Fixed cases; expected values computed once with numpy.matmul. */
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, -3)),
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 0, 0)),
        };
        kiln_tensor *want[1] = {
            kt_scalar(KILN_F32, 2),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0,
                             "matmul 1-D x 1-D gives a scalar");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, -1, 3)),
            kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(-3, -2, -1, 0, -1, -3)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-5, -11)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul 1-D x 2-D");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-3, -3, -3, -2, 3, -2)),
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, -2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-3, 8)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul 2-D x 1-D");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 1, 2, 3), KT_VALS(-2, 0, -2, 3, -2, 3, 2, 2, -3, -1,
                1, 0)),
            kt_make(KILN_F32, 3, KT_DIMS(3, 3, 2), KT_VALS(1, 1, 1, -3, 3, 0, 3, -2, -1, 3, -2,
                -3, -1, 1, -3, 3, -1, -2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 3, 2, 2), KT_VALS(-8, -2, 10, 9, -2, 10, 5, -21, 4,
                2, 0, -9, -5, -4, 0, -4, 10, 11, -4, 5, -5, 14, -2, 2)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul broadcast batch");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0, 3, 3)),
            kt_make(KILN_F32, 3, KT_DIMS(2, 3, 2), KT_VALS(3, -1, -3, 2, 1, 2, -3, -3, 0, -1, 0,
                3)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-6, 12, 0, 6)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul 1-D x batched");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(2, 2, 3), KT_VALS(-2, 0, -1, -1, 2, -2, -1, -3, -2, -2,
                1, 1)),
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0, -2, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-2, -8, 2, 0)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul batched x 1-D");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, -2, -3, -1, -2, 2)),
            kt_make(KILN_F32, 3, KT_DIMS(4, 3, 2), KT_VALS(0, 0, -1, 0, 3, -2, 2, -3, -1, 3, 3,
                -3, 2, 2, 0, -1, 3, 3, 1, -1, -2, 3, -2, 0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(4, 2, 2), KT_VALS(-7, 6, 8, -4, -3, -3, 6, -9, -5, -3,
                4, 6, 12, -8, -1, -5)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0,
                             "matmul 2-D x batched (A broadcast)");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_I32, 3, KT_DIMS(2, 2, 3), KT_VALS(1, -2, -1, 2, -2, 1, 3, 1, 1, 0, 3,
                -2)),
            kt_make(KILN_I32, 3, KT_DIMS(2, 3, 2), KT_VALS(-1, 1, 1, -3, -2, 1, 2, 1, 3, -1, -1,
                2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_I32, 3, KT_DIMS(2, 2, 2), KT_VALS(-1, 6, -6, 9, 8, 4, 11, -7)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul int32 batched");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_I64, 3, KT_DIMS(1, 2, 3), KT_VALS(-3, -2, -2, -1, -2, 2)),
            kt_make(KILN_I64, 2, KT_DIMS(3, 4), KT_VALS(2, -1, -3, 1, -3, 1, -2, 3, 1, 3, 1, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_I64, 3, KT_DIMS(1, 2, 4), KT_VALS(-2, -5, 11, -13, 6, 5, 9, -3)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul int64 shared B");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F16, 3, KT_DIMS(2, 2, 3), KT_VALS(-1, 2, -3, -2, -1, 1, 0, 2, 3, -1,
                -1, 0)),
            kt_make(KILN_F16, 3, KT_DIMS(1, 3, 2), KT_VALS(1, 0, 1, 3, 2, -1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 3, KT_DIMS(2, 2, 2), KT_VALS(-5, 9, -1, -4, 8, 3, -2, -3)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul f16");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_BF16, 2, KT_DIMS(3, 2), KT_VALS(-1, -1, -2, -3, 2, -1)),
            kt_make(KILN_BF16, 2, KT_DIMS(2, 3), KT_VALS(-1, 1, 0, 3, 1, 3)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_BF16, 2, KT_DIMS(3, 3), KT_VALS(-2, -2, -3, -7, -5, -9, -5, 1, -3)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul bf16");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F64, 3, KT_DIMS(2, 2, 3), KT_VALS(-0.3453, 0.9777, -0.6247, 0.6465,
                -0.6855, -0.1898, -0.8531, 0.7161, 0.6576, -0.7204, 0.0542, -0.4837)),
            kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), KT_VALS(-0.0164, 0.1064, -0.7875, 0.7288,
                -0.4426, -0.1058, -0.8855, -0.9945, -0.6097, -0.3166, 0.8562, 0.7795)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 3, KT_DIMS(2, 2, 2), KT_VALS(-0.48778361, 0.7419011, 0.61323413,
                -0.41072396, 0.881851, 1.13428989, 0.19072452, 0.32223393)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 1e-12, 0, "matmul f64");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL),
            kt_make(KILN_F32, 2, KT_DIMS(0, 3), NULL),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, 0, 0, 0, 0)),
        };
        fails += kiln_optest("MatMul", "", 2, in, 1, want, 0, 0, "matmul K = 0 gives zeros");
    }

    /* BLAS path against the triple loop on random inputs. */
    fails += random_case("matmul random broadcast batch", KT_DIMS(3, 1), KT_DIMS(1, 4), 17, 13,
                         19, 301);
    fails += random_case("matmul random shared B (folded)", KT_DIMS(0, 5), KT_DIMS(0, 1), 23,
                         31, 29, 311);
    fails += random_case("matmul random large batched", KT_DIMS(2, 1), KT_DIMS(0, 3), 64, 80,
                         96, 321);
    fails += random_case("matmul random large folded", KT_DIMS(0, 2), KT_DIMS(0, 1), 96, 112,
                         128, 331);
    /* Gradient rule against finite differences: 1-D promotion on either side, batches
     * folded into one product, per-entry products, and broadcast operands whose gradient
     * sums over entries. */
    static const struct {
        const char *label;
        int ra, rb;
        int64_t a[4], b[4];
    } gc[] = {
        {"matmul grad 2-D x 2-D", 2, 2, {3, 4}, {4, 2}},
        {"matmul grad 1-D x 2-D", 1, 2, {4}, {4, 3}},
        {"matmul grad 2-D x 1-D", 2, 1, {3, 4}, {4}},
        {"matmul grad 1-D x 1-D", 1, 1, {5}, {5}},
        {"matmul grad 3-D x 3-D same batch", 3, 3, {2, 3, 4}, {2, 4, 2}},
        {"matmul grad 3-D x 2-D (shared B, folded)", 3, 2, {3, 2, 4}, {4, 3}},
        {"matmul grad 2-D x 3-D (shared A)", 2, 3, {3, 4}, {3, 4, 2}},
        {"matmul grad 4-D broadcast both ways", 4, 4, {2, 1, 2, 3}, {1, 3, 3, 2}},
        {"matmul grad 1-D x 3-D", 1, 3, {3}, {2, 3, 4}},
        {"matmul grad 3-D x 1-D", 3, 1, {2, 3, 4}, {4}},
        {"matmul grad 4-D x 3-D, B broadcast over the outer batch", 4, 3, {2, 2, 2, 3},
         {2, 3, 2}},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) {
        kiln_tensor *in[2] = {kt_rand(KILN_F64, gc[i].ra, gc[i].a, -1, 1, 600 + i),
                              kt_rand(KILN_F64, gc[i].rb, gc[i].b, -1, 1, 700 + i)};
        fails += kiln_gradcheck("MatMul", "", 0, 2, in, NULL, gc[i].label);
    }

    /* errors */
    kiln_tensor *in[2];
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(4, 2), NULL);
    fails += kiln_optest_fails("MatMul", "", 2, in, 1, KILN_ERR_SHAPE, "matmul K mismatch");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 3), NULL);
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(3, 3, 2), NULL);
    fails += kiln_optest_fails("MatMul", "", 2, in, 1, KILN_ERR_SHAPE, "matmul batch mismatch");
    in[0] = kt_make(KILN_F32, 0, NULL, NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("MatMul", "", 2, in, 1, KILN_ERR_SHAPE, "matmul scalar");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("MatMul", "", 2, in, 1, KILN_ERR_TYPE, "matmul dtype mismatch");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 33), -1, 1, 231),
                                                kt_rand(KILN_F32, 2, KT_DIMS(33, 19), -1, 1, 232)},
                               1, "matmul random (3,17,33)x(33,19)");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 9, 31), -1, 1, 233),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 31, 5), -1, 1, 234)},
                               1, "matmul random broadcast batch");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1242),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 6), -2, 2, 1243)},
                               1, "matmul 2-D");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1244),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 6), -2, 2, 1245)},
                               1, "matmul batched");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1246),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 6), -2, 2, 1247)},
                               1, "matmul shared B");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1248),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 6), -2, 2, 1249)},
                               1, "matmul shared A");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 5), -2, 2, 1250),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 5, 2), -2, 2, 1251)},
                               1, "matmul mixed broadcast");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1252),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 3), -2, 2, 1253)},
                               1, "matmul 1-D A");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 5), -2, 2, 1254),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1255)},
                               1, "matmul 1-D B");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(9), -2, 2, 1256),
                                                kt_rand(KILN_F32, 1, KT_DIMS(9), -2, 2, 1257)},
                               1, "matmul 1-D both");
    fails += kiln_optest_sweep("MatMul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 33), -2, 2, 1258),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 33, 9), -2, 2, 1259)},
                               1, "matmul odd");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Profile FLOPs: 2 * outputs * K. */
static double flops(const kiln_op_ctx *c) {
    const kiln_tensor *a = c->n_in > 0 ? c->in[0] : NULL, *y = c->n_out > 0 ? c->out[0] : NULL;
    if (!a || c->n_in < 2 || !c->in[1] || !y || a->ndim < 1) return 0;
    return 2.0 * (double)kiln_tensor_numel(y) * (double)a->dims[a->ndim - 1];
}

const kiln_op_def kiln_op_matmul = {
    .precision = KILN_PREC_LOW, .flops = flops,
    .name = "MatMul", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

/* Tiny cases for the grad ops, by hand: dA = dY @ B^T and dB = A^T @ dY per entry; in the
 * 1-D x 3-D case A (3) meets both B entries, so dA sums dY_j @ B_j^T over j. */
#define GA KT_VALS(1, 2, 3, 4, 5, 6)             /* (2, 3) */
#define GB KT_VALS(1, 0, 0, 1, 1, 1)             /* (3, 2) */
#define GDY KT_VALS(1, -1, 2, 0)                 /* (2, 2) */
#define GB3 KT_VALS(1, 2, 3, 4, 5, 6, -1, 0, 0, -1, 2, 2) /* (2, 3, 2) */
#define GDY3 KT_VALS(1, 0, 0, 1)                 /* (2, 2) */

#ifdef KILN_OPTESTS
/* op(dY, A, B) on random operands of the shapes below, each in f32 (the sweep adds f16 and
 * bf16): dY has MatMul's output shape. */
static int mm_grad_sweep(const char *op) {
    static const struct {
        int na, nb, ny;
        int64_t a[4], b[4], y[4];
    } shapes[] = {
        {4, 2, 4, {2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6}},       /* B shared */
        {2, 4, 4, {4, 5}, {2, 3, 5, 6}, {2, 3, 4, 6}},       /* A shared */
        {4, 4, 4, {2, 1, 4, 5}, {1, 3, 5, 6}, {2, 3, 4, 6}}, /* mixed broadcast */
        {3, 3, 3, {3, 4, 5}, {3, 5, 6}, {3, 4, 6}},          /* both full */
        {1, 3, 2, {5}, {2, 5, 6}, {2, 6}},                   /* 1-D A */
        {3, 1, 2, {2, 4, 5}, {5}, {2, 4}},                   /* 1-D B */
        {2, 2, 2, {33, 70}, {70, 17}, {33, 17}},             /* odd sizes */
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "%s random, shapes %zu", op, i);
        kiln_tensor *in[3] = {kt_rand(KILN_F32, shapes[i].ny, shapes[i].y, -1, 1, 600 + i),
                              kt_rand(KILN_F32, shapes[i].na, shapes[i].a, -1, 1, 700 + i),
                              kt_rand(KILN_F32, shapes[i].nb, shapes[i].b, -1, 1, 800 + i)};
        fails += kiln_optest_sweep(op, "", 0, 3, in, 1, label);
    }
    return fails;
}

static int test_grad_a(void) {
    int fails = 0;
    /* random products for the CUDA sweep (no expected values): every path of the kernel, a
     * full batch against a shared B (stacked into M), a shared A (summed per entry), mixed
     * broadcasts, 1-D operands */
    fails += mm_grad_sweep("MatMulGradA");
    kiln_tensor *in[3] = {kt_make(KILN_F32, 2, KT_DIMS(2, 2), GDY),
                          kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL),
                          kt_make(KILN_F32, 2, KT_DIMS(3, 2), GB)};
    kiln_tensor *want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, -1, 0, 2, 0, 2));
    fails += kiln_optest("MatMulGradA", "", 3, in, 1, &want, 0, 0, "matmul dA 2-D");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), GDY3);
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), GB3);
    want = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, 2, 7));
    fails += kiln_optest("MatMulGradA", "", 3, in, 1, &want, 0, 0,
                         "matmul dA 1-D x 3-D sums over the batch");
    in[0] = kt_make(KILN_BF16, 2, KT_DIMS(2, 2), GDY);
    in[1] = kt_make(KILN_BF16, 2, KT_DIMS(2, 3), NULL);
    in[2] = kt_make(KILN_BF16, 2, KT_DIMS(3, 2), GB);
    want = kt_make(KILN_BF16, 2, KT_DIMS(2, 3), KT_VALS(1, -1, 0, 2, 0, 2));
    fails += kiln_optest("MatMulGradA", "", 3, in, 1, &want, 0, 0, "matmul dA bf16");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), NULL);
    fails += kiln_optest_fails("MatMulGradA", "", 3, in, 1, KILN_ERR_SHAPE,
                               "matmul dA with dY of the wrong shape");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), NULL);
    in[2] = kt_make(KILN_I32, 2, KT_DIMS(3, 2), NULL);
    fails += kiln_optest_fails("MatMulGradA", "", 3, in, 1, KILN_ERR_TYPE, "matmul dA int32");
    return fails;
}

static int test_grad_b(void) {
    int fails = 0;
    fails += mm_grad_sweep("MatMulGradB");
    kiln_tensor *in[3] = {kt_make(KILN_F32, 2, KT_DIMS(2, 2), GDY),
                          kt_make(KILN_F32, 2, KT_DIMS(2, 3), GA),
                          kt_make(KILN_F32, 2, KT_DIMS(3, 2), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(9, -1, 12, -2, 15, -3));
    fails += kiln_optest("MatMulGradB", "", 3, in, 1, &want, 0, 0, "matmul dB 2-D");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), GDY3);
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    in[2] = kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), NULL);
    want = kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), KT_VALS(1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3));
    fails += kiln_optest("MatMulGradB", "", 3, in, 1, &want, 0, 0, "matmul dB 1-D x 3-D");
    in[0] = kt_make(KILN_F16, 2, KT_DIMS(2, 2), GDY);
    in[1] = kt_make(KILN_F16, 2, KT_DIMS(2, 3), GA);
    in[2] = kt_make(KILN_F16, 2, KT_DIMS(3, 2), NULL);
    want = kt_make(KILN_F16, 2, KT_DIMS(3, 2), KT_VALS(9, -1, 12, -2, 15, -3));
    fails += kiln_optest("MatMulGradB", "", 3, in, 1, &want, 0, 0, "matmul dB f16");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_matmul_grad_a = {
    .precision = KILN_PREC_FP32,
    .name = "MatMulGradA", .domain = "kiln", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 1, .infer = ga_infer,
    .cpu_forward = ga_forward, .cpu_workspace = ga_workspace, .test = KILN_OP_TESTS(test_grad_a),
};

const kiln_op_def kiln_op_matmul_grad_b = {
    .precision = KILN_PREC_FP32,
    .name = "MatMulGradB", .domain = "kiln", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 2, .infer = gb_infer,
    .cpu_forward = gb_forward, .cpu_workspace = gb_workspace, .test = KILN_OP_TESTS(test_grad_b),
};
