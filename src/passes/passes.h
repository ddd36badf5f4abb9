/*
 * passes.h — graph rewrites applied by a session before planning.
 *
 * A pass edits an open model (a private clone of the user's model, whose values carry the
 * shapes and dtypes static inference found, -1 where symbolic) and must leave the function
 * it computes unchanged; each pass has a test on the CPU backend that checks exactly that
 * on random inputs. Passes run in the order of the table in passes.c; adding one is its
 * file plus one line there.
 */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "../core/internal.h"

typedef struct kiln_pass_options {
    kiln_device device;
    kiln_precision precision;
    unsigned disabled; /* KILN_PASS_* bits */
} kiln_pass_options;

typedef struct kiln_pass {
    const char *name;
    unsigned flag;     /* the KILN_PASS_* bit that turns it off */
    /* Rewrite m in place; set *changed when anything changed. */
    kiln_status (*run)(kiln_model *m, const kiln_pass_options *o, bool *changed);
} kiln_pass;

/* A finalized optimized copy of src (src is not changed). */
kiln_status kiln_passes_apply(const kiln_model *src, const kiln_pass_options *o, kiln_model **out);

/* ------------------------------------------------ helpers for writing passes */

/* Number of node inputs (and graph outputs) that read value v. */
int kiln_pass_uses(const kiln_model *m, int v);
/* The only node reading v, or -1 when none or several do (or v is a graph output). */
int kiln_pass_single_consumer(const kiln_model *m, int v);
/* Make every reader of value `from` (nodes and graph outputs) read `to` instead. */
void kiln_pass_replace_uses(kiln_model *m, int from, int to);
/* Remove the nodes marked in dead[] (n_nodes entries), keeping order. */
void kiln_pass_remove_nodes(kiln_model *m, const bool *dead);
/* A new value named after hint (unique); -1 on OOM. */
int kiln_pass_new_value(kiln_model *m, const char *hint);
/* The nodes of m in a topological order (order: n_nodes entries), whatever order passes
 * left them in. */
kiln_status kiln_pass_topo_order(const kiln_model *m, int *order);
/* Dtype and shape of every value of m (an array of n_values shape-only tensors, to free()),
 * also where the graph inputs have symbolic dims, which count as 1 here (shapes are then
 * indicative; dtypes do not depend on them). Unknown: dtype UNDEFINED, ndim -1. Sets each
 * node's op index. */
kiln_status kiln_pass_infer_types(kiln_model *m, kiln_tensor **out);

/* The passes (one file each in src/passes/). */
kiln_status kiln_pass_dead_nodes(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_pad_channels(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_precision(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_layout(kiln_model *m, const kiln_pass_options *o, bool *changed);

#endif
