/* attrs.c — attribute text ("axis=1;alpha=0.5;pads=[1,2,1,2];mode=reflect", the syntax of
 * optest.h) parsed into kiln_attr arrays: gradient rules (kiln_grad_emit), the fused ops'
 * reference evaluation and the op tests all write attributes this way. */
#include "internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static bool is_number(const char *s) {
    if (!*s) return false;
    char *end;
    strtod(s, &end);
    return *end == 0;
}

static bool looks_float(const char *s) { return strpbrk(s, ".eE") != NULL || strstr(s, "inf") || strstr(s, "nan"); }

kiln_status kiln_attrs_parse(kiln_context *ctx, const char *text, kiln_attr **out, int *n) {
    *out = NULL;
    *n = 0;
    if (!text || !*text) return KILN_OK;
    char *buf = kiln_strdup(ctx, text);
    if (!buf) return KILN_ERR_OUT_OF_MEMORY;
    int cap = 1;
    for (const char *q = text; *q; q++) cap += *q == ';';
    kiln_attr *attrs = kiln_calloc(ctx, (size_t)cap, sizeof *attrs, "attributes");
    if (!attrs) {
        free(buf);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int count = 0;
    kiln_status st = KILN_OK;
    for (char *save = NULL, *tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "attribute text '%s' lacks '='", tok);
            break;
        }
        *eq = 0;
        kiln_attr *a = &attrs[count++];
        a->name = kiln_strdup(ctx, tok);
        char *val = eq + 1;
        if (*val == '[') {
            char *end = strchr(val, ']');
            if (end) *end = 0;
            val++;
            int k = 0;
            bool fl = looks_float(val);
            for (const char *q = val; *q; q++) k += *q == ',';
            k += *val ? 1 : 0;
            a->n = k;
            a->type = fl ? KILN_ATTR_FLOATS : KILN_ATTR_INTS;
            a->ints = calloc((size_t)k + 1, sizeof(int64_t));
            a->floats = calloc((size_t)k + 1, sizeof(float));
            char *p = val;
            for (int i = 0; i < k; i++) {
                char *e;
                double d = strtod(p, &e);
                a->ints[i] = (int64_t)d;
                a->floats[i] = (float)d;
                p = e;
                while (*p == ',' || isspace((unsigned char)*p)) p++;
            }
        } else if (is_number(val)) {
            double d = strtod(val, NULL);
            if (looks_float(val)) {
                a->type = KILN_ATTR_FLOAT;
                a->f = (float)d;
            } else {
                a->type = KILN_ATTR_INT;
                a->i = strtoll(val, NULL, 10);
            }
        } else {
            a->type = KILN_ATTR_STRING;
            a->s = kiln_strdup(ctx, val);
        }
    }
    free(buf);
    if (st) {
        for (int i = 0; i < count; i++) kiln_attr_clear(&attrs[i]);
        free(attrs);
        return st;
    }
    *out = attrs;
    *n = count;
    return KILN_OK;
}
