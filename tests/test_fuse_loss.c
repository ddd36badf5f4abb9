/* test_fuse_loss.c — the fuse-loss pass (src/passes/fuse_loss.c) on the CPU.
 *
 *   - mnist-net's training graph (forward, backward, loss; the CPU trainer's, built with the
 *     pass off, as the CUDA trainer's graph is before its passes): with the pass, one
 *     kiln.LogSoftmaxNLLGrad that also writes the loss (output 2, the graph output 'loss')
 *     replaces LogSoftmax, NegativeLogLikelihoodLoss and their two gradient ops, with no
 *     kiln.LogSoftmaxNLL left; f32's seed ConstantOfShape(Shape(loss)) has become a scalar
 *     initializer 1 (AMP's seed, the graph input kiln:loss_scale, stays). The loss and every
 *     gradient are the same on random images, labels and the seeded random weights, with
 *     the same Dropout seed, as without the pass (the references round log-probabilities
 *     to f32 between the ops where the fused ops stay in double: f32's tolerance), and bit
 *     for bit those of the graph with the merged node split back here into
 *     kiln.LogSoftmaxNLL and the gradient (what the pass made before the merge).
 *   - the same graph under the fp16 precision pass, with f32's seed and with AMP's: the
 *     fused op reads the f16 logits with no Cast, its dX is f16 and its loss f32, and the
 *     graph has exactly two Casts fewer than without the pass (the logits' Cast to f32 and
 *     the gradient's back to f16); the bias gradient's sum, an fp32 op, reads the
 *     gradient's f32 second output; the same function up to f16 rounding, and bit for bit
 *     the split graph's.
 *   - a small classifier with class weights and ignore_index, trained (autograd's backward
 *     of the weighted loss; mean, sum, AMP's seed): merged, the same outputs, bit for bit
 *     the split graph's; and a forward-only graph whose log-probabilities are a graph
 *     output (kept as the fused op's second output): same outputs.
 *   - no merge where the forward must stay: log_prob a graph output of the training graph,
 *     log_prob also in the loss (its gradient flows in besides the NLL's: the backward is
 *     not fused), dLoss = loss / loss, dLoss = Identity(ConstantOfShape(Shape(loss))).
 *   - no fusion where it would not be the same op: reduction none, LogSoftmax along the
 *     batch, rank 3, float targets' absence... and with the pass switched off.
 *   - the CPU trainer's training graph keeps the unfused chain, PyTorch's op sequence whose
 *     rounding its fp32 loss is compared with (the CUDA trainer fuses; tests/gpu).
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/plan.h"
#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;

#include "same_function.h"

static const unsigned ONLY_FUSE_LOSS = ~(unsigned)KILN_PASS_FUSE_LOSS;

static int count(const kiln_model *m, const char *domain, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].op_type, op) == 0 && strcmp(m->nodes[i].domain, domain) == 0;
    return n;
}

static const kiln_node *find(const kiln_model *m, const char *op) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].op_type, op) == 0) return &m->nodes[i];
    return NULL;
}

static const kiln_node *producer_of(const kiln_model *m, int v) {
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] == v) return &m->nodes[i];
    return NULL;
}

/* --------------------------------------------------------------- graph edits */

/* The merged gradient: kiln.LogSoftmaxNLLGrad with the loss as output 2, or NULL. */
static const kiln_node *merged(const kiln_model *m) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].op_type, "LogSoftmaxNLLGrad") == 0 && m->nodes[i].n_out == 3) return &m->nodes[i];
    return NULL;
}

/* The graph the pass made before the merge, built here from opt's nodes (not by the
 * pass): the merged gradient split back into kiln.LogSoftmaxNLL(X, target, weight?) for
 * the loss and the gradient without output 2. NULL on failure. */
static kiln_model *unmerge(const kiln_model *opt) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(opt, &m);
    int found = 0;
    for (int i = 0; !st && i < m->n_nodes && !found; i++) {
        kiln_node *g = &m->nodes[i];
        if (strcmp(g->op_type, "LogSoftmaxNLLGrad") != 0 || g->n_out != 3) continue;
        found = 1;
        const int loss = g->out[2], in[3] = {g->in[0], g->in[1], g->n_in > 2 ? g->in[2] : -1};
        const int n_attrs = g->n_attrs, opset = g->opset;
        kiln_attr *a = calloc((size_t)n_attrs + 1, sizeof *a);
        st = a ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
        for (int k = 0; k < n_attrs && !st; k++) st = kiln_attr_copy(ctx, &a[k], &g->attrs[k]);
        g->n_out = 2;
        const int f = st ? -1 : kiln_model_add_node_raw(m, "LogSoftmaxNLL", "split", "kiln", in[2] >= 0 ? 3 : 2, in, 1, &loss,
                                                        n_attrs, a);
        if (f < 0) st = KILN_ERR_OUT_OF_MEMORY;
        else m->nodes[f].opset = opset;
    }
    if (!st && !found) st = kiln_fail(ctx, KILN_ERR_GRAPH, "no merged gradient to split");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        CHECK(0, "unmerge: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

typedef enum variant {
    V_AMP_SEED,      /* dLoss the graph input kiln:loss_scale, as the trainer's AMP graph */
    V_DIV_SEED,      /* dLoss = loss / loss: 1, computed from the loss's values */
    V_IDENTITY_SEED, /* dLoss = Identity(ConstantOfShape(Shape(loss))): not the seed itself */
    V_LOGP_OUTPUT,   /* log_prob a graph output too */
} variant;

/* A training graph (as autograd emitted it, seeded with ConstantOfShape(Shape(loss)))
 * edited into another that computes the same; NULL on failure. */
static kiln_model *edit(const kiln_model *train, variant v) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(train, &m);
    int gi = -1, cs = -1, sh = -1;
    for (int i = 0; !st && i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].op_type, "NegativeLogLikelihoodLossGrad") == 0) gi = i;
    const int dl = gi >= 0 ? m->nodes[gi].in[3] : -1;
    for (int i = 0; dl >= 0 && i < m->n_nodes; i++)
        if (m->nodes[i].out[0] == dl && strcmp(m->nodes[i].op_type, "ConstantOfShape") == 0) cs = i;
    for (int i = 0; cs >= 0 && i < m->n_nodes; i++)
        if (m->nodes[i].out[0] == m->nodes[cs].in[0] && strcmp(m->nodes[i].op_type, "Shape") == 0) sh = i;
    if (!st && sh < 0) st = kiln_fail(ctx, KILN_ERR_GRAPH, "no NLL gradient seeded by ConstantOfShape(Shape(loss))");
    const int loss = sh >= 0 ? m->nodes[sh].in[0] : -1;
    bool *dead = calloc((size_t)m->n_nodes + 1, sizeof *dead);
    if (!st && !dead) st = KILN_ERR_OUT_OF_MEMORY;
    int nv = -1;
    if (!st && v == V_AMP_SEED) {
        st = kiln_model_add_input(m, "kiln:loss_scale", KILN_F32, 0, (const int64_t[]){0});
        nv = kiln_model_find_value(m, "kiln:loss_scale");
        dead[cs] = dead[sh] = true;
    } else if (!st && (v == V_DIV_SEED || v == V_IDENTITY_SEED)) {
        nv = kiln_pass_new_value(m, "seed");
        const int in[2] = {v == V_DIV_SEED ? loss : dl, loss};
        if (nv < 0 || kiln_model_add_node_raw(m, v == V_DIV_SEED ? "Div" : "Identity", "seed", "", v == V_DIV_SEED ? 2 : 1,
                                              in, 1, &nv, 0, NULL) < 0)
            st = KILN_ERR_OUT_OF_MEMORY;
        dead[cs] = dead[sh] = v == V_DIV_SEED;
    } else if (!st) {
        st = kiln_model_add_output(m, m->values[m->nodes[gi].in[0]].name);
    }
    if (!st && nv >= 0) m->nodes[gi].in[3] = nv;
    if (!st) kiln_pass_remove_nodes(m, dead);
    free(dead);
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        CHECK(0, "edit %d: %s", (int)v, kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* The trainer's training graph with every gradient also a graph output: its outputs are
 * the optimizer's next values (the update is graph nodes on the CPU), and the passes'
 * checks compare the gradients themselves. */
static kiln_model *with_grads(const kiln_trainer *t) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(t->train, &m);
    for (int k = 0; k < t->n_params && !st; k++) st = kiln_model_add_output(m, m->values[t->params[k].grad_value].name);
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        CHECK(0, "the trainer's graph with its gradients: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* Feeds for g: the trainer's (data, its training graph's state), then the loss scale where
 * g has it as its last input. */
static kiln_tensor **feeds_for(const kiln_trainer *t, const kiln_model *g, kiln_tensor *scale) {
    kiln_tensor **f = calloc((size_t)g->n_inputs + 1, sizeof *f);
    for (int i = 0; f && i < g->n_inputs; i++) f[i] = i < t->n_feeds ? t->feeds[i] : scale;
    return f;
}

/* ------------------------------------------------------------------ mnist-net */

/* The trainer's graph as the CLI builds it: a symbolic batch, where only the passes'
 * inference knows the loss's dtype and rank. f32's seed must still become the scalar
 * initializer, and the forward go (an earlier version read the dtype off the value, unset
 * with a symbolic batch, and kept both ops on the CUDA trainer's f32 step). Structure only:
 * the numbers are checked above with a static batch. */
static void mnist_symbolic(kiln_precision prec) {
    const char *label = prec == KILN_PRECISION_FP32 ? "mnist-net, symbolic batch" : "mnist-net, symbolic batch, fp16";
    printf("-- %s\n", label);
    kiln_model *m = NULL, *opt = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA, .disable_passes = KILN_PASS_FUSE_LOSS};
    kiln_pass_options on = {.device = KILN_DEVICE_CPU, .precision = prec, .disabled = ONLY_FUSE_LOSS};
    if (kiln_model_mnist_net(ctx, -1, 1, 1, &m) || kiln_trainer_create(m, "loss", &o, &t) ||
        kiln_passes_apply(t->train, &on, &opt)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
    } else {
        CHECK(count(opt, "kiln", "LogSoftmaxNLL") == 0 && count(opt, "kiln", "LogSoftmaxNLLGrad") == 1,
              "%s: %d LogSoftmaxNLL and %d LogSoftmaxNLLGrad, expected 0 and 1", label,
              count(opt, "kiln", "LogSoftmaxNLL"), count(opt, "kiln", "LogSoftmaxNLLGrad"));
        const kiln_node *b = merged(opt);
        const kiln_tensor *s = b ? opt->values[b->in[3]].init : NULL;
        CHECK(s && s->dtype == KILN_F32 && s->ndim == 0 && kiln_get_f64(s, 0) == 1.0,
              "%s: dLoss is not a scalar f32 initializer 1", label);
    }
    kiln_model_free(opt);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

static void mnist(kiln_precision prec, bool amp_seed) {
    char label[120];
    snprintf(label, sizeof label, "mnist-net training graph%s%s", prec == KILN_PRECISION_FP32 ? "" : ", fp16",
             amp_seed ? ", AMP's loss-scale seed" : "");
    printf("-- %s\n", label);
    kiln_model *m = NULL, *g = NULL, *opt = NULL, *ref = NULL, *pair = NULL, *tg = NULL;
    kiln_trainer *t = NULL;
    kiln_tensor **feeds = NULL, *scale = kt_scalar(KILN_F32, 1024);
    /* the trainer's graph without the pass: what autograd emitted (f32's seed); AMP's
     * trainer seeds with the loss scale, a graph input, instead */
    kiln_train_options o = {.optimizer = KILN_OPTIM_ADADELTA, .disable_passes = KILN_PASS_FUSE_LOSS};
    if (kiln_model_mnist_net(ctx, 64, 3, 1, &m) || kiln_trainer_create(m, "loss", &o, &t)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(count(t->train, "", "LogSoftmax") == 1 && count(t->train, "kiln", "LogSoftmaxGrad") == 1 &&
              count(t->train, "", "NegativeLogLikelihoodLoss") == 1 &&
              count(t->train, "kiln", "NegativeLogLikelihoodLossGrad") == 1,
          "%s: the unfused chain is not in the training graph", label);
    tg = with_grads(t);
    g = !tg ? NULL : amp_seed ? edit(tg, V_AMP_SEED) : tg;
    kiln_pass_options on = {.device = KILN_DEVICE_CPU, .precision = prec, .disabled = ONLY_FUSE_LOSS};
    kiln_pass_options off = {.device = KILN_DEVICE_CPU, .precision = prec, .disabled = ~0u};
    if (!g || kiln_passes_apply(g, &on, &opt) || kiln_passes_apply(g, &off, &ref)) {
        CHECK(0, "%s: passes: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(count(opt, "kiln", "LogSoftmaxNLL") == 0 && count(opt, "kiln", "LogSoftmaxNLLGrad") == 1,
          "%s: %d LogSoftmaxNLL and %d LogSoftmaxNLLGrad, expected 0 and 1", label, count(opt, "kiln", "LogSoftmaxNLL"),
          count(opt, "kiln", "LogSoftmaxNLLGrad"));
    CHECK(count(opt, "", "LogSoftmax") + count(opt, "kiln", "LogSoftmaxGrad") + count(opt, "", "NegativeLogLikelihoodLoss") +
                  count(opt, "kiln", "NegativeLogLikelihoodLossGrad") == 0,
          "%s: parts of the unfused chain are left", label);
    /* four ops into one, f32's seed Shape -> ConstantOfShape into an initializer, and
     * under fp16 the logits' Cast to f32 and their gradient's back */
    const int fewer = 3 + (amp_seed ? 0 : 2) + 2 * (prec != KILN_PRECISION_FP32);
    CHECK(opt->n_nodes == ref->n_nodes - fewer, "%s: %d nodes, %d without the pass (%d fewer expected)", label,
          opt->n_nodes, ref->n_nodes, fewer);
    const kiln_node *b = merged(opt);
    CHECK(b != NULL, "%s: no gradient with the loss as output 2", label);
    if (b) {
        const int loss = b->out[2], dl = b->in[3];
        CHECK(opt->n_outputs > 0 && opt->outputs[0] == loss && strcmp(opt->values[loss].name, "loss") == 0 &&
                  opt->values[loss].dtype == KILN_F32,
              "%s: output 2 is not the f32 graph output 'loss'", label);
        CHECK(kiln_pass_uses(opt, loss) == 1, "%s: the loss has %d readers (the graph output only expected)", label,
              kiln_pass_uses(opt, loss) - 1);
        if (amp_seed) {
            CHECK(strcmp(opt->values[dl].name, "kiln:loss_scale") == 0 && opt->values[dl].is_input,
                  "%s: dLoss is '%s', not the loss scale", label, opt->values[dl].name);
        } else {
            const kiln_tensor *s = opt->values[dl].init;
            CHECK(s && s->dtype == KILN_F32 && s->ndim == 0 && kiln_get_f64(s, 0) == 1.0,
                  "%s: dLoss is not a scalar f32 initializer 1", label);
        }
        const kiln_node *xp = producer_of(opt, b->in[0]);
        CHECK(xp && strcmp(xp->op_type, "Gemm") == 0, "%s: X is not the fc2 Gemm's output (%s)", label,
              xp ? xp->op_type : "none");
        const kiln_dtype low = prec == KILN_PRECISION_FP32 ? KILN_F32 : KILN_F16;
        CHECK(opt->values[b->in[0]].dtype == low && opt->values[b->out[0]].dtype == low,
              "%s: X is %s and dX %s, expected %s", label, kiln_dtype_name(opt->values[b->in[0]].dtype),
              kiln_dtype_name(opt->values[b->out[0]].dtype), kiln_dtype_name(low));
        int readers32 = 0;
        for (int i = 0; i < opt->n_nodes; i++)
            for (int k = 0; k < opt->nodes[i].n_in; k++) {
                const kiln_node *r = &opt->nodes[i];
                readers32 += r->in[k] == b->out[1];
                if (r->in[k] == b->out[1])
                    CHECK(strcmp(r->op_type, "ReduceSumTo") == 0, "%s: %s reads dX_f32", label, r->op_type);
                /* the low Gemms (and in f32 the bias gradient's sum) read dX */
                if (r->in[k] == b->out[0])
                    CHECK(strcmp(r->op_type, "Gemm") == 0 ||
                              (prec == KILN_PRECISION_FP32 && strcmp(r->op_type, "ReduceSumTo") == 0),
                          "%s: %s reads dX", label, r->op_type);
            }
        if (prec != KILN_PRECISION_FP32) {
            const int casts = count(opt, "", "Cast"), casts_ref = count(ref, "", "Cast");
            CHECK(casts == casts_ref - 2, "%s: %d Casts, %d without the pass (two fewer expected)", label, casts, casts_ref);
            CHECK(opt->values[b->out[1]].dtype == KILN_F32 && readers32 == 1, "%s: no f32 copy of dX", label);
        } else {
            CHECK(readers32 == 0, "%s: an f32 copy of an f32 dX is read", label);
        }
    }
    pair = b ? unmerge(opt) : NULL;
    kiln_tensor *image = kt_rand(KILN_F32, 4, (int64_t[]){64, 1, 28, 28}, 0, 1, 11);
    kiln_tensor *lab = kt_rand(KILN_I64, 1, (int64_t[]){64}, 0, 10, 12);
    t->feeds[0] = image;
    t->feeds[1] = lab;
    feeds = feeds_for(t, g, scale);
    if (feeds && prec == KILN_PRECISION_FP32) same_function(label, ref, opt, feeds, 1e-6, 1e-4, NULL);
    else if (feeds) same_function(label, ref, opt, feeds, 2e-3, 2e-2, NULL);
    if (feeds && pair) {
        CHECK(count(pair, "kiln", "LogSoftmaxNLL") == 1 && !merged(pair), "%s: the split graph is not split", label);
        snprintf(label + strlen(label), sizeof label - strlen(label), ", merged vs not, bit for bit");
        same_function(label, pair, opt, feeds, 0, 0, NULL);
    }
    t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(image);
    kiln_tensor_free(lab);
out:
    free(feeds);
    kiln_tensor_free(scale);
    kiln_model_free(pair);
    kiln_model_free(opt);
    kiln_model_free(ref);
    if (g && g != tg) kiln_model_free(g);
    kiln_model_free(tg);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

/* ----------------------------------------------------------- small graphs */

static kiln_status add_init(kiln_model *m, const char *name, int nd, const int64_t *dims, uint64_t seed) {
    kiln_tensor *t = kt_rand(KILN_F32, nd, dims, -1, 1, seed);
    kiln_status st = t ? kiln_model_add_initializer(m, name, t) : KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(t);
    return st;
}

typedef struct classifier {
    const char *reduction;  /* NULL: the default (mean) */
    int64_t ignore_index;   /* < -1000: none */
    bool weights;
    int64_t ls_axis;        /* LogSoftmax's axis */
    int opset;
    bool logp_output;       /* log_prob a graph output too */
    bool rank3;             /* X (N, C, 2) */
    bool logp_term;         /* loss = NLL + ReduceMean(log_prob): log_prob gets a gradient of its own */
} classifier;

/* x (N, 6) -> Gemm(w (C, 6), b) -> [Reshape to (N, C/2, 2) when rank3] -> LogSoftmax -> NLL */
static kiln_model *build_classifier(const classifier *c, int64_t N) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    const int64_t C = 4;
    kiln_status st = kiln_model_create(ctx, &m);
    if (!st) st = kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){N, 6});
    if (!st) st = kiln_model_add_input(m, "label", KILN_I64, c->rank3 ? 2 : 1, (int64_t[]){N, 2});
    if (!st) st = add_init(m, "w", 2, (int64_t[]){C, 6}, 21);
    if (!st) st = add_init(m, "b", 1, (int64_t[]){C}, 22);
    if (!st && c->weights) {
        kiln_tensor *cw = kt_make(KILN_F32, 1, KT_DIMS(c->rank3 ? 2 : 4), KT_VALS(0.5, 2.0, 1.0, 0.25));
        st = cw ? kiln_model_add_initializer(m, "cw", cw) : KILN_ERR_OUT_OF_MEMORY;
        kiln_tensor_free(cw);
    }
    if (!st) st = kiln_model_add_node(m, "Gemm", "fc", 3, (const char *[]){"x", "w", "b"}, 1, (const char *[]){"logits"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    const char *scores = "logits";
    if (!st && c->rank3) {
        kiln_tensor *shape = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 2, 2));
        st = shape ? kiln_model_add_initializer(m, "shape3", shape) : KILN_ERR_OUT_OF_MEMORY;
        kiln_tensor_free(shape);
        if (!st)
            st = kiln_model_add_node(m, "Reshape", "r3", 2, (const char *[]){"logits", "shape3"}, 1, (const char *[]){"s3"}, NULL);
        scores = "s3";
    }
    if (!st)
        st = kiln_model_add_node(m, "LogSoftmax", "ls", 1, (const char *[]){scores}, 1, (const char *[]){"logp"}, &n);
    if (!st) {
        st = kiln_node_set_int(n, "axis", c->ls_axis);
        n->opset = c->opset;
    }
    if (!st)
        st = kiln_model_add_node(m, "NegativeLogLikelihoodLoss", "nll", c->weights ? 3 : 2,
                                 (const char *[]){"logp", "label", "cw"}, 1,
                                 (const char *[]){c->logp_term ? "nll_loss" : "loss"}, &n);
    if (!st && c->reduction) st = kiln_node_set_string(n, "reduction", c->reduction);
    if (!st && c->ignore_index >= -1000) st = kiln_node_set_int(n, "ignore_index", c->ignore_index);
    if (!st && c->logp_term) {
        st = kiln_model_add_node(m, "ReduceMean", "lpm", 1, (const char *[]){"logp"}, 1, (const char *[]){"lpm"}, &n);
        if (!st) st = kiln_node_set_int(n, "keepdims", 0);
        if (!st)
            st = kiln_model_add_node(m, "Add", "total", 2, (const char *[]){"nll_loss", "lpm"}, 1, (const char *[]){"loss"},
                                     NULL);
    }
    if (!st && c->logp_output) st = kiln_model_add_output(m, "logp");
    if (!st) st = kiln_model_add_output(m, "loss");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        CHECK(0, "classifier: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* Labels in [0, C) with some equal to ignore_index (1 here), never all ignored. */
static kiln_tensor *labels(int64_t N, bool rank3) {
    kiln_tensor *l = rank3 ? kt_rand(KILN_I64, 2, (int64_t[]){N, 2}, 0, 2, 31) : kt_rand(KILN_I64, 1, (int64_t[]){N}, 0, 4, 31);
    if (l) ((int64_t *)l->data)[0] = 0;
    return l;
}

/* The forward graph (inference: log_prob a graph output) through the pass. */
static void forward_case(const char *label, const classifier *c, int fused) {
    printf("-- %s\n", label);
    const int64_t N = 37;
    kiln_model *m = build_classifier(c, N), *opt = NULL, *ref = NULL;
    kiln_pass_options on = {.device = KILN_DEVICE_CPU, .disabled = ONLY_FUSE_LOSS};
    kiln_pass_options off = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    if (!m || kiln_passes_apply(m, &on, &opt) || kiln_passes_apply(m, &off, &ref)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    CHECK(count(opt, "kiln", "LogSoftmaxNLL") == fused, "%s: %d LogSoftmaxNLL, expected %d", label,
          count(opt, "kiln", "LogSoftmaxNLL"), fused);
    if (fused) {
        const kiln_node *f = find(opt, "LogSoftmaxNLL");
        CHECK(f && f->n_out == (c->logp_output ? 2 : 1), "%s: log_prob %s", label,
              c->logp_output ? "not kept for the graph output" : "kept with no reader");
    } else {
        CHECK(opt->n_nodes == ref->n_nodes, "%s: the graph changed", label);
    }
    kiln_tensor *in[2] = {kt_rand(KILN_F32, 2, (int64_t[]){N, 6}, -2, 2, 30), labels(N, c->rank3)};
    same_function(label, ref, opt, in, 1e-7, 1e-6, NULL);
    kiln_tensor_free(in[0]);
    kiln_tensor_free(in[1]);
out:
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_model_free(m);
}

/* The classifier's training graph (the CPU trainer's, without the pass; edited where
 * edit_as >= 0) through the pass. merge: the forward goes into the gradient (which then
 * computes the loss and gradients of the graph the pass made before, bit for bit), else
 * kiln.LogSoftmaxNLL stays and the gradient is fused (fused_grad) or not. */
static void training_case(const char *label, const classifier *c, int edit_as, bool merge, bool fused_grad) {
    printf("-- %s\n", label);
    const int64_t N = 37;
    kiln_model *m = build_classifier(c, N), *g = NULL, *opt = NULL, *ref = NULL, *pair = NULL, *tg = NULL;
    kiln_trainer *t = NULL;
    kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .disable_passes = KILN_PASS_FUSE_LOSS};
    kiln_pass_options on = {.device = KILN_DEVICE_CPU, .disabled = ONLY_FUSE_LOSS};
    kiln_pass_options off = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    if (!m || kiln_trainer_create(m, "loss", &o, &t)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    tg = with_grads(t);
    g = !tg ? NULL : edit_as >= 0 ? edit(tg, (variant)edit_as) : tg;
    if (!g || kiln_passes_apply(g, &on, &opt) || kiln_passes_apply(g, &off, &ref)) {
        CHECK(0, "%s: %s", label, kiln_context_message(ctx));
        goto out;
    }
    const int nf = count(opt, "kiln", "LogSoftmaxNLL"), ng = count(opt, "kiln", "LogSoftmaxNLLGrad");
    if (merge) {
        CHECK(nf == 0 && ng == 1 && merged(opt), "%s: not merged (%d LogSoftmaxNLL, %d LogSoftmaxNLLGrad)", label, nf, ng);
        CHECK(count(opt, "", "Shape") + count(opt, "", "ConstantOfShape") == 0, "%s: the seed's Shape or ConstantOfShape left",
              label);
    } else {
        CHECK(nf == 1 && ng == (fused_grad ? 1 : 0) && !merged(opt), "%s: %d LogSoftmaxNLL, %d LogSoftmaxNLLGrad%s", label,
              nf, ng, merged(opt) ? ", merged" : "");
    }
    kiln_tensor *x = kt_rand(KILN_F32, 2, (int64_t[]){N, 6}, -2, 2, 30), *l = labels(N, false), *scale = kt_scalar(KILN_F32, 8);
    t->feeds[0] = x;
    t->feeds[1] = l;
    kiln_tensor **feeds = feeds_for(t, g, scale);
    if (feeds) same_function(label, ref, opt, feeds, 1e-6, 1e-5, NULL);
    if (feeds && merge && (pair = unmerge(opt)) != NULL) {
        char l2[200];
        snprintf(l2, sizeof l2, "%s, merged vs not, bit for bit", label);
        same_function(l2, pair, opt, feeds, 0, 0, NULL);
    }
    free(feeds);
    t->feeds[0] = t->feeds[1] = NULL;
    kiln_tensor_free(x);
    kiln_tensor_free(l);
    kiln_tensor_free(scale);
out:
    kiln_model_free(pair);
    kiln_model_free(opt);
    kiln_model_free(ref);
    if (g && g != tg) kiln_model_free(g);
    kiln_model_free(tg);
    kiln_trainer_free(t);
    kiln_model_free(m);
}

/* The CPU trainer keeps the unfused chain (PyTorch's op sequence, which its fp32 loss is
 * compared with), with or without the flag; the CUDA trainer's graph is checked on the GPU
 * (tests/gpu/test_cuda_ops.c). */
static void trainer_case(void) {
    printf("-- trainer\n");
    const int64_t N = 37;
    const classifier c = {.ignore_index = -2000, .ls_axis = 1, .opset = 13};
    kiln_trainer *t[2] = {0};
    kiln_model *m = build_classifier(&c, N);
    for (int k = 0; k < 2 && m; k++) {
        kiln_train_options o = {.optimizer = KILN_OPTIM_SGD, .lr = 0.5f, .disable_passes = k ? KILN_PASS_FUSE_LOSS : 0};
        if (kiln_trainer_create(m, "loss", &o, &t[k])) {
            CHECK(0, "trainer %d: %s", k, kiln_context_message(ctx));
            break;
        }
        const int fused = count(t[k]->train, "kiln", "LogSoftmaxNLL") + count(t[k]->train, "kiln", "LogSoftmaxNLLGrad");
        CHECK(fused == 0, "CPU trainer%s: %d fused loss ops in its training graph", k ? " with fuse-loss disabled" : "",
              fused);
    }
    kiln_trainer_free(t[0]);
    kiln_trainer_free(t[1]);
    kiln_model_free(m);
}

int main(void) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    mnist(KILN_PRECISION_FP32, false);
    mnist(KILN_PRECISION_FP16, false);
    mnist(KILN_PRECISION_FP16, true);
    mnist_symbolic(KILN_PRECISION_FP32);
    mnist_symbolic(KILN_PRECISION_FP16);

    const classifier plain = {.ignore_index = -2000, .ls_axis = 1, .opset = 13};
    classifier c = plain;
    c.logp_output = true;
    forward_case("forward, log_prob a graph output", &c, 1);
    c = plain;
    forward_case("forward, log_prob unread", &c, 1);
    c = plain;
    c.reduction = "sum";
    c.weights = true;
    c.ignore_index = 1;
    c.ls_axis = -1;
    forward_case("forward, weighted sum, ignore_index, axis -1", &c, 1);
    c = plain;
    c.opset = 11; /* coerced 2-D at axis 1: the same rows */
    forward_case("forward, opset 11", &c, 1);
    c = plain;
    c.reduction = "none";
    forward_case("not fused: reduction none", &c, 0);
    c = plain;
    c.ls_axis = 0;
    forward_case("not fused: LogSoftmax along the batch", &c, 0);
    c = plain;
    c.rank3 = true;
    forward_case("not fused: rank 3", &c, 0);

    c = plain;
    c.weights = true;
    c.ignore_index = 1;
    training_case("training, weighted mean, ignore_index", &c, -1, true, true);
    c = plain;
    c.reduction = "sum";
    training_case("training, sum", &c, -1, true, true);
    c.weights = true;
    training_case("training, weighted sum, AMP's seed", &c, V_AMP_SEED, true, true);
    /* the forward stays */
    c = plain;
    training_case("not merged: log_prob a graph output", &c, V_LOGP_OUTPUT, false, true);
    c.logp_term = true;
    training_case("not merged: log_prob in the loss too (a dLogProb)", &c, -1, false, false);
    c = plain;
    training_case("not merged: dLoss = loss / loss", &c, V_DIV_SEED, false, true);
    training_case("not merged: dLoss = Identity(the seed)", &c, V_IDENTITY_SEED, false, true);

    trainer_case();

    /* switched off, nothing changes */
    kiln_model *m = build_classifier(&plain, 5), *o2 = NULL;
    kiln_pass_options off = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    CHECK(m && !kiln_passes_apply(m, &off, &o2) && o2 && count(o2, "kiln", "LogSoftmaxNLL") == 0,
          "the pass ran switched off");
    kiln_model_free(o2);
    kiln_model_free(m);

    kiln_context_free(ctx);
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
