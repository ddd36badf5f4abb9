/*
 * conv_patch.c — a patchifying convolution as a product (KILN_PASS_CONV_PATCH; CUDA plans).
 *
 * A Conv whose kernel equals its stride, without padding or dilation, one group, on a map
 * its kernel tiles exactly (a ViT's patch embedding: 16x16 stride 16 on 224x224) reads each
 * input element once: it is the product of the patches, laid out as rows, with the weight:
 *
 *   X (N, C, H, W) -Reshape-> (N, C, H/kh, kh, W/kw, kw) -Transpose(0, 2, 4, 1, 3, 5)->
 *   -Reshape-> (N * H' * W', C * kh * kw) -Gemm(., Reshape(W, (M, -1)), B, transB)->
 *   (N * H' * W', M) -Reshape-> (N, H', W', M) -Transpose(0, 3, 1, 2)-> Y (N, M, H', W')
 *
 * One copy of X and one cuBLASLt product (ViT-B/16 at batch 256: 59 GFLOP) instead of
 * cuDNN's convolution, which on the H200 took 0.97 ms for it with a 3-channel input padded
 * to 8 (about six times the product's floor). The weight is reshaped by a node (a view), not
 * copied, so a trained weight stays one tensor. Only kernels of at least 64 taps: smaller
 * ones (Swin's and ConvNeXt's 4x4 stems, K = 48) are memory-bound either way and stay with
 * cuDNN, unmeasured. The final Transpose is what the layout pass reads tokens through
 * (layout.c: ViT's reshape(n, C, h * w).permute(0, 2, 1) then reads the product's rows as
 * they are). Shapes from the two probes: X's channels and map size must not depend on the
 * symbolic dims.
 */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_TAPS 64

/* Conv node i as the product (see the top); *done when rewritten. */
static kiln_status patch(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done) {
    const kiln_node *n = &m->nodes[i];
    *done = false;
    if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || n->n_out != 1 || n->out[0] < 0) return KILN_OK;
    const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
    if (kiln_attr_int(n, "group", 1) != 1 || !kiln_pass_all_ints(n, "pads", 0) || !kiln_pass_all_ints(n, "dilations", 1) ||
        !(strcmp(ap, "NOTSET") == 0 || strcmp(ap, "VALID") == 0))
        return KILN_OK;
    const int x = n->in[0], w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1, y = n->out[0];
    if (x >= pr->n || w >= pr->n || y >= pr->n) return KILN_OK;
    int64_t xd[4], wd[4];
    for (int p = 0; p < 2; p++) {
        const kiln_tensor *tx = p ? &pr->three[x] : &pr->one[x], *tw = p ? &pr->three[w] : &pr->one[w];
        if (tx->ndim != 4 || tw->ndim != 4) return KILN_OK;
        for (int d = 1; d < 4; d++) /* the channels and the map: the same for both probes */
            if (p && (tx->dims[d] != xd[d] || tw->dims[d] != wd[d])) return KILN_OK;
        if (p && tw->dims[0] != wd[0]) return KILN_OK;
        memcpy(xd, tx->dims, sizeof xd);
        memcpy(wd, tw->dims, sizeof wd);
    }
    const int64_t C = xd[1], H = xd[2], W = xd[3], M = wd[0], kh = wd[2], kw = wd[3];
    int ns = 0;
    const int64_t *st = kiln_attr_ints(n, "strides", &ns);
    int nk = 0;
    const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &nk);
    if (!st || ns != 2 || st[0] != kh || st[1] != kw || (ks && (nk != 2 || ks[0] != kh || ks[1] != kw))) return KILN_OK;
    if (wd[1] != C || kh * kw < MIN_TAPS || H % kh || W % kw || M < 1) return KILN_OK;
    const int64_t hp = H / kh, wp = W / kw, K = C * kh * kw;
    char name[256];
    const char *base = n->name;
    snprintf(name, sizeof name, "%.180s/patch", base);
    const int s1 = kiln_pass_add_i64s(m, name, 6, (int64_t[]){0, C, hp, kh, wp, kw});
    const int s2 = s1 >= 0 ? kiln_pass_add_i64s(m, name, 2, (int64_t[]){-1, K}) : -1;
    const int s3 = s2 >= 0 ? kiln_pass_add_i64s(m, name, 2, (int64_t[]){M, K}) : -1;
    const int s4 = s3 >= 0 ? kiln_pass_add_i64s(m, name, 4, (int64_t[]){-1, hp, wp, M}) : -1;
    int v[5] = {-1, -1, -1, -1, -1}; /* Xr, Xt, Xm, Wm, Y2, then Y4 below */
    for (int k = 0; k < 5 && s4 >= 0; k++) v[k] = kiln_pass_new_value(m, name);
    const int y4 = v[4] >= 0 ? kiln_pass_new_value(m, name) : -1;
    if (y4 < 0) return KILN_ERR_OUT_OF_MEMORY;
    const kiln_dtype dt = m->values[y].dtype ? m->values[y].dtype : pr->one[y].dtype;
    for (int k = 0; k < 5; k++) m->values[v[k]].dtype = dt;
    m->values[y4].dtype = dt;
    /* op-pattern: Conv (kernel = stride) -> Reshape, Transpose, Reshape, Gemm, Reshape, Transpose */
    int ok = kiln_pass_append_node(m, "Reshape", name, 2, (int[]){x, s1}, v[0], NULL, 14);
    ok = ok >= 0 ? kiln_pass_append_node(m, "Transpose", name, 1, &v[0], v[1], "perm=[0,2,4,1,3,5]", 13) : -1;
    ok = ok >= 0 ? kiln_pass_append_node(m, "Reshape", name, 2, (int[]){v[1], s2}, v[2], NULL, 14) : -1;
    ok = ok >= 0 ? kiln_pass_append_node(m, "Reshape", name, 2, (int[]){w, s3}, v[3], NULL, 14) : -1;
    ok = ok >= 0 ? kiln_pass_append_node(m, "Gemm", name, b >= 0 ? 3 : 2, (int[]){v[2], v[3], b}, v[4], "transB=1", 13) : -1;
    ok = ok >= 0 ? kiln_pass_append_node(m, "Reshape", name, 2, (int[]){v[4], s4}, y4, NULL, 14) : -1;
    ok = ok >= 0 ? kiln_pass_append_node(m, "Transpose", name, 1, &y4, y, "perm=[0,3,1,2]", 13) : -1;
    if (ok < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
    m->nodes[i].out[0] = -1; /* the Conv goes; the last Transpose writes Y */
    dead[i] = true;
    *done = true;
    return KILN_OK;
}

kiln_status kiln_pass_conv_patch(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (o->device != KILN_DEVICE_CUDA) return KILN_OK;
    return kiln_pass_each_node(m, "Conv", patch, changed); /* op-pattern */
}
