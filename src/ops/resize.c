/* resize.c — Resize (opsets 11..21): nearest or N-linear interpolation over every axis of
 * a tensor of rank 1..8 (so bilinear on H, W of NCHW and trilinear on 5-D follow from
 * the same code).
 *
 * The output size comes from `scales` (input 2: out = floor(in * scale)) or `sizes`
 * (input 3: scale = out / in); exactly one is given (an empty tensor counts as absent,
 * as opset 11 requires a scales input). Opset 18's `axes` restricts them to some axes,
 * and `keep_aspect_ratio_policy` (not_larger / not_smaller) then uses one scale for those
 * axes with out = round_half_up(scale * in).
 *
 * An output coordinate x maps to the input coordinate x_o by
 * `coordinate_transformation_mode`: half_pixel (default) (x+0.5)/scale-0.5,
 * half_pixel_symmetric, pytorch_half_pixel (0 when the output length is 1), align_corners
 * x*(in-1)/(len-1) with len = in*scale (the unrounded length, as ONNX's reference and
 * test data use), asymmetric x/scale, tf_half_pixel_for_nn (x+0.5)/scale.
 * tf_crop_and_resize (roi) is rejected with KILN_ERR_UNSUPPORTED; otherwise roi is ignored.
 *
 * nearest: x_o rounded by `nearest_mode` (round_prefer_floor (default), round_prefer_ceil,
 * floor, ceil) then clamped to [0, in-1]; any dtype (the op only moves elements).
 * linear: weights 1-f, f on floor(x_o) and floor(x_o)+1, indices clamped to the edge,
 * multiplied across axes, computed in double; float dtypes only. cubic mode and
 * antialiased linear downsampling (opset 18) are rejected with KILN_ERR_UNSUPPORTED.
 *
 * Gradient w.r.t. X: kiln.ResizeGrad(dY, X, roi, scales, sizes) with Resize's attributes
 * and opset (X read shape-only) adds every element of dY into the input elements it was
 * read from, times their weights: the transpose of the resize. Float dtypes; f16/bf16
 * accumulate in doubles. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

typedef enum coord_mode {
    HALF_PIXEL, HALF_PIXEL_SYMMETRIC, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC,
    TF_HALF_PIXEL_FOR_NN
} coord_mode;
typedef enum nearest_mode { ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR, CEIL } nearest_mode;

typedef struct resize_plan {
    bool linear;
    coord_mode coord;
    nearest_mode nearest;
    double scale[KILN_MAX_DIMS];  /* output / input, per axis */
    double length[KILN_MAX_DIMS]; /* unrounded output length (align_corners) */
    int64_t out[KILN_MAX_DIMS];
} resize_plan;

static int pick(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static kiln_status parse_modes(kiln_op_ctx *c, resize_plan *p) {
    const kiln_node *node = c->node;
    const char *mode = kiln_attr_string(node, "mode", "nearest");
    KILN_OP_CHECK(c, strcmp(mode, "nearest") == 0 || strcmp(mode, "linear") == 0,
                  KILN_ERR_UNSUPPORTED, "mode '%s' is not supported (nearest and linear are)",
                  mode);
    p->linear = strcmp(mode, "linear") == 0;

    static const char *const coords[] = {"half_pixel", "half_pixel_symmetric",
                                         "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nn"};
    const char *ct = kiln_attr_string(node, "coordinate_transformation_mode", "half_pixel");
    int k = pick(ct, coords, 6);
    KILN_OP_CHECK(c, k >= 0, KILN_ERR_UNSUPPORTED,
                  "coordinate_transformation_mode '%s' is not supported", ct);
    p->coord = (coord_mode)k;

    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"};
    const char *nm = kiln_attr_string(node, "nearest_mode", "round_prefer_floor");
    k = pick(nm, nearests, 4);
    KILN_OP_CHECK(c, k >= 0, KILN_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", nm);
    p->nearest = (nearest_mode)k;
    return KILN_OK;
}

/* The resize of X = c->in[at] by the scales (at + 2) and sizes (at + 3) inputs (Resize:
 * at 0; ResizeGrad: 1). */
static kiln_status plan(kiln_op_ctx *c, int at, resize_plan *p) {
    const kiln_tensor *x = c->in[at];
    const kiln_node *node = c->node;
    int r = x->ndim;
    kiln_status st = parse_modes(c, p);
    if (st != KILN_OK) return st;

    /* the axes that scales / sizes describe */
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
    if (p->linear && kiln_attr_int(node, "antialias", 0) != 0)
        for (int d = 0; d < r; d++)
            KILN_OP_CHECK(c, p->scale[d] >= 1, KILN_ERR_UNSUPPORTED,
                          "antialiased linear downsampling (axis %d) is not supported", d);
    return KILN_OK;
}

/* The checks of inference outside plan(), for X = c->in[at]. */
static kiln_status check_input(kiln_op_ctx *c, int at) {
    const kiln_tensor *x = c->in[at];
    const char *ct = kiln_attr_string(c->node, "coordinate_transformation_mode", "half_pixel");
    KILN_OP_CHECK(c, strcmp(ct, "tf_crop_and_resize") != 0, KILN_ERR_UNSUPPORTED,
                  "coordinate_transformation_mode tf_crop_and_resize is not supported");
    KILN_OP_CHECK(c, strcmp(kiln_attr_string(c->node, "mode", "nearest"), "cubic") != 0,
                  KILN_ERR_UNSUPPORTED, "mode cubic is not supported");
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "cannot resize a scalar");
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_status st = check_input(c, 0);
    if (st != KILN_OK) return st;
    resize_plan p;
    st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, !p.linear || kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "mode linear needs a float input, not %s", kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, p.out);
    return KILN_OK;
}

/* The input coordinate of output coordinate j on axis d (of input size in). */
static double source_coord(const resize_plan *p, int d, int64_t j, int64_t in) {
    double s = p->scale[d], x = (double)j;
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

static size_t workspace(const kiln_op_ctx *c) {
    /* nearest: one offset per output position; linear: two offsets and a weight */
    size_t per = strcmp(kiln_attr_string(c->node, "mode", "nearest"), "linear") == 0 ? 3 : 1;
    return per * kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
}

/* Per output axis: the offset of the input element each output position copies. */
static void nearest_tables(int64_t **maps, const resize_plan *p, int nd, const int64_t *xdims,
                           const int64_t *ydims, void *ws) {
    int64_t stride[KILN_MAX_DIMS];
    kiln_strides(nd, xdims, stride);
    kiln_axis_maps_carve(maps, ws, nd, ydims);
    for (int d = 0; d < nd; d++)
        for (int64_t j = 0; j < ydims[d]; j++)
            maps[d][j] = nearest_index(p, source_coord(p, d, j, xdims[d]), xdims[d]) * stride[d];
}

static kiln_status forward_nearest(kiln_op_ctx *c, const resize_plan *p) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t *maps[KILN_MAX_DIMS];
    nearest_tables(maps, p, y->ndim, x->dims, y->dims, c->workspace);
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, NULL);
    return KILN_OK;
}

/* Per output axis: offsets of the two neighbours and the weight of the second. */
typedef struct linear_axes {
    int64_t *o0[KILN_MAX_DIMS], *o1[KILN_MAX_DIMS];
    double *w1[KILN_MAX_DIMS];
    int active[KILN_MAX_DIMS]; /* axes that interpolate; the others copy o0 */
    int n_active;
} linear_axes;

/* Output elements [i0, i1) of y: each is the weighted sum over the 2^n_active corners. */
static void linear_range(const kiln_tensor *x, kiln_tensor *y, const linear_axes *la,
                         int64_t i0, int64_t i1) {
    int nd = y->ndim;
    int64_t idx[KILN_MAX_DIMS], rem = i0;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % y->dims[d];
        rem /= y->dims[d];
    }
    const float *xf = x->dtype == KILN_F32 ? x->data : NULL;
    float *yf = y->dtype == KILN_F32 ? y->data : NULL;
    int corners = 1 << la->n_active;
    for (int64_t i = i0; i < i1; i++) {
        int64_t base = 0;
        for (int d = 0; d < nd; d++) base += la->o0[d][idx[d]];
        double acc = 0;
        for (int m = 0; m < corners; m++) {
            int64_t off = base;
            double w = 1;
            for (int a = 0; a < la->n_active; a++) {
                int d = la->active[a];
                double w1 = la->w1[d][idx[d]];
                if (m >> a & 1) {
                    off += la->o1[d][idx[d]] - la->o0[d][idx[d]];
                    w *= w1;
                } else {
                    w *= 1 - w1;
                }
            }
            if (w != 0) acc += w * (xf ? (double)xf[off] : kiln_get_f64(x, off));
        }
        if (yf) yf[i] = (float)acc;
        else kiln_set_f64(y, i, acc);
        for (int d = nd - 1; d >= 0 && ++idx[d] == y->dims[d]; d--) idx[d] = 0;
    }
}

/* Fill la for an output of dims ydims from an input of dims xdims, carving the tables out
 * of ws (three times kiln_axis_maps_bytes(nd, ydims)). */
static void linear_tables(linear_axes *la, const resize_plan *p, int nd, const int64_t *xdims,
                          const int64_t *ydims, void *ws) {
    int64_t stride[KILN_MAX_DIMS];
    kiln_strides(nd, xdims, stride);
    la->n_active = 0;
    size_t maps_bytes = kiln_axis_maps_bytes(nd, ydims);
    char *w = ws;
    kiln_axis_maps_carve(la->o0, w, nd, ydims);
    kiln_axis_maps_carve(la->o1, w + maps_bytes, nd, ydims);
    int64_t *w1_raw[KILN_MAX_DIMS];
    kiln_axis_maps_carve(w1_raw, w + 2 * maps_bytes, nd, ydims);
    for (int d = 0; d < nd; d++) la->w1[d] = (double *)(void *)w1_raw[d];
    for (int d = 0; d < nd; d++) {
        int64_t in = xdims[d];
        bool active = false;
        for (int64_t j = 0; j < ydims[d]; j++) {
            double xo = source_coord(p, d, j, in);
            xo = xo < -1 ? -1 : xo > (double)in ? (double)in : xo;
            double fl = floor(xo);
            la->o0[d][j] = clamp_index(fl, in) * stride[d];
            la->o1[d][j] = clamp_index(fl + 1, in) * stride[d];
            la->w1[d][j] = xo - fl;
            active |= la->w1[d][j] != 0;
        }
        if (active) la->active[la->n_active++] = d;
    }
}

static kiln_status forward_linear(kiln_op_ctx *c, const resize_plan *p) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    linear_axes la;
    linear_tables(&la, p, y->ndim, x->dims, y->dims, c->workspace);
    int64_t n = kiln_tensor_numel(y);
    int64_t nt = n >= (1 << 14) ? kiln_cpu_threads() : 1;
    if (nt > n) nt = n;
    if (nt < 1) nt = 1;
#pragma omp parallel for num_threads((int)nt) schedule(static, 1) if (nt > 1)
    for (int64_t t = 0; t < nt; t++) linear_range(x, y, &la, n * t / nt, n * (t + 1) / nt);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    if (kiln_tensor_numel(c->out[0]) == 0) return KILN_OK;
    resize_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    return p.linear ? forward_linear(c, &p) : forward_nearest(c, &p);
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
    kiln_status st = check_input(c, 1);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "X must be a float tensor, not %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY has dtype %s, X has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
    resize_plan p;
    st = plan(c, 1, &p);
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
    size_t per = strcmp(kiln_attr_string(c->node, "mode", "nearest"), "linear") == 0 ? 3 : 1;
    return per * kiln_axis_maps_bytes(c->in[0]->ndim, c->in[0]->dims) +
           kiln_scatter_add_bytes(c->out[0]);
}

/* Every element of dY, times each corner's weight, added into that corner of dX. One
 * thread: corners of different outputs meet. */
static void linear_grad(const kiln_tensor *dy, float *accf, double *accd, const linear_axes *la) {
    int nd = dy->ndim;
    int64_t idx[KILN_MAX_DIMS] = {0}, n = kiln_tensor_numel(dy);
    const float *df = dy->dtype == KILN_F32 ? dy->data : NULL;
    int corners = 1 << la->n_active;
    for (int64_t i = 0; i < n; i++) {
        int64_t base = 0;
        for (int d = 0; d < nd; d++) base += la->o0[d][idx[d]];
        double g = df ? (double)df[i] : kiln_get_f64(dy, i);
        for (int m = 0; m < corners; m++) {
            int64_t off = base;
            double w = 1;
            for (int a = 0; a < la->n_active; a++) {
                int d = la->active[a];
                double w1 = la->w1[d][idx[d]];
                if (m >> a & 1) {
                    off += la->o1[d][idx[d]] - la->o0[d][idx[d]];
                    w *= w1;
                } else {
                    w *= 1 - w1;
                }
            }
            if (w == 0) continue;
            if (accf) accf[off] += (float)(w * g);
            else accd[off] += w * g;
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
    size_t maps_bytes = kiln_axis_maps_bytes(nd, dy->dims);
    if (!p.linear) {
        int64_t *maps[KILN_MAX_DIMS];
        nearest_tables(maps, &p, nd, dx->dims, dy->dims, c->workspace);
        kiln_scatter_add_axes(dx, dy, (const int64_t *const *)maps,
                              (char *)c->workspace + maps_bytes);
        return KILN_OK;
    }
    linear_axes la;
    linear_tables(&la, &p, nd, dx->dims, dy->dims, c->workspace);
    /* f32 and f64 accumulate in dX, f16 and bf16 in doubles after the tables */
    float *accf = dx->dtype == KILN_F32 ? dx->data : NULL;
    double *accd = dx->dtype == KILN_F64 ? dx->data : NULL;
    if (!accf && !accd) accd = (double *)(void *)((char *)c->workspace + 3 * maps_bytes);
    if (accf) memset(accf, 0, (size_t)nx * sizeof *accf);
    else memset(accd, 0, (size_t)nx * sizeof *accd);
    linear_grad(dy, accf, accd, &la);
    if (accd && accd != dx->data)
        for (int64_t i = 0; i < nx; i++) kiln_set_f64(dx, i, accd[i]);
    return KILN_OK;
}

/* Runs Resize on x with scales (f32) or sizes (int64), whichever is non-NULL. */
static int resize_case(const char *attrs, int opset, kiln_tensor *x, int n, const double *scales,
                       const double *sizes, kiln_tensor *y, const char *label) {
    kiln_tensor *in[4] = {x, NULL, NULL, NULL};
    if (scales) in[2] = kt_make(KILN_F32, 1, KT_DIMS(n), scales);
    if (sizes) in[3] = kt_make(KILN_I64, 1, KT_DIMS(n), sizes);
    return kiln_optest_opset("Resize", attrs, opset, 4, in, 1, &y, 1e-6, 1e-6, label);
}

static int test_grad(void) {
    int fails = 0;
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

/* A gradient check of Resize w.r.t. x, resized by scales (f32) or sizes (int64); roi is
 * absent. */
static int resize_gradcheck(const char *attrs, int opset, kiln_tensor *x, int n,
                            const double *scales, const double *sizes, const char *label) {
    kiln_tensor *in[4] = {x, NULL, NULL, NULL};
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

    kiln_tensor *in[4] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22), NULL,
                          kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2)), NULL};
    fails += kiln_optest_fails("Resize", "mode=cubic", 3, in, 1, KILN_ERR_UNSUPPORTED,
                               "resize cubic");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(0, 0, 0, 0, 1, 1, 1, 1));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 2, 2));
    fails += kiln_optest_fails("Resize", "coordinate_transformation_mode=tf_crop_and_resize", 3,
                               in, 1, KILN_ERR_UNSUPPORTED, "resize tf_crop_and_resize");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), v22);
    in[1] = NULL;
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
                              kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 2, 3), -1, 1, 1), 4,
                              KT_VALS(1, 1, 2, 1.5), NULL, "resize grad nearest upsample");
    fails += resize_gradcheck("mode=nearest;nearest_mode=ceil", 0,
                              kt_rand(KILN_F64, 3, KT_DIMS(2, 5, 4), -1, 1, 2), 3, NULL,
                              KT_VALS(2, 3, 2), "resize grad nearest downsample");
    fails += resize_gradcheck("mode=linear", 0,
                              kt_rand(KILN_F64, 4, KT_DIMS(1, 2, 3, 2), -1, 1, 3), 4,
                              KT_VALS(1, 1, 2, 2), NULL, "resize grad bilinear half_pixel");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=align_corners", 0,
                              kt_rand(KILN_F64, 4, KT_DIMS(1, 1, 3, 3), -1, 1, 4), 4, NULL,
                              KT_VALS(1, 1, 5, 4), "resize grad bilinear align_corners");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=asymmetric", 0,
                              kt_rand(KILN_F64, 2, KT_DIMS(5, 6), -1, 1, 5), 2,
                              KT_VALS(0.6, 0.5), NULL, "resize grad linear downsample");
    fails += resize_gradcheck("mode=linear;coordinate_transformation_mode=pytorch_half_pixel", 0,
                              kt_rand(KILN_F64, 3, KT_DIMS(2, 2, 2), -1, 1, 6), 3, NULL,
                              KT_VALS(3, 1, 5), "resize grad trilinear pytorch_half_pixel");
    return fails;
}

const kiln_op_def kiln_op_resize = {
    .name = "Resize", .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = (1u << 2) | (1u << 3), .nondiff_inputs = (1u << 1) | (1u << 2),
    .infer = infer, .cpu_forward = forward,
    .cpu_workspace = workspace, .test = test, .grad = grad,
};

const kiln_op_def kiln_op_resize_grad = {
    .name = "ResizeGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 5, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = (1u << 3) | (1u << 4), .shape_only_inputs = 1u << 1,
    .infer = infer_grad, .cpu_forward = forward_grad, .cpu_workspace = workspace_grad,
    .test = test_grad,
};
