// A stand-in libcudart.so.13 for bench/gpu/cudnn_validate.py --validate-only on a computer without a GPU:
// cuDNN frontend 1.16.0 asks the runtime for the device in its SDPA checks (sdpa_support_surface.h).
// gcc -shared -fPIC -I/usr/local/cuda-13.0/include -o /tmp/fakecudart/libcudart.so.13 bench/gpu/fake_cudart.c
// then LD_LIBRARY_PATH=/tmp/fakecudart python bench/gpu/cudnn_validate.py --validate-only
#include <string.h>
#include <cuda_runtime_api.h>
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    memset(p, 0, sizeof(*p));
    strcpy(p->name, "FAKE NVIDIA H100 80GB HBM3 (CPU api check)");
    p->major = 9; p->minor = 0; p->multiProcessorCount = 132;
    p->sharedMemPerBlockOptin = 232448; p->sharedMemPerMultiprocessor = 233472; p->sharedMemPerBlock = 49152;
    p->totalGlobalMem = 85520809984ULL; p->warpSize = 32; p->maxThreadsPerBlock = 1024;
    p->l2CacheSize = 52428800;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) { *v = 0; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return "fake cudart"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
