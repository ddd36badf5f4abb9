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

static int usage(FILE *out) {
    fprintf(out, "usage: kiln onnx-test [--ops-in-registry] [--min-pass-rate R] "
                 "[--list-failures FILE] DIR...\n");
    return 2;
}

int kiln_onnx_test_main(int argc, char **argv, FILE *out) {
    options o = {.min_pass_rate = -1};
    names cases = {0};
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "--ops-in-registry") == 0) {
            o.ops_in_registry = true;
        } else if (strcmp(argv[i], "--min-pass-rate") == 0 && i + 1 < argc) {
            char *end;
            o.min_pass_rate = strtod(argv[++i], &end);
            if (*end || !(o.min_pass_rate >= 0 && o.min_pass_rate <= 1)) return usage(out);
        } else if (strcmp(argv[i], "--list-failures") == 0 && i + 1 < argc) {
            o.list_failures = argv[++i];
        } else {
            return usage(out);
        }
    }
    if (i >= argc) return usage(out);
    int passed = 0, n_failed = 0, skipped = 0;
    names failures = {0};
    for (; i < argc; i++) {
        char **found = NULL;
        int n_found = 0;
        if (kiln_onnx_test_list(argv[i], &found, &n_found) != KILN_OK) {
            fprintf(out, "FAIL %s: no model.onnx in it or its subfolders\n", base_name(argv[i]));
            n_failed++;
            names_add(&failures, base_name(argv[i]));
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
            fprintf(out, "PASS %s\n", name);
            passed++;
        } else if (r == KILN_ONNX_CASE_SKIP) {
            fprintf(out, "SKIP %s: %s\n", name, why);
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
    return rc;
}
