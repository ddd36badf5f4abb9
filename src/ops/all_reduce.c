/* all_reduce.c — kiln.AllReduce: the mean of each tensor over the ranks of data-parallel
 * training (src/dist/dist.h), one node per gradient bucket:
 *
 *   inputs   0 .. n      f32 tensors (the bucket's gradients)
 *            n           with skip=1: an f32 scalar, nonzero on micro-batches that do not
 *                        complete an optimizer step (gradient accumulation): then nothing
 *                        is reduced and the outputs are the inputs
 *            last        with after=1: the previous bucket's first output, never read: it
 *                        orders the buckets, so that every rank's device issues its
 *                        collectives in the same order whatever streams the plan gives them
 *   outputs  0 .. n      the mean over the ranks of each input, same shape
 *   attributes  comm (the communicator's id, kiln_dist; 0: none), world (its size; 1 with
 *               comm 0 is the identity, what the op's own cases run), skip, after (0 or 1)
 *
 * The CPU reference packs the bucket into its workspace, sums it over the ranks with the
 * communicator's host all-reduce (MPI) and divides by the world size; CUDA's kernel is
 * NCCL's all-reduce on the plan's stream (src/cuda/nccl.c). Every rank runs the same
 * nodes in the same order (the graph is checked to be the same at start), as collectives
 * need. Output k may share input k's storage. Not differentiable: it runs after backward. */
#include "../core/optest.h"
#include "../dist/dist.h"

#include <string.h>

static kiln_status read_attrs(kiln_op_ctx *c, int *n, bool *skip) {
    *skip = kiln_attr_int(c->node, "skip", 0) != 0;
    *n = c->n_in - (*skip ? 1 : 0) - (kiln_attr_int(c->node, "after", 0) != 0 ? 1 : 0);
    const int64_t world = kiln_attr_int(c->node, "world", 1);
    KILN_OP_CHECK(c, *n >= 1 && c->n_out == *n, KILN_ERR_INVALID_ARGUMENT,
                  "%d inputs%s take %d outputs, got %d", c->n_in, *skip ? " (the last the skip flag)" : "", *n, c->n_out);
    KILN_OP_CHECK(c, world >= 1 && (world == 1 || kiln_attr_int(c->node, "comm", 0) != 0), KILN_ERR_INVALID_ARGUMENT,
                  "world=%lld needs a communicator (comm)", (long long)world);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    int n;
    bool skip;
    kiln_status st = read_attrs(c, &n, &skip);
    if (st) return st;
    for (int k = 0; k < n; k++) {
        const kiln_tensor *x = c->in[k];
        KILN_OP_CHECK(c, x && x->dtype == KILN_F32, KILN_ERR_TYPE, "input %d must be f32", k);
        kiln_tensor_set_shape(c->out[k], KILN_F32, x->ndim, x->dims);
        c->out[k]->format = x->format;
    }
    if (skip)
        KILN_OP_CHECK(c, c->in[n] && c->in[n]->dtype == KILN_F32 && kiln_tensor_numel(c->in[n]) == 1, KILN_ERR_TYPE,
                      "the skip flag (input %d) must be an f32 scalar", n);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    size_t b = 0;
    for (int k = 0; k < c->n_out; k++) b += kiln_tensor_nbytes(c->out[k]);
    return b;
}

static kiln_status forward(kiln_op_ctx *c) {
    int n;
    bool skip;
    kiln_status st = read_attrs(c, &n, &skip);
    if (st) return st;
    for (int k = 0; k < n; k++)
        if (c->out[k]->data != c->in[k]->data) memcpy(c->out[k]->data, c->in[k]->data, kiln_tensor_nbytes(c->out[k]));
    if (kiln_attr_int(c->node, "comm", 0) == 0) return KILN_OK; /* world 1 alone */
    kiln_dist *d = kiln_dist_of(c, "comm");
    if (!d) return KILN_ERR_INVALID_ARGUMENT;
    if (d->size == 1 || (skip && ((const float *)c->in[n]->data)[0] != 0.f)) return KILN_OK;
    /* one collective per bucket: packed into the workspace */
    float *buf = c->workspace;
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        const int64_t len = kiln_tensor_numel(c->out[k]);
        memcpy(buf + at, c->out[k]->data, sizeof(float) * (size_t)len);
        at += len;
    }
    st = d->host->allreduce_f32(d, buf, at, KILN_DIST_SUM);
    if (st) {
        kiln_msg_prefix(c->kctx, "%s node '%s': ", c->node->op_type, c->node->name);
        return st;
    }
    const float inv = 1.0f / (float)d->size;
    at = 0;
    for (int k = 0; k < n; k++) {
        float *o = c->out[k]->data;
        const int64_t len = kiln_tensor_numel(c->out[k]);
        for (int64_t i = 0; i < len; i++) o[i] = buf[at + i] * inv;
        at += len;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* alone (world 1, no communicator): the identity, with and without the skip flag */
    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, -2, 3.5, 4, 0.25, -6)),
                          kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(7, -8))};
    kiln_tensor *want[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, -2, 3.5, 4, 0.25, -6)),
                            kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(7, -8))};
    fails += kiln_optest("AllReduce", "world=1", 2, in, 2, want, 0, 0, "one rank: the identity");
    kiln_tensor *in2[2] = {kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)), kt_scalar(KILN_F32, 1)};
    kiln_tensor *want2[1] = {kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3))};
    fails += kiln_optest("AllReduce", "world=1;skip=1", 2, in2, 1, want2, 0, 0, "one rank, skipped micro-batch");
    kiln_tensor *in3[2] = {kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 6)), kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(9))};
    kiln_tensor *want3[1] = {kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 6))};
    fails += kiln_optest("AllReduce", "world=1;after=1", 2, in3, 1, want3, 0, 0, "one rank, after the previous bucket");
    fails += kiln_optest_fails("AllReduce", "world=2", 1, (kiln_tensor *[]){kt_make(KILN_F32, 1, KT_DIMS(2), NULL)}, 1,
                               KILN_ERR_INVALID_ARGUMENT, "two ranks without a communicator");
    fails += kiln_optest_fails("AllReduce", "world=1", 1, (kiln_tensor *[]){kt_make(KILN_I64, 1, KT_DIMS(2), NULL)}, 1,
                               KILN_ERR_TYPE, "an i64 input");
    return fails;
}
#endif /* KILN_OPTESTS */

static int inplace_input(const kiln_node *nd, int out) { return out < nd->n_out ? out : -1; }

const kiln_op_def kiln_op_all_reduce = {
    .precision = KILN_PREC_FP32, /* f32 gradients: sums over ranks */
    .name = "AllReduce", .domain = "kiln", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = -1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .inplace_input = inplace_input,
};
