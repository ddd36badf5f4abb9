/* context.c — the context (messages, settings), statuses and checked allocation. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kiln_status_name(kiln_status s) {
    switch (s) {
    case KILN_OK: return "ok";
    case KILN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case KILN_ERR_OUT_OF_MEMORY: return "out of memory";
    case KILN_ERR_IO: return "I/O error";
    case KILN_ERR_PARSE: return "parse error";
    case KILN_ERR_SHAPE: return "shape error";
    case KILN_ERR_TYPE: return "type error";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    case KILN_ERR_GRAPH: return "graph error";
    case KILN_ERR_DEVICE: return "device error";
    case KILN_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

kiln_status kiln_context_create(kiln_context **out) {
    if (!out) return KILN_ERR_INVALID_ARGUMENT;
    *out = calloc(1, sizeof **out);
    return *out ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
}

void kiln_context_free(kiln_context *ctx) { free(ctx); }

const char *kiln_context_message(const kiln_context *ctx) { return ctx ? ctx->msg : ""; }

kiln_status kiln_context_set_threads(kiln_context *ctx, int threads) {
    if (!ctx) return KILN_ERR_INVALID_ARGUMENT;
    if (threads < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "threads must be >= 0, got %d", threads);
    ctx->threads = threads;
    kiln_cpu_set_threads(threads);
    return KILN_OK;
}

void kiln_clear_error(kiln_context *ctx) {
    if (ctx) ctx->msg[0] = 0;
}

kiln_status kiln_failv(kiln_context *ctx, kiln_status st, const char *fmt, va_list ap) {
    if (ctx) vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    return st;
}

kiln_status kiln_fail(kiln_context *ctx, kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

void kiln_msg_prefix(kiln_context *ctx, const char *fmt, ...) {
    if (!ctx) return;
    char pre[1024], old[sizeof ctx->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, ctx->msg, sizeof old);
    size_t k = strlen(pre);
    if (k >= sizeof ctx->msg) k = sizeof ctx->msg - 1;
    memcpy(ctx->msg, pre, k);
    size_t rest = strlen(old);
    if (rest > sizeof ctx->msg - 1 - k) rest = sizeof ctx->msg - 1 - k;
    memcpy(ctx->msg + k, old, rest);
    ctx->msg[k + rest] = 0;
}

void *kiln_malloc(kiln_context *ctx, size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *kiln_calloc(kiln_context *ctx, size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu x %zu bytes for %s",
                  count, size, what);
    return p;
}

char *kiln_strdup(kiln_context *ctx, const char *s) {
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *p = kiln_malloc(ctx, n, "a string");
    if (p) memcpy(p, s, n);
    return p;
}
