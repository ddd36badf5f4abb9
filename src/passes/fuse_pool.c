/* fuse_pool.c — a CNN's pool and training Dropout as one op each way (KILN_PASS_FUSE_POOL;
 * src/ops/max_pool_dropout.c):
 *
 *   forward   p = MaxPool(x)                                   x NHWC, p NHWC
 *             y, mask = Dropout(p, ratio?, training_mode?)     y, mask NCHW
 *          -> y, mask = kiln.MaxPoolDropout(x, ratio?, training_mode?)
 *   backward  (what autograd emits for that pair and the Relu in front of the pool)
 *             g = kiln.DropoutGrad(dy, mask, ratio?, training_mode?)   dy NCHW, g NHWC
 *             dp = kiln.MaxPoolGrad(g, x)                              NHWC
 *             dx = kiln.UnaryGrad(dp, -, x) op=Relu  (when there)      NHWC
 *          -> dx = kiln.MaxPoolDropoutGrad(dy, x, mask, ratio?, training_mode?) relu=0/1
 *
 * Why: in mnist-net's CUDA training step, after the layout pass, the chain around the
 * pool is five small kernels on the step's critical path; fused it is one each way, and
 * neither p nor g nor dp is written and read back.
 *
 * When (what the CUDA kernels do): a default-domain MaxPool with one output (no Indices)
 * over a 4-D x, 2-D windows with kernel_shape == strides, no pads, dilations 1, auto_pad
 * NOTSET or VALID, H and W known whatever the batch (two shape probes) and divisible by
 * the kernel; x laid out NHWC by the layout pass (so this pass runs after it and never
 * fires on the CPU, where nothing is NHWC); p read by nothing but a Dropout of opset >= 12
 * in training form (a mask output or a training_mode input) and no graph output; the
 * Dropout's y and mask NCHW. The fused node keeps the Dropout's outputs (its first output
 * keys the mask stream, so the masks are bit for bit the unfused graph's), its name and
 * its ratio / training_mode inputs, and carries the pool's attributes, the Dropout's
 * `seed` and dropout_opset.
 * The backward is folded only with its forward: the kiln.DropoutGrad reading that mask,
 * whose output only a kiln.MaxPoolGrad of the same pool attributes and the same x reads,
 * whose output only is read; if that reader is kiln.UnaryGrad op=Relu on (dp, absent, x)
 * (a Relu's gradient reads its output Y, here x), it folds too (relu=1). dy and the mask
 * NCHW, dx NHWC. The fused gradient takes the DropoutGrad's ratio and training_mode.
 * Only on devices that have both ops' kernels (kiln_pass_device_has). The nodes are left in
 * a topological order.
 *
 * Then, wherever the pass runs (not only after a pool), a Relu's gradient after a training
 * Dropout's (mnist-net's dropout2 after fc1's Relu: two tiny dependent kernels on the
 * step's critical path):
 *
 *             g = kiln.DropoutGrad(dy, mask, ratio?, training_mode?)   relu = 0, dX not NHWC
 *             dx = kiln.UnaryGrad(g, -, y) op=Relu
 *          -> dx = kiln.DropoutGrad(dy, mask, ratio?, training_mode?, y) relu=1
 *
 * when g has no other reader and is no graph output, and y, g and dx have one format, not
 * NHWC (the CUDA kernel reads and writes all of them elementwise; the tiled NHWC-dX kernel
 * has no Relu). The DropoutGrad node (its name) stays and writes dx; the UnaryGrad goes; g
 * is no longer written. UnaryGrad's own checks (Y of dY's dtype and shape) are those
 * relu = 1 asks for. Only where the device has kiln.DropoutGrad's kernel; nodes re-sorted
 * (y may be computed after the DropoutGrad's place)
 *
 * And the forward's picks (training graphs; issue 12):
 *
 *             y = MaxPool(x)                         windows overlapping, < 255 taps each
 *             dx = kiln.MaxPoolGrad(dy, x)           the same windows, the same x
 *          -> y, picks = MaxPool(x) picks=1          picks: uint8, y's shape and layout
 *             dx = kiln.MaxPoolGrad(dy, x, picks)
 *
 * (src/ops/max_pool.h): the pool writes which tap each window takes, the gradient routes
 * dy by them and reads no value of x. Why: with overlapping windows (ResNet's stem, 3x3
 * stride 2) the CUDA gradient otherwise starts with a pass over x to find those picks (0.33
 * ms of ResNet-50's step at batch 256), where the forward, which reads every tap anyway,
 * writes them for 1/8 of x's bytes. Float x (the dtypes with a gradient), any layout; every
 * MaxPoolGrad of the same windows over the same x reads the one picks value. Where the
 * device has kiln.MaxPoolGrad's kernel (the CUDA one takes the picks). Disjoint windows
 * are left: their gradient reads each tap once already.
 *
 * Then (kiln_pass_fuse_bn_pool, a pass table entry of its own after fuse-bn and
 * conv-bn-stats, under the same switch) the BN -> Relu under such a pool:
 *
 *             y, rm, rv, S = BatchNormalization(x, scale, B, mean, var[, -, sum, sumsq])
 *                            training_mode=1 relu=1 (no residual Z)
 *             p, picks = MaxPool(y) picks=1
 *             d = kiln.MaxPoolGrad(dp, y, picks)
 *          -> -, rm, rv, S = BatchNormalization(...) write_y=0
 *             p, picks = kiln.BnReluMaxPool(x, scale, B, S)    (the pool's attributes, epsilon)
 *             d = kiln.MaxPoolGrad(dp, x, picks)               (x: y's shape; values unread)
 *
 * when y is read by nothing else (the BN's gradient takes the mask from X, reading x and S)
 * and is no graph output. S is added to the BN where missing; Y becomes an empty value
 * nothing reads. src/ops/bn_relu_max_pool.c computes y per tap as the BN would, bit for
 * bit on each backend, so the function is the same. Why: ResNet's stem BN writes 411 MB (at
 * batch 256, fp16) that only the pool reads: -0.43 ms of ResNet-50's step on an H100. */
#include "passes.h"
#include "../ops/max_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The (kH, kW) of a pool node whose windows tile the image: 2-D, kernel == strides, no
 * pads, unit dilations, auto_pad NOTSET or VALID; false otherwise. */
static bool tiling_pool(const kiln_node *n, int64_t k[2]) {
    int nk = 0, ns = 0, np = 0, nd = 0;
    const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &nk), *s = kiln_attr_ints(n, "strides", &ns);
    const int64_t *pads = kiln_attr_ints(n, "pads", &np), *dil = kiln_attr_ints(n, "dilations", &nd);
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    if (nk != 2 || ns != 2 || (np != 0 && np != 4) || (nd != 0 && nd != 2)) return false;
    if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0) return false;
    for (int i = 0; i < np; i++)
        if (pads[i] != 0) return false;
    for (int i = 0; i < nd; i++)
        if (dil[i] != 1) return false;
    for (int i = 0; i < 2; i++) {
        if (ks[i] < 1 || s[i] != ks[i]) return false;
        k[i] = ks[i];
    }
    return true;
}

/* The pool attributes of n and p describe the same windows (for tiling pools). */
static bool same_pool(const kiln_node *n, const kiln_node *p) {
    int64_t a[2], b[2];
    return tiling_pool(n, a) && tiling_pool(p, b) && a[0] == b[0] && a[1] == b[1] &&
           kiln_attr_int(n, "ceil_mode", 0) == kiln_attr_int(p, "ceil_mode", 0);
}

static kiln_format fmt(const kiln_model *m, int v) { return m->values[v].format; }

/* H and W of 4-D value v, the same under both probes (not symbolic), divisible by k. */
static bool tiles(const kiln_shape_probes *sp, int v, const int64_t k[2]) {
    const kiln_tensor *a = &sp->one[v], *b = &sp->three[v];
    if (a->ndim != 4 || b->ndim != 4) return false;
    for (int i = 0; i < 2; i++) {
        const int64_t d = a->dims[2 + i];
        if (d < 1 || d != b->dims[2 + i] || d % k[i] != 0) return false;
    }
    return true;
}

/* The Dropout reading p, when it is p's only reader, of opset >= 12 and in training form,
 * with its outputs NCHW; -1 otherwise. */
static int training_dropout(const kiln_model *m, int p) {
    const int d = kiln_pass_single_consumer(m, p);
    if (d < 0 || kiln_pass_uses(m, p) != 1) return -1;
    const kiln_node *n = &m->nodes[d];
    if (!kiln_pass_is(n, "Dropout") || n->opset < 12 || n->n_in < 1 || n->in[0] != p || n->n_out < 1 ||
        n->out[0] < 0 || n->n_in > 3 || n->n_out > 2)
        return -1;
    const int mask = n->n_out > 1 ? n->out[1] : -1;
    if (mask < 0 && kiln_pass_opt_in(n, 2) < 0) return -1; /* inference form */
    if (fmt(m, n->out[0]) != KILN_FORMAT_NCHW || (mask >= 0 && fmt(m, mask) != KILN_FORMAT_NCHW)) return -1;
    return d;
}

/* The backward chain of pool node `pool` (input x) and its Dropout's mask: the
 * DropoutGrad *dg, the MaxPoolGrad *mg and the Relu UnaryGrad *ug (-1 when absent); false
 * when the chain is not there as expected. */
static bool find_backward(const kiln_model *m, int pool, int x, int mask, int *dg, int *mg, int *ug) {
    *dg = *mg = *ug = -1;
    for (int i = 0; i < m->n_nodes && mask >= 0; i++) {
        const kiln_node *n = &m->nodes[i];
        if (!kiln_pass_is_kiln(n, "DropoutGrad") || n->n_in < 2 || n->n_in > 4 || n->in[1] != mask || n->in[0] < 0 ||
            n->n_out != 1 || n->out[0] < 0)
            continue;
        const int g = n->out[0], q = kiln_pass_single_consumer(m, g);
        if (fmt(m, n->in[0]) != KILN_FORMAT_NCHW || q < 0) return false;
        const kiln_node *pg = &m->nodes[q];
        if (!kiln_pass_is_kiln(pg, "MaxPoolGrad") || pg->n_in != 2 || pg->in[0] != g || pg->in[1] != x || pg->n_out != 1 ||
            pg->out[0] < 0 || !same_pool(pg, &m->nodes[pool]))
            return false;
        const int dp = pg->out[0], r = kiln_pass_single_consumer(m, dp);
        const kiln_node *u = r >= 0 ? &m->nodes[r] : NULL;
        /* op-pattern: ReluGrad */
        const bool relu = u && kiln_pass_is_kiln(u, "UnaryGrad") && strcmp(kiln_attr_string(u, "op", ""), "Relu") == 0 &&
                          u->n_in == 3 && u->in[0] == dp && u->in[1] < 0 && u->in[2] == x && u->n_out == 1 &&
                          u->out[0] >= 0;
        if (fmt(m, relu ? u->out[0] : dp) != KILN_FORMAT_NHWC) return false;
        *dg = i;
        *mg = q;
        *ug = relu ? r : -1;
        return true;
    }
    return false;
}

/* How many of the n inputs in[] are left once the trailing missing ones are dropped. */
static int trimmed(const int *in, int n) {
    while (n > 0 && in[n - 1] < 0) n--;
    return n;
}

/* The pools (see the file's opening comment). */
static kiln_status fuse_pools(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    /* op-pattern: MaxPool -> Dropout as kiln.MaxPoolDropout(Grad) */
    if (!kiln_pass_device_has(o, "MaxPoolDropout") || !kiln_pass_device_has(o, "MaxPoolDropoutGrad")) return KILN_OK;
    /* no pool over an NHWC input (every CPU plan): no shape inference either */
    bool candidate = false;
    for (int i = 0; i < m->n_nodes && !candidate; i++) {
        const kiln_node *n = &m->nodes[i];
        candidate = kiln_pass_is(n, "MaxPool") && n->n_in == 1 && n->in[0] >= 0 && fmt(m, n->in[0]) == KILN_FORMAT_NHWC;
    }
    if (!candidate) return KILN_OK;
    kiln_shape_probes sp = {0};
    bool *dead = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass");
    kiln_status st = dead ? kiln_pass_shape_probes(m, &sp) : KILN_ERR_OUT_OF_MEMORY;
    bool any = false;
    for (int pi = 0; pi < m->n_nodes && !st; pi++) {
        const kiln_node *pool = &m->nodes[pi];
        int64_t k[2];
        if (dead[pi] || !kiln_pass_is(pool, "MaxPool") || pool->n_in != 1 || pool->in[0] < 0 || pool->n_out != 1 ||
            pool->out[0] < 0 || !tiling_pool(pool, k))
            continue;
        const int x = pool->in[0], p = pool->out[0];
        if (fmt(m, x) != KILN_FORMAT_NHWC || !tiles(&sp, x, k) || !kiln_dtype_is_float(sp.one[x].dtype)) continue;
        const int di = training_dropout(m, p);
        if (di < 0 || dead[di]) continue;
        const kiln_node *d = &m->nodes[di];
        const int mask = d->n_out > 1 ? d->out[1] : -1, opset = d->opset;
        const kiln_attr *seed = kiln_node_attr(d, "seed");
        const bool has_seed = seed != NULL;
        const int64_t seed_v = has_seed ? seed->i : 0;
        int dg, mg, ug;
        const bool backward = find_backward(m, pi, x, mask, &dg, &mg, &ug);

        /* forward: the Dropout node becomes the fused op (its outputs stay) */
        const int fin[3] = {x, kiln_pass_opt_in(d, 1), kiln_pass_opt_in(d, 2)};
        st = kiln_pass_rewrite(m, di, "kiln", "MaxPoolDropout", trimmed(fin, 3), fin, &m->nodes[pi]);
        if (!st) st = kiln_pass_set_int(m, di, "dropout_opset", opset);
        if (!st && has_seed) st = kiln_pass_set_int(m, di, "seed", seed_v);
        if (!st && backward) {
            /* backward: the last node of the chain becomes the fused gradient */
            const kiln_node *g = &m->nodes[dg];
            const int last = ug >= 0 ? ug : mg;
            const int bin[5] = {g->in[0], x, mask, kiln_pass_opt_in(g, 2), kiln_pass_opt_in(g, 3)};
            st = kiln_pass_rewrite(m, last, "kiln", "MaxPoolDropoutGrad", trimmed(bin, 5), bin, &m->nodes[pi]);
            if (!st) st = kiln_pass_set_int(m, last, "relu", ug >= 0);
            dead[dg] = true;
            if (ug >= 0) dead[mg] = true;
        }
        dead[pi] = true;
        any = true;
    }
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    kiln_pass_shape_probes_free(&sp);
    free(dead);
    return st;
}

/* The Relu UnaryGrad reading (g, absent, y) folded into the kiln.DropoutGrad writing g (see
 * the file's opening comment). */
static kiln_status fold_relu_grads(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "DropoutGrad")) return KILN_OK;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is_kiln(&m->nodes[i], "UnaryGrad");
    if (!any) return KILN_OK;
    int *prod = kiln_pass_producers(m);
    bool *dead = prod ? kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass") : NULL;
    if (!dead) {
        free(prod);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = KILN_OK;
    any = false;
    for (int ui = 0; ui < m->n_nodes && !st; ui++) {
        const kiln_node *u = &m->nodes[ui];
        /* op-pattern: ReluGrad */
        if (!kiln_pass_is_kiln(u, "UnaryGrad") || strcmp(kiln_attr_string(u, "op", ""), "Relu") != 0 || u->n_in != 3 ||
            u->in[0] < 0 || u->in[1] >= 0 || u->in[2] < 0 || u->n_out != 1 || u->out[0] < 0)
            continue;
        const int g = u->in[0], y = u->in[2], dx = u->out[0], di = prod[g];
        if (di < 0 || dead[di] || kiln_pass_single_consumer(m, g) != ui) continue;
        const kiln_node *d = &m->nodes[di];
        if (!kiln_pass_is_kiln(d, "DropoutGrad") || d->n_in < 2 || d->n_in > 4 || d->n_out != 1 || d->out[0] != g ||
            kiln_attr_int(d, "relu", 0) != 0)
            continue;
        if (fmt(m, g) == KILN_FORMAT_NHWC || fmt(m, y) != fmt(m, g) || fmt(m, dx) != fmt(m, g)) continue;
        st = kiln_pass_set_input(m, di, 4, y);
        if (!st) st = kiln_pass_set_int(m, di, "relu", 1);
        if (st) break;
        m->nodes[di].out[0] = dx;
        dead[ui] = true;
        any = true;
    }
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    free(prod);
    free(dead);
    return st;
}

/* Attribute name of a and b: the same ints (absent on both counts as equal). */
static bool same_ints(const kiln_node *a, const kiln_node *b, const char *name) {
    int na = 0, nb = 0;
    const int64_t *va = kiln_attr_ints(a, name, &na), *vb = kiln_attr_ints(b, name, &nb);
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (va[i] != vb[i]) return false;
    return true;
}

/* The pools' windows of a and b are the same (every attribute that places them). */
static bool same_windows(const kiln_node *a, const kiln_node *b) {
    return same_ints(a, b, "kernel_shape") && same_ints(a, b, "strides") && same_ints(a, b, "pads") &&
           same_ints(a, b, "dilations") && kiln_attr_int(a, "ceil_mode", 0) == kiln_attr_int(b, "ceil_mode", 0) &&
           strcmp(kiln_attr_string(a, "auto_pad", "NOTSET"), kiln_attr_string(b, "auto_pad", "NOTSET")) == 0;
}

/* Whether pool node n's windows overlap (some stride below the dilated kernel: the CUDA
 * gradient then finds the picks in a pass over X) and number their taps in a byte. */
static bool overlapping_pool(const kiln_node *n) {
    int nk = 0, ns = 0, nd = 0;
    const int64_t *k = kiln_attr_ints(n, "kernel_shape", &nk), *s = kiln_attr_ints(n, "strides", &ns);
    const int64_t *d = kiln_attr_ints(n, "dilations", &nd);
    if (nk < 1 || (ns && ns != nk) || (nd && nd != nk)) return false;
    bool overlap = false;
    int64_t taps = 1;
    for (int i = 0; i < nk; i++) {
        const int64_t si = ns ? s[i] : 1, di = nd ? d[i] : 1;
        if (k[i] < 1 || si < 1 || di < 1) return false;
        overlap |= si < (k[i] - 1) * di + 1;
        taps *= k[i];
        if (taps >= KILN_MAXPOOL_NO_PICK) return false;
    }
    return overlap;
}

/* The forward's picks for the gradient (see the file's opening comment). */
static kiln_status pool_picks(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    /* op-pattern: MaxPool -> MaxPoolGrad with the forward's picks */
    if (!kiln_pass_device_has(o, "MaxPoolGrad")) return KILN_OK; /* kiln's op (every device has MaxPool) */
    bool candidate = false; /* a MaxPoolGrad (training graphs only): else no shape inference */
    for (int i = 0; i < m->n_nodes && !candidate; i++) candidate = kiln_pass_is_kiln(&m->nodes[i], "MaxPoolGrad");
    if (!candidate) return KILN_OK;
    kiln_tensor *sh = NULL;
    kiln_status st = kiln_pass_infer_types(m, &sh);
    for (int pi = 0; pi < m->n_nodes && !st; pi++) {
        const kiln_node *pool = &m->nodes[pi];
        if (!kiln_pass_is(pool, "MaxPool") || pool->n_in != 1 || pool->in[0] < 0 || pool->n_out < 1 ||
            pool->out[0] < 0 || (pool->n_out > 1 && pool->out[1] >= 0) || kiln_attr_int(pool, "picks", 0) != 0 ||
            !overlapping_pool(pool))
            continue;
        const int x = pool->in[0], y = pool->out[0];
        if (!kiln_dtype_is_float(sh[x].dtype)) continue;
        int picks = -1;
        for (int gi = 0; gi < m->n_nodes && !st; gi++) {
            const kiln_node *g = &m->nodes[gi];
            if (!kiln_pass_is_kiln(g, "MaxPoolGrad") || g->n_in != 2 || g->in[1] != x || g->in[0] < 0 ||
                !same_windows(g, &m->nodes[pi]))
                continue;
            if (picks < 0) {
                char hint[200];
                snprintf(hint, sizeof hint, "%s:picks", m->nodes[pi].name);
                if ((picks = kiln_pass_new_value(m, hint)) < 0) {
                    st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
                    break;
                }
                kiln_value *pv = &m->values[picks]; /* Y's shape where stored, and layout */
                const kiln_value *yv = &m->values[y];
                pv->dtype = KILN_U8;
                pv->format = yv->format;
                pv->ndim = yv->ndim;
                memcpy(pv->dims, yv->dims, sizeof pv->dims);
                if ((st = kiln_pass_set_output(m, pi, 1, picks)) || (st = kiln_pass_set_int(m, pi, "picks", 1))) break;
            }
            if ((st = kiln_pass_set_input(m, gi, 2, picks))) break;
            *changed = true;
        }
    }
    free(sh);
    return st;
}

kiln_status kiln_pass_fuse_pool(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    kiln_status st = fuse_pools(m, o, changed);
    if (!st) st = fold_relu_grads(m, o, changed);
    return st ? st : pool_picks(m, o, changed);
}

/* The BN -> Relu under a pool with picks (see the file's opening comment): the training
 * BatchNormalization (relu = 1, opset >= 14, no residual Z, Y written) producing v, or -1. */
static int bn_relu_producer(const kiln_model *m, const int *prod, int v) {
    const int b = prod[v];
    if (b < 0) return -1;
    const kiln_node *n = &m->nodes[b];
    if (!kiln_pass_is(n, "BatchNormalization") || n->opset < 14 || kiln_attr_int(n, "training_mode", 0) == 0 ||
        kiln_attr_int(n, "relu", 0) == 0 || kiln_attr_int(n, "write_y", 1) == 0 || n->n_in < 5 ||
        kiln_pass_opt_in(n, 5) >= 0 || n->n_out < 1 || n->out[0] != v || n->in[0] < 0 || n->in[1] < 0 || n->in[2] < 0)
        return -1;
    return b;
}

/* Whether every reader of y is pool node pi or a kiln.MaxPoolGrad with the picks (which
 * reads y for its shape only), and y no graph output. */
static bool only_pool_reads(const kiln_model *m, int y, int pi) {
    int reads = 0;
    for (int j = 0; j < m->n_nodes; j++) {
        const kiln_node *r = &m->nodes[j];
        for (int k = 0; k < r->n_in; k++) {
            if (r->in[k] != y) continue;
            reads++;
            if (j == pi && k == 0) continue;
            /* op-pattern: kiln.MaxPoolGrad reading the BN's Y for its shape */
            if (kiln_pass_is_kiln(r, "MaxPoolGrad") && k == 1 && r->n_in == 3 && r->in[2] >= 0) continue;
            return false;
        }
    }
    return reads == kiln_pass_uses(m, y);
}

/* A new value of node ni (hint "<name>:what"), dtype dt, rank 1 or 2 dims, layout f. */
static int new_value(kiln_model *m, int ni, const char *what, kiln_dtype dt, int ndim, int64_t d0, int64_t d1,
                     kiln_format f) {
    char hint[200];
    snprintf(hint, sizeof hint, "%s:%s", m->nodes[ni].name ? m->nodes[ni].name : "bn", what);
    const int v = kiln_pass_new_value(m, hint);
    if (v < 0) return -1;
    kiln_value *val = &m->values[v];
    val->dtype = dt;
    val->format = f;
    if (d1 >= 0 || ndim == 1) {
        val->ndim = ndim;
        val->dims[0] = d0;
        val->dims[1] = d1;
    }
    return v;
}

kiln_status kiln_pass_fuse_bn_pool(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    /* op-pattern: BatchNormalization(relu) -> MaxPool(picks) as kiln.BnReluMaxPool */
    if (!kiln_pass_device_has(o, "BnReluMaxPool")) return KILN_OK;
    bool candidate = false;
    for (int i = 0; i < m->n_nodes && !candidate; i++)
        candidate = kiln_pass_is(&m->nodes[i], "MaxPool") && kiln_attr_int(&m->nodes[i], "picks", 0) != 0;
    if (!candidate) return KILN_OK;
    int *prod = kiln_pass_producers(m);
    kiln_tensor *sh = NULL; /* dtypes and shapes (C does not depend on the batch) */
    const int nv = m->n_values;
    kiln_status st = prod ? kiln_pass_infer_types(m, &sh) : KILN_ERR_OUT_OF_MEMORY;
    for (int pi = 0; pi < m->n_nodes && !st; pi++) {
        const kiln_node *pool = &m->nodes[pi];
        if (!kiln_pass_is(pool, "MaxPool") || kiln_attr_int(pool, "picks", 0) == 0 || pool->n_in != 1 ||
            pool->in[0] < 0 || pool->n_out < 2 || pool->out[1] < 0)
            continue;
        const int y = pool->in[0], bi = y < m->n_values ? bn_relu_producer(m, prod, y) : -1;
        if (bi < 0 || !only_pool_reads(m, y, pi) || y >= nv || sh[y].ndim < 3) continue;
        const kiln_node *bn = &m->nodes[bi];
        const int x = bn->in[0], scale = bn->in[1], bias = bn->in[2];
        const int64_t C = sh[y].dims[1];
        const float eps = kiln_attr_float(bn, "epsilon", 1e-5f);
        int s = bn->n_out > 3 ? bn->out[3] : -1;
        const kiln_format yf = m->values[y].format;
        const kiln_dtype yt = sh[y].dtype;
        /* S (the saved statistics the fused op recomputes Y from) and Y itself: a new empty
         * value nothing reads */
        const bool add_s = s < 0;
        if (add_s) s = new_value(m, bi, "saved", KILN_F64, 2, 2, C, KILN_FORMAT_NCHW);
        const int e = s < 0 ? -1 : new_value(m, bi, "unwritten", yt, 1, 0, -1, yf);
        if (e < 0) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
            break;
        }
        if (add_s && (st = kiln_pass_set_output(m, bi, 3, s))) break;
        if ((st = kiln_pass_set_output(m, bi, 0, e)) || (st = kiln_pass_set_int(m, bi, "write_y", 0))) break;
        for (int j = 0; j < m->n_nodes && !st; j++)
            if (j != pi && kiln_pass_is_kiln(&m->nodes[j], "MaxPoolGrad") && m->nodes[j].n_in == 3 &&
                m->nodes[j].in[1] == y)
                st = kiln_pass_set_input(m, j, 1, x); /* the shape: the BN's input has its output's */
        const int in[4] = {x, scale, bias, s};
        if (!st) st = kiln_pass_rewrite(m, pi, "kiln", "BnReluMaxPool", 4, in, &m->nodes[pi]);
        if (!st) st = kiln_pass_set_float(m, pi, "epsilon", eps);
        if (!st) *changed = true;
    }
    free(sh);
    free(prod);
    return st;
}
