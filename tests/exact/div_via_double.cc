// Exhaustive check of num::div_via_double (templates/include/kgen/numerics.cuh): for every fp32 a
// whose exact quotient a/q is >= 2^-125 (the kernel's compile-time condition kDivViaDouble), and +inf,
// fp32(double(a) * (1.0 / q)) must be the correctly rounded a / q (IEEE fp32 division).
// usage: div_via_double Q STEP  -> checks bit patterns from the first qualifying one, every STEP-th.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static float f_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

int main(int argc, char** argv) {
  const float q = std::strtof(argv[1], nullptr);
  const uint32_t step = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
  const double inv = 1.0 / static_cast<double>(q);
  // first a with a / q >= 2^-125 (a * 2^125 >= q, exact in double)
  uint32_t lo = 1;
  while (static_cast<double>(f_of(lo)) < static_cast<double>(q) * std::ldexp(1.0, -125)) lo = lo < 0x800000u ? lo + 1 : lo + (1u << 16);
  while (lo > 1 && static_cast<double>(f_of(lo - 1)) >= static_cast<double>(q) * std::ldexp(1.0, -125)) --lo;
  const uint32_t hi = 0x7f800000u;  // +inf included
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<unsigned long long> bad(nt), checked(nt);
  std::vector<std::thread> th;
  for (unsigned k = 0; k < nt; ++k) {
    th.emplace_back([&, k] {
      for (uint64_t u = lo + static_cast<uint64_t>(k) * step; u <= hi; u += static_cast<uint64_t>(nt) * step) {
        const float a = f_of(static_cast<uint32_t>(u));
        const volatile float want = a / q;
        const float got = static_cast<float>(static_cast<double>(a) * inv);
        if (u_of(got) != u_of(want)) {
          if (bad[k]++ < 4) std::printf("MISMATCH a=%a q=%g got=%a want=%a\n", a, q, got, (float)want);
        }
        ++checked[k];
      }
    });
  }
  for (auto& t : th) t.join();
  unsigned long long b = 0, c = 0;
  for (unsigned k = 0; k < nt; ++k) { b += bad[k]; c += checked[k]; }
  std::printf("q=%g from a=%a: %llu checked, %llu mismatches\n", q, f_of(lo), c, b);
  return b == 0 && c > 0 ? 0 : 1;
}
