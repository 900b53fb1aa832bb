// The CPU emulation of one kernel launch:
//   ./run dir blocks threads_per_block
// The kernel (-DKGEN_KERNEL=<its name expression>, from -DKGEN_KERNEL_CU=<its instantiation .cu>)
// takes one Params struct, as on the GPU. kgen/abi.py (cpu_launch_files) wrote what a launch hands
// the driver: dir/params.bin, the packed struct with null pointers, and dir/pointers.txt, one line
// `offset name written` per pointer field. This runner knows no field: it copies each dir/<name>
// into its own heap allocation of exactly the file's size (16-B aligned, as the ABI promises; an
// empty file stays nullptr), patches that address in at `offset`, copies the bytes into a Params
// and runs every thread of the grid (every block, every warp of the partial last block) on it.
// Under AddressSanitizer any byte the kernel touches outside its buffers is reported. Buffers the
// kernel writes come back as dir/<name>.out.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include KGEN_KERNEL_CU

template <class P>
P params_of(void (*)(P));
using Params = decltype(params_of(&KGEN_KERNEL));

struct Buf {
  std::string name;
  void* p = nullptr;
  size_t n = 0;
  bool written = false;
};

static std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const std::string d = argv[1];
  const int blocks = std::stoi(argv[2]);
  const int threads = std::stoi(argv[3]);
  if (threads % 32 != 0) return 3;
  std::vector<char> packed = slurp(d + "/params.bin");
  if (packed.size() != sizeof(Params)) {
    std::fprintf(stderr, "params.bin has %zu bytes, sizeof(Params) is %zu\n", packed.size(), sizeof(Params));
    return 4;
  }
  std::vector<Buf> bufs;
  const std::vector<char> map = slurp(d + "/pointers.txt");
  std::istringstream lines(std::string(map.begin(), map.end()));
  size_t offset = 0;
  int written = 0;
  Buf b;
  while (lines >> offset >> b.name >> written) {
    std::vector<char> v = slurp(d + "/" + b.name);
    b.n = v.size();
    b.written = written != 0;
    b.p = nullptr;
    if (b.n != 0) {
      if (posix_memalign(&b.p, 16, b.n) != 0) std::abort();
      std::memcpy(b.p, v.data(), b.n);
    }
    if (offset + sizeof(void*) > packed.size()) return 5;
    std::memcpy(packed.data() + offset, &b.p, sizeof(void*));
    bufs.push_back(b);
  }
  Params p;
  std::memcpy(static_cast<void*>(&p), packed.data(), sizeof(Params));
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
  for (Buf& x : bufs) {
    if (x.written) std::ofstream(d + "/" + x.name + ".out", std::ios::binary).write(static_cast<const char*>(x.p), x.n);
    std::free(x.p);
  }
  return 0;
}
