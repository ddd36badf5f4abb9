/* model_info.c — what a program asks of a model's inputs and outputs by name, and the
 * outputs' dtypes and shapes before any session runs it (kiln.h, "model"). */
#include "internal.h"
#include "../passes/passes.h"

#include <stdlib.h>
#include <string.h>

static int find_io(const kiln_model *m, const int *io, int n, const char *name) {
    if (!m || !name) return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(m->values[io[i]].name, name) == 0) return i;
    return -1;
}

const char *kiln_model_node_op_type(const kiln_model *m, int i) {
    return m && i >= 0 && i < m->n_nodes ? m->nodes[i].op_type : NULL;
}

int kiln_model_input_index(const kiln_model *m, const char *name) {
    return m ? find_io(m, m->inputs, m->n_inputs, name) : -1;
}

int kiln_model_output_index(const kiln_model *m, const char *name) {
    return m ? find_io(m, m->outputs, m->n_outputs, name) : -1;
}

const char *kiln_model_input_dim_name(const kiln_model *m, int i, int d) {
    if (!m || i < 0 || i >= m->n_inputs || d < 0 || d >= KILN_MAX_DIMS) return NULL;
    const kiln_value *v = &m->values[m->inputs[i]];
    return d < v->ndim && v->dims[d] < 0 ? v->dim_param[d] : NULL;
}

const char *kiln_model_shared_dim_param(const kiln_model *m) {
    const char *name = NULL;
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        for (int d = 0; d < v->ndim; d++) {
            if (v->dims[d] >= 0) continue;
            if (!v->dim_param[d]) return NULL; /* an unnamed symbolic dim */
            if (name && strcmp(name, v->dim_param[d])) return NULL;
            name = v->dim_param[d];
        }
    }
    return name;
}

/* Output i inferred twice, with every symbolic input dim 1 then 3: dims that differ depend
 * on a symbolic dim. */
static kiln_status output_probe(const kiln_model *m, int i, kiln_tensor *one, kiln_tensor *three) {
    kiln_model *mm = (kiln_model *)m; /* read only: a finalized model's nodes keep their op index */
    kiln_tensor *a = NULL, *b = NULL;
    kiln_status st = kiln_pass_infer_shapes(mm, 1, &a);
    if (!st) st = kiln_pass_infer_shapes(mm, 3, &b);
    if (!st) {
        *one = a[m->outputs[i]];
        *three = b[m->outputs[i]];
    }
    free(a);
    free(b);
    return st;
}

kiln_status kiln_model_output_info(const kiln_model *m, int i, kiln_dtype *dtype, int *ndim,
                                   int64_t dims[KILN_MAX_DIMS]) {
    if (!m || i < 0 || i >= m->n_outputs) return KILN_ERR_INVALID_ARGUMENT;
    if (!m->finalized) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the model is not finalized");
    kiln_tensor one, three;
    kiln_status st = output_probe(m, i, &one, &three);
    if (st) return kiln_api_end(m->ctx, st);
    const bool known = one.ndim >= 0 && one.ndim == three.ndim;
    if (dtype) *dtype = one.dtype;
    if (ndim) *ndim = known ? one.ndim : -1;
    if (dims)
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            dims[d] = !known || d >= one.ndim ? 0 : one.dims[d] == three.dims[d] ? one.dims[d] : -1;
    return KILN_OK;
}

const char *kiln_model_output_dim_name(const kiln_model *m, int i, int d) {
    if (!m || !m->finalized || i < 0 || i >= m->n_outputs || d < 0 || d >= KILN_MAX_DIMS) return NULL;
    const char *name = kiln_model_shared_dim_param(m);
    if (!name) return NULL;
    kiln_tensor one, three;
    if (output_probe(m, i, &one, &three) || one.ndim < 0 || one.ndim != three.ndim || d >= one.ndim) return NULL;
    /* the dim is the symbolic one itself: 1 with it 1, 3 with it 3 */
    return one.dims[d] == 1 && three.dims[d] == 3 ? name : NULL;
}
