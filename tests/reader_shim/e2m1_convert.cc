// The wgmma path's fp4 conversion (kgen::detail::e2m1x8_bf16: the codes' bits placed in bf16 words and one
// bf16x2 multiply by e2m1_factor, a second by e2m1_rest where the scale splits) against the mma.sync path's
// (e2m1x2_bf16, float arithmetic), bit for bit, on the CPU: every scale byte, every code byte in every
// position of the 32-bit word. Prints the number of mismatches and exits 1 on any.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kgen/indexer_logits.cuh"

static float scale_of(unsigned e) {  // 2^(e - 127), as the mma.sync path decodes a ue8m0 byte
  if (e == 255u) return __uint_as_float(0x7fc00000u);
  return e == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}
static bool same(unsigned a, unsigned b) {  // bf16 halves: equal bits, or both not a number
  const bool na = (a & 0x7f80u) == 0x7f80u && (a & 0x7fu), nb = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu);
  return na || nb ? na && nb : (a & 0xffffu) == (b & 0xffffu);
}

int main() {
  long long bad = 0, checked = 0;
  unsigned rng = 12345u;
  for (unsigned e = 0; e < 256; ++e) {
    for (unsigned x = 0; x < 256; ++x) {
      for (int pos = 0; pos < 4; ++pos) {
        rng = rng * 1664525u + 1013904223u;
        const unsigned codes = (rng & ~(0xffu << (8 * pos))) | (x << (8 * pos));
        uint4 got = kgen::detail::e2m1x8_bf16(codes, kgen::detail::e2m1_factor(e));
        if (kgen::detail::e2m1_splits(e)) {
          const unsigned rest = kgen::detail::e2m1_rest(e);
          got = make_uint4(kgen::detail::bf16x2_mul(got.x, rest), kgen::detail::bf16x2_mul(got.y, rest),
                           kgen::detail::bf16x2_mul(got.z, rest), kgen::detail::bf16x2_mul(got.w, rest));
        } else if (kgen::detail::e2m1_rest(e) != 0x3f803f80u) {
          if (bad < 5) std::printf("e %u: rest %08x where the factor does not split\n", e, kgen::detail::e2m1_rest(e));
          ++bad;
        }
        const unsigned words[4] = {got.x, got.y, got.z, got.w};
        for (int p = 0; p < 4; ++p) {  // word p: values p and p + 4, the low nibbles of bytes p / 2 and p / 2 + 2
          const unsigned nib_lo = (codes >> (4 * p)) & 0xfu, nib_hi = (codes >> (4 * p + 16)) & 0xfu;
          const unsigned want = kgen::detail::e2m1x2_bf16(nib_lo | (nib_hi << 4), scale_of(e));
          checked += 2;
          if (!same(words[p], want) || !same(words[p] >> 16, want >> 16)) {
            if (bad < 5) std::printf("e %u codes %08x word %d: got %08x want %08x\n", e, codes, p, words[p], want);
            ++bad;
          }
        }
      }
    }
  }
  std::printf("%lld mismatches in %lld values\n", bad, checked);
  return bad ? 1 : 0;
}
