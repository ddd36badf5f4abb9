/*
 * layout.c — the layout pass (KILN_PASS_NHWC; CUDA only): chains of convolutions and the
 * ops around them are laid out NHWC (channels_last), with the fewest conversions.
 *
 * Why: cuDNN's tensor-core convolutions read and write NHWC; given NCHW they transpose
 * internally, around every convolution. Here the layout is chosen once per value, and
 * kiln.ToNHWC / kiln.ToNCHW nodes (src/ops/layout_convert.c) move bytes only where a
 * chain meets code that reads NCHW. Dims stay logical NCHW everywhere; a value's
 * `format` says how a device lays it out (device plans copy it into their tensors).
 *
 * Which ops run NHWC (their CUDA kernels read the format; the table in src/cuda/table.c
 * must agree):
 *   - Conv and kiln.FusedConv on 4-D tensors: always. X and the residual Z are NHWC; the
 *     weight W too (KRSC, what cuDNN's NHWC kernels read): a weight initializer read only
 *     by such convolutions is marked NHWC itself (a device converts it when uploading:
 *     no node), any other weight goes through a kiln.ToNHWC (folded when constant).
 *   - MaxPool (no Indices output), AveragePool, BatchNormalization (inference, and
 *     training: its running statistics are per-channel vectors, with no layout), the
 *     unary elementwise ops (Relu, Clip, Sigmoid, ..., Identity, inference Dropout) and
 *     the binary ones (Add Sub Mul Div Pow Max Min Sum) on 4-D data: when their data input is
 *     already NHWC, so a chain that starts at a convolution continues through them.
 *     kiln.FusedElementwise follows the binary ops' rule (its CUDA kernel broadcasts in NHWC:
 *     an inference BN -> Relu with its per-channel scale and shift).
 *     A binary op's other operands may stay NCHW when their bytes are the same in both
 *     layouts: rank <= 4 right-aligned to (N, C, H, W) with C == 1 or H*W == 1 (scalars,
 *     per-channel vectors (C,1,1), (N,1,H,W) maps); a full 4-D one is converted.
 *     A convolution's X and W whose bytes are the same in both layouts (one channel: the
 *     first layer on grayscale images) are read as they are, with no conversion.
 *     kiln.FusedElementwise follows as a binary op, broadcast operands included (its CUDA
 *     kernel walks NHWC tensors in storage order): ConvNeXt's block end, layer scale
 *     (C,1,1) * x + residual, stays NHWC. Such an operand is recognised through the
 *     Identity and Cast in front of a shared initializer (value_layout_free), and a binary
 *     op's output takes its highest operand rank.
 *   - Training's gradients follow their forward ops (CUDA training runs this pass too):
 *     kiln.ConvGradInput(dY, W, X) when dY is NHWC, kiln.ConvGradWeight(X, dY, W) and
 *     kiln.MaxPoolGrad, kiln.AveragePoolGrad, kiln.GlobalAveragePoolGrad (dY, X) and
 *     kiln.UnaryGrad(dY, X?, Y?) when any data input is,
 *     kiln.BatchNormGrad(dY, X, ...) when dY or X is (its parameter gradients have none),
 *     kiln.ConvGradBias(dY) when dY is (its (M) output has no layout), kiln.ReduceSumTo(dY,
 *     Like) when dY is and Like's bytes are the same in both layouts (a broadcast operand
 *     of an NHWC binary op, a per-channel bias: its output is labelled NCHW). A weight
 *     gradient is NHWC (KRSC) like its weight, converted to NCHW at the graph output,
 *     unless its bytes are the same in both layouts.
 *   - Training Dropout (a mask output or a training_mode input; its mask is drawn by NCHW
 *     flat index) writes Y and the mask NCHW, but reads a 4-D NHWC X as it is: its CUDA
 *     kernel changes the layout on the way, drawing each element's mask by its NCHW index,
 *     so no kiln.ToNCHW stands in front of it. mnist-net's convolution chain ends at its
 *     MaxPool, whose output Dropout reads; Flatten then reads Dropout's NCHW Y.
 *   - GlobalAveragePool reads NHWC and writes (N, C, 1, 1), whose bytes are the same in
 *     both layouts: its output is labelled NCHW, so ResNet's GlobalAveragePool -> Flatten
 *     -> Gemm head needs no conversion at all, or NHWC when only convolutions read it
 *     (squeeze-and-excitation blocks).
 *   - Data movement whose CUDA kernels read the format: Concat (any axis; as the binary
 *     ops: when an input is NHWC, the others converted unless their bytes are the same in
 *     both layouts), so DenseNet's Concats of NHWC features need no conversion; Split and
 *     kiln.ConcatGrad (every output in input 0's layout), Slice, Pad (ShuffleNet's channel
 *     halves, the pad-channels pass's zero channels) and kiln.ChannelShuffle when input 0
 *     is NHWC. kiln.ConvGradInput goes NHWC also when only its forward X is (an NCHW dY
 *     converted), so X, W and dY always share a layout.
 *   - Channel shuffles: before anything else, Reshape (N, g, C/g, H, W) - Transpose
 *     (0, 2, 1, 3, 4) - Reshape back becomes one kiln.ChannelShuffle (channel_shuffle.c);
 *     torch.roll's Slice - Slice - Concat, one kiln.Roll (roll.c), which follows its
 *     input's layout as ChannelShuffle does.
 *   - Transpose between the logical order and channels-last (ConvNeXt's permute(0,2,3,1)
 *     before its LayerNorm and Linears, permute(0,3,1,2) after): perm (0,2,3,1) reads an
 *     NHWC input as it is (no kiln.ToNCHW: its bytes are the output's), and perm (0,3,1,2)
 *     of an NCHW input writes NHWC when a reader follows layouts: either way the output's
 *     bytes are the input's, in order, and Transpose's alias_when makes it a view in
 *     device plans (no kernel at all). A Transpose's output has its perm's rank, so the
 *     ops behind the permute back follow NHWC under a symbolic batch too.
 * Everything else reads NCHW: Flatten, Reshape, Gemm, Softmax... get a
 * kiln.ToNCHW (one per value, shared by all such readers); shape-only readers (Shape)
 * need none. Graph inputs are NCHW (one kiln.ToNHWC before the first convolution, shared)
 * and graph outputs stay NCHW with their names: an NHWC output is computed under a new
 * name and converted into the original one.
 *
 * A kiln.ToNHWC then takes over what stands between it and its source when that is a
 * channel padding and a precision change (the chain at a CNN's input after the
 * pad-channels and precision passes: x f32 -> Cast f16 -> Pad 3 to 8 channels ->
 * ToNHWC): a Pad in constant mode adding only zeros (+0) at the end of dim 1 becomes its
 * `zero_channels`, a Cast among f32 / f16 / bf16 its `to`, in either order, each when the
 * conversion is its output's only reader and that output is no graph output. One kernel
 * then reads x once and writes the padded NHWC f16 tensor once (ResNet-50 at batch 256:
 * three kernels and two intermediate tensors fewer).
 *
 * Likewise a kiln.DropoutGrad (dY and the mask NCHW) whose output only a kiln.ToNHWC reads
 * (that output no graph output; in mnist-net's backward, MaxPoolGrad's dY) writes the
 * conversion's NHWC output itself, and the conversion goes: its CUDA kernel writes dX
 * NHWC. Training mnist-net thus has two conversions on its step's critical path fewer,
 * and only conv2's weight (to KRSC) and its gradient (back) are converted.
 *
 * Ranks come from static inference where the graph's inputs are static, otherwise from
 * the ops (a 2-D convolution's X has its 4-D weight's rank, elementwise ops keep ranks),
 * so symbolic batch dims do not turn the pass off. Run it last: it must see the final op
 * mix and initializers (after fusion and precision).
 */
#include "passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind {
    K_NONE, K_CONV, K_POOL, K_BN, K_GAP, K_UNARY, K_BINARY,
    /* training's gradient ops (autograd.c): kiln.ConvGradInput, kiln.ConvGradWeight,
     * kiln.ConvGradBias, kiln.MaxPoolGrad, kiln.UnaryGrad */
    K_CGRAD_IN, K_CGRAD_W, K_CGRAD_B, K_PGRAD, K_UGRAD,
    /* kiln.ReduceSumTo, the sum of a broadcast operand's gradient back to its shape */
    K_SUM_TO,
    K_BNGRAD, /* kiln.BatchNormGrad(dY, X, scale, B, mean, var) */
    /* data movement reading either layout: Concat (every input, as K_BINARY), Split and
     * kiln.ConcatGrad (input 0, every output in its layout), Slice and kiln.ChannelShuffle
     * (input 0) */
    K_JOIN, K_PARTS, K_FOLLOW
};

#define WANT_ANY (-1)



/* A random op in its training form (Dropout with a training_mode input or a mask output):
 * given an NHWC X, its CUDA kernel reads X as it is and writes Y and the mask NCHW, the
 * mask drawn by NCHW index as the reference does. */
static bool nchw_dropout(const kiln_node *n) {
    const kiln_op_def *d = kiln_node_def(n);
    return d && d->random && d->layout != KILN_LAYOUT_NONE && (n->n_out != 1 || kiln_node_training_form(n));
}

/* The op's layout kind (d: the node's kiln_node_def). Only single-output nodes in their inference
 * form take one: MaxPool with indices and Dropout in training (which draws its mask by flat
 * index, in the reference's NCHW order) do not. The BN rule's extra outputs are per-channel
 * vectors with no layout, so BatchNormalization keeps it in training mode (running
 * statistics), and kiln.BatchNormGrad's parameter gradients likewise. */
static enum kind kind_of(const kiln_op_def *d, const kiln_node *n) {
    if (!d) return K_NONE;
    /* (Split and ConcatGrad: every output is a part of input 0, in its layout) */
    const bool per_channel_rest =
        d->layout == KILN_LAYOUT_BN || d->layout == KILN_LAYOUT_BN_GRAD || d->layout == KILN_LAYOUT_PARTS;
    if (!per_channel_rest && (n->n_out != 1 || kiln_node_training_form(n))) return K_NONE;
    switch (d->layout) {
    case KILN_LAYOUT_NONE: return K_NONE;
    case KILN_LAYOUT_CONV: return K_CONV;
    case KILN_LAYOUT_POOL: return K_POOL;
    case KILN_LAYOUT_BN: return K_BN;
    case KILN_LAYOUT_GAP: return K_GAP;
    case KILN_LAYOUT_UNARY: return K_UNARY;
    case KILN_LAYOUT_BINARY: return K_BINARY;
    /* a fused elementwise node follows NHWC as a binary op does: its CUDA kernel walks the
     * NHWC bytes in storage order, with broadcast operands (ConvNeXt's layer scale (C,1,1))
     * indexed by their channels-last dims (src/cuda/fused_elementwise.c, make_pattern) */
    case KILN_LAYOUT_SAME_SHAPE: return K_BINARY;
    case KILN_LAYOUT_CONV_GRAD_INPUT: return K_CGRAD_IN;
    case KILN_LAYOUT_CONV_GRAD_WEIGHT: return K_CGRAD_W;
    case KILN_LAYOUT_CONV_GRAD_BIAS: return K_CGRAD_B;
    case KILN_LAYOUT_POOL_GRAD: return K_PGRAD;
    case KILN_LAYOUT_UNARY_GRAD: return K_UGRAD;
    case KILN_LAYOUT_SUM_TO: return K_SUM_TO;
    case KILN_LAYOUT_BN_GRAD: return K_BNGRAD;
    case KILN_LAYOUT_JOIN: return K_JOIN;
    case KILN_LAYOUT_PARTS: return K_PARTS;
    case KILN_LAYOUT_FOLLOW: return K_FOLLOW;
    }
    return K_NONE;
}

/* Input k of a node of this kind carries the layout-following data (X, Z, binary operands). */
static bool data_input(enum kind k, int i) {
    switch (k) {
    case K_CONV: return i == 0 || i == 3;
    case K_BINARY: case K_JOIN: return true;
    case K_PARTS: case K_FOLLOW: return i == 0;
    case K_POOL: case K_BN: case K_GAP: case K_UNARY: case K_CGRAD_B: case K_SUM_TO: return i == 0;
    case K_CGRAD_IN: return i == 0 || i == 2; /* dY, X (its shape) */
    case K_CGRAD_W: return i == 0 || i == 1;  /* X, dY */
    case K_PGRAD: case K_UGRAD: return true;
    case K_BNGRAD: return i == 0 || i == 1; /* dY, X */
    default: return false;
    }
}

/* Bytes of value v are the same in NCHW and NHWC: static shape of rank <= 4 which, right-
 * aligned to (N, C, H, W), has C == 1 or H*W == 1. */
static bool layout_free(const kiln_value *v) {
    if (v->ndim < 0 || v->ndim > 4) return false;
    int64_t a[4] = {1, 1, 1, 1};
    for (int d = 0; d < v->ndim; d++) a[4 - v->ndim + d] = v->dims[d];
    if (a[1] < 0 || a[2] < 0 || a[3] < 0) return false;
    return a[1] == 1 || a[2] * a[3] == 1;
}

/* layout_free for v, or for what v copies when its own shape is unknown: through Identity
 * and Cast to an initializer (torch.onnx writes equal initializers once with an Identity per
 * use: a randomly initialized ConvNeXt's layer scales (C,1,1), cast to f16 by the
 * precision pass, reach their Mul with no static shape). */
static bool value_layout_free(const kiln_model *m, const int *prod, int v) {
    for (int hops = 0; v >= 0 && hops < 4; hops++) {
        if (layout_free(&m->values[v])) return true;
        const kiln_tensor *t = m->values[v].init;
        if (t) {
            kiln_value tv = {.ndim = t->ndim};
            for (int d = 0; d < t->ndim && d < KILN_MAX_DIMS; d++) tv.dims[d] = t->dims[d];
            return layout_free(&tv);
        }
        const kiln_node *p = prod[v] >= 0 ? &m->nodes[prod[v]] : NULL;
        /* op-pattern: ops that copy their input's shape (a weight's Identity and Cast) */
        if (!p || p->domain[0] || (strcmp(p->op_type, "Cast") != 0 && strcmp(p->op_type, "Identity") != 0) ||
            p->n_in < 1)
            return false;
        v = p->in[0];
    }
    return false;
}

/* layout_free for a weight: v, or what v was cast from (the precision pass's f16 copy of
 * a weight has no static shape when the batch is symbolic; the weight itself has). */
static bool weight_layout_free(const kiln_model *m, const int *prod, int v) {
    for (int hops = 0; v >= 0 && hops < 4; hops++) {
        if (m->values[v].ndim >= 0) return layout_free(&m->values[v]);
        const kiln_node *p = prod[v] >= 0 ? &m->nodes[prod[v]] : NULL;
        if (!p || strcmp(p->op_type, "Cast") != 0 || p->domain[0] || p->n_in < 1) return false;
        v = p->in[0];
    }
    return false;
}

/* Whether n is a Transpose (0, 2, 3, 1): it reads an NHWC input as a view (case 1 below), so
 * a permute back (0, 3, 1, 2) it reads writes NHWC for it: ConvNeXt's last block of a stage,
 * whose sum the permute back writes (gemm-residual through the Transpose), read by the
 * downsample's LayerNorm permute. */
static bool to_channels_last(const kiln_node *n) {
    int np = 0;
    /* op-pattern: ConvNeXt's permute to channels-last */
    const int64_t *p = kiln_pass_is(n, "Transpose") && n->n_in == 1 ? kiln_attr_ints(n, "perm", &np) : NULL;
    return p && np == 4 && p[0] == 0 && p[1] == 2 && p[2] == 3 && p[3] == 1;
}

/* A Transpose that moves a 4-D value between its logical (N, C, H, W) order and the
 * channels-last order (N, H, W, C): perm (0,2,3,1) of an NHWC value reads it as it is (its
 * bytes are already the output's), and perm (0,3,1,2) writes its output NHWC (the input's
 * bytes again) when a reader follows NHWC. The CUDA kernel then only copies. 1: the first
 * case, 2: the second, 0: neither. */
static int nhwc_transpose(const kiln_model *m, const kiln_node *n, const kiln_format *fmt) {
    /* op-pattern: Transpose to and from channels-last (ConvNeXt's permutes around its LayerNorms) */
    if (!kiln_pass_is(n, "Transpose") || n->n_in != 1 || n->n_out != 1 || n->in[0] < 0 || n->out[0] < 0) return 0;
    int np = 0;
    const int64_t *p = kiln_attr_ints(n, "perm", &np);
    if (!p || np != 4 || p[0] != 0) return 0;
    const int x = n->in[0], y = n->out[0];
    if (p[1] == 2 && p[2] == 3 && p[3] == 1) return fmt[x] == KILN_FORMAT_NHWC ? 1 : 0;
    if (!(p[1] == 3 && p[2] == 1 && p[3] == 2) || fmt[x] == KILN_FORMAT_NHWC || m->values[y].is_output) return 0;
    for (int j = 0; j < m->n_nodes; j++)
        for (int t = 0; t < m->nodes[j].n_in; t++)
            if (m->nodes[j].in[t] == y &&
                (kind_of(kiln_node_def(&m->nodes[j]), &m->nodes[j]) != K_NONE || to_channels_last(&m->nodes[j])))
                return 2;
    return 0;
}

/* Node indices in topological order (earlier passes may have appended nodes anywhere):
 * Kahn's algorithm over consumer lists; ready nodes keep the file's order. */
static bool topo_order(const kiln_model *m, const int *prod, int *order) {
    const int nn = m->n_nodes, nv = m->n_values;
    size_t edges = 0;
    for (int i = 0; i < nn; i++) edges += (size_t)m->nodes[i].n_in;
    int *pending = calloc((size_t)nn + 1, sizeof *pending);
    int *start = calloc((size_t)nv + 2, sizeof *start);
    int *fill = calloc((size_t)nv + 1, sizeof *fill);
    int *cons = calloc(edges + 1, sizeof *cons);
    bool ok = pending && start && fill && cons;
    for (int i = 0; ok && i < nn; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) {
            const int v = m->nodes[i].in[k];
            if (v >= 0 && prod[v] >= 0) {
                start[v + 1]++;
                pending[i]++;
            }
        }
    for (int v = 0; ok && v < nv; v++) start[v + 1] += start[v];
    for (int i = 0; ok && i < nn; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) {
            const int v = m->nodes[i].in[k];
            if (v >= 0 && prod[v] >= 0) cons[start[v] + fill[v]++] = i;
        }
    int head = 0, tail = 0;
    for (int i = 0; ok && i < nn; i++)
        if (!pending[i]) order[tail++] = i;
    while (ok && head < tail) {
        const kiln_node *n = &m->nodes[order[head++]];
        for (int k = 0; k < n->n_out; k++) {
            const int v = n->out[k];
            if (v < 0) continue;
            for (int c = start[v]; c < start[v + 1]; c++)
                if (--pending[cons[c]] == 0) order[tail++] = cons[c];
        }
    }
    free(pending);
    free(start);
    free(fill);
    free(cons);
    return ok && tail == nn;
}

typedef struct layout {
    kiln_model *m;
    int nv;              /* values before the pass (arrays below cover renamed outputs too) */
    int *rank;           /* (cap) known or derived rank, -1 unknown */
    kiln_format *fmt;    /* (cap) layout of each value */
    int *to_nhwc, *to_nchw; /* (cap) converted copy of a value, -1 none yet */
    int cap;
} layout;

/* The value holding v in layout `to`: v's converted copy (created once, then shared). */
static int convert(layout *L, int v, kiln_format to) {
    int *cache = to == KILN_FORMAT_NHWC ? L->to_nhwc : L->to_nchw;
    if (v < L->cap && cache[v] >= 0) return cache[v];
    kiln_model *m = L->m;
    char name[256];
    snprintf(name, sizeof name, "%s/%s", m->values[v].name, to == KILN_FORMAT_NHWC ? "nhwc" : "nchw");
    int nv = kiln_pass_new_value(m, name);
    if (nv < 0) return -1;
    kiln_value *src = &m->values[v], *dst = &m->values[nv];
    dst->dtype = src->dtype;
    dst->ndim = src->ndim;
    memcpy(dst->dims, src->dims, sizeof dst->dims);
    dst->format = to;
    /* op-pattern: the pass's own conversions */
    if (kiln_model_add_node_raw(m, to == KILN_FORMAT_NHWC ? "ToNHWC" : "ToNCHW", name, "kiln", 1, &v, 1, &nv, 0,
                                NULL) < 0)
        return -1;
    if (v < L->cap) cache[v] = nv;
    return nv;
}


static bool low_or_f32(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16; }

/* The zero channels Pad node p appends at the end of dim 1 of a 4-D tensor, when that is
 * all it does (constant mode, pads known, constant_value absent or +0, no axes); else -1. */
static int64_t channel_zeros(const kiln_model *m, const int *prod, const kiln_tensor *vt, const kiln_node *p) {
    if (!kiln_pass_is(p, "Pad") || p->opset < 11 || p->n_in < 2 || p->in[0] < 0 || vt[p->in[0]].ndim != 4) return -1;
    if (strcmp(kiln_attr_string(p, "mode", "constant"), "constant") != 0) return -1;
    if (p->n_in > 3 && p->in[3] >= 0) return -1;
    const kiln_tensor *pads = kiln_pass_constant(m, prod, p->in[1]);
    if (!pads || !pads->data || pads->ndim != 1 || pads->dims[0] != 8 || kiln_dtype_is_float(pads->dtype)) return -1;
    for (int k = 0; k < 8; k++) {
        const int64_t v = kiln_get_i64(pads, k);
        if (k == 5 ? v < 0 || v > INT32_MAX : v != 0) return -1; /* 5: the end of dim 1 */
    }
    if (p->n_in > 2 && p->in[2] >= 0) {
        const kiln_tensor *cv = kiln_pass_constant(m, prod, p->in[2]);
        if (!cv || !cv->data || kiln_tensor_numel(cv) != 1) return -1;
        const double z = kiln_get_f64(cv, 0);
        if (z != 0 || signbit(z)) return -1;
    }
    return kiln_get_i64(pads, 5);
}

/* The dtype a Cast among f32 / f16 / bf16 converts to (0: p is no such Cast). */
static kiln_dtype float_cast(const kiln_tensor *vt, const kiln_node *p) {
    if (!kiln_pass_is(p, "Cast") || p->n_in < 1 || p->in[0] < 0) return KILN_DTYPE_UNDEFINED;
    const kiln_dtype to = (kiln_dtype)kiln_attr_int(p, "to", 0);
    const kiln_tensor *x = &vt[p->in[0]];
    return x->ndim == 4 && low_or_f32(x->dtype) && low_or_f32(to) ? to : KILN_DTYPE_UNDEFINED;
}

/* Whether node i is the only reader of v (no graph output) once the nodes marked dead are
 * gone. */
static bool only_reader(const kiln_model *m, int v, int i, const bool *dead) {
    for (int g = 0; g < m->n_outputs; g++)
        if (m->outputs[g] == v) return false;
    for (int j = 0; j < m->n_nodes; j++)
        for (int k = 0; k < m->nodes[j].n_in; k++)
            if (m->nodes[j].in[k] == v && j != i && !dead[j]) return false;
    return true;
}

/* 5. Each kiln.ToNHWC takes over a channel Pad and a Cast in front of it (the opening
 *    comment says when). */
static kiln_status absorb_into_conversions(kiln_model *m, bool *changed) {
    const int nn = m->n_nodes;
    kiln_tensor *vt = NULL;
    int *prod = kiln_pass_producers(m);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    int *unread = calloc(2 * (size_t)nn + 1, sizeof *unread); /* absorbed Pads' constant inputs */
    int n_unread = 0;
    kiln_status st = prod && dead && unread ? kiln_pass_infer_types(m, &vt)
                                            : kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *t = &m->nodes[i];
        if (strcmp(t->domain, "kiln") != 0 || strcmp(t->op_type, "ToNHWC") != 0 || t->n_in != 1 || t->in[0] < 0 ||
            kiln_node_attr(t, "to") || kiln_node_attr(t, "zero_channels"))
            continue;
        int src = t->in[0];
        int64_t zeros = -1;
        kiln_dtype to = KILN_DTYPE_UNDEFINED;
        for (int step = 0; step < 2; step++) {
            const int p = prod[src];
            if (p < 0 || dead[p] || !only_reader(m, src, i, dead)) break;
            const kiln_node *pn = &m->nodes[p];
            const int64_t z = zeros < 0 ? channel_zeros(m, prod, vt, pn) : -1;
            const kiln_dtype c = z < 0 && !to ? float_cast(vt, pn) : KILN_DTYPE_UNDEFINED;
            if (z >= 0) {
                zeros = z;
                unread[n_unread++] = pn->in[1];
                unread[n_unread++] = pn->n_in > 2 ? pn->in[2] : -1;
            } else if (c) {
                to = c;
            } else {
                break;
            }
            dead[p] = true;
            src = pn->in[0];
        }
        if (src == t->in[0]) continue;
        m->nodes[i].in[0] = src;
        if (zeros > 0) st = kiln_pass_set_int(m, i, "zero_channels", zeros);
        if (!st && to) st = kiln_pass_set_int(m, i, "to", (int64_t)to);
        *changed = true;
    }
    if (!st) {
        kiln_pass_remove_nodes(m, dead);
        for (int k = 0; k < n_unread; k++) kiln_pass_drop_if_unused(m, unread[k]);
    }
    free(vt);
    free(prod);
    free(dead);
    free(unread);
    return st;
}

/* 6. A kiln.DropoutGrad whose output only a kiln.ToNHWC reads (no graph output) writes the
 *    conversion's NHWC output itself; the conversion goes. */
static kiln_status fold_dropout_grads(kiln_model *m, bool *changed) {
    const int nn = m->n_nodes;
    int *prod = kiln_pass_producers(m);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    if (!prod || !dead) {
        free(prod);
        free(dead);
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < nn; i++) {
        const kiln_node *t = &m->nodes[i];
        if (strcmp(t->domain, "kiln") != 0 || strcmp(t->op_type, "ToNHWC") != 0 || t->n_in != 1 || t->n_out != 1 ||
            t->in[0] < 0 || t->out[0] < 0 || kiln_node_attr(t, "to") || kiln_node_attr(t, "zero_channels"))
            continue;
        const int v = t->in[0], p = prod[v];
        if (p < 0 || strcmp(m->nodes[p].domain, "kiln") != 0 ||
            strcmp(m->nodes[p].op_type, "DropoutGrad") != 0 || m->nodes[p].out[0] != v || !only_reader(m, v, i, dead))
            continue;
        m->nodes[p].out[0] = t->out[0]; /* labelled NHWC by convert() */
        dead[i] = true;
        *changed = true;
    }
    kiln_pass_remove_nodes(m, dead);
    free(prod);
    free(dead);
    return KILN_OK;
}

/* Integer entries of the constant v (at most KILN_MAX_DIMS), or -1 when v is no such
 * constant. */
static int const_ints(const kiln_model *m, const int *prod, int v, int64_t *out) {
    const kiln_tensor *t = v >= 0 ? kiln_pass_constant(m, prod, v) : NULL;
    if (!t || !t->data || kiln_dtype_is_float(t->dtype) || t->ndim > 1 || kiln_tensor_numel(t) > KILN_MAX_DIMS)
        return -1;
    const int n = (int)kiln_tensor_numel(t);
    for (int k = 0; k < n; k++) out[k] = kiln_get_i64(t, k);
    return n;
}

/* 0. A Gather of one constant index after a Transpose (and a Squeeze), a transformer's qkv
 *    split (ViT: (1,L,N,3,D) -Transpose(3,1,2,0,4)-> -Squeeze(3)-> -Gather(i)-> (L,N,D)):
 *    Gather(X, i, axis=perm[a]) first, then the Transpose without that axis and the
 *    Squeeze. Each Gather reads its part of X where it lies; the Transpose left moves no
 *    byte (size-1 dims only) and is a view (Transpose's alias_when), so the whole tensor is
 *    no longer transposed once more before the split. */
static kiln_status split_before_transpose(kiln_model *m, bool *changed) {
    const int nn = m->n_nodes;
    int *prod = kiln_pass_producers(m);
    bool *dead = calloc(4 * (size_t)nn + 1, sizeof *dead); /* up to 3 new nodes per Gather */
    kiln_status st = prod && dead ? KILN_OK : kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bool any = false;
    int *olds = calloc(2 * (size_t)nn + 2, sizeof *olds), n_old = 0; /* Transposes and Squeezes bypassed */
    if (!olds && !st) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *g = &m->nodes[i];
        /* op-pattern: Transpose [-> Squeeze] -> Gather (a qkv split) */
        if (!kiln_pass_is(g, "Gather") || g->n_in != 2 || g->n_out != 1 || g->in[0] < 0 || g->out[0] < 0) continue;
        const kiln_tensor *idx = kiln_pass_constant(m, prod, g->in[1]);
        if (!idx || !idx->data || idx->ndim != 0 || kiln_dtype_is_float(idx->dtype)) continue;
        int s = prod[g->in[0]], t = s;
        const bool squeeze = s >= 0 && kiln_pass_is(&m->nodes[s], "Squeeze");
        if (squeeze) t = m->nodes[s].n_in >= 1 && m->nodes[s].in[0] >= 0 ? prod[m->nodes[s].in[0]] : -1;
        if (t < 0 || !kiln_pass_is(&m->nodes[t], "Transpose") || m->nodes[t].n_in != 1 || m->nodes[t].in[0] < 0)
            continue;
        int r = 0;
        const int64_t *perm = kiln_attr_ints(&m->nodes[t], "perm", &r);
        if (!perm || r < 2 || r > KILN_MAX_DIMS) continue;
        /* the squeezed axes (in the Transpose's output), sorted, normalized */
        int64_t ax[KILN_MAX_DIMS];
        int n_ax = 0;
        if (squeeze) {
            const kiln_node *sq = &m->nodes[s];
            if (sq->opset >= 13) n_ax = sq->n_in > 1 ? const_ints(m, prod, sq->in[1], ax) : -1;
            else {
                const int64_t *a = kiln_attr_ints(sq, "axes", &n_ax);
                if (!a || n_ax > KILN_MAX_DIMS) n_ax = -1;
                for (int k = 0; a && k < n_ax && k < KILN_MAX_DIMS; k++) ax[k] = a[k];
            }
            if (n_ax <= 0) continue; /* without axes: which dims go depends on the shapes */
        }
        bool ok = true, is_sq[KILN_MAX_DIMS] = {false};
        for (int k = 0; k < n_ax && ok; k++) {
            const int64_t a = ax[k] < 0 ? ax[k] + r : ax[k];
            ok = a >= 0 && a < r && !is_sq[a];
            if (ok) is_sq[a] = true;
        }
        int64_t ga = kiln_attr_int(g, "axis", 0);
        const int rs = r - n_ax; /* the Gather's data rank */
        if (ga < 0) ga += rs;
        if (!ok || ga < 0 || ga >= rs) continue;
        int at = -1; /* the Gather's axis in the Transpose's output */
        for (int d = 0, k = 0; d < r; d++)
            if (!is_sq[d] && k++ == ga) at = d;
        const int64_t q = perm[at]; /* ... and in X */
        /* the Transpose without axis at (renumbered), the squeezed axes after it */
        int64_t p2[KILN_MAX_DIMS], a2[KILN_MAX_DIMS];
        int n2 = 0, na2 = 0;
        for (int d = 0; d < r; d++) {
            if (d == at) continue;
            p2[n2++] = perm[d] > q ? perm[d] - 1 : perm[d];
            if (is_sq[d]) a2[na2++] = d > at ? d - 1 : d;
        }
        const int x = m->nodes[t].in[0], out = g->out[0], gidx = g->in[1];
        char name[256];
        snprintf(name, sizeof name, "%.200s/first", m->nodes[i].name);
        const int v1 = kiln_pass_new_value(m, name);
        snprintf(name, sizeof name, "%.200s/moved", m->nodes[i].name);
        const int v2 = squeeze && v1 >= 0 ? kiln_pass_new_value(m, name) : out;
        int av = -1;
        if (squeeze && v2 >= 0) {
            kiln_tensor *at_t = kiln_tensor_new(m->ctx, KILN_I64, 1, (int64_t[]){na2});
            if (at_t) memcpy(at_t->data, a2, (size_t)na2 * sizeof(int64_t));
            snprintf(name, sizeof name, "%.200s/axes", m->nodes[i].name);
            av = at_t ? kiln_pass_add_initializer(m, name, at_t) : -1;
        }
        if (v1 < 0 || v2 < 0 || (squeeze && av < 0)) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        m->values[v1].dtype = m->values[v2].dtype = m->values[out].dtype; /* data moves: one dtype */
        char at_text[64];
        snprintf(at_text, sizeof at_text, "axis=%lld", (long long)q);
        kiln_attr *ga_attr = NULL, *pa = NULL;
        int n_ga = 0, n_pa = 0;
        char ptext[160] = "perm=[";
        for (int d = 0; d < n2; d++) {
            const size_t l = strlen(ptext);
            snprintf(ptext + l, sizeof ptext - l, "%s%lld", d ? "," : "", (long long)p2[d]);
        }
        strcat(ptext, "]");
        if ((st = kiln_attrs_parse(m->ctx, at_text, &ga_attr, &n_ga)) != KILN_OK ||
            (st = kiln_attrs_parse(m->ctx, ptext, &pa, &n_pa)) != KILN_OK)
            break;
        const int opset = m->nodes[i].opset > 13 ? m->nodes[i].opset : 13;
        snprintf(name, sizeof name, "%.200s", m->nodes[i].name);
        int a = kiln_model_add_node_raw(m, "Gather", name, "", 2, (int[]){x, gidx}, 1, &v1, n_ga, ga_attr);
        snprintf(name, sizeof name, "%.200s/transpose", m->nodes[i].name);
        int b = a >= 0 ? kiln_model_add_node_raw(m, "Transpose", name, "", 1, &v1, 1, &v2, n_pa, pa) : -1;
        snprintf(name, sizeof name, "%.200s/squeeze", m->nodes[i].name);
        int c = b >= 0 && squeeze ? kiln_model_add_node_raw(m, "Squeeze", name, "", 2, (int[]){v2, av}, 1, &out, 0, NULL)
                                  : b;
        if (c < 0) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        m->nodes[a].opset = m->nodes[b].opset = m->nodes[c].opset = opset;
        m->nodes[i].out[0] = -1; /* the old Gather goes; its output is the new chain's */
        dead[i] = true;
        olds[n_old++] = squeeze ? s : -1; /* (repeats are harmless) */
        olds[n_old++] = t;
        any = true;
    }
    if (!st && any) {
        /* the bypassed Squeezes, then the Transposes they read, once nothing reads them */
        for (int round = 0; round < 2; round++)
            for (int k = 0; k < n_old; k++) {
                const int j = olds[k];
                if (j < 0 || dead[j] || m->nodes[j].n_out != 1 || m->nodes[j].out[0] < 0) continue;
                const int v = m->nodes[j].out[0];
                bool read = m->values[v].is_output;
                for (int e = 0; e < m->n_nodes && !read; e++)
                    for (int u = 0; u < m->nodes[e].n_in && !dead[e]; u++) read |= m->nodes[e].in[u] == v;
                if (!read) dead[j] = true;
            }
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    free(prod);
    free(dead);
    free(olds);
    return st;
}

/* 0. A convolution's map flattened to tokens, ViT's patch embedding (x.reshape(n, C, h * w)
 *    .permute(0, 2, 1)): X (N, C, H, W) -Reshape-> (N, C, H * W) -Transpose(0, 2, 1)-> (N, HW, C)
 *    becomes X -Transpose(0, 2, 3, 1)-> (N, H, W, C) -Reshape(0, -1, C)-> (N, HW, C). The
 *    permute then reads the NHWC convolution output as it is (a view, see "Transpose between
 *    the logical order and channels-last" above) and the Reshape is a view: no kiln.ToNCHW
 *    and no Transpose run. Shapes from the two probes (the Reshape's target is computed
 *    from Shape under a symbolic batch); X a convolution's output read by that Reshape alone
 *    (Shape nodes aside), or conv-patch's Transpose (0, 3, 1, 2) of a product's rows, which
 *    the Reshape then reads as they are. */
/* Node inputs reading v's data (Shape and Size read only the shape: shape_only_inputs). */
static int data_readers(const kiln_model *m, int v) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *nd = &m->nodes[i];
        const kiln_op_def *d = kiln_pass_is(nd, nd->op_type) ? kiln_node_def(nd) : NULL; /* ONNX ops */
        for (int k = 0; k < nd->n_in; k++)
            n += nd->in[k] == v && !(d && kiln_input_in_mask(d->shape_only_inputs, k));
    }
    return n;
}

static kiln_status tokens_from_nhwc(kiln_model *m, bool *changed) {
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) {
        int r = 0;
        const int64_t *p = kiln_pass_is(&m->nodes[i], "Transpose") ? kiln_attr_ints(&m->nodes[i], "perm", &r) : NULL;
        any = p && r == 3 && p[0] == 0 && p[1] == 2 && p[2] == 1;
    }
    if (!any) return KILN_OK;
    kiln_shape_probes pr;
    kiln_status st;
    if (!kiln_pass_shape_probes_or_skip(m, &pr, &st)) return st;
    int *prod = kiln_pass_producers(m);
    const int nn = m->n_nodes;
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    if (!prod || !dead) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bool done = false;
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *t = &m->nodes[i];
        int r = 0;
        const int64_t *p = kiln_pass_is(t, "Transpose") ? kiln_attr_ints(t, "perm", &r) : NULL;
        /* op-pattern: Conv -> Reshape (N, C, HW) -> Transpose (0, 2, 1) */
        if (!p || r != 3 || p[0] != 0 || p[1] != 2 || p[2] != 1 || t->n_in != 1 || t->in[0] < 0 || t->n_out != 1 ||
            t->out[0] < 0)
            continue;
        const int v = t->in[0], rs = prod[v];
        if (rs < 0 || dead[rs] || !kiln_pass_is(&m->nodes[rs], "Reshape") || m->nodes[rs].n_in < 2 ||
            m->nodes[rs].in[0] < 0 || kiln_pass_uses(m, v) != 1 || m->values[v].is_output ||
            (m->nodes[rs].opset >= 14 && kiln_attr_int(&m->nodes[rs], "allowzero", 0) != 0))
            continue;
        const int x = m->nodes[rs].in[0], px = prod[x];
        /* or X = Transpose(Z, (0, 3, 1, 2)), conv-patch's product back to NCHW: Z is the tokens */
        int pp = 0;
        const int64_t *pq = px >= 0 && kiln_pass_is(&m->nodes[px], "Transpose") ? kiln_attr_ints(&m->nodes[px], "perm", &pp)
                                                                                : NULL;
        const bool back = pq && pp == 4 && pq[0] == 0 && pq[1] == 3 && pq[2] == 1 && pq[3] == 2 && m->nodes[px].in[0] >= 0;
        /* op-pattern: Conv / kiln.FusedConv (or the Transpose back) -> Reshape -> Transpose */
        if (px < 0 ||
            !(back || kiln_pass_is(&m->nodes[px], "Conv") || kiln_pass_is_kiln(&m->nodes[px], "FusedConv")) ||
            data_readers(m, x) != 1 || m->values[x].is_output || x >= pr.n || v >= pr.n)
            continue;
        bool ok = true;
        int64_t c = -1;
        for (int k = 0; k < 2 && ok; k++) {
            const kiln_tensor *a = k ? &pr.three[x] : &pr.one[x], *b = k ? &pr.three[v] : &pr.one[v];
            ok = a->ndim == 4 && b->ndim == 3 && b->dims[0] == a->dims[0] && b->dims[1] == a->dims[1] &&
                 b->dims[2] == a->dims[2] * a->dims[3] && (c < 0 || c == a->dims[1]);
            c = a->dims[1];
        }
        if (!ok || c < 1) continue;
        char name[256];
        snprintf(name, sizeof name, "%.200s/nhwc", m->nodes[i].name);
        const int xt = back ? m->nodes[px].in[0] : kiln_pass_new_value(m, name);
        kiln_tensor *tg = kiln_tensor_new(m->ctx, KILN_I64, 1, (int64_t[]){3});
        if (tg) {
            ((int64_t *)tg->data)[0] = 0;
            ((int64_t *)tg->data)[1] = -1;
            ((int64_t *)tg->data)[2] = c;
        }
        snprintf(name, sizeof name, "%.200s/tokens", m->nodes[i].name);
        const int tv = tg ? kiln_pass_add_initializer(m, name, tg) : -1;
        kiln_attr *pa = NULL;
        int npa = 0;
        if (xt < 0 || tv < 0 || (!back && kiln_attrs_parse(m->ctx, "perm=[0,2,3,1]", &pa, &npa) != KILN_OK)) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        if (!back) { /* (back: the permute undoes X's own Transpose; the Reshape reads Z) */
            m->values[xt].dtype = m->values[x].dtype;
            snprintf(name, sizeof name, "%.200s/nhwc", m->nodes[i].name);
            const int nt = kiln_model_add_node_raw(m, "Transpose", name, "", 1, &x, 1, &xt, npa, pa);
            if (nt < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
                break;
            }
            m->nodes[nt].opset = m->nodes[i].opset;
        }
        /* the Reshape reads the permuted map and writes the Transpose's output */
        m->nodes[rs].in[0] = xt;
        if ((st = kiln_pass_set_input(m, rs, 1, tv)) != KILN_OK) break;
        if (m->nodes[rs].opset < 5) m->nodes[rs].opset = 5;
        m->nodes[rs].out[0] = m->nodes[i].out[0];
        m->nodes[i].out[0] = -1;
        dead[i] = true;
        done = true;
    }
    if (!st && done) {
        /* conv-patch's Transposes back to NCHW that nothing reads now */
        for (int i = 0; i < nn; i++)
            if (!dead[i] && kiln_pass_is(&m->nodes[i], "Transpose") && m->nodes[i].n_out == 1 && m->nodes[i].out[0] >= 0 &&
                !m->values[m->nodes[i].out[0]].is_output && kiln_pass_uses(m, m->nodes[i].out[0]) == 0)
                dead[i] = true;
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    kiln_pass_shape_probes_free(&pr);
    free(prod);
    free(dead);
    return st;
}

kiln_status kiln_pass_layout(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (o->device != KILN_DEVICE_CUDA) return KILN_OK;
    /* 0. Channel shuffles as one node that runs in either layout; a split that gathers
     * from the input before its Transpose. */
    kiln_status st0 = kiln_pass_channel_shuffle(m, changed);
    if (!st0) st0 = kiln_pass_roll(m, changed);
    if (!st0) st0 = split_before_transpose(m, changed);
    if (!st0) st0 = tokens_from_nhwc(m, changed);
    if (st0) return st0;
    const int nv = m->n_values, nn = m->n_nodes;
    size_t edges = 0;
    for (int i = 0; i < nn; i++) edges += (size_t)m->nodes[i].n_in;
    layout L = {.m = m, .nv = nv, .cap = nv + m->n_outputs};
    L.rank = calloc((size_t)L.cap + 1, sizeof *L.rank);
    L.fmt = calloc((size_t)L.cap + 1, sizeof *L.fmt);
    L.to_nhwc = calloc((size_t)L.cap + 1, sizeof *L.to_nhwc);
    L.to_nchw = calloc((size_t)L.cap + 1, sizeof *L.to_nchw);
    int *prod = calloc((size_t)nv + 1, sizeof *prod);
    int *order = calloc((size_t)nn + 1, sizeof *order);
    int *edge0 = calloc((size_t)nn + 1, sizeof *edge0);   /* first edge of each node */
    int *want = calloc(edges + 1, sizeof *want);          /* layout each edge reads */
    bool *nhwc = calloc((size_t)nn + 1, sizeof *nhwc);    /* node runs NHWC */
    kiln_status st = KILN_OK;
    if (!L.rank || !L.fmt || !L.to_nhwc || !L.to_nchw || !prod || !order || !edge0 || !want || !nhwc) {
        st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    for (int v = 0; v < L.cap; v++) {
        L.rank[v] = v < nv ? m->values[v].ndim : -1;
        L.to_nhwc[v] = L.to_nchw[v] = -1;
    }
    for (int v = 0; v < nv; v++) prod[v] = -1;
    for (int i = 0, e = 0; i < nn; i++) {
        edge0[i] = e;
        e += m->nodes[i].n_in;
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] >= 0) prod[m->nodes[i].out[k]] = i;
    }
    if (!topo_order(m, prod, order)) {
        st = kiln_fail(m->ctx, KILN_ERR_GRAPH, "the graph has a cycle");
        goto out;
    }

    /* 1. Forward: ranks, which nodes run NHWC, the layout of every value, and what each
     *    edge needs. */
    for (int q = 0; q < nn; q++) {
        const int i = order[q];
        const kiln_node *n = &m->nodes[i];
        /* the model is open: node->op is not resolved yet */
        const kiln_op_def *d = kiln_node_def(n);
        const enum kind k = kind_of(d, n);
        const int x = n->n_in > 0 ? n->in[0] : -1, y = n->out[0];
        /* the output's rank: a convolution's is its weight's, elementwise ops keep it */
        int r = x >= 0 ? L.rank[x] : -1;
        if (k == K_CONV && n->n_in > 1 && n->in[1] >= 0 && L.rank[n->in[1]] >= 0) r = L.rank[n->in[1]];
        if ((k == K_CGRAD_W || k == K_PGRAD || k == K_BNGRAD) && n->n_in > 1 && n->in[1] >= 0) r = L.rank[n->in[1]];
        /* dX has W's rank (and the forward X's), whatever this pass inferred for dY and X
         * (in torchvision ConvNeXt's training graph both came out rank 3 behind its permutes
         * and Linears, so a 4-D ConvGradInput with an NHWC X stayed NCHW: kiln train refused
         * it on CUDA; tests/data/convnext_mini_train.onnx) */
        if (k == K_CGRAD_IN)
            for (int j = 1, known = 0; j <= 2 && !known && j < n->n_in; j++) { /* W's first */
                const int v = n->in[j];
                const int rv = v < 0 ? -1 : L.rank[v] >= 0 ? L.rank[v] : m->values[v].ndim > 0 ? m->values[v].ndim : -1;
                if (rv > 0) r = rv, known = 1;
            }
        int r_out = k == K_CGRAD_B ? 1 : k == K_SUM_TO ? (n->n_in > 1 && n->in[1] >= 0 ? L.rank[n->in[1]] : -1) : r;
        /* a binary op broadcasts to its highest-ranked operand, which need not be input 0
         * (ConvNeXt's layer scale (C,1,1) * x) */
        for (int j = 1; k == K_BINARY && j < n->n_in; j++)
            if (n->in[j] >= 0 && L.rank[n->in[j]] > r_out) r_out = L.rank[n->in[j]];
        if (k == K_NONE) r = -1;
        /* a Transpose keeps its input's rank (its perm's length): the permute back after
         * ConvNeXt's Linears reads a Reshape whose rank static inference does not know under
         * a symbolic batch, and the layer-scale Mul and residual Add behind it follow NHWC
         * only when their operands' ranks are known */
        if (k == K_NONE && kiln_pass_is(n, "Transpose") && y >= 0) { /* op-pattern: rank of a permute */
            int np = 0;
            const int64_t *pp = kiln_attr_ints(n, "perm", &np);
            const int rt = pp ? np : x >= 0 ? L.rank[x] : -1;
            if (rt > 0 && L.rank[y] < 0) L.rank[y] = rt;
        }
        if (k == K_JOIN) /* its inputs have one rank: any known one */
            for (int j = 0; j < n->n_in && r < 0; j++) r = n->in[j] >= 0 ? L.rank[n->in[j]] : -1;
        if (k == K_BINARY)
            for (int j = 0; j < n->n_in; j++) {
                const int rj = n->in[j] >= 0 ? L.rank[n->in[j]] : -1;
                if (rj < 0) {
                    r = -1;
                    break;
                }
                if (rj > r) r = rj;
            }
        /* (a broadcast's rank is its inputs' largest, not input 0's: kiln.ConcatAffine's
         * input 0 is its (C) scale) */
        if (y >= 0 && L.rank[y] < 0) L.rank[y] = k == K_JOIN || (k == K_BINARY && r >= 0) ? r : r_out;
        for (int q2 = 1; k == K_PARTS && q2 < n->n_out; q2++) /* every part has input 0's rank */
            if (n->out[q2] >= 0 && L.rank[n->out[q2]] < 0) L.rank[n->out[q2]] = r_out;
        bool go = false;
        if (k == K_CONV) {
            go = x >= 0 && r == 4;
        } else if (k == K_BINARY || k == K_JOIN) {
            go = r == 4;
            bool any = false;
            for (int j = 0; go && j < n->n_in; j++) {
                const int v = n->in[j];
                if (v < 0) {
                    go = false;
                    break;
                }
                any |= L.fmt[v] == KILN_FORMAT_NHWC;
                go = L.fmt[v] == KILN_FORMAT_NHWC || value_layout_free(m, prod, v) || L.rank[v] == 4;
            }
            go = go && any;
        } else if (k == K_CGRAD_W || k == K_PGRAD || k == K_UGRAD || k == K_BNGRAD) {
            /* the gradient follows the forward: NHWC when its activation or dY is */
            go = r == 4;
            bool any = false;
            for (int j = 0; go && j < n->n_in; j++)
                if (n->in[j] >= 0 && data_input(k, j)) any |= L.fmt[n->in[j]] == KILN_FORMAT_NHWC;
            go = go && any;
        } else if (k == K_CGRAD_IN) {
            /* NHWC when dY or the forward's X (read for its shape; CUDA's convolutions take
             * one layout for X, W and dY) is: an NCHW dY is converted, not X's label left
             * NHWC beside an NCHW dY (densenet's ConvGradInputs fed by NCHW ConcatGrads) */
            const int xf = n->n_in > 2 ? n->in[2] : -1;
            go = x >= 0 && r == 4 &&
                 (L.fmt[x] == KILN_FORMAT_NHWC || (xf >= 0 && L.fmt[xf] == KILN_FORMAT_NHWC));
        } else if (k == K_SUM_TO) {
            /* the sum reads an NHWC dY as it is when its result (Like's shape) has the same
             * bytes in both layouts: a per-channel bias, a scalar, an (N,1,H,W) map */
            go = x >= 0 && r == 4 && L.fmt[x] == KILN_FORMAT_NHWC && n->n_in > 1 && n->in[1] >= 0 &&
                 layout_free(&m->values[n->in[1]]);
        } else if (k != K_NONE) {
            go = x >= 0 && r == 4 && L.fmt[x] == KILN_FORMAT_NHWC;
        }
        nhwc[i] = go;
        const int tp = k == K_NONE ? nhwc_transpose(m, n, L.fmt) : 0;
        if (tp == 2) L.fmt[y] = KILN_FORMAT_NHWC;
        /* ConvGradBias's (M) has no layout; a weight gradient whose bytes are the same in
         * both layouts (one input channel, 1x1 kernels) keeps NCHW: no conversion at the
         * graph output. It has its weight's shape, known when the batch is symbolic. */
        const bool free_dw = k == K_CGRAD_W && y >= 0 &&
                             (layout_free(&m->values[y]) || (n->n_in > 2 && weight_layout_free(m, prod, n->in[2])));
        if (go && k != K_GAP && k != K_CGRAD_B && k != K_SUM_TO && y >= 0 && !free_dw)
            L.fmt[y] = KILN_FORMAT_NHWC;
        for (int q2 = 1; go && k == K_PARTS && q2 < n->n_out; q2++)
            if (n->out[q2] >= 0) L.fmt[n->out[q2]] = KILN_FORMAT_NHWC;
        /* GlobalAveragePool's (N, C, 1, 1) is labelled for its readers: NHWC when only
         * convolutions read it (a squeeze-and-excitation block), else NCHW */
        if (go && k == K_GAP && y >= 0 && !m->values[y].is_output) {
            bool convs_only = true;
            for (int j = 0; j < nn && convs_only; j++)
                for (int t = 0; t < m->nodes[j].n_in; t++)
                    if (m->nodes[j].in[t] == y && (kind_of(kiln_node_def(&m->nodes[j]), &m->nodes[j]) != K_CONV || !data_input(K_CONV, t)))
                        convs_only = false;
            if (convs_only) L.fmt[y] = KILN_FORMAT_NHWC;
        }
        for (int j = 0; j < n->n_in; j++) {
            const int v = n->in[j];
            int *w = &want[edge0[i] + j];
            *w = WANT_ANY;
            if (v < 0) continue;
            const bool conv_like = k == K_CONV || k == K_CGRAD_IN || k == K_CGRAD_W;
            /* (a residual Z must have Y's layout label: cuDNN reads it as Y) */
            const bool lenient = conv_like && !(k == K_CONV && j == 3);
            if (go && data_input(k, j))
                /* the binary kernels and the convolutions take operands whose bytes are the
                 * same in both layouts as they are (a one-channel image); the others read
                 * the format of every input */
                *w = (k != K_BINARY && k != K_JOIN && !lenient) || L.fmt[v] == KILN_FORMAT_NHWC ||
                             !(lenient ? layout_free(&m->values[v]) : value_layout_free(m, prod, v))
                         ? KILN_FORMAT_NHWC
                         : WANT_ANY;
            else if (go && conv_like && j == (k == K_CGRAD_W ? 2 : 1))
                *w = L.fmt[v] == KILN_FORMAT_NHWC || !layout_free(&m->values[v]) ? KILN_FORMAT_NHWC : WANT_ANY;
            else if (j == 0 && nchw_dropout(n) && L.rank[v] == 4 && L.fmt[v] == KILN_FORMAT_NHWC)
                *w = WANT_ANY; /* read as it is; Y and the mask stay NCHW */
            else if (j == 0 && tp == 1)
                *w = WANT_ANY; /* NHWC read as it is, into the channels-last output */
            else if (!go && !(d && kiln_input_in_mask(d->shape_only_inputs, j)))
                *w = KILN_FORMAT_NCHW;
        }
    }

    /* 2. Weight initializers read only as the weight of NHWC convolutions are NHWC
     *    themselves (a device converts them on upload). */
    {
        /* 1: read as an NHWC convolution's weight; 2: read any other way */
        unsigned char *use = calloc((size_t)nv + 1, 1);
        if (!use) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
            goto out;
        }
        for (int i = 0; i < nn; i++) {
            const bool conv = nhwc[i] && kind_of(kiln_node_def(&m->nodes[i]), &m->nodes[i]) == K_CONV;
            for (int q = 0; q < m->nodes[i].n_in; q++) {
                const int v = m->nodes[i].in[q];
                if (v >= 0) use[v] |= conv && q == 1 ? 1 : 2;
            }
        }
        for (int v = 0; v < nv; v++)
            if (use[v] == 1 && m->values[v].init && m->values[v].init->ndim == 4 && !m->values[v].is_output) {
                L.fmt[v] = KILN_FORMAT_NHWC;
                *changed = true;
            }
        free(use);
    }
    for (int v = 0; v < nv; v++)
        if (L.fmt[v] == KILN_FORMAT_NHWC) m->values[v].format = KILN_FORMAT_NHWC;

    /* 3. NHWC graph outputs: computed under a new name, converted into the original one. */
    for (int g = 0; g < m->n_outputs; g++) {
        const int v = m->outputs[g];
        if (v >= nv || L.fmt[v] != KILN_FORMAT_NHWC || prod[v] < 0) continue;
        char name[256];
        snprintf(name, sizeof name, "%s/nhwc", m->values[v].name);
        const int v2 = kiln_pass_new_value(m, name);
        if (v2 < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            goto out;
        }
        kiln_value *a = &m->values[v], *b = &m->values[v2];
        b->dtype = a->dtype;
        b->ndim = a->ndim;
        memcpy(b->dims, a->dims, sizeof b->dims);
        b->format = KILN_FORMAT_NHWC;
        a->format = KILN_FORMAT_NCHW;
        kiln_node *p = &m->nodes[prod[v]];
        for (int k = 0; k < p->n_out; k++)
            if (p->out[k] == v) p->out[k] = v2;
        for (int i = 0; i < nn; i++)
            for (int k = 0; k < m->nodes[i].n_in; k++)
                if (m->nodes[i].in[k] == v) m->nodes[i].in[k] = v2;
        if (kiln_model_add_node_raw(m, "ToNCHW", name, "kiln", 1, &v2, 1, &v, 0, NULL) < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            goto out;
        }
        L.fmt[v2] = KILN_FORMAT_NHWC;
        L.fmt[v] = KILN_FORMAT_NCHW;
        L.rank[v2] = L.rank[v];
        L.to_nchw[v2] = v;
        *changed = true;
    }

    /* 4. Conversions where an edge needs the other layout. */
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < m->nodes[i].n_in; j++) {
            const int v = m->nodes[i].in[j], w = want[edge0[i] + j];
            if (v < 0 || w == WANT_ANY || (kiln_format)w == L.fmt[v]) continue;
            const int cv = convert(&L, v, (kiln_format)w);
            if (cv < 0) {
                st = KILN_ERR_OUT_OF_MEMORY;
                goto out;
            }
            m->nodes[i].in[j] = cv; /* m->nodes may have moved: index, no pointer */
            *changed = true;
        }
    st = absorb_into_conversions(m, changed);
    if (!st) st = fold_dropout_grads(m, changed);
out:
    free(L.rank);
    free(L.fmt);
    free(L.to_nhwc);
    free(L.to_nchw);
    free(prod);
    free(order);
    free(edge0);
    free(want);
    free(nhwc);
    return st;
}
