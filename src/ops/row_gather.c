/*
 * row_gather.c — kiln.RowGather (internal op, domain "kiln"): rows of X (its innermost dim)
 * moved by a chain of whole-row moves in one copy. Attributes (INTS, each optional):
 *
 *     pads       (rank of X)  zeros appended at the end of each axis: S, of shape s
 *     shifts     (rank of X)  torch.roll of S on each axis (|shift| < s[a])
 *     view       (any rank)   S viewed as V (one -1 allowed: the dim the sizes imply)
 *     perm       (rank of V)  T = transpose(V, perm); the last axis must stay last
 *     out_view   (any rank)   T viewed as W (one -1 allowed)
 *     out_shifts (rank of W)  torch.roll of W on each axis
 *     out_sizes  (rank of W)  Y = the first out_sizes[a] of each axis of the rolled W
 *                             (-1: the whole axis; larger than the axis: the whole axis)
 *     in_nhwc    (INT, 0)     1: the stages start from the 4-D X (N, C, H, W) read as
 *                             (N, H, W, C), the order of an NHWC tensor's bytes
 *     out_nhwc   (INT, 0)     1: the stages end at a 4-D (N, H, W, C), Y is its (N, C, H, W)
 *                             transpose (what an NHWC tensor holds in that order)
 *
 * Swin's window partition is Pad (the end of H and W to a multiple of the window) -> roll
 * (the shifted blocks) -> Reshape (B, H/w, w, W/w, w, C) -> Transpose (0, 1, 3, 2, 4, 5) ->
 * Reshape (B nW, w w, C), and its reverse Reshape -> Transpose -> Reshape -> roll back ->
 * Slice (the crop of the pad): up to three copies of the activation a side, where one row
 * gather does. None of these moves touches the innermost dim (C), so Y's row r is one row
 * of X, or zeros, found by running r back through each stage; the pass that puts the op
 * there (src/passes/row_gather.c, after the layout pass) checks that every stage it takes
 * is one of these. Rank 1 and empty tensors are fine. Not differentiable: the pass runs
 * after autograd. Saved to ONNX as the chain it stands for (onnx_save.c).
 *
 * in_nhwc / out_nhwc make a chain that starts or ends at a layout conversion a row move too:
 * MaxViT's window partition reads a convolution's NHWC output through kiln.ToNCHW, a Reshape
 * (B, C, H/p, p, W/p, p) and a Transpose (0, 2, 4, 3, 5, 1): in the bytes of the NHWC tensor,
 * C never moves. The CUDA kernel reads an NHWC X (writes an NHWC Y) as those bytes; the CPU
 * reference (whose tensors are NCHW bytes) transposes element by element.
 */
#include "row_gather.h"

#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

/* Attribute `name` of n entries into out (default def where absent); false when present
 * with another length. */
static bool ints_or(const kiln_node *node, const char *name, int n, int64_t def, int64_t *out) {
    int k = 0;
    const int64_t *a = kiln_attr_ints(node, name, &k);
    for (int d = 0; d < n; d++) out[d] = a && d < k ? a[d] : def;
    return !a || k == n;
}

/* A view's dims from the attribute (one -1 resolved against numel rows * row); rank into
 * *r. Fails naming what is wrong. */
static kiln_status view_dims(kiln_op_ctx *c, const char *name, int64_t numel, int64_t row, int *r, int64_t *dims) {
    int k = 0;
    const int64_t *a = kiln_attr_ints(c->node, name, &k);
    KILN_OP_CHECK(c, a && k >= 1 && k <= KILN_MAX_DIMS, KILN_ERR_INVALID_ARGUMENT, "%s has %d dims (1 to %d)", name,
                  k, KILN_MAX_DIMS);
    int neg = -1;
    int64_t known = 1;
    for (int d = 0; d < k; d++) {
        KILN_OP_CHECK(c, a[d] >= 1 || (a[d] == -1 && neg < 0), KILN_ERR_INVALID_ARGUMENT,
                      "%s dim %d is %" PRId64 " (positive, or one -1)", name, d, a[d]);
        if (a[d] == -1) neg = d;
        else known *= a[d];
        dims[d] = a[d];
    }
    if (neg >= 0) {
        KILN_OP_CHECK(c, known > 0 && numel % known == 0, KILN_ERR_SHAPE,
                      "%s: %" PRId64 " elements do not divide into dims of %" PRId64, name, numel, known);
        dims[neg] = numel / known;
    } else {
        KILN_OP_CHECK(c, known == numel, KILN_ERR_SHAPE, "%s holds %" PRId64 " elements, the tensor %" PRId64, name,
                      known, numel);
    }
    KILN_OP_CHECK(c, dims[k - 1] == row, KILN_ERR_SHAPE,
                  "%s's last dim is %" PRId64 ", not the row of %" PRId64 " (the innermost dim must stay whole)", name,
                  dims[k - 1], row);
    *r = k;
    return KILN_OK;
}

/* Shifts normalized into [0, n) (0 on an empty axis); false for |shift| >= n. */
static bool norm_shifts(int r, const int64_t *n, int64_t *sh) {
    for (int d = 0; d < r; d++) {
        if (n[d] == 0) {
            sh[d] = 0;
            continue;
        }
        if (sh[d] <= -n[d] || sh[d] >= n[d]) return false;
        sh[d] = (sh[d] % n[d] + n[d]) % n[d];
    }
    return true;
}

kiln_status kiln_row_gather_geometry(kiln_op_ctx *c, const kiln_tensor *x, kiln_row_gather *g) {
    memset(g, 0, sizeof *g);
    const int rx = x->ndim;
    KILN_OP_CHECK(c, rx >= 1 && rx <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "input of rank %d (1 to %d)", rx, KILN_MAX_DIMS);
    const int64_t in_nhwc = kiln_attr_int(c->node, "in_nhwc", 0), out_nhwc = kiln_attr_int(c->node, "out_nhwc", 0);
    KILN_OP_CHECK(c, (in_nhwc == 0 || in_nhwc == 1) && (out_nhwc == 0 || out_nhwc == 1), KILN_ERR_INVALID_ARGUMENT,
                  "in_nhwc and out_nhwc are 0 or 1");
    KILN_OP_CHECK(c, !in_nhwc || rx == 4, KILN_ERR_SHAPE, "in_nhwc needs a 4-D input, not rank %d", rx);
    g->in_nhwc = in_nhwc != 0;
    g->out_nhwc = out_nhwc != 0;
    g->rx = rx;
    int64_t xd[KILN_MAX_DIMS]; /* X' */
    for (int d = 0; d < rx; d++) xd[d] = x->dims[d];
    if (g->in_nhwc) {
        xd[1] = x->dims[2];
        xd[2] = x->dims[3];
        xd[3] = x->dims[1];
    }
    g->row = xd[rx - 1];
    int64_t numel = 1;
    KILN_OP_CHECK(c, ints_or(c->node, "pads", rx, 0, g->pad), KILN_ERR_INVALID_ARGUMENT, "pads needs %d entries", rx);
    KILN_OP_CHECK(c, ints_or(c->node, "shifts", rx, 0, g->shift), KILN_ERR_INVALID_ARGUMENT,
                  "shifts needs %d entries", rx);
    for (int d = 0; d < rx; d++) {
        KILN_OP_CHECK(c, g->pad[d] >= 0 && g->pad[d] <= INT32_MAX, KILN_ERR_INVALID_ARGUMENT,
                      "pad %" PRId64 " on axis %d (0 or more)", g->pad[d], d);
        g->x[d] = xd[d];
        g->s[d] = xd[d] + g->pad[d];
        numel *= g->s[d];
    }
    KILN_OP_CHECK(c, g->pad[rx - 1] == 0 && g->shift[rx - 1] == 0, KILN_ERR_INVALID_ARGUMENT,
                  "the last axis (the rows) is padded or rolled");
    KILN_OP_CHECK(c, norm_shifts(rx, g->s, g->shift), KILN_ERR_SHAPE, "a shift is not below its padded axis's size");
    kiln_status st;
    if (kiln_node_attr(c->node, "view")) {
        st = view_dims(c, "view", numel, g->row, &g->rv, g->v);
        if (st) return st;
    } else {
        g->rv = rx;
        memcpy(g->v, g->s, sizeof g->v);
    }
    int np = 0;
    const int64_t *perm = kiln_attr_ints(c->node, "perm", &np);
    KILN_OP_CHECK(c, !perm || np == g->rv, KILN_ERR_INVALID_ARGUMENT, "perm has %d entries for a view of rank %d", np,
                  g->rv);
    bool seen[KILN_MAX_DIMS] = {false};
    int64_t t[KILN_MAX_DIMS];
    for (int k = 0; k < g->rv; k++) {
        const int64_t p = perm ? perm[k] : k;
        KILN_OP_CHECK(c, p >= 0 && p < g->rv && !seen[p], KILN_ERR_INVALID_ARGUMENT,
                      "perm is not a permutation of %d axes", g->rv);
        seen[p] = true;
        g->perm[k] = (int)p;
        t[k] = g->v[p];
    }
    KILN_OP_CHECK(c, g->perm[g->rv - 1] == g->rv - 1, KILN_ERR_INVALID_ARGUMENT,
                  "perm moves the last axis (the rows)");
    if (kiln_node_attr(c->node, "out_view")) {
        st = view_dims(c, "out_view", numel, g->row, &g->rw, g->w);
        if (st) return st;
    } else {
        g->rw = g->rv;
        memcpy(g->w, t, sizeof g->w);
    }
    const int rw = g->rw;
    KILN_OP_CHECK(c, ints_or(c->node, "out_shifts", rw, 0, g->oshift), KILN_ERR_INVALID_ARGUMENT,
                  "out_shifts needs %d entries", rw);
    KILN_OP_CHECK(c, ints_or(c->node, "out_sizes", rw, -1, g->y), KILN_ERR_INVALID_ARGUMENT,
                  "out_sizes needs %d entries", rw);
    KILN_OP_CHECK(c, g->oshift[rw - 1] == 0, KILN_ERR_INVALID_ARGUMENT, "the last axis (the rows) is rolled");
    KILN_OP_CHECK(c, norm_shifts(rw, g->w, g->oshift), KILN_ERR_SHAPE, "an out_shift is not below its axis's size");
    for (int d = 0; d < rw; d++) {
        KILN_OP_CHECK(c, g->y[d] >= -1, KILN_ERR_INVALID_ARGUMENT, "out_sizes[%d] is %" PRId64 " (-1: whole)", d,
                      g->y[d]);
        if (g->y[d] < 0 || g->y[d] > g->w[d]) g->y[d] = g->w[d];
    }
    KILN_OP_CHECK(c, g->y[rw - 1] == g->row, KILN_ERR_INVALID_ARGUMENT, "the last axis (the rows) is cropped");
    KILN_OP_CHECK(c, !g->out_nhwc || rw == 4, KILN_ERR_SHAPE, "out_nhwc needs a 4-D result, not rank %d", rw);
    return KILN_OK;
}

int64_t kiln_row_gather_source(const kiln_row_gather *g, int64_t r) {
    /* Y's row -> W's (the crop keeps indices; the roll moves each back by its shift) */
    int64_t l = 0, mul = 1;
    for (int d = g->rw - 2; d >= 0; d--) {
        const int64_t i = r % g->y[d];
        r /= g->y[d];
        int64_t w = i - g->oshift[d];
        if (w < 0) w += g->w[d];
        l += w * mul;
        mul *= g->w[d];
    }
    /* W's row l is T's row l (a view): T's index (t_k) is V's at perm[k] */
    int64_t vstride[KILN_MAX_DIMS];
    vstride[g->rv - 1] = 1; /* in rows: the last axis is the row itself */
    for (int d = g->rv - 2; d >= 0; d--) vstride[d] = d == g->rv - 2 ? 1 : vstride[d + 1] * g->v[d + 1];
    int64_t src = 0;
    for (int k = g->rv - 2; k >= 0; k--) {
        const int64_t n = g->v[g->perm[k]], i = l % n;
        l /= n;
        src += i * vstride[g->perm[k]];
    }
    /* V's row src is S's row src (a view): back through the roll, then past the pad */
    int64_t xrow = 0;
    mul = 1;
    for (int d = g->rx - 2; d >= 0; d--) {
        const int64_t i = src % g->s[d];
        src /= g->s[d];
        int64_t j = i - g->shift[d];
        if (j < 0) j += g->s[d];
        if (j >= g->x[d]) return -1;
        xrow += j * mul;
        mul *= g->x[d];
    }
    return xrow;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    kiln_row_gather g;
    const kiln_status st = kiln_row_gather_geometry(c, x, &g);
    if (st) return st;
    int64_t y[KILN_MAX_DIMS];
    kiln_row_gather_out_dims(&g, y);
    kiln_tensor_set_shape(c->out[0], x->dtype, g.rw, y);
    return KILN_OK;
}

void kiln_row_gather_out_dims(const kiln_row_gather *g, int64_t *dims) {
    for (int d = 0; d < g->rw; d++) dims[d] = g->y[d];
    if (g->out_nhwc) {
        dims[1] = g->y[3];
        dims[2] = g->y[1];
        dims[3] = g->y[2];
    }
}

/* The element offset in a 4-D (N, C, H, W) tensor of dims d (logical) of element e of row
 * r of its (N, H, W, C) transpose. */
static int64_t nhwc_offset(const int64_t *d, int64_t r, int64_t e) {
    const int64_t w = r % d[3], h = r / d[3] % d[2], n = r / d[3] / d[2];
    return ((n * d[1] + e) * d[2] + h) * d[3] + w;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    kiln_row_gather g;
    const kiln_status st = kiln_row_gather_geometry(c, x, &g);
    if (st) return st;
    const size_t es = kiln_dtype_size(x->dtype), bytes = (size_t)g.row * es;
    const int64_t rows = g.row ? kiln_tensor_numel(y) / g.row : 0;
    /* rows are independent: split across the threads where the tensor is large */
    #pragma omp parallel for if (rows * g.row > (1 << 16)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t src = kiln_row_gather_source(&g, r);
        if (!g.in_nhwc && !g.out_nhwc) {
            char *yd = (char *)y->data + (size_t)r * bytes;
            if (src < 0) memset(yd, 0, bytes);
            else memcpy(yd, (const char *)x->data + (size_t)src * bytes, bytes);
            continue;
        }
        for (int64_t e = 0; e < g.row; e++) { /* NCHW bytes: element by element */
            const int64_t yo = g.out_nhwc ? nhwc_offset(y->dims, r, e) : r * g.row + e;
            char *yd = (char *)y->data + (size_t)yo * es;
            if (src < 0) {
                memset(yd, 0, es);
                continue;
            }
            const int64_t xo = g.in_nhwc ? nhwc_offset(x->dims, src, e) : src * g.row + e;
            memcpy(yd, (const char *)x->data + (size_t)xo * es, es);
        }
    }
    return KILN_OK;
}

/* Whether tensor t's bytes are in the order `nhwc` says (a 4-D value's format, or the same
 * bytes in both: C or H W of 1; other ranks: only NCHW). */
static bool bytes_in_order(const kiln_tensor *t, bool nhwc) {
    if (t->ndim != 4) return !nhwc;
    return (t->format == KILN_FORMAT_NHWC) == nhwc || t->dims[1] == 1 || t->dims[2] * t->dims[3] == 1;
}

/* alias_when: the stages move no row (no pad, roll or crop; the permutation keeps the order
 * of the axes longer than 1) and X's and Y's bytes are in the orders X' and Y' say: Y's bytes
 * are X's (a chain of views across layout conversions that cancel, as a ViT-style patch
 * embedding's ToNCHW -> Flatten -> Transpose (0, 2, 1) of an NHWC map). The planner then
 * makes Y a view of X. */
static bool moves_no_row(const kiln_op_ctx *c) {
    kiln_row_gather g;
    kiln_op_ctx q = *c; /* the geometry's checks may name the node in a message */
    if (kiln_row_gather_geometry(&q, c->in[0], &g) != KILN_OK) {
        kiln_clear_error(c->kctx); /* a question, not a failure (infer took these shapes) */
        return false;
    }
    for (int d = 0; d < g.rx; d++)
        if (g.pad[d] || g.shift[d]) return false;
    for (int d = 0; d < g.rw; d++)
        if (g.oshift[d] || g.y[d] != g.w[d]) return false;
    int last = -1;
    for (int k = 0; k < g.rv; k++) {
        if (g.v[g.perm[k]] == 1) continue;
        if (g.perm[k] < last) return false;
        last = g.perm[k];
    }
    return bytes_in_order(c->in[0], g.in_nhwc) && bytes_in_order(c->out[0], g.out_nhwc);
}

#ifdef KILN_OPTESTS
/* Swin's window partition and its reverse on a 3 x 3 map of 2 channels, windows of 2:
 * padded to 4 x 4, rolled by -1 (numpy: np.roll(np.pad(x, ...), (-1, -1), (1, 2)) viewed
 * (1, 2, 2, 2, 2, 2), transposed (0, 1, 3, 2, 4, 5), viewed (4, 4, 2)); the reverse of
 * that output gives x back. */
#define PARTITION "pads=[0,1,1,0];shifts=[0,-1,-1,0];view=[-1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,2]"
#define REVERSE "view=[1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,4,2];out_shifts=[0,1,1,0];out_sizes=[-1,3,3,-1]"
static int test(void) {
    int fails = 0;
    static const double part[] = {8, 9, 10, 11, 14, 15, 16, 17, 0, 0, 6, 7, 0, 0, 12, 13,
                                  0, 0, 0, 0, 2, 3, 4,  5,  0,  0,  0,  0, 0, 0, 0,  1};
    double iota[18];
    for (int i = 0; i < 18; i++) iota[i] = i;
    fails += kiln_optest("RowGather", PARTITION, 1, (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 3, 3, 2), iota)},
                         1, (kiln_tensor *[]){kt_make(KILN_F32, 3, KT_DIMS(4, 4, 2), part)}, 0, 0,
                         "window partition: pad, roll, view, transpose, view");
    fails += kiln_optest("RowGather", REVERSE, 1, (kiln_tensor *[]){kt_make(KILN_F32, 3, KT_DIMS(4, 4, 2), part)}, 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 3, 3, 2), iota)}, 0, 0,
                         "its reverse: view, transpose, view, roll back, crop");
    /* MaxViT's window partition of an NHWC tensor's bytes, and its departition back into
     * them: x (1, 2, 4, 4) viewed (1, 2, 2, 2, 2, 2), transposed (0, 2, 4, 3, 5, 1), viewed
     * (1, 4, 4, 2) (numpy), and that back to x */
    static const double mvp[] = {0, 16, 1, 17, 4,  20, 5,  21, 2,  18, 3,  19, 6,  22, 7,  23,
                                 8, 24, 9, 25, 12, 28, 13, 29, 10, 26, 11, 27, 14, 30, 15, 31};
    double iota32[32];
    for (int i = 0; i < 32; i++) iota32[i] = i;
    fails += kiln_optest("RowGather", "in_nhwc=1;view=[-1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,4,2]", 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 4), iota32)}, 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 4, 4, 2), mvp)}, 0, 0,
                         "MaxViT's window partition of NHWC bytes (in_nhwc)");
    fails += kiln_optest("RowGather", "out_nhwc=1;view=[-1,2,2,2,2,2];perm=[0,1,3,2,4,5];out_view=[-1,4,4,2]", 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 4, 4, 2), mvp)}, 1,
                         (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 4), iota32)}, 0, 0,
                         "its departition into NHWC bytes (out_nhwc)");
    /* no attributes: a copy; a plain roll of rows (i64) */
    fails += kiln_optest("RowGather", "", 1, (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4))},
                         1, (kiln_tensor *[]){kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4))}, 0, 0,
                         "no attributes: a copy");
    fails += kiln_optest("RowGather", "shifts=[1,0]", 1,
                         (kiln_tensor *[]){kt_make(KILN_I64, 2, KT_DIMS(3, 1), KT_VALS(0, 1, 2))}, 1,
                         (kiln_tensor *[]){kt_make(KILN_I64, 2, KT_DIMS(3, 1), KT_VALS(2, 0, 1))}, 0, 0,
                         "a roll of rows, i64");
    /* refusals: the row axis padded, rolled, moved or cropped; a view of another size */
    kiln_tensor *x;
#define REFUSE(attrs, want, label)                                                                   \
    x = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 3, 2), NULL);                                             \
    fails += kiln_optest_fails("RowGather", attrs, 1, (kiln_tensor *[]){x}, 1, want, label)
    REFUSE("pads=[0,0,0,1]", KILN_ERR_INVALID_ARGUMENT, "the row axis padded");
    REFUSE("shifts=[0,0,0,1]", KILN_ERR_INVALID_ARGUMENT, "the row axis rolled");
    REFUSE("perm=[0,1,3,2]", KILN_ERR_INVALID_ARGUMENT, "perm moves the last axis");
    REFUSE("out_sizes=[-1,-1,-1,1]", KILN_ERR_INVALID_ARGUMENT, "the row axis cropped");
    REFUSE("view=[2,3,3]", KILN_ERR_SHAPE, "a view whose last dim is not the row");
    REFUSE("view=[1,3,4,2]", KILN_ERR_SHAPE, "a view of another size");
    REFUSE("view=[-1,-1,2]", KILN_ERR_INVALID_ARGUMENT, "two -1 dims");
    REFUSE("shifts=[0,3,0,0]", KILN_ERR_SHAPE, "a shift as large as the axis");
    REFUSE("pads=[0,1]", KILN_ERR_INVALID_ARGUMENT, "pads of another rank");
    REFUSE("perm=[0,0,1,3]", KILN_ERR_INVALID_ARGUMENT, "perm not a permutation");
    REFUSE("in_nhwc=2", KILN_ERR_INVALID_ARGUMENT, "in_nhwc other than 0 or 1");
    REFUSE("out_nhwc=1;out_view=[9,2]", KILN_ERR_SHAPE, "out_nhwc on a 2-D result");
    x = kt_make(KILN_F32, 3, KT_DIMS(3, 3, 2), NULL);
    fails += kiln_optest_fails("RowGather", "in_nhwc=1", 1, (kiln_tensor *[]){x}, 1, KILN_ERR_SHAPE,
                               "in_nhwc on a 3-D input");
#undef REFUSE
    /* for the backend sweep: Swin's partition of a 14 x 14 map (windows of 8: padded to 16,
     * rolled by -4) and its reverse, 96 channels; Swin v1's unpadded roll + partition of 7 x 7
     * windows, rows of an odd size (vectors narrower than 16 bytes), a plain transpose of rows */
    fails += kiln_optest_sweep("RowGather",
                               "pads=[0,2,2,0];shifts=[0,-4,-4,0];view=[-1,2,8,2,8,96];perm=[0,1,3,2,4,5];"
                               "out_view=[-1,64,96]",
                               0, 1, (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 14, 14, 96), -2, 2, 7301)}, 1,
                               "Swin v2's padded, shifted partition");
    fails += kiln_optest_sweep("RowGather",
                               "view=[-1,2,2,8,8,96];perm=[0,1,3,2,4,5];out_view=[-1,16,16,96];out_shifts=[0,4,4,0];"
                               "out_sizes=[-1,14,14,-1]",
                               0, 1, (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(8, 64, 96), -2, 2, 7302)}, 1,
                               "its reverse: roll back, crop");
    fails += kiln_optest_sweep("RowGather", "shifts=[0,-3,-3,0];view=[2,2,7,2,7,12];perm=[0,1,3,2,4,5];out_view=[8,49,12]",
                               0, 1, (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 14, 14, 12), -2, 2, 7303)}, 1,
                               "Swin v1's shifted partition, no pad");
    fails += kiln_optest_sweep("RowGather", "in_nhwc=1;view=[-1,2,7,2,7,64];perm=[0,1,3,2,4,5];out_view=[-1,4,49,64]",
                               0, 1, (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 64, 14, 14), -2, 2, 7305)}, 1,
                               "MaxViT's partition of an NHWC map (in_nhwc)");
    fails += kiln_optest_sweep("RowGather", "out_nhwc=1;view=[-1,2,2,7,7,64];perm=[0,1,3,2,4,5];out_view=[-1,14,14,64]",
                               0, 1, (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 49, 64), -2, 2, 7306)}, 1,
                               "its departition into an NHWC map (out_nhwc)");
    fails += kiln_optest_sweep("RowGather", "in_nhwc=1;out_nhwc=1;view=[-1,3,2,5,2,6];perm=[0,3,2,1,4,5];"
                               "out_view=[-1,10,6,6]",
                               0, 1, (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 6, 10), -2, 2, 7307)}, 1,
                               "NHWC in and out, odd rows");
    fails += kiln_optest_sweep("RowGather", "pads=[1,2,0];shifts=[2,-1,0];perm=[1,0,2]", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 3, 7), -2, 2, 7304)}, 1,
                               "odd rows of 7, pad and roll then a transpose");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_row_gather = {
    .precision = KILN_PREC_FOLLOW,
    .name = "RowGather", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .alias_when = moves_no_row,
};
