// NVRTC (CUDA's run-time C++ compiler), loaded with dlopen so the engine builds
// and runs without any CUDA toolkit. Absence is a status, never a crash.
//
// Where libnvrtc is looked for, first hit wins:
//   1. $TINY_NVRTC: a library file, or a directory holding libnvrtc.so*
//   2. $CUDA_HOME, $CUDA_PATH: <dir>/lib64 and <dir>/lib
//   3. the dynamic loader's own search (LD_LIBRARY_PATH, rpath, ldconfig) for
//      libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12
//   4. /usr/local/cuda{,-13*,-12*}/lib64 (and lib, targets/*/lib), /opt/cuda/lib64,
//      /usr/lib/x86_64-linux-gnu, /usr/lib64
//   5. pip wheels (nvidia-cuda-nvrtc) found without running Python:
//      <site-packages>/nvidia/cu13/lib and <site-packages>/nvidia/cuda_nvrtc/lib for
//      the site-packages of $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local/lib,
//      /usr/lib, every pyenv version (~/.pyenv, $PYENV_ROOT) and every PATH entry's
//      ../lib; versions sorted newest first so the choice is deterministic.
// In each directory the names libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12 are tried.
#pragma once
#include <string>
#include <vector>

namespace tiny {

struct NvrtcInfo {
  bool available = false;
  std::string path;    // the library that was loaded
  std::string reason;  // why it is not available (every place tried)
  int major = 0, minor = 0;
};

// Loads libnvrtc once (thread-safe) and reports what happened.
const NvrtcInfo& nvrtc_info();
bool nvrtc_available();
// Every file the search would try, in order (for diagnostics and tests).
std::vector<std::string> nvrtc_candidates();

struct NvrtcOutput {
  bool ok = false;
  std::string code;  // PTX text, or a CUBIN image when asked for one
  std::string log;   // compiler log (errors and warnings), or why it did not run
};

// Compiles CUDA C++ `source` for `arch` (a number like 80 for sm_80). With
// `cubin` the result is a device binary for exactly that arch (NVRTC runs its
// own assembler, which also checks the PTX); otherwise PTX for compute_<arch>.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, int arch = 80, bool cubin = false,
                          const std::vector<std::string>& extra_options = {});

}  // namespace tiny
