#include "engine/runtime/llvm_jit.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <sstream>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/SubtargetFeature.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "engine/dtype/dtype.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/device.h"
#include "engine/runtime/disk_cache.h"

namespace tiny {
namespace {

// Optimizes a module for the host and emits an object file, or reads the
// object a previous process wrote for the same IR. Modules compile on several
// threads at once (a schedule's new kernels), each with its own TargetMachine:
// a TargetMachine is not safe to share.
class CachingCompiler : public llvm::orc::IRCompileLayer::IRCompiler {
 public:
  CachingCompiler(llvm::orc::JITTargetMachineBuilder builder, const llvm::TargetOptions& options, std::string dir)
      : IRCompiler(llvm::orc::irManglingOptionsFromTargetOptions(options)),
        builder_(std::move(builder)),
        dir_(std::move(dir)) {}

  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module& m) override {
    std::string path = dir_.empty() ? "" : dir_ + "/" + m.getModuleIdentifier() + ".o";
    if (!path.empty()) {
      auto buf = llvm::MemoryBuffer::getFile(path);
      if (buf) {
        counters().disk_cache_hits++;
        return std::move(*buf);
      }
    }
    auto tm = builder_.createTargetMachine();
    if (!tm) return tm.takeError();
    optimize(m, **tm);
    if (debug_level() >= 5) m.print(llvm::errs(), nullptr);  // the optimized IR
    counters().compiles++;
    llvm::orc::SimpleCompiler compile(**tm);
    auto obj = compile(m);
    if (obj && !path.empty()) {
      write_file_atomic(path, std::string((*obj)->getBufferStart(), (*obj)->getBufferSize()));
    }
    return obj;
  }

 private:
  static void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    // No unroller: shapes are constants, so it fully unrolled vectorized reduce loops into
    // 10k-instruction blocks that instruction selection took seconds over (a batch norm's
    // statistics: 1.6 s of resnet18's 5.8 s first step). The vectorizer's interleaving and the
    // generator's unrolled tiles keep the loops' speed: bench_cpu rows unchanged without it.
    pto.LoopUnrolling = false;
    llvm::PassBuilder pb(&tm, pto);
    // Vectorized libm (glibc's libmvec) so exp/log/sin loops vectorize.
    llvm::TargetLibraryInfoImpl tlii(llvm::Triple(m.getTargetTriple()));
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86);
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(m, mam);
  }

  llvm::orc::JITTargetMachineBuilder builder_;
  std::string dir_;
};

// The features a named CPU (TINY_CPU_TARGET, e.g. x86-64-v3) has, among those the host reports
// (LLVM 14 cannot list a CPU's features; it can check one): kernels are generated for it
// instead of the host, so an AVX2 machine's code can be tested on an AVX-512 one. Refused when
// the host lacks one of them (its kernels would not run here).
llvm::SubtargetFeatures target_cpu_features(const std::string& triple, const std::string& cpu,
                                            const llvm::StringMap<bool>& host) {
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) throw std::runtime_error("tiny LLVM JIT: " + err);
  std::unique_ptr<llvm::MCSubtargetInfo> info(target->createMCSubtargetInfo(triple, cpu, ""));
  if (!info || !info->isCPUStringValid(cpu))
    throw std::runtime_error("tiny LLVM JIT: TINY_CPU_TARGET=" + cpu + " is not a CPU LLVM knows");
  llvm::SubtargetFeatures features;
  std::string missing;
  for (const auto& h : host) {  // every feature the host reports, present or not
    const std::string name = h.first().str();
    const bool has = info->checkFeatures("+" + name);
    features.AddFeature(name, has);
    if (has && !h.second) missing += std::string(missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty())
    throw std::runtime_error("tiny LLVM JIT: TINY_CPU_TARGET=" + cpu + " needs " + missing + ", which this CPU lacks");
  return features;
}

}  // namespace

struct LLVMJit::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;  // ORC's session is thread-safe: modules are added and looked up concurrently
  std::string triple, layout, cpu, features;
  VectorUnit vector_unit;
};

LLVMJit& LLVMJit::get() {
  static LLVMJit* j = new LLVMJit();
  return *j;
}

LLVMJit::LLVMJit() : impl_(new Impl) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // libmvec provides the vector math functions the vectorizer calls.
  dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL);
  auto jtmb = llvm::cantFail(llvm::orc::JITTargetMachineBuilder::detectHost());
  impl_->cpu = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> host_features;
  llvm::sys::getHostCPUFeatures(host_features);
  llvm::SubtargetFeatures features;
  if (const char* target = std::getenv("TINY_CPU_TARGET"); target && *target) {
    impl_->cpu = target;
    features = target_cpu_features(jtmb.getTargetTriple().str(), impl_->cpu, host_features);
  } else {
    for (auto& f : host_features) features.AddFeature(f.first(), f.second);
  }
  impl_->features = features.getString();
  auto has = [&](const std::string& f) {
    auto all = features.getFeatures();
    return std::find(all.begin(), all.end(), "+" + f) != all.end();
  };
  if (has("avx512f")) impl_->vector_unit = {16, 32};
  else if (has("avx")) impl_->vector_unit = {8, 16};
  impl_->vector_unit.fma = has("fma");
  jtmb.setCPU(impl_->cpu);
  jtmb.addFeatures(features.getFeatures());
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  impl_->triple = jtmb.getTargetTriple().str();
  auto dl = llvm::cantFail(jtmb.getDefaultDataLayoutForTarget());
  impl_->layout = dl.getStringRepresentation();
  // the pipeline's revision (CachingCompiler::optimize) is part of the directory: objects an
  // older pipeline built are not reused
  std::string dir = disk_cache_dir("llvm" TINY_LLVM_VERSION "-" + impl_->cpu + "-pipeline2");
  auto builder = llvm::orc::LLJITBuilder();
  builder.setJITTargetMachineBuilder(jtmb);
  builder.setCompileFunctionCreator(
      [dir](llvm::orc::JITTargetMachineBuilder b) -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
        auto tm = b.createTargetMachine();
        if (!tm) return tm.takeError();
        return std::make_unique<CachingCompiler>(std::move(b), (*tm)->Options, dir);
      });
  impl_->jit = llvm::cantFail(builder.create());
  // TINY_PERF_JIT=1: kernels named in perf's profiles (jitdump files for `perf inject --jit`;
  // see docs/architecture.md). LLJIT links ELF objects with RuntimeDyld on x86-64.
  if (const char* p = std::getenv("TINY_PERF_JIT"); p && *p == '1')
    if (auto* rtdyld = llvm::dyn_cast<llvm::orc::RTDyldObjectLinkingLayer>(&impl_->jit->getObjLinkingLayer()))
      if (llvm::JITEventListener* perf = llvm::JITEventListener::createPerfJITEventListener())
        rtdyld->registerJITEventListener(*perf);
  impl_->jit->getMainJITDylib().addGenerator(llvm::cantFail(
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(dl.getGlobalPrefix())));
  // Without F16C (TINY_CPU_TARGET=x86-64) LLVM converts half precision through
  // compiler-rt's helpers, which this process lacks: they are the engine's. So are the kernels'
  // scratch buffers.
  llvm::orc::SymbolMap half_helpers;
  auto helper = [&](const char* name, auto* fn) {
    half_helpers[impl_->jit->mangleAndIntern(name)] =
        llvm::JITEvaluatedSymbol(llvm::pointerToJITTargetAddress(fn), llvm::JITSymbolFlags::Exported);
  };
  helper("__gnu_f2h_ieee", &float_to_half_bits);
  helper("__gnu_h2f_ieee", &half_bits_to_float);
  helper("tiny_scratch_alloc", &kernel_scratch_alloc);
  helper("tiny_scratch_free", &kernel_scratch_free);
  llvm::cantFail(impl_->jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(half_helpers))));
}

void LLVMJit::configure(llvm::Module& m) const {
  m.setTargetTriple(impl_->triple);
  m.setDataLayout(impl_->layout);
}

const std::string& LLVMJit::cpu_name() const { return impl_->cpu; }
const std::string& LLVMJit::cpu_features() const { return impl_->features; }
const VectorUnit& LLVMJit::vector_unit() const { return impl_->vector_unit; }

std::vector<void*> LLVMJit::compile(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx,
                                    const std::vector<std::string>& fns) {
  // Name the module by its content so the disk cache can find it again.
  std::string ir;
  llvm::raw_string_ostream os(ir);
  m->print(os, nullptr);
  os.flush();
  std::ostringstream id;
  id << std::hex << std::hash<std::string>()(ir + impl_->features) << "_" << fns[0];
  m->setModuleIdentifier(id.str());
  auto& jd = impl_->jit->getMainJITDylib();
  if (auto err = impl_->jit->addIRModule(jd, llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx)))) {
    std::string msg;
    llvm::raw_string_ostream es(msg);
    es << err;
    throw std::runtime_error("tiny LLVM JIT: " + es.str());
  }
  std::vector<void*> out;
  for (auto& fn : fns) {
    auto sym = impl_->jit->lookup(fn);
    if (!sym) {
      std::string msg;
      llvm::raw_string_ostream es(msg);
      es << sym.takeError();
      throw std::runtime_error("tiny LLVM JIT: " + es.str());
    }
    out.push_back(reinterpret_cast<void*>(sym->getAddress()));
  }
  return out;
}

}  // namespace tiny
