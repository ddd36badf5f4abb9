/*
 * fused_gemm.c — kiln.FusedGemm(A, B, C?, Z?) -> Y = act(alpha * A' @ B' + beta * C + Z), an
 * internal op the fuse-conv pass (src/passes/fuse_conv.c) makes from Gemm + activation, and
 * from a Linear (MatMul + bias Add) whose result a residual Add reads.
 *   A, B, C and Gemm's attributes (alpha, beta, transA, transB) as ONNX Gemm (opsets
 *   11..21); `activation` as fused.h lists it, with its parameters in act_alpha / act_beta
 *   (LeakyRelu, HardSigmoid) and act_min / act_max (Clip): Gemm's alpha and beta already
 *   name the product's scales. Z (optional, the residual): Y's shape and dtype, added
 *   before the activation (as kiln.FusedConv's); with Z, C is absent or a row (N) / (1, N)
 *   with beta 1 (the bias of a Linear: on CUDA, cuBLASLt's BIAS epilogue with Z as its C).
 *   Dtypes: Gemm's (f32, f64; f16 / bf16 computed in f32 by Gemm, then the epilogue).
 * Method: Gemm's own CPU kernel (gemm.c, BLAS) writes alpha A'B' + beta C, then one pass
 *   over Y applies the activation.
 * No gradient: the op exists only in inference plans.
 */
#include "../core/optest.h"
#include "fused.h"

#include <stdio.h>
#include <string.h>

extern const kiln_op_def kiln_op_gemm;

/* Gemm's own checks see A, B and C only. */
static kiln_op_ctx gemm_ctx(const kiln_op_ctx *c) {
    kiln_op_ctx g = *c;
    if (g.n_in > 3) g.n_in = 3;
    return g;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_fused_act a;
    kiln_status st = kiln_fused_act_get(c, "act_alpha", "act_beta", &a);
    if (st) return st;
    kiln_op_ctx g = gemm_ctx(c);
    if ((st = kiln_op_gemm.infer(&g)) != KILN_OK) return st;
    const kiln_tensor *z = c->n_in > 3 ? c->in[3] : NULL, *y = c->out[0];
    if (!z) return KILN_OK;
    KILN_OP_CHECK(c, z->dtype == y->dtype && z->ndim == y->ndim && (z->ndim < 1 || z->dims[0] == y->dims[0]) &&
                         (z->ndim < 2 || z->dims[1] == y->dims[1]),
                  KILN_ERR_SHAPE, "the residual Z %s[%lld,%lld] is not Y's %s[%lld,%lld]", kiln_dtype_name(z->dtype),
                  (long long)(z->ndim > 0 ? z->dims[0] : 0), (long long)(z->ndim > 1 ? z->dims[1] : 0),
                  kiln_dtype_name(y->dtype), (long long)y->dims[0], (long long)y->dims[1]);
    const kiln_tensor *cc = c->n_in > 2 ? c->in[2] : NULL;
    const int64_t n = y->dims[1];
    const bool row = !cc || (cc->ndim == 1 && cc->dims[0] == n) || (cc->ndim == 2 && cc->dims[0] == 1 && cc->dims[1] == n);
    KILN_OP_CHECK(c, row && (!cc || kiln_attr_float(c->node, "beta", 1.0f) == 1.0f), KILN_ERR_UNSUPPORTED,
                  "with a residual Z, C must be absent or a row of %lld with beta 1", (long long)n);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    kiln_op_ctx g = gemm_ctx(c);
    return kiln_op_gemm.cpu_workspace(&g);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_fused_act a;
    kiln_status st = kiln_fused_act_get(c, "act_alpha", "act_beta", &a);
    kiln_op_ctx g = gemm_ctx(c);
    if (st || (st = kiln_op_gemm.cpu_forward(&g))) return st;
    const kiln_tensor *z = c->n_in > 3 ? c->in[3] : NULL;
    kiln_fused_epilogue(&a, c->out[0], 1, kiln_tensor_numel(c->out[0]), NULL, z);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* A random case against Gemm then the activation's ONNX op (the registry's kernels). */
/* With resid, a residual Z (M, N) added before the activation (the reference: Gemm, Add, act). */
static int random_case_z(const char *label, kiln_dtype dt, int64_t M, int64_t N, int64_t K,
                         const char *gemm_attrs, bool tb, int c_rank, const char *act,
                         const char *act_attrs, const char *fused_act_attrs, uint64_t seed, bool resid) {
    kiln_tensor *a = kt_rand(dt, 2, KT_DIMS(M, K), -1, 1, seed);
    kiln_tensor *b = tb ? kt_rand(dt, 2, KT_DIMS(N, K), -1, 1, seed + 1)
                        : kt_rand(dt, 2, KT_DIMS(K, N), -1, 1, seed + 1);
    kiln_tensor *cc = c_rank == 2   ? kt_rand(dt, 2, KT_DIMS(M, N), -1, 1, seed + 2)
                      : c_rank == 1 ? kt_rand(dt, 1, KT_DIMS(N), -1, 1, seed + 2)
                                    : NULL;
    kiln_tensor *z = resid ? kt_rand(dt, 2, KT_DIMS(M, N), -2, 2, seed + 3) : NULL;
    char attrs[512];
    snprintf(attrs, sizeof attrs, "%s;transB=%d", gemm_attrs, tb);
    kiln_tensor *want = kiln_fused_test_eval("Gemm", attrs, 3, (kiln_tensor *[]){a, b, cc});
    if (want && z) {
        kiln_tensor *r = kiln_fused_test_eval("Add", "", 2, (kiln_tensor *[]){want, z});
        kiln_tensor_free(want);
        want = r;
    }
    if (want && strcmp(act, "Silu") == 0) { /* Sigmoid, then Mul by x, as exporters write it */
        kiln_tensor *sg = kiln_fused_test_eval("Sigmoid", "", 1, &want);
        kiln_tensor *r = sg ? kiln_fused_test_eval("Mul", "", 2, (kiln_tensor *[]){want, sg}) : NULL;
        kiln_tensor_free(sg);
        kiln_tensor_free(want);
        want = r;
    } else if (want && (strcmp(act, "Gelu") == 0 || strcmp(act, "GeluTanh") == 0)) {
        kiln_tensor *r = kiln_fused_test_eval("Gelu", act[4] ? "approximate=tanh" : "", 1, &want);
        kiln_tensor_free(want);
        want = r;
    } else if (want && act[0]) {
        const bool clip = strcmp(act, "Clip") == 0;
        kiln_tensor *bounds[2] = {kt_scalar(dt, -0.5), kt_scalar(dt, 0.5)};
        kiln_tensor *r = kiln_fused_test_eval(act, act_attrs, clip ? 3 : 1,
                                              (kiln_tensor *[]){want, bounds[0], bounds[1]});
        kiln_tensor_free(bounds[0]);
        kiln_tensor_free(bounds[1]);
        kiln_tensor_free(want);
        want = r;
    }
    if (!want) {
        printf("FAIL %s: the reference could not be computed\n", label);
        kiln_tensor_free(a);
        kiln_tensor_free(b);
        kiln_tensor_free(cc);
        kiln_tensor_free(z);
        return 1;
    }
    size_t k = strlen(attrs);
    snprintf(attrs + k, sizeof attrs - k, ";activation=%s%s%s%s", act, fused_act_attrs[0] ? ";" : "",
             fused_act_attrs, strcmp(act, "Clip") == 0 ? ";act_min=-0.5;act_max=0.5" : "");
    const double tol = dt == KILN_F64 ? 1e-12 : 1e-5;
    return kiln_optest("FusedGemm", attrs, z ? 4 : 3, (kiln_tensor *[]){a, b, cc, z}, 1, &want, tol, tol, label);
}

static int random_case(const char *label, kiln_dtype dt, int64_t M, int64_t N, int64_t K,
                       const char *gemm_attrs, bool tb, int c_rank, const char *act,
                       const char *act_attrs, const char *fused_act_attrs, uint64_t seed) {
    return random_case_z(label, dt, M, N, K, gemm_attrs, tb, c_rank, act, act_attrs, fused_act_attrs, seed, false);
}

static int test(void) {
    int fails = 0;
    /* By hand: A = [[1,2],[3,4]], B = [[1,-1],[0,1]]: A @ B = [[1,1],[3,1]]; alpha 2 and
     * C = (-3, 1) give [[-1,3],[3,3]]; LeakyRelu with act_alpha 0.5 (Gemm's alpha must not
     * be taken for it). */
    kiln_tensor *in[4] = {kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -1, 0, 1)),
                          kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-3, 1)), NULL};
    kiln_tensor *want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-0.5, 3, 3, 3));
    fails += kiln_optest("FusedGemm", "alpha=2.0;activation=LeakyRelu;act_alpha=0.5", 3, in, 1,
                         &want, 0, 0, "fusedgemm by hand: alpha, C, LeakyRelu");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -1, 0, 1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-3, 1));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, 3, 3, 3));
    fails += kiln_optest("FusedGemm", "alpha=2.0;activation=Relu", 3, in, 1, &want, 0, 0,
                         "fusedgemm by hand: Relu");

    static const struct {
        const char *act, *attrs, *fused;
    } acts[] = {
        {"Relu", "", ""},
        {"LeakyRelu", "alpha=0.2", "act_alpha=0.2"},
        {"Clip", "", ""},
        {"Sigmoid", "", ""},
        {"HardSwish", "", ""},
        {"HardSigmoid", "alpha=0.3;beta=0.4", "act_alpha=0.3;act_beta=0.4"},
        {"Tanh", "", ""},
        {"Silu", "", ""},
        {"Gelu", "", ""},
        {"GeluTanh", "", ""},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "fusedgemm random %s, transB, C (N)", acts[i].act);
        fails += random_case(label, KILN_F32, 7, 9, 5, "alpha=0.5;beta=2.0", true, 1,
                             acts[i].act, acts[i].attrs, acts[i].fused, 200 + i);
    }
    /* a Linear's shape (beta 1, C a row (N) or none): CUDA's cuBLASLt GELU_BIAS / GELU
     * epilogues (GeluTanh; Gelu in f16 / bf16, the tanh form within their tolerance) */
    for (int k = 0; k < 4; k++) {
        char label[128];
        snprintf(label, sizeof label, "fusedgemm random %s, transB, %s (the GELU epilogues)", k % 2 ? "GeluTanh" : "Gelu",
                 k < 2 ? "C (N)" : "no C");
        fails += random_case(label, KILN_F32, 48, 40, 32, "alpha=1.0", true, k < 2 ? 1 : 0, k % 2 ? "GeluTanh" : "Gelu", "", "",
                             230 + k);
    }
    fails += random_case("fusedgemm random Relu large (threaded epilogue), C (M,N)", KILN_F32, 256,
                         192, 64, "beta=0.5", false, 2, "Relu", "", "", 220);
    fails += random_case("fusedgemm random f64 Tanh, no C", KILN_F64, 6, 4, 3, "alpha=1.5", false,
                         0, "Tanh", "", "", 221);

    /* the residual Z: by hand, A @ B + C = [[-2,2],[0,2]], + Z [[1,1],[1,-5]], Relu */
    {
        kiln_tensor *zin[4] = {kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4)),
                               kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -1, 0, 1)),
                               kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-3, 1)),
                               kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 1, 1, -5))};
        kiln_tensor *zw = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, 3, 1, 0));
        fails += kiln_optest("FusedGemm", "activation=Relu", 4, zin, 1, &zw, 0, 0,
                             "fusedgemm by hand: C, residual Z, Relu");
    }
    /* a Linear's second product and the residual Add after it (a transformer's MLP): C a row
     * or none, no activation (cuBLASLt's BIAS epilogue with Z as its C, beta 1), and with
     * activations after the sum */
    for (int k = 0; k < 4; k++) {
        static const char *const za[4] = {"", "", "Relu", "Silu"};
        char label[128];
        snprintf(label, sizeof label, "fusedgemm random residual Z, %s, %s", k == 1 ? "no C" : "C (N)",
                 za[k][0] ? za[k] : "no activation");
        fails += random_case_z(label, KILN_F32, 40, 24, 32, "alpha=1.0", true, k == 1 ? 0 : 1, za[k], "", "", 240 + k,
                               true);
    }
    /* for the backend sweep (each dtype): a transformer MLP's second product with its bias
     * and residual, and a residual without C under Relu */
    fails += kiln_optest_sweep("FusedGemm", "transB=1", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(300, 96), -1, 1, 250),
                                                 kt_rand(KILN_F32, 2, KT_DIMS(72, 96), -1, 1, 251),
                                                 kt_rand(KILN_F32, 1, KT_DIMS(72), -1, 1, 252),
                                                 kt_rand(KILN_F32, 2, KT_DIMS(300, 72), -2, 2, 253)},
                               1, "fusedgemm sweep: bias row and residual (a Linear + residual Add)");
    fails += kiln_optest_sweep("FusedGemm", "activation=Relu", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(130, 40), -1, 1, 254),
                                                 kt_rand(KILN_F32, 2, KT_DIMS(40, 56), -1, 1, 255), NULL,
                                                 kt_rand(KILN_F32, 2, KT_DIMS(130, 56), -2, 2, 256)},
                               1, "fusedgemm sweep: residual without C, Relu");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("FusedGemm", "", 4, in, 1, KILN_ERR_SHAPE, "fusedgemm residual of another shape");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[3] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("FusedGemm", "", 4, in, 1, KILN_ERR_UNSUPPORTED,
                               "fusedgemm residual with a full C");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[2] = NULL;
    fails += kiln_optest_fails("FusedGemm", "activation=Relu", 3, in, 1, KILN_ERR_SHAPE,
                               "fusedgemm inner dims differ (Gemm's checks)");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[2] = NULL;
    fails += kiln_optest_fails("FusedGemm", "activation=Swish", 3, in, 1, KILN_ERR_UNSUPPORTED,
                               "fusedgemm unknown activation");
    return fails;
}
#endif /* KILN_OPTESTS */

static double flops(const kiln_op_ctx *c) { return kiln_op_gemm.flops(c); } /* Gemm's */

const kiln_op_def kiln_op_fused_gemm = {
    .precision = KILN_PREC_LOW, .flops = flops,
    .name = "FusedGemm", .domain = "kiln", .min_inputs = 2, .max_inputs = 4, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test),
};
