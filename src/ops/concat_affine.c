/* concat_affine.c — kiln.ConcatAffine(S, T, X0, ..., Xn-1) -> Y: a Concat along the channel
 * axis and a per-channel affine (an inference BatchNormalization), optionally with Relu, as
 * one pass over the data (FUSED.md):
 *
 *   Y[n, c, ...] = act(concat(X0, ..., Xn-1; axis 1)[n, c, ...] * S[c] + T[c])
 *
 *   X0..Xn-1 (n >= 1): one float dtype and rank >= 2, the same dims but dim 1; Y has their
 *   dtype and the concatenation's dims. S and T: C elements each (C the sum of the Xk's
 *   dim 1; any shape of C elements, the pass writes (C)), any float dtype (kept f32 by the
 *   precision pass: inputs 0 and 1 are f32_inputs). Attribute relu (int, 0 or 1): act is
 *   Relu (NaN maps to 0, as kiln's Relu) or the identity. Computed in double, rounded once
 *   to Y's dtype (the CUDA kernel: in f32).
 *
 * Why: DenseNet reads the Concat of all earlier features in every layer and its first
 * BatchNormalization cannot fold into a convolution; the Concat wrote every feature again
 * (O(L^2) bytes per dense block: densenet121 fp16 bs256 on an H100, Concat 4.69 ms) and the
 * BN read it back. Fused, the pieces are read once and Y written once (the Concat's bytes
 * vanish). fuse-eltwise makes it from Concat(axis 1) -> kiln.FusedElementwise "x s Mul t
 * Add [Relu]" with per-channel constants s and t, the Concat's output read by nothing else.
 * No gradient: inference graphs only. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define N_PARAMS 2 /* S, T */

static kiln_status infer(kiln_op_ctx *c) {
    KILN_OP_CHECK(c, c->n_in >= N_PARAMS + 1, KILN_ERR_SHAPE, "needs S, T and at least one X (%d inputs)", c->n_in);
    for (int i = 0; i < c->n_in; i++) KILN_OP_CHECK(c, c->in[i] != NULL, KILN_ERR_SHAPE, "input %d is missing", i);
    const kiln_tensor *x0 = c->in[N_PARAMS];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x0->dtype), KILN_ERR_TYPE, "X has dtype %s (a float dtype is needed)",
                  kiln_dtype_name(x0->dtype));
    KILN_OP_CHECK(c, x0->ndim >= 2, KILN_ERR_SHAPE, "X has rank %d (at least 2: channels are dim 1)", x0->ndim);
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, x0->dims, sizeof x0->dims);
    dims[1] = 0;
    for (int i = N_PARAMS; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        KILN_OP_CHECK(c, x->dtype == x0->dtype, KILN_ERR_TYPE, "input %d has dtype %s, input %d %s", i,
                      kiln_dtype_name(x->dtype), N_PARAMS, kiln_dtype_name(x0->dtype));
        KILN_OP_CHECK(c, x->ndim == x0->ndim, KILN_ERR_SHAPE, "input %d has rank %d, input %d rank %d", i, x->ndim,
                      N_PARAMS, x0->ndim);
        for (int d = 0; d < x->ndim; d++)
            KILN_OP_CHECK(c, d == 1 || x->dims[d] == x0->dims[d], KILN_ERR_SHAPE,
                          "input %d has dim %d = %" PRId64 ", input %d %" PRId64 " (only dim 1 may differ)", i, d,
                          x->dims[d], N_PARAMS, x0->dims[d]);
        dims[1] += x->dims[1];
    }
    for (int k = 0; k < N_PARAMS; k++) {
        const kiln_tensor *p = c->in[k];
        KILN_OP_CHECK(c, kiln_dtype_is_float(p->dtype), KILN_ERR_TYPE, "%s has dtype %s (a float dtype is needed)",
                      k ? "T" : "S", kiln_dtype_name(p->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(p) == dims[1], KILN_ERR_SHAPE,
                      "%s has %" PRId64 " elements for %" PRId64 " channels", k ? "T" : "S", kiln_tensor_numel(p), dims[1]);
    }
    const int64_t relu = kiln_attr_int(c->node, "relu", 0);
    KILN_OP_CHECK(c, relu == 0 || relu == 1, KILN_ERR_INVALID_ARGUMENT, "relu = %" PRId64 " (0 or 1)", relu);
    kiln_tensor_set_shape(c->out[0], x0->dtype, x0->ndim, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0]; // (N, C, S...)
    const kiln_tensor *s = c->in[0], *t = c->in[1]; // (C)
    const bool relu = kiln_attr_int(c->node, "relu", 0) != 0;
    const int64_t N = y->dims[0], C = y->dims[1];
    int64_t S = 1;
    for (int d = 2; d < y->ndim; d++) S *= y->dims[d];
    int64_t c0 = 0;
    for (int i = N_PARAMS; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i]; // (N, Ck, S...)
        const int64_t ck = x->dims[1];
        for (int64_t ch = 0; ch < ck; ch++) {
            const double a = kiln_get_f64(s, c0 + ch), b = kiln_get_f64(t, c0 + ch);
            for (int64_t n = 0; n < N; n++) {
                const int64_t src = (n * ck + ch) * S, dst = (n * C + c0 + ch) * S;
                if (x->dtype == KILN_F32) { /* the same arithmetic without the dtype switch */
                    const float *xp = (const float *)x->data + src; // (S)
                    float *yp = (float *)y->data + dst;
                    for (int64_t e = 0; e < S; e++) {
                        const double v = xp[e] * a + b;
                        yp[e] = (float)(relu ? (v > 0 ? v : 0) : v);
                    }
                    continue;
                }
                for (int64_t e = 0; e < S; e++) {
                    double v = kiln_get_f64(x, src + e) * a + b;
                    if (relu) v = v > 0 ? v : 0; /* NaN -> 0, as Relu */
                    kiln_set_f64(y, dst + e, v);
                }
            }
        }
        c0 += ck;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* ConcatAffine against Concat then Mul and Add by (C,1,...) vectors then Relu, each of
 * those in double (the contract: one rounding at the end). */
static int compare_composed(kiln_dtype dt, int n_x, const int64_t *cs, int nd, const int64_t *rest, bool relu,
                            const char *label) {
    kiln_tensor *in[2 + 16];
    int64_t C = 0, dims[KILN_MAX_DIMS];
    for (int k = 0; k < n_x; k++) C += cs[k];
    in[0] = kt_rand(KILN_F32, 1, &C, 0.25, 2, 7);
    in[1] = kt_rand(KILN_F32, 1, &C, -1, 1, 8);
    for (int k = 0; k < n_x; k++) {
        dims[0] = rest[0];
        dims[1] = cs[k];
        for (int d = 2; d < nd; d++) dims[d] = rest[d - 1];
        in[2 + k] = kt_rand(dt, nd, dims, -2, 2, 100 + (uint64_t)k);
    }
    /* the expected values in double */
    dims[0] = rest[0];
    dims[1] = C;
    for (int d = 2; d < nd; d++) dims[d] = rest[d - 1];
    kiln_tensor *want = kt_make(dt, nd, dims, NULL);
    int64_t S = 1;
    for (int d = 2; d < nd; d++) S *= dims[d];
    int64_t c0 = 0;
    for (int k = 0; want && k < n_x; k++) {
        for (int64_t n = 0; n < dims[0]; n++)
            for (int64_t ch = 0; ch < cs[k]; ch++)
                for (int64_t e = 0; e < S; e++) {
                    double v = kiln_get_f64(in[2 + k], (n * cs[k] + ch) * S + e) * kiln_get_f64(in[0], c0 + ch) +
                               kiln_get_f64(in[1], c0 + ch);
                    if (relu) v = v > 0 ? v : 0;
                    kiln_set_f64(want, (n * C + c0 + ch) * S + e, v);
                }
        c0 += cs[k];
    }
    return kiln_optest("ConcatAffine", relu ? "relu=1" : "relu=0", 2 + n_x, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    /* by hand: two pieces, (1,1,2) and (1,2,2) -> (1,3,2) */
    kiln_tensor *in[4];
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, -1, 0.5));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 0.5, -4));
    in[2] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 2), KT_VALS(1, -3));
    in[3] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 2), KT_VALS(2, -1, 4, 16));
    kiln_tensor *y = kt_make(KILN_F32, 3, KT_DIMS(1, 3, 2), KT_VALS(3, -5, -1.5, 1.5, -2, 4));
    fails += kiln_optest("ConcatAffine", "", 4, in, 1, &y, 0, 0, "concat affine by hand");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, -1, 0.5));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 0.5, -4));
    in[2] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 2), KT_VALS(1, -3));
    in[3] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 2), KT_VALS(2, -1, 4, 16));
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 3, 2), KT_VALS(3, 0, 0, 1.5, 0, 4));
    fails += kiln_optest("ConcatAffine", "relu=1", 4, in, 1, &y, 0, 0, "concat affine relu by hand");
    /* NaN through Relu is 0 */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 1), KT_VALS(NAN));
    y = kt_make(KILN_F32, 2, KT_DIMS(1, 1), KT_VALS(0));
    fails += kiln_optest("ConcatAffine", "relu=1", 3, in, 1, &y, 0, 0, "NaN through relu");

    /* DenseNet's shapes, small: 4-D pieces of 16 and 8 channels (vectors in every dtype
     * on CUDA), odd channel counts (scalar path), one piece, rank 2 (BN1d after a Gemm) */
    const int64_t dn[3] = {16, 8, 8}, odd[3] = {5, 3, 6}, one[1] = {12};
    fails += compare_composed(KILN_F32, 3, dn, 4, KT_DIMS(2, 3, 5), true, "densenet layer, f32");
    fails += compare_composed(KILN_F64, 3, odd, 4, KT_DIMS(2, 3, 3), false, "odd channels, f64, no relu");
    fails += compare_composed(KILN_F32, 1, one, 4, KT_DIMS(3, 2, 2), true, "one piece");
    fails += compare_composed(KILN_F32, 3, odd, 2, KT_DIMS(4), true, "rank 2");

    /* for the sweep (NHWC mixes on CUDA, every float dtype): 32- and 8-channel pieces,
     * 7x9 images; 12 pieces and more (the CUDA kernel launches them in groups) */
    {
        kiln_tensor *sw[2 + 14];
        int64_t C = 0;
        const int64_t pieces[3] = {32, 8, 24};
        for (int k = 0; k < 3; k++) {
            C += pieces[k];
            sw[2 + k] = kt_rand(KILN_F32, 4, KT_DIMS(2, pieces[k], 7, 9), -2, 2, 200 + (uint64_t)k);
        }
        sw[0] = kt_rand(KILN_F32, 1, &C, 0.25, 2, 9);
        sw[1] = kt_rand(KILN_F32, 1, &C, -1, 1, 10);
        fails += kiln_optest_sweep_tol("ConcatAffine", "relu=1", 0, 5, sw, 1, 1e-5, 1e-5, "densenet pieces 32+8+24");
        C = 0;
        for (int k = 0; k < 14; k++) {
            const int64_t ck = k % 3 ? 8 : 3;
            C += ck;
            sw[2 + k] = kt_rand(KILN_F32, 4, KT_DIMS(2, ck, 3, 5), -2, 2, 300 + (uint64_t)k);
        }
        sw[0] = kt_rand(KILN_F32, 1, &C, 0.25, 2, 11);
        sw[1] = kt_rand(KILN_F32, 1, &C, -1, 1, 12);
        fails += kiln_optest_sweep_tol("ConcatAffine", "relu=0", 0, 16, sw, 1, 1e-5, 1e-5, "14 pieces, mixed widths");
    }

    /* rejected */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 2), NULL);
    in[3] = kt_make(KILN_F32, 3, KT_DIMS(1, 2, 2), NULL);
    fails += kiln_optest_fails("ConcatAffine", "", 4, in, 1, KILN_ERR_SHAPE, "S of the wrong size");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 2), NULL);
    in[3] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), NULL);
    fails += kiln_optest_fails("ConcatAffine", "", 4, in, 1, KILN_ERR_SHAPE, "pieces differ beyond dim 1");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_I32, 2, KT_DIMS(1, 2), NULL);
    fails += kiln_optest_fails("ConcatAffine", "", 3, in, 1, KILN_ERR_TYPE, "integer X");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), NULL);
    fails += kiln_optest_fails("ConcatAffine", "relu=2", 3, in, 1, KILN_ERR_INVALID_ARGUMENT, "relu = 2");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_concat_affine = {
    .precision = KILN_PREC_LOW, .f32_inputs = 0x3u /* S, T: the BN's scale and shift keep f32 */,
    .layout = KILN_LAYOUT_BINARY,
    .name = "ConcatAffine", .domain = "kiln", .min_inputs = N_PARAMS + 1, .max_inputs = N_PARAMS + 256,
    .min_outputs = 1, .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
