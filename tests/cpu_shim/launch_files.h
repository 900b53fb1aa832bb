// What a CPU runner (tests/cpu_shim/run.cc, tests/reader_shim/run_reader.cc) does around a kernel:
// read the launch kgen/abi.py (cpu_launch_files) wrote into a directory, and write back what the
// kernel wrote. dir/params.bin is the packed Params struct with null pointers; dir/pointers.txt has
// one line `offset name written` per pointer field. `load` copies each dir/<name> into its own heap
// allocation of exactly the file's size (16-B aligned, as the ABI promises; an empty file stays
// nullptr) and patches that address in at `offset` (a name listed again: the same address, as a tensor
// map's base); the runner knows no field. Under AddressSanitizer
// any byte the kernel touches outside its buffers is reported. `store` writes every buffer the kernel
// writes back as dir/<name>.out and frees them all.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace kgen_cpu {

// The Params struct a kernel takes: decltype(params_of(&KGEN_KERNEL)).
template <class P>
P params_of(void (*)(P));

inline std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct Buf {
  std::string name;
  void* p = nullptr;
  size_t n = 0;
  bool written = false;
};

// The kernel's Params with every pointer patched in; 0 on success, else the runner's exit code
// (4: params.bin is not sizeof(Params) bytes, 5: a pointer offset lies outside it).
template <class Params>
int load(const std::string& d, Params& p, std::vector<Buf>& bufs) {
  std::vector<char> packed = slurp(d + "/params.bin");
  if (packed.size() != sizeof(Params)) {
    std::fprintf(stderr, "params.bin has %zu bytes, sizeof(Params) is %zu\n", packed.size(), sizeof(Params));
    return 4;
  }
  const std::vector<char> map = slurp(d + "/pointers.txt");
  std::istringstream lines(std::string(map.begin(), map.end()));
  size_t offset = 0;
  int written = 0;
  Buf b;
  while (lines >> offset >> b.name >> written) {
    if (offset + sizeof(void*) > packed.size()) return 5;
    const Buf* seen = nullptr;  // a buffer named twice (a tensor and a map of it) is loaded once
    for (const Buf& o : bufs) seen = o.name == b.name ? &o : seen;
    if (seen != nullptr) {
      std::memcpy(packed.data() + offset, &seen->p, sizeof(void*));
      continue;
    }
    std::vector<char> v = slurp(d + "/" + b.name);
    b.n = v.size();
    b.written = written != 0;
    b.p = nullptr;
    if (b.n != 0) {
      if (posix_memalign(&b.p, 16, b.n) != 0) std::abort();
      std::memcpy(b.p, v.data(), b.n);
    }
    bufs.push_back(b);
    std::memcpy(packed.data() + offset, &b.p, sizeof(void*));
  }
  std::memcpy(static_cast<void*>(&p), packed.data(), sizeof(Params));
  return 0;
}

inline void store(const std::string& d, std::vector<Buf>& bufs) {
  for (Buf& b : bufs) {
    if (b.written) std::ofstream(d + "/" + b.name + ".out", std::ios::binary).write(static_cast<const char*>(b.p), b.n);
    std::free(b.p);
  }
}

}  // namespace kgen_cpu
