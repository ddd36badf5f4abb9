/* conv_bn_prologue.c — a training BatchNormalization's apply (+ ReLU) folded into the
 * prologue of the convolutions that read its output (issue 12, MLPerf's "BN-ReLU-Conv";
 * when kiln_pass_options.conv_bn_prologue is set, as the trainer does for CUDA training
 * with the environment variable KILN_CUDA_BN_PROLOGUE=1; off by default):
 *
 *   a = BatchNormalization(y, scale, B, mean, var[, -, s, q]) training_mode=1 [relu=r]
 *       -> a, running_mean, running_var[, S]
 *   ... = Conv(a, W, B?) or kiln.FusedConv(a, W, ...)       (forward)
 *   dW = kiln.ConvGradWeight(a, dY, W)                       (its weight gradient)
 *   dX = kiln.ConvGradInput(dY, W, a)                        (a read for its shape only)
 *     -> -, running_mean, running_var, S?, P = BatchNormalization(...)  (Y absent; output 4:
 *                                                  P f32 (2, C), the apply's a; k)
 *        ... = kiln.FusedConv(y, W, B?, Z?, P) prologue_relu=r   (a Conv becomes one)
 *        dW = kiln.ConvGradWeight(y, dY, W, P) prologue_relu=r
 *        dX = kiln.ConvGradInput(dY, W, y)
 *
 * Why: the BN's apply pass (read y, write a) and the convolutions' reads of a become the
 * convolutions' reads of y with the affine + ReLU applied on load (cuDNN's graph API runs
 * it in the convolution's prologue at about the plain convolution's cost: bench/NOTES.md
 * "t7 / z6", patterns c and f of bench/cudnn_fusion_probe.c); a is never written nor kept
 * for the backward (less activation memory). bench/NOTES.md "t8 prediction".
 *
 * When: a BatchNormalization in training mode (opset >= 14) without a residual Z (input 5)
 * and without output 4 yet, whose Y is no graph output and whose every reader is one of
 * those above reading it in that slot alone (a Conv with at most 3 inputs, a FusedConv
 * without input 4, a ConvGradWeight without input 3), at least one forward convolution
 * among them. ResNet-50: the 33 BNs inside the bottlenecks; the block ends (residual) and
 * the shortcut BNs (read by an Add) keep Y; so does a BN whose gradient reads Y (the mask
 * from Y, fuse-bn without relu_mask_from_x). The function is unchanged but for rounding:
 * the convolutions read act(a * y + k) in f32, not rounded to Y's dtype (f16 under AMP),
 * with a and k rounded to f32. Runs after conv-bn-stats (formats and statistics inputs
 * final). On devices with kiln.FusedConv and kiln.ConvGradWeight kernels. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kiln_pass_conv_bn_prologue_env(void) {
    const char *e = getenv("KILN_CUDA_BN_PROLOGUE");
    return e && strcmp(e, "1") == 0;
}

static bool candidate_bn(const kiln_node *n) {
    return kiln_pass_is(n, "BatchNormalization") && n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0 &&
           n->n_in >= 5 && n->in[0] >= 0 && kiln_pass_opt_in(n, 5) < 0 && n->n_out >= 1 && n->out[0] >= 0 &&
           (n->n_out < 5 || n->out[4] < 0);
}

/* How node r reads a: 1 a forward convolution (input 0), 2 its weight gradient (input 0),
 * 3 its input gradient (input 2, the shape), 0 any other way (or a in another slot too). */
static int reader_kind(const kiln_node *r, int a) {
    int slot = -1, reads = 0;
    for (int k = 0; k < r->n_in; k++)
        if (r->in[k] == a) {
            slot = k;
            reads++;
        }
    if (reads != 1) return 0;
    /* op-pattern: Conv -> FusedConv reading the BN's Y (forward) */
    if (slot == 0 && kiln_pass_is(r, "Conv") && r->n_in <= 3) return 1;
    /* op-pattern: kiln.FusedConv reading the BN's Y (forward) */
    if (slot == 0 && kiln_pass_is_kiln(r, "FusedConv") && kiln_pass_opt_in(r, 4) < 0) return 1;
    /* op-pattern: kiln.ConvGradWeight reading the BN's Y (the weight gradient) */
    if (slot == 0 && kiln_pass_is_kiln(r, "ConvGradWeight") && r->n_in == 3) return 2;
    /* op-pattern: kiln.ConvGradInput reading the BN's Y for its shape */
    if (slot == 2 && kiln_pass_is_kiln(r, "ConvGradInput")) return 3;
    return 0;
}

/* Whether every reader of a is a convolution's (at least one forward), and a no graph output. */
static bool only_convolutions(const kiln_model *m, int a) {
    int uses = 0, fwd = 0;
    for (int j = 0; j < m->n_nodes; j++) {
        const kiln_node *r = &m->nodes[j];
        bool reads = false;
        for (int k = 0; k < r->n_in; k++) reads |= r->in[k] == a;
        if (!reads) continue;
        const int kind = reader_kind(r, a);
        if (!kind) return false;
        fwd += kind == 1;
        uses++;
    }
    return fwd > 0 && uses == kiln_pass_uses(m, a); /* fewer node reads than uses: a graph output */
}

kiln_status kiln_pass_conv_bn_prologue(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!o->conv_bn_prologue) return KILN_OK;
    /* op-pattern: the two kernels the rewrite needs, FusedConv and ConvGradWeight with a prologue */
    if (!kiln_pass_device_has(o, "FusedConv") || !kiln_pass_device_has(o, "ConvGradWeight")) return KILN_OK;
    kiln_status st = KILN_OK;
    for (int bi = 0; bi < m->n_nodes && !st; bi++) {
        if (!candidate_bn(&m->nodes[bi])) continue;
        const int a = m->nodes[bi].out[0], y = m->nodes[bi].in[0];
        if (!only_convolutions(m, a)) continue;
        const int64_t relu = kiln_attr_int(&m->nodes[bi], "relu", 0);
        char hint[200];
        snprintf(hint, sizeof hint, "%s:prologue", m->nodes[bi].name ? m->nodes[bi].name : "bn");
        const int p = kiln_pass_new_value(m, hint);
        if (p < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
        kiln_value *pv = &m->values[p];
        pv->dtype = KILN_F32;
        if (m->values[y].ndim >= 2) {
            pv->ndim = 2;
            pv->dims[0] = 2;
            pv->dims[1] = m->values[y].dims[1];
        }
        /* Y: a new value nothing reads, empty (write_y = 0), in the old Y's dtype and layout (so
         * a backend's layout checks see the node as before) */
        snprintf(hint, sizeof hint, "%s:unwritten", m->nodes[bi].name ? m->nodes[bi].name : "bn");
        const int e = kiln_pass_new_value(m, hint);
        if (e < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
        m->values[e].dtype = m->values[a].dtype;
        m->values[e].format = m->values[a].format;
        m->values[e].ndim = 1;
        m->values[e].dims[0] = 0;
        if ((st = kiln_pass_set_output(m, bi, 4, p)) || (st = kiln_pass_set_output(m, bi, 0, e)) ||
            (st = kiln_pass_set_int(m, bi, "write_y", 0)))
            break;
        for (int j = 0; j < m->n_nodes && !st; j++) {
            const int kind = reader_kind(&m->nodes[j], a);
            if (!kind) continue;
            if (kind == 1 && kiln_pass_is(&m->nodes[j], "Conv")) {
                int in[3] = {-1, -1, -1};
                const int n_in = m->nodes[j].n_in;
                memcpy(in, m->nodes[j].in, (size_t)n_in * sizeof *in);
                /* op-pattern: Conv -> FusedConv (no activation: the same convolution) */
                if ((st = kiln_pass_rewrite(m, j, "kiln", "FusedConv", n_in, in, &m->nodes[j]))) break;
            }
            const int slot = kind == 3 ? 2 : 0;
            if ((st = kiln_pass_set_input(m, j, slot, y))) break;
            if (kind == 3) continue;
            if ((st = kiln_pass_set_input(m, j, kind == 1 ? 4 : 3, p)) ||
                (st = kiln_pass_set_int(m, j, "prologue_relu", relu)))
                break;
        }
        *changed = true;
    }
    return st;
}
