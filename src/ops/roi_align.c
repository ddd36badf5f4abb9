/* roi_align.c — RoiAlign (opsets 10, 16; Mask R-CNN's ROIAlign): for each region of interest r,
 * rois[r] = (x1, y1, x2, y2) in X's coordinates times 1 / spatial_scale, on the image
 * batch_indices[r] of X (N, C, H, W), the (output_height, output_width) bins of the region,
 * each the average ("avg", the default) or the maximum ("max") of a grid of bilinear samples:
 * Y (num_rois, C, output_height, output_width).
 *
 *   coordinate_transformation_mode (opset 16): "half_pixel" (the default) shifts the region
 *     by -0.5 pixel; "output_half_pixel" (opset 10's only behaviour) does not, and makes a
 *     region at least 1 x 1;
 *   sampling_ratio: samples a bin per dim (0, the default: ceil(region / bins), adaptive);
 *   a sample further than 1 pixel outside X counts as 0; one inside is clamped to the last
 *     row / column.
 *   max: as ONNX's reference and onnxruntime take it, each sample's value is the largest of
 *     its four weighted taps (w * x), and the bin the largest sample.
 *
 * A batch index outside [0, N) fails, naming it. Weights and positions in double (the
 * reference: Python floats), the sums in double: roi_align_math.h, shared with the CUDA
 * kernel. Not differentiable in kiln. */
#include "../core/optest.h"
#include "roi_align_math.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool max_mode(const kiln_node *n, bool *ok) {
    const char *m = kiln_attr_string(n, "mode", "avg");
    *ok = !strcmp(m, "avg") || !strcmp(m, "max");
    return !strcmp(m, "max");
}

static bool half_pixel(const kiln_node *n, bool *ok) {
    const char *m = kiln_attr_string(n, "coordinate_transformation_mode", n->opset >= 16 ? "half_pixel" : "output_half_pixel");
    *ok = !strcmp(m, "half_pixel") || !strcmp(m, "output_half_pixel");
    return !strcmp(m, "half_pixel");
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *r = c->in[1], *b = c->in[2];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "X has dtype %s (a float dtype is needed)",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, kiln_dtype_is_float(r->dtype), KILN_ERR_TYPE, "rois have dtype %s (a float dtype is needed)",
                  kiln_dtype_name(r->dtype));
    KILN_OP_CHECK(c, b->dtype == KILN_I64 || b->dtype == KILN_I32, KILN_ERR_TYPE,
                  "batch_indices have dtype %s (i64 is needed)", kiln_dtype_name(b->dtype));
    KILN_OP_CHECK(c, x->ndim == 4, KILN_ERR_SHAPE, "X must be 4-D (N, C, H, W), got rank %d", x->ndim);
    KILN_OP_CHECK(c, r->ndim == 2 && r->dims[1] == 4, KILN_ERR_SHAPE, "rois must be (num_rois, 4), got rank %d%s", r->ndim,
                  r->ndim == 2 ? " with another last dim" : "");
    KILN_OP_CHECK(c, b->ndim == 1 && b->dims[0] == r->dims[0], KILN_ERR_SHAPE,
                  "batch_indices must be (num_rois) = (%lld), got rank %d, %lld", (long long)r->dims[0], b->ndim,
                  (long long)(b->ndim ? b->dims[0] : -1));
    bool ok1, ok2;
    (void)max_mode(c->node, &ok1);
    (void)half_pixel(c->node, &ok2);
    KILN_OP_CHECK(c, ok1, KILN_ERR_INVALID_ARGUMENT, "mode '%s' is not avg or max", kiln_attr_string(c->node, "mode", ""));
    KILN_OP_CHECK(c, ok2, KILN_ERR_INVALID_ARGUMENT, "coordinate_transformation_mode '%s' is not half_pixel or "
                  "output_half_pixel", kiln_attr_string(c->node, "coordinate_transformation_mode", ""));
    const int64_t oh = kiln_attr_int(c->node, "output_height", 1), ow = kiln_attr_int(c->node, "output_width", 1);
    const int64_t sr = kiln_attr_int(c->node, "sampling_ratio", 0);
    KILN_OP_CHECK(c, oh >= 1 && ow >= 1 && oh <= (1 << 20) && ow <= (1 << 20), KILN_ERR_INVALID_ARGUMENT,
                  "output_height %lld and output_width %lld must be >= 1", (long long)oh, (long long)ow);
    KILN_OP_CHECK(c, sr >= 0 && sr <= 4096, KILN_ERR_INVALID_ARGUMENT, "sampling_ratio %lld must be >= 0",
                  (long long)sr);
    const int64_t dims[4] = {r->dims[0], x->dims[1], oh, ow};
    kiln_tensor_set_shape(c->out[0], x->dtype, 4, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *rois = c->in[1], *bi = c->in[2];
    kiln_tensor *y = c->out[0];
    bool ok;
    const bool is_max = max_mode(c->node, &ok), hp = half_pixel(c->node, &ok);
    const int64_t R = rois->dims[0], N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    const int64_t PH = y->dims[2], PW = y->dims[3], sr = kiln_attr_int(c->node, "sampling_ratio", 0);
    const double scale = kiln_attr_float(c->node, "spatial_scale", 1.0f);
    for (int64_t r = 0; r < R; r++) {
        const int64_t b = kiln_get_i64(bi, r);
        KILN_OP_CHECK(c, b >= 0 && b < N, KILN_ERR_INVALID_ARGUMENT,
                      "batch_indices[%lld] = %lld is outside [0, %lld) (X's batch)", (long long)r, (long long)b,
                      (long long)N);
        const kiln_roi_box box =
            kiln_roi_box_of(kiln_get_f64(rois, r * 4 + 0), kiln_get_f64(rois, r * 4 + 1), kiln_get_f64(rois, r * 4 + 2),
                            kiln_get_f64(rois, r * 4 + 3), scale, hp, PH, PW, sr);
        for (int64_t ch = 0; ch < C; ch++) {
            const int64_t base = (b * C + ch) * H * W;
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    double acc = 0;
                    for (int64_t iy = 0; iy < box.gh; iy++)
                        for (int64_t ix = 0; ix < box.gw; ix++) {
                            const kiln_roi_taps t = kiln_roi_taps_at(&box, ph, pw, iy, ix, H, W);
                            double v[4];
                            for (int k = 0; k < 4; k++) v[k] = kiln_get_f64(x, base + t.off[k]);
                            acc = kiln_roi_fold(acc, kiln_roi_combine(&t, v, is_max), iy == 0 && ix == 0, is_max);
                        }
                    kiln_set_f64(y, ((r * C + ch) * PH + ph) * PW + pw, kiln_roi_result(acc, &box, is_max));
                }
        }
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* X (2, 1, 5, 5) = (0..49 * 0.37) mod 3.1 in f32, three regions (one partly outside X, two
     * on image 1); expected values from onnx.reference's RoiAlign (opset 16), to 7 digits. */
    static const double xv[50] = {
        0, 0.370000005, 0.74000001, 1.11000001, 1.48000002, 1.85000002, 2.22000003, 2.59000015, 2.96000004,
        0.230000019, 0.600000143, 0.970000267, 1.34000015, 1.71000004, 2.0800004, 2.45000029, 2.82000017,
        0.0900001526, 0.460000038, 0.830000401, 1.20000029, 1.57000017, 1.94000053, 2.31000042, 2.68000031,
        3.05000019, 0.320000172, 0.690000057, 1.0600009, 1.43000078, 1.80000067, 2.17000055, 2.54000044, 2.91000032,
        0.180000305, 0.550000191, 0.920000076, 1.29000092, 1.6600008, 2.03000069, 2.40000057, 2.77000046,
        0.0400004387, 0.410000324, 0.780001163, 1.1500001, 1.52000093, 1.88999987, 2.26000071, 2.63000154};
    static const double rv[12] = {0.3, 0.7, 3.6, 3.2, 1.0, 0.5, 4.5, 4.9, -0.8, 2.0, 2.5, 5.5};
    static const struct {
        const char *attrs;
        int64_t oh, ow;
        double want[18];
    } cases[] = {
        {"output_height=2;output_width=2;sampling_ratio=2", 2, 2,
         {1.544375, 2.154875, 1.326864, 1.389293, 1.508047, 1.741407, 1.579532, 1.398751, 1.340625, 1.405434,
          1.345313, 1.637778}},
        {"output_height=2;output_width=2;sampling_ratio=2;mode=max", 2, 2,
         {1.842947, 1.926717, 1.051772, 0.8964142, 1.135063, 1.100344, 1.947657, 1.320688, 1.950001, 1.716102, 1.15,
          1.159001}},
        {"coordinate_transformation_mode=output_half_pixel;output_height=2;output_width=3;spatial_scale=0.5", 2, 3,
         {1.382875, 1.586375, 1.789875, 1.647875, 1.851375, 2.054875, 1.760053, 1.8225, 2.038334, 1.239167, 1.353282,
          1.410886, 1.253125, 1.410375, 1.613876, 1.128125, 1.285375, 1.488875}},
        {"coordinate_transformation_mode=output_half_pixel;output_height=2;output_width=2;mode=max", 2, 2,
         {1.561978, 2.374938, 1.78321, 1.024664, 1.513417, 2.049125, 1.45425, 2.630002, 1.65, 1.404477, 1.15,
          1.724625}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[160];
        snprintf(label, sizeof label, "roi_align %s", cases[i].attrs);
        fails += kiln_optest_opset("RoiAlign", cases[i].attrs, 16, 3,
                                   (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(2, 1, 5, 5), xv),
                                                     kt_make(KILN_F32, 2, KT_DIMS(3, 4), rv),
                                                     kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 1, 1))},
                                   1,
                                   (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(3, 1, cases[i].oh, cases[i].ow),
                                                             cases[i].want)},
                                   2e-6, 2e-6, label);
    }
    /* opset 10: output_half_pixel without the attribute */
    fails += kiln_optest_opset("RoiAlign", "output_height=2;output_width=2;mode=max", 10, 3,
                               (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(2, 1, 5, 5), xv),
                                                 kt_make(KILN_F32, 2, KT_DIMS(3, 4), rv),
                                                 kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 1, 1))},
                               1, (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(3, 1, 2, 2), cases[3].want)}, 2e-6,
                               2e-6, "roi_align opset 10 (output_half_pixel)");
    /* the backend sweep: regions inside, across and outside the maps, both modes and transforms */
    static const char *const sweeps[4] = {
        "output_height=7;output_width=5;sampling_ratio=2;spatial_scale=0.25",
        "output_height=3;output_width=4;mode=max;spatial_scale=0.5",
        "coordinate_transformation_mode=output_half_pixel;output_height=6;output_width=6;spatial_scale=0.125",
        "coordinate_transformation_mode=output_half_pixel;output_height=2;output_width=3;sampling_ratio=3;mode=max"};
    for (int i = 0; i < 4; i++) {
        char label[160];
        snprintf(label, sizeof label, "roi_align sweep %s", sweeps[i]);
        kiln_tensor *r = kt_rand(KILN_F32, 2, KT_DIMS(9, 4), -8, 60, 7300 + (uint64_t)i);
        float *v = r->data;
        for (int k = 0; k < 9; k++) /* (x1, y1) <= (x2, y2) but in region 4, which stays reversed */
            for (int d = 0; d < 2 && k != 4; d++)
                if (v[k * 4 + d] > v[k * 4 + 2 + d]) {
                    const float t = v[k * 4 + d];
                    v[k * 4 + d] = v[k * 4 + 2 + d];
                    v[k * 4 + 2 + d] = t;
                }
        fails += kiln_optest_sweep("RoiAlign", sweeps[i], 16, 3,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 13, 17), -2, 2, 7310 + (uint64_t)i),
                                                     r, kt_make(KILN_I64, 1, KT_DIMS(9), KT_VALS(0, 1, 2, 2, 1, 0, 0, 1, 2))},
                                   1, label);
    }
    /* refusals: X (N, 1, 4, 4), rois (R, cols) = (0, 0, 2, 2) each, batch_indices (B) = index */
    static const struct {
        const char *attrs, *label;
        int64_t n, r, cols, b, index;
        kiln_status want;
    } bad[] = {
        {"mode=median", "roi_align bad mode", 1, 1, 4, 1, 0, KILN_ERR_INVALID_ARGUMENT},
        {"", "roi_align batch_indices length", 1, 2, 4, 1, 0, KILN_ERR_SHAPE},
        {"", "roi_align rois not (R, 4)", 1, 1, 5, 1, 0, KILN_ERR_SHAPE},
        {"", "roi_align batch index out of range", 2, 1, 4, 1, 2, KILN_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_tensor *r = kt_make(KILN_F32, 2, KT_DIMS(bad[i].r, bad[i].cols), NULL);
        for (int64_t k = 0; k < bad[i].r; k++) {
            kiln_set_f64(r, k * bad[i].cols + 2, 2);
            kiln_set_f64(r, k * bad[i].cols + 3, 2);
        }
        fails += kiln_optest_fails("RoiAlign", bad[i].attrs, 3,
                                   (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(bad[i].n, 1, 4, 4), NULL), r,
                                                     kt_make(KILN_I64, 1, KT_DIMS(bad[i].b),
                                                             KT_VALS((double)bad[i].index))},
                                   1, bad[i].want, bad[i].label);
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_roi_align = {
    /* X may run in f16 / bf16; the regions stay f32 (coordinates in pixels) */
    .precision = KILN_PREC_LOW, .f32_inputs = 0x2u,
    .name = "RoiAlign", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
