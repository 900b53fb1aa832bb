// CPU runner: ./run in_dir  (reads the raw inputs written by the test, writes cache.out)
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>
#include KGEN_KERNEL_CU

using Cfg = kgen_cfg::KGEN_URI;
using In = Cfg::In;
static std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
int main(int argc, char** argv) {
  const std::string d = argv[1];
  const int blocks = std::stoi(argv[2]);
  const int threads = std::stoi(argv[3]);
  const int n = std::stoi(argv[4]);
  const long num_slots = std::stol(argv[5]);
  auto x = slurp(d + "/x"), w = slurp(d + "/weight"), b = slurp(d + "/bias"), f = slurp(d + "/freqs"),
       pos = slurp(d + "/positions"), loc = slurp(d + "/out_loc"), cache = slurp(d + "/cache");
  auto ptr = [](std::vector<char>& v) { return v.empty() ? nullptr : v.data(); };
  for (int blk = 0; blk < blocks; ++blk) {
    for (int wp = 0; wp < threads / 32; ++wp) {
      kgen_cpu::Warp warp;
      std::vector<std::thread> ts;
      for (int lane = 0; lane < 32; ++lane) {
        ts.emplace_back([&, lane] {
          kgen_cpu::tl_block.x = blk;
          kgen_cpu::tl_thread.x = wp * 32 + lane;
          kgen_cpu::tl_warp = &warp;
          kgen::norm_rope_store<Cfg>(reinterpret_cast<const In*>(ptr(x)), reinterpret_cast<const In*>(ptr(w)),
                                     reinterpret_cast<const In*>(ptr(b)), reinterpret_cast<const float*>(ptr(f)),
                                     reinterpret_cast<const long*>(ptr(pos)), reinterpret_cast<const long*>(ptr(loc)),
                                     reinterpret_cast<unsigned char*>(cache.data()), n, num_slots);
        });
      }
      for (auto& t : ts) t.join();
    }
  }
  std::ofstream(d + "/cache.out", std::ios::binary).write(cache.data(), cache.size());
  return 0;
}
