/*
 * attention.h — kiln.Attention's geometry (src/ops/attention.c), shared by its CPU
 * reference, the CUDA kernel (src/cuda/attention.cu) and the pass that makes the node
 * (src/passes/fuse_attention.c).
 *
 * The node reads Q, K and V each through a view of a real producer's output: a program of
 * view steps (attributes q_view, k_view, v_view: INTS) applied to that tensor's contiguous
 * layout gives an offset and strides. The steps (opcode, then its arguments):
 *   RESHAPE p allowzero    ONNX Reshape to the shape held by node input p (a value input),
 *                          as a view (PyTorch's view rule: merges and splits of dims whose
 *                          strides allow it; otherwise the node is refused)
 *   TRANSPOSE n perm[n]    ONNX Transpose
 *   GATHER axis index      ONNX Gather with a scalar index (offset, the axis dropped)
 *   SQUEEZE n axes[n]      UNSQUEEZE n axes[n]     (ONNX's, axes may be negative)
 *   SLICE axis start end   ONNX Slice with step 1 (start and end clamped as ONNX does)
 *   SLICE_P axis ps pe     the same with start and end held by node inputs ps and pe (value
 *                          inputs: MaxViT's chunk of q, k, v computed from shapes)
 *   SCALE p / RSCALE p     the scores are multiplied / divided by node input p's scalar
 *                          (a constant or a shape computation: the sqrt(scale) factors that
 *                          PyTorch's SDPA export puts on q and on k^T)
 *   L2NORM p               each row (the last dim at this step) divided by max(its L2 norm,
 *                          eps), eps node input p's scalar: torch's F.normalize(x, dim=-1),
 *                          Swin V2's cosine attention. The normalized dim must be the head
 *                          dim D of the operand when the program ends (one stride).
 * After its program Q is (batch..., Lq, D) and K is the product's right operand
 * K^T (batch..., D, Lk), with the same batch dims; V is (batch'..., Lk, Dv).
 * The scores S = scale * Q K^T (batch..., Lq, Lk) then go through s_view: SCALE / RSCALE
 * (before any bias; at most one of them may hold a tensor instead of a scalar: broadcast onto
 * S's shape at that step with size 1 in its last two dims, at most KILN_ATTN_MAX_HS
 * elements: Swin V2's per-head logit scale), RESHAPE p (of the batch dims only: Lq and Lk stay last), BIAS slot
 * (S += input 3 + slot, broadcast onto S's shape at that step: Swin's shifted-window mask
 * is added to S viewed as (B/nW, nW, H, L, L)); the softmax runs over the last axis and
 * its batch dims then are batch' (V's). The output O (batch'..., Lq, Dv) is written through
 * o_view (TRANSPOSE, RESHAPE p, SQUEEZE, UNSQUEEZE): the node's output is the tensor that
 * chain gives, and O is a view of it.
 */
#ifndef KILN_OPS_ATTENTION_H
#define KILN_OPS_ATTENTION_H

#include "../core/internal.h"

enum {
    KILN_ATTN_RESHAPE = 1,
    KILN_ATTN_TRANSPOSE = 2,
    KILN_ATTN_GATHER = 3,
    KILN_ATTN_SQUEEZE = 4,
    KILN_ATTN_UNSQUEEZE = 5,
    KILN_ATTN_SLICE = 6,
    KILN_ATTN_SCALE = 7,
    KILN_ATTN_RSCALE = 8,
    KILN_ATTN_BIAS = 9,
    KILN_ATTN_SLICE_P = 10,
    KILN_ATTN_L2NORM = 11
};

/* Elements of a tensor-valued SCALE step in s_view (a factor per head, say). */
#define KILN_ATTN_MAX_HS 64

/* The first value input (Reshape shapes, scale factors): inputs 0-2 are Q, K, V, 3-4 the
 * optional biases. */
#define KILN_ATTN_FIRST_PARAM 5

/* Where element (n, row, col) of an operand is, n the flat batch index: n's digits in the
 * mixed radix of bdims (row-major) times bstr, plus row * rs + col * cs + off (elements).
 * Batch dims of size 1 are dropped and contiguous neighbours merged. */
typedef struct kiln_attn_addr {
    int nb;
    int64_t bdims[KILN_MAX_DIMS], bstr[KILN_MAX_DIMS];
    int64_t rs, cs, off;
} kiln_attn_addr;

typedef struct kiln_attn_geom {
    int64_t nbatch, lq, lk, d, dv;
    float scale;
    /* Q's / K's rows divided by max(L2 norm, eps) when *_norm (eps *_eps > 0 or 0) */
    bool q_norm, k_norm;
    float q_eps, k_eps;
    /* a tensor-valued scale: batch n's scores times hs[kiln_attn_base(&hsa, n)] (n_hs > 0) */
    int n_hs;
    float hs[KILN_ATTN_MAX_HS];
    kiln_attn_addr hsa;
    kiln_attn_addr q, k, v, o, bias[2]; /* k: row j, column d (of K, not K^T) */
    bool has_bias[2];
    int out_ndim;
    int64_t out_dims[KILN_MAX_DIMS];
} kiln_attn_geom;

/* The geometry of node c->node for tensors t[] (shapes; data of the value inputs): the CPU
 * passes c->in, a device backend its host_in. Fails (KILN_ERR_SHAPE / _UNSUPPORTED) naming
 * the node when a program does not apply or a view is not expressible as strides. */
kiln_status kiln_attention_resolve(kiln_op_ctx *c, kiln_tensor *const *t, kiln_attn_geom *g);

/* The offset of batch n's (0, 0) element in a. */
static inline int64_t kiln_attn_base(const kiln_attn_addr *a, int64_t n) {
    int64_t off = a->off;
    for (int i = a->nb - 1; i >= 0; i--) {
        off += (n % a->bdims[i]) * a->bstr[i];
        n /= a->bdims[i];
    }
    return off;
}

/* Batch n's factor of a tensor-valued scale (1 when there is none). */
static inline float kiln_attn_hs(const kiln_attn_geom *g, int64_t n) {
    return g->n_hs > 0 ? g->hs[kiln_attn_base(&g->hsa, n)] : 1.0f;
}

#endif
