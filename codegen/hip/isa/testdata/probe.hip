// Hand-written kernels whose machine-code facts are known: isa_test.go
// compiles them for gfx942 and checks what Parse reads.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))

typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float float4_ __attribute__((ext_vector_type(4)));

// Few registers, no scratch, no LDS.
extern "C" __global__ void k_clean(float *out, const float *in) {
  int i = __builtin_amdgcn_workitem_id_x();
  out[i] = in[i] * 2.0f;
}

// 96 values live across a loop in a kernel held to 32 VGPRs: the register
// allocator must spill to scratch.
extern "C" __global__ void __attribute__((amdgpu_num_vgpr(32))) k_spill(float *out, const float *in, int n) {
  int t = __builtin_amdgcn_workitem_id_x();
  float v[96];
#pragma unroll
  for (int j = 0; j < 96; j++) v[j] = in[t + 64 * j];
  for (int it = 0; it < n; it++) {
#pragma unroll
    for (int j = 0; j < 96; j++) v[j] = v[j] * v[(j + 1) % 96] + 1.0f;
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 96; j++) s += v[j];
  out[t] = s;
}

// A private array indexed at run time lives in scratch without any spill.
extern "C" __global__ void k_private(float *out, const float *in, int k) {
  int t = __builtin_amdgcn_workitem_id_x();
  float a[64];
  for (int j = 0; j < 64; j++) a[j] = in[t * 64 + j];
  out[t] = a[(k + t) & 63];
}

// 4 KiB of static LDS, a barrier, one f16 MFMA.
extern "C" __global__ void k_lds_mfma(float *out, const _Float16 *in) {
  __shared__ float buf[1024];
  int t = __builtin_amdgcn_workitem_id_x();
  buf[t] = (float)in[t];
  __builtin_amdgcn_s_barrier();
  half4 a = {in[4 * t], in[4 * t + 1], in[4 * t + 2], in[4 * t + 3]};
  float4_ c = {buf[(t + 1) & 1023], 0, 0, 0};
  c = __builtin_amdgcn_mfma_f32_16x16x16f16(a, a, c, 0, 0, 0);
  out[t] = c[0] + c[1] + c[2] + c[3];
}
