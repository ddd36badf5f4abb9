/*
 * build_info.c — the CUDA part of kiln_get_build_info (src/backend/build_info.c): the
 * versions compiled against and those the libraries report. None of these calls needs a
 * GPU (cudaDriverGetVersion gives 0 where no driver is installed).
 */
#include "kiln_tools.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

void kiln_cuda_build_info(kiln_build_info *out);

void kiln_cuda_build_info(kiln_build_info *out) {
    out->cuda_runtime_built = CUDART_VERSION;
    out->cudnn_built = CUDNN_VERSION;
    int v = 0;
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) out->cuda_runtime = v;
    v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) out->cuda_driver = v;
    out->cudnn = (long)cudnnGetVersion();
}
