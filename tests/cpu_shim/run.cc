// The CPU emulation of one kernel launch:
//   ./run dir blocks threads_per_block
// The kernel (-DKGEN_KERNEL=<its name expression>, from -DKGEN_KERNEL_CU=<its instantiation .cu>)
// takes one Params struct, as on the GPU; launch_files.h reads dir (the packed struct and its buffers)
// and writes back what the kernel wrote (dir/<name>.out). This runner runs every thread of the grid
// (every block, every warp of the partial last block) on it.
#include <string>
#include <thread>
#include <vector>

#include "launch_files.h"
#include KGEN_KERNEL_CU

using Params = decltype(kgen_cpu::params_of(&KGEN_KERNEL));

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const std::string d = argv[1];
  const int blocks = std::stoi(argv[2]);
  const int threads = std::stoi(argv[3]);
  if (threads % 32 != 0) return 3;
  Params p;
  std::vector<kgen_cpu::Buf> bufs;
  if (const int bad = kgen_cpu::load(d, p, bufs)) return bad;
  for (int blk = 0; blk < blocks; ++blk) {
    for (int wp = 0; wp < threads / 32; ++wp) {
      kgen_cpu::Warp warp;
      std::vector<std::thread> ts;
      for (int lane = 0; lane < 32; ++lane) {
        ts.emplace_back([&, lane] {
          kgen_cpu::tl_block.x = blk;
          kgen_cpu::tl_thread.x = wp * 32 + lane;
          kgen_cpu::tl_warp = &warp;
          KGEN_KERNEL(p);
        });
      }
      for (auto& t : ts) t.join();
    }
  }
  kgen_cpu::store(d, bufs);
  return 0;
}
