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

const char *kiln_version(void) { return KILN_VERSION; }

kiln_status kiln_context_create(kiln_context **out) {
    static uint64_t next_id;
    if (!out) return KILN_ERR_INVALID_ARGUMENT;
    *out = calloc(1, sizeof **out);
    if (!*out) return KILN_ERR_OUT_OF_MEMORY;
    (*out)->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    return KILN_OK;
}

/* The messages of the last failed calls, per thread: a few slots, each keyed by a context
 * (its address and id), the least recently written one reused when none matches. */
#define MSG_SLOTS 4
typedef struct msg_slot {
    const kiln_context *ctx;
    uint64_t id;
    uint64_t used;
    char msg[KILN_MSG_SIZE];
} msg_slot;
static _Thread_local msg_slot msg_slots[MSG_SLOTS];
static _Thread_local uint64_t msg_clock;

static msg_slot *find_slot(const kiln_context *ctx) {
    for (int i = 0; i < MSG_SLOTS; i++)
        if (msg_slots[i].ctx == ctx && msg_slots[i].id == ctx->id) return &msg_slots[i];
    return NULL;
}

static msg_slot *slot_for_write(const kiln_context *ctx) {
    msg_slot *s = find_slot(ctx);
    if (!s) {
        s = &msg_slots[0];
        for (int i = 1; i < MSG_SLOTS; i++)
            if (msg_slots[i].used < s->used) s = &msg_slots[i];
        s->ctx = ctx;
        s->id = ctx->id;
        s->msg[0] = 0;
    }
    s->used = ++msg_clock;
    return s;
}

void kiln_context_free(kiln_context *ctx) {
    if (!ctx) return;
    msg_slot *s = find_slot(ctx);
    if (s) memset(s, 0, sizeof *s);
    free(ctx);
}

const char *kiln_context_message(const kiln_context *ctx) {
    if (!ctx) return "";
    const msg_slot *s = find_slot(ctx);
    return s ? s->msg : "";
}

kiln_status kiln_context_set_threads(kiln_context *ctx, int threads) {
    if (!ctx) return KILN_ERR_INVALID_ARGUMENT;
    if (threads < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "threads must be >= 0, got %d", threads);
    __atomic_store_n(&ctx->threads, threads, __ATOMIC_RELAXED);
    return KILN_OK;
}

kiln_status kiln_context_set_log(kiln_context *ctx, kiln_log_level max_level, kiln_log_fn fn, void *user) {
    if (!ctx) return KILN_ERR_INVALID_ARGUMENT;
    if (max_level < KILN_LOG_ERROR || max_level > KILN_LOG_DEBUG)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "log level %d is outside %d (errors) to %d (debug)",
                         (int)max_level, KILN_LOG_ERROR, KILN_LOG_DEBUG);
    ctx->log = fn;
    ctx->log_user = user;
    ctx->log_level = max_level;
    return KILN_OK;
}

bool kiln_log_on(const kiln_context *ctx, kiln_log_level level) {
    return ctx && ctx->log && level <= ctx->log_level;
}

void kiln_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...) {
    if (!kiln_log_on(ctx, level)) return;
    char msg[KILN_MSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log(ctx->log_user, level, msg);
}

kiln_status kiln_api_end(kiln_context *ctx, kiln_status st) {
    if (st && kiln_log_on(ctx, KILN_LOG_ERROR)) {
        const char *msg = kiln_context_message(ctx);
        char line[KILN_MSG_SIZE + 64];
        snprintf(line, sizeof line, "%s: %s", kiln_status_name(st), msg[0] ? msg : "(no message)");
        ctx->log(ctx->log_user, KILN_LOG_ERROR, line);
    }
    return st;
}

kiln_status kiln_options_take(kiln_context *ctx, const char *what, const void *theirs, void *ours,
                              size_t ours_size) {
    memset(ours, 0, ours_size);
    if (!theirs) return KILN_OK;
    size_t n = 0;
    memcpy(&n, theirs, sizeof n); /* struct_size, the first field of every options struct */
    if (n == 0) n = ours_size;
    if (n < sizeof(size_t))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s.struct_size is %zu; it is sizeof(%s) (%zu in this kiln)",
                         what, n, what, ours_size);
    if (n > ours_size) {
        const unsigned char *extra = (const unsigned char *)theirs + ours_size;
        for (size_t i = 0; i < n - ours_size; i++)
            if (extra[i])
                return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                                 "%s sets a field this kiln (%s) does not know of, %zu bytes past its end of %zu "
                                 "bytes: the program was built against a newer kiln.h",
                                 what, KILN_VERSION, i, ours_size);
        n = ours_size;
    }
    memcpy(ours, theirs, n);
    memcpy(ours, &(size_t){ours_size}, sizeof(size_t));
    return KILN_OK;
}

int kiln_context_threads(const kiln_context *ctx) {
    return ctx ? __atomic_load_n(&ctx->threads, __ATOMIC_RELAXED) : 0;
}

void kiln_clear_error(kiln_context *ctx) {
    msg_slot *s = ctx ? find_slot(ctx) : NULL;
    if (s) s->msg[0] = 0;
}

kiln_status kiln_failv(kiln_context *ctx, kiln_status st, const char *fmt, va_list ap) {
    if (ctx) vsnprintf(slot_for_write(ctx)->msg, KILN_MSG_SIZE, fmt, ap);
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
    char pre[1024], old[KILN_MSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    char *msg = slot_for_write(ctx)->msg;
    memcpy(old, msg, sizeof old);
    size_t k = strlen(pre);
    if (k >= KILN_MSG_SIZE) k = KILN_MSG_SIZE - 1;
    memcpy(msg, pre, k);
    size_t rest = strlen(old);
    if (rest > KILN_MSG_SIZE - 1 - k) rest = KILN_MSG_SIZE - 1 - k;
    memcpy(msg + k, old, rest);
    msg[k + rest] = 0;
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
