// Exhaustive check of num::e2m1 (templates/include/kgen/numerics.cuh) against the threshold sum of
// docs/numerics.md §6, for every fp32 bit pattern. The whole program runs rounding upward (the
// kernel's __fadd_ru / __fmaf_ru); the reference only compares, so the mode does not touch it.
#define KGEN_SHIM_GLOBAL_ROUND_UP
#include "kgen_cpu_shim.h"
#include <kgen/numerics.cuh>
#include <cstdio>
#include <thread>

static uint32_t reference(float v) {
  const float a = std::fabs(v);
  const uint32_t code = (a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) + (a > 3.5f) + (a > 5.0f);
  return code | ((v < 0.0f && code != 0u) ? 8u : 0u);
}

int main() {
  unsigned long long bad[2] = {0, 0};
  auto run = [&](int k) {
    std::fesetround(FE_UPWARD);
    for (uint64_t u = k; u <= 0xffffffffull; u += 2) {
      const float v = __uint_as_float(static_cast<uint32_t>(u));
      if (kgen::num::e2m1(v) != reference(v) && bad[k]++ < 4)
        std::printf("MISMATCH v=%a got=%u want=%u\n", v, kgen::num::e2m1(v), reference(v));
    }
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join(); t1.join();
  std::printf("4294967296 checked, %llu mismatches\n", bad[0] + bad[1]);
  return bad[0] + bad[1] == 0 ? 0 : 1;
}
