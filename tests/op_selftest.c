/* op_selftest.c — runs the test cases that live in every op file (kiln_op_def.test).
 * Usage: kiln_op_tests [OpName ...]   (no names: every op). Exits non-zero on any failure
 * and when an op has no test cases at all. */
#include "core/internal.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int failed = 0, passed = 0, untested = 0;
    for (int i = 0; i < kiln_op_count(); i++) {
        const kiln_op_def *d = kiln_op_get(i);
        bool selected = argc < 2;
        for (int a = 1; a < argc; a++) selected |= strcmp(argv[a], d->name) == 0;
        if (!selected) continue;
        if (!d->test) {
            printf("FAIL %s: has no test cases\n", d->name);
            untested++;
            continue;
        }
        int f = d->test();
        printf("%s %s (%d failed checks)\n", f ? "FAIL" : "PASS", d->name, f);
        if (f) failed++;
        else passed++;
    }
    printf("%d passed, %d failed\n", passed, failed + untested);
    return failed || untested ? 1 : 0;
}
