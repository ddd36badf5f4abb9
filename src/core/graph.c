/* graph.c — the static graph: values, nodes, attributes, the C builder API, and
 * the graph checks of finalization (references, topological order, op lookup); the static
 * inference that completes kiln_model_finalize is the planner's (plan.c). */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool grow(kiln_context *ctx, void **arr, int *cap, int need, size_t elem, const char *what) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) {
        kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory growing %s to %d entries", what, nc);
        return false;
    }
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return true;
}

kiln_status kiln_model_create(kiln_context *ctx, kiln_model **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    kiln_model *m = kiln_calloc(ctx, 1, sizeof *m, "a model");
    *out = m;
    if (!m) return KILN_ERR_OUT_OF_MEMORY;
    m->ctx = ctx;
    m->opset = 21;
    return KILN_OK;
}

void kiln_attr_clear(kiln_attr *a) {
    if (!a) return;
    free(a->name);
    free(a->s);
    free(a->floats);
    free(a->ints);
    for (int i = 0; a->strings && i < a->n; i++) free(a->strings[i]);
    free(a->strings);
    kiln_tensor_free(a->t);
    memset(a, 0, sizeof *a);
}

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_values; i++) {
        kiln_value *v = &m->values[i];
        free(v->name);
        for (int d = 0; d < KILN_MAX_DIMS; d++) free(v->dim_param[d]);
        kiln_tensor_free(v->init);
    }
    for (int i = 0; i < m->n_nodes; i++) {
        kiln_node *n = &m->nodes[i];
        free(n->op_type);
        free(n->name);
        free(n->domain);
        free(n->in);
        free(n->out);
        for (int a = 0; a < n->n_attrs; a++) kiln_attr_clear(&n->attrs[a]);
        free(n->attrs);
    }
    free(m->values);
    free(m->nodes);
    free(m->inputs);
    free(m->outputs);
    free(m->producer);
    free(m->name_index);
    free(m);
}

/* Value names are looked up on every reference while a graph is built (importer,
 * builder, autograd): a hash of value indices keeps that O(1). With a linear scan, a 1 KB
 * ONNX file whose local functions expand to 131k nodes took two minutes to load. */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void index_put(int *slots, int cap, const kiln_value *values, int v) {
    uint32_t mask = (uint32_t)cap - 1, i = name_hash(values[v].name) & mask;
    while (slots[i] >= 0) i = (i + 1) & mask;
    slots[i] = v;
}

/* Index value v (the last one added), growing the table to stay at most half full. If it
 * cannot grow, the index is dropped and lookups scan; a later growth rebuilds it whole. */
static void index_add(kiln_model *m, int v) {
    if (m->name_index && m->n_values * 2 <= m->name_index_cap) {
        index_put(m->name_index, m->name_index_cap, m->values, v);
        return;
    }
    int cap = m->name_index_cap ? m->name_index_cap : 64;
    while (cap < m->n_values * 2 && cap <= INT_MAX / 2) cap *= 2;
    int *slots = cap >= m->n_values * 2 ? malloc((size_t)cap * sizeof(int)) : NULL;
    free(m->name_index);
    m->name_index = slots;
    m->name_index_cap = slots ? cap : 0;
    if (!slots) return;
    for (int i = 0; i < cap; i++) slots[i] = -1;
    for (int i = 0; i < m->n_values; i++) index_put(slots, cap, m->values, i);
}

int kiln_model_find_value(const kiln_model *m, const char *name) {
    if (!name || !*name) return -1;
    if (m->name_index) {
        uint32_t mask = (uint32_t)m->name_index_cap - 1, i = name_hash(name) & mask;
        for (; m->name_index[i] >= 0; i = (i + 1) & mask)
            if (strcmp(m->values[m->name_index[i]].name, name) == 0) return m->name_index[i];
        return -1;
    }
    for (int i = 0; i < m->n_values; i++)
        if (m->values[i].name && strcmp(m->values[i].name, name) == 0) return i;
    return -1;
}

static int new_value(kiln_model *m, const char *name) {
    if (!grow(m->ctx, (void **)&m->values, &m->cap_values, m->n_values + 1, sizeof(kiln_value),
              "the value table"))
        return -1;
    kiln_value *v = &m->values[m->n_values];
    memset(v, 0, sizeof *v);
    v->name = kiln_strdup(m->ctx, name);
    if (!v->name) return -1;
    v->ndim = -1;
    v->producer = -1;
    m->n_values++;
    index_add(m, m->n_values - 1);
    return m->n_values - 1;
}

int kiln_model_get_value(kiln_model *m, const char *name) {
    int i = kiln_model_find_value(m, name);
    return i >= 0 ? i : new_value(m, name);
}

int kiln_model_add_node_raw(kiln_model *m, const char *op_type, const char *name,
                            const char *domain, int n_in, const int *in, int n_out,
                            const int *out, int n_attrs, kiln_attr *attrs) {
    if (!grow(m->ctx, (void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof(kiln_node),
              "the node table")) {
        for (int a = 0; a < n_attrs; a++) kiln_attr_clear(&attrs[a]);
        free(attrs);
        return -1;
    }
    kiln_node *n = &m->nodes[m->n_nodes];
    memset(n, 0, sizeof *n);
    n->op_type = kiln_strdup(m->ctx, op_type);
    n->name = kiln_strdup(m->ctx, name ? name : "");
    n->domain = kiln_strdup(m->ctx, domain ? domain : "");
    n->in = kiln_calloc(m->ctx, (size_t)n_in + 1, sizeof(int), "node inputs");
    n->out = kiln_calloc(m->ctx, (size_t)n_out + 1, sizeof(int), "node outputs");
    n->attrs = attrs;
    n->n_attrs = n_attrs;
    n->op = -1;
    n->opset = m->opset;
    n->model = m;
    m->n_nodes++; /* counted before any failure below so kiln_model_free releases it */
    if (!n->op_type || !n->name || !n->domain || !n->in || !n->out) return -1;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    for (int i = 0; i < n_out; i++) n->out[i] = out[i];
    n->n_in = n_in;
    n->n_out = n_out;
    return m->n_nodes - 1;
}

/* --------------------------------------------------------------- attributes */

const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t dflt) {
    const kiln_attr *a = kiln_node_attr(n, name);
    return a && a->type == KILN_ATTR_INT ? a->i : dflt;
}

float kiln_attr_float(const kiln_node *n, const char *name, float dflt) {
    const kiln_attr *a = kiln_node_attr(n, name);
    if (!a) return dflt;
    if (a->type == KILN_ATTR_FLOAT) return a->f;
    if (a->type == KILN_ATTR_INT) return (float)a->i;
    return dflt;
}

const char *kiln_attr_string(const kiln_node *n, const char *name, const char *dflt) {
    const kiln_attr *a = kiln_node_attr(n, name);
    return a && a->type == KILN_ATTR_STRING && a->s ? a->s : dflt;
}

const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, int *count) {
    const kiln_attr *a = kiln_node_attr(n, name);
    if (a && (a->type == KILN_ATTR_INTS || a->type == KILN_ATTR_INT)) {
        *count = a->type == KILN_ATTR_INT ? 1 : a->n;
        return a->type == KILN_ATTR_INT ? &a->i : a->ints;
    }
    *count = 0;
    return NULL;
}

/* ------------------------------------------------------------ builder API */

static kiln_status check_open(kiln_model *m) {
    if (!m) return KILN_ERR_INVALID_ARGUMENT;
    if (m->finalized)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "the model is finalized and cannot change");
    return KILN_OK;
}

static bool push_index(kiln_model *m, int **arr, int *n, int v) {
    int *p = realloc(*arr, (size_t)(*n + 1) * sizeof(int));
    if (!p) {
        kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        return false;
    }
    p[(*n)++] = v;
    *arr = p;
    return true;
}

kiln_status kiln_model_add_input(kiln_model *m, const char *name, kiln_dtype dtype, int ndim,
                                 const int64_t *dims) {
    kiln_status st = check_open(m);
    if (st) return st;
    if (!name || !*name) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "input name is empty");
    if (!kiln_dtype_valid(dtype))
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "input '%s': unsupported dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > KILN_MAX_DIMS || (ndim && !dims))
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "input '%s': rank %d is outside 0..%d", name, ndim, KILN_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (dims[i] < -1)
            return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "input '%s': dim %d is %lld", name, i, (long long)dims[i]);
    if (kiln_model_find_value(m, name) >= 0)
        return kiln_fail(m->ctx, KILN_ERR_GRAPH, "input '%s' is defined twice", name);
    int v = kiln_model_get_value(m, name);
    if (v < 0) return KILN_ERR_OUT_OF_MEMORY;
    kiln_value *val = &m->values[v];
    val->dtype = dtype;
    val->ndim = ndim;
    for (int i = 0; i < ndim; i++) val->dims[i] = dims[i];
    val->is_input = true;
    return push_index(m, &m->inputs, &m->n_inputs, v) ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

kiln_status kiln_model_add_initializer(kiln_model *m, const char *name, const kiln_tensor *t) {
    kiln_status st = check_open(m);
    if (st) return st;
    if (!name || !*name || !t)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "initializer needs a name and a tensor");
    if ((st = kiln_require_host(m->ctx, t, "kiln_model_add_initializer"))) return st;
    if (kiln_model_find_value(m, name) >= 0)
        return kiln_fail(m->ctx, KILN_ERR_GRAPH, "initializer '%s' is defined twice", name);
    int v = kiln_model_get_value(m, name);
    if (v < 0) return KILN_ERR_OUT_OF_MEMORY;
    /* Host data is NCHW throughout (kernels read that); an NHWC tensor is converted. */
    kiln_tensor *c = NULL;
    if (t->ndim == 4 && t->format == KILN_FORMAT_NHWC) {
        if ((st = kiln_tensor_to_format(m->ctx, t, KILN_FORMAT_NCHW, &c)) != KILN_OK) return st;
    } else if (!(c = kiln_tensor_clone(m->ctx, t))) {
        return KILN_ERR_OUT_OF_MEMORY;
    }
    m->values[v].init = c;
    m->values[v].dtype = c->dtype;
    m->values[v].ndim = c->ndim;
    memcpy(m->values[v].dims, c->dims, sizeof c->dims);
    return KILN_OK;
}

kiln_status kiln_model_add_node(kiln_model *m, const char *op_type, const char *name,
                                int n_inputs, const char *const *inputs, int n_outputs,
                                const char *const *outputs, kiln_node **out) {
    kiln_status st = check_open(m);
    if (st) return st;
    if (out) *out = NULL;
    if (!op_type || !*op_type || n_inputs < 0 || n_outputs < 1 || (n_inputs && !inputs) || !outputs)
        return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_model_add_node: bad arguments for '%s'",
                         op_type ? op_type : "(null)");
    int *in = kiln_calloc(m->ctx, (size_t)n_inputs + 1, sizeof(int), "node inputs");
    int *o = kiln_calloc(m->ctx, (size_t)n_outputs, sizeof(int), "node outputs");
    int idx = -1;
    if (in && o) {
        bool ok = true;
        for (int i = 0; i < n_inputs && ok; i++) {
            in[i] = (inputs[i] && *inputs[i]) ? kiln_model_get_value(m, inputs[i]) : -1;
            ok = !(inputs[i] && *inputs[i] && in[i] < 0);
        }
        for (int i = 0; i < n_outputs && ok; i++) {
            o[i] = (outputs[i] && *outputs[i]) ? kiln_model_get_value(m, outputs[i]) : -1;
            ok = !(outputs[i] && *outputs[i] && o[i] < 0);
        }
        if (ok) idx = kiln_model_add_node_raw(m, op_type, name, "", n_inputs, in, n_outputs, o, 0, NULL);
    }
    free(in);
    free(o);
    if (idx < 0) return KILN_ERR_OUT_OF_MEMORY;
    if (out) *out = &m->nodes[idx];
    return KILN_OK;
}

static kiln_status set_attr(kiln_node *n, const char *name, kiln_attr *a) {
    if (!n || !name || !*name) {
        kiln_attr_clear(a);
        return KILN_ERR_INVALID_ARGUMENT;
    }
    kiln_context *ctx = n->model->ctx;
    a->name = kiln_strdup(ctx, name);
    if (!a->name) {
        kiln_attr_clear(a);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) {
            kiln_attr_clear(&n->attrs[i]);
            n->attrs[i] = *a;
            return KILN_OK;
        }
    kiln_attr *p = realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *p);
    if (!p) {
        kiln_attr_clear(a);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory adding attribute %s", name);
    }
    p[n->n_attrs++] = *a;
    n->attrs = p;
    return KILN_OK;
}

kiln_status kiln_node_set_int(kiln_node *n, const char *attr, int64_t v) {
    kiln_attr a = {.type = KILN_ATTR_INT, .i = v};
    return set_attr(n, attr, &a);
}

kiln_status kiln_node_set_float(kiln_node *n, const char *attr, float v) {
    kiln_attr a = {.type = KILN_ATTR_FLOAT, .f = v};
    return set_attr(n, attr, &a);
}

kiln_status kiln_node_set_string(kiln_node *n, const char *attr, const char *v) {
    if (!n || !v) return KILN_ERR_INVALID_ARGUMENT;
    kiln_attr a = {.type = KILN_ATTR_STRING, .s = kiln_strdup(n->model->ctx, v)};
    if (!a.s) return KILN_ERR_OUT_OF_MEMORY;
    return set_attr(n, attr, &a);
}

kiln_status kiln_node_set_ints(kiln_node *n, const char *attr, int count, const int64_t *v) {
    if (!n || count < 0 || (count && !v)) return KILN_ERR_INVALID_ARGUMENT;
    kiln_attr a = {.type = KILN_ATTR_INTS, .n = count};
    a.ints = kiln_calloc(n->model->ctx, (size_t)count + 1, sizeof(int64_t), "attribute");
    if (!a.ints) return KILN_ERR_OUT_OF_MEMORY;
    if (count) memcpy(a.ints, v, (size_t)count * sizeof *v);
    return set_attr(n, attr, &a);
}

kiln_status kiln_node_set_floats(kiln_node *n, const char *attr, int count, const float *v) {
    if (!n || count < 0 || (count && !v)) return KILN_ERR_INVALID_ARGUMENT;
    kiln_attr a = {.type = KILN_ATTR_FLOATS, .n = count};
    a.floats = kiln_calloc(n->model->ctx, (size_t)count + 1, sizeof(float), "attribute");
    if (!a.floats) return KILN_ERR_OUT_OF_MEMORY;
    if (count) memcpy(a.floats, v, (size_t)count * sizeof *v);
    return set_attr(n, attr, &a);
}

kiln_status kiln_model_add_output(kiln_model *m, const char *name) {
    kiln_status st = check_open(m);
    if (st) return st;
    if (!name || !*name) return kiln_fail(m->ctx, KILN_ERR_INVALID_ARGUMENT, "output name is empty");
    int v = kiln_model_get_value(m, name);
    if (v < 0) return KILN_ERR_OUT_OF_MEMORY;
    m->values[v].is_output = true;
    return push_index(m, &m->outputs, &m->n_outputs, v) ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

/* ---------------------------------------------------------------- finalize */

static const char *vname(const kiln_model *m, int v) { return v >= 0 ? m->values[v].name : ""; }

/* Give every missing optional output (-1) an anonymous value so kernels can always write
 * all n_out outputs; the planner drops them right after the node. */
static kiln_status name_missing_outputs(kiln_model *m) {
    for (int i = 0; i < m->n_nodes; i++) {
        for (int k = 0; k < m->nodes[i].n_out; k++) {
            if (m->nodes[i].out[k] >= 0) continue;
            char nm[64];
            snprintf(nm, sizeof nm, "\x01unused%d_%d", i, k);
            int v = new_value(m, nm);
            if (v < 0) return KILN_ERR_OUT_OF_MEMORY;
            m->nodes[i].out[k] = v;
        }
    }
    return KILN_OK;
}

static kiln_status check_references(kiln_model *m) {
    kiln_context *ctx = m->ctx;
    for (int v = 0; v < m->n_values; v++) m->values[v].producer = -1;
    for (int i = 0; i < m->n_nodes; i++) {
        kiln_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_out; k++) {
            kiln_value *v = &m->values[n->out[k]];
            if (v->producer >= 0 || v->is_input || v->init)
                return kiln_fail(ctx, KILN_ERR_GRAPH, "%s node '%s': output '%s' is already defined %s",
                                 n->op_type, n->name, v->name,
                                 v->producer >= 0 ? "by another node" : "as a graph input or initializer");
            v->producer = i;
        }
    }
    for (int i = 0; i < m->n_nodes; i++) {
        kiln_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0) continue;
            const kiln_value *val = &m->values[v];
            if (val->producer < 0 && !val->is_input && !val->init)
                return kiln_fail(ctx, KILN_ERR_GRAPH,
                                 "%s node '%s': input %d '%s' is not a graph input, an initializer or any node's output",
                                 n->op_type, n->name, k, val->name);
        }
    }
    for (int i = 0; i < m->n_outputs; i++) {
        const kiln_value *val = &m->values[m->outputs[i]];
        if (val->producer < 0 && !val->is_input && !val->init)
            return kiln_fail(ctx, KILN_ERR_GRAPH, "graph output '%s' is never computed", val->name);
    }
    return KILN_OK;
}

/* Kahn's algorithm over consumer lists, O(nodes + edges). Among ready nodes the file's
 * order is kept (a min-heap would be exact; a FIFO of ready nodes is close enough and
 * keeps already-sorted files unchanged). */
static kiln_status topo_sort(kiln_model *m) {
    kiln_context *ctx = m->ctx;
    size_t n = (size_t)(m->n_nodes > 0 ? m->n_nodes : 0), nv = (size_t)m->n_values;
    if (n == 0) return KILN_OK;
    /* A model whose nodes were placed on purpose (keep_order: the recomputations of
     * src/train/recompute.c, just before their backward use rather than where their inputs
     * are first ready) is kept as it is while it is in order. */
    bool sorted_already = m->keep_order;
    for (size_t i = 0; i < n && sorted_already; i++)
        for (int k = 0; k < m->nodes[i].n_in && sorted_already; k++) {
            const int v = m->nodes[i].in[k];
            if (v >= 0 && m->values[v].producer >= (int)i) sorted_already = false;
        }
    if (sorted_already) return KILN_OK;
    size_t edges = 0;
    for (size_t i = 0; i < n; i++) edges += (size_t)m->nodes[i].n_in;
    int *pending = kiln_calloc(ctx, n, sizeof(int), "topological sort");
    int *queue = kiln_calloc(ctx, n, sizeof(int), "topological sort");
    int *cstart = kiln_calloc(ctx, nv + 1, sizeof(int), "topological sort");
    int *cons = kiln_calloc(ctx, edges + 1, sizeof(int), "topological sort");
    int *fill = kiln_calloc(ctx, nv + 1, sizeof(int), "topological sort");
    kiln_node *sorted = kiln_calloc(ctx, n, sizeof(kiln_node), "topological sort");
    kiln_status st = KILN_OK;
    if (!pending || !queue || !cstart || !cons || !fill || !sorted) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    /* consumers of each value, as CSR: cons[cstart[v] .. cstart[v+1]) */
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) {
            int v = m->nodes[i].in[k];
            if (v >= 0 && m->values[v].producer >= 0) {
                cstart[v + 1]++;
                pending[i]++;
            }
        }
    for (size_t v = 0; v < nv; v++) cstart[v + 1] += cstart[v];
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) {
            int v = m->nodes[i].in[k];
            if (v >= 0 && m->values[v].producer >= 0) cons[cstart[v] + fill[v]++] = (int)i;
        }
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < n; i++)
        if (!pending[i]) queue[tail++] = (int)i;
    while (head < tail) {
        const kiln_node *nd = &m->nodes[queue[head++]];
        for (int k = 0; k < nd->n_out; k++) {
            int v = nd->out[k];
            for (int c = cstart[v]; c < cstart[v + 1]; c++)
                if (--pending[cons[c]] == 0) queue[tail++] = cons[c];
        }
    }
    if (tail < n) {
        for (size_t i = 0; i < n; i++)
            if (pending[i]) {
                st = kiln_fail(ctx, KILN_ERR_GRAPH, "the graph has a cycle through %s node '%s'",
                               m->nodes[i].op_type, m->nodes[i].name);
                goto out;
            }
    }
    for (size_t i = 0; i < n; i++) sorted[i] = m->nodes[queue[i]];
    for (size_t i = 0; i < n; i++) m->nodes[i] = sorted[i];
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++) m->values[m->nodes[i].out[k]].producer = (int)i;
out:
    free(pending);
    free(queue);
    free(cstart);
    free(cons);
    free(fill);
    free(sorted);
    return st;
}

static kiln_status check_ops(kiln_model *m) {
    for (int i = 0; i < m->n_nodes; i++) {
        kiln_node *n = &m->nodes[i];
        n->op = kiln_op_index_domain(n->domain, n->op_type);
        if (n->op < 0 && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
            return kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED, "op '%s' of domain '%s' (node '%s') is not supported by kiln",
                             n->op_type, n->domain, n->name);
        if (n->op < 0)
            return kiln_fail(m->ctx, KILN_ERR_UNSUPPORTED, "op '%s' (node '%s') is not supported by kiln",
                             n->op_type, n->name);
        const kiln_op_def *d = kiln_op_get(n->op);
        int present = 0;
        for (int k = 0; k < n->n_in; k++) present += n->in[k] >= 0;
        if (n->n_in < d->min_inputs || (d->max_inputs >= 0 && n->n_in > d->max_inputs))
            return kiln_fail(m->ctx, KILN_ERR_GRAPH, "%s node '%s' has %d inputs; %s takes %d to %d",
                             n->op_type, n->name, n->n_in, d->name, d->min_inputs, d->max_inputs);
        for (int k = 0; k < d->min_inputs && k < n->n_in; k++)
            if (n->in[k] < 0)
                return kiln_fail(m->ctx, KILN_ERR_GRAPH, "%s node '%s': required input %d is missing",
                                 n->op_type, n->name, k);
        if (n->n_out < d->min_outputs || (d->max_outputs >= 0 && n->n_out > d->max_outputs))
            return kiln_fail(m->ctx, KILN_ERR_GRAPH, "%s node '%s' has %d outputs; %s gives %d to %d",
                             n->op_type, n->name, n->n_out, d->name, d->min_outputs, d->max_outputs);
        (void)present;
    }
    return KILN_OK;
}

kiln_status kiln_model_check_graph(kiln_model *m) {
    kiln_status st = check_open(m);
    if (st) return st;
    if (m->n_outputs == 0) return kiln_fail(m->ctx, KILN_ERR_GRAPH, "the graph has no outputs");
    if ((st = name_missing_outputs(m)) || (st = check_references(m)) || (st = topo_sort(m)) ||
        (st = check_ops(m)))
        return st;
    m->finalized = true;
    return KILN_OK;
}

int kiln_model_num_inputs(const kiln_model *m) { return m ? m->n_inputs : 0; }
int kiln_model_num_outputs(const kiln_model *m) { return m ? m->n_outputs : 0; }
int kiln_model_num_nodes(const kiln_model *m) { return m ? m->n_nodes : 0; }

const char *kiln_model_input_name(const kiln_model *m, int i) {
    return (m && i >= 0 && i < m->n_inputs) ? vname(m, m->inputs[i]) : NULL;
}

const char *kiln_model_output_name(const kiln_model *m, int i) {
    return (m && i >= 0 && i < m->n_outputs) ? vname(m, m->outputs[i]) : NULL;
}

kiln_status kiln_model_input_info(const kiln_model *m, int i, kiln_dtype *dtype, int *ndim,
                                  int64_t dims[KILN_MAX_DIMS]) {
    if (!m || i < 0 || i >= m->n_inputs) return KILN_ERR_INVALID_ARGUMENT;
    const kiln_value *v = &m->values[m->inputs[i]];
    if (dtype) *dtype = v->dtype;
    if (ndim) *ndim = v->ndim;
    if (dims)
        for (int d = 0; d < KILN_MAX_DIMS; d++) dims[d] = d < v->ndim ? v->dims[d] : 0;
    return KILN_OK;
}

/* ------------------------------------------------------------------ copies */

kiln_status kiln_attr_copy(kiln_context *ctx, kiln_attr *dst, const kiln_attr *src) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    dst->f = src->f;
    dst->i = src->i;
    dst->n = src->n;
    dst->name = kiln_strdup(ctx, src->name);
    bool ok = dst->name != NULL;
    if (ok && src->s) ok = (dst->s = kiln_strdup(ctx, src->s)) != NULL;
    if (ok && src->floats) {
        dst->floats = kiln_calloc(ctx, (size_t)src->n + 1, sizeof(float), "attribute");
        ok = dst->floats != NULL;
        if (ok && src->n) memcpy(dst->floats, src->floats, (size_t)src->n * sizeof(float));
    }
    if (ok && src->ints) {
        dst->ints = kiln_calloc(ctx, (size_t)src->n + 1, sizeof(int64_t), "attribute");
        ok = dst->ints != NULL;
        if (ok && src->n) memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
    }
    if (ok && src->strings) {
        dst->strings = kiln_calloc(ctx, (size_t)src->n + 1, sizeof(char *), "attribute");
        ok = dst->strings != NULL;
        for (int i = 0; ok && i < src->n; i++) ok = (dst->strings[i] = kiln_strdup(ctx, src->strings[i])) != NULL;
    }
    if (ok && src->t) ok = (dst->t = kiln_tensor_clone(ctx, src->t)) != NULL;
    if (!ok) {
        kiln_attr_clear(dst);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

kiln_status kiln_model_clone(const kiln_model *src, kiln_model **out) {
    *out = NULL;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(src->ctx, &m);
    if (st) return st;
    m->opset = src->opset;
    m->ir_version = src->ir_version;
    m->keep_order = src->keep_order;
    for (int v = 0; v < src->n_values && !st; v++) {
        const kiln_value *a = &src->values[v];
        int nv = new_value(m, a->name);
        if (nv < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        kiln_value *b = &m->values[nv];
        b->dtype = a->dtype;
        b->ndim = a->ndim;
        memcpy(b->dims, a->dims, sizeof b->dims);
        b->is_input = a->is_input;
        b->is_output = a->is_output;
        b->format = a->format;
        for (int d = 0; d < KILN_MAX_DIMS && !st; d++)
            if (a->dim_param[d] && !(b->dim_param[d] = kiln_strdup(m->ctx, a->dim_param[d]))) st = KILN_ERR_OUT_OF_MEMORY;
        if (!st && a->init && !(b->init = kiln_tensor_clone(m->ctx, a->init))) st = KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < src->n_nodes && !st; i++) {
        const kiln_node *n = &src->nodes[i];
        kiln_attr *attrs = n->n_attrs ? kiln_calloc(m->ctx, (size_t)n->n_attrs, sizeof *attrs, "attributes") : NULL;
        if (n->n_attrs && !attrs) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        int copied = 0;
        for (; copied < n->n_attrs && !st; copied++) st = kiln_attr_copy(m->ctx, &attrs[copied], &n->attrs[copied]);
        if (st) {
            for (int a = 0; a < copied; a++) kiln_attr_clear(&attrs[a]);
            free(attrs);
            break;
        }
        int idx = kiln_model_add_node_raw(m, n->op_type, n->name, n->domain, n->n_in, n->in, n->n_out, n->out,
                                          n->n_attrs, attrs);
        if (idx < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        m->nodes[idx].opset = n->opset;
    }
    for (int i = 0; i < src->n_inputs && !st; i++)
        if (!push_index(m, &m->inputs, &m->n_inputs, src->inputs[i])) st = KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < src->n_outputs && !st; i++)
        if (!push_index(m, &m->outputs, &m->n_outputs, src->outputs[i])) st = KILN_ERR_OUT_OF_MEMORY;
    if (st) {
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}
