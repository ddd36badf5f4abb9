/* test_op_props.c — an op is described once (HACKING.md).
 *
 *   test_op_props            every registry op declares its properties, and they agree
 *                            with the code that reads them (the CPU FusedElementwise
 *                            interpreter runs each eltwise op as the op itself does; the
 *                            fused convolutions take each conv_epilogue activation);
 *   test_op_props --lint DIR no op-name list in DIR's .c files outside ops/ and the CUDA
 *                            kernel table (cuda/table.c): two or more registry op names
 *                            as string literals in one statement or brace initializer,
 *                            or in consecutive statements that compare names (an
 *                            if/strcmp chain; building a graph node by node is no list). A pass
 *                            that matches a fixed PATTERN of ops (LogSoftmax ->
 *                            NegativeLogLikelihoodLoss) marks those statements with a
 *                            comment holding `op-pattern`.
 */
#include "check.h"
#include "core/internal.h"
#include "core/optest.h"
#include "ops/fused.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fails;

/* ------------------------------------------------------------ properties */

static void check_eltwise(const kiln_op_def *d) {
    const kiln_eltwise *e = d->eltwise;
    const char *tok = kiln_eltwise_token(d);
    CHECK(e->arity == 1 || e->arity == 2, "%s: eltwise arity %d", d->name, e->arity);
    CHECK(e->n_params >= 0 && e->n_params <= 2, "%s: eltwise n_params %d", d->name, e->n_params);
    CHECK(!e->bounds_from_inputs || e->n_params == 2, "%s: bounds from inputs take two parameters", d->name);
    for (int k = 0; k < e->n_params && !e->bounds_from_inputs; k++)
        CHECK(e->param_attr[k] != NULL, "%s: parameter %d names no attribute", d->name, k);
    CHECK(d->domain == NULL, "%s: only ONNX ops fuse", d->name);
    if (e->conv_epilogue) {
        kiln_act_kind kind;
        CHECK(kiln_fused_act_kind(d->name, &kind), "%s: conv_epilogue but kiln.FusedConv does not take it", d->name);
    }
    if (!e->cuda) {
        /* an alias (Sum of two: Add) of an op that has the CUDA form */
        bool found = false;
        for (int o = 0; o < kiln_op_count(); o++) {
            const kiln_op_def *q = kiln_op_get(o);
            found |= q != d && q->eltwise && q->eltwise->cuda && strcmp(kiln_eltwise_token(q), tok) == 0;
        }
        CHECK(found, "%s: eltwise token %s has no CUDA form", d->name, tok);
    }
    /* The CPU interpreter runs the token as the op itself computes (f64: exact forms). */
    kiln_tensor *x = kt_make(KILN_F64, 1, KT_DIMS(6), KT_VALS(-2.5, -0.75, 0, 0.4, 1.5, 3));
    kiln_tensor *y = kt_make(KILN_F64, 1, KT_DIMS(6), KT_VALS(0.5, 2, -1.25, 3, 0.75, -2));
    kiln_tensor *in[3] = {x, y, NULL};
    char prog[160], attrs[200];
    int n_in = e->arity;
    if (e->bounds_from_inputs) {
        kiln_tensor_free(y); /* Clip: its bounds take the second and third inputs */
        in[1] = kt_scalar(KILN_F64, -0.5);
        in[2] = kt_scalar(KILN_F64, 1.25);
        n_in = 3;
        snprintf(prog, sizeof prog, "i0 %s@-0.5@1.25", tok);
    } else if (e->n_params == 2) {
        snprintf(prog, sizeof prog, "i0 %s@%.9g@%.9g", tok, e->param_default[0], e->param_default[1]);
    } else if (e->n_params == 1) {
        snprintf(prog, sizeof prog, "i0 %s@%.9g", tok, e->param_default[0]);
    } else {
        snprintf(prog, sizeof prog, e->arity == 2 ? "i0 i1 %s" : "i0 %s", tok);
    }
    snprintf(attrs, sizeof attrs, "program=%s", prog);
    kiln_tensor *want = NULL, *got = NULL;
    kiln_tensor *pos[1] = {x};
    /* Log / Sqrt / Reciprocal / Pow / Div on any sign: NaN and inf compare equal as values */
    bool ok = kiln_optest_eval("", d->name, "", 13, n_in, in, 1, &want, d->name) &&
              kiln_optest_eval("kiln", "FusedElementwise", attrs, 0, e->arity, e->arity == 2 ? in : pos, 1, &got, prog);
    CHECK(ok, "%s: evaluating the op or the program '%s' failed", d->name, prog);
    if (ok) {
        for (int64_t i = 0; i < 6; i++) {
            const double a = kiln_get_f64(want, i), b = kiln_get_f64(got, i);
            CHECK((isnan(a) && isnan(b)) || a == b || fabs(a - b) <= 1e-7 * fabs(a),
                  "%s: program '%s' element %d gives %.17g, the op %.17g", d->name, prog, (int)i, b, a);
        }
    }
    kiln_tensor_free(want);
    kiln_tensor_free(got);
    for (int k = 0; k < 3; k++) kiln_tensor_free(in[k]);
}

static void check_op(const kiln_op_def *d) {
    CHECK(d->precision > KILN_PREC_UNDECLARED && d->precision <= KILN_PREC_MIXED,
          "%s%s%s: no precision class (kiln_op_def.precision; HACKING.md)", d->domain ? d->domain : "",
          d->domain ? "." : "", d->name);
    CHECK(d->layout >= KILN_LAYOUT_NONE && d->layout <= KILN_LAYOUT_FOLLOW, "%s: layout %d", d->name, (int)d->layout);
    for (int k = 0; k < 4; k++)
        CHECK(d->out_dtype[k] <= KILN_DT_U8, "%s: out_dtype[%d] = %d", d->name, k, d->out_dtype[k]);
    if (d->max_inputs >= 0 && d->max_inputs < 32) {
        const uint32_t ins = (uint32_t)((1ull << d->max_inputs) - 1);
        CHECK((d->f32_inputs & ~ins) == 0, "%s: f32_inputs 0x%x beyond its %d inputs", d->name, d->f32_inputs,
              d->max_inputs);
    }
    if (d->max_outputs >= 0 && d->max_outputs < 32) {
        const uint32_t outs = (uint32_t)((1ull << d->max_outputs) - 1);
        CHECK((d->f32_outputs & ~outs) == 0, "%s: f32_outputs 0x%x beyond its %d outputs", d->name, d->f32_outputs,
              d->max_outputs);
    }
    CHECK(!d->f32_outputs || d->precision == KILN_PREC_LOW, "%s: f32_outputs on an op that is not low precision",
          d->name);
    if (d->training) {
        const kiln_op_training *t = d->training;
        int states = 0;
        for (int k = 0; k < 32; k++) states += (t->state_inputs >> k) & 1;
        CHECK(t->mode_attr || t->mode_input > 0, "%s: a training form sets a mode attribute or input", d->name);
        CHECK(t->n_outputs <= d->max_outputs || d->max_outputs < 0, "%s: training outputs %d > max %d", d->name,
              t->n_outputs, d->max_outputs);
        CHECK(!states || t->state_output + states <= t->n_outputs, "%s: state outputs past the training form's",
              d->name);
        CHECK(t->mode_input < d->max_inputs || d->max_inputs < 0, "%s: mode input %d past max inputs", d->name,
              t->mode_input);
    }
    if (d->eltwise) check_eltwise(d);
}

/* ------------------------------------------------------------------ lint */

typedef struct lint {
    char **names;
    int n_names;
    int found;
    bool quiet; /* the self-test: count, do not fail */
} lint;

static bool is_op_name(const lint *L, const char *s, size_t len) {
    for (int i = 0; i < L->n_names; i++)
        if (strlen(L->names[i]) == len && strncmp(L->names[i], s, len) == 0) return true;
    return false;
}

/* One statement's op-name literals. */
typedef struct stmt {
    int n, line;
    char first[64], second[64];
    bool pattern;
    bool compares; /* holds strcmp / kiln_pass_is: a chain of such statements is a list */
} stmt;

static void report(lint *L, const char *path, const stmt *a, const stmt *b) {
    const stmt *s = b ? b : a;
    L->found++;
    if (L->quiet) return;
    printf("FAIL %s:%d: op-name list (%s, %s) outside src/ops/ and the kernel tables: declare it as op "
           "properties (HACKING.md)\n",
           path, a->line, a->first, b ? b->first : s->second);
    fails++;
}

/* A comment p[0..len) holding a marker: op-pattern, or kernel-table (a backend's
 * kernels by op, as cuda/table.c). */
static bool has_marker(const char *p, size_t len) {
    for (size_t i = 0; i + 10 <= len; i++)
        if (strncmp(p + i, "op-pattern", 10) == 0 || (i + 12 <= len && strncmp(p + i, "kernel-table", 12) == 0))
            return true;
    return false;
}

static void lint_file(lint *L, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        CHECK(0, "cannot read %s", path);
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc((size_t)size + 1);
    if (!src || fread(src, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(src);
        CHECK(0, "cannot read %s", path);
        return;
    }
    fclose(f);
    src[size] = 0;
    /* brace kinds: block (code) or initializer */
    char braces[256];
    stmt header[256]; /* the statement that opened each block (if (...) {) */
    int depth = 0, paren = 0, line = 1;
    stmt cur = {0}, prev = {0};
    char last = 0; /* last significant character outside literals and comments */
    for (const char *p = src; *p; p++) {
        if (*p == '\n') {
            line++;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            const size_t len = e ? (size_t)(e - p) : strlen(p);
            if (has_marker(p, len)) cur.pattern = true;
            for (size_t i = 0; i < len; i++) line += p[i] == '\n';
            p += len + (e ? 1 : -1);
            continue;
        }
        if (p[0] == '/' && p[1] == '/') {
            const char *e = strchr(p, '\n');
            const size_t len = e ? (size_t)(e - p) : strlen(p);
            if (has_marker(p, len)) cur.pattern = true;
            p += len - 1;
            continue;
        }
        if (*p == '#' && (p == src || p[-1] == '\n')) { /* preprocessor line */
            while (p[1] && p[1] != '\n') p++;
            continue;
        }
        if (*p == '\'') {
            p++;
            while (*p && *p != '\'') p += *p == '\\' ? 2 : 1;
            last = '\'';
            continue;
        }
        if (*p == '"') {
            const char *s = ++p;
            while (*p && *p != '"') p += *p == '\\' ? 2 : 1;
            if (is_op_name(L, s, (size_t)(p - s))) {
                if (cur.n == 0) {
                    cur.line = line;
                    snprintf(cur.first, sizeof cur.first, "%.*s", (int)(p - s), s);
                } else if (cur.n == 1) {
                    snprintf(cur.second, sizeof cur.second, "%.*s", (int)(p - s), s);
                }
                cur.n++;
            }
            last = '"';
            continue;
        }
        if (strncmp(p, "strcmp(", 7) == 0 || strncmp(p, "strncmp(", 8) == 0 || strncmp(p, "kiln_pass_is", 12) == 0)
            cur.compares = true;
        bool end = false;
        if (*p == '(') paren++;
        if (*p == ')') paren--;
        int in_init = 0; /* open initializer (or struct) braces: their ';' end nothing */
        for (int k = 0; k < depth && k < (int)sizeof braces; k++) in_init += braces[k] == 'i';
        if (*p == ';' && paren <= 0 && in_init == 0) end = true;
        if (*p == '{') {
            const bool outer_block = depth == 0 || (depth <= (int)sizeof braces && braces[depth - 1] == 'b');
            /* inside parentheses: a compound literal, (const char *[]){"a", "b"} */
            const bool block = outer_block && paren <= 0 && (last == ')' || last == 0 || last == ';' || last == '{' || last == '}' ||
                                               last == 'e' || last == 'o' || last == ':');
            if (depth < (int)sizeof braces) braces[depth] = block ? 'b' : 'i';
            if (depth < (int)sizeof braces && block) header[depth] = cur;
            depth++;
            end = block;
        }
        bool close = false;
        if (*p == '}') {
            depth--;
            end = close = depth >= 0 && depth < (int)sizeof braces && braces[depth] == 'b';
        }
        if (end) {
            if (cur.n >= 2 && !cur.pattern) report(L, path, &cur, NULL);
            else if (cur.n >= 1 && prev.n >= 1 && cur.compares && prev.compares && !cur.pattern && !prev.pattern)
                report(L, path, &prev, &cur);
            prev = cur;
            if (*p == '{') prev.n = 0; /* a block's first statement starts a chain */
            if (close) {
                /* `} else if (...)`: the chain goes on from the block's header */
                const char *q = p + 1;
                while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
                const bool els = strncmp(q, "else", 4) == 0;
                prev.n = 0;
                if (els && depth >= 0 && depth < (int)sizeof braces) prev = header[depth];
            }
            memset(&cur, 0, sizeof cur);
        }
        if (*p != ' ' && *p != '\t' && *p != '\r') last = *p;
    }
    free(src);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void lint_dir(lint *L, const char *dir, const char *rel) {
    DIR *d = opendir(dir);
    if (!d) {
        CHECK(0, "cannot open %s", dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096], r[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (strcmp(r, "ops") != 0) lint_dir(L, path, r); /* ops/: where op properties live */
        } else if (ends_with(r, ".c") && strcmp(r, "cuda/table.c") != 0) {
            lint_file(L, path);
        }
    }
    closedir(d);
}

/* The checker on snippets: lists it must find, and code it must let pass. */
static void lint_selftest(void) {
    static const struct {
        const char *src;
        int want;
    } cases[] = {
        {"static const char *const l[] = {\"Relu\", \"Sigmoid\"};\n", 1},
        {"static const struct { const char *n; int k; } t[] = {\n {\"Relu\", 1},\n {\"Tanh\", 2},\n};\n", 1},
        {"int f(const char *op) {\n    if (strcmp(op, \"Relu\") == 0) return 1;\n"
         "    if (strcmp(op, \"Sigmoid\") == 0) return 2;\n    return 0;\n}\n", 1},
        {"void f(const char *op) {\n    if (strcmp(op, \"Relu\") == 0) {\n        g();\n"
         "    } else if (strcmp(op, \"Dropout\") == 0) {\n        h();\n    }\n}\n", 1},
        {"bool f(const kiln_node *n) { return kiln_pass_is(n, \"Add\") || kiln_pass_is(n, \"Sum\"); }\n", 1},
        /* a pattern, marked */
        {"void f(void) {\n    /* op-pattern: Conv -> Relu */\n"
         "    if (kiln_pass_is(a, \"Conv\") && kiln_pass_is(b, \"Relu\")) g();\n}\n", 0},
        /* one name per statement, no comparison chain: building a graph */
        {"void f(void) {\n    node(m, \"Conv\", (const char *[]){\"x\", \"w\"});\n"
         "    node(m, \"Relu\", (const char *[]){\"c\"});\n}\n", 0},
        /* names in comments and non-op strings */
        {"/* Relu, Sigmoid, Tanh */\nstatic const char *s[] = {\"relu\", \"x\"};\n", 0},
    };
    lint L = {.quiet = true};
    L.names = calloc((size_t)kiln_op_count(), sizeof *L.names);
    for (int i = 0; i < kiln_op_count(); i++) L.names[L.n_names++] = (char *)kiln_op_get(i)->name;
    const char *path = "test_op_props_lint_case.c";
    const int fails0 = fails;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "wb");
        if (!f) {
            CHECK(0, "cannot write %s", path);
            break;
        }
        fputs(cases[i].src, f);
        fclose(f);
        L.found = 0;
        lint_file(&L, path);
        CHECK(L.found == cases[i].want, "lint self-test %d: %d finding(s), want %d in:\n%s", (int)i, L.found,
              cases[i].want, cases[i].src);
    }
    remove(path);
    free(L.names);
    printf("lint self-test: %s\n", fails == fails0 ? "ok" : "FAILED");
}

static void run_lint(const char *dir) {
    lint L = {0};
    L.names = calloc((size_t)kiln_op_count(), sizeof *L.names);
    for (int i = 0; i < kiln_op_count(); i++) L.names[L.n_names++] = (char *)kiln_op_get(i)->name;
    lint_dir(&L, dir, "");
    printf("lint: %d op-name list(s) in %s\n", L.found, dir);
    free(L.names);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--lint") == 0) {
        lint_selftest();
        run_lint(argv[2]);
    } else if (argc == 3 && strcmp(argv[1], "--lint-file") == 0) { /* for checking the checker */
        lint L = {0};
        L.names = calloc((size_t)kiln_op_count(), sizeof *L.names);
        for (int i = 0; i < kiln_op_count(); i++) L.names[L.n_names++] = (char *)kiln_op_get(i)->name;
        lint_file(&L, argv[2]);
        printf("lint: %d op-name list(s) in %s\n", L.found, argv[2]);
        free(L.names);
    } else {
        for (int i = 0; i < kiln_op_count(); i++) check_op(kiln_op_get(i));
        printf("%d ops checked\n", kiln_op_count());
    }
    printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
