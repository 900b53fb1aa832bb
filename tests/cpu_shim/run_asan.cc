// CPU runner for the AddressSanitizer test (tests/test_kernel_asan.py):
//   ./run_asan in_dir blocks threads num_tokens num_slots
// Every buffer is its own heap allocation of exactly the file's size (16-B aligned, as the kernel
// ABI promises; an empty file is nullptr, as the op passes an absent tensor), so ASan reports any
// byte the kernel touches outside x, weight, bias, freqs, positions, out_loc or cache. The grid is
// launched whole, as kgen.layout.launch_shape gives it: every block and every warp of the partial
// last block, including warps whose tokens are all >= num_tokens.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>
#include KGEN_KERNEL_CU

using Cfg = kgen_cfg::KGEN_URI;
using In = Cfg::In;

struct Buf {
  void* p = nullptr;
  size_t n = 0;
};
static Buf load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> v((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Buf b;
  b.n = v.size();
  if (b.n == 0) return b;
  if (posix_memalign(&b.p, 16, b.n) != 0) std::abort();
  std::memcpy(b.p, v.data(), b.n);
  return b;
}
int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const std::string d = argv[1];
  const int blocks = std::stoi(argv[2]);
  const int threads = std::stoi(argv[3]);
  const int n = std::stoi(argv[4]);
  const long long num_slots = std::stoll(argv[5]);
  Buf x = load(d + "/x"), w = load(d + "/weight"), b = load(d + "/bias"), f = load(d + "/freqs"),
      pos = load(d + "/positions"), loc = load(d + "/out_loc"), cache = load(d + "/cache");
  if (threads % 32 != 0) return 3;
  for (int blk = 0; blk < blocks; ++blk) {
    for (int wp = 0; wp < threads / 32; ++wp) {
      kgen_cpu::Warp warp;
      std::vector<std::thread> ts;
      for (int lane = 0; lane < 32; ++lane) {
        ts.emplace_back([&, lane] {
          kgen_cpu::tl_block.x = blk;
          kgen_cpu::tl_thread.x = wp * 32 + lane;
          kgen_cpu::tl_warp = &warp;
          kgen::norm_rope_store<Cfg>(static_cast<const In*>(x.p), static_cast<const In*>(w.p),
                                     static_cast<const In*>(b.p), static_cast<const float*>(f.p),
                                     static_cast<const int64_t*>(pos.p), static_cast<const int64_t*>(loc.p),
                                     static_cast<uint8_t*>(cache.p), n, num_slots);
        });
      }
      for (auto& t : ts) t.join();
    }
  }
  std::ofstream(d + "/cache.out", std::ios::binary).write(static_cast<const char*>(cache.p), cache.n);
  for (Buf* p : {&x, &w, &b, &f, &pos, &loc, &cache}) std::free(p->p);
  return 0;
}
