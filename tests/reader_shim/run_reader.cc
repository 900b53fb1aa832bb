// The CPU emulation of one indexer_logits launch: ./run_reader dir gx gy gz threads smem_bytes
// dir/params.bin + dir/pointers.txt as kgen/abi.py's cpu_launch_files writes them, read and written back
// by tests/cpu_shim/launch_files.h. CTAs run one after another; the threads of a CTA run at once.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "launch_files.h"
#include KGEN_KERNEL_CU

using Params = decltype(kgen_cpu::params_of(&KGEN_KERNEL));

int main(int argc, char** argv) {
  if (argc != 7) return 2;
  const std::string d = argv[1];
  const unsigned gx = std::stoul(argv[2]), gy = std::stoul(argv[3]), gz = std::stoul(argv[4]);
  const int threads = std::stoi(argv[5]);
  const size_t smem_bytes = std::stoul(argv[6]);
  Params p;
  std::vector<kgen_cpu::Buf> bufs;
  if (const int bad = kgen_cpu::load(d, p, bufs)) return bad;
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        kgen_cpu::Cta cta(threads);
        std::vector<unsigned char> smem(smem_bytes + 16);
        cta.smem = smem.data();
        cta.smem_bytes = smem_bytes;
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
  kgen_cpu::store(d, bufs);
  return 0;
}
