/*
 * table.c — the CUDA kernel table: for each ONNX op with a CUDA kernel, the kernel, the
 * check of what it supports (dtypes, ranks, attributes) and its workspace function.
 * kiln_cuda_kernel_for maps a registry index to its entry by name, so the table does not
 * depend on the order of ops.def (nor on which op files a build has). Internal ops (domain
 * "kiln": the fused kernels) are listed with their domain. An op missing here
 * is an explicit "not supported on cuda" error, never a silent fallback to the CPU.
 */
#include "cuda_internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef bool (*supports_fn)(const kiln_op_ctx *c, char *why, size_t n);
typedef kiln_status (*workspace_fn)(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes);
typedef kiln_status (*prepare_fn)(kiln_cuda *cu, kiln_op_ctx *c);

typedef struct entry {
    const char *name;
    kiln_cuda_fn run;
    supports_fn supports;
    workspace_fn workspace; /* NULL: none */
    prepare_fn prepare;     /* NULL: nothing to do before the first run */
    const char *domain;     /* NULL: ONNX's default domain; "kiln": internal ops */
} entry;

/* ------------------------------------------------------------------ checks */

static bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }
static bool has_out(const kiln_op_ctx *c, int i) { return i < c->n_out && c->out[i] != NULL; }

static bool float_input(const kiln_op_ctx *c, int i, char *why, size_t n) {
    if (kiln_cuda_float_dtype(c->in[i]->dtype)) return true;
    snprintf(why, n, "input %d has dtype %s (f32, f16 and bf16 are supported)", i,
             kiln_dtype_name(c->in[i]->dtype));
    return false;
}

/* Every present input has input 0's float dtype. */
static bool same_float(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    for (int i = 1; i < c->n_in; i++)
        if (present(c, i) && c->in[i]->dtype != c->in[0]->dtype) {
            snprintf(why, n, "input %d has dtype %s, input 0 has %s", i,
                     kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(c->in[0]->dtype));
            return false;
        }
    return true;
}

static bool sup_unary(const kiln_op_ctx *c, char *why, size_t n) { return same_float(c, why, n); }

static bool sup_binary(const kiln_op_ctx *c, char *why, size_t n) {
    for (int i = 0; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    return same_float(c, why, n);
}

static bool sup_conv(const kiln_op_ctx *c, char *why, size_t n) {
    if (!same_float(c, why, n)) return false;
    if (c->in[0]->ndim != 3 && c->in[0]->ndim != 4) {
        snprintf(why, n, "%d spatial dims (1-D and 2-D convolutions are supported)", c->in[0]->ndim - 2);
        return false;
    }
    kiln_cuda_window w;
    if (!kiln_cuda_window_get(c, c->in[0], c->out[0], c->in[1]->dims + 2, &w, why, n)) return false;
    const int64_t sizes[] = {kiln_tensor_numel(c->in[0]), kiln_tensor_numel(c->in[1]),
                             kiln_tensor_numel(c->out[0])};
    for (int i = 0; i < 3; i++)
        if (sizes[i] == 0) {
            snprintf(why, n, "empty tensors");
            return false;
        }
    for (int d = 0; d < c->in[0]->ndim; d++)
        if (c->in[0]->dims[d] > INT_MAX / 2 || c->out[0]->dims[d] > INT_MAX / 2) {
            snprintf(why, n, "dims beyond cuDNN's int range");
            return false;
        }
    return true;
}

static bool fits_products(const int64_t *v, int count, char *why, size_t n) {
    for (int i = 0; i < count; i++)
        if (v[i] > INT_MAX) {
            snprintf(why, n, "a matrix dim or batch of %lld exceeds cuBLASLt's range", (long long)v[i]);
            return false;
        }
    return true;
}

static bool sup_gemm(const kiln_op_ctx *c, char *why, size_t n) {
    if (!same_float(c, why, n)) return false;
    const kiln_tensor *a = c->in[0], *b = c->in[1];
    if (a->ndim != 2 || b->ndim != 2 || (present(c, 2) && c->in[2]->ndim > 2)) {
        snprintf(why, n, "A and B must be matrices and C of rank <= 2");
        return false;
    }
    if (a->dims[0] == 0 || a->dims[1] == 0) {
        snprintf(why, n, "an empty inner dimension");
        return false;
    }
    const int64_t v[] = {a->dims[0], a->dims[1], b->dims[0], b->dims[1]};
    return fits_products(v, 4, why, n);
}

/* kiln.FusedGemm: Gemm's checks and a known activation. */
static bool sup_fused_gemm(const kiln_op_ctx *c, char *why, size_t n) {
    kiln_cuda_act act;
    return sup_gemm(c, why, n) && kiln_cuda_act_get(c->node, true, &act, why, n);
}

static bool sup_matmul(const kiln_op_ctx *c, char *why, size_t n) {
    if (!same_float(c, why, n)) return false;
    const kiln_tensor *a = c->in[0], *b = c->in[1], *y = c->out[0];
    if (a->ndim < 1 || b->ndim < 1) {
        snprintf(why, n, "scalar operands");
        return false;
    }
    if (a->dims[a->ndim - 1] == 0) {
        snprintf(why, n, "an empty inner dimension");
        return false;
    }
    int64_t batch = 1;
    for (int d = 0; d + 2 < y->ndim; d++) batch *= y->dims[d];
    const int64_t v[] = {a->dims[a->ndim - 1], y->ndim ? y->dims[y->ndim - 1] : 1,
                         a->ndim >= 2 ? a->dims[a->ndim - 2] * batch : batch, batch};
    return fits_products(v, 4, why, n);
}

static bool sup_pool(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (has_out(c, 1)) {
        snprintf(why, n, "the Indices output");
        return false;
    }
    kiln_cuda_window w;
    return kiln_cuda_window_get(c, c->in[0], c->out[0], NULL, &w, why, n);
}

static bool sup_gap(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    if (c->in[0]->ndim < 3) {
        snprintf(why, n, "rank %d input", c->in[0]->ndim);
        return false;
    }
    return true;
}

static bool sup_batchnorm(const kiln_op_ctx *c, char *why, size_t n) {
    if (!float_input(c, 0, why, n)) return false;
    for (int i = 1; i < 5; i++) {
        kiln_dtype t = present(c, i) ? c->in[i]->dtype : KILN_DTYPE_UNDEFINED;
        if (!kiln_cuda_float_dtype(t) && t != KILN_F64) {
            snprintf(why, n, "parameter input %d has dtype %s", i, kiln_dtype_name(t));
            return false;
        }
    }
    if ((c->node->opset >= 14 && kiln_attr_int(c->node, "training_mode", 0) != 0) ||
        has_out(c, 1) || has_out(c, 2) || has_out(c, 3) || has_out(c, 4)) {
        snprintf(why, n, "training mode (inference only)");
        return false;
    }
    return true;
}

static bool sup_softmax(const kiln_op_ctx *c, char *why, size_t n) { return float_input(c, 0, why, n); }

static bool sup_any(const kiln_op_ctx *c, char *why, size_t n) {
    if (kiln_dtype_size(c->out[0]->dtype) > 0) return true;
    snprintf(why, n, "dtype %s", kiln_dtype_name(c->out[0]->dtype));
    return false;
}

/* Dropout at inference (no training_mode, or a constant false one) passes X through. */
static bool sup_dropout(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_out > 1) {
        snprintf(why, n, "the mask output is only computed on the CPU");
        return false;
    }
    if (present(c, 2) && (!c->in[2]->data || ((const uint8_t *)c->in[2]->data)[0])) {
        snprintf(why, n, "training mode runs on the CPU only");
        return false;
    }
    return sup_any(c, why, n);
}

static bool sup_concat(const kiln_op_ctx *c, char *why, size_t n) {
    for (int i = 0; i < c->n_in; i++)
        if (!present(c, i)) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    return sup_any(c, why, n);
}

static bool sup_elements(const kiln_op_ctx *c, char *why, size_t n) {
    const size_t es = kiln_dtype_size(c->in[0]->dtype);
    if (es == 1 || es == 2 || es == 4 || es == 8) return true;
    snprintf(why, n, "dtype %s", kiln_dtype_name(c->in[0]->dtype));
    return false;
}

static bool sup_gather(const kiln_op_ctx *c, char *why, size_t n) {
    if (!sup_elements(c, why, n)) return false;
    if (c->in[1]->dtype != KILN_I32 && c->in[1]->dtype != KILN_I64) {
        snprintf(why, n, "indices of dtype %s", kiln_dtype_name(c->in[1]->dtype));
        return false;
    }
    return true;
}

/* -------------------------------------------------------------------- table */

#define UNARY(name) {name, kiln_cuda_k_unary, sup_unary, NULL, NULL, NULL}
#define BINARY(name) {name, kiln_cuda_k_binary, sup_binary, NULL, NULL, NULL}

static const entry table[] = {
    UNARY("Relu"), UNARY("LeakyRelu"), UNARY("Sigmoid"), UNARY("Tanh"), UNARY("Elu"),
    UNARY("Selu"), UNARY("Celu"), UNARY("Gelu"), UNARY("HardSigmoid"), UNARY("HardSwish"),
    UNARY("Softplus"), UNARY("Softsign"), UNARY("Clip"), UNARY("Erf"), UNARY("Exp"),
    UNARY("Log"), UNARY("Sqrt"), UNARY("Reciprocal"), UNARY("Abs"), UNARY("Neg"),
    UNARY("Floor"), UNARY("Ceil"),
    BINARY("Add"), BINARY("Sub"), BINARY("Mul"), BINARY("Div"), BINARY("Pow"), BINARY("Max"),
    BINARY("Min"),
    {"Conv", kiln_cuda_k_conv, sup_conv, kiln_cuda_ws_conv, NULL, NULL},
    {"Gemm", kiln_cuda_k_gemm, sup_gemm, kiln_cuda_ws_matmul, NULL, NULL},
    {"MatMul", kiln_cuda_k_matmul, sup_matmul, kiln_cuda_ws_matmul, NULL, NULL},
    {"MaxPool", kiln_cuda_k_maxpool, sup_pool, NULL, NULL, NULL},
    {"AveragePool", kiln_cuda_k_avgpool, sup_pool, NULL, NULL, NULL},
    {"GlobalAveragePool", kiln_cuda_k_gap, sup_gap, NULL, NULL, NULL},
    {"BatchNormalization", kiln_cuda_k_batchnorm, sup_batchnorm, kiln_cuda_ws_batchnorm, NULL, NULL},
    {"Softmax", kiln_cuda_k_softmax, sup_softmax, NULL, NULL, NULL},
    {"LogSoftmax", kiln_cuda_k_logsoftmax, sup_softmax, NULL, NULL, NULL},
    {"Flatten", kiln_cuda_k_copy, sup_any, NULL, NULL, NULL},
    {"Reshape", kiln_cuda_k_copy, sup_any, NULL, NULL, NULL},
    {"Identity", kiln_cuda_k_copy, sup_any, NULL, NULL, NULL},
    {"Dropout", kiln_cuda_k_copy, sup_dropout, NULL, NULL, NULL},
    {"Concat", kiln_cuda_k_concat, sup_concat, NULL, NULL, NULL},
    {"Transpose", kiln_cuda_k_transpose, sup_elements, NULL, NULL, NULL},
    {"Gather", kiln_cuda_k_gather, sup_gather, NULL, NULL, NULL},
    {"FusedElementwise", kiln_cuda_k_fused_elementwise, kiln_cuda_sup_fused_elementwise, NULL,
     kiln_cuda_prep_fused_elementwise, "kiln"},
    {"FusedGemm", kiln_cuda_k_fused_gemm, sup_fused_gemm, kiln_cuda_ws_matmul, NULL, "kiln"},
};

#define N_ENTRIES ((int)(sizeof table / sizeof table[0]))

static bool default_domain(const char *d) { return !d || !*d || strcmp(d, "ai.onnx") == 0; }

static const entry *entry_named(const char *domain, const char *name) {
    for (int i = 0; i < N_ENTRIES; i++) {
        const bool dom = default_domain(domain) ? table[i].domain == NULL
                                                : table[i].domain && strcmp(table[i].domain, domain) == 0;
        if (dom && strcmp(table[i].name, name) == 0) return &table[i];
    }
    return NULL;
}

static const entry *entry_for(int op) {
    const kiln_op_def *d = kiln_op_get(op);
    return d ? entry_named(d->domain, d->name) : NULL;
}

/* By the registry when the node's op is registered; by its names otherwise (tests of a
 * kiln op's kernel in a build without its CPU reference). */
static const entry *entry_for_node(const kiln_node *n) {
    return n->op >= 0 ? entry_for(n->op) : entry_named(n->domain, n->op_type);
}

int kiln_cuda_kernel_count(void) { return N_ENTRIES; }

const char *kiln_cuda_kernel_name(int i) { return i >= 0 && i < N_ENTRIES ? table[i].name : NULL; }

kiln_cuda_fn kiln_cuda_kernel_for(int op) {
    const entry *e = entry_for(op);
    return e ? e->run : NULL;
}

kiln_status kiln_cuda_supports(kiln_op_ctx *c) {
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    char why[256] = "";
    if (c->n_in < 1 || !c->in[0] || c->n_out < 1 || !c->out[0])
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "not supported on cuda: missing input 0 or output 0");
    if (!e->supports(c, why, sizeof why))
        return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "not supported on cuda: %s", why);
    return KILN_OK;
}

kiln_status kiln_cuda_workspace_size(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    *bytes = 0;
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    if (!e->workspace) return KILN_OK;
    kiln_status st = e->workspace(cu, c, bytes);
    if (st) kiln_msg_prefix(c->kctx, "%s node '%s' on cuda (workspace): ", c->node->op_type, c->node->name);
    return st;
}

kiln_status kiln_cuda_prepare(kiln_cuda *cu, kiln_op_ctx *c) {
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    if (!e->prepare) return KILN_OK;
    kiln_status st = KILN_OK;
    KILN_CUDA_TRY(st, c->kctx, cudaSetDevice(cu->device));
    if (st == KILN_OK) st = e->prepare(cu, c);
    if (st) kiln_msg_prefix(c->kctx, "%s node '%s' on cuda (prepare): ", c->node->op_type, c->node->name);
    return st;
}

kiln_status kiln_cuda_run(kiln_cuda *cu, kiln_op_ctx *c) {
    const entry *e = entry_for_node(c->node);
    if (!e)
        return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "op %s (node '%s') is not supported on cuda",
                         c->node->op_type, c->node->name);
    kiln_status st = KILN_OK;
    KILN_CUDA_TRY(st, c->kctx, cudaSetDevice(cu->device));
    /* Leftovers of library calls between kernels are not this kernel's launch errors.
     * Faults of earlier kernels are sticky and still show in the next call. */
    (void)cudaGetLastError();
    if (st == KILN_OK) st = e->run(cu, c);
    if (st) kiln_msg_prefix(c->kctx, "%s node '%s' on cuda: ", c->node->op_type, c->node->name);
    return st;
}
