// key_floor_value's promise, on the CPU: order_key(f) >= K exactly when !(f <= key_floor_value(K)), for keys K at,
// above and below every coarse bin's floor and at the edges of the key space (0, -0's and +0's, +inf's, between
// +inf's and the NaNs', the NaNs'), and values f around each of those keys, +-0, +-denorm_min, +-inf and NaNs of
// both signs. Prints the pairs checked, or the first pair that breaks it (exit 1).
#include <cstdio>
#include <vector>

#include KGEN_KERNEL_CU

int main() {
  using kgen::topk::coarse_floor;
  using kgen::topk::key_floor_value;
  using kgen::topk::order_key;
  constexpr uint32_t kBins = 1u << KgenConfig::kTopkCoarseBits;
  // the value whose order key is k (k in [order_key(-inf), order_key(+inf)])
  const auto value = [](uint32_t k) { return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k); };
  std::vector<uint32_t> keys = {0u,          1u,          0x007ffffeu, 0x007fffffu, 0x7ffffffeu,
                                0x7fffffffu, 0x80000000u, 0x80000001u, 0xff7fffffu, 0xff800000u,
                                0xff800001u, 0xfffffffeu, 0xffffffffu};
  for (uint32_t b = 0; b < kBins; ++b) {
    const uint32_t f = coarse_floor<KgenConfig>(b);
    keys.insert(keys.end(), {f - 1u, f, f + 1u});
  }
  std::vector<float> values = {0.f,
                               -0.f,
                               __uint_as_float(0x7fc00000u),
                               __uint_as_float(0xffc00000u),
                               __uint_as_float(0x7f800001u),
                               __uint_as_float(0xffffffffu)};
  for (uint32_t k : keys) {
    for (uint32_t d = 0; d < 5; ++d) {
      const uint32_t near = k + d - 2u;
      if (near >= 0x007fffffu && near <= 0xff800000u) values.push_back(value(near));
    }
  }
  long checked = 0;
  for (uint32_t k : keys) {
    const float t = key_floor_value(k);
    for (float f : values) {
      const bool want = order_key(f) >= k, got = !(f <= t);
      if (want != got) {
        std::printf("key %08x value bits %08x: order_key %08x, threshold bits %08x, test %d\n", k, __float_as_uint(f),
                    order_key(f), __float_as_uint(t), got);
        return 1;
      }
      ++checked;
    }
  }
  std::printf("%ld pairs\n", checked);
  return 0;
}
