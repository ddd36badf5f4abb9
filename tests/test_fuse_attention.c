/* test_fuse_attention.c — the fuse-attention pass (src/passes/fuse_attention.c) and the
 * planner's pruning of nodes that only fed folded shape computations, on the CPU.
 *
 *   - a hand-built attention block (symbolic batch): packed in-projection, Reshape to
 *     (B, L, 3, H, D), Transpose (2, 0, 3, 1, 4), Gathers, q * c, MatMul with k^T, / c2,
 *     + a bias (H, L, L), Softmax, MatMul with v, head merge Transpose + Reshape, a final
 *     product: fused into one kiln.Attention with no Softmax, Gather or Transpose left, the
 *     same outputs (1e-5 relative, f32) at batch 2. Not fused where the Softmax output has a
 *     second reader or the Softmax is not on the last axis. With the heads merged into the
 *     rows ((B, H * L, D) operands, whose rows take no one stride in the packed layout),
 *     fused with the chains cut where they can be expressed, and the same outputs.
 *   - torchvision exports (tests/data/attn_*.onnx, dynamo=False, opset 17, dynamic batch;
 *     made by the script in this file's comment at the end): a ViT (2 layers, 2 heads), a
 *     one-stage Swin (a plain and a shifted-window block: relative-position bias and the
 *     mask), a one-block MaxViT (Einsum products, Slice-chunked q/k/v), a one-stage Swin V2
 *     (cosine attention: q and k L2-normalized, a per-head logit scale, the relative-position
 *     bias from a small MLP, the mask; no ReduceL2 may be left): every Softmax fused
 *     (count), outputs within 1e-5 relative of the unfused graph at batch 2; and the
 *     plan of the fused ViT runs no Transpose or Gather (the q/k/v chains that Shape
 *     nodes still read are pruned after folding).
 *   - the Swin exports' torch.rolls as kiln.Roll (kiln_pass_roll, which the layout pass runs
 *     for device plans): two nodes of two axes each, bit for bit the same outputs.
 * Exits non-zero on any failure. */
#include "check.h"
#include "core/optest.h"
#include "core/plan.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static kiln_context *ctx;

#include "same_function.h"

static int count(const kiln_model *m, const char *domain, const char *op) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        n += strcmp(m->nodes[i].op_type, op) == 0 && strcmp(m->nodes[i].domain, domain) == 0;
    return n;
}

static kiln_status add_init(kiln_model *m, const char *name, kiln_tensor *t) {
    kiln_status st = t ? kiln_model_add_initializer(m, name, t) : KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_free(t);
    return st;
}

static kiln_tensor *ints(int n, const int64_t *v) {
    double d[8];
    for (int i = 0; i < n; i++) d[i] = (double)v[i];
    return kt_make(KILN_I64, 1, KT_DIMS(n), d);
}

typedef struct variant {
    const char *label;
    bool softmax_read_twice, softmax_axis2, merged_rows;
    bool batch_first; /* nn.MultiheadAttention's swaps: x to (L, B, E) before the in-projection, back after the out-projection */
} variant;

enum { L = 5, H = 2, D = 8, E = H * D };

/* x (B, L, E) -> attention block -> y (B, L, E). */
static kiln_status block(const variant *v, kiln_model **out) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (!st) st = kiln_model_add_input(m, "x", KILN_F32, 3, (int64_t[]){-1, L, E});
    if (!st) st = add_init(m, "w_in", kt_rand(KILN_F32, 2, KT_DIMS(E, 3 * E), -0.5, 0.5, 41));
    if (!st) st = add_init(m, "w_out", kt_rand(KILN_F32, 2, KT_DIMS(E, E), -0.5, 0.5, 42));
    if (!st) st = add_init(m, "bias", kt_rand(KILN_F32, 3, KT_DIMS(H, L, L), -1, 1, 43));
    if (!st) st = add_init(m, "s5", ints(5, (int64_t[]){0, 0, 3, H, D}));
    if (!st) st = add_init(m, "s3", ints(3, (int64_t[]){0, 0, E}));
    if (!st) st = add_init(m, "i0", kt_scalar(KILN_I64, 0));
    if (!st) st = add_init(m, "i1", kt_scalar(KILN_I64, 1));
    if (!st) st = add_init(m, "i2", kt_scalar(KILN_I64, 2));
    if (!st) st = add_init(m, "c1", kt_scalar(KILN_F32, 0.6));
    if (!st) st = add_init(m, "c2", kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1.3)));
    if (!st && v->batch_first) {
        st = kiln_model_add_node(m, "Transpose", "bf_in", 1, (const char *[]){"x"}, 1, (const char *[]){"xt"}, &n);
        if (!st) st = kiln_node_set_ints(n, "perm", 3, (int64_t[]){1, 0, 2});
    }
    if (!st)
        st = kiln_model_add_node(m, "MatMul", "in_proj", 2, (const char *[]){v->batch_first ? "xt" : "x", "w_in"}, 1,
                                 (const char *[]){"qkv"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Reshape", "split_heads", 2, (const char *[]){"qkv", "s5"}, 1, (const char *[]){"r5"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Transpose", "t5", 1, (const char *[]){"r5"}, 1, (const char *[]){"t5"}, &n);
    if (!st) st = kiln_node_set_ints(n, "perm", 5, v->batch_first ? (int64_t[]){2, 1, 3, 0, 4} : (int64_t[]){2, 0, 3, 1, 4});
    const char *gi[3] = {"i0", "i1", "i2"}, *go[3] = {"q", "k", "v"};
    for (int i = 0; i < 3 && !st; i++)
        st = kiln_model_add_node(m, "Gather", go[i], 2, (const char *[]){"t5", gi[i]}, 1, (const char *[]){go[i]}, NULL);
    const char *q = "qs", *kt = "kt", *vv = "v", *sm_in = "sb";
    if (!st) st = kiln_model_add_node(m, "Mul", "q_scale", 2, (const char *[]){"q", "c1"}, 1, (const char *[]){"qs"}, NULL);
    if (!st && v->merged_rows) {
        /* the heads merged into the rows: (B, H * L, D) operands, attention over all heads'
         * tokens. The packed in-projection's rows (H: stride D, L: stride 3E) take no one
         * stride, so each chain is cut where its source is contiguous (the packed
         * Transpose stays), and the output chain after its first Reshape */
        if (!st) st = add_init(m, "sm3", ints(3, (int64_t[]){-1, H * L, D}));
        if (!st) st = kiln_model_add_node(m, "Reshape", "q_m", 2, (const char *[]){"qs", "sm3"}, 1, (const char *[]){"qm"}, NULL);
        if (!st) st = kiln_model_add_node(m, "Reshape", "k_m", 2, (const char *[]){"k", "sm3"}, 1, (const char *[]){"km"}, NULL);
        if (!st) st = kiln_model_add_node(m, "Transpose", "k_t", 1, (const char *[]){"km"}, 1, (const char *[]){"kt"}, &n);
        if (!st) st = kiln_node_set_ints(n, "perm", 3, (int64_t[]){0, 2, 1});
        if (!st) st = kiln_model_add_node(m, "Reshape", "v_m", 2, (const char *[]){"v", "sm3"}, 1, (const char *[]){"vm"}, NULL);
        q = "qm";
        vv = "vm";
        sm_in = "sd";
    } else {
        if (!st) st = kiln_model_add_node(m, "Transpose", "k_t", 1, (const char *[]){"k"}, 1, (const char *[]){"kt"}, &n);
        if (!st) st = kiln_node_set_ints(n, "perm", 4, (int64_t[]){0, 1, 3, 2});
    }
    if (!st) st = kiln_model_add_node(m, "MatMul", "qk", 2, (const char *[]){q, kt}, 1, (const char *[]){"s"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Div", "s_div", 2, (const char *[]){"s", "c2"}, 1, (const char *[]){"sd"}, NULL);
    if (!st && !v->merged_rows)
        st = kiln_model_add_node(m, "Add", "s_bias", 2, (const char *[]){"bias", "sd"}, 1, (const char *[]){"sb"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Softmax", "softmax", 1, (const char *[]){sm_in}, 1, (const char *[]){"p"}, &n);
    if (!st && v->softmax_axis2) st = kiln_node_set_int(n, "axis", 2);
    if (!st && v->merged_rows) {
        if (!st) st = add_init(m, "s4", ints(4, (int64_t[]){-1, H, L, D}));
        if (!st) st = kiln_model_add_node(m, "MatMul", "pv", 2, (const char *[]){"p", vv}, 1, (const char *[]){"o3"}, NULL);
        if (!st) st = kiln_model_add_node(m, "Reshape", "o_r", 2, (const char *[]){"o3", "s4"}, 1, (const char *[]){"o"}, NULL);
    }
    if (!st && !v->merged_rows)
        st = kiln_model_add_node(m, "MatMul", "pv", 2, (const char *[]){"p", "v"}, 1, (const char *[]){"o"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Transpose", "merge_t", 1, (const char *[]){"o"}, 1, (const char *[]){"ot"}, &n);
    if (!st) st = kiln_node_set_ints(n, "perm", 4, v->batch_first ? (int64_t[]){2, 0, 1, 3} : (int64_t[]){0, 2, 1, 3});
    if (!st) st = kiln_model_add_node(m, "Reshape", "merge_r", 2, (const char *[]){"ot", "s3"}, 1, (const char *[]){"om"}, NULL);
    if (!st)
        st = kiln_model_add_node(m, "MatMul", "out_proj", 2, (const char *[]){"om", "w_out"}, 1,
                                 (const char *[]){v->batch_first ? "yt" : "y"}, NULL);
    if (!st && v->batch_first) {
        st = kiln_model_add_node(m, "Transpose", "bf_out", 1, (const char *[]){"yt"}, 1, (const char *[]){"y"}, &n);
        if (!st) st = kiln_node_set_ints(n, "perm", 3, (int64_t[]){1, 0, 2});
    }
    if (!st) st = kiln_model_add_output(m, "y");
    if (!st && v->softmax_read_twice) st = kiln_model_add_output(m, "p");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}

/* m through the pass alone (fused) and through none (ref), both on the CPU. */
static kiln_status apply(const kiln_model *m, kiln_model **fused, kiln_model **ref) {
    const kiln_pass_options on = {.device = KILN_DEVICE_CPU,
                                  .disabled = ~(unsigned)(KILN_PASS_FUSE_ATTENTION | KILN_PASS_ATTENTION_ROWS)};
    const kiln_pass_options off = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    kiln_status st = kiln_passes_apply(m, &on, fused);
    if (!st) st = kiln_passes_apply(m, &off, ref);
    return st;
}

static void hand_built(const variant *v, int want_fused) {
    printf("-- %s\n", v->label);
    kiln_model *m = NULL, *opt = NULL, *ref = NULL;
    kiln_status st = block(v, &m);
    if (!st) st = apply(m, &opt, &ref);
    CHECK(!st, "%s: %s", v->label, kiln_context_message(ctx));
    if (!st) {
        const int fused = count(opt, "kiln", "Attention");
        CHECK(fused == want_fused, "%s: %d kiln.Attention, expected %d", v->label, fused, want_fused);
        if (want_fused) {
            /* cut: the packed Transpose and the head merge's stay */
            const int want_tr = v->merged_rows ? 2 : 0, want_g = 0;
            const int tr = count(opt, "", "Transpose"), g = count(opt, "", "Gather");
            CHECK(count(opt, "", "Softmax") == 0, "%s: Softmax left", v->label);
            CHECK(tr == want_tr && g == want_g, "%s: %d Transposes and %d Gathers left, expected %d and %d", v->label,
                  tr, g, want_tr, want_g);
        } else {
            CHECK(count(opt, "", "Softmax") == 1, "%s: the Softmax went", v->label);
            /* attention-rows' moves undone or harmless: as many Transposes as before */
            CHECK(count(opt, "", "Transpose") == count(m, "", "Transpose"), "%s: %d Transposes, %d before the pass",
                  v->label, count(opt, "", "Transpose"), count(m, "", "Transpose"));
            for (int i = 0; v->batch_first && i < opt->n_nodes; i++) {
                const kiln_node *n = &opt->nodes[i];
                if (strcmp(n->name, "in_proj") != 0) continue;
                const kiln_node *p = NULL;
                for (int j = 0; j < opt->n_nodes && !p; j++)
                    if (opt->nodes[j].n_out > 0 && opt->nodes[j].out[0] == n->in[0]) p = &opt->nodes[j];
                CHECK(p && strcmp(p->op_type, "Transpose") == 0, "%s: the in-projection reads %s, not the swap",
                      v->label, p ? p->op_type : "a graph input");
            }
        }
        kiln_tensor *x = kt_rand(KILN_F32, 3, KT_DIMS(2, L, E), -1, 1, 44);
        same_function(v->label, ref, opt, &x, 1e-6, 1e-5, NULL);
        kiln_tensor_free(x);
    }
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_model_free(m);
}

/* Run-list nodes of op in m's plan for input x. */
static int plan_count(kiln_model *m, kiln_tensor *x, const char *op) {
    kiln_plan *p = NULL;
    if (kiln_plan_build(m, &x, true, true, &p)) {
        CHECK(0, "plan: %s", kiln_context_message(ctx));
        return -1;
    }
    kiln_plan_view_t v;
    kiln_plan_view(p, &v);
    int n = 0;
    for (int i = 0; i < v.n_exec; i++) {
        const kiln_op_ctx *c = kiln_plan_exec_op_ctx(&v, i);
        if (strcmp(c->node->op_type, op) != 0) continue;
        n++;
        if (getenv("ATTN_VERBOSE")) {
            char sh[200];
            printf("  runs %s '%s' %s\n", op, c->node->name, kiln_shape_str(c->out[0], sh, sizeof sh));
        }
    }
    kiln_plan_free(p);
    return n;
}

static void exported(const char *dir, const char *file, int softmaxes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    printf("-- %s\n", file);
    kiln_model *m = NULL, *opt = NULL, *ref = NULL;
    kiln_status st = kiln_model_load_onnx(ctx, path, &m);
    if (!st) st = apply(m, &opt, &ref);
    CHECK(!st, "%s: %s", file, kiln_context_message(ctx));
    if (st) goto done;
    CHECK(count(m, "", "Softmax") == softmaxes, "%s: %d Softmax in the export, expected %d", file,
          count(m, "", "Softmax"), softmaxes);
    const int fused = count(opt, "kiln", "Attention");
    CHECK(fused == softmaxes && count(opt, "", "Softmax") == 0, "%s: %d of %d attention blocks fused", file, fused,
          softmaxes);
    printf("%s: %d kiln.Attention; nodes %d -> %d\n", file, fused, ref->n_nodes, opt->n_nodes);
    /* Swin V2's cosine attention: F.normalize of q and k (ReduceL2 -> Clip -> Expand -> Div)
     * and the per-head logit scale go into the node */
    CHECK(count(opt, "", "ReduceL2") == 0, "%s: %d ReduceL2 left after the pass (in the export: %d)", file,
          count(opt, "", "ReduceL2"), count(m, "", "ReduceL2"));
    for (int i = 0; getenv("ATTN_VERBOSE") && i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        if (strcmp(n->op_type, "Attention") != 0) continue;
        for (int a = 0; a < n->n_attrs; a++) {
            printf("  %s:", n->attrs[a].name);
            for (int k = 0; k < n->attrs[a].n; k++) printf(" %lld", (long long)n->attrs[a].ints[k]);
            printf("\n");
        }
        for (int k = 0; k < n->n_in; k++) printf("  in %d: %s\n", k, n->in[k] >= 0 ? opt->values[n->in[k]].name : "-");
    }
    kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 32, 32), -1, 1, 45);
    same_function(file, ref, opt, &x, 1e-6, 1e-5, NULL);
    if (strcmp(file, "attn_vit_tiny.onnx") == 0) {
        const int tr0 = plan_count(ref, x, "Transpose"), tr = plan_count(opt, x, "Transpose"),
                  g = plan_count(opt, x, "Gather"), mm = plan_count(opt, x, "MatMul");
        /* attention-rows off: nn.MultiheadAttention's batch-first swaps (B, L, E) <-> (L, B, E)
         * around the projections run, two a layer */
        kiln_model *rows_off = NULL;
        const kiln_pass_options no_rows = {.device = KILN_DEVICE_CPU, .disabled = ~(unsigned)KILN_PASS_FUSE_ATTENTION};
        int tr1 = -1;
        if (kiln_passes_apply(m, &no_rows, &rows_off) == KILN_OK) {
            tr1 = plan_count(rows_off, x, "Transpose");
            same_function("attn_vit_tiny.onnx, attention-rows off", ref, rows_off, &x, 1e-6, 1e-5, NULL);
        }
        kiln_model_free(rows_off);
        printf("%s: plan runs %d Transposes (attention-rows off %d, unfused %d), %d Gathers, %d MatMuls\n", file, tr,
               tr1, tr0, g, mm);
        /* the patch embedding's Transpose alone runs: the q/k/v split's are attention views,
         * and the batch-first swaps moved next to the attention became views too */
        CHECK(g == 1, "%s: the fused plan runs %d Gathers (the class token's alone expected)", file, g);
        CHECK(tr == 1, "%s: the fused plan runs %d Transposes, expected 1 (unfused %d)", file, tr, tr0);
        CHECK(tr1 == 1 + 2 * 2, "%s: with attention-rows off the plan runs %d Transposes, expected 5", file, tr1);
    }
    kiln_tensor_free(x);
done:
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_model_free(m);
}

/* kiln_pass_roll (the layout pass runs it for device plans) on a Swin export: each shifted
 * block's two torch.rolls (Slice - Slice - Concat on H, then on W, forward and back) become
 * `want` kiln.Roll nodes of two axes each, no Slice of the rolls left, bit for bit the same
 * outputs on the CPU. */
static void rolls(const char *dir, const char *file, int want) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    printf("-- %s: rolls\n", file);
    kiln_model *m = NULL, *opt = NULL, *ref = NULL;
    const kiln_pass_options off = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    kiln_status st = kiln_model_load_onnx(ctx, path, &m);
    if (!st) st = kiln_passes_apply(m, &off, &ref);
    if (!st) st = kiln_passes_apply(m, &off, &opt);
    bool changed = false;
    if (!st) st = kiln_pass_roll(opt, &changed);
    kiln_tensor *vt = NULL; /* (the op indices of the rewritten nodes, as the pass pipeline sets them) */
    if (!st) st = kiln_pass_infer_types(opt, &vt);
    free(vt);
    CHECK(!st, "%s: %s", file, kiln_context_message(ctx));
    if (!st) {
        int n = 0, two = 0;
        for (int i = 0; i < opt->n_nodes; i++) {
            const kiln_node *nd = &opt->nodes[i];
            if (strcmp(nd->op_type, "Roll") != 0 || strcmp(nd->domain, "kiln") != 0) continue;
            int na = 0;
            kiln_attr_ints(nd, "axes", &na);
            n++;
            two += na == 2;
        }
        const int c0 = count(ref, "", "Concat"), c1 = count(opt, "", "Concat"), s0 = count(ref, "", "Slice"),
                  s1 = count(opt, "", "Slice");
        printf("%s: %d kiln.Roll (%d of two axes); Concat %d -> %d, Slice %d -> %d\n", file, n, two, c0, c1, s0, s1);
        CHECK(changed && n == want && two == want && c1 == c0 - 2 * want && s1 == s0 - 4 * want,
              "%s: %d kiln.Roll (%d of two axes), want %d; Concat %d -> %d, Slice %d -> %d", file, n, two, want, c0, c1,
              s0, s1);
        kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 32, 32), -1, 1, 48);
        same_function(file, ref, opt, &x, 0, 0, NULL);
        kiln_tensor_free(x);
    }
    kiln_model_free(opt);
    kiln_model_free(ref);
    kiln_model_free(m);
}

/* The precision pass (fp16, all passes on) on an export: every kiln.Attention reads Q, K, V
 * and writes its output in f16, with no Cast in front of those inputs nor after it (the
 * softmax runs in f32 inside the op); a plain Softmax stays f32 (test_precision). */
static void fp16_policy(const char *dir, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    printf("-- %s in fp16\n", file);
    kiln_model *m = NULL, *opt = NULL;
    kiln_tensor *vt = NULL;
    const kiln_pass_options po = {.device = KILN_DEVICE_CPU, .precision = KILN_PRECISION_FP16};
    kiln_status st = kiln_model_load_onnx(ctx, path, &m);
    if (!st) st = kiln_passes_apply(m, &po, &opt);
    if (!st) st = kiln_pass_infer_types(opt, &vt);
    CHECK(!st, "%s: %s", file, kiln_context_message(ctx));
    int seen = 0;
    for (int i = 0; !st && i < opt->n_nodes; i++) {
        const kiln_node *n = &opt->nodes[i];
        if (strcmp(n->op_type, "Attention") != 0) continue;
        seen++;
        for (int k = 0; k < 3; k++) {
            CHECK(vt[n->in[k]].dtype == KILN_F16, "%s: Attention input %d is %s", file, k,
                  kiln_dtype_name(vt[n->in[k]].dtype));
            for (int j = 0; j < opt->n_nodes; j++)
                for (int o = 0; o < opt->nodes[j].n_out; o++)
                    CHECK(!(opt->nodes[j].out[o] == n->in[k] && strcmp(opt->nodes[j].op_type, "Cast") == 0),
                          "%s: Attention input %d comes from a Cast", file, k);
        }
        CHECK(vt[n->out[0]].dtype == KILN_F16, "%s: Attention output is %s", file, kiln_dtype_name(vt[n->out[0]].dtype));
        for (int j = 0; j < opt->n_nodes; j++)
            for (int k = 0; k < opt->nodes[j].n_in; k++)
                CHECK(!(opt->nodes[j].in[k] == n->out[0] && strcmp(opt->nodes[j].op_type, "Cast") == 0),
                      "%s: the Attention output feeds a Cast", file);
    }
    CHECK(!st && seen == 2, "%s: %d kiln.Attention in the fp16 graph, expected 2", file, seen);
    printf("%s: %d kiln.Attention in f16, %d Casts in the graph\n", file, seen, opt ? count(opt, "", "Cast") : -1);
    /* and it runs: within fp16's error of the unfused fp32 graph */
    kiln_model *ref = NULL;
    const kiln_pass_options off = {.device = KILN_DEVICE_CPU, .disabled = ~0u};
    if (!st && !kiln_passes_apply(m, &off, &ref)) {
        kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 32, 32), -1, 1, 46);
        char label[300];
        snprintf(label, sizeof label, "%s fp16 vs fp32", file);
        same_function(label, ref, opt, &x, 3e-2, 3e-2, NULL);
        kiln_tensor_free(x);
    }
    kiln_model_free(ref);
    free(vt);
    kiln_model_free(opt);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    if (argc > 2 && strcmp(argv[1], "--count") == 0) {
        /* test_fuse_attention --count MODEL.onnx: the fusions on a full-size export */
        kiln_model *m = NULL, *opt = NULL;
        const kiln_pass_options on = {.device = KILN_DEVICE_CPU, .disabled = ~(unsigned)KILN_PASS_FUSE_ATTENTION};
        kiln_status st = kiln_model_load_onnx(ctx, argv[2], &m);
        if (!st) st = kiln_passes_apply(m, &on, &opt);
        if (!st)
            printf("%s: %d Softmax, %d kiln.Attention after the pass; %d Transposes -> %d, %d Gathers -> %d\n", argv[2],
                   count(m, "", "Softmax"), count(opt, "kiln", "Attention"), count(m, "", "Transpose"),
                   count(opt, "", "Transpose"), count(m, "", "Gather"), count(opt, "", "Gather"));
        else
            printf("FAIL %s: %s\n", argv[2], kiln_context_message(ctx));
        if (!st) { /* the passes of a CUDA fp16 session (in a CUDA build: the kernel's supports decides) */
            kiln_model *cu = NULL;
            const kiln_pass_options cuo = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
            if (kiln_passes_apply(m, &cuo, &cu) == KILN_OK)
                printf("for cuda fp16: %d kiln.Attention\n", count(cu, "kiln", "Attention"));
            kiln_model_free(cu);
        }
        if (!st) { /* what a plan at batch 1 runs */
            kiln_tensor *x = kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 224, 224), -1, 1, 47);
            printf("plan at batch 1 runs %d Transposes, %d Gathers, %d Softmax\n", plan_count(opt, x, "Transpose"),
                   plan_count(opt, x, "Gather"), plan_count(opt, x, "Softmax"));
            kiln_tensor_free(x);
        }
        kiln_model_free(opt);
        kiln_model_free(m);
        kiln_context_free(ctx);
        return st ? 1 : 0;
    }
    const char *data = argc > 1 ? argv[1] : "tests/data";
    hand_built(&(variant){.label = "attention block"}, 1);
    hand_built(&(variant){.label = "softmax read twice", .softmax_read_twice = true}, 0);
    hand_built(&(variant){.label = "softmax on axis 2", .softmax_axis2 = true}, 0);
    hand_built(&(variant){.label = "heads merged into the rows: chains cut", .merged_rows = true}, 1);
    /* attention-rows: the swaps around the projections moved next to the node, taken as views */
    hand_built(&(variant){.label = "batch first", .batch_first = true}, 1);
    /* not fused: the in-projection's swap moved back before it (the out-projection's stays
     * moved: a copy of as many elements) */
    hand_built(&(variant){.label = "batch first, softmax on axis 2", .batch_first = true, .softmax_axis2 = true}, 0);
    exported(data, "attn_vit_tiny.onnx", 2);
    exported(data, "attn_swin_tiny.onnx", 2);
    exported(data, "attn_maxvit_tiny.onnx", 2);
    exported(data, "attn_swinv2_tiny.onnx", 2);
    fp16_policy(data, "attn_vit_tiny.onnx");
    fp16_policy(data, "attn_swin_tiny.onnx");
    fp16_policy(data, "attn_swinv2_tiny.onnx");
    rolls(data, "attn_swin_tiny.onnx", 2);
    rolls(data, "attn_swinv2_tiny.onnx", 2);
    printf("%s\n", fails ? "FAILED" : "all fuse-attention checks passed");
    kiln_context_free(ctx);
    return fails ? 1 : 0;
}

/* The exports (PyTorch 2.x, torchvision; names shortened with onnx so the files stay small):
 *   VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
 *                     mlp_dim=64, num_classes=10)
 *   SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2],
 *                   window_size=[4, 4], num_classes=10)
 *   MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16],
 *          block_layers=[1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)
 *   SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2],
 *                   window_size=[4, 4], num_classes=10, block=SwinTransformerBlockV2,
 *                   downsample_layer=PatchMergingV2), torch.manual_seed(0), each block's
 *                   attn.logit_scale set to log([2, 3.5]) (heads that differ)
 * each .eval(), torch.onnx.export(m, (torch.randn(2, 3, 32, 32),), path, dynamo=False,
 * opset_version=17, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"},
 * "y": {0: "b"}}); then every value and initializer renamed v<i>, node names and
 * value_info dropped. */
