// kgen memory access: read-only vector loads (ld.global.nc) and streaming stores (st.global.cs) of
// a lane's bytes, as 32-bit words (word k holds bytes [4k, 4k+4), little-endian).
#pragma once

#include "numerics.cuh"

namespace kgen {

// A CUtensorMap as a kernel's Params carries it (kgen/abi.py's TensorMap field, encoded on the host by
// kgen/tma.py): 128 opaque bytes, 64-B aligned, whose address a cp.async.bulk.tensor takes. Declared here
// because NVRTC has no cuda.h and the CPU shim compiles these headers with a host compiler.
struct alignas(64) TensorMap {
  unsigned long long words[16];
};
static_assert(sizeof(TensorMap) == 128 && alignof(TensorMap) == 64, "a CUtensorMap: 128 B, 64-B aligned");

namespace mem {

template <int Bytes>
struct Words {
  static_assert(Bytes > 0, "a lane moves at least one byte");
  static constexpr int kCount = (Bytes + 3) / 4;
  uint32_t w[kCount];
};

// Loads `Bytes` bytes at `p` (aligned to min(Bytes, 16)) through the read-only path, widest first.
template <int Bytes>
__device__ __forceinline__ void load_nc(const void* p, Words<Bytes>& out) {
  if constexpr (Bytes >= 16) {
    static_assert(Bytes % 16 == 0, "lane loads are whole 16-B vectors");
    const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < Bytes / 16; ++i) {
      const uint4 v = __ldg(q + i);
      out.w[4 * i + 0] = v.x;
      out.w[4 * i + 1] = v.y;
      out.w[4 * i + 2] = v.z;
      out.w[4 * i + 3] = v.w;
    }
  } else if constexpr (Bytes == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    out.w[0] = v.x;
    out.w[1] = v.y;
  } else if constexpr (Bytes == 4) {
    out.w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else {
    static_assert(Bytes == 2, "lane loads are 2, 4, 8 or a multiple of 16 bytes");
    out.w[0] = static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p)));
  }
}

template <int Bytes>
__device__ __forceinline__ void zero(Words<Bytes>& out) {
#pragma unroll
  for (int i = 0; i < Words<Bytes>::kCount; ++i) out.w[i] = 0u;
}

// Stores `Bytes` bytes to `p` (aligned to min(Bytes, 16)) with the streaming (evict-first) hint.
template <int Bytes>
__device__ __forceinline__ void store_cs(uint8_t* p, const Words<Bytes>& in) {
  if constexpr (Bytes >= 16) {
    static_assert(Bytes % 16 == 0, "lane stores are whole 16-B vectors");
    uint4* q = reinterpret_cast<uint4*>(p);
#pragma unroll
    for (int i = 0; i < Bytes / 16; ++i) {
      __stcs(q + i, make_uint4(in.w[4 * i + 0], in.w[4 * i + 1], in.w[4 * i + 2], in.w[4 * i + 3]));
    }
  } else if constexpr (Bytes == 8) {
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(in.w[0], in.w[1]));
  } else if constexpr (Bytes == 4) {
    __stcs(reinterpret_cast<unsigned int*>(p), in.w[0]);
  } else if constexpr (Bytes == 2) {
    __stcs(reinterpret_cast<unsigned short*>(p), static_cast<unsigned short>(in.w[0]));
  } else {
    static_assert(Bytes == 1, "lane stores are 1, 2, 4, 8 or a multiple of 16 bytes");
    __stcs(reinterpret_cast<unsigned char*>(p), static_cast<unsigned char>(in.w[0]));
  }
}

// Programmatic dependent launch (sm_90+; no-ops elsewhere, and on the CPU shim). `pdl_wait` blocks until
// the grids this one depends on have completed and their memory is visible: nothing this kernel reads
// may be touched before it. `pdl_launch_dependents` lets the next grid in the stream start its own
// prologue early (it still waits for this grid's completion in its own `pdl_wait`), so it is safe
// anywhere; kgen calls it right after its own wait. The launch must set the programmatic stream
// serialization attribute exactly when the kernel was built with kPdl (kgen.layout.uses_pdl).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The launch's dynamic shared memory in bytes, as the host sized it (the reader checks its carve-up against it,
// the top-k holds a cluster slice where it has room); under the CPU emulation, the emulated CTA's buffer.
__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
#if defined(KGEN_CPU_SHIM)
  return kgen_cpu::dynamic_smem_bytes();
#else
  uint32_t bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(bytes));
  return bytes;
#endif
}

__device__ __forceinline__ void store_cs_f32(uint8_t* p, float v) {
  __stcs(reinterpret_cast<float*>(p), v);
}
__device__ __forceinline__ void store_cs_u8(uint8_t* p, uint32_t v) {
  __stcs(reinterpret_cast<unsigned char*>(p), static_cast<unsigned char>(v));
}

}  // namespace mem
}  // namespace kgen
