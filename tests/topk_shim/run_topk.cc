// The CPU emulation of one indexer_topk launch: ./run_topk dir gx gy gz threads smem_bytes
// dir/params.bin + dir/pointers.txt as kgen/abi.py's cpu_launch_files writes them (tests/cpu_shim/launch_files.h).
// The launch's cluster is (gx, 1, 1), as kgen.topk_plan's grid says: the gx CTAs of one (y, z) run at once
// (every thread of each a std::thread), clusters one after another.
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
    for (unsigned y = 0; y < gy; ++y) {
      kgen_cpu::Cluster cluster(static_cast<int>(gx) * threads);
      std::vector<std::unique_ptr<kgen_cpu::Cta>> ctas;
      std::vector<std::vector<unsigned char>> smem(gx);
      std::vector<std::unique_ptr<kgen_cpu::Warp>> warps;
      for (unsigned x = 0; x < gx; ++x) {
        ctas.push_back(std::make_unique<kgen_cpu::Cta>(threads));
        smem[x].assign(smem_bytes + 16, 0xa5);  // not zero: the kernel initialises what it reads
        ctas[x]->smem = smem[x].data();
        ctas[x]->smem_bytes = smem_bytes;
        cluster.ctas.push_back(ctas[x].get());
        for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<kgen_cpu::Warp>());
      }
      std::vector<std::thread> ts;
      for (unsigned x = 0; x < gx; ++x)
        for (int t = 0; t < threads; ++t) {
          ts.emplace_back([&, x, t] {
            kgen_cpu::tl_block = {x, y, z};
            kgen_cpu::tl_grid = {gx, gy, gz};
            kgen_cpu::tl_block_dim = {static_cast<unsigned>(threads), 1, 1};
            kgen_cpu::tl_thread.x = t;
            kgen_cpu::tl_warp = warps[x * (threads / 32) + t / 32].get();
            kgen_cpu::tl_cta = ctas[x].get();
            kgen_cpu::tl_cluster = &cluster;
            KGEN_KERNEL(p);
            // a CTA that returns early leaves the cluster barrier (as on the GPU, where its CTA exits)
          });
        }
      for (auto& t : ts) t.join();
    }
  kgen_cpu::store(d, bufs);
  return 0;
}
