/*
 * fused_emulate.c — the kernel lab for kiln.FusedElementwise without a GPU: the CUDA C that
 * src/cuda/fused_elementwise.c generates is compiled for the host by g++ (a shim maps
 * __global__/blockIdx/__umulhi... to host code; f16/bf16 PTX conversions are replaced by
 * host ones, bf16 only), every thread of the launch the library would make is run in
 * turn, and the output is compared with the composition of the program's ONNX ops on
 * the CPU reference. It checks what only the GPU tests otherwise check: the generated
 * index arithmetic (merged dims, magic-number division, offsets, vector groups, the
 * scalar tail, grid-stride loops with several steps per thread), on tiny grids.
 *
 *   cc -std=c11 -D_POSIX_C_SOURCE=200809L -Isrc -Iinclude -I/usr/local/cuda/include \
 *      dev/fused_emulate.c build-cuda/libkiln_testing.a build-cuda/libkiln.a \
 *      -L/usr/local/cuda/lib64 -lcudart_static \
 *      -lnvrtc -lcublasLt -lcudnn -lopenblas -lprotobuf-c -lz -lgomp -lm -lpthread -ldl \
 *      -lrt -lstdc++ -o /tmp/fused_emulate && /tmp/fused_emulate
 *
 * Needs g++ at run time; exits non-zero on any mismatch.
 */
#include "core/optest.h"
#include "cuda/cuda_internal.h"
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static kiln_context *ctx;
static int fails, runs;
static char dir[64] = "/tmp/kiln_emuXXXXXX";

/* Host stand-ins for what the generated source takes from CUDA. */
static const char *SHIM =
    "#include <cmath>\n"
    "#include <cstdint>\n"
    "#include <cstring>\n"
    "#define __device__\n"
    "#define __forceinline__ inline\n"
    "#define __global__\n"
    "#define __launch_bounds__(x)\n"
    "struct emu_dim3 { unsigned x, y, z; };\n"
    "static emu_dim3 blockIdx, threadIdx, gridDim, blockDim;\n"
    "static inline float __int_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }\n";
static const char *BF16_HOST =
    "typedef unsigned short T;\n"
    "static inline float to_f(T h) { return __uint_as_float((unsigned)h << 16); }\n"
    "static inline T from_f(float f) {\n"
    "    unsigned u; memcpy(&u, &f, 4);\n"
    "    if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;\n"
    "    u += 0x7fff + ((u >> 16) & 1);\n"
    "    return (T)(u >> 16);\n"
    "}\n";

static kiln_tensor *as_dtype(const kiln_tensor *t, kiln_dtype dt) {
    kiln_tensor *r = kiln_tensor_new(ctx, dt, t->ndim, t->dims);
    for (int64_t i = 0; r && i < kiln_tensor_numel(t); i++) kiln_set_f64(r, i, kiln_get_f64(t, i));
    return r;
}
static kiln_status eval_op(const char *op, const char *attrs, int n_in, kiln_tensor **in, kiln_tensor **out) {
    kiln_node node; memset(&node, 0, sizeof node);
    node.op_type = (char *)op; node.name = "c"; node.domain = ""; node.op = kiln_op_index(op); node.opset = 13;
    node.n_in = n_in; node.n_out = 1;
    kiln_status st = kiln_attrs_parse(ctx, attrs, &node.attrs, &node.n_attrs);
    if (!st) st = kiln_op_eval(ctx, &node, n_in, in, 1, out);
    return st;
}
static kiln_status eval_act(const char *act, bool has_a, float a, bool has_b, float b, kiln_tensor *x, kiln_tensor **out) {
    char attrs[128] = ""; kiln_tensor *in[3] = {x, NULL, NULL}; int n_in = 1;
    if (strcmp(act, "Clip") == 0) { in[1] = has_a ? kt_scalar(KILN_F32, a) : NULL; in[2] = has_b ? kt_scalar(KILN_F32, b) : NULL; n_in = 3; }
    else if (strcmp(act, "LeakyRelu") == 0 || strcmp(act, "Elu") == 0) { if (has_a) snprintf(attrs, sizeof attrs, "alpha=%.9e", (double)a); }
    else if (strcmp(act, "HardSigmoid") == 0) { if (has_a && has_b) snprintf(attrs, sizeof attrs, "alpha=%.9e;beta=%.9e", (double)a, (double)b); }
    kiln_status st = eval_op(act, attrs, n_in, in, out);
    for (int i = 0; i < 3; i++) kiln_tensor_free(in[i]);
    return st;
}
static kiln_tensor *compose(const char *prog, int n_in, kiln_tensor **in, kiln_dtype dt, const kiln_tensor *like) {
    static const char *const binary[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
    char *buf = strdup(prog); kiln_tensor *stack[64] = {0}; int sp = 0;
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (t[0] == 'i' && t[1] >= '0' && t[1] <= '9') stack[sp++] = as_dtype(in[atoi(t + 1)], KILN_F32);
        else if (t[0] == 'c') stack[sp++] = kt_scalar(KILN_F32, strtof(t + 1, NULL));
        else {
            char *at = strchr(t, '@'); float p[2] = {0, 0}; int np = 0;
            for (char *q = at; q && np < 2; q = strchr(q + 1, '@')) p[np++] = strtof(q + 1, NULL);
            if (at) *at = 0;
            bool bin = false; for (int b = 0; b < 7; b++) bin = bin || strcmp(t, binary[b]) == 0;
            kiln_tensor *r = NULL;
            if (bin) { if (eval_op(t, "", 2, &stack[sp - 2], &r)) { printf("compose: %s\n", kiln_context_message(ctx)); exit(1);} kiln_tensor_free(stack[--sp]); kiln_tensor_free(stack[--sp]); }
            else { if (eval_act(t, np > 0, p[0], np > 1, p[1], stack[--sp], &r)) { printf("compose: %s\n", kiln_context_message(ctx)); exit(1);} }
            stack[sp++] = r;
        }
    }
    kiln_tensor *out = kiln_tensor_new(ctx, dt, like->ndim, like->dims);
    int64_t idx[8] = {0}, off[1] = {0}, strides[1][8];
    kiln_broadcast_strides(stack[0]->ndim, stack[0]->dims, like->ndim, like->dims, strides[0]);
    for (int64_t i = 0; i < kiln_tensor_numel(out); i++) {
        kiln_set_f64(out, i, kiln_get_f64(stack[0], off[0]));
        kiln_index_next(like->ndim, like->dims, idx, 1, (const int64_t(*)[8])strides, off);
    }
    kiln_tensor_free(stack[0]); free(buf);
    return out;
}

typedef void (*emu_fn)(const void *, int, unsigned, unsigned);

/* Logical (N,C,H,W) element i of a 4-D shape d at its NHWC storage offset. */
static int64_t nhwc_offset(const int64_t *d, int64_t i) {
    const int64_t w = i % d[3], h = i / d[3] % d[2], c = i / (d[3] * d[2]) % d[1], n = i / (d[3] * d[2] * d[1]);
    return ((n * d[2] + h) * d[3] + w) * d[1] + c;
}

/* nhwc: the output and every full 4-D input (C > 1 and H * W > 1) laid out NHWC, the
 * other inputs as they are (their bytes are the same in both layouts). */
static void one_ex(const char *prog, kiln_dtype dt, int n_in, const char **shapes, int sm_count, int unroll,
                   int misalign, int nhwc);
static void one(const char *prog, kiln_dtype dt, int n_in, const char **shapes, int sm_count, int unroll, int misalign) {
    one_ex(prog, dt, n_in, shapes, sm_count, unroll, misalign, 0);
}
static void one_ex(const char *prog, kiln_dtype dt, int n_in, const char **shapes, int sm_count, int unroll,
                   int misalign, int nhwc) {
    kiln_tensor *in[8], *dev[8]; kiln_tensor y = {0};
    int ynd = 0; int64_t yd[8];
    for (int i = 0; i < n_in; i++) {
        int64_t d[8]; int nd = 0; char buf[64]; snprintf(buf, sizeof buf, "%s", shapes[i]);
        for (char *s2 = NULL, *t = strtok_r(buf, ",", &s2); t; t = strtok_r(NULL, ",", &s2)) if (strcmp(t, "s")) d[nd++] = atoll(t);
        in[i] = kt_rand(dt, nd, d, -3, 3, 11 + i);
        int64_t nx[8]; int nn;
        if (i == 0) { ynd = nd; memcpy(yd, d, sizeof d); } else { kiln_broadcast_shape(ynd, yd, nd, d, &nn, nx); ynd = nn; memcpy(yd, nx, sizeof nx); }
    }
    kiln_tensor_set_shape(&y, dt, ynd, yd);
    const size_t es = kiln_dtype_size(dt);
    char *ybuf = calloc(kiln_tensor_nbytes(&y) + 64, 1);
    y.data = ybuf + 16 + (misalign ? es : 0);
    kiln_tensor copies[8];
    for (int i = 0; i < n_in; i++) { copies[i] = *in[i]; copies[i].owns_data = false; char *b = calloc(kiln_tensor_nbytes(in[i]) + 64, 1); memcpy(b + 16 + (misalign && i == 0 ? es : 0), in[i]->data, kiln_tensor_nbytes(in[i])); copies[i].data = b + 16 + (misalign && i == 0 ? es : 0); dev[i] = &copies[i]; }
    if (nhwc) {
        y.format = KILN_FORMAT_NHWC;
        for (int i = 0; i < n_in; i++) {
            const int64_t *d = in[i]->dims;
            if (in[i]->ndim != 4 || d[1] == 1 || d[2] * d[3] == 1) continue;
            copies[i].format = KILN_FORMAT_NHWC;
            for (int64_t e = 0; e < kiln_tensor_numel(in[i]); e++)
                memcpy((char *)copies[i].data + nhwc_offset(d, e) * es, (char *)in[i]->data + e * es, es);
        }
    }
    kiln_tensor *outp = &y;
    kiln_node node; memset(&node, 0, sizeof node);
    node.op_type = "FusedElementwise"; node.name = "e"; node.domain = "kiln"; node.op = -1; node.n_in = n_in; node.n_out = 1;
    char attrs[256]; snprintf(attrs, sizeof attrs, "program=%s", prog);
    kiln_attrs_parse(ctx, attrs, &node.attrs, &node.n_attrs);
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = n_in, .in = dev, .n_out = 1, .out = &outp};
    char *src; int no; const char *const *opts;
    if (kiln_cuda_fused_source(&c, &src, &no, &opts)) { printf("source: %s\n", kiln_context_message(ctx)); fails++; return; }
    /* host prelude */
    char *body = strstr(src, "typedef unsigned IDX;"); if (!body) body = strstr(src, "typedef long long IDX;");
    char path[128], so[128], cmd[512];
    snprintf(path, sizeof path, "%s/k.cpp", dir);
    snprintf(so, sizeof so, "%s/k%d.so", dir, runs);
    FILE *f = fopen(path, "w");
    fputs(SHIM, f);
    if (dt == KILN_BF16) fputs(BF16_HOST, f);
    else fprintf(f, "typedef float T;\nstatic inline float to_f(T v){return v;}\nstatic inline T from_f(float v){return v;}\n");
    fputs(body, f);
    fprintf(f, "extern \"C\" void emu_run(const void *args, int vec, unsigned blocks, unsigned threads) {\n"
               "  Args a; memcpy(&a, args, sizeof a); gridDim = {blocks,1,1}; blockDim = {threads,1,1};\n"
               "  for (unsigned b = 0; b < blocks; b++) for (unsigned t = 0; t < threads; t++) { blockIdx = {b,0,0}; threadIdx = {t,0,0};\n"
               "  %s }\n}\n", strstr(src, "k_v(") ? "if (vec) k_v(a); else k_s(a);" : "k_s(a);");
    fclose(f);
    snprintf(cmd, sizeof cmd, "g++ -std=c++17 -O1 -w -shared -fPIC -o %s %s", so, path);
    if (system(cmd)) { printf("g++ failed for %s\n", prog); fails++; return; }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen: %s\n", dlerror()); fails++; return; }
    emu_fn run = (emu_fn)dlsym(h, "emu_run");
    kiln_tensor *ref = compose(prog, n_in, in, dt, &y);
    for (int pass = 0; pass < 2; pass++) {
        unsigned char args[2048]; bool vec; unsigned blocks, threads;
        if (kiln_cuda_fused_launch_args(&c, unroll, sm_count, 1, args, sizeof args, &vec, &blocks, &threads)) { printf("args: %s\n", kiln_context_message(ctx)); fails++; break; }
        if (pass == 1 && !vec) break;
        memset(y.data, 0xff, kiln_tensor_nbytes(&y));
        run(args, pass == 0 ? vec : 0, blocks, threads);
        int64_t bad = 0, first = -1; double worst = 0;
        const double atol = dt == KILN_F32 ? 2e-6 : 1e-2, rtol = dt == KILN_F32 ? 1e-5 : 1e-2;
        for (int64_t i = 0; i < kiln_tensor_numel(ref); i++) {
            double g = kiln_get_f64(&y, nhwc ? nhwc_offset(y.dims, i) : i), w = kiln_get_f64(ref, i), e = fabs(g - w);
            if (!(e <= atol + rtol * fabs(w))) { if (!bad++) first = i; }
            if (e > worst) worst = e;
        }
        runs++;
        printf("%s %-40s %-8s %s kernel=%s blocks=%u unroll=%d: %s (max err %.3g%s%s)\n", bad ? "FAIL" : "ok  ", prog, kiln_dtype_name(dt),
               shapes[0], pass == 0 && vec ? "k_v" : "k_s", blocks, unroll, bad ? "WRONG" : "ok", worst, misalign ? ", misaligned" : "",
               nhwc ? ", NHWC" : "");
        if (bad) { fails++; printf("   first bad %lld: got %g want %g\n", (long long)first, kiln_get_f64(&y, first), kiln_get_f64(ref, first)); }
    }
    dlclose(h);
    free(src);
}

int main(void) {
    kiln_context_create(&ctx);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    struct { const char *prog; int n; const char *sh[3]; } cases[] = {
        {"i0 c0.5 Mul c1 i0 c1.41421 Div Erf Add Mul", 1, {"37,61"}},
        {"i0 c0.5 Mul c1 i0 c1.41421 Div Erf Add Mul", 1, {"64,96"}},
        {"i0 i1 Add Relu", 2, {"6,16", "16"}},
        {"i0 i1 Add Relu", 2, {"4,5", "5"}},
        {"i0 i1 Add Clip@0@6", 2, {"2,16,4,4", "16,1,1"}},
        {"i0 i1 Add Clip@0@6", 2, {"2,3,5,7", "3,1,1"}},
        {"i1 i0 Sub", 2, {"3,1,1", "2,3,5,8"}},
        {"i0 i1 Mul i2 Add Sigmoid", 3, {"4,1,5", "3,1", "s"}},
        {"i0 i1 Mul i1 Add", 2, {"2,1,3,1,8", "1,4,3,6,1"}},
        {"i0 i1 Mul i1 Add", 2, {"2,1,3,1,16", "1,4,3,8,1"}},
        {"i0 i0 Mul c-1e-3 Mul i1 Add Tanh", 2, {"5,40", "5,40"}},
        {"i1 Neg", 2, {"3,1", "4"}},
        {"i0 i1 Max i2 Min", 3, {"7,1,32", "1,9,32", "7,9,1"}},
        {"i0 i1 Div", 2, {"3,7", "s"}},
        {"i0 Softplus i1 Pow", 2, {"8,24", "24"}},
        {"i0 i1 Add", 2, {"1000,3", "1000,1"}},
        {"i0 i1 Add", 2, {"5,2,8", "5,1,8"}},
    };
    const kiln_dtype dts[2] = {KILN_F32, KILN_BF16};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            one(cases[k].prog, dts[d], cases[k].n, cases[k].sh, 1, 2, 0);
            one(cases[k].prog, dts[d], cases[k].n, cases[k].sh, 3, 1, 1);
        }
    /* NHWC with broadcast operands (ConvNeXt's layer scale (C,1,1) * x + residual, SE gates,
     * (N,1,H,W) maps, NHWC operands broadcasting among themselves) */
    static struct {
        const char *prog;
        int n;
        const char *sh[3];
    } nhwc_cases[] = {
        {"i0 i1 Mul i2 Add", 3, {"16,1,1", "2,16,5,7", "2,16,5,7"}},
        {"i0 i1 Mul i2 Add", 3, {"1,6,1,1", "2,6,3,5", "2,6,3,5"}},
        {"i0 i1 Mul i2 Add", 3, {"2,16,1,1", "2,16,4,3", "2,1,4,3"}},
        {"i0 i1 Mul i2 Sub", 3, {"2,8,5,1", "2,8,5,6", "s"}},
        {"i0 Sigmoid i1 Mul", 2, {"3,24,1,1", "3,24,7,7"}},
    };
    for (size_t k = 0; k < sizeof nhwc_cases / sizeof nhwc_cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            one_ex(nhwc_cases[k].prog, dts[d], nhwc_cases[k].n, nhwc_cases[k].sh, 1, 2, 0, 1);
            one_ex(nhwc_cases[k].prog, dts[d], nhwc_cases[k].n, nhwc_cases[k].sh, 3, 1, 1, 1);
        }
    printf("%d runs, %d failed\n", runs, fails);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm)) fprintf(stderr, "could not remove %s\n", dir);
    return fails != 0;
}
