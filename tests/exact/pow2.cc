// Exhaustive check of the power-of-two scale shortcut (templates/include/kgen/numerics.cuh): for every
// normal or +inf fp32 t (bits 0x00800000 .. 0x7f800000), sb = pow2_ceil_bits(t) and pow2_inv_bits(sb)
// equal the general path: bits(exp2i(e)), bits(exp2i(-e)) and e + 127 with e = ceil_log2(t).
#include "kgen_cpu_shim.h"
#include <kgen/numerics.cuh>
#include <cstdio>

int main() {
  using namespace kgen;
  unsigned long long bad = 0, checked = 0;
  for (uint32_t u = 0x00800000u; u <= 0x7f800000u; ++u) {
    const float t = __uint_as_float(u);
    const int e = num::ceil_log2(t);
    const uint32_t sb = num::pow2_ceil_bits(t);
    const bool ok = sb == __float_as_uint(num::exp2i(e)) && (sb >> 23) == static_cast<uint32_t>(e + 127) &&
                    num::pow2_inv_bits(sb) == __float_as_uint(num::exp2i(-e));
    if (!ok && bad++ < 4) std::printf("MISMATCH t=%a e=%d sb=%08x\n", t, e, sb);
    ++checked;
  }
  std::printf("%llu checked, %llu mismatches\n", checked, bad);
  return bad == 0 ? 0 : 1;
}
