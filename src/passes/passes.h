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
    /* fuse-bn: the BN -> ReLU gradients not at a block end take their ReLU mask from X
     * (kiln.BatchNormGrad relu_mask_from_x = 1, reading the forward's saved statistics
     * instead of Y; src/passes/fuse_bn.c) unless KILN_PASS_BN_MASK_FROM_X is in disabled
     * or the environment variable KILN_BN_MASK_FROM_X=0 is set. */
    /* conv-bn-stats (conv_bn_stats.c): runs when set; the trainer sets it for CUDA training
     * unless KILN_PASS_CONV_BN_STATS is disabled or kiln_pass_conv_bn_stats_env() says no
     * (KILN_CUDA_CONV_STATS=0) */
    bool conv_bn_stats;
    /* conv-bn-prologue (conv_bn_prologue.c): runs when set; the trainer sets it for CUDA
     * training when kiln_pass_conv_bn_prologue_env() says so (KILN_CUDA_BN_PROLOGUE=1) */
    bool conv_bn_prologue;
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
/* Remove the nodes marked in dead[] (n_nodes entries), keeping order. */
void kiln_pass_remove_nodes(kiln_model *m, const bool *dead);
/* Remove the nodes i < n with dead[i] (dead sized for the n nodes there were; nodes appended
 * since stay), then sort the graph (kiln_pass_sort_nodes). */
kiln_status kiln_pass_remove_sorted(kiln_model *m, const bool *dead, int n);
/* A new value named after hint (unique); -1 on OOM. */
int kiln_pass_new_value(kiln_model *m, const char *hint);
/* The nodes of m in a topological order (order: n_nodes entries), whatever order passes
 * left them in. */
kiln_status kiln_pass_topo_order(const kiln_model *m, int *order);
/* Reorder m's nodes into a topological order (after a fusion put a node where the last
 * node of its chain was, while a kept output may have readers before it). */
kiln_status kiln_pass_sort_nodes(kiln_model *m);
/* Dtype and shape of every value of m (an array of n_values shape-only tensors, to free()),
 * also where the graph inputs have symbolic dims, which count as 1 here (shapes are then
 * indicative; dtypes do not depend on them). Unknown: dtype UNDEFINED, ndim -1. Sets each
 * node's op index. */
kiln_status kiln_pass_infer_types(kiln_model *m, kiln_tensor **out);
/* The same with symbolic dims taking the value `symbolic`. */
kiln_status kiln_pass_infer_shapes(kiln_model *m, int64_t symbolic, kiln_tensor **out);

/* kiln_pass_infer_shapes that also keeps the small values it computed (shape computations,
 * at most 64 elements) and the initializers' data: vt[v].data points into held[v]
 * (n_values entries, NULL where none; the caller frees each, then the array) or into the
 * model's initializers (valid while the model is not changed). */
kiln_status kiln_pass_infer_values(kiln_model *m, int64_t symbolic, kiln_tensor **out, kiln_tensor ***held);

/* Whether two values have the same shape whatever the graph inputs' symbolic dims are:
 * shapes are inferred twice, with symbolic dims as 1 and as 3, and must agree both times
 * (a dim that is 1 by broadcasting against a symbolic dim shows up as 1 vs 3). Shapes that
 * depend on a symbolic dim in other ways than through the ops' shape rules (a value read
 * at run time) have no inferred shape and never count as the same. Values created after
 * the probes were taken never count as the same either. */
typedef struct kiln_shape_probes {
    kiln_tensor *one, *three; /* (n) */
    int n;
} kiln_shape_probes;
kiln_status kiln_pass_shape_probes(kiln_model *m, kiln_shape_probes *out);
void kiln_pass_shape_probes_free(kiln_shape_probes *p);
/* kiln_pass_shape_probes for a pass that leaves a graph whose shapes it cannot infer as it is:
 * true with *out filled; false with *st KILN_OK (nothing to do) or KILN_ERR_OUT_OF_MEMORY. */
bool kiln_pass_shape_probes_or_skip(kiln_model *m, kiln_shape_probes *out, kiln_status *st);
bool kiln_pass_same_shape(const kiln_shape_probes *p, int a, int b);

/* The dims of every value that the graph inputs' symbolic dims (a dynamic batch) do not
 * change: shapes inferred three times, symbolic dims as 5, 320 and 448 (kiln_pass_infer_
 * shapes), and a dim kept where all three agree, -1 where they differ. A new array of
 * n_values shape-only tensors (to free()), ndim -1 where the rank is unknown or differs. A
 * dim that is the same for three batches is taken as independent of the batch; where a
 * symbolic dim is a feature map's height, 5 fails most CNNs' shape rules and leaves their
 * later values unknown, which is the safe answer. */
kiln_status kiln_pass_known_dims(kiln_model *m, kiln_tensor **out);

/* Two probes of a model's values (kiln_pass_infer_values with the symbolic dims as 320 and
 * as 448): the small values exporters compute from Shape (pads, Slice bounds, Reshape
 * targets), and the dims, known whatever the batch where the two agree. */
typedef struct kiln_value_probes {
    int n;                  /* values they hold (values added to the model since have none) */
    kiln_tensor *a, *b;     /* n shape-only tensors each, data where known */
    kiln_tensor **ha, **hb; /* what they hold (kiln_pass_infer_values' held) */
} kiln_value_probes;
kiln_status kiln_pass_value_probes(kiln_model *m, kiln_value_probes *p);
void kiln_pass_value_probes_free(kiln_value_probes *p);
/* The integers of value v (at most max, into out), a constant i64 / i32 tensor that is the
 * same in both probes. Their count, or -1 when v is not such a constant. */
int kiln_pass_probe_ints(const kiln_value_probes *p, int v, int64_t *out, int max);
/* Whether value v is absent (v < 0) or a one-element constant 0 in both probes (a Pad's
 * constant_value). */
bool kiln_pass_probe_zero(const kiln_value_probes *p, int v);

/* Whether node n is the ONNX (default-domain) op op_type. Nodes of a model being
 * rewritten have no registry index yet (n->op is set at finalize), so passes match names. */
bool kiln_pass_is(const kiln_node *n, const char *op_type);
/* Whether n is kiln's internal op op_type (domain "kiln": gradients, fused ops). */
bool kiln_pass_is_kiln(const kiln_node *n, const char *op_type);
/* Whether every entry of n's int-list attribute `name` is v (true when it is absent). */
bool kiln_pass_all_ints(const kiln_node *n, const char *name, int64_t v);
/* Input k of n, or -1 when n has fewer inputs (optional inputs left out at the end). */
int kiln_pass_opt_in(const kiln_node *n, int k);
/* producer[v]: the node computing value v, or -1 (graph inputs, initializers). A new array
 * (n_values entries) the caller frees; NULL on OOM (message on the context). */
int *kiln_pass_producers(const kiln_model *m);
/* The value of v when it is known before any run: its initializer or the `value` tensor of
 * the Constant node producing it (producer from kiln_pass_producers); NULL otherwise. */
const kiln_tensor *kiln_pass_constant(const kiln_model *m, const int *producer, int v);
/* kiln_pass_constant through Identity nodes (an exporter's alias of a shared initializer:
 * torch's in-projection biases that start equal), at most 8 of them. */
const kiln_tensor *kiln_pass_constant_through(const kiln_model *m, const int *producer, int v);
/* A pass that rewrites the default-domain nodes of one op type one at a time with the shape
 * probes: fn(m, probes, i, dead, &done) for each such node i there was at the start (it may
 * append nodes and mark the ones it replaces in dead[], n_nodes entries at the start), then
 * the dead nodes removed and the order made topological; *changed when any fn said done.
 * Nothing happens where the graph has no such node or its shapes cannot be inferred. */
typedef kiln_status (*kiln_pass_node_fn)(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done);
kiln_status kiln_pass_each_node(kiln_model *m, const char *op_type, kiln_pass_node_fn fn, bool *changed);
/* Whether the session's device has a kernel for the internal op `op` (domain "kiln"): the
 * CPU always does; on CUDA, fusions wait for their kernels in src/cuda/table.c. Asked through
 * the backend interface (kiln_backend_i.has_op). */
bool kiln_pass_device_has(const kiln_pass_options *o, const char *op);

/* A new initializer value holding t (taken over, also on failure) named after hint;
 * -1 on OOM. */
int kiln_pass_add_initializer(kiln_model *m, const char *hint, kiln_tensor *t);
/* A new 1-D I64 initializer of the n values d (a Reshape's shape) named after hint; -1 on OOM. */
int kiln_pass_add_i64s(kiln_model *m, const char *hint, int n, const int64_t *d);
/* A node appended to m: default-domain op with inputs in[] (n_in), one output out, the
 * attributes of attrs (kiln_attrs_parse text; NULL: none), the given opset, and a name
 * made unique from name; its index, or -1 (on OOM or bad attribute text). */
int kiln_pass_append_node(kiln_model *m, const char *op, const char *name, int n_in, const int *in, int out,
                          const char *attrs, int opset);
/* Free v's initializer data when nothing reads v any more (after a fold replaced it). */
void kiln_pass_drop_if_unused(kiln_model *m, int v);
/* Remove Constant nodes nothing reads any more (their values became literals or were
 * folded into new initializers); sets *changed when it removed any. */
kiln_status kiln_pass_drop_unread_constants(kiln_model *m, bool *changed);
/* Set node's input k to v, growing the input list with missing inputs (-1) as needed. */
kiln_status kiln_pass_set_input(kiln_model *m, int node, int k, int v);
/* Set node's output k to v, growing the output list with absent outputs (-1) as needed. */
kiln_status kiln_pass_set_output(kiln_model *m, int node, int k, int v);
/* Set (add or replace) an INT / FLOAT / STRING attribute of a node. */
kiln_status kiln_pass_set_int(kiln_model *m, int node, const char *name, int64_t v);
kiln_status kiln_pass_set_float(kiln_model *m, int node, const char *name, float v);
kiln_status kiln_pass_set_string(kiln_model *m, int node, const char *name, const char *v);
/* Turn node i into domain/op_type with inputs in[] (n_in) and its attributes replaced by
 * copies of src's (src may be i itself, or NULL: none); its outputs, name and opset stay.
 * Used to put a fused op where the last node of the chain it replaces was, so the node
 * order stays topological. */
kiln_status kiln_pass_rewrite(kiln_model *m, int i, const char *domain, const char *op_type,
                              int n_in, const int *in, const kiln_node *src);

/* The passes (one file each in src/passes/). */
kiln_status kiln_pass_dead_nodes(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fold_constants(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fold_bn(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fold_scale(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_row_gather(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_crop_taps(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_mean_pool(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_pool_conv(kiln_model *m, const kiln_pass_options *o, bool *changed); /* KILN_POOL_CONV=0: off */
kiln_status kiln_pass_space_to_depth(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_conv_patch(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fuse_conv(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fuse_eltwise(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fuse_loss(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_pad_channels(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_precision(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_layout(kiln_model *m, const kiln_pass_options *o, bool *changed);
/* A training BatchNormalization's statistics from the Conv writing its X (conv_bn_stats.c;
 * only with o->conv_bn_stats), and whether KILN_CUDA_CONV_STATS=1 asks for it. */
kiln_status kiln_pass_conv_bn_stats(kiln_model *m, const kiln_pass_options *o, bool *changed);
bool kiln_pass_conv_bn_stats_env(void); /* false only with KILN_CUDA_CONV_STATS=0 */
/* A training BatchNormalization's apply (+ ReLU) in the prologue of the convolutions that
 * read its Y (conv_bn_prologue.c; only with o->conv_bn_prologue), and whether
 * KILN_CUDA_BN_PROLOGUE=1 asks for it (off by default). */
kiln_status kiln_pass_conv_bn_prologue(kiln_model *m, const kiln_pass_options *o, bool *changed);
bool kiln_pass_conv_bn_prologue_env(void);
/* Reshape-Transpose-Reshape channel shuffles as kiln.ChannelShuffle (channel_shuffle.c; the
 * layout pass runs it first). */
kiln_status kiln_pass_channel_shuffle(kiln_model *m, bool *changed);
/* torch.roll's Slice - Slice - Concat as kiln.Roll, rolls in a row merged (roll.c; the
 * layout pass runs it for device plans). */
kiln_status kiln_pass_roll(kiln_model *m, bool *changed);
/* Channel moves (Concat of channels, kiln.ChannelShuffle, channel Slices and zero Pads) as
 * one kiln.ChannelGather (channel_gather.c; after the layout pass). */
kiln_status kiln_pass_channel_gather(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fuse_pool(kiln_model *m, const kiln_pass_options *o, bool *changed);
/* A training BN -> Relu -> MaxPool with picks as kiln.BnReluMaxPool (fuse_pool.c; runs last,
 * after fuse-bn and conv-bn-stats, under KILN_PASS_FUSE_POOL). */
kiln_status kiln_pass_fuse_bn_pool(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fuse_bn(kiln_model *m, const kiln_pass_options *o, bool *changed);
kiln_status kiln_pass_fuse_attention(kiln_model *m, const kiln_pass_options *o, bool *changed);

#endif
