package cuda

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the emulator header
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Prelude is the text at the top of every generated <variant>.cu. Kernels and
// host launchers use only the names it defines (PreludeDeviceNames,
// PreludeHostNames), so that one source compiles three ways:
//
//   - with nvcc and the CUDA headers (__NVCC__);
//   - with clang++ -x cuda --cuda-device-only -nocudainc to PTX, without CUDA
//     headers: this branch defines ATTNC_NO_HOST and provides no host names,
//     so the printer wraps every host launcher in #ifndef ATTNC_NO_HOST;
//   - as C++17 with -DATTNC_EMULATE and the emulator header
//     (emu/attnc_cuda_emu.h, see EmuDir, CompileEmulated).
//
// Device names (usable in kernels and ATTNC_DEV helpers; only the x dimension
// exists):
//
//	ATTNC_KERNEL                 extern "C" __global__ (no launch bounds)
//	ATTNC_DEV                    static __device__ inline, for helpers
//	attnc_tid() attnc_bid() attnc_nblocks() attnc_nthreads()
//	                             threadIdx.x blockIdx.x gridDim.x blockDim.x as int
//	attnc_sync()                 __syncthreads()
//	ATTNC_DYN_SMEM(name)         declares unsigned char *name = the block's
//	                             dynamic shared memory (16-byte aligned)
//	attnc_shfl_xor_f32(float v, int mask), attnc_shfl_xor_i32(int32_t v, int mask)
//	attnc_shfl_idx_f32(float v, int src),  attnc_shfl_idx_i32(int32_t v, int src)
//	                             full-warp shuffles (mask 0xffffffff, width 32):
//	                             every lane of the warp must call them together
//	attnc_mma_f16(float d[4], const int32_t a[4], const int32_t b[2])
//	attnc_mma_bf16(...)          d += A*B, mma.sync.aligned.m16n8k16.row.col.f32.
//	                             {f16,bf16}.{f16,bf16}.f32 (PTX fragment layout;
//	                             the lower-indexed element in the low 16 bits)
//	attnc_exp attnc_log attnc_exp2 attnc_tanh attnc_sqrt attnc_floor attnc_sin
//	attnc_cos attnc_fabs (float -> float), attnc_fmax attnc_fmin (float, float),
//	attnc_fma (a*b+c): exp(-inf) = 0, log(0) = -inf, NaN stays NaN everywhere
//	attnc_f32_as_i32(float), attnc_i32_as_f32(int32_t)   bit casts
//	attnc_f16_to_f32(uint16_t), attnc_bf16_to_f32(uint16_t)   exact
//	attnc_f32_to_f16(float), attnc_f32_to_bf16(float) -> uint16_t, round to
//	                             nearest even, NaN stays NaN
//	attnc_pack_f16x2(float lo, float hi), attnc_pack_bf16x2(...) -> int32_t
//	                             an mma register: lo in bits 0-15, hi in 16-31
//	attnc_cp_async16(void *smem_dst, const void *gmem_src)
//	                             cp.async.cg.shared.global [dst], [src], 16:
//	                             starts copying 16 bytes from global to shared
//	                             memory; both addresses 16-byte aligned
//	attnc_cp_async16_zfill(void *smem_dst, const void *gmem_src, int src_bytes)
//	                             the same with src-size: copies the first
//	                             src_bytes (0..16) bytes and zero-fills the rest;
//	                             with 0 nothing is read (keep src a valid,
//	                             aligned address all the same)
//	attnc_cp_async_commit()      cp.async.commit_group: the thread's uncommitted
//	                             copies form the next group
//	attnc_cp_async_wait<N>()     cp.async.wait_group N: every group but the N
//	                             most recent has landed (N a constant >= 0)
//	attnc_cp_async_wait_all()    cp.async.wait_all: every copy has landed
//	                             (copies are visible to other threads only after
//	                             the wait and then a barrier; a barrier alone
//	                             does not wait for them)
//	attnc_ldmatrix_x1(int32_t r[1], const void *row), _x2(r[2], ...), _x4(r[4], ...)
//	attnc_ldmatrix_x1_trans(...), _x2_trans, _x4_trans
//	                             ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.
//	                             shared.b16: lanes 8i..8i+7 pass the shared
//	                             addresses (16-byte aligned) of rows 0..7 of
//	                             8x8 matrix i; lane l receives in r[i] row l/4,
//	                             columns 2(l%4) and 2(l%4)+1 (low, high half) of
//	                             matrix i, or with _trans its elements
//	                             (2(l%4), l/4) and (2(l%4)+1, l/4): the mma
//	                             fragments (x4 of a row-major 16x16 tile gives
//	                             A with lane l passing &tile[l%16][8*(l/16)];
//	                             B from an [n][k] tile without, from a [k][n]
//	                             tile with _trans). Every lane of the warp
//	                             calls it together
//	int8_t ... uint64_t, size_t  (the clang branch typedefs them itself)
//
// Types in every branch: attnc_stream_t = cudaStream_t (emulator: void*; the
// clang branch declares cudaStream_t as struct CUstream_st *).
//
// Host names (not in the clang branch; ATTNC_NO_HOST is defined there):
//
//	ATTNC_LAUNCH(kernel, grid, block, smem, stream, args...)
//	                             kernel<<<grid, block, smem, stream>>>(args...);
//	                             the emulator runs the grid before returning
//	int attnc_set_smem(const void *kernel, int bytes)   max dynamic smem, 0 = ok
//	int attnc_alloc(void **p, size_t bytes, void *stream)   cudaMallocAsync
//	int attnc_free(void *p, void *stream)                   cudaFreeAsync
//	                             (streams as void *: a launcher's void *stream
//	                             or an attnc_stream_t both convert)
//	int attnc_num_sms(void)      multiprocessors of the current device (emulator: 4)
//	int attnc_last_error(void)   cudaGetLastError(): the error since the last
//	                             call (0 if none), and clears it
//
// In the clang branch exp, log and exp2 use ex2.approx/lg2.approx (relative
// error about 2^-21, plus |x|*2^-24 for exp), tanh is computed from ex2.approx
// (|x| >= 0.3) or its Taylor series (relative error below 1e-6; tanh.approx
// would be 2^-11), sin and cos reduce the argument to [-pi, pi] before
// sin.approx/cos.approx (absolute error about 2^-20). The nvcc branch uses the
// CUDA math library, the emulator libm.
const Prelude = `/* attnc CUDA prelude (ABI 1) */
#ifndef ATTNC_PRELUDE_
#define ATTNC_PRELUDE_ 1

#if defined(ATTNC_EMULATE)
/* ---- CPU emulator ---- */
#include "attnc_cuda_emu.h"

#else
#if defined(__NVCC__)
/* ---- nvcc with the CUDA headers ---- */
#include <stdint.h>
#include <cuda_runtime.h>
#define ATTNC_KERNEL extern "C" __global__
#define ATTNC_DEV static __device__ inline
#define ATTNC_FN_ static __device__ __forceinline__
/* One file-scope declaration: a block-scope one would take C linkage inside
   extern "C" kernels and C++ linkage inside ATTNC_DEV helpers. */
extern __shared__ __align__(16) unsigned char attnc_smem_[];

ATTNC_FN_ void attnc_sync(void) { __syncthreads(); }
ATTNC_FN_ float attnc_shfl_xor_f32(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
ATTNC_FN_ int32_t attnc_shfl_xor_i32(int32_t v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
ATTNC_FN_ float attnc_shfl_idx_f32(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
ATTNC_FN_ int32_t attnc_shfl_idx_i32(int32_t v, int src) { return __shfl_sync(0xffffffffu, v, src); }
ATTNC_FN_ int32_t attnc_f32_as_i32(float x) { return __float_as_int(x); }
ATTNC_FN_ float attnc_i32_as_f32(int32_t x) { return __int_as_float(x); }
ATTNC_FN_ float attnc_exp(float x) { return expf(x); }
ATTNC_FN_ float attnc_log(float x) { return logf(x); }
ATTNC_FN_ float attnc_exp2(float x) { return exp2f(x); }
ATTNC_FN_ float attnc_tanh(float x) { return tanhf(x); }
ATTNC_FN_ float attnc_sqrt(float x) { return sqrtf(x); }
ATTNC_FN_ float attnc_floor(float x) { return floorf(x); }
ATTNC_FN_ float attnc_sin(float x) { return sinf(x); }
ATTNC_FN_ float attnc_cos(float x) { return cosf(x); }
ATTNC_FN_ float attnc_fabs(float x) { return fabsf(x); }
ATTNC_FN_ float attnc_fmax(float a, float b) { return fmaxf(a, b); }
ATTNC_FN_ float attnc_fmin(float a, float b) { return fminf(a, b); }
ATTNC_FN_ float attnc_fma(float a, float b, float c) { return fmaf(a, b, c); }

typedef cudaStream_t attnc_stream_t;
#define ATTNC_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (cudaStream_t)(stream)>>>(__VA_ARGS__)
static inline int attnc_set_smem(const void *kernel, int bytes) {
  return (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
/* Streams are taken as void *, so that launchers can pass their void *stream. */
static inline int attnc_alloc(void **p, size_t bytes, void *s) { return (int)cudaMallocAsync(p, bytes, (cudaStream_t)s); }
static inline int attnc_free(void *p, void *s) { return (int)cudaFreeAsync(p, (cudaStream_t)s); }
static inline int attnc_num_sms(void) {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) return 1;
  return n;
}
static inline int attnc_last_error(void) { return (int)cudaGetLastError(); }

#else
/* ---- clang -x cuda -nocudainc: no CUDA headers, no host side ---- */
#include <__clang_cuda_builtin_vars.h>
#define ATTNC_NO_HOST 1
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __SIZE_TYPE__ size_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef struct CUstream_st *cudaStream_t;
typedef cudaStream_t attnc_stream_t;
#define ATTNC_KERNEL extern "C" __global__
#define ATTNC_DEV static __device__ inline
#define ATTNC_FN_ static __device__ __forceinline__
extern __shared__ __attribute__((aligned(16))) unsigned char attnc_smem_[];

ATTNC_FN_ void attnc_sync(void) { __syncthreads(); }
ATTNC_FN_ float attnc_shfl_xor_f32(float v, int mask) { return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, mask, 0x1f); }
ATTNC_FN_ int32_t attnc_shfl_xor_i32(int32_t v, int mask) { return __nvvm_shfl_sync_bfly_i32(0xffffffffu, v, mask, 0x1f); }
ATTNC_FN_ float attnc_shfl_idx_f32(float v, int src) { return __nvvm_shfl_sync_idx_f32(0xffffffffu, v, src, 0x1f); }
ATTNC_FN_ int32_t attnc_shfl_idx_i32(int32_t v, int src) { return __nvvm_shfl_sync_idx_i32(0xffffffffu, v, src, 0x1f); }
ATTNC_FN_ int32_t attnc_f32_as_i32(float x) { return __builtin_bit_cast(int32_t, x); }
ATTNC_FN_ float attnc_i32_as_f32(int32_t x) { return __builtin_bit_cast(float, x); }
ATTNC_FN_ float attnc_sqrt(float x) { return __builtin_sqrtf(x); }
ATTNC_FN_ float attnc_floor(float x) { return __builtin_floorf(x); }
ATTNC_FN_ float attnc_fabs(float x) { return __builtin_fabsf(x); }
ATTNC_FN_ float attnc_fmax(float a, float b) { return __builtin_fmaxf(a, b); }
ATTNC_FN_ float attnc_fmin(float a, float b) { return __builtin_fminf(a, b); }
ATTNC_FN_ float attnc_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
/* ex2.approx(-inf) = +0, lg2.approx(0) = -inf, NaN in gives NaN out. */
ATTNC_FN_ float attnc_exp2(float x) { return __nvvm_ex2_approx_f(x); }
ATTNC_FN_ float attnc_exp(float x) { return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }
ATTNC_FN_ float attnc_log(float x) { return __nvvm_lg2_approx_f(x) * 0.6931471805599453f; }
ATTNC_FN_ float attnc_tanh(float x) {
  float a = __builtin_fabsf(x);
  float r;
  if (a >= 0.3f) {
    /* 1 - 2/(e^2a + 1); e^2a = +inf gives 1 */
    r = 1.0f - 2.0f / (__nvvm_ex2_approx_f(a * 2.8853900817779268f) + 1.0f);
  } else {
    /* x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835; NaN lands here */
    float s = a * a;
    float p = __builtin_fmaf(s, 0.021869488536155203f, -0.05396825396825397f);
    p = __builtin_fmaf(p, s, 0.13333333333333333f);
    p = __builtin_fmaf(p, s, -0.3333333333333333f);
    r = __builtin_fmaf(p * s, a, a);
  }
  return __builtin_copysignf(r, x);
}
/* x - k*2pi with 2pi split in two floats, then the approximate sine/cosine,
   which are accurate on [-pi, pi]. */
ATTNC_FN_ float attnc_reduce_2pi_(float x) {
  float k = __builtin_rintf(x * 0.15915494309189535f);
  float r = __builtin_fmaf(-k, 6.2831854820251465f, x);
  return __builtin_fmaf(-k, -1.7484555314695172e-07f, r);
}
ATTNC_FN_ float attnc_sin(float x) { return __nvvm_sin_approx_f(attnc_reduce_2pi_(x)); }
ATTNC_FN_ float attnc_cos(float x) { return __nvvm_cos_approx_f(attnc_reduce_2pi_(x)); }
#endif

/* ---- both GPU branches ---- */
ATTNC_FN_ int attnc_tid(void) { return (int)threadIdx.x; }
ATTNC_FN_ int attnc_bid(void) { return (int)blockIdx.x; }
ATTNC_FN_ int attnc_nblocks(void) { return (int)gridDim.x; }
ATTNC_FN_ int attnc_nthreads(void) { return (int)blockDim.x; }
#define ATTNC_DYN_SMEM(name) unsigned char *name = attnc_smem_

ATTNC_FN_ void attnc_mma_f16(float d[4], const int32_t a[4], const int32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
ATTNC_FN_ void attnc_mma_bf16(float d[4], const int32_t a[4], const int32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
ATTNC_FN_ float attnc_f16_to_f32(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
ATTNC_FN_ uint16_t attnc_f32_to_f16(float f) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
ATTNC_FN_ float attnc_bf16_to_f32(uint16_t h) { return attnc_i32_as_f32((int32_t)((uint32_t)h << 16)); }
ATTNC_FN_ uint16_t attnc_f32_to_bf16(float f) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
/* Generic to .shared (32-bit) and .global addresses for cp.async/ldmatrix. */
ATTNC_FN_ uint32_t attnc_smem_addr_(const void *p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
ATTNC_FN_ uint64_t attnc_gmem_addr_(const void *p) {
  uint64_t a;
  asm("cvta.to.global.u64 %0, %1;" : "=l"(a) : "l"(p));
  return a;
}
ATTNC_FN_ void attnc_cp_async16(void *smem_dst, const void *gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :
               : "r"(attnc_smem_addr_(smem_dst)), "l"(attnc_gmem_addr_(gmem_src))
               : "memory");
}
ATTNC_FN_ void attnc_cp_async16_zfill(void *smem_dst, const void *gmem_src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :
               : "r"(attnc_smem_addr_(smem_dst)), "l"(attnc_gmem_addr_(gmem_src)), "r"(src_bytes)
               : "memory");
}
ATTNC_FN_ void attnc_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
ATTNC_FN_ void attnc_cp_async_wait(void) {
  static_assert(N >= 0, "attnc_cp_async_wait<N>: N >= 0");
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
ATTNC_FN_ void attnc_cp_async_wait_all(void) { asm volatile("cp.async.wait_all;" ::: "memory"); }
ATTNC_FN_ void attnc_ldmatrix_x1(int32_t r[1], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(r[0])
               : "r"(attnc_smem_addr_(row))
               : "memory");
}
ATTNC_FN_ void attnc_ldmatrix_x2(int32_t r[2], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(attnc_smem_addr_(row))
               : "memory");
}
ATTNC_FN_ void attnc_ldmatrix_x4(int32_t r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(attnc_smem_addr_(row))
               : "memory");
}
ATTNC_FN_ void attnc_ldmatrix_x1_trans(int32_t r[1], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
               : "=r"(r[0])
               : "r"(attnc_smem_addr_(row))
               : "memory");
}
ATTNC_FN_ void attnc_ldmatrix_x2_trans(int32_t r[2], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(attnc_smem_addr_(row))
               : "memory");
}
ATTNC_FN_ void attnc_ldmatrix_x4_trans(int32_t r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(attnc_smem_addr_(row))
               : "memory");
}
/* cvt.rn.{f16,bf16}x2.f32 d, a, b puts a in the upper half, b in the lower. */
ATTNC_FN_ int32_t attnc_pack_f16x2(float lo, float hi) {
  int32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
ATTNC_FN_ int32_t attnc_pack_bf16x2(float lo, float hi) {
  int32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif /* GPU */

#endif /* ATTNC_PRELUDE_ */
`

// PreludeDeviceNames are the names the prelude defines for kernels, in every
// branch.
var PreludeDeviceNames = []string{
	"ATTNC_KERNEL", "ATTNC_DEV", "ATTNC_DYN_SMEM",
	"attnc_tid", "attnc_bid", "attnc_nblocks", "attnc_nthreads", "attnc_sync",
	"attnc_shfl_xor_f32", "attnc_shfl_xor_i32", "attnc_shfl_idx_f32", "attnc_shfl_idx_i32",
	"attnc_mma_f16", "attnc_mma_bf16",
	"attnc_exp", "attnc_log", "attnc_exp2", "attnc_tanh", "attnc_sqrt", "attnc_floor",
	"attnc_sin", "attnc_cos", "attnc_fabs", "attnc_fmax", "attnc_fmin", "attnc_fma",
	"attnc_f32_as_i32", "attnc_i32_as_f32",
	"attnc_f16_to_f32", "attnc_f32_to_f16", "attnc_bf16_to_f32", "attnc_f32_to_bf16",
	"attnc_pack_f16x2", "attnc_pack_bf16x2",
	"attnc_cp_async16", "attnc_cp_async16_zfill", "attnc_cp_async_commit", "attnc_cp_async_wait",
	"attnc_cp_async_wait_all",
	"attnc_ldmatrix_x1", "attnc_ldmatrix_x2", "attnc_ldmatrix_x4",
	"attnc_ldmatrix_x1_trans", "attnc_ldmatrix_x2_trans", "attnc_ldmatrix_x4_trans",
}

// PreludeTypeNames are types every branch defines (the clang branch too, so
// that declarations parse), besides the fixed-width integer types.
var PreludeTypeNames = []string{"attnc_stream_t", "cudaStream_t"}

// PreludeHostNames are the host-side names, defined by the nvcc and emulator
// branches and absent where ATTNC_NO_HOST is defined.
var PreludeHostNames = []string{
	"ATTNC_LAUNCH", "attnc_set_smem", "attnc_alloc", "attnc_free",
	"attnc_num_sms", "attnc_last_error",
}

// EmuHeaderName is the file name the prelude includes under ATTNC_EMULATE.
const EmuHeaderName = "attnc_cuda_emu.h"

//go:embed emu/attnc_cuda_emu.h
var emuHeader []byte

// EmuHeader returns the emulator header's text.
func EmuHeader() []byte { return bytes.Clone(emuHeader) }

// WriteEmuHeader writes the emulator header as dir/attnc_cuda_emu.h (through a
// temporary file and a rename, so a concurrent reader never sees half of it).
func WriteEmuHeader(dir string) error {
	dst := filepath.Join(dir, EmuHeaderName)
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, emuHeader) {
		return nil
	}
	f, err := os.CreateTemp(dir, EmuHeaderName+".*")
	if err != nil {
		return fmt.Errorf("cuda: write emulator header: %w", err)
	}
	_, werr := f.Write(emuHeader)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), dst)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cuda: write emulator header: %w", werr)
	}
	return nil
}

var emuDir struct {
	once sync.Once
	dir  string
	err  error
}

// EmuDir returns an absolute directory holding attnc_cuda_emu.h (the -I for
// CompileEmulated): this package's emu/ directory when the source tree is
// present and matches the embedded header, otherwise a directory under the
// user cache (or temporary) directory named after the header's hash, written
// once.
func EmuDir() (string, error) {
	emuDir.once.Do(func() { emuDir.dir, emuDir.err = findEmuDir() })
	return emuDir.dir, emuDir.err
}

func findEmuDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "emu")
		if b, err := os.ReadFile(filepath.Join(dir, EmuHeaderName)); err == nil && bytes.Equal(b, emuHeader) {
			if abs, err := filepath.Abs(dir); err == nil {
				return abs, nil
			}
		}
	}
	sum := sha256.Sum256(emuHeader)
	name := "emu-" + hex.EncodeToString(sum[:6])
	var errs []error
	var roots []string
	if c, err := os.UserCacheDir(); err == nil {
		roots = append(roots, filepath.Join(c, "attnc"))
	}
	roots = append(roots, filepath.Join(os.TempDir(), "attnc"))
	for _, root := range roots {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := WriteEmuHeader(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		if abs, err := filepath.Abs(dir); err == nil {
			return abs, nil
		}
	}
	return "", fmt.Errorf("cuda: no directory for the emulator header: %w", errors.Join(errs...))
}

// GXX locates the C++ compiler for the emulator: $ATTNC_CXX if set, else g++
// on PATH.
func GXX() (string, error) {
	if p := os.Getenv("ATTNC_CXX"); p != "" {
		return exec.LookPath(p)
	}
	p, err := exec.LookPath("g++")
	if err != nil {
		return "", fmt.Errorf("cuda: g++ not found (install g++, or set ATTNC_CXX): %w", err)
	}
	return p, nil
}

// ClangCUDA locates clang++ 19 for CUDA-to-PTX compilation: $ATTNC_CLANG if
// set, else clang++-19 on PATH, else /usr/lib/llvm-19/bin/clang++.
func ClangCUDA() (string, error) {
	if p := os.Getenv("ATTNC_CLANG"); p != "" {
		return exec.LookPath(p)
	}
	if p, err := exec.LookPath("clang++-19"); err == nil {
		return p, nil
	}
	const llvm19 = "/usr/lib/llvm-19/bin/clang++"
	if st, err := os.Stat(llvm19); err == nil && !st.IsDir() {
		return llvm19, nil
	}
	return "", errors.New("cuda: clang++-19 not found (apt-get install -y clang-19, or set ATTNC_CLANG)")
}

// EmulatedFlags are the g++ flags CompileEmulated passes before the extra
// flags and the file names. -fno-strict-aliasing because CUDA code commonly
// reads two halves as one 32-bit word through a cast pointer. -O1 because
// an emulated library runs a few small shapes and compiles for seconds:
// conformance's emulated tests took 135 CPU-s at -O2, 85 at -O1, 90 at -Og
// and 95 at -O0 (Zen 5, session 34).
var EmulatedFlags = []string{"-std=c++17", "-O1", "-fno-strict-aliasing", "-x", "c++", "-DATTNC_EMULATE"}

// EmulatorIdentity identifies the compiler CompileEmulated builds with:
// its path and --version output, EmulatedFlags and the emulator header,
// as a SHA-256 in hex (for a cache of emulated libraries' key); without
// g++ it says so.
func EmulatorIdentity() string {
	h := sha256.New()
	gxx, err := GXX()
	if err != nil {
		fmt.Fprintf(h, "no g++: %v", err)
	} else {
		out, err := exec.Command(gxx, "--version").CombinedOutput()
		fmt.Fprintf(h, "%s\x00%s\x00%v\x00", gxx, out, err)
	}
	fmt.Fprintf(h, "%s\x00", strings.Join(EmulatedFlags, "\x00"))
	h.Write(emuHeader)
	return hex.EncodeToString(h.Sum(nil))
}

// CompileEmulated compiles cuPath (a .cu that starts with Prelude) as C++ for
// the CPU emulator into the shared library soPath:
//
//	g++ -std=c++17 -O1 -fno-strict-aliasing -x c++ -DATTNC_EMULATE -I<EmuDir> [extra...] \
//	    -shared -fPIC cuPath -o soPath -lpthread
//
// Open the result with cpurt.Open. The error carries the compiler's output.
func CompileEmulated(cuPath, soPath string, extra ...string) error {
	cxx, err := GXX()
	if err != nil {
		return err
	}
	dir, err := EmuDir()
	if err != nil {
		return err
	}
	args := append([]string{}, EmulatedFlags...)
	args = append(args, "-I"+dir)
	args = append(args, extra...)
	args = append(args, "-shared", "-fPIC", cuPath, "-o", soPath, "-lpthread")
	return runTool(cxx, args)
}

var archRE = regexp.MustCompile(`^sm_([0-9]+)a?$`)

// PTXFlags returns the clang flags CompilePTX uses for arch, without the
// input and output names.
func PTXFlags(arch string) ([]string, error) {
	m := archRE.FindStringSubmatch(arch)
	if m == nil {
		return nil, fmt.Errorf("cuda: bad GPU architecture %q (want sm_80, sm_90, ...)", arch)
	}
	if n, _ := strconv.Atoi(m[1]); n < 80 {
		return nil, fmt.Errorf("cuda: architecture %s is too old: the kernels use mma.m16n8k16 with bf16 (sm_80 or newer)", arch)
	}
	return []string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=" + arch, "-nocudainc", "-nocudalib",
		"-Xclang", "-target-feature", "-Xclang", "+ptx78", "-O3", "-S"}, nil
}

// CompilePTX compiles cuPath to PTX for arch ("sm_80", "sm_90") with clang
// and no CUDA installation:
//
//	clang++-19 -x cuda --cuda-device-only --cuda-gpu-arch=<arch> -nocudainc -nocudalib \
//	    -Xclang -target-feature -Xclang +ptx78 -O3 -S -o ptxPath cuPath
//
// The error carries the compiler's output.
func CompilePTX(cuPath, ptxPath, arch string) error {
	flags, err := PTXFlags(arch)
	if err != nil {
		return err
	}
	clang, err := ClangCUDA()
	if err != nil {
		return err
	}
	return runTool(clang, append(flags, "-o", ptxPath, cuPath))
}

func runTool(tool string, args []string) error {
	cmd := exec.Command(tool, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cuda: %s %s: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err,
			strings.TrimSpace(out.String()))
	}
	return nil
}
