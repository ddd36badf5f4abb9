/* registry.c — the registration of the backends this build has: the one place that knows
 * whether kiln was built with CUDA (everything else asks the backend interface). */
#include "../core/backend.h"

extern const kiln_backend_i kiln_cpu_backend_i; /* src/cpu/backend.c */
#ifdef KILN_HAVE_CUDA
extern const kiln_backend_i kiln_cuda_backend_i; /* src/cuda/backend.c */
#endif

const kiln_backend_i *kiln_backend_for(kiln_device device) {
    switch (device) {
    case KILN_DEVICE_CPU: return &kiln_cpu_backend_i;
    case KILN_DEVICE_CUDA:
#ifdef KILN_HAVE_CUDA
        return &kiln_cuda_backend_i;
#else
        return NULL;
#endif
    }
    return NULL;
}

kiln_status kiln_backend_get(kiln_context *ctx, kiln_device device, const kiln_backend_i **out) {
    *out = NULL;
    if (device != KILN_DEVICE_CPU && device != KILN_DEVICE_CUDA)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "unknown device %d", (int)device);
    *out = kiln_backend_for(device);
    if (!*out)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "this kiln was built without the CUDA backend (no nvcc at build time)");
    return KILN_OK;
}
