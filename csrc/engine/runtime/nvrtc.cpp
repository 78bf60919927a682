#include "engine/runtime/nvrtc.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace tiny {
namespace {

// The subset of nvrtc.h we call; the ABI has been stable since CUDA 7.
using nvrtcProgram = void*;
using nvrtcResult = int;
constexpr nvrtcResult NVRTC_SUCCESS = 0;

struct Api {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetPTX)(nvrtcProgram, char*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);  // may be missing (CUDA < 11.1)
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
};

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// Paths matching a glob pattern, newest version first.
std::vector<std::string> glob_sorted(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g;
  if (glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return strverscmp(a.c_str(), b.c_str()) > 0;
  });
  return out;
}

const char* const kNames[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// Directories that may hold pip's nvidia wheels' libraries.
std::vector<std::string> site_package_lib_dirs() {
  std::vector<std::string> prefixes;
  auto add_prefix = [&](const std::string& p) {
    if (!p.empty()) prefixes.push_back(p);
  };
  add_prefix(env("VIRTUAL_ENV"));
  add_prefix(env("CONDA_PREFIX"));
  std::string home = env("HOME");
  if (!home.empty()) add_prefix(home + "/.local");
  std::string pyenv = env("PYENV_ROOT");
  if (pyenv.empty() && !home.empty()) pyenv = home + "/.pyenv";
  if (!pyenv.empty())
    for (auto& v : glob_sorted(pyenv + "/versions/*")) add_prefix(v);
  // The Python on PATH lives in <prefix>/bin.
  std::string path = env("PATH");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.size() > 4 && dir.compare(dir.size() - 4, 4, "/bin") == 0) add_prefix(dir.substr(0, dir.size() - 4));
    start = end + 1;
  }
  add_prefix("/usr/local");
  add_prefix("/usr");
  std::vector<std::string> dirs;
  for (auto& p : prefixes) {
    for (const char* sp : {"/lib/python3*/site-packages", "/lib/python3*/dist-packages", "/lib/python3/dist-packages"}) {
      for (auto& site : glob_sorted(p + sp)) {
        for (const char* sub : {"/nvidia/cu13/lib", "/nvidia/cuda_nvrtc/lib", "/nvidia/cu12/lib"}) {
          std::string d = site + sub;
          if (is_dir(d)) dirs.push_back(d);
        }
      }
    }
  }
  return dirs;
}

std::vector<std::string> candidate_list() {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& s) {
    if (!s.empty() && seen.insert(s).second) out.push_back(s);
  };
  auto add_dir = [&](const std::string& d) {
    if (d.empty()) return;
    for (const char* n : kNames) add(d + "/" + n);
  };
  std::string explicit_path = env("TINY_NVRTC");
  if (!explicit_path.empty()) {
    if (is_dir(explicit_path)) add_dir(explicit_path);
    else add(explicit_path);
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    std::string d = env(var);
    if (!d.empty()) {
      add_dir(d + "/lib64");
      add_dir(d + "/lib");
    }
  }
  for (const char* n : kNames) add(n);  // bare names: the loader's own search
  std::vector<std::string> dirs = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"};
  for (const char* pat : {"/usr/local/cuda-13*", "/usr/local/cuda-12*"})
    for (auto& d : glob_sorted(pat)) {
      dirs.push_back(d + "/lib64");
      dirs.push_back(d + "/lib");
    }
  for (auto& d : glob_sorted("/usr/local/cuda/targets/*/lib")) dirs.push_back(d);
  for (const char* d : {"/opt/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu"})
    dirs.push_back(d);
  for (auto& d : site_package_lib_dirs()) dirs.push_back(d);
  for (auto& d : dirs) add_dir(d);
  return out;
}

struct State {
  NvrtcInfo info;
  Api api{};
  void* handle = nullptr;
};

template <typename F>
bool sym(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}

State& state() {
  static State* s = [] {
    auto* st = new State();
    std::string tried;
    std::string explicit_path = env("TINY_NVRTC");
    if (!explicit_path.empty() && !exists(explicit_path)) tried += "\n  TINY_NVRTC=" + explicit_path + ": no such file";
    for (auto& c : candidate_list()) {
      // Full paths that do not exist are skipped quietly; bare names go to the loader.
      if (c.find('/') != std::string::npos && !exists(c)) continue;
      void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = dlerror();
        tried += "\n  " + c + ": " + (e ? e : "dlopen failed");
        continue;
      }
      Api a{};
      bool ok = sym(h, "nvrtcGetErrorString", a.GetErrorString) && sym(h, "nvrtcVersion", a.Version) &&
                sym(h, "nvrtcCreateProgram", a.CreateProgram) && sym(h, "nvrtcDestroyProgram", a.DestroyProgram) &&
                sym(h, "nvrtcCompileProgram", a.CompileProgram) && sym(h, "nvrtcGetPTXSize", a.GetPTXSize) &&
                sym(h, "nvrtcGetPTX", a.GetPTX) && sym(h, "nvrtcGetProgramLogSize", a.GetProgramLogSize) &&
                sym(h, "nvrtcGetProgramLog", a.GetProgramLog);
      if (!ok) {
        tried += "\n  " + c + ": missing NVRTC symbols";
        dlclose(h);
        continue;
      }
      sym(h, "nvrtcGetCUBINSize", a.GetCUBINSize);
      sym(h, "nvrtcGetCUBIN", a.GetCUBIN);
      int major = 0, minor = 0;
      if (a.Version(&major, &minor) != NVRTC_SUCCESS) {
        tried += "\n  " + c + ": nvrtcVersion failed";
        dlclose(h);
        continue;
      }
      char resolved[4096] = {0};
      if (dlinfo(h, RTLD_DI_ORIGIN, resolved) == 0) {
        std::string base = c.substr(c.find_last_of('/') + 1);
        st->info.path = std::string(resolved) + "/" + base;
      } else {
        st->info.path = c;
      }
      // NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by name; pip wheels
      // keep it beside libnvrtc, outside the loader's path, so load it first
      // from there (a library already loaded satisfies the later dlopen).
      size_t slash = st->info.path.find_last_of('/');
      if (slash != std::string::npos) {
        std::string builtins = st->info.path.substr(0, slash) + "/libnvrtc-builtins.so." + std::to_string(major) +
                               "." + std::to_string(minor);
        if (exists(builtins)) dlopen(builtins.c_str(), RTLD_NOW | RTLD_GLOBAL);
      }
      st->api = a;
      st->handle = h;
      st->info.available = true;
      st->info.major = major;
      st->info.minor = minor;
      return st;
    }
    st->info.reason = "libnvrtc not found (set TINY_NVRTC to the library or its directory)";
    if (!tried.empty()) st->info.reason += "; failed to load:" + tried;
    return st;
  }();
  return *s;
}

std::string check(const Api& a, nvrtcResult r, const char* what) {
  if (r == NVRTC_SUCCESS) return "";
  return std::string(what) + ": " + (a.GetErrorString ? a.GetErrorString(r) : "error " + std::to_string(r));
}

}  // namespace

const NvrtcInfo& nvrtc_info() { return state().info; }
bool nvrtc_available() { return nvrtc_info().available; }
std::vector<std::string> nvrtc_candidates() { return candidate_list(); }

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, int arch, bool cubin,
                          const std::vector<std::string>& extra_options) {
  NvrtcOutput out;
  State& s = state();
  if (!s.info.available) {
    out.log = s.info.reason;
    return out;
  }
  const Api& a = s.api;
  if (cubin && !(a.GetCUBIN && a.GetCUBINSize)) {
    out.log = "this NVRTC cannot produce CUBIN";
    return out;
  }
  nvrtcProgram prog = nullptr;
  std::string err = check(a, a.CreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr),
                          "nvrtcCreateProgram");
  if (!err.empty()) {
    out.log = err;
    return out;
  }
  std::vector<std::string> opts = {
      std::string("--gpu-architecture=") + (cubin ? "sm_" : "compute_") + std::to_string(arch),
      // No fused multiply-add: the CPU code rounds every multiply and add, and
      // so must we for bit-identical elementwise results.
      "--fmad=false",
      "--std=c++17",
  };
  for (auto& o : extra_options) opts.push_back(o);
  std::vector<const char*> copts;
  for (auto& o : opts) copts.push_back(o.c_str());
  nvrtcResult r = a.CompileProgram(prog, int(copts.size()), copts.data());
  size_t log_size = 0;
  if (a.GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    std::string log(log_size, '\0');
    if (a.GetProgramLog(prog, &log[0]) == NVRTC_SUCCESS) {
      log.resize(std::strlen(log.c_str()));
      out.log = log;
    }
  }
  if (r != NVRTC_SUCCESS) {
    out.log = check(a, r, "nvrtcCompileProgram") + "\n" + out.log;
    a.DestroyProgram(&prog);
    return out;
  }
  size_t size = 0;
  err = cubin ? check(a, a.GetCUBINSize(prog, &size), "nvrtcGetCUBINSize")
              : check(a, a.GetPTXSize(prog, &size), "nvrtcGetPTXSize");
  if (err.empty()) {
    out.code.assign(size, '\0');
    err = cubin ? check(a, a.GetCUBIN(prog, &out.code[0]), "nvrtcGetCUBIN")
                : check(a, a.GetPTX(prog, &out.code[0]), "nvrtcGetPTX");
  }
  a.DestroyProgram(&prog);
  if (!err.empty()) {
    out.code.clear();
    out.log = err + "\n" + out.log;
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace tiny
