package hip

// Prelude is the text at the top of every generated <variant>.hip. Kernels
// and host launchers use only the names it defines (PreludeDeviceNames,
// PreludeHostNames): the names of the CUDA prelude (codegen/cuda) that a
// CDNA3 GPU has, plus its matrix instructions, so that one C-style printer
// serves both. One source compiles three ways:
//
//   - with the HIP headers (hipcc, or clang -x hip where ROCm is installed;
//     <hip/hip_runtime.h> is found and ATTNC_HIP_NO_HEADERS is not defined);
//   - with clang++ -x hip --offload-arch=gfx942 -nogpulib -nogpuinc, without
//     any ROCm file: this branch defines the HIP keywords from clang's
//     attributes and declares the part of the HIP runtime API the launchers
//     call (hipLaunchKernel, hipFuncSetAttribute, hipMallocAsync,
//     hipFreeAsync, hipGetDevice, hipDeviceGetAttribute, hipGetLastError)
//     with HIP's signatures and enum values, so the host side compiles too
//     and links against libamdhip64;
//   - as C++17 with -DATTNC_EMULATE and the CUDA emulator header
//     (codegen/cuda/emu) with 64-lane warps (ATTNC_EMU_LANES 64).
//
// Device names (usable in kernels and ATTNC_DEV helpers; only the x
// dimension exists). A warp is a wavefront of 64 lanes:
//
//	ATTNC_KERNEL, ATTNC_DEV, ATTNC_DYN_SMEM(name)   as in the CUDA prelude
//	ATTNC_ARG(T, offset, name)   the kernel parameter name of C type T, read
//	                             where it is used: on the GPU a volatile load
//	                             from the argument segment at byte offset
//	                             (cstyle.ArgOffsets), in the emulator the
//	                             parameter itself
//	attnc_tid() attnc_bid() attnc_nblocks() attnc_nthreads()
//	                             work-item and workgroup ids and counts (x) as int
//	attnc_sync()                 s_barrier between workgroup release and
//	                             acquire fences (HIP's __syncthreads)
//	attnc_shfl_xor_f32(v, mask), attnc_shfl_xor_i32, attnc_shfl_idx_f32(v, src),
//	attnc_shfl_idx_i32           full-wavefront shuffles through ds_bpermute_b32:
//	                             the source lane is taken modulo 64; every lane
//	                             of the wavefront must call them together
//	attnc_mfma_f16(float d[4], const int32_t a[2], const int32_t b[2])
//	attnc_mfma_bf16(...)         d += A*B: v_mfma_f32_16x16x16_f16 and
//	                             v_mfma_f32_16x16x16_bf16 (the _1k form); with
//	                             j = lane % 16, g = lane / 16, lane holds
//	                             A[j][4g+r] and B[4g+r][j] as element r of a
//	                             and b (two 16-bit elements per register, the
//	                             lower r in the low half) and D[4g+r][j] in d[r]
//	attnc_exp attnc_log attnc_exp2 attnc_tanh attnc_sqrt attnc_floor attnc_sin
//	attnc_cos attnc_fabs attnc_fmax attnc_fmin attnc_fma, the bit casts, the
//	f16/bf16 conversions and attnc_pack_f16x2/bf16x2   as in the CUDA prelude
//	attnc_cp_async16(dst, src), attnc_cp_async16_zfill(dst, src, src_bytes),
//	attnc_cp_async_commit(), attnc_cp_async_wait<N>(), attnc_cp_async_wait_all()
//	                             CDNA3 has no asynchronous global-to-LDS copy
//	                             that a thread waits for: the copies are plain
//	                             16-byte copies (complete when they return; the
//	                             barrier after them publishes them), commit and
//	                             wait do nothing
//
// Types in every branch: attnc_stream_t = hipStream_t (emulator: void*).
//
// Host names (every branch: a HIP source has its host side even without
// headers):
//
//	ATTNC_LAUNCH(kernel, grid, block, smem, stream, args...)
//	                             hipLaunchKernel with the arguments converted to
//	                             the kernel's parameter types (the emulator
//	                             runs the grid before returning)
//	attnc_set_smem, attnc_alloc, attnc_free, attnc_num_sms (compute units),
//	attnc_last_error             as in the CUDA prelude, through HIP
//
// In the GPU branches exp, log and exp2 are LLVM's AMDGPU expansions of
// llvm.exp/log/exp2.f32 (v_exp_f32/v_log_f32 with range reduction; a few
// ulp), tanh is computed from exp2 (|x| >= 0.3) or its Taylor series
// (relative error below 1e-6), sin and cos reduce the argument to [-pi, pi]
// before v_sin_f32/v_cos_f32. The emulator uses libm.
const Prelude = `/* attnc HIP prelude (ABI 1) */
#ifndef ATTNC_PRELUDE_
#define ATTNC_PRELUDE_ 1

#if defined(ATTNC_EMULATE)
/* ---- CPU emulator, wavefronts of 64 lanes ---- */
#define ATTNC_EMU_LANES 64
#include "attnc_cuda_emu.h"
typedef void *hipStream_t;
#define ATTNC_FN_ static inline
/* The emulator's kernels are C++ functions: a parameter is its argument. */
#define ATTNC_ARG(T, offset, name) (name)

#else
#if !defined(ATTNC_HIP_NO_HEADERS) && defined(__has_include)
#if __has_include(<hip/hip_runtime.h>)
#define ATTNC_HIP_HEADERS_ 1
#endif
#endif

#if defined(ATTNC_HIP_HEADERS_)
/* ---- the HIP headers ---- */
#include <hip/hip_runtime.h>
#include <stdint.h>

#else
/* ---- clang -x hip -nogpuinc: no HIP headers ---- */
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
/* HIP's meaning: the second argument is the minimum waves per EU (SIMD). */
#define __launch_bounds__(...) ATTNC_LB_PICK_(__VA_ARGS__, ATTNC_LB2_, ATTNC_LB1_, 0)(__VA_ARGS__)
#define ATTNC_LB_PICK_(a, b, m, ...) m
#define ATTNC_LB1_(t) __attribute__((amdgpu_flat_work_group_size(1, t)))
#define ATTNC_LB2_(t, w) __attribute__((amdgpu_flat_work_group_size(1, t), amdgpu_waves_per_eu(w)))
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
/* The HIP runtime API the launchers call: HIP's signatures and values. */
typedef struct ihipStream_t *hipStream_t;
typedef enum hipError_t { hipSuccess = 0 } hipError_t;
typedef enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize = 8 } hipFuncAttribute;
typedef enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount = 63 } hipDeviceAttribute_t;
struct dim3 {
  uint32_t x, y, z;
  __host__ __device__ constexpr dim3(uint32_t a = 1, uint32_t b = 1, uint32_t c = 1) : x(a), y(b), z(c) {}
};
extern "C" {
hipError_t hipLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
                           size_t sharedMemBytes, hipStream_t stream);
hipError_t hipFuncSetAttribute(const void *func, hipFuncAttribute attr, int value);
hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream);
hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream);
hipError_t hipGetDevice(int *deviceId);
hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId);
hipError_t hipGetLastError(void);
}
#endif

/* ---- both GPU branches: the device side from clang's AMDGPU builtins ---- */
#define ATTNC_KERNEL extern "C" __global__
#define ATTNC_DEV static __device__ inline
#define ATTNC_FN_ static __device__ __forceinline__
extern __shared__ __attribute__((aligned(16))) unsigned char attnc_smem_[];
#define ATTNC_DYN_SMEM(name) unsigned char *name = attnc_smem_
/* A kernel parameter read where it is used, from the kernel's argument
   segment at its byte offset: a volatile scalar load (s_load) the compiler
   neither hoists to the kernel's start nor merges with another, so the
   parameter does not hold scalar registers across the loops between. */
#define ATTNC_ARG(T, offset, name) attnc_kernarg_<T>(offset)
template <class T>
ATTNC_FN_ T attnc_kernarg_(int offset) {
  typedef const volatile __attribute__((address_space(4))) T seg_t;
  return *(seg_t *)((const __attribute__((address_space(4))) char *)__builtin_amdgcn_kernarg_segment_ptr() + offset);
}

ATTNC_FN_ int attnc_tid(void) { return (int)__builtin_amdgcn_workitem_id_x(); }
ATTNC_FN_ int attnc_bid(void) { return (int)__builtin_amdgcn_workgroup_id_x(); }
ATTNC_FN_ int attnc_nthreads(void) { return (int)__builtin_amdgcn_workgroup_size_x(); }
/* The grid size is in work-items; HIP launches whole workgroups. */
ATTNC_FN_ int attnc_nblocks(void) {
  return (int)(__builtin_amdgcn_grid_size_x() / (uint32_t)__builtin_amdgcn_workgroup_size_x());
}
ATTNC_FN_ void attnc_sync(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
ATTNC_FN_ int32_t attnc_f32_as_i32(float x) { return __builtin_bit_cast(int32_t, x); }
ATTNC_FN_ float attnc_i32_as_f32(int32_t x) { return __builtin_bit_cast(float, x); }
ATTNC_FN_ int attnc_lane_(void) { return (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
/* ds_bpermute_b32 reads lane (address / 4) % 64 of the wavefront. */
ATTNC_FN_ int32_t attnc_shfl_xor_i32(int32_t v, int mask) {
  return __builtin_amdgcn_ds_bpermute((attnc_lane_() ^ mask) << 2, v);
}
ATTNC_FN_ int32_t attnc_shfl_idx_i32(int32_t v, int src) { return __builtin_amdgcn_ds_bpermute(src << 2, v); }
ATTNC_FN_ float attnc_shfl_xor_f32(float v, int mask) {
  return attnc_i32_as_f32(attnc_shfl_xor_i32(attnc_f32_as_i32(v), mask));
}
ATTNC_FN_ float attnc_shfl_idx_f32(float v, int src) {
  return attnc_i32_as_f32(attnc_shfl_idx_i32(attnc_f32_as_i32(v), src));
}
ATTNC_FN_ float attnc_sqrt(float x) { return __builtin_sqrtf(x); }
ATTNC_FN_ float attnc_floor(float x) { return __builtin_floorf(x); }
ATTNC_FN_ float attnc_fabs(float x) { return __builtin_fabsf(x); }
ATTNC_FN_ float attnc_fmax(float a, float b) { return __builtin_fmaxf(a, b); }
ATTNC_FN_ float attnc_fmin(float a, float b) { return __builtin_fminf(a, b); }
ATTNC_FN_ float attnc_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
ATTNC_FN_ float attnc_exp2(float x) { return __builtin_exp2f(x); }
ATTNC_FN_ float attnc_exp(float x) { return __builtin_expf(x); }
ATTNC_FN_ float attnc_log(float x) { return __builtin_logf(x); }
ATTNC_FN_ float attnc_tanh(float x) {
  float a = __builtin_fabsf(x);
  float r;
  if (a >= 0.3f) {
    /* 1 - 2/(e^2a + 1); e^2a = +inf gives 1 */
    r = 1.0f - 2.0f / (__builtin_exp2f(a * 2.8853900817779268f) + 1.0f);
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
/* x - k*2pi with 2pi split in two floats: v_sin_f32/v_cos_f32 are accurate
   near zero. */
ATTNC_FN_ float attnc_reduce_2pi_(float x) {
  float k = __builtin_rintf(x * 0.15915494309189535f);
  float r = __builtin_fmaf(-k, 6.2831854820251465f, x);
  return __builtin_fmaf(-k, -1.7484555314695172e-07f, r);
}
ATTNC_FN_ float attnc_sin(float x) { return __builtin_sinf(attnc_reduce_2pi_(x)); }
ATTNC_FN_ float attnc_cos(float x) { return __builtin_cosf(attnc_reduce_2pi_(x)); }
/* v_cvt_f32_f16 and v_cvt_f16_f32: exact, and round to nearest even. */
ATTNC_FN_ float attnc_f16_to_f32(uint16_t h) { return (float)__builtin_bit_cast(_Float16, h); }
ATTNC_FN_ uint16_t attnc_f32_to_f16(float f) { return __builtin_bit_cast(uint16_t, (_Float16)f); }
ATTNC_FN_ float attnc_bf16_to_f32(uint16_t h) { return attnc_i32_as_f32((int32_t)((uint32_t)h << 16)); }
/* gfx942 has no bf16 conversion instruction: round to nearest even in
   integer arithmetic, NaN kept quiet. */
ATTNC_FN_ uint16_t attnc_f32_to_bf16(float f) {
  uint32_t x = (uint32_t)attnc_f32_as_i32(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
ATTNC_FN_ int32_t attnc_pack_f16x2(float lo, float hi) {
  return (int32_t)((uint32_t)attnc_f32_to_f16(lo) | ((uint32_t)attnc_f32_to_f16(hi) << 16));
}
ATTNC_FN_ int32_t attnc_pack_bf16x2(float lo, float hi) {
  return (int32_t)((uint32_t)attnc_f32_to_bf16(lo) | ((uint32_t)attnc_f32_to_bf16(hi) << 16));
}
typedef _Float16 attnc_f16x4_ __attribute__((ext_vector_type(4)));
typedef short attnc_i16x4_ __attribute__((ext_vector_type(4)));
typedef int attnc_i32x2_ __attribute__((ext_vector_type(2)));
typedef float attnc_f32x4_ __attribute__((ext_vector_type(4)));
ATTNC_FN_ void attnc_mfma_f16(float d[4], const int32_t a[2], const int32_t b[2]) {
  attnc_i32x2_ av = {a[0], a[1]}, bv = {b[0], b[1]};
  attnc_f32x4_ c = {d[0], d[1], d[2], d[3]};
  c = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(attnc_f16x4_, av), __builtin_bit_cast(attnc_f16x4_, bv),
                                            c, 0, 0, 0);
  d[0] = c[0];
  d[1] = c[1];
  d[2] = c[2];
  d[3] = c[3];
}
ATTNC_FN_ void attnc_mfma_bf16(float d[4], const int32_t a[2], const int32_t b[2]) {
  attnc_i32x2_ av = {a[0], a[1]}, bv = {b[0], b[1]};
  attnc_f32x4_ c = {d[0], d[1], d[2], d[3]};
  c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(attnc_i16x4_, av),
                                                __builtin_bit_cast(attnc_i16x4_, bv), c, 0, 0, 0);
  d[0] = c[0];
  d[1] = c[1];
  d[2] = c[2];
  d[3] = c[3];
}

/* ---- host side through the HIP runtime ---- */
typedef hipStream_t attnc_stream_t;
template <class T>
struct attnc_same_ {
  typedef T type;
};
/* The arguments take the kernel's parameter types (one deduction: the
   kernel's), then hipLaunchKernel gets their addresses. */
template <class... P>
static inline void attnc_launch_(void (*kernel)(P...), long long grid, long long block, size_t smem, void *stream,
                                 typename attnc_same_<P>::type... args) {
  void *argv[] = {(void *)&args..., 0};
  (void)hipLaunchKernel((const void *)kernel, dim3((uint32_t)grid), dim3((uint32_t)block), argv, smem,
                        (hipStream_t)stream);
}
#define ATTNC_LAUNCH(kernel, grid, block, smem, stream, ...) \
  attnc_launch_(kernel, (grid), (block), (size_t)(smem), (void *)(stream), __VA_ARGS__)
static inline int attnc_set_smem(const void *kernel, int bytes) {
  return (int)hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
static inline int attnc_alloc(void **p, size_t bytes, void *s) { return (int)hipMallocAsync(p, bytes, (hipStream_t)s); }
static inline int attnc_free(void *p, void *s) { return (int)hipFreeAsync(p, (hipStream_t)s); }
static inline int attnc_num_sms(void) {
  int dev = 0, n = 0;
  if (hipGetDevice(&dev) != hipSuccess) return 1;
  if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess || n < 1) return 1;
  return n;
}
static inline int attnc_last_error(void) { return (int)hipGetLastError(); }
#endif /* GPU */

/* ---- every branch: 16-byte copies (also the printer's Vec16), completing at once ---- */
typedef uint32_t attnc_v16 __attribute__((vector_size(16)));
ATTNC_FN_ void attnc_cp_async16(void *smem_dst, const void *gmem_src) {
  *(attnc_v16 *)smem_dst = *(const attnc_v16 *)gmem_src;
}
ATTNC_FN_ void attnc_cp_async16_zfill(void *smem_dst, const void *gmem_src, int src_bytes) {
  if (src_bytes >= 16) {
    attnc_cp_async16(smem_dst, gmem_src);
    return;
  }
  unsigned char *d = (unsigned char *)smem_dst;
  const unsigned char *s = (const unsigned char *)gmem_src;
  for (int i = 0; i < 16; i++) d[i] = i < src_bytes ? s[i] : (unsigned char)0;
}
ATTNC_FN_ void attnc_cp_async_commit(void) {}
template <int N>
ATTNC_FN_ void attnc_cp_async_wait(void) {
  static_assert(N >= 0, "attnc_cp_async_wait<N>: N >= 0");
}
ATTNC_FN_ void attnc_cp_async_wait_all(void) {}

#endif /* ATTNC_PRELUDE_ */
`

// PreludeDeviceNames are the names the prelude defines for kernels, in every
// branch.
var PreludeDeviceNames = []string{
	"ATTNC_KERNEL", "ATTNC_DEV", "ATTNC_DYN_SMEM", "ATTNC_ARG",
	"attnc_tid", "attnc_bid", "attnc_nblocks", "attnc_nthreads", "attnc_sync",
	"attnc_shfl_xor_f32", "attnc_shfl_xor_i32", "attnc_shfl_idx_f32", "attnc_shfl_idx_i32",
	"attnc_mfma_f16", "attnc_mfma_bf16",
	"attnc_exp", "attnc_log", "attnc_exp2", "attnc_tanh", "attnc_sqrt", "attnc_floor",
	"attnc_sin", "attnc_cos", "attnc_fabs", "attnc_fmax", "attnc_fmin", "attnc_fma",
	"attnc_f32_as_i32", "attnc_i32_as_f32",
	"attnc_f16_to_f32", "attnc_f32_to_f16", "attnc_bf16_to_f32", "attnc_f32_to_bf16",
	"attnc_pack_f16x2", "attnc_pack_bf16x2",
	"attnc_cp_async16", "attnc_cp_async16_zfill", "attnc_cp_async_commit", "attnc_cp_async_wait",
	"attnc_cp_async_wait_all",
}

// PreludeTypeNames are types every branch defines, besides the fixed-width
// integer types.
var PreludeTypeNames = []string{"attnc_stream_t", "hipStream_t"}

// PreludeHostNames are the host-side names, defined in every branch.
var PreludeHostNames = []string{
	"ATTNC_LAUNCH", "attnc_set_smem", "attnc_alloc", "attnc_free",
	"attnc_num_sms", "attnc_last_error",
}

// NVIDIAOnlyNames are CUDA prelude names a HIP kernel must not use: CDNA3
// has no ldmatrix and no mma.m16n8k16 (its matrix instructions are
// attnc_mfma_*). The emulator leaves them undefined with 64-lane warps.
var NVIDIAOnlyNames = []string{
	"attnc_mma_f16", "attnc_mma_bf16",
	"attnc_ldmatrix_x1", "attnc_ldmatrix_x2", "attnc_ldmatrix_x4",
	"attnc_ldmatrix_x1_trans", "attnc_ldmatrix_x2_trans", "attnc_ldmatrix_x4_trans",
}
