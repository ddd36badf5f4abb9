/* check.h — the assertion of kiln's C test programs: a failed CHECK prints where and why
 * and counts in `fails` (each program defines `static int fails;` and exits non-zero when
 * it is not 0). */
#ifndef KILN_TEST_CHECK_H
#define KILN_TEST_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            fails++;                                    \
        }                                               \
    } while (0)

#endif
