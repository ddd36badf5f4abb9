/* kiln — the command-line tool. The only code in kiln that may exit(). */
#include "kiln.h"

#include <stdio.h>
#include <string.h>

static int usage(FILE *f) {
    fprintf(f, "usage: kiln ops          list the ops kiln supports\n"
               "       kiln version\n");
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    if (strcmp(argv[1], "version") == 0) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "ops") == 0) {
        for (int i = 0; i < kiln_op_count(); i++) printf("%s\n", kiln_op_name(i));
        return 0;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) return usage(stdout);
    fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
    return usage(stderr);
}
