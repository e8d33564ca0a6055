package cuda

// NVCCStub stands in for <cuda_runtime.h> so that the __NVCC__ branch of
// generated code, host launchers included, can be compiled with clang
// where the NVIDIA toolkit is not installed: the declarations of the CUDA
// runtime API and types that generated code uses, with CUDA's signatures.
// Tests only; nothing links against it.
const NVCCStub = `struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
#pragma once
#include <__clang_cuda_builtin_vars.h>
#include <stddef.h>
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
typedef struct CUstream_st *cudaStream_t;
enum cudaError { cudaSuccess = 0 };
typedef enum cudaError cudaError_t;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
struct dim3 {
  unsigned x, y, z;
  __host__ __device__ dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern "C" {
__host__ cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);
__host__ cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s);
__host__ cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
__host__ cudaError_t cudaGetDevice(int *dev);
__host__ cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev);
__host__ cudaError_t cudaGetLastError(void);
__host__ cudaError_t cudaConfigureCall(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0);
__host__ unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0);
}
#define STUB_ static __device__ __forceinline__
STUB_ float __shfl_xor_sync(unsigned m, float v, int l, int w = 32) { return __nvvm_shfl_sync_bfly_f32(m, v, l, 0x1f); }
STUB_ int __shfl_xor_sync(unsigned m, int v, int l, int w = 32) { return __nvvm_shfl_sync_bfly_i32(m, v, l, 0x1f); }
STUB_ float __shfl_sync(unsigned m, float v, int l, int w = 32) { return __nvvm_shfl_sync_idx_f32(m, v, l, 0x1f); }
STUB_ int __shfl_sync(unsigned m, int v, int l, int w = 32) { return __nvvm_shfl_sync_idx_i32(m, v, l, 0x1f); }
STUB_ int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
STUB_ float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
STUB_ float expf(float x) { return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }
STUB_ float logf(float x) { return __nvvm_lg2_approx_f(x) * 0.6931471805599453f; }
STUB_ float exp2f(float x) { return __nvvm_ex2_approx_f(x); }
STUB_ float tanhf(float x) { float y; asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
STUB_ float sqrtf(float x) { return __builtin_sqrtf(x); }
STUB_ float floorf(float x) { return __builtin_floorf(x); }
STUB_ float sinf(float x) { return __nvvm_sin_approx_f(x); }
STUB_ float cosf(float x) { return __nvvm_cos_approx_f(x); }
STUB_ float fabsf(float x) { return __builtin_fabsf(x); }
STUB_ float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
STUB_ float fminf(float a, float b) { return __builtin_fminf(a, b); }
STUB_ float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
`
