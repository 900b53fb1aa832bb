// The CPU emulation of one indexer_logits launch: ./run_reader dir gx gy gz threads smem_bytes
// dir/params.bin + dir/pointers.txt as kgen/abi.py's cpu_launch_files writes them (tests/cpu_shim/run.cc
// explains the format). CTAs run one after another; the threads of a CTA run at once.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include KGEN_KERNEL_CU

template <class P>
P params_of(void (*)(P));
using Params = decltype(params_of(&KGEN_KERNEL));

static std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int main(int argc, char** argv) {
  if (argc != 7) return 2;
  const std::string d = argv[1];
  const unsigned gx = std::stoul(argv[2]), gy = std::stoul(argv[3]), gz = std::stoul(argv[4]);
  const int threads = std::stoi(argv[5]);
  const size_t smem_bytes = std::stoul(argv[6]);
  std::vector<char> packed = slurp(d + "/params.bin");
  if (packed.size() != sizeof(Params)) return 4;
  struct Buf { std::string name; void* p; size_t n; bool written; };
  std::vector<Buf> bufs;
  const std::vector<char> map = slurp(d + "/pointers.txt");
  std::istringstream lines(std::string(map.begin(), map.end()));
  size_t offset = 0;
  int written = 0;
  std::string name;
  while (lines >> offset >> name >> written) {
    std::vector<char> v = slurp(d + "/" + name);
    Buf b{name, nullptr, v.size(), written != 0};
    if (b.n) {
      if (posix_memalign(&b.p, 16, b.n) != 0) std::abort();
      std::memcpy(b.p, v.data(), b.n);
    }
    std::memcpy(packed.data() + offset, &b.p, sizeof(void*));
    bufs.push_back(b);
  }
  Params p;
  std::memcpy(static_cast<void*>(&p), packed.data(), sizeof(Params));
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        kgen_cpu::Cta cta(threads);
        std::vector<unsigned char> smem(smem_bytes + 16);
        cta.smem = smem.data();
        std::vector<std::unique_ptr<kgen_cpu::Warp>> warps;
        std::vector<std::unique_ptr<kgen_cpu::MmaTable>> tables;
        for (int w = 0; w < threads / 32; ++w) {
          warps.push_back(std::make_unique<kgen_cpu::Warp>());
          tables.push_back(std::make_unique<kgen_cpu::MmaTable>());
        }
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t) {
          ts.emplace_back([&, t] {
            kgen_cpu::tl_block = {x, y, z};
            kgen_cpu::tl_grid = {gx, gy, gz};
            kgen_cpu::tl_block_dim = {static_cast<unsigned>(threads), 1, 1};
            kgen_cpu::tl_thread.x = t;
            kgen_cpu::tl_warp = warps[t / 32].get();
            kgen_cpu::tl_mma = tables[t / 32].get();
            kgen_cpu::tl_cta = &cta;
            KGEN_KERNEL(p);
          });
        }
        for (auto& t : ts) t.join();
      }
  for (Buf& b : bufs) {
    if (b.written) std::ofstream(d + "/" + b.name + ".out", std::ios::binary).write(static_cast<const char*>(b.p), b.n);
    std::free(b.p);
  }
  return 0;
}
