/*
 * onnx_test.c — `kiln onnx-test DIR...`: the command line of the ONNX conformance runner.
 * Each argument names a case or a folder of cases (kiln_onnx_test_list); each case runs
 * through kiln_onnx_test_case (include/kiln_tools.h) and gets one PASS / FAIL / SKIP line;
 * a summary line ends the output.
 */
#include "onnx_test.h"

#include "kiln.h"
#include "kiln_tools.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    bool ops_in_registry;
    bool quiet;           /* FAIL lines and the summary only */
    double min_pass_rate; /* < 0: any failure fails the run */
    const char *list_failures;
} options;

typedef struct names {
    int n, cap;
    char **s;
} names;

static bool names_add(names *l, const char *s) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **p = realloc(l->s, (size_t)cap * sizeof *p);
        if (!p) return false;
        l->s = p;
        l->cap = cap;
    }
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (!c) return false;
    memcpy(c, s, n);
    l->s[l->n++] = c;
    return true;
}

static void names_free(names *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    *l = (names){0};
}

static const char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *p = path + n;
    while (p > path && p[-1] != '/') p--;
    return p;
}

static int usage(FILE *f) {
    fprintf(f, "usage: kiln onnx-test DIR... [--ops-in-registry] [--min-pass-rate R] [--list-failures FILE] "
               "[--quiet]\n       (options before or after the folders; --name=value works; -- ends them)\n");
    return 2;
}

/* A usage error: what is wrong, then the usage, on stderr; exit status 2. */
static int usage_error(const char *what, const char *arg) {
    fprintf(stderr, "kiln onnx-test: %s '%s'\n", what, arg);
    return usage(stderr);
}

/* Whether argv[*i] is option `name`, as "--name V" (V the next argument: *i moves on) or
 * "--name=V"; *value gets V, NULL where it is missing. */
static bool opt_with_value(int argc, char **argv, int *i, const char *name, const char **value) {
    const size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return false;
    if (argv[*i][n] == '=') {
        *value = argv[*i] + n + 1;
        return true;
    }
    if (argv[*i][n] != '\0') return false;
    *value = *i + 1 < argc ? argv[++*i] : NULL;
    return true;
}

int kiln_onnx_test_main(int argc, char **argv, FILE *out) {
    options o = {.min_pass_rate = -1};
    names cases = {0};
    /* options anywhere among the folders, as the other commands take them */
    int *paths = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *paths), np = 0;
    if (!paths) {
        fprintf(stderr, "kiln onnx-test: out of memory\n");
        return 1;
    }
    bool only_paths = false;
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k], *v = NULL;
        if (only_paths || strncmp(a, "--", 2) != 0) {
            paths[np++] = k;
        } else if (strcmp(a, "--") == 0) {
            only_paths = true;
        } else if (strcmp(a, "--ops-in-registry") == 0) {
            o.ops_in_registry = true;
        } else if (strcmp(a, "--quiet") == 0) {
            o.quiet = true;
        } else if (opt_with_value(argc, argv, &k, "--min-pass-rate", &v)) {
            char *end = NULL;
            o.min_pass_rate = v ? strtod(v, &end) : -1;
            if (!v || end == v || *end || !(o.min_pass_rate >= 0 && o.min_pass_rate <= 1)) {
                free(paths);
                return usage_error(v ? "--min-pass-rate takes a rate from 0 to 1, not" : "option needs a value:",
                                   v ? v : a);
            }
        } else if (opt_with_value(argc, argv, &k, "--list-failures", &v)) {
            if (!v || !*v) {
                free(paths);
                return usage_error("option needs a value:", a);
            }
            o.list_failures = v;
        } else {
            free(paths);
            return usage_error("unknown option", a);
        }
    }
    if (np == 0) {
        free(paths);
        fprintf(stderr, "kiln onnx-test: no test folder given\n");
        return usage(stderr);
    }
    int passed = 0, n_failed = 0, skipped = 0;
    names failures = {0};
    for (int q = 0; q < np; q++) {
        const char *path = argv[paths[q]];
        char **found = NULL;
        int n_found = 0;
        if (kiln_onnx_test_list(path, &found, &n_found) != KILN_OK) {
            fprintf(out, "FAIL %s: no model.onnx in it or its subfolders\n", base_name(path));
            n_failed++;
            names_add(&failures, base_name(path));
            continue;
        }
        for (int k = 0; k < n_found; k++) {
            names_add(&cases, found[k]);
            free(found[k]);
        }
        free(found);
    }
    for (int c = 0; c < cases.n; c++) {
        char why[2048];
        const char *name = base_name(cases.s[c]);
        kiln_onnx_case_result r = kiln_onnx_test_case(cases.s[c], o.ops_in_registry, why, sizeof why);
        if (r == KILN_ONNX_CASE_PASS) {
            if (!o.quiet) fprintf(out, "PASS %s\n", name);
            passed++;
        } else if (r == KILN_ONNX_CASE_SKIP) {
            if (!o.quiet) fprintf(out, "SKIP %s: %s\n", name, why);
            skipped++;
        } else {
            fprintf(out, "FAIL %s: %s\n", name, why);
            n_failed++;
            names_add(&failures, name);
        }
        fflush(out);
    }
    bool write_err = false;
    if (o.list_failures) {
        FILE *f = fopen(o.list_failures, "w");
        if (f) {
            for (int k = 0; k < failures.n; k++) fprintf(f, "%s\n", failures.s[k]);
            fclose(f);
        } else {
            fprintf(out, "cannot write %s\n", o.list_failures);
            write_err = true;
        }
    }
    int rc = n_failed > 0 || write_err;
    if (o.min_pass_rate >= 0) {
        int ran = passed + n_failed;
        double rate = ran ? (double)passed / ran : 0;
        fprintf(out, "pass rate %.1f%% of %d cases run (required %.1f%%)\n", 100 * rate, ran,
                100 * o.min_pass_rate);
        rc = ran == 0 || rate < o.min_pass_rate || write_err;
    }
    fprintf(out, "%d passed, %d failed, %d skipped\n", passed, n_failed, skipped);
    names_free(&cases);
    names_free(&failures);
    free(paths);
    return rc;
}
