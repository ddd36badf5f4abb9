/* resize.c — Resize (opsets 11..21): nearest, N-linear or N-cubic interpolation over every
 * axis of a tensor of rank 1..8 (so bilinear / bicubic on H, W of NCHW and trilinear on
 * 5-D follow from the same code).
 *
 * The output size comes from `scales` (input 2: out = floor(in * scale)) or `sizes`
 * (input 3: scale = out / in); exactly one is given (an empty tensor counts as absent,
 * as opset 11 requires a scales input). Opset 18's `axes` restricts them (and roi) to some
 * axes, and `keep_aspect_ratio_policy` (not_larger / not_smaller) then uses one scale for
 * those axes with out = round_half_up(scale * in).
 *
 * An output coordinate x maps to the input coordinate x_o by
 * `coordinate_transformation_mode`: half_pixel (default) (x+0.5)/scale-0.5,
 * half_pixel_symmetric, pytorch_half_pixel (0 when the output length is 1, as the spec
 * and onnxruntime say; ONNX's Python reference uses -0.5), align_corners
 * x*(in-1)/(len-1) with len = in*scale (the unrounded length, as ONNX's reference and
 * test data use), asymmetric x/scale, tf_half_pixel_for_nn (x+0.5)/scale, and
 * tf_crop_and_resize start*(in-1) + x*(end-start)*(in-1)/(len-1) (0.5*(start+end)*(in-1)
 * when len is 1) with start, end from the `roi` input (input 1, [starts..., ends...], one
 * pair per axis of `axes`, float; other modes ignore it) and the same unrounded len. With
 * tf_crop_and_resize an output element whose x_o lies outside [0, in-1] on any axis is
 * `extrapolation_value` (converted to the dtype). The output size with scales stays
 * floor(in * scale): the spec text's floor(in * (end-start) * scale) is not what ONNX's
 * shape inference, reference or onnxruntime compute.
 *
 * nearest: x_o rounded by `nearest_mode` (round_prefer_floor (default), round_prefer_ceil,
 * floor, ceil) then clamped to [0, in-1]; any dtype (the op only moves elements).
 * linear: weights 1-f, f on floor(x_o) and floor(x_o)+1 (f = x_o - floor(x_o)).
 * cubic: weights W(f+1), W(f), W(1-f), W(2-f) on floor(x_o)-1 .. floor(x_o)+2, with Keys'
 * kernel W(s) = (a+2)|s|^3 - (a+3)|s|^2 + 1 for |s| <= 1, a|s|^3 - 5a|s|^2 + 8a|s| - 4a
 * for 1 < |s| < 2, a = `cubic_coeff_a` (default -0.75).
 * For both, indices outside [0, in-1] read the edge element, or with `exclude_outside`
 * get weight 0 and the remaining weights are scaled to sum to 1; the weights of the axes
 * multiply (separable, as ONNX's reference composes 1-D interpolations); sums are taken
 * in double; float dtypes only. Antialiased (opset 18) linear / cubic downsampling is
 * rejected with KILN_ERR_UNSUPPORTED.
 *
 * Gradient w.r.t. X: kiln.ResizeGrad(dY, X, roi, scales, sizes) with Resize's attributes
 * and opset (X read shape-only) adds every element of dY into the input elements it was
 * computed from, times their weights: the transpose of the resize (extrapolated elements
 * contribute nothing). Float dtypes; f16/bf16 accumulate in doubles. */
#include "../core/optest.h"
#include "cubic.h"
#include "movement.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum interp_mode { NEAREST, LINEAR, CUBIC } interp_mode;
typedef enum coord_mode {
    HALF_PIXEL, HALF_PIXEL_SYMMETRIC, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC,
    TF_HALF_PIXEL_FOR_NN, TF_CROP_AND_RESIZE
} coord_mode;
typedef enum nearest_mode { ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR, CEIL } nearest_mode;

typedef struct resize_plan {
    interp_mode mode;
    coord_mode coord;
    nearest_mode nearest;
    double cubic_a;
    bool exclude_outside;
    double extrapolation;
    double scale[KILN_MAX_DIMS];  /* output / input, per axis */
    double length[KILN_MAX_DIMS]; /* unrounded output length (align_corners, tf_crop_and_resize) */
    double roi_start[KILN_MAX_DIMS], roi_end[KILN_MAX_DIMS]; /* tf_crop_and_resize, per axis */
    int64_t out[KILN_MAX_DIMS];
} resize_plan;

static int pick(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static kiln_status parse_modes(kiln_op_ctx *c, resize_plan *p) {
    const kiln_node *node = c->node;
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    const char *mode = kiln_attr_string(node, "mode", "nearest");
    int k = pick(mode, modes, 3);
    KILN_OP_CHECK(c, k >= 0, KILN_ERR_UNSUPPORTED,
                  "mode '%s' is not supported (nearest, linear and cubic are)", mode);
    p->mode = (interp_mode)k;

    static const char *const coords[] = {"half_pixel", "half_pixel_symmetric",
                                         "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    const char *ct = kiln_attr_string(node, "coordinate_transformation_mode", "half_pixel");
    k = pick(ct, coords, 7);
    KILN_OP_CHECK(c, k >= 0, KILN_ERR_UNSUPPORTED,
                  "coordinate_transformation_mode '%s' is not supported", ct);
    p->coord = (coord_mode)k;

    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"};
    const char *nm = kiln_attr_string(node, "nearest_mode", "round_prefer_floor");
    k = pick(nm, nearests, 4);
    KILN_OP_CHECK(c, k >= 0, KILN_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", nm);
    p->nearest = (nearest_mode)k;

    p->cubic_a = kiln_attr_float(node, "cubic_coeff_a", -0.75f);
    p->exclude_outside = kiln_attr_int(node, "exclude_outside", 0) != 0;
    p->extrapolation = kiln_attr_float(node, "extrapolation_value", 0.0f);
    KILN_OP_CHECK(c, isfinite(p->cubic_a), KILN_ERR_SHAPE, "cubic_coeff_a is not finite");
    return KILN_OK;
}

/* roi (input 1) for tf_crop_and_resize: 2*na floats, starts then ends, for axes[0..na).
 * Its values are read when known (always in forward; infer may see the shape only). */
static kiln_status parse_roi(kiln_op_ctx *c, int at, resize_plan *p, const int64_t *axes,
                             int na) {
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        p->roi_start[d] = 0;
        p->roi_end[d] = 1;
    }
    if (p->coord != TF_CROP_AND_RESIZE) return KILN_OK;
    const kiln_tensor *roi = c->n_in > at + 1 ? c->in[at + 1] : NULL;
    KILN_OP_CHECK(c, roi && kiln_tensor_numel(roi) > 0, KILN_ERR_SHAPE,
                  "coordinate_transformation_mode tf_crop_and_resize needs the roi input");
    KILN_OP_CHECK(c, kiln_dtype_is_float(roi->dtype), KILN_ERR_TYPE,
                  "roi must be float, not %s", kiln_dtype_name(roi->dtype));
    KILN_OP_CHECK(c, roi->ndim == 1 && roi->dims[0] == 2 * (int64_t)na, KILN_ERR_SHAPE,
                  "roi has %" PRId64 " values, %d axes need %d", kiln_tensor_numel(roi), na,
                  2 * na);
    if (!roi->data) return KILN_OK;
    for (int i = 0; i < na; i++) {
        p->roi_start[axes[i]] = kiln_get_f64(roi, i);
        p->roi_end[axes[i]] = kiln_get_f64(roi, na + i);
        KILN_OP_CHECK(c, isfinite(p->roi_start[axes[i]]) && isfinite(p->roi_end[axes[i]]),
                      KILN_ERR_SHAPE, "roi of axis %" PRId64 " is not finite", axes[i]);
    }
    return KILN_OK;
}

/* The resize of X = c->in[at] by the roi, scales and sizes inputs that follow it (Resize:
 * at 0; ResizeGrad: 1). */
static kiln_status plan(kiln_op_ctx *c, int at, resize_plan *p) {
    const kiln_tensor *x = c->in[at];
    const kiln_node *node = c->node;
    int r = x->ndim;
    kiln_status st = parse_modes(c, p);
    if (st != KILN_OK) return st;

    /* the axes that scales / sizes / roi describe */
    int64_t axes[KILN_MAX_DIMS];
    int na = r;
    int n_attr = 0;
    const int64_t *axes_attr = node->opset >= 18 ? kiln_attr_ints(node, "axes", &n_attr) : NULL;
    bool seen[KILN_MAX_DIMS] = {false};
    if (axes_attr) {
        KILN_OP_CHECK(c, n_attr <= r, KILN_ERR_SHAPE, "axes has %d values for rank %d", n_attr,
                      r);
        na = n_attr;
        for (int i = 0; i < na; i++) {
            axes[i] = axes_attr[i];
            KILN_OP_CHECK(c, kiln_norm_axis(&axes[i], r), KILN_ERR_SHAPE,
                          "axes[%d] = %" PRId64 " is out of range for rank %d", i, axes_attr[i],
                          r);
            KILN_OP_CHECK(c, !seen[axes[i]], KILN_ERR_SHAPE, "axis %" PRId64 " is given twice",
                          axes[i]);
            seen[axes[i]] = true;
        }
    } else {
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    st = parse_roi(c, at, p, axes, na);
    if (st != KILN_OK) return st;

    const kiln_tensor *scales = c->n_in > at + 2 ? c->in[at + 2] : NULL;
    const kiln_tensor *sizes = c->n_in > at + 3 ? c->in[at + 3] : NULL;
    if (scales && kiln_tensor_numel(scales) == 0) scales = NULL;
    if (sizes && kiln_tensor_numel(sizes) == 0) sizes = NULL;
    KILN_OP_CHECK(c, (scales != NULL) != (sizes != NULL), KILN_ERR_SHAPE,
                  "exactly one of scales and sizes must be given (%s)",
                  scales ? "both are" : "neither is");

    for (int d = 0; d < r; d++) {
        p->scale[d] = 1;
        p->length[d] = (double)x->dims[d];
        p->out[d] = x->dims[d];
    }
    if (scales) {
        KILN_OP_CHECK(c, kiln_dtype_is_float(scales->dtype), KILN_ERR_TYPE,
                      "scales must be float, not %s", kiln_dtype_name(scales->dtype));
        KILN_OP_CHECK(c, scales->ndim == 1 && scales->dims[0] == na, KILN_ERR_SHAPE,
                      "scales has %" PRId64 " values for %d axes", kiln_tensor_numel(scales), na);
        KILN_OP_CHECK(c, scales->data, KILN_ERR_UNSUPPORTED,
                      "the values of scales must be known when the plan is built");
        for (int i = 0; i < na; i++) {
            int64_t d = axes[i];
            double s = kiln_get_f64(scales, i);
            KILN_OP_CHECK(c, s > 0 && isfinite(s), KILN_ERR_SHAPE,
                          "scales[%d] = %g is not positive", i, s);
            double len = (double)x->dims[d] * s;
            KILN_OP_CHECK(c, len < 9007199254740992.0, KILN_ERR_SHAPE,
                          "scales[%d] = %g makes axis %" PRId64 " too large", i, s, d);
            p->scale[d] = s;
            p->length[d] = len;
            p->out[d] = (int64_t)floor(len);
        }
    } else {
        int64_t want[KILN_MAX_DIMS];
        int n;
        st = kiln_read_ints(c, at + 3, "sizes", want, KILN_MAX_DIMS, &n);
        if (st != KILN_OK) return st;
        KILN_OP_CHECK(c, n == na, KILN_ERR_SHAPE, "sizes has %d values for %d axes", n, na);
        for (int i = 0; i < na; i++) {
            int64_t d = axes[i];
            KILN_OP_CHECK(c, want[i] >= 0, KILN_ERR_SHAPE, "sizes[%d] = %" PRId64 " is negative",
                          i, want[i]);
            KILN_OP_CHECK(c, x->dims[d] > 0, KILN_ERR_SHAPE,
                          "cannot resize the empty axis %" PRId64, d);
            p->scale[d] = (double)want[i] / (double)x->dims[d];
            p->length[d] = (double)want[i];
            p->out[d] = want[i];
        }
        const char *policy = kiln_attr_string(node, "keep_aspect_ratio_policy", "stretch");
        if (node->opset >= 18 && strcmp(policy, "stretch") != 0) {
            bool larger = strcmp(policy, "not_smaller") == 0;
            KILN_OP_CHECK(c, larger || strcmp(policy, "not_larger") == 0, KILN_ERR_UNSUPPORTED,
                          "keep_aspect_ratio_policy '%s' is not supported", policy);
            double s = p->scale[axes[0]];
            for (int i = 1; i < na; i++)
                s = larger ? fmax(s, p->scale[axes[i]]) : fmin(s, p->scale[axes[i]]);
            for (int i = 0; i < na; i++) {
                int64_t d = axes[i];
                p->scale[d] = s;
                p->length[d] = s * (double)x->dims[d];
                p->out[d] = (int64_t)(p->length[d] + 0.5);
            }
        }
    }
    if (p->mode != NEAREST && kiln_attr_int(node, "antialias", 0) != 0)
        for (int d = 0; d < r; d++)
            KILN_OP_CHECK(c, p->scale[d] >= 1, KILN_ERR_UNSUPPORTED,
                          "antialiased %s downsampling (axis %d) is not supported",
                          p->mode == CUBIC ? "cubic" : "linear", d);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "cannot resize a scalar");
    resize_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, p.mode == NEAREST || kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "mode %s needs a float input, not %s", p.mode == CUBIC ? "cubic" : "linear",
                  kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, p.out);
    return KILN_OK;
}

/* The input coordinate of output coordinate j on axis d (of input size in). Sets *outside
 * when tf_crop_and_resize puts it outside [0, in-1] (the element is extrapolated). */
static double source_coord(const resize_plan *p, int d, int64_t j, int64_t in, bool *outside) {
    double s = p->scale[d], x = (double)j;
    *outside = false;
    switch (p->coord) {
    case HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)p->out[d] / p->length[d], center = (double)in / 2;
        return center * (1 - adjustment) + (x + 0.5) / s - 0.5;
    }
    case PYTORCH_HALF_PIXEL: return p->out[d] > 1 ? (x + 0.5) / s - 0.5 : 0;
    case ALIGN_CORNERS: return p->length[d] == 1 ? 0 : x * (double)(in - 1) / (p->length[d] - 1);
    case ASYMMETRIC: return x / s;
    case TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / s;
    case TF_CROP_AND_RESIZE: {
        double a = p->roi_start[d], b = p->roi_end[d], span = (double)(in - 1);
        double xo = p->length[d] == 1 ? 0.5 * (a + b) * span
                                      : a * span + x * (b - a) * span / (p->length[d] - 1);
        *outside = !(xo >= 0 && xo <= span);
        return xo;
    }
    }
    return 0;
}

static int64_t clamp_index(double v, int64_t in) {
    return v <= 0 ? 0 : v >= (double)(in - 1) ? in - 1 : (int64_t)v;
}

static int64_t nearest_index(const resize_plan *p, double xo, int64_t in) {
    /* outside [-1, in] every rounding clamps to the same edge; keeps the casts in range */
    if (xo < -1) return 0;
    if (xo > (double)in) return in - 1;
    double fl = floor(xo), ratio = xo - fl, i = fl;
    if (ratio != 0) {
        switch (p->nearest) {
        case ROUND_PREFER_FLOOR: i = ratio <= 0.5 ? fl : fl + 1; break;
        case ROUND_PREFER_CEIL: i = ratio < 0.5 ? fl : fl + 1; break;
        case FLOOR: i = fl; break;
        case CEIL: i = fl + 1; break;
        }
    }
    return clamp_index(i, in);
}

/* Taps per output position of linear (2) and cubic (4) interpolation. */
static int mode_taps(interp_mode m) { return m == CUBIC ? 4 : m == LINEAR ? 2 : 1; }

static interp_mode mode_of(const kiln_node *node) {
    const char *mode = kiln_attr_string(node, "mode", "nearest");
    return strcmp(mode, "cubic") == 0 ? CUBIC : strcmp(mode, "linear") == 0 ? LINEAR : NEAREST;
}

static size_t workspace(const kiln_op_ctx *c) {
    /* nearest: one offset per output position; linear / cubic: K offsets, K weights and
     * an outside flag */
    int k = mode_taps(mode_of(c->node));
    size_t per = k == 1 ? 1 : 2 * (size_t)k + 1;
    return per * kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
}

/* Per output axis: the offset of the input element each output position copies, -1 where
 * tf_crop_and_resize extrapolates. */
static void nearest_tables(int64_t **maps, const resize_plan *p, int nd, const int64_t *xdims,
                           const int64_t *ydims, void *ws) {
    int64_t stride[KILN_MAX_DIMS];
    kiln_strides(nd, xdims, stride);
    kiln_axis_maps_carve(maps, ws, nd, ydims);
    for (int d = 0; d < nd; d++)
        for (int64_t j = 0; j < ydims[d]; j++) {
            bool outside;
            double xo = source_coord(p, d, j, xdims[d], &outside);
            maps[d][j] = outside ? -1 : nearest_index(p, xo, xdims[d]) * stride[d];
        }
}

static kiln_status forward_nearest(kiln_op_ctx *c, const resize_plan *p) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t *maps[KILN_MAX_DIMS];
    nearest_tables(maps, p, y->ndim, x->dims, y->dims, c->workspace);
    /* extrapolation_value in the dtype of x; only read where an offset is -1 */
    uint64_t fill_bits = 0;
    kiln_tensor fill = {.dtype = x->dtype, .ndim = 0, .data = &fill_bits};
    kiln_set_f64(&fill, 0, p->extrapolation);
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, fill.data);
    return KILN_OK;
}

/* Per output axis d, k[d] taps for each output position j: element offsets
 * off[d][j*k[d] + t] and weights w[d][j*k[d] + t], and out[d][j] != 0 where j is outside
 * the roi (then its taps are offset 0, weight 0). Axes where every x_o is a whole number
 * (scale 1 with half_pixel, the even outputs of x2 asymmetric...) get a single tap. */
typedef struct interp_taps {
    int k[KILN_MAX_DIMS];
    int64_t *off[KILN_MAX_DIMS];
    double *w[KILN_MAX_DIMS];
    int64_t *out[KILN_MAX_DIMS];
} interp_taps;

/* The taps of x_o on an axis of length in and stride stride (k = 1, 2 or 4). */
static void axis_taps(const resize_plan *p, double xo, int64_t in, int64_t stride, int k,
                      int64_t *off, double *w) {
    /* beyond two elements outside the axis every tap reads the edge; keeps casts in range */
    xo = xo < -2 ? -2 : xo > (double)(in + 1) ? (double)(in + 1) : xo;
    double fl = floor(xo), f = xo - fl, a = p->cubic_a;
    int64_t first = (int64_t)fl - (k == 4 ? 1 : 0);
    if (k == 1) {
        w[0] = 1;
    } else if (k == 2) {
        w[0] = 1 - f;
        w[1] = f;
    } else {
        kiln_cubic_weights(a, f, w);
    }
    double kept = 0;
    for (int t = 0; t < k; t++)
        if (first + t >= 0 && first + t < in) kept += w[t];
    /* kept == 0 only far outside the axis: then the edge values stand in */
    bool exclude = p->exclude_outside && kept != 0;
    for (int t = 0; t < k; t++) {
        int64_t i = first + t;
        if (exclude) w[t] = i >= 0 && i < in ? w[t] / kept : 0;
        off[t] = (i < 0 ? 0 : i >= in ? in - 1 : i) * stride;
    }
}

static void build_taps(const resize_plan *p, const kiln_tensor *x, const kiln_tensor *y,
                       void *ws, interp_taps *tp) {
    int nd = y->ndim, kmax = mode_taps(p->mode);
    int64_t stride[KILN_MAX_DIMS], kdims[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, stride);
    for (int d = 0; d < nd; d++) kdims[d] = y->dims[d] * kmax;
    size_t kbytes = kiln_axis_maps_bytes(nd, kdims);
    int64_t *w_raw[KILN_MAX_DIMS];
    kiln_axis_maps_carve(tp->off, ws, nd, kdims);
    kiln_axis_maps_carve(w_raw, (char *)ws + kbytes, nd, kdims);
    kiln_axis_maps_carve(tp->out, (char *)ws + 2 * kbytes, nd, y->dims);
    for (int d = 0; d < nd; d++) {
        int64_t in = x->dims[d];
        tp->w[d] = (double *)(void *)w_raw[d];
        bool whole = true;
        for (int64_t j = 0; j < y->dims[d] && whole; j++) {
            bool outside;
            double xo = source_coord(p, d, j, in, &outside);
            whole = outside || xo == floor(xo);
        }
        int k = tp->k[d] = whole ? 1 : kmax;
        for (int64_t j = 0; j < y->dims[d]; j++) {
            bool outside;
            double xo = source_coord(p, d, j, in, &outside);
            tp->out[d][j] = outside;
            if (outside) {
                for (int t = 0; t < k; t++) {
                    tp->off[d][j * k + t] = 0;
                    tp->w[d][j * k + t] = 0;
                }
            } else {
                axis_taps(p, xo, in, stride[d], k, tp->off[d] + j * k, tp->w[d] + j * k);
            }
        }
    }
}

enum { CHUNK = 256 };

/* acc[0..n) += w * (sum over the last axis's KL taps of output positions j0.. of x at
 * base + offset), for a constant tap count KL and a load expression LOAD(i). */
#define ACCUM_ROW(KL, LOAD)                                                       \
    for (int64_t m = 0; m < n; m++) {                                             \
        const int64_t *o = offl + (j0 + m) * (KL);                                \
        const double *ww = wl + (j0 + m) * (KL);                                  \
        double s = 0;                                                             \
        for (int u = 0; u < (KL); u++) s += ww[u] * (double)LOAD(base + o[u]);    \
        acc[m] += w * s;                                                          \
    }
#define LOAD_F32(i) xf[i]
#define LOAD_F64(i) xd[i]
#define LOAD_ANY(i) kiln_get_f64(x, i)
#define ACCUM_ANY_K(LOAD)                                                         \
    switch (kl) {                                                                 \
    case 1: ACCUM_ROW(1, LOAD) break;                                             \
    case 2: ACCUM_ROW(2, LOAD) break;                                             \
    default: ACCUM_ROW(4, LOAD) break;                                            \
    }

/* Output elements [i0, i1) of y. Each row (the last axis) is done in chunks of up to CHUNK
 * elements: the tap combinations of the outer axes (offset sum, weight product) are
 * enumerated once per chunk and the last axis's taps are applied per element. */
static void interp_range(const kiln_tensor *x, kiln_tensor *y, const interp_taps *tp,
                         double extrap, int64_t i0, int64_t i1) {
    int nd = y->ndim, no = nd - 1;
    int64_t width = y->dims[no];
    int kl = tp->k[no];
    const int64_t *offl = tp->off[no], *outl = tp->out[no];
    const double *wl = tp->w[no];
    const float *xf = x->dtype == KILN_F32 ? x->data : NULL;
    const double *xd = x->dtype == KILN_F64 ? x->data : NULL;
    float *yf = y->dtype == KILN_F32 ? y->data : NULL;
    int64_t idx[KILN_MAX_DIMS], rem = i0 / width, j0 = i0 % width;
    for (int d = no - 1; d >= 0; d--) {
        idx[d] = rem % y->dims[d];
        rem /= y->dims[d];
    }
    double acc[CHUNK];
    for (int64_t i = i0; i < i1;) {
        int64_t n = width - j0;
        if (n > i1 - i) n = i1 - i;
        if (n > CHUNK) n = CHUNK;
        bool row_outside = false;
        for (int d = 0; d < no; d++) row_outside |= tp->out[d][idx[d]] != 0;
        if (row_outside) {
            for (int64_t m = 0; m < n; m++) acc[m] = extrap;
        } else {
            for (int64_t m = 0; m < n; m++) acc[m] = 0;
            int t[KILN_MAX_DIMS] = {0};
            for (;;) {
                int64_t base = 0;
                double w = 1;
                for (int d = 0; d < no; d++) {
                    int64_t q = idx[d] * tp->k[d] + t[d];
                    base += tp->off[d][q];
                    w *= tp->w[d][q];
                }
                if (w != 0 && xf) {
                    ACCUM_ANY_K(LOAD_F32)
                } else if (w != 0 && xd) {
                    ACCUM_ANY_K(LOAD_F64)
                } else if (w != 0) {
                    ACCUM_ANY_K(LOAD_ANY)
                }
                int d = no - 1;
                for (; d >= 0; d--) {
                    if (++t[d] < tp->k[d]) break;
                    t[d] = 0;
                }
                if (d < 0) break;
            }
            for (int64_t m = 0; m < n; m++)
                if (outl[j0 + m]) acc[m] = extrap;
        }
        if (yf) {
            for (int64_t m = 0; m < n; m++) yf[i + m] = (float)acc[m];
        } else {
            for (int64_t m = 0; m < n; m++) kiln_set_f64(y, i + m, acc[m]);
        }
        i += n;
        j0 += n;
        if (j0 == width) {
            j0 = 0;
            for (int d = no - 1; d >= 0 && ++idx[d] == y->dims[d]; d--) idx[d] = 0;
        }
    }
}

static kiln_status forward_interp(kiln_op_ctx *c, const resize_plan *p) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    interp_taps tp;
    build_taps(p, x, y, c->workspace, &tp);
    int64_t n = kiln_tensor_numel(y);
    int64_t nt = n >= (1 << 14) ? kiln_cpu_threads() : 1;
    if (nt > n) nt = n;
    if (nt < 1) nt = 1;
#pragma omp parallel for num_threads((int)nt) schedule(static, 1) if (nt > 1)
    for (int64_t t = 0; t < nt; t++)
        interp_range(x, y, &tp, p->extrapolation, n * t / nt, n * (t + 1) / nt);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    if (kiln_tensor_numel(c->out[0]) == 0) return KILN_OK;
    resize_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    return p.mode == NEAREST ? forward_nearest(c, &p) : forward_interp(c, &p);
}

/* ---------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    static const char *const what[4] = {"X", "roi", "scales", "sizes"};
    for (int k = 1; k < 4; k++) {
        kiln_status st = kiln_grad_refuse(g, k, what[k]);
        if (st != KILN_OK) return st;
    }
    if (!g->need[0]) return KILN_OK;
    const kiln_node *n = KILN_GRAD_NODE(g);
    int in[5] = {g->dy[0], -1, -1, -1, -1};
    for (int k = 0; k < n->n_in; k++) in[1 + k] = n->in[k];
    g->dx[0] = kiln_grad_emit(g, "kiln", "ResizeGrad", n->n_in + 1, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "X must be a float tensor, not %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "cannot resize a scalar");
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY has dtype %s, X has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
    resize_plan p;
    kiln_status st = plan(c, 1, &p);
    if (st != KILN_OK) return st;
    bool same = dy->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = dy->dims[d] == p.out[d];
    char want[160];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the resized shape %s",
                  kiln_dims_str(x->ndim, p.out, want, sizeof want));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

/* the forward's tables over dY's axes, then the accumulator */
static size_t workspace_grad(const kiln_op_ctx *c) {
    int k = mode_taps(mode_of(c->node));
    size_t per = k == 1 ? 1 : 2 * (size_t)k + 1;
    return per * kiln_axis_maps_bytes(c->in[0]->ndim, c->in[0]->dims) +
           kiln_scatter_add_bytes(c->out[0]);
}

/* Every element of dY times each tap combination's weight, added into that combination's
 * element of dX; elements outside the roi add nothing. One thread: taps of different
 * outputs meet. */
static void interp_grad(const kiln_tensor *dy, float *accf, double *accd,
                        const interp_taps *tp) {
    int nd = dy->ndim;
    int64_t idx[KILN_MAX_DIMS] = {0}, n = kiln_tensor_numel(dy);
    const float *df = dy->dtype == KILN_F32 ? dy->data : NULL;
    for (int64_t i = 0; i < n; i++) {
        bool outside = false;
        for (int d = 0; d < nd; d++) outside |= tp->out[d][idx[d]] != 0;
        double g = outside ? 0 : df ? (double)df[i] : kiln_get_f64(dy, i);
        int t[KILN_MAX_DIMS] = {0};
        while (g != 0) {
            int64_t off = 0;
            double w = g;
            for (int d = 0; d < nd; d++) {
                int64_t q = idx[d] * tp->k[d] + t[d];
                off += tp->off[d][q];
                w *= tp->w[d][q];
            }
            if (accf) accf[off] += (float)w;
            else accd[off] += w;
            int d = nd - 1;
            for (; d >= 0; d--) {
                if (++t[d] < tp->k[d]) break;
                t[d] = 0;
            }
            if (d < 0) break;
        }
        for (int d = nd - 1; d >= 0 && ++idx[d] == dy->dims[d]; d--) idx[d] = 0;
    }
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    int64_t nx = kiln_tensor_numel(dx);
    if (nx == 0) return KILN_OK;
    resize_plan p;
    kiln_status st = plan(c, 1, &p);
    if (st != KILN_OK) return st;
    int nd = dx->ndim;
    int k = mode_taps(p.mode);
    size_t tables = (k == 1 ? 1 : 2 * (size_t)k + 1) * kiln_axis_maps_bytes(nd, dy->dims);
    char *acc_ws = (char *)c->workspace + tables;
    if (p.mode == NEAREST) {
        int64_t *maps[KILN_MAX_DIMS];
        nearest_tables(maps, &p, nd, dx->dims, dy->dims, c->workspace);
        kiln_scatter_add_axes(dx, dy, (const int64_t *const *)maps, acc_ws);
        return KILN_OK;
    }
    interp_taps tp;
    build_taps(&p, dx, dy, c->workspace, &tp);
    /* f32 and f64 accumulate in dX, f16 and bf16 in doubles after the tables */
    float *accf = dx->dtype == KILN_F32 ? dx->data : NULL;
    double *accd = dx->dtype == KILN_F64 ? dx->data : NULL;
    if (!accf && !accd) accd = (double *)(void *)acc_ws;
    if (accf) memset(accf, 0, (size_t)nx * sizeof *accf);
    else memset(accd, 0, (size_t)nx * sizeof *accd);
    interp_grad(dy, accf, accd, &tp);
    if (accd && accd != dx->data)
        for (int64_t i = 0; i < nx; i++) kiln_set_f64(dx, i, accd[i]);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
/* Runs Resize on x with roi (f32, 2n values) when non-NULL and scales (f32) or sizes (int64),
 * whichever is non-NULL, comparing with y within atol = rtol = tol. */
static int resize_roi_case(const char *attrs, int opset, kiln_tensor *x, int n, const double *roi,
                           const double *scales, const double *sizes, kiln_tensor *y, double tol,
                           const char *label) {
    kiln_tensor *in[4] = {x, NULL, NULL, NULL};
    if (roi) in[1] = kt_make(KILN_F32, 1, KT_DIMS(2 * n), roi);
    if (scales) in[2] = kt_make(KILN_F32, 1, KT_DIMS(n), scales);
    if (sizes) in[3] = kt_make(KILN_I64, 1, KT_DIMS(n), sizes);
    return kiln_optest_opset("Resize", attrs, opset, 4, in, 1, &y, tol, tol, label);
}

static int resize_case(const char *attrs, int opset, kiln_tensor *x, int n, const double *scales,
                       const double *sizes, kiln_tensor *y, const char *label) {
    return resize_roi_case(attrs, opset, x, n, NULL, scales, sizes, y, 1e-6, label);
}

/* Keys' kernel (a = -0.75) at distances 0.5 and 1.5, worked by hand:
 * (1.25*0.5 - 2.25)*0.25 + 1 = 0.59375 and ((-1.125 + 3.75)*1.5 - 6)*1.5 + 3 = -0.09375. */
static const double keys_half[4] = {-0.09375, 0.59375, 0.59375, -0.09375};

/* Cubic asymmetric x2 along one axis of length n at output o: even outputs sit on an input
 * element, odd ones halfway to the next, with taps i-1..i+2 clamped to the edge. */
static double cubic_x2(const double *v, int64_t step, int n, int o) {
    int i = o / 2;
    if (o % 2 == 0) return v[i * step];
    double s = 0;
    for (int t = 0; t < 4; t++) {
        int k = i - 1 + t;
        k = k < 0 ? 0 : k >= n ? n - 1 : k;
        s += keys_half[t] * v[k * step];
    }
    return s;
}

static int test_grad(void) {
    int fails = 0;
    /* random, for the CUDA sweep: linear up and down, cubic, nearest down */
    {
        static const struct {
            const char *attrs;
            int64_t x[4], y[4];
            double s[4];
        } cases[] = {
            {"mode=linear", {1, 2, 3, 4}, {1, 2, 6, 6}, {1, 1, 2, 1.5}},
            {"mode=linear;coordinate_transformation_mode=align_corners", {2, 2, 6, 8}, {2, 2, 3, 4}, {1, 1, 0.5, 0.5}},
            {"mode=cubic", {1, 3, 4, 5}, {1, 3, 8, 7}, {1, 1, 2, 1.5}},
            {"mode=nearest", {2, 3, 8, 6}, {2, 3, 4, 3}, {1, 1, 0.5, 0.5}},
        };
        for (int i = 0; i < 4; i++)
            fails += kiln_optest_sweep("ResizeGrad", cases[i].attrs, 0, 4,
                                       (kiln_tensor *[]){kt_rand(KILN_F32, 4, cases[i].y, -1, 1, 961 + i),
                                                         kt_make(KILN_F32, 4, cases[i].x, NULL), NULL,
                                                         kt_make(KILN_F32, 1, KT_DIMS(4), cases[i].s)},
                                       1, cases[i].attrs);
    }
    kiln_tensor *in[5], *want;
    /* nearest x2, x3: each input element sums its 2x3 block of dY = 1..24 */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 6), NULL);
    for (int i = 0; in[0] && i < 24; i++) kiln_set_f64(in[0], i, i + 1);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 3));
    in[4] = NULL;
    want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(30, 48, 102, 120));
    fails += kiln_optest("ResizeGrad", "mode=nearest", 5, in, 1, &want, 0, 0,
                         "resize grad nearest upsample");

    /* bilinear half_pixel 2x2 -> 4x4: per axis W = [[1,0],[.75,.25],[.25,.75],[0,1]], so
     * dX = W^T dY W (numpy) for dY = 1..16 */
    in[0] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 4, 4), NULL);
    for (int i = 0; in[0] && i < 16; i++) kiln_set_f64(in[0], i, i + 1);
    in[1] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[2] = NULL;
    in[3] = NULL;
    in[4] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 4, 4));
    want = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(16.5, 23.5, 44.5, 51.5));
    fails += kiln_optest("ResizeGrad", "mode=linear", 5, in, 1, &want, 0, 0,
                         "resize grad bilinear bf16 sizes");

    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[2] = NULL;
    in[3] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    fails += kiln_optest_fails("ResizeGrad", "mode=linear", 4, in, 1, KILN_ERR_SHAPE,
                               "resize grad dY of the wrong shape");
    return fails;
}

/* A gradient check of Resize w.r.t. x, resized by scales (f32) or sizes (int64), with roi
 * (f32, 2n values) when non-NULL. */
static int resize_gradcheck(const char *attrs, int opset, kiln_tensor *x, int n,
                            const double *roi, const double *scales, const double *sizes,
                            const char *label) {
    kiln_tensor *in[4] = {x, NULL, NULL, NULL};
    if (roi) in[1] = kt_make(KILN_F32, 1, KT_DIMS(2 * n), roi);
    if (scales) in[2] = kt_make(KILN_F32, 1, KT_DIMS(n), scales);
    if (sizes) in[3] = kt_make(KILN_I64, 1, KT_DIMS(n), sizes);
    return kiln_gradcheck("Resize", attrs, opset, 4, in, NULL, label);
}

static int test(void) {
    int fails = 0;
    const double v22[] = {1, 2, 3, 4}, v24[] = {1, 2, 3, 4, 5, 6, 7, 8};
    const double v44[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    /* expected values from onnx.reference (ONNX 1.17's Resize), unless noted */
    fails += resize_case("mode=nearest", 0, kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), 4,
                         KT_VALS(1, 1, 2, 3), NULL,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 6),
                                 KT_VALS(1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3,
                                         3, 3, 4, 4, 4)),
                         "resize nearest upsample scales");
    fails += resize_case("mode=linear", 0, kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 4), v24), 4,
                         KT_VALS(1, 1, 0.6, 0.6), NULL,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 1, 2),
                                 KT_VALS(2.6666665077209473, 4.3333330154418945)),
                         "resize linear downsample scales");
    fails += resize_case("mode=linear", 13, kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), 4,
                         KT_VALS(1, 1, 2, 2), NULL,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4),
                                 KT_VALS(1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75,
                                         3.25, 3.5, 3.0, 3.25, 3.75, 4.0)),
                         "resize bilinear upsample half_pixel");
    fails += resize_case("mode=linear;coordinate_transformation_mode=align_corners", 0,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), 4, NULL,
                         KT_VALS(1, 1, 3, 3),
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3),
                                 KT_VALS(1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0)),
                         "resize bilinear align_corners sizes");
    fails += resize_case("mode=linear;coordinate_transformation_mode=align_corners", 0,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 4), v24), 4,
                         KT_VALS(1, 1, 0.6, 0.6), NULL,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 1, 2), KT_VALS(1.0, 3.142857074737549)),
                         "resize align_corners uses the unrounded length");
    fails += resize_case("mode=nearest;coordinate_transformation_mode=asymmetric;"
                         "nearest_mode=round_prefer_ceil",
                         0, kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), 4, NULL,
                         KT_VALS(1, 1, 3, 5),
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 5),
                                 KT_VALS(1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 3, 3, 4, 4, 4)),
                         "resize nearest asymmetric round_prefer_ceil");
    fails += resize_case("mode=nearest;coordinate_transformation_mode=align_corners;"
                         "nearest_mode=floor",
                         0, kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), 4, NULL,
                         KT_VALS(1, 1, 3, 5),
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 5),
                                 KT_VALS(1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 3, 3, 3, 3, 4)),
                         "resize nearest align_corners floor");
    fails += resize_case("mode=nearest;nearest_mode=ceil", 0,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), v44), 4, NULL,
                         KT_VALS(1, 1, 3, 5),
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 5),
                                 KT_VALS(5, 6, 7, 8, 8, 9, 10, 11, 12, 12, 13, 14, 15, 16, 16)),
                         "resize nearest half_pixel ceil");
    /* by hand: rows (j+0.5)/0.75 -> 0.67, 2, 3.33 -> 1, 2, 3; cols (j+0.5)/0.5 -> 1, 3 */
    fails += resize_case("mode=nearest;coordinate_transformation_mode=tf_half_pixel_for_nn", 11,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), v44), 4, NULL,
                         KT_VALS(1, 1, 3, 2),
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 2),
                                 KT_VALS(6, 8, 10, 12, 14, 16)),
                         "resize nearest tf_half_pixel_for_nn");
    fails += resize_case("mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 0,
                         kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 4, 2, 8)), 1, NULL,
                         KT_VALS(3), kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1.5, 3, 7)),
                         "resize 1-D linear pytorch_half_pixel");
    fails += resize_case("mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 0,
                         kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 4, 2, 8)), 1, NULL,
                         KT_VALS(1), kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1)),
                         "resize 1-D pytorch_half_pixel to length 1");
    const double v3[] = {0, 1, 5, 2, -3, 4, 7, 7, 1, 0, 2, 6};
    fails += resize_case("mode=linear", 0, kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), v3), 3,
                         KT_VALS(1.5, 1, 2), NULL,
                         kt_make(KILN_F64, 3, KT_DIMS(3, 3, 4),
                                 KT_VALS(0.0, 0.25, 0.75, 1.0, 5.0, 4.25, 2.75, 2.0, -3.0, -1.25,
                                         2.25, 4.0, 3.5, 3.625, 3.875, 4.0, 3.0, 2.5, 1.5, 1.0,
                                         -0.5, 0.875, 3.625, 5.0, 7.0, 7.0, 7.0, 7.0, 1.0, 0.75,
                                         0.25, 0.0, 2.0, 3.0, 5.0, 6.0)),
                         "resize trilinear f64");
    fails += resize_case("mode=linear;coordinate_transformation_mode=asymmetric", 0,
                         kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), v3), 3, NULL,
                         KT_VALS(3, 2, 3),
                         kt_make(KILN_F64, 3, KT_DIMS(3, 2, 3),
                                 KT_VALS(0.0, 0.6666666666666666, 1.0, 1.0, 2.333333333333333,
                                         3.0, 4.666666666666666, 4.888888888888888, 5.0,
                                         1.3333333333333333, 2.444444444444444, 3.0, 7.0, 7.0,
                                         7.0, 1.5, 2.4999999999999996, 3.0)),
                         "resize trilinear f64 asymmetric sizes");
    fails += resize_case("mode=nearest", 0,
                         kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(10, 20, 30, 40, 50, 60)), 2,
                         KT_VALS(2, 0.7), NULL,
                         kt_make(KILN_I32, 2, KT_DIMS(4, 2),
                                 KT_VALS(10, 30, 10, 30, 40, 60, 40, 60)),
                         "resize nearest int32");
    fails += resize_case("mode=linear;coordinate_transformation_mode=half_pixel_symmetric", 19,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 4), v24), 4,
                         KT_VALS(1, 1, 1, 0.7), NULL,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2),
                                 KT_VALS(1.7857142686843872, 3.2142856121063232,
                                         5.785714149475098, 7.214285850524902)),
                         "resize linear half_pixel_symmetric");
    fails += resize_case("mode=linear;axes=[-1,-2];keep_aspect_ratio_policy=not_smaller", 18,
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 4), v24), 2, NULL,
                         KT_VALS(5, 3),
                         kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 6),
                                 KT_VALS(1.0, 1.5, 2.1666667461395264, 2.8333332538604736, 3.5,
                                         4.0, 3.0, 3.5, 4.166666507720947, 4.833333492279053,
                                         5.5, 6.0, 5.0, 5.5, 6.166666507720947,
                                         6.833333492279053, 7.5, 8.0)),
                         "resize axes + not_smaller");

    /* big enough for the threaded path: asymmetric x2 puts output 2i on input i and 2i+1
     * halfway to i+1 (clamped at the edge); expected values from that closed form */
    kiln_tensor *big = kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 40, 40), -1, 1, 5);
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 80, 80), NULL);
    const float *bp = big->data; // (1,3,40,40)
    float *wp = want->data;      // (1,3,80,80)
    for (int ch = 0; ch < 3; ch++)
        for (int h = 0; h < 80; h++)
            for (int w = 0; w < 80; w++) {
                int h0 = h / 2, w0 = w / 2, h1 = h0 + 1 < 40 ? h0 + 1 : 39;
                int w1 = w0 + 1 < 40 ? w0 + 1 : 39;
                double fh = h % 2 ? 0.5 : 0, fw = w % 2 ? 0.5 : 0;
                const float *img = bp + ch * 1600;
                double top = (1 - fw) * img[h0 * 40 + w0] + fw * img[h0 * 40 + w1];
                double bottom = (1 - fw) * img[h1 * 40 + w0] + fw * img[h1 * 40 + w1];
                wp[(ch * 80 + h) * 80 + w] = (float)((1 - fh) * top + fh * bottom);
            }
    fails += resize_case("mode=linear;coordinate_transformation_mode=asymmetric", 0, big, 4,
                         KT_VALS(1, 1, 2, 2), NULL, want, "resize large bilinear x2");

    /* cubic and tf_crop_and_resize: expected values from a float64 implementation of the
     * spec's formulas (separable 1-D passes, written apart from kiln), which agrees with
     * onnx.reference to 1e-6 except where noted */
    fails += resize_case("mode=cubic", 0,
                         kt_make(KILN_F32, 2, KT_DIMS(3, 5),
                                 KT_VALS(1, 2, 3, 4, 5, 2, -1, 0, 6, 3, 7, 7, 1, -2, 4)),
                         2, KT_VALS(1.5, 0.8), NULL,
                         kt_make(KILN_F32, 2, KT_DIMS(4, 4),
                                 KT_VALS(1.0437147251931396, 2.7314707191348284,
                                         3.540347615226943, 5.038640265509225,
                                         0.8803863657960844, -0.08026125367449688,
                                         4.4964597520720435, 4.143448028986552,
                                         2.499676764550636, -0.7733453513999038,
                                         3.3979297345370005, 3.23742636623522,
                                         6.298744481399267, 4.051635318823354,
                                         -1.0717377453373989, 3.320404325338383)),
                         "resize bicubic half_pixel, up on one axis and down on the other");
    /* x = arange(24)**1.5 % 7 */
    const double v234[] = {0.0, 1.0, 2.8284271247461903, 5.196152422706632, 1.0,
                           4.180339887498949, 0.6969384566990691, 4.520259177452132,
                           1.6274169979695223, 6.0, 3.6227766016837926, 1.4828726939093997,
                           6.569219381653056, 4.872166581031863, 3.3832034148351795,
                           2.0947501931112527, 1.0, 0.09279563550022374, 6.367532368147138,
                           5.819079927272796, 5.442719099991592, 5.234089594072643,
                           5.189146716115445, 5.304125036192545};
    fails += resize_roi_case(
        "mode=cubic;coordinate_transformation_mode=align_corners;cubic_coeff_a=-0.5;"
        "exclude_outside=1",
        0, kt_make(KILN_F64, 3, KT_DIMS(2, 3, 4), v234), 3, NULL, NULL, KT_VALS(2, 5, 3),
        kt_make(KILN_F64, 3, KT_DIMS(2, 5, 3),
                KT_VALS(0.0, 1.8287307312505678, 5.196152422706632, 0.43368135306061634,
                        1.9309549222785907, 5.056754806324675, 1.0, 2.398452870020627,
                        4.520259177452132, 1.3909854695132764, 3.9248890407810224,
                        2.8724726129145384, 1.6274169979695223, 5.218418732704701,
                        1.4828726939093997, 6.569219381653056, 4.102147524252442,
                        2.0947501931112527, 3.6870738432285837, 3.564565477157442,
                        3.877667414544935, 1.0, 3.2077420065970914, 5.819079927272796,
                        3.0244266187218396, 4.20529791346147, 5.765534969298637,
                        5.442719099991592, 5.191392665969291, 5.304125036192545)),
        1e-12, "resize tricubic f64 align_corners a=-0.5 exclude_outside");
    const double v5[] = {1, 4, 2, 8, 5};
    fails += resize_case("mode=cubic;coordinate_transformation_mode=asymmetric", 0,
                         kt_make(KILN_F32, 1, KT_DIMS(5), v5), 1, KT_VALS(1.6), NULL,
                         kt_make(KILN_F32, 1, KT_DIMS(8),
                                 KT_VALS(1.0, 3.1386718431313056, 3.6523438067524676,
                                         1.8090820263387348, 5.093749713618315,
                                         8.1171875130967, 5.8906252514571,
                                         4.670410144790377)),
                         "resize 1-D cubic asymmetric");
    fails += resize_roi_case("mode=cubic;coordinate_transformation_mode=asymmetric", 0,
                             kt_make(KILN_F16, 1, KT_DIMS(5), v5), 1, NULL, KT_VALS(1.6), NULL,
                             kt_make(KILN_F16, 1, KT_DIMS(8),
                                     KT_VALS(1.0, 3.1386718431313056, 3.6523438067524676,
                                             1.8090820263387348, 5.093749713618315,
                                             8.1171875130967, 5.8906252514571,
                                             4.670410144790377)),
                             4e-3, "resize 1-D cubic asymmetric f16");
    /* the spec (and onnxruntime) put length-1 pytorch_half_pixel outputs at 0, so this is
     * x[0]; onnx.reference samples -0.5 instead and gives 0.71875 */
    fails += resize_case("mode=cubic;coordinate_transformation_mode=pytorch_half_pixel", 0,
                         kt_make(KILN_F32, 1, KT_DIMS(5), v5), 1, NULL, KT_VALS(1),
                         kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1)),
                         "resize cubic pytorch_half_pixel to length 1");
    fails += resize_case("mode=cubic;coordinate_transformation_mode=pytorch_half_pixel;"
                         "exclude_outside=1",
                         0, kt_make(KILN_F32, 1, KT_DIMS(5), v5), 1, NULL, KT_VALS(3),
                         kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1.95, 2.0, 6.15)),
                         "resize cubic pytorch_half_pixel exclude_outside");
    fails += resize_case("mode=cubic;coordinate_transformation_mode=half_pixel_symmetric", 19,
                         kt_make(KILN_F32, 2, KT_DIMS(2, 4), v24), 2, KT_VALS(1, 0.7), NULL,
                         kt_make(KILN_F32, 2, KT_DIMS(2, 2),
                                 KT_VALS(1.710550276789876, 3.2894497232101263,
                                         5.710550276789877, 7.289449723210128)),
                         "resize cubic half_pixel_symmetric");
    /* tf_crop_and_resize: column 0 maps to -0.6, outside the input, so it is extrapolated */
    fails += resize_roi_case(
        "mode=linear;coordinate_transformation_mode=tf_crop_and_resize;"
        "extrapolation_value=10.0",
        0, kt_make(KILN_F32, 2, KT_DIMS(4, 4), v44), 2, KT_VALS(0.2, -0.2, 0.9, 0.7), NULL,
        KT_VALS(3, 4),
        kt_make(KILN_F32, 2, KT_DIMS(3, 4),
                KT_VALS(10.0, 3.7000000178813934, 4.600000008940697, 5.5, 10.0,
                        7.8999998569488525, 8.799999848008156, 9.699999839067459, 10.0,
                        12.099999696016312, 12.999999687075615, 13.899999678134918)),
        1e-6, "resize tf_crop_and_resize linear extrapolated");
    /* by hand: rows j*1/(3-1) = 0, 0.5, 1 -> 0, 0 (round_prefer_floor), 1; columns
     * 0.4*2 + j*0.9*2/(6-1) = 0.8, 1.16, 1.52, 1.88 -> 1, 1, 2, 2, then 2.24 and 2.6 lie
     * past the last column and are extrapolated */
    fails += resize_roi_case(
        "mode=nearest;coordinate_transformation_mode=tf_crop_and_resize;"
        "extrapolation_value=-7.0",
        0, kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(10, 20, 30, 40, 50, 60)), 2,
        KT_VALS(0, 0.4, 1, 1.3), KT_VALS(1.5, 2), NULL,
        kt_make(KILN_I32, 2, KT_DIMS(3, 6),
                KT_VALS(20, 20, 30, 30, -7, -7, 20, 20, 30, 30, -7, -7, 50, 50, 60, 60, -7,
                        -7)),
        0, "resize tf_crop_and_resize nearest int32 scales");
    /* x = arange(32) * 7 % 11 */
    const double v244[] = {0, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0, 7, 3, 10, 6,
                           2, 9, 5, 1, 8, 4, 0, 7, 3, 10, 6, 2, 9, 5, 1, 8};
    fails += resize_roi_case(
        "mode=cubic;coordinate_transformation_mode=tf_crop_and_resize;axes=[1,2];"
        "extrapolation_value=-1.0",
        18, kt_make(KILN_F32, 3, KT_DIMS(2, 4, 4), v244), 2, KT_VALS(0.1, -0.1, 0.8, 0.6),
        NULL, KT_VALS(3, 3),
        kt_make(KILN_F32, 3, KT_DIMS(2, 3, 3),
                KT_VALS(-1.0, 4.592012788691086, 4.687124013338115, -1.0, 3.5343565552314926,
                        7.435404617225947, -1.0, 5.916906220566936, 6.4279999671698, -1.0,
                        6.970513755140291, 4.14684962027297, -1.0, 6.367638712686501,
                        2.0495974927429663, -1.0, 8.241750005833795, 5.594399367642423)),
        1e-6, "resize tf_crop_and_resize cubic axes");
    /* by hand: one row at 0.5*(0.25+0.75)*3 = 1.5, halfway between rows 1 and 2 of columns
     * that rise linearly, so the (symmetric) cubic gives their mean: (5+9)/2, (8+12)/2 */
    fails += resize_roi_case("mode=cubic;coordinate_transformation_mode=tf_crop_and_resize", 0,
                             kt_make(KILN_F32, 2, KT_DIMS(4, 4), v44), 2,
                             KT_VALS(0.25, 0, 0.75, 1), NULL, KT_VALS(1, 2),
                             kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(7, 10)), 1e-6,
                             "resize tf_crop_and_resize cubic to length 1");

    /* big enough for the threaded path and several chunks per row: bicubic asymmetric x2
     * on a (1,2,40,300) input, expected from the separable closed form of cubic_x2 */
    kiln_tensor *bigc = kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 40, 300), -1, 1, 9);
    kiln_tensor *wantc = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 80, 600), NULL);
    const float *cp = bigc->data; // (1,2,40,300)
    float *cw = wantc->data;      // (1,2,80,600)
    double *img = malloc(sizeof(double) * (40 * 300 + 80 * 300));
    double *rows = img ? img + 40 * 300 : NULL; // (80,300): one channel resized along H
    for (int ch = 0; ch < 2 && img; ch++) {
        for (int k = 0; k < 40 * 300; k++) img[k] = cp[ch * 12000 + k];
        for (int h = 0; h < 80; h++)
            for (int w = 0; w < 300; w++) rows[h * 300 + w] = cubic_x2(img + w, 300, 40, h);
        for (int h = 0; h < 80; h++)
            for (int w = 0; w < 600; w++)
                cw[(ch * 80 + h) * 600 + w] = (float)cubic_x2(rows + h * 300, 1, 300, w);
    }
    free(img);
    fails += resize_roi_case("mode=cubic;coordinate_transformation_mode=asymmetric", 0, bigc, 4,
                             NULL, KT_VALS(1, 1, 2, 2), NULL, wantc, 1e-5,
                             "resize large bicubic x2");

    kiln_tensor *in[4] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), NULL,
                          kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2)), NULL};
    fails += kiln_optest_fails("Resize", "coordinate_transformation_mode=tf_crop_and_resize", 3,
                               in, 1, KILN_ERR_SHAPE, "resize tf_crop_and_resize without roi");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(0, 0, 1, 1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    fails += kiln_optest_fails("Resize", "coordinate_transformation_mode=tf_crop_and_resize", 3,
                               in, 1, KILN_ERR_SHAPE, "resize roi of 4 values for rank 4");
    in[0] = kt_make(KILN_I32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[1] = NULL;
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    fails += kiln_optest_fails("Resize", "mode=cubic", 3, in, 1, KILN_ERR_TYPE,
                               "resize cubic int32");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0.5, 0.5));
    fails += kiln_optest_fails("Resize", "mode=cubic;antialias=1", 3, in, 1,
                               KILN_ERR_UNSUPPORTED, "resize antialiased cubic downsampling");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    fails += kiln_optest_fails("Resize", "mode=quintic", 3, in, 1, KILN_ERR_UNSUPPORTED,
                               "resize unknown mode");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    in[3] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 4, 4));
    fails += kiln_optest_fails("Resize", "", 4, in, 1, KILN_ERR_SHAPE, "resize scales and sizes");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 2));
    fails += kiln_optest_fails("Resize", "", 3, in, 1, KILN_ERR_SHAPE, "resize 2 scales rank 4");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0, 2));
    fails += kiln_optest_fails("Resize", "", 3, in, 1, KILN_ERR_SHAPE, "resize scale 0");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = NULL;
    fails += kiln_optest_fails("Resize", "", 3, in, 1, KILN_ERR_SHAPE, "resize no scales");
    in[0] = kt_make(KILN_I32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    fails += kiln_optest_fails("Resize", "mode=linear", 3, in, 1, KILN_ERR_TYPE,
                               "resize linear int32");

    fails += resize_gradcheck("mode=nearest", 0,
                              kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 2, 3), -1, 1, 1), 4, NULL,
                              KT_VALS(1, 1, 2, 1.5), NULL, "resize grad nearest upsample");
    fails += resize_gradcheck("mode=nearest;nearest_mode=ceil", 0,
                              kt_rand(KILN_F64, 3, KT_DIMS(2, 5, 4), -1, 1, 2), 3, NULL, NULL,
                              KT_VALS(2, 3, 2), "resize grad nearest downsample");
    fails += resize_gradcheck("mode=linear", 0,
                              kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 3, 2), -1, 1, 3), 4, NULL,
                              KT_VALS(1, 1, 2, 2), NULL, "resize grad bilinear half_pixel");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=align_corners", 0,
                              kt_rand(KILN_F64, 4, KT_DIMS(1, 1, 3, 3), -1, 1, 4), 4, NULL, NULL,
                              KT_VALS(1, 1, 5, 4), "resize grad bilinear align_corners");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=asymmetric", 0,
                              kt_rand(KILN_F64, 2, KT_DIMS(5, 6), -1, 1, 5), 2, NULL,
                              KT_VALS(0.6, 0.5), NULL, "resize grad linear downsample");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 0,
                              kt_rand(KILN_F64, 3, KT_DIMS(2, 2, 2), -1, 1, 6), 3, NULL, NULL,
                              KT_VALS(3, 1, 5), "resize grad trilinear pytorch_half_pixel");
    fails += resize_gradcheck("mode=cubic", 0, kt_rand(KILN_F64, 2, KT_DIMS(4, 3), -1, 1, 7), 2,
                              NULL, KT_VALS(1.5, 2), NULL, "resize grad bicubic half_pixel");
    fails += resize_gradcheck("mode=cubic;exclude_outside=1;cubic_coeff_a=-0.5", 0,
                              kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 8), 2, NULL, NULL,
                              KT_VALS(5, 3), "resize grad bicubic exclude_outside");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=tf_crop_and_resize;"
                              "extrapolation_value=2.5",
                              0, kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 9), 2,
                              KT_VALS(-0.2, 0.1, 1.1, 0.8), NULL, KT_VALS(4, 5),
                              "resize grad tf_crop_and_resize, extrapolated corners");
    fails += resize_gradcheck("mode=nearest;coordinate_transformation_mode=tf_crop_and_resize",
                              0, kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 10), 2,
                              KT_VALS(-0.2, 0.1, 1.1, 0.8), NULL, KT_VALS(4, 5),
                              "resize grad nearest tf_crop_and_resize");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Resize", "mode=linear", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 9, 11), -2, 2, 401),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 1.5))},
                               1, "resize random linear x2, x1.5");
    fails += kiln_optest_sweep("Resize", "mode=nearest", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 11), -2, 2, 402),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 17, 23))},
                               1, "resize random nearest to sizes");
    /* Random X resized to sizes, for CUDA's kernels (src/cuda/resize.cu): a segmentation
     * head's x8 bilinear upsample to a last axis not a multiple of 8 and to one that is (the
     * 16-byte rows of f16 / bf16), the ASPP pool's 1x1 -> HxW, cubic (4 taps an axis), and
     * trilinear and tricubic (4 and 16 combinations of the outer axes' taps) */
    static const struct {
        const char *attrs;
        int rank;
        int64_t x[5], sizes[5];
        uint64_t seed;
        const char *label;
    } sized[] = {
        {"mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 4, {2, 3, 7, 7}, {2, 3, 56, 57}, 403,
         "resize random linear x8 to 56x57"},
        {"mode=linear", 4, {2, 4, 1, 1}, {2, 4, 6, 7}, 404, "resize random linear 1x1 to 6x7"},
        {"mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 4, {2, 3, 7, 7}, {2, 3, 56, 56}, 405,
         "resize random linear x8 to 56x56"},
        {"mode=cubic", 4, {2, 3, 5, 6}, {2, 3, 10, 16}, 406, "resize random cubic to 10x16"},
        {"mode=linear", 5, {1, 2, 3, 4, 5}, {1, 2, 6, 7, 16}, 407, "resize random trilinear to 6x7x16"},
        {"mode=cubic", 5, {1, 2, 3, 4, 5}, {1, 2, 5, 7, 9}, 408, "resize random tricubic to 5x7x9"},
    };
    for (size_t i = 0; i < sizeof sized / sizeof sized[0]; i++) {
        const int64_t r = sized[i].rank;
        kiln_tensor *sz = kt_make(KILN_I64, 1, &r, NULL);
        for (int d = 0; sz && d < sized[i].rank; d++) ((int64_t *)sz->data)[d] = sized[i].sizes[d];
        fails += kiln_optest_sweep("Resize", sized[i].attrs, 0, 4,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, sized[i].rank, sized[i].x, -2, 2, sized[i].seed),
                                                    NULL, NULL, sz},
                                   1, sized[i].label);
    }
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Resize", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 3, 4), -2, 2, 1471),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2))},
                               1, "resize nearest x2 scales f32");
    fails += kiln_optest_sweep("Resize", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 2, 3, 4), -2, 2, 1472),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2))},
                               1, "resize nearest x2 scales i64");
    fails += kiln_optest_sweep("Resize", "", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 2, 3, 4), -2, 2, 1473),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2))},
                               1, "resize nearest x2 scales u8");
    fails += kiln_optest_sweep("Resize", "nearest_mode=floor;coordinate_transformation_mode=asymmetric", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 5, 7), -2, 2, 1474),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 8, 3))},
                               1, "resize nearest floor asymmetric sizes f32");
    fails += kiln_optest_sweep("Resize", "nearest_mode=floor;coordinate_transformation_mode=asymmetric", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 1, 5, 7), -2, 2, 1475),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 8, 3))},
                               1, "resize nearest floor asymmetric sizes i64");
    fails += kiln_optest_sweep("Resize", "nearest_mode=floor;coordinate_transformation_mode=asymmetric", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 1, 5, 7), -2, 2, 1476),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 8, 3))},
                               1, "resize nearest floor asymmetric sizes u8");
    fails += kiln_optest_sweep("Resize", "nearest_mode=round_prefer_ceil;coordinate_transformation_mode=align_corners", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 6), -2, 2, 1477),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 7, 5))},
                               1, "resize nearest prefer ceil align_corners f32");
    fails += kiln_optest_sweep("Resize", "nearest_mode=round_prefer_ceil;coordinate_transformation_mode=align_corners", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 4, 6), -2, 2, 1478),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 7, 5))},
                               1, "resize nearest prefer ceil align_corners i64");
    fails += kiln_optest_sweep("Resize", "nearest_mode=round_prefer_ceil;coordinate_transformation_mode=align_corners", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 4, 6), -2, 2, 1479),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 7, 5))},
                               1, "resize nearest prefer ceil align_corners u8");
    fails += kiln_optest_sweep("Resize", "nearest_mode=ceil;coordinate_transformation_mode=tf_half_pixel_for_nn", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 6, 5), -2, 2, 1480),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0.5, 1.6))},
                               1, "resize nearest ceil tf_half_pixel_for_nn f32");
    fails += kiln_optest_sweep("Resize", "nearest_mode=ceil;coordinate_transformation_mode=tf_half_pixel_for_nn", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 2, 6, 5), -2, 2, 1481),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0.5, 1.6))},
                               1, "resize nearest ceil tf_half_pixel_for_nn i64");
    fails += kiln_optest_sweep("Resize", "nearest_mode=ceil;coordinate_transformation_mode=tf_half_pixel_for_nn", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 2, 6, 5), -2, 2, 1482),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0.5, 1.6))},
                               1, "resize nearest ceil tf_half_pixel_for_nn u8");
    fails += kiln_optest_sweep("Resize", "coordinate_transformation_mode=tf_crop_and_resize;extrapolation_value=7.0", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 4, 5), -2, 2, 1483),
                                                kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 6, 7))},
                               1, "resize nearest tf_crop_and_resize f32");
    fails += kiln_optest_sweep("Resize", "coordinate_transformation_mode=tf_crop_and_resize;extrapolation_value=7.0", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 1, 4, 5), -2, 2, 1484),
                                                kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 6, 7))},
                               1, "resize nearest tf_crop_and_resize i64");
    fails += kiln_optest_sweep("Resize", "coordinate_transformation_mode=tf_crop_and_resize;extrapolation_value=7.0", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 1, 4, 5), -2, 2, 1485),
                                                kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 6, 7))},
                               1, "resize nearest tf_crop_and_resize u8");
    fails += kiln_optest_sweep("Resize", "axes=[2,3]", 18, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 3, 4), -2, 2, 1486),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2.5, 1.5))},
                               1, "resize nearest axes attribute f32");
    fails += kiln_optest_sweep("Resize", "axes=[2,3]", 18, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 2, 3, 4), -2, 2, 1487),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2.5, 1.5))},
                               1, "resize nearest axes attribute i64");
    fails += kiln_optest_sweep("Resize", "axes=[2,3]", 18, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 2, 3, 4), -2, 2, 1488),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2.5, 1.5))},
                               1, "resize nearest axes attribute u8");
    fails += kiln_optest_sweep("Resize", "mode=linear", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 6), -2, 2, 1489),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 1.5, 2))},
                               1, "resize linear half_pixel scales");
    fails += kiln_optest_sweep("Resize", "mode=linear;coordinate_transformation_mode=align_corners", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1490),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 7, 9))},
                               1, "resize linear align_corners sizes");
    fails += kiln_optest_sweep("Resize", "mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 9, 10), -2, 2, 1491),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0.6, 0.35))},
                               1, "resize linear pytorch_half_pixel down");
    fails += kiln_optest_sweep("Resize", "mode=linear;coordinate_transformation_mode=half_pixel_symmetric", 19, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 5, 7), -2, 2, 1492),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 8, 4))},
                               1, "resize linear half_pixel_symmetric");
    fails += kiln_optest_sweep("Resize", "mode=linear;coordinate_transformation_mode=asymmetric", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 4, 4), -2, 2, 1493),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2))},
                               1, "resize linear asymmetric x2");
    fails += kiln_optest_sweep("Resize", "mode=linear", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(1, 2, 3, 4, 5), -2, 2, 1494),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(1, 1, 2, 1.5, 0.5))},
                               1, "resize trilinear 5-D");
    fails += kiln_optest_sweep("Resize", "mode=linear;exclude_outside=1", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 9), -2, 2, 1495),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2.3))},
                               1, "resize linear exclude_outside 1-D");
    fails += kiln_optest_sweep("Resize", "mode=cubic", 13, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 4, 5), -2, 2, 1496),
                                                NULL,
                                                kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2))},
                               1, "resize cubic x2");
    fails += kiln_optest_sweep("Resize", "mode=cubic;exclude_outside=1;cubic_coeff_a=-0.5", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 6, 7), -2, 2, 1497),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 9, 4))},
                               1, "resize cubic exclude_outside a=-0.5");
    fails += kiln_optest_sweep("Resize", "mode=linear;coordinate_transformation_mode=tf_crop_and_resize;extrapolation_value=10.0", 13, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 4, 5), -2, 2, 1498),
                                                kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 6, 7))},
                               1, "resize linear tf_crop_and_resize");
    fails += kiln_optest_sweep("Resize", "mode=linear;keep_aspect_ratio_policy=not_larger;axes=[2,3]", 18, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 4, 6), -2, 2, 1499),
                                                NULL,
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(9, 9))},
                               1, "resize linear not_larger");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_resize = {
    .precision = KILN_PREC_LOW, .f32_inputs = 0x6u /* roi, scales */, .prec_flags = KILN_PREC_GROWS,
    .name = "Resize", .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = (1u << 2) | (1u << 3), .nondiff_inputs = (1u << 1) | (1u << 2),
    .infer = infer, .cpu_forward = forward,
    .cpu_workspace = workspace, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_resize_grad = {
    .precision = KILN_PREC_FP32,
    .name = "ResizeGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 5, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = (1u << 3) | (1u << 4), .shape_only_inputs = 1u << 1,
    .infer = infer_grad, .cpu_forward = forward_grad, .cpu_workspace = workspace_grad,
    .test = KILN_OP_TESTS(test_grad),
};
