/* crop_taps.c — the crop-taps pass: a convolution's kernel cropped to the taps that can
 * read the input.
 *
 * Along a spatial axis of input length H, output length OH, kernel k, stride s, dilation d
 * and pads (pb, pe), output position y's tap i reads input row y*s - pb + i*d; a tap that
 * reads the zero padding for every y adds nothing. Dilated convolutions on feature maps
 * smaller than their dilation are the case: DeepLabV3's ASPP branch of rate 36 on the 28x28
 * map a 224x224 input gives (output stride 8) reads only its centre tap, a 3x3 convolution
 * of 2048 -> 256 channels doing the work of a 1x1 nine times over.
 *
 * For a Conv whose weights are constants and whose input's spatial dims are known (where
 * the graph inputs have symbolic dims, as a dynamic batch, known as kiln_pass_known_dims
 * finds them: the same for three probe batches), each
 * axis keeps taps [i0, i1] (the first and last that some output reads inside the input):
 * the weights become W[..., i0:i1+1] (a new initializer), the pads pb - i0*d and
 * pe - (k-1-i1)*d, so every output position reads the same input rows through the same
 * weights and the output's shape stays; an axis left with one tap gets dilation 1 (a 1x1
 * convolution is what the backends' fast paths look for). Axes whose cropped pads would
 * be negative, SAME_* auto_pad and Convs with no tap reading the input are left alone.
 * Training graphs never see it (their weights are graph inputs, and the trainer names the
 * passes it runs). The same function: the dropped products were all of zeros (a backend may
 * run the smaller kernel by another algorithm, so results agree to rounding).
 */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first and last live taps of one axis; false when none is. */
static bool live_taps(int64_t H, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t OH, int64_t *i0, int64_t *i1) {
    *i0 = -1;
    *i1 = -1;
    for (int64_t i = 0; i < k; i++) {
        /* some y in [0, OH) with 0 <= y*s - pb + i*d < H: y*s in [lo, lo + H) */
        const int64_t lo = pb - i * d;
        const int64_t y = lo <= 0 ? 0 : (lo + s - 1) / s; /* the first y with y*s >= lo */
        if (y < OH && y * s < lo + H) {
            if (*i0 < 0) *i0 = i;
            *i1 = i;
        }
    }
    return *i0 >= 0;
}

/* Shapes by value (kiln_pass_known_dims') where the graph inputs have symbolic dims, for
 * the values there were when they were inferred (n). */
typedef struct probed {
    int n;
    kiln_tensor *known;
} probed;

/* Crop node ci when it pays; *done says whether it was. */
static kiln_status crop_one(kiln_model *m, const int *prod, const probed *pr, int ci, bool *done) {
    *done = false;
    const kiln_node *cv = &m->nodes[ci];
    if (cv->n_in < 2 || cv->n_out != 1) return KILN_OK;
    const kiln_tensor *w = kiln_pass_constant(m, prod, cv->in[1]);
    const int x = cv->in[0];
    if (!w || x < 0 || !kiln_dtype_is_float(w->dtype) || w->ndim < 3 || w->ndim > KILN_MAX_DIMS) return KILN_OK;
    const int r = w->ndim - 2;
    const kiln_value *xv = &m->values[x];
    int xnd = xv->ndim;
    const int64_t *xd = xv->dims;
    if (pr->known && x < pr->n) { /* a dynamic batch: the feature map's dims as the probes found them */
        xnd = pr->known[x].ndim;
        xd = pr->known[x].dims;
    }
    if (xnd != w->ndim) return KILN_OK;
    const char *autopad = kiln_attr_string(cv, "auto_pad", "NOTSET");
    const bool valid = strcmp(autopad, "VALID") == 0;
    if (!valid && strcmp(autopad, "NOTSET") != 0) return KILN_OK;
    int n_st = 0, n_dl = 0, n_pd = 0, n_ks = 0;
    const int64_t *st = kiln_attr_ints(cv, "strides", &n_st), *dl = kiln_attr_ints(cv, "dilations", &n_dl);
    const int64_t *pd = kiln_attr_ints(cv, "pads", &n_pd), *ks = kiln_attr_ints(cv, "kernel_shape", &n_ks);
    if ((st && n_st != r) || (dl && n_dl != r) || (pd && !valid && n_pd != 2 * r) || (ks && n_ks != r)) return KILN_OK;
    int64_t k0[KILN_MAX_DIMS], k1[KILN_MAX_DIMS], pads[2 * KILN_MAX_DIMS], dil[KILN_MAX_DIMS];
    bool any = false;
    for (int a = 0; a < r; a++) {
        const int64_t H = xd[2 + a], k = w->dims[2 + a];
        const int64_t s = st ? st[a] : 1, d = dl ? dl[a] : 1;
        const int64_t pb = pd && !valid ? pd[a] : 0, pe = pd && !valid ? pd[r + a] : 0;
        if (H <= 0 || k <= 0 || s <= 0 || d <= 0 || pb < 0 || pe < 0 || (ks && ks[a] != k)) return KILN_OK;
        const int64_t span = H + pb + pe - d * (k - 1) - 1;
        if (span < 0) return KILN_OK; /* no output (shape inference says so) */
        const int64_t OH = span / s + 1;
        int64_t i0, i1;
        if (!live_taps(H, k, s, d, pb, OH, &i0, &i1)) return KILN_OK; /* the bias alone: left as it is */
        const int64_t nb = pb - i0 * d, ne = pe - (k - 1 - i1) * d;
        if (nb < 0 || ne < 0 || (i0 == 0 && i1 == k - 1)) {
            k0[a] = 0;
            k1[a] = k - 1;
            pads[a] = pb;
            pads[r + a] = pe;
        } else {
            k0[a] = i0;
            k1[a] = i1;
            pads[a] = nb;
            pads[r + a] = ne;
            any = true;
        }
        dil[a] = k1[a] == k0[a] ? 1 : d;
    }
    if (!any) return KILN_OK;
    /* the cropped weights: W[m, c, k0:k1+1, ...] */
    int64_t dims[KILN_MAX_DIMS];
    dims[0] = w->dims[0];
    dims[1] = w->dims[1];
    for (int a = 0; a < r; a++) dims[2 + a] = k1[a] - k0[a] + 1;
    kiln_tensor *nw = kiln_tensor_new(m->ctx, w->dtype, w->ndim, dims);
    if (!nw) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "crop-taps: out of memory");
    const int64_t n = kiln_tensor_numel(nw);
    for (int64_t o = 0; o < n; o++) {
        int64_t rest = o, src = 0, stride = 1;
        for (int dd = w->ndim - 1; dd >= 0; dd--) {
            const int64_t idx = rest % dims[dd] + (dd >= 2 ? k0[dd - 2] : 0);
            rest /= dims[dd];
            src += idx * stride;
            stride *= w->dims[dd];
        }
        kiln_set_f64(nw, o, kiln_get_f64(w, src));
    }
    char hint[200];
    snprintf(hint, sizeof hint, "%s.cropped", m->values[cv->in[1]].name);
    const int old = cv->in[1];
    const int wv = kiln_pass_add_initializer(m, hint, nw);
    if (wv < 0) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status s = kiln_pass_set_input(m, ci, 1, wv);
    kiln_node *nd = &m->nodes[ci];
    if (!s && !valid) s = kiln_node_set_ints(nd, "pads", 2 * r, pads);
    if (!s) s = kiln_node_set_ints(nd, "dilations", r, dil);
    if (!s && ks) s = kiln_node_set_ints(nd, "kernel_shape", r, dims + 2);
    if (s) return s;
    kiln_pass_drop_if_unused(m, old);
    *done = true;
    return KILN_OK;
}

kiln_status kiln_pass_crop_taps(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    int *prod = kiln_pass_producers(m);
    if (!prod) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    probed pr = {0};
    bool symbolic = false, any_conv = false;
    for (int i = 0; i < m->n_inputs; i++)
        for (int q = 0; q < m->values[m->inputs[i]].ndim; q++) symbolic |= m->values[m->inputs[i]].dims[q] < 0;
    for (int i = 0; i < m->n_nodes; i++) any_conv |= kiln_pass_is(&m->nodes[i], "Conv");
    if (symbolic && any_conv) {
        pr.n = m->n_values;
        st = kiln_pass_known_dims(m, &pr.known);
    }
    for (int i = 0; i < m->n_nodes && !st; i++) {
        /* op-pattern: Conv with constant weights over known spatial dims */
        if (!kiln_pass_is(&m->nodes[i], "Conv")) continue;
        bool done = false;
        st = crop_one(m, prod, &pr, i, &done);
        *changed |= done;
    }
    free(pr.known);
    free(prod);
    if (!st && *changed) st = kiln_pass_drop_unread_constants(m, changed); /* a Constant node's weights */
    return st;
}
