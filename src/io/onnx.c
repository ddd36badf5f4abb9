/*
 * onnx.c — the ONNX importer: ModelProto / TensorProto bytes into a kiln graph.
 *
 * Contract:
 *   - Reads the ModelProto with protobuf-c (schema: Debian's onnx.proto, ONNX 1.12) and
 *     builds the graph through the internal model API (values, nodes taking over their
 *     attributes, outputs), then finalizes it.
 *   - Default-domain opsets up to 21 are accepted (m->opset, node->opset). Nodes of other
 *     domains are accepted only as calls of the model's local functions, which are
 *     inlined recursively: fresh value names, formals bound to the call's values,
 *     attribute references resolved from the call or the function's defaults, and the
 *     function's own opset_import for its nodes.
 *   - Initializers that are also listed as graph inputs are initializers.
 *   - Tensors: every kiln dtype from raw_data (little-endian) or the typed fields, or
 *     from external data files next to the model. STRING tensors are KILN_ERR_UNSUPPORTED.
 *
 * The input is hostile: every count, dim, length, index and name is checked, and every
 * problem is a status with a message naming the node / tensor / value concerned, never a
 * crash. Before protobuf-c sees the bytes, check_wire walks them against the schema:
 * protobuf-c recurses once per nested message without a depth limit (nested attribute
 * graphs could exhaust the stack) and trusts lengths more than we want to.
 *
 * Fields newer than Debian's onnx.proto arrive as protobuf-c "unknown fields" and are
 * decoded by hand: FunctionProto.attribute_proto (11, the attribute defaults),
 * FunctionProto.overload (13) and NodeProto.overload (8).
 */
#define _POSIX_C_SOURCE 200809L

#include "core/internal.h"
#include "io/onnx_test.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Opsets name versions of the whole default domain: an op unchanged since opset 1 is
 * the same op in a model importing opset 1 (many of ONNX's node tests do), so old
 * opsets are read; ops see node->opset and implement the semantics of 11..21. */
#define MIN_OPSET 1
#define MAX_OPSET 21
/* Deeper than any real model's Model > Graph > Node > Attribute > Graph ... nesting. */
#define MAX_PROTO_DEPTH 100
#define MAX_FUNCTION_DEPTH 64
/* Inlining can multiply nodes (a function calling another twice, 64 levels deep): a
 * model may expand to at most 256 times the nodes its file holds (at least 65536, at
 * most 4M), so work and memory stay proportional to the input. */
#define MAX_NODES (1 << 22)
#define MIN_NODE_BUDGET (1 << 16)
#define NODE_EXPANSION 256
/* and the names it generates (prefix + local name per inlined value / node) */
#define MAX_NAME_BYTES ((size_t)256 << 20)
/* Elements and bytes of one tensor: far past any real tensor, far below overflow. */
#define MAX_ELEMS ((int64_t)1 << 62)
/* protobuf's own limit for one message; bigger models keep weights in external data. */
#define MAX_PROTO_BYTES ((size_t)1 << 31)

/* ------------------------------------------------------------------ helpers */

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* "" and "ai.onnx" both name the default domain. */
static const char *norm_domain(const char *d) {
    if (!d || strcmp(d, "ai.onnx") == 0) return "";
    return d;
}

/* A copy of a..b joined (for value names of inlined functions); NULL on OOM. */
static char *concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* The directory part of path ("." when there is none). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return concat(".", "");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* Read a whole regular file of at most max bytes into a new buffer. */
static kiln_status read_file(kiln_context *ctx, const char *path, size_t max, uint8_t **data,
                             size_t *size) {
    *data = NULL;
    *size = 0;
    struct stat st;
    if (stat(path, &st) != 0)
        return kiln_fail(ctx, KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return kiln_fail(ctx, KILN_ERR_IO, "'%s' is not a regular file", path);
    if (st.st_size < 0 || (uint64_t)st.st_size > max)
        return kiln_fail(ctx, KILN_ERR_PARSE,
                         "'%s' is %lld bytes, more than protobuf's 2 GiB limit (large models "
                         "must keep their weights in external data)",
                         path, (long long)st.st_size);
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(ctx, KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t n = (size_t)st.st_size;
    uint8_t *buf = kiln_malloc(ctx, n ? n : 1, "file contents");
    if (!buf) {
        fclose(f);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return kiln_fail(ctx, KILN_ERR_IO, "cannot read '%s' (%zu of %zu bytes read)", path,
                         got, n);
    }
    *data = buf;
    *size = n;
    return KILN_OK;
}

/* ------------------------------------------------------ protobuf wire check */

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (*p >= end) return false;
        uint8_t b = *(*p)++;
        if (shift == 63 && b > 1) return false; /* more than 64 bits */
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

static bool is_varint_type(ProtobufCType t) {
    switch (t) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_BOOL: case PROTOBUF_C_TYPE_ENUM:
        return true;
    default:
        return false;
    }
}

static bool is_fixed32_type(ProtobufCType t) {
    return t == PROTOBUF_C_TYPE_FIXED32 || t == PROTOBUF_C_TYPE_SFIXED32 ||
           t == PROTOBUF_C_TYPE_FLOAT;
}

static bool is_fixed64_type(ProtobufCType t) {
    return t == PROTOBUF_C_TYPE_FIXED64 || t == PROTOBUF_C_TYPE_SFIXED64 ||
           t == PROTOBUF_C_TYPE_DOUBLE;
}

typedef struct wire_err {
    const char *why;
    const char *msg_name; /* the message type being read */
    size_t offset;        /* from the start of the outermost buffer */
} wire_err;

/* Walk one message's bytes [p, end) against its descriptor: tags, wire types matching
 * the schema, lengths inside the buffer, packed arrays whole, nesting depth bounded.
 * base is the start of the outermost buffer (for offsets in messages). */
static bool check_wire(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                       const uint8_t *end, const uint8_t *base, int depth, wire_err *e) {
    e->msg_name = desc->name;
    if (depth > MAX_PROTO_DEPTH) {
        e->why = "messages nested deeper than 100 levels";
        e->offset = (size_t)(p - base);
        return false;
    }
    while (p < end) {
        const uint8_t *field_start = p;
        uint64_t tag;
        e->offset = (size_t)(p - base);
        if (!read_varint(&p, end, &tag) || tag > UINT32_MAX) {
            e->why = "bad field tag";
            return false;
        }
        uint32_t id = (uint32_t)(tag >> 3);
        unsigned wt = (unsigned)(tag & 7);
        if (id == 0) {
            e->why = "field number 0";
            return false;
        }
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(desc, id);
        uint64_t v;
        switch (wt) {
        case 0:
            if (!read_varint(&p, end, &v)) {
                e->why = "truncated varint";
                return false;
            }
            if (fd && !is_varint_type(fd->type)) goto wrong_type;
            break;
        case 1:
            if (end - p < 8) {
                e->why = "truncated 64-bit field";
                return false;
            }
            p += 8;
            if (fd && !is_fixed64_type(fd->type)) goto wrong_type;
            break;
        case 5:
            if (end - p < 4) {
                e->why = "truncated 32-bit field";
                return false;
            }
            p += 4;
            if (fd && !is_fixed32_type(fd->type)) goto wrong_type;
            break;
        case 2: {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) {
                e->why = "length past the end of the data (truncated file?)";
                return false;
            }
            const uint8_t *sub = p, *sub_end = p + v;
            p = sub_end;
            if (!fd) break;
            if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (!check_wire(fd->descriptor, sub, sub_end, base, depth + 1, e)) return false;
                e->msg_name = desc->name;
            } else if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_BYTES) {
                /* any bytes */
            } else if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
                /* a packed array: whole elements only */
                if (is_fixed32_type(fd->type) ? v % 4 != 0
                    : is_fixed64_type(fd->type) ? v % 8 != 0 : false) {
                    e->offset = (size_t)(sub - base);
                    e->why = "packed array length not a multiple of its element size";
                    return false;
                }
                if (is_varint_type(fd->type)) {
                    while (sub < sub_end) {
                        if (!read_varint(&sub, sub_end, &v)) {
                            e->offset = (size_t)(sub - base);
                            e->why = "truncated varint in a packed array";
                            return false;
                        }
                    }
                }
            } else {
                goto wrong_type;
            }
            break;
        }
        default:
            e->why = "unsupported wire type (groups or garbage)";
            return false;
        }
        continue;
    wrong_type:
        e->offset = (size_t)(field_start - base);
        e->why = "wire type does not match the schema";
        return false;
    }
    return true;
}

/* Check then unpack; NULL with a message on ctx when the bytes are not a valid `what`. */
static ProtobufCMessage *unpack_checked(kiln_context *ctx, const ProtobufCMessageDescriptor *desc,
                                        const uint8_t *data, size_t size, const char *what) {
    if (size > MAX_PROTO_BYTES) {
        kiln_fail(ctx, KILN_ERR_PARSE, "%s is %zu bytes, more than protobuf's 2 GiB limit", what,
                  size);
        return NULL;
    }
    wire_err e = {0};
    if (!check_wire(desc, data, data + size, data, 0, &e)) {
        kiln_fail(ctx, KILN_ERR_PARSE, "%s is not valid protobuf: %s at byte %zu (in %s)", what,
                  e.why, e.offset, e.msg_name);
        return NULL;
    }
    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, size, data);
    if (!msg)
        kiln_fail(ctx, KILN_ERR_PARSE, "%s could not be decoded (protobuf-c rejected it)", what);
    return msg;
}

/* A string kept as an unknown field (an overload name): the last occurrence wins, as
 * protobuf does for a non-repeated field. "" when absent or malformed; NULL on OOM. */
static char *unknown_string(const ProtobufCMessage *msg, uint32_t id) {
    const uint8_t *d = NULL;
    size_t n = 0;
    for (unsigned i = 0; i < msg->n_unknown_fields; i++) {
        const ProtobufCMessageUnknownField *u = &msg->unknown_fields[i];
        if (u->tag != id || u->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) continue;
        /* protobuf-c keeps the length prefix in data */
        const uint8_t *p = u->data, *end = u->data + u->len;
        uint64_t len;
        if (read_varint(&p, end, &len) && len == (uint64_t)(end - p)) {
            d = p;
            n = (size_t)len;
        }
    }
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, d, n);
    s[n] = '\0';
    return s;
}

/* ------------------------------------------------------------------ tensors */

static bool dtype_from_onnx(int32_t t, kiln_dtype *out) {
    switch (t) {
    case KILN_F32: case KILN_U8: case KILN_I8: case KILN_U16: case KILN_I16: case KILN_I32:
    case KILN_I64: case KILN_BOOL: case KILN_F16: case KILN_F64: case KILN_U32: case KILN_U64:
    case KILN_BF16:
        *out = (kiln_dtype)t;
        return true;
    default:
        return false;
    }
}

/* Why an ONNX data_type is not a kiln dtype (status and message). */
static kiln_status bad_dtype(kiln_context *ctx, int32_t t, const char *what) {
    switch (t) {
    case 0:
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s has no data_type", what);
    case 8:
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s is a STRING tensor; kiln has no strings",
                         what);
    case 14: case 15:
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s is complex (data_type %d); unsupported",
                         what, (int)t);
    case 17: case 18: case 19: case 20: case 21: case 22: case 23:
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                         "%s has data_type %d (float8 / int4 / float4); unsupported", what, (int)t);
    default:
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s has an unknown data_type %d", what, (int)t);
    }
}

/* Check dims of a tensor (<= 8, none negative, elements and bytes below 2^62). */
static kiln_status check_dims(kiln_context *ctx, size_t n_dims, const int64_t *dims, size_t esize,
                              const char *what, int64_t *numel) {
    if (n_dims > KILN_MAX_DIMS)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s has %zu dims; kiln supports at most %d", what,
                         n_dims, KILN_MAX_DIMS);
    int64_t n = 1, nonzero = 1;
    for (size_t i = 0; i < n_dims; i++) {
        int64_t d = dims[i];
        if (d < 0)
            return kiln_fail(ctx, KILN_ERR_PARSE, "%s: dim %zu is negative (%" PRId64 ")", what, i,
                             d);
        if (d == 0) {
            n = 0;
            continue;
        }
        /* the product of the non-zero dims is bounded too, so later shape arithmetic
         * on a zero-size tensor cannot overflow either */
        if (d > MAX_ELEMS / nonzero)
            return kiln_fail(ctx, KILN_ERR_PARSE,
                             "%s: dims overflow (more than 2^62 elements at dim %zu)", what, i);
        nonzero *= d;
        n *= d;
    }
    if (esize && n > MAX_ELEMS / (int64_t)esize)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: dims overflow (more than 2^62 bytes)", what);
    *numel = n;
    return KILN_OK;
}

static bool host_is_big_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 0;
}

/* raw_data and external data are little-endian; swap on a big-endian host. */
static void from_little_endian(uint8_t *p, int64_t n, size_t esize) {
    if (esize == 1 || !host_is_big_endian()) return;
    for (int64_t i = 0; i < n; i++, p += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* bool tensors hold 0 / 1 only; kernels may rely on it. */
static void normalize_bool(kiln_tensor *t, int64_t n) {
    if (t->dtype != KILN_BOOL) return;
    uint8_t *p = t->data;
    for (int64_t i = 0; i < n; i++) p[i] = p[i] != 0;
}

/* Parse a non-negative decimal (external data offset / length). */
static bool parse_u63(const char *s, int64_t *out) {
    if (!s || !*s) return false;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        int d = *s - '0';
        if (v > (INT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* External data must stay inside the model's directory: relative, no ".." component. */
static const char *bad_location(const char *loc) {
    if (!*loc) return "is empty";
    if (loc[0] == '/' || loc[0] == '\\') return "is an absolute path";
    if (((loc[0] | 0x20) >= 'a' && (loc[0] | 0x20) <= 'z') && loc[1] == ':')
        return "is an absolute path";
    for (const char *p = loc; *p;) {
        size_t n = strcspn(p, "/\\");
        if (n == 2 && p[0] == '.' && p[1] == '.') return "has a '..' component";
        p += n;
        if (*p) p++;
    }
    return NULL;
}

/* Where a tensor's external data lives: validates location, offset and length against
 * the file before anything is allocated. *path is a new string on success. */
static kiln_status external_source(kiln_context *ctx, const Onnx__TensorProto *tp,
                                   const char *base_dir, const char *what, int64_t nbytes,
                                   char **path_out, int64_t *offset_out) {
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    *path_out = NULL;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        const char *k = str_or_empty(kv->key), *v = str_or_empty(kv->value);
        if (strcmp(k, "location") == 0) {
            loc = v;
        } else if (strcmp(k, "offset") == 0) {
            if (!parse_u63(v, &offset))
                return kiln_fail(ctx, KILN_ERR_PARSE, "%s: external data offset '%.64s' is not "
                                 "a non-negative integer", what, v);
        } else if (strcmp(k, "length") == 0) {
            if (!parse_u63(v, &length))
                return kiln_fail(ctx, KILN_ERR_PARSE, "%s: external data length '%.64s' is not "
                                 "a non-negative integer", what, v);
        }
    }
    if (!loc)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: external data without a location", what);
    const char *why = bad_location(loc);
    if (why)
        return kiln_fail(ctx, KILN_ERR_PARSE,
                         "%s: external data location '%.200s' %s; it must be a relative path "
                         "inside the model's directory", what, loc, why);
    if (!base_dir)
        return kiln_fail(ctx, KILN_ERR_IO,
                         "%s: external data '%.200s' but the model was loaded from memory "
                         "without a base directory", what, loc);
    if (length >= 0 && length != nbytes)
        return kiln_fail(ctx, KILN_ERR_PARSE,
                         "%s: external data length %" PRId64 " does not match its dims (%" PRId64
                         " bytes)", what, length, nbytes);
    char *dir = concat(base_dir, "/");
    char *path = dir ? concat(dir, loc) : NULL;
    free(dir);
    if (!path) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (external path)");
    kiln_status st = KILN_OK;
    struct stat sb;
    if (stat(path, &sb) != 0)
        st = kiln_fail(ctx, KILN_ERR_IO, "%s: cannot open external data '%s': %s", what, path,
                       strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = kiln_fail(ctx, KILN_ERR_IO, "%s: external data '%s' is not a regular file", what,
                       path);
    else if (offset > (int64_t)sb.st_size || nbytes > (int64_t)sb.st_size - offset)
        st = kiln_fail(ctx, KILN_ERR_PARSE,
                       "%s: external data at offset %" PRId64 " + %" PRId64
                       " bytes extends past the end of '%s' (%lld bytes)",
                       what, offset, nbytes, path, (long long)sb.st_size);
    if (st) {
        free(path);
        return st;
    }
    *path_out = path;
    *offset_out = offset;
    return KILN_OK;
}

static kiln_status read_external(kiln_context *ctx, const char *path, int64_t offset,
                                 const char *what, void *dst, int64_t nbytes) {
    if (nbytes == 0) return KILN_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kiln_fail(ctx, KILN_ERR_IO, "%s: cannot open external data '%s': %s", what, path,
                         strerror(errno));
    kiln_status st = KILN_OK;
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, (size_t)nbytes, f) != (size_t)nbytes)
        st = kiln_fail(ctx, KILN_ERR_IO, "%s: cannot read %" PRId64 " bytes at offset %" PRId64
                       " of '%s'", what, nbytes, offset, path);
    fclose(f);
    return st;
}

/* Store v (the int32_data representation) as element i of t's dtype. Unsigned
 * conversions keep the low bits, as the spec's writers do. */
static void store_int32_field(kiln_tensor *t, int64_t i, int32_t v) {
    uint8_t *p = t->data;
    switch (t->dtype) {
    case KILN_I32: memcpy(p + 4 * i, &v, 4); break;
    case KILN_BOOL: p[i] = v != 0; break;
    case KILN_I8: case KILN_U8: p[i] = (uint8_t)(uint32_t)v; break;
    default: { /* i16 u16 f16 bf16: the 16 low bits */
        uint16_t h = (uint16_t)(uint32_t)v;
        memcpy(p + 2 * i, &h, 2);
    }
    }
}

/* A TensorProto into a new owning tensor. what names it in messages ("initializer 'W'"). */
static kiln_status tensor_from_proto(kiln_context *ctx, const Onnx__TensorProto *tp,
                                     const char *base_dir, const char *what, kiln_tensor **out) {
    *out = NULL;
    kiln_dtype dt;
    if (!tp->has_data_type || !dtype_from_onnx(tp->data_type, &dt))
        return bad_dtype(ctx, tp->has_data_type ? tp->data_type : 0, what);
    size_t es = kiln_dtype_size(dt);
    int64_t numel = 0;
    kiln_status st = check_dims(ctx, tp->n_dims, tp->dims, es, what, &numel);
    if (st) return st;
    if (tp->segment)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s is a segment of a tensor; unsupported",
                         what);
    int64_t nbytes = numel * (int64_t)es;

    /* Find and check the data before allocating: the dims are only as trustworthy as the
     * bytes that back them. */
    enum { SRC_EXTERNAL, SRC_RAW, SRC_TYPED } src;
    char *ext_path = NULL;
    int64_t ext_offset = 0;
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        src = SRC_EXTERNAL;
        if ((st = external_source(ctx, tp, base_dir, what, nbytes, &ext_path, &ext_offset)))
            return st;
    } else if (tp->has_data_location &&
               tp->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT) {
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s has an unknown data_location %d", what,
                         (int)tp->data_location);
    } else if (tp->has_raw_data) {
        src = SRC_RAW;
        if (tp->raw_data.len != (size_t)nbytes)
            return kiln_fail(ctx, KILN_ERR_PARSE,
                             "%s: raw_data has %zu bytes but its dims need %" PRId64 " bytes",
                             what, tp->raw_data.len, nbytes);
    } else {
        /* the typed field the spec assigns to this dtype */
        src = SRC_TYPED;
        size_t have;
        const char *field;
        switch (dt) {
        case KILN_F32: have = tp->n_float_data; field = "float_data"; break;
        case KILN_F64: have = tp->n_double_data; field = "double_data"; break;
        case KILN_I64: have = tp->n_int64_data; field = "int64_data"; break;
        case KILN_U32: case KILN_U64: have = tp->n_uint64_data; field = "uint64_data"; break;
        default: have = tp->n_int32_data; field = "int32_data"; break;
        }
        if (have != (size_t)numel)
            return kiln_fail(ctx, KILN_ERR_PARSE,
                             "%s: %s has %zu values but its dims need %" PRId64 "%s", what, field,
                             have, numel, have == 0 ? " (tensor has no data)" : "");
    }

    kiln_tensor *t = kiln_tensor_new(ctx, dt, (int)tp->n_dims, tp->dims);
    if (!t) {
        free(ext_path);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for %s (%" PRId64 " bytes)",
                         what, nbytes);
    }
    if (src == SRC_EXTERNAL) {
        st = read_external(ctx, ext_path, ext_offset, what, t->data, nbytes);
        free(ext_path);
        if (!st) {
            from_little_endian(t->data, numel, es);
            normalize_bool(t, numel);
        }
    } else if (src == SRC_RAW) {
        if (nbytes > 0) {
            memcpy(t->data, tp->raw_data.data, (size_t)nbytes);
            from_little_endian(t->data, numel, es);
            normalize_bool(t, numel);
        }
    } else {
        uint8_t *p = t->data;
        for (int64_t i = 0; i < numel; i++) {
            switch (dt) {
            case KILN_F32: memcpy(p + 4 * i, &tp->float_data[i], 4); break;
            case KILN_F64: memcpy(p + 8 * i, &tp->double_data[i], 8); break;
            case KILN_I64: memcpy(p + 8 * i, &tp->int64_data[i], 8); break;
            case KILN_U64: memcpy(p + 8 * i, &tp->uint64_data[i], 8); break;
            case KILN_U32: {
                uint32_t u = (uint32_t)tp->uint64_data[i];
                memcpy(p + 4 * i, &u, 4);
                break;
            }
            default: store_int32_field(t, i, tp->int32_data[i]); break;
            }
        }
    }
    if (st) {
        kiln_tensor_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

/* "initializer 'name'" style descriptions, names cut short for messages. */
static void describe(char *buf, size_t n, const char *kind, const char *name) {
    snprintf(buf, n, "%s '%.200s'", kind, str_or_empty(name));
}

kiln_status kiln_tensor_load_onnx_pb(kiln_context *ctx, const char *path, kiln_tensor **out) {
    if (!ctx) return KILN_ERR_INVALID_ARGUMENT;
    if (!path || !out)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_load_onnx_pb: NULL argument");
    *out = NULL;
    uint8_t *data;
    size_t size;
    kiln_status st = read_file(ctx, path, MAX_PROTO_BYTES, &data, &size);
    if (st) return st;
    Onnx__TensorProto *tp = (Onnx__TensorProto *)unpack_checked(
        ctx, &onnx__tensor_proto__descriptor, data, size, "the TensorProto");
    if (!tp) {
        st = KILN_ERR_PARSE;
    } else {
        char *dir = dir_of(path);
        char what[256];
        describe(what, sizeof what, "tensor", tp->name);
        st = dir ? tensor_from_proto(ctx, tp, dir, what, out)
                 : kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        free(dir);
        onnx__tensor_proto__free_unpacked(tp, NULL);
    }
    free(data);
    if (st) kiln_msg_prefix(ctx, "%s: ", path);
    return st;
}

/* ---------------------------------------------------------------- importer */

/* Sorted (name, position) pairs: lookups by name in O(log n), so files with huge formal
 * lists, attribute lists or function tables cannot make the import quadratic. */
typedef struct name_ix {
    const char *name;
    int index;
} name_ix;

static int cmp_name_ix(const void *a, const void *b) {
    const name_ix *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* An index of names[0..n) (NULL names left out); NULL on OOM. */
static name_ix *index_names(char *const *names, size_t n, size_t *count) {
    name_ix *ix = malloc((n ? n : 1) * sizeof *ix);
    size_t k = 0;
    if (!ix) return NULL;
    for (size_t i = 0; i < n && i <= INT_MAX; i++)
        if (names[i]) ix[k++] = (name_ix){names[i], (int)i};
    qsort(ix, k, sizeof *ix, cmp_name_ix);
    *count = k;
    return ix;
}

/* The first position named name, or -1. */
static int find_name(const name_ix *ix, size_t n, const char *name) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ix[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && strcmp(ix[lo].name, name) == 0 ? ix[lo].index : -1;
}

typedef struct named_attr {
    const char *name;               /* the name the node sees */
    const Onnx__AttributeProto *a;  /* the value (possibly from the caller or a default) */
} named_attr;

typedef struct fn_info {
    const Onnx__FunctionProto *fn;
    const char *domain;      /* normalized */
    char *overload;          /* owned; "" when none */
    size_t n_defaults;
    Onnx__AttributeProto **defaults; /* owned: attribute_proto decoded from unknown fields */
    int64_t opset;           /* the function's default-domain opset, 0: the model's */
    bool active;             /* on the current call chain (cycle detection) */
    name_ix *in_ix, *out_ix; /* formal inputs / outputs by name */
    size_t n_in_ix, n_out_ix;
} fn_info;

/* One level of inlining: how names in a function body map onto the graph. */
typedef struct frame {
    fn_info *fi;             /* NULL for the main graph */
    const char *prefix;      /* of value and node names created by this call */
    const int *actual_in;    /* per formal input: value index or -1 */
    const int *actual_out;   /* per formal output */
    const named_attr *attrs; /* the call's attributes (after its own references) */
    size_t n_attrs;
    int depth;
} frame;

enum { DEF_NONE = 0, DEF_INPUT, DEF_INIT, DEF_NODE };

typedef struct importer {
    kiln_context *ctx;
    kiln_model *m;
    const Onnx__ModelProto *mp;
    const char *base_dir;
    int64_t opset;           /* the model's default-domain opset (0: none imported) */
    size_t n_fns;
    fn_info *fns;
    fn_info **fn_sorted;     /* by (name, domain, overload) */
    uint8_t *def;            /* per value index: DEF_* (who defines it) */
    int cap_def;
    int64_t n_nodes;         /* nodes added */
    int64_t node_budget;     /* most nodes inlining may produce */
    size_t name_bytes;       /* bytes of generated names (inlining budget) */
    int64_t counter;         /* makes each call's prefix unique */
    /* Listing ops only (kiln_onnx_load_unfinalized): keep nodes of unknown domains, drop
     * what kiln cannot represent (subgraph attributes, STRING tensors, non-tensor inputs)
     * instead of failing, and skip the reference checks. */
    bool lenient;
} importer;

static const char *def_name(uint8_t d) {
    return d == DEF_INPUT ? "a graph input" : d == DEF_INIT ? "an initializer" : "a node";
}

static bool grow_def(importer *im, int v) {
    if (v < im->cap_def) return true;
    int cap = im->cap_def ? im->cap_def : 64;
    while (cap <= v) {
        if (cap > INT_MAX / 2) return false;
        cap *= 2;
    }
    uint8_t *d = realloc(im->def, (size_t)cap);
    if (!d) return false;
    memset(d + im->cap_def, 0, (size_t)(cap - im->cap_def));
    im->def = d;
    im->cap_def = cap;
    return true;
}

static uint8_t def_of(const importer *im, int v) { return v < im->cap_def ? im->def[v] : DEF_NONE; }

/* A value index by name, created on first use. */
static kiln_status value_index(importer *im, const char *name, int *out) {
    *out = kiln_model_get_value(im->m, name);
    if (*out < 0)
        return kiln_fail(im->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (value '%.200s')", name);
    if (!grow_def(im, *out)) return kiln_fail(im->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return KILN_OK;
}

static int64_t opset_of(const Onnx__OperatorSetIdProto *const *imports, size_t n,
                        const char *domain, bool *dup) {
    int64_t v = 0;
    bool found = false;
    *dup = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(norm_domain(imports[i]->domain), domain) != 0) continue;
        if (found) *dup = true;
        found = true;
        v = imports[i]->has_version ? imports[i]->version : 0;
    }
    return v;
}

static kiln_status check_opset(kiln_context *ctx, int64_t v, const char *where) {
    if (v < MIN_OPSET || v > MAX_OPSET)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                         "%s imports opset %" PRId64 " of the default domain; kiln reads opsets "
                         "%d to %d", where, v, MIN_OPSET, MAX_OPSET);
    return KILN_OK;
}

static int cmp_fn(const void *a, const void *b) {
    const fn_info *x = *(fn_info *const *)a, *y = *(fn_info *const *)b;
    int c = strcmp(x->fn->name, y->fn->name);
    if (!c) c = strcmp(x->domain, y->domain);
    return c ? c : strcmp(x->overload, y->overload);
}

static int cmp_attr_name(const void *a, const void *b) {
    return strcmp((*(Onnx__AttributeProto *const *)a)->name,
                  (*(Onnx__AttributeProto *const *)b)->name);
}

/* The attribute defaults of a function: FunctionProto.attribute_proto (field 11, newer
 * than our schema, so protobuf-c kept them as unknown fields), sorted by name. */
static kiln_status load_defaults(importer *im, fn_info *fi, const char *where) {
    const ProtobufCMessage *base = &fi->fn->base;
    unsigned n = 0;
    for (unsigned k = 0; k < base->n_unknown_fields; k++)
        if (base->unknown_fields[k].tag == 11) n++;
    if (n == 0) return KILN_OK;
    fi->defaults = kiln_calloc(im->ctx, n, sizeof *fi->defaults, "function attributes");
    if (!fi->defaults) return KILN_ERR_OUT_OF_MEMORY;
    for (unsigned k = 0; k < base->n_unknown_fields; k++) {
        const ProtobufCMessageUnknownField *u = &base->unknown_fields[k];
        if (u->tag != 11) continue;
        const uint8_t *p = u->data, *end = u->data + u->len;
        uint64_t len;
        if (u->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED || !read_varint(&p, end, &len) ||
            len != (uint64_t)(end - p))
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "%s: malformed attribute default #%zu",
                             where, fi->n_defaults);
        Onnx__AttributeProto *a = (Onnx__AttributeProto *)unpack_checked(
            im->ctx, &onnx__attribute_proto__descriptor, p, (size_t)len, "an attribute default");
        if (!a) {
            kiln_msg_prefix(im->ctx, "%s: ", where);
            return KILN_ERR_PARSE;
        }
        fi->defaults[fi->n_defaults++] = a;
        if (!a->name || !*a->name)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "%s: attribute default #%zu has no name",
                             where, fi->n_defaults - 1);
    }
    qsort(fi->defaults, fi->n_defaults, sizeof *fi->defaults, cmp_attr_name);
    for (size_t k = 1; k < fi->n_defaults; k++)
        if (strcmp(fi->defaults[k - 1]->name, fi->defaults[k]->name) == 0)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "%s: attribute default '%.200s' is given "
                             "twice", where, fi->defaults[k]->name);
    return KILN_OK;
}

static kiln_status load_functions(importer *im) {
    const Onnx__ModelProto *mp = im->mp;
    if (mp->n_functions == 0) return KILN_OK;
    im->fns = kiln_calloc(im->ctx, mp->n_functions, sizeof *im->fns, "function table");
    im->fn_sorted = kiln_calloc(im->ctx, mp->n_functions, sizeof *im->fn_sorted, "function table");
    if (!im->fns || !im->fn_sorted) return KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < mp->n_functions; i++) {
        const Onnx__FunctionProto *fn = mp->functions[i];
        fn_info *fi = &im->fns[im->n_fns++];
        fi->fn = fn;
        fi->domain = norm_domain(fn->domain);
        im->fn_sorted[i] = fi;
        if (!fn->name || !*fn->name)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "local function #%zu has no name", i);
        char where[300];
        snprintf(where, sizeof where, "local function '%.200s'", fn->name);
        if (fn->n_input > INT_MAX || fn->n_output > INT_MAX)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "%s has too many inputs or outputs", where);
        fi->overload = unknown_string(&fn->base, 13);
        fi->in_ix = index_names(fn->input, fn->n_input, &fi->n_in_ix);
        fi->out_ix = index_names(fn->output, fn->n_output, &fi->n_out_ix);
        if (!fi->overload || !fi->in_ix || !fi->out_ix)
            return kiln_fail(im->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (%s)", where);
        bool dup;
        fi->opset = opset_of((const Onnx__OperatorSetIdProto *const *)fn->opset_import,
                             fn->n_opset_import, "", &dup);
        if (dup)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "%s imports the default domain twice", where);
        kiln_status st;
        if (fi->opset && (st = check_opset(im->ctx, fi->opset, where))) return st;
        if ((st = load_defaults(im, fi, where))) return st;
    }
    qsort(im->fn_sorted, im->n_fns, sizeof *im->fn_sorted, cmp_fn);
    for (size_t i = 1; i < im->n_fns; i++)
        if (cmp_fn(&im->fn_sorted[i - 1], &im->fn_sorted[i]) == 0)
            return kiln_fail(im->ctx, KILN_ERR_PARSE,
                             "local function '%.200s' (domain '%.200s') is defined twice",
                             im->fn_sorted[i]->fn->name, im->fn_sorted[i]->domain);
    return KILN_OK;
}

static void free_functions(importer *im) {
    for (size_t i = 0; i < im->n_fns; i++) {
        fn_info *fi = &im->fns[i];
        for (size_t k = 0; k < fi->n_defaults; k++)
            onnx__attribute_proto__free_unpacked(fi->defaults[k], NULL);
        free(fi->defaults);
        free(fi->overload);
        free(fi->in_ix);
        free(fi->out_ix);
    }
    free(im->fns);
    free(im->fn_sorted);
}

static fn_info *find_function(importer *im, const char *domain, const char *name,
                              const char *overload) {
    Onnx__FunctionProto key_fn = ONNX__FUNCTION_PROTO__INIT;
    key_fn.name = (char *)name;
    fn_info key = {.fn = &key_fn, .domain = domain, .overload = (char *)overload};
    const fn_info *kp = &key;
    fn_info **hit = im->n_fns ? bsearch(&kp, im->fn_sorted, im->n_fns, sizeof *im->fn_sorted,
                                        cmp_fn) : NULL;
    return hit ? *hit : NULL;
}

/* A function's attribute default by name (defaults are sorted), or NULL. */
static const Onnx__AttributeProto *find_default(const fn_info *fi, const char *name) {
    Onnx__AttributeProto key_a = ONNX__ATTRIBUTE_PROTO__INIT;
    key_a.name = (char *)name;
    const Onnx__AttributeProto *kp = &key_a;
    Onnx__AttributeProto **hit = fi->n_defaults ? bsearch(&kp, fi->defaults, fi->n_defaults,
                                                          sizeof *fi->defaults, cmp_attr_name)
                                                : NULL;
    return hit ? *hit : NULL;
}

/* Map a name used inside a frame to a value index (-1: a missing optional value). */
static kiln_status resolve_value(importer *im, const frame *fr, const char *name, int *out) {
    *out = -1;
    if (!name || !*name) return KILN_OK;
    if (!fr->fi) return value_index(im, name, out);
    const fn_info *fi = fr->fi;
    int k = find_name(fi->in_ix, fi->n_in_ix, name);
    if (k >= 0) {
        *out = fr->actual_in[k];
        return KILN_OK;
    }
    k = find_name(fi->out_ix, fi->n_out_ix, name);
    if (k >= 0 && fr->actual_out[k] >= 0) {
        *out = fr->actual_out[k];
        return KILN_OK;
    }
    /* a value local to this call */
    size_t len = strlen(fr->prefix) + strlen(name) + 1;
    if (len > MAX_NAME_BYTES - im->name_bytes)
        return kiln_fail(im->ctx, KILN_ERR_PARSE,
                         "inlining local functions generates more than 256 MiB of value names");
    im->name_bytes += len;
    char *full = concat(fr->prefix, name);
    if (!full) return kiln_fail(im->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status st = value_index(im, full, out);
    free(full);
    return st;
}

/* An AttributeProto's type, inferred from its fields when old writers left it out. */
static int attr_type(const Onnx__AttributeProto *a) {
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) return a->type;
    if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (a->g) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (a->sparse_tensor) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR;
    if (a->tp) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO;
    if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n_strings) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    if (a->n_tensors) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
    if (a->n_graphs) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

static char *dup_bytes(const ProtobufCBinaryData *b) {
    char *s = malloc(b->len + 1);
    if (!s) return NULL;
    if (b->len) memcpy(s, b->data, b->len);
    s[b->len] = '\0';
    return s;
}

/* One attribute into a kiln_attr (cleared by kiln_attr_clear on any outcome). */
static kiln_status convert_attr(importer *im, const named_attr *na, const char *where,
                                kiln_attr *out) {
    kiln_context *ctx = im->ctx;
    const Onnx__AttributeProto *a = na->a;
    memset(out, 0, sizeof *out);
    out->name = kiln_strdup(ctx, na->name);
    if (!out->name) return KILN_ERR_OUT_OF_MEMORY;
    int type = attr_type(a);
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        out->type = KILN_ATTR_FLOAT;
        out->f = a->f;
        return KILN_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        out->type = KILN_ATTR_INT;
        out->i = a->i;
        return KILN_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        out->type = KILN_ATTR_STRING;
        out->s = dup_bytes(&a->s);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        out->type = KILN_ATTR_TENSOR;
        if (!a->t)
            return kiln_fail(ctx, KILN_ERR_PARSE, "%s: attribute '%.200s' of type TENSOR has no "
                             "tensor", where, na->name);
        char what[1000];
        snprintf(what, sizeof what, "%s: attribute '%.200s'", where, na->name);
        return tensor_from_proto(ctx, a->t, im->base_dir, what, &out->t);
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: {
        size_t n = type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS ? a->n_floats
                   : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS ? a->n_ints
                                                                         : a->n_strings;
        if (n > (size_t)INT_MAX)
            return kiln_fail(ctx, KILN_ERR_PARSE, "%s: attribute '%.200s' has too many values",
                             where, na->name);
        out->n = (int)n;
        if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS) {
            out->type = KILN_ATTR_FLOATS;
            out->floats = malloc(n ? n * sizeof(float) : 1);
            if (out->floats && n) memcpy(out->floats, a->floats, n * sizeof(float));
            if (!out->floats) break;
        } else if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS) {
            out->type = KILN_ATTR_INTS;
            out->ints = malloc(n ? n * sizeof(int64_t) : 1);
            if (out->ints && n) memcpy(out->ints, a->ints, n * sizeof(int64_t));
            if (!out->ints) break;
        } else {
            out->type = KILN_ATTR_STRINGS;
            out->strings = calloc(n ? n : 1, sizeof(char *));
            if (!out->strings) break;
            for (size_t i = 0; i < n; i++)
                if (!(out->strings[i] = dup_bytes(&a->strings[i])))
                    return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (attribute)");
        }
        return KILN_OK;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED:
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: attribute '%.200s' has no type and no value",
                         where, na->name);
    default: {
        const char *tn = type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ? "GRAPH (a subgraph)"
                         : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS ? "GRAPHS"
                         : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR ? "SPARSE_TENSOR"
                         : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS ? "SPARSE_TENSORS"
                         : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO ? "TYPE_PROTO"
                         : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS ? "TYPE_PROTOS"
                         : type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS ? "TENSORS"
                                                                                  : NULL;
        if (!tn)
            return kiln_fail(ctx, KILN_ERR_PARSE, "%s: attribute '%.200s' has unknown type %d",
                             where, na->name, type);
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                         "%s: attribute '%.200s' of type %s is not supported", where, na->name, tn);
    }
    }
    if (type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING && out->s) return KILN_OK;
    return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (attribute)");
}

static int cmp_named_attr(const void *a, const void *b) {
    return strcmp(((const named_attr *)a)->name, ((const named_attr *)b)->name);
}

/* Resolve a node's attributes in its frame: references (ref_attr_name) take the call's
 * attribute or the function's default; unresolved references are absent, as in ONNX.
 * The result is sorted by name (frames look attributes up by name). */
static kiln_status resolve_attrs(importer *im, const frame *fr, const Onnx__NodeProto *np,
                                 const char *where, named_attr **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (np->n_attribute == 0) return KILN_OK;
    named_attr *na = kiln_calloc(im->ctx, np->n_attribute, sizeof *na, "attributes");
    if (!na) return KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *a = np->attribute[i];
        if (!a->name || !*a->name) {
            free(na);
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "%s: attribute #%zu has no name", where, i);
        }
        na[i] = (named_attr){a->name, a};
    }
    qsort(na, np->n_attribute, sizeof *na, cmp_named_attr);
    for (size_t i = 1; i < np->n_attribute; i++)
        if (strcmp(na[i - 1].name, na[i].name) == 0) {
            kiln_fail(im->ctx, KILN_ERR_PARSE, "%s: attribute '%.200s' is given twice", where,
                      na[i].name);
            free(na);
            return KILN_ERR_PARSE;
        }
    size_t n = 0;
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *a = na[i].a, *val = a;
        if (a->ref_attr_name && *a->ref_attr_name) {
            if (!fr->fi) {
                kiln_fail(im->ctx, KILN_ERR_PARSE,
                          "%s: attribute '%.200s' refers to '%.200s' outside a function", where,
                          a->name, a->ref_attr_name);
                free(na);
                return KILN_ERR_PARSE;
            }
            named_attr key = {a->ref_attr_name, NULL};
            const named_attr *hit = fr->n_attrs ? bsearch(&key, fr->attrs, fr->n_attrs,
                                                          sizeof *fr->attrs, cmp_named_attr)
                                                : NULL;
            val = hit ? hit->a : find_default(fr->fi, a->ref_attr_name);
            if (!val) continue;
        }
        na[n++] = (named_attr){a->name, val};
    }
    *out = na;
    *n_out = n;
    return KILN_OK;
}

static kiln_status import_nodes(importer *im, const frame *fr, size_t n_nodes,
                                Onnx__NodeProto *const *nodes);

/* Inline one call of a local function. */
static kiln_status inline_call(importer *im, const frame *fr, const Onnx__NodeProto *np,
                               const char *full_name, fn_info *fi, const named_attr *attrs,
                               size_t n_attrs, const char *where) {
    const Onnx__FunctionProto *fn = fi->fn;
    if (fr->depth + 1 > MAX_FUNCTION_DEPTH)
        return kiln_fail(im->ctx, KILN_ERR_GRAPH, "%s: local functions nested deeper than %d",
                         where, MAX_FUNCTION_DEPTH);
    if (fi->active)
        return kiln_fail(im->ctx, KILN_ERR_GRAPH,
                         "%s: local function '%.200s' calls itself (a cycle of functions)", where,
                         fn->name);
    if (np->n_input > fn->n_input || np->n_output > fn->n_output)
        return kiln_fail(im->ctx, KILN_ERR_GRAPH,
                         "%s: %zu inputs and %zu outputs, but local function '%.200s' takes %zu "
                         "and gives %zu", where, np->n_input, np->n_output, fn->name, fn->n_input,
                         fn->n_output);
    kiln_status st = KILN_OK;
    int *actual_in = malloc((fn->n_input + 1) * sizeof(int));
    int *actual_out = malloc((fn->n_output + 1) * sizeof(int));
    char prefix_buf[64];
    char *prefix = NULL;
    if (!actual_in || !actual_out) {
        st = kiln_fail(im->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (function call)");
        goto done;
    }
    for (size_t i = 0; i < fn->n_input && !st; i++) {
        actual_in[i] = -1;
        if (i < np->n_input) st = resolve_value(im, fr, np->input[i], &actual_in[i]);
    }
    for (size_t i = 0; i < fn->n_output && !st; i++) {
        actual_out[i] = -1;
        if (i < np->n_output) st = resolve_value(im, fr, np->output[i], &actual_out[i]);
    }
    if (st) goto done;
    /* the call's name plus a counter: unique even when node names repeat or are empty */
    snprintf(prefix_buf, sizeof prefix_buf, "#%" PRId64 "/", im->counter++);
    prefix = concat(full_name, prefix_buf);
    if (!prefix) {
        st = kiln_fail(im->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (function call)");
        goto done;
    }
    frame sub = {.fi = fi, .prefix = prefix, .actual_in = actual_in, .actual_out = actual_out,
                 .attrs = attrs, .n_attrs = n_attrs, .depth = fr->depth + 1};
    fi->active = true;
    st = import_nodes(im, &sub, fn->n_node, fn->node);
    fi->active = false;
done:
    free(prefix);
    free(actual_in);
    free(actual_out);
    return st;
}

/* Mark value v as defined by a node (duplicate definitions are errors). */
static kiln_status define_output(importer *im, int v, const char *where) {
    if (v < 0) return KILN_OK;
    uint8_t d = def_of(im, v);
    if (d != DEF_NONE)
        return kiln_fail(im->ctx, KILN_ERR_GRAPH, "%s: output '%.200s' is already defined by %s",
                         where, im->m->values[v].name, def_name(d));
    im->def[v] = DEF_NODE;
    return KILN_OK;
}

/* Add one node of the default domain. */
static kiln_status add_op_node(importer *im, const frame *fr, const Onnx__NodeProto *np,
                               const char *full_name, const char *domain,
                               const named_attr *attrs, size_t n_attrs, const char *where) {
    kiln_context *ctx = im->ctx;
    int64_t opset = fr->fi && fr->fi->opset ? fr->fi->opset : im->opset;
    if (opset == 0 && !*domain)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: the model imports no opset of the default "
                         "domain", where);
    /* Before opset 7, elementwise ops broadcast by attributes: broadcast=1 alone matches
     * B's shape to a suffix of A's, as numpy does; with `axis` it aligns B at that axis,
     * which is numpy's alignment only when axis = rank(A) - rank(B). Ops implement numpy
     * broadcasting, so other cases (or ranks unknown here) are refused, not guessed. */
    if (!*domain && opset < 7) {
        const Onnx__AttributeProto *bc = NULL, *ax = NULL;
        for (size_t i = 0; i < n_attrs; i++) {
            if (strcmp(attrs[i].name, "broadcast") == 0) bc = attrs[i].a;
            if (strcmp(attrs[i].name, "axis") == 0) ax = attrs[i].a;
        }
        if (bc && attr_type(bc) == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT && bc->i != 0 && ax) {
            int ra = -1, rb = -1;
            if (np->n_input == 2) {
                int va = kiln_model_find_value(im->m, np->input[0]);
                int vb = kiln_model_find_value(im->m, np->input[1]);
                /* ranks are known here for graph inputs and initializers */
                if (va >= 0 && def_of(im, va) != DEF_NODE) ra = im->m->values[va].ndim;
                if (vb >= 0 && def_of(im, vb) != DEF_NODE) rb = im->m->values[vb].ndim;
            }
            int64_t axis = ax->i < 0 && ra >= 0 ? ax->i + ra : ax->i;
            if (fr->fi || ra < 0 || rb < 0 || axis != ra - rb)
                return kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                                 "%s: legacy broadcasting along axis %" PRId64 " (opset %" PRId64
                                 " < 7) is not supported; re-export with opset >= 7", where,
                                 ax->i, opset);
        }
    }
    if (np->n_input > (size_t)INT_MAX / 2 || np->n_output > (size_t)INT_MAX / 2)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: too many inputs or outputs", where);
    if (im->n_nodes >= im->node_budget)
        return kiln_fail(ctx, KILN_ERR_PARSE,
                         "inlining local functions expands the model past %" PRId64 " nodes "
                         "(%d times the nodes of the file, at least %d)", im->node_budget,
                         NODE_EXPANSION, MIN_NODE_BUDGET);
    kiln_status st = KILN_OK;
    int *in = malloc((np->n_input + 1) * sizeof(int));
    int *out = malloc((np->n_output + 1) * sizeof(int));
    kiln_attr *ka = n_attrs ? calloc(n_attrs, sizeof *ka) : NULL;
    size_t n_ka = 0;
    if (!in || !out || (n_attrs && !ka)) {
        st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (node)");
        goto fail;
    }
    for (size_t i = 0; i < np->n_input && !st; i++) st = resolve_value(im, fr, np->input[i], &in[i]);
    for (size_t i = 0; i < np->n_output && !st; i++) {
        st = resolve_value(im, fr, np->output[i], &out[i]);
        if (!st) st = define_output(im, out[i], where);
    }
    for (size_t i = 0; i < n_attrs && !st; i++) {
        st = convert_attr(im, &attrs[i], where, &ka[n_ka]);
        if (st == KILN_ERR_UNSUPPORTED && im->lenient) {
            kiln_attr_clear(&ka[n_ka]);
            st = KILN_OK;
            continue;
        }
        n_ka++;
    }
    if (st) goto fail;
    int before = im->m->n_nodes;
    int idx = kiln_model_add_node_raw(im->m, np->op_type, full_name, domain, (int)np->n_input,
                                      in, (int)np->n_output, out, (int)n_ka, ka);
    /* the node owns the attributes once it is counted, even if it failed half-way */
    if (im->m->n_nodes > before) ka = NULL;
    if (idx < 0) {
        st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory adding the node", where);
        goto fail;
    }
    im->m->nodes[idx].opset = (int)opset;
    im->n_nodes++;
fail:
    if (ka) {
        for (size_t i = 0; i <= n_ka && i < n_attrs; i++) kiln_attr_clear(&ka[i]);
        free(ka);
    }
    free(in);
    free(out);
    return st;
}

static kiln_status import_node(importer *im, const frame *fr, const Onnx__NodeProto *np,
                               size_t index) {
    kiln_context *ctx = im->ctx;
    char *full_name = NULL, *overload = NULL;
    named_attr *attrs = NULL;
    size_t n_attrs = 0;
    kiln_status st = KILN_OK;
    char where[700];
    const char *op = str_or_empty(np->op_type);

    /* inlined nodes get the call's prefix; unnamed ones there get op and position, so
     * messages can point at them */
    char unnamed[160] = "";
    if (*fr->prefix && !(np->name && *np->name))
        snprintf(unnamed, sizeof unnamed, "%.100s_%zu", op, index);
    const char *local = np->name && *np->name ? np->name : unnamed;
    if (fr->fi) {
        size_t len = strlen(fr->prefix) + strlen(local) + 1;
        if (len > MAX_NAME_BYTES - im->name_bytes)
            return kiln_fail(ctx, KILN_ERR_PARSE,
                             "inlining local functions generates more than 256 MiB of names");
        im->name_bytes += len;
    }
    full_name = concat(fr->prefix, local);
    if (!full_name) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (node name)");
    if (*full_name)
        snprintf(where, sizeof where, "node '%.300s' (%.100s)", full_name, op);
    else
        snprintf(where, sizeof where, "node #%zu (%.100s)", index, op);
    if (!*op) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "%s has no op_type", where);
        goto done;
    }
    for (size_t i = 0; i < np->n_input; i++)
        if (!np->input[i]) {
            st = kiln_fail(ctx, KILN_ERR_PARSE, "%s: input #%zu has no name", where, i);
            goto done;
        }
    for (size_t i = 0; i < np->n_output; i++)
        if (!np->output[i]) {
            st = kiln_fail(ctx, KILN_ERR_PARSE, "%s: output #%zu has no name", where, i);
            goto done;
        }
    if ((st = resolve_attrs(im, fr, np, where, &attrs, &n_attrs))) goto done;
    const char *domain = norm_domain(np->domain);
    overload = unknown_string(&np->base, 8);
    if (!overload) {
        st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    fn_info *fi = find_function(im, domain, op, overload);
    if (fi)
        st = inline_call(im, fr, np, full_name, fi, attrs, n_attrs, where);
    else if (*domain && !im->lenient)
        st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED,
                       "%s is in domain '%.200s', which is neither the default ONNX domain nor "
                       "a local function of the model", where, domain);
    else
        st = add_op_node(im, fr, np, full_name, domain, attrs, n_attrs, where);
done:
    free(attrs);
    free(overload);
    free(full_name);
    return st;
}

static kiln_status import_nodes(importer *im, const frame *fr, size_t n_nodes,
                                Onnx__NodeProto *const *nodes) {
    for (size_t i = 0; i < n_nodes; i++) {
        kiln_status st = import_node(im, fr, nodes[i], i);
        if (st) return st;
    }
    return KILN_OK;
}

static kiln_status import_initializers(importer *im, const Onnx__GraphProto *g) {
    if (g->n_sparse_initializer)
        return kiln_fail(im->ctx, KILN_ERR_UNSUPPORTED, "sparse initializers are not supported "
                         "('%.200s')", str_or_empty(g->sparse_initializer[0]->values
                                                      ? g->sparse_initializer[0]->values->name
                                                      : NULL));
    for (size_t i = 0; i < g->n_initializer; i++) {
        const Onnx__TensorProto *tp = g->initializer[i];
        char what[256];
        if (!tp->name || !*tp->name)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "initializer #%zu has no name", i);
        describe(what, sizeof what, "initializer", tp->name);
        int v;
        kiln_status st = value_index(im, tp->name, &v);
        if (st) return st;
        if (def_of(im, v) != DEF_NONE)
            return kiln_fail(im->ctx, KILN_ERR_GRAPH, "%s is given twice", what);
        kiln_tensor *t;
        if ((st = tensor_from_proto(im->ctx, tp, im->base_dir, what, &t))) {
            if (!(im->lenient && st == KILN_ERR_UNSUPPORTED)) return st;
            im->def[v] = DEF_INIT;
            continue;
        }
        im->m->values[v].init = t;
        im->m->values[v].dtype = t->dtype;
        im->m->values[v].ndim = t->ndim;
        memcpy(im->m->values[v].dims, t->dims, sizeof t->dims);
        im->def[v] = DEF_INIT;
    }
    return KILN_OK;
}

/* A graph input's tensor type: dtype, dims (-1 where symbolic or unknown, or written as
 * -1; ndim -1 without a shape) and the names of symbolic dims. */
static kiln_status input_type(kiln_context *ctx, const Onnx__ValueInfoProto *vi, const char *what,
                              kiln_dtype *dt, int *ndim, int64_t *dims, const char **params) {
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s has no type", what);
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s is a%s; kiln supports tensor inputs only",
                         what,
                         tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE   ? " sequence"
                         : tp->value_case == ONNX__TYPE_PROTO__VALUE_MAP_TYPE      ? " map"
                         : tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? "n optional"
                                                                                   : " sparse tensor");
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (!tt->has_elem_type || !dtype_from_onnx(tt->elem_type, dt))
        return bad_dtype(ctx, tt->has_elem_type ? tt->elem_type : 0, what);
    *ndim = -1;
    if (!tt->shape) return KILN_OK;
    const Onnx__TensorShapeProto *sh = tt->shape;
    if (sh->n_dim > KILN_MAX_DIMS)
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s has %zu dims; kiln supports at most %d", what,
                         sh->n_dim, KILN_MAX_DIMS);
    int64_t known = 1;
    for (size_t k = 0; k < sh->n_dim; k++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[k];
        dims[k] = -1;
        params[k] = NULL;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value == -1) {
            /* -1: a dynamic dim as paddle2onnx writes it (onnxruntime reads it so): unnamed
             * and symbolic, like a dim without a value */
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return kiln_fail(ctx, KILN_ERR_PARSE, "%s: dim %zu is negative (%" PRId64 ")",
                                 what, k, d->dim_value);
            if (d->dim_value > 0 && d->dim_value > MAX_ELEMS / known)
                return kiln_fail(ctx, KILN_ERR_PARSE,
                                 "%s: dims overflow (more than 2^62 elements)", what);
            if (d->dim_value > 0) known *= d->dim_value;
            dims[k] = d->dim_value;
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param && *d->dim_param) {
            params[k] = d->dim_param;
        }
    }
    *ndim = (int)sh->n_dim;
    return KILN_OK;
}

static kiln_status import_inputs(importer *im, const Onnx__GraphProto *g) {
    kiln_context *ctx = im->ctx;
    for (size_t i = 0; i < g->n_input; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        char what[256];
        if (!vi->name || !*vi->name)
            return kiln_fail(ctx, KILN_ERR_PARSE, "graph input #%zu has no name", i);
        describe(what, sizeof what, "graph input", vi->name);
        int v = kiln_model_find_value(im->m, vi->name);
        if (v >= 0 && def_of(im, v) == DEF_INIT) continue; /* an initializer, not an input */
        if (v >= 0 && def_of(im, v) != DEF_NONE)
            return kiln_fail(ctx, KILN_ERR_GRAPH, "%s is listed twice", what);
        kiln_dtype dt = KILN_DTYPE_UNDEFINED;
        int ndim = -1;
        int64_t dims[KILN_MAX_DIMS];
        const char *params[KILN_MAX_DIMS] = {0};
        kiln_status st = input_type(ctx, vi, what, &dt, &ndim, dims, params);
        if (st == KILN_ERR_UNSUPPORTED && im->lenient) {
            /* defined, so its consumers are still listed, but not an input kiln can bind */
            if ((st = value_index(im, vi->name, &v))) return st;
            im->def[v] = DEF_INPUT;
            continue;
        }
        if (st) return st;
        /* without a shape the rank comes with the data: added as a scalar, then marked */
        st = kiln_model_add_input(im->m, vi->name, dt, ndim > 0 ? ndim : 0, ndim > 0 ? dims : NULL);
        if (st) return st;
        if ((v = kiln_model_find_value(im->m, vi->name)) < 0 || !grow_def(im, v))
            return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory (%s)", what);
        im->m->values[v].ndim = ndim;
        im->def[v] = DEF_INPUT;
        for (int k = 0; k < ndim; k++)
            if (params[k] && !(im->m->values[v].dim_param[k] = kiln_strdup(ctx, params[k])))
                return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

/* Every node input must be defined somewhere (the order is the finalizer's business). */
static kiln_status check_defined(importer *im) {
    const kiln_model *m = im->m;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v >= 0 && def_of(im, v) == DEF_NONE) {
                if (*n->name)
                    return kiln_fail(im->ctx, KILN_ERR_GRAPH,
                                     "node '%.300s' (%.100s): input '%.200s' is undefined (no node, "
                                     "graph input or initializer gives it)",
                                     n->name, n->op_type, m->values[v].name);
                return kiln_fail(im->ctx, KILN_ERR_GRAPH,
                                 "node #%d (%.100s): input '%.200s' is undefined (no node, graph "
                                 "input or initializer gives it)", i, n->op_type, m->values[v].name);
            }
        }
    }
    return KILN_OK;
}

static kiln_status import_outputs(importer *im, const Onnx__GraphProto *g) {
    for (size_t i = 0; i < g->n_output; i++) {
        const Onnx__ValueInfoProto *vi = g->output[i];
        if (!vi->name || !*vi->name)
            return kiln_fail(im->ctx, KILN_ERR_PARSE, "graph output #%zu has no name", i);
        int v = kiln_model_find_value(im->m, vi->name);
        if (v < 0 || def_of(im, v) == DEF_NONE)
            return kiln_fail(im->ctx, KILN_ERR_GRAPH,
                             "graph output '%.200s' is undefined (no node, graph input or "
                             "initializer gives it)", vi->name);
        kiln_status st = kiln_model_add_output(im->m, vi->name);
        if (st) return st;
    }
    return KILN_OK;
}

static kiln_status import_model(importer *im) {
    kiln_context *ctx = im->ctx;
    const Onnx__ModelProto *mp = im->mp;
    const Onnx__GraphProto *g = mp->graph;
    if (!g) return kiln_fail(ctx, KILN_ERR_PARSE, "the model has no graph");
    bool dup;
    im->opset = opset_of((const Onnx__OperatorSetIdProto *const *)mp->opset_import,
                         mp->n_opset_import, "", &dup);
    if (dup) return kiln_fail(ctx, KILN_ERR_PARSE, "opset_import lists the default domain twice");
    if (im->opset) {
        kiln_status st = check_opset(ctx, im->opset, "the model");
        if (st) return st;
    }
    if (im->opset) im->m->opset = (int)im->opset;
    if (mp->has_ir_version && mp->ir_version > 0) im->m->ir_version = mp->ir_version;
    if (mp->producer_name && *mp->producer_name) {
        size_t n = strlen(mp->producer_name) + strlen(str_or_empty(mp->producer_version)) + 2;
        char *p = kiln_malloc(ctx, n, "producer name");
        if (!p) return KILN_ERR_OUT_OF_MEMORY;
        snprintf(p, n, "%s%s%s", mp->producer_name,
                 mp->producer_version && *mp->producer_version ? " " : "",
                 str_or_empty(mp->producer_version));
        free(im->m->producer);
        im->m->producer = p;
    }
    int64_t in_file = (int64_t)g->n_node;
    for (size_t i = 0; i < mp->n_functions; i++) in_file += (int64_t)mp->functions[i]->n_node;
    im->node_budget = in_file > MAX_NODES / NODE_EXPANSION ? MAX_NODES : in_file * NODE_EXPANSION;
    if (im->node_budget < MIN_NODE_BUDGET) im->node_budget = MIN_NODE_BUDGET;
    kiln_status st;
    if ((st = load_functions(im))) return st;
    if ((st = import_initializers(im, g))) return st;
    if ((st = import_inputs(im, g))) return st;
    frame top = {.prefix = ""};
    if ((st = import_nodes(im, &top, g->n_node, g->node))) return st;
    if (im->lenient) return KILN_OK;
    if ((st = check_defined(im))) return st;
    return import_outputs(im, g);
}

static kiln_status load_buffer(kiln_context *ctx, const void *data, size_t size,
                               const char *base_dir, bool finalize, kiln_model **out) {
    *out = NULL;
    Onnx__ModelProto *mp = (Onnx__ModelProto *)unpack_checked(
        ctx, &onnx__model_proto__descriptor, data, size, "the file");
    if (!mp) return KILN_ERR_PARSE;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (!st) {
        importer im = {.ctx = ctx, .m = m, .mp = mp, .base_dir = base_dir, .lenient = !finalize};
        st = import_model(&im);
        free_functions(&im);
        free(im.def);
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    if (!st && finalize) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_model_load_onnx_buffer(kiln_context *ctx, const void *data, size_t size,
                                        const char *base_dir, kiln_model **out) {
    if (!ctx) return KILN_ERR_INVALID_ARGUMENT;
    if (!out || (!data && size))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "kiln_model_load_onnx_buffer: NULL argument");
    return load_buffer(ctx, data ? data : "", size, base_dir, true, out);
}

static kiln_status load_path(kiln_context *ctx, const char *path, bool finalize,
                             kiln_model **out) {
    if (!ctx) return KILN_ERR_INVALID_ARGUMENT;
    if (!path || !out)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_model_load_onnx: NULL argument");
    *out = NULL;
    uint8_t *data;
    size_t size;
    kiln_status st = read_file(ctx, path, MAX_PROTO_BYTES, &data, &size);
    if (st) return st;
    char *dir = dir_of(path);
    if (!dir) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else st = load_buffer(ctx, data, size, dir, finalize, out);
    free(dir);
    free(data);
    if (st) kiln_msg_prefix(ctx, "%s: ", path);
    return st;
}

kiln_status kiln_model_load_onnx(kiln_context *ctx, const char *path, kiln_model **out) {
    return load_path(ctx, path, true, out);
}

kiln_status kiln_onnx_load_unfinalized(kiln_context *ctx, const char *path, kiln_model **out) {
    return load_path(ctx, path, false, out);
}
