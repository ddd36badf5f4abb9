// A C++ program outside kiln's tree, built against the installed kiln (tests/install/run.sh):
// the C API through RAII handles; runs a model and checks the output against the expected one.
// use_kiln_cxx MODEL.onnx X.npy EXPECTED.npy
#include <kiln.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace {
struct ContextFree { void operator()(kiln_context *c) const { kiln_context_free(c); } };
struct ModelFree { void operator()(kiln_model *m) const { kiln_model_free(m); } };
struct SessionFree { void operator()(kiln_session *s) const { kiln_session_free(s); } };
struct TensorFree { void operator()(kiln_tensor *t) const { kiln_tensor_free(t); } };
using Tensor = std::unique_ptr<kiln_tensor, TensorFree>;

void check(kiln_context *ctx, kiln_status st) {
    if (st != KILN_OK) throw std::runtime_error(std::string(kiln_status_name(st)) + ": " +
                                                kiln_context_message(ctx));
}

Tensor load(kiln_context *ctx, const char *path) {
    kiln_tensor *t = nullptr;
    check(ctx, kiln_tensor_load_npy(ctx, path, &t));
    return Tensor(t);
}
} // namespace

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s MODEL.onnx X.npy EXPECTED.npy\n", argv[0]);
        return 2;
    }
    if (std::strcmp(kiln_version(), KILN_VERSION) != 0) {
        std::fprintf(stderr, "library %s, header %s\n", kiln_version(), KILN_VERSION);
        return 1;
    }
    kiln_context *raw_ctx = nullptr;
    if (kiln_context_create(&raw_ctx) != KILN_OK) return 1;
    std::unique_ptr<kiln_context, ContextFree> ctx(raw_ctx);
    try {
        kiln_model *m = nullptr;
        check(ctx.get(), kiln_model_load_onnx(ctx.get(), argv[1], &m));
        std::unique_ptr<kiln_model, ModelFree> model(m);
        kiln_session *s = nullptr;
        check(ctx.get(), kiln_session_create(model.get(), nullptr, &s));
        std::unique_ptr<kiln_session, SessionFree> sess(s);
        Tensor x = load(ctx.get(), argv[2]), want = load(ctx.get(), argv[3]);
        kiln_tensor *inputs[] = {x.get()};
        const kiln_tensor *y = nullptr;
        check(ctx.get(), kiln_session_run(sess.get(), 1, inputs, 1, &y));
        int64_t n = kiln_tensor_numel(y);
        if (kiln_tensor_dtype(y) != KILN_F32 || kiln_tensor_dtype(want.get()) != KILN_F32 ||
            n != kiln_tensor_numel(want.get()) || n == 0)
            throw std::runtime_error("output's dtype or size differs from the expected one");
        const float *got = static_cast<const float *>(kiln_tensor_data(y));
        const float *exp = static_cast<const float *>(kiln_tensor_data(want.get()));
        for (int64_t i = 0; i < n; i++)
            if (!(std::fabs(got[i] - exp[i]) <= 1e-6f + 1e-4f * std::fabs(exp[i])))
                throw std::runtime_error("output[" + std::to_string(i) + "] = " +
                                         std::to_string(got[i]) + ", expected " +
                                         std::to_string(exp[i]));
        std::printf("kiln %s (C++): %lld outputs match %s\n", kiln_version(), (long long)n, argv[3]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "use_kiln_cxx: %s\n", e.what());
        return 1;
    }
    return 0;
}
