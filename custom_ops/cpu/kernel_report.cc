#include "cpu/kernel_report.h"

#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "cpu_kernel_names.h"

namespace lstm_ort {
namespace {

struct Registered {
  std::string node;
  const KernelTuner* tuner;
  std::function<std::string()> held;
};

std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
std::map<const void*, Registered>& Registry() {
  static auto* r = new std::map<const void*, Registered>;  // never destroyed: kernels may outlive statics at exit
  return *r;
}

}  // namespace

void RegisterKernel(const void* kernel, const std::string& node_name, const KernelTuner* tuner,
                    std::function<std::string()> held) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[kernel] = {node_name, tuner, std::move(held)};
}

void UnregisterKernel(const void* kernel) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().erase(kernel);
}

std::string KernelReport() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::string out;
  for (const auto& [kernel, r] : Registry()) {
    std::vector<ClassReport> classes = r.tuner->Report();
    if (classes.empty()) classes.push_back({});
    const std::string held = r.held();
    for (const ClassReport& c : classes) {
      out += r.node + '\t' + std::to_string(c.shape.T) + '\t' + std::to_string(c.shape.B) + '\t' +
             CpuKernelName(c.chosen) + '\t' + (c.preset ? "1" : "0");
      for (CpuKernel k : {CpuKernel::kFused, CpuKernel::kStock, CpuKernel::kStockSplit, CpuKernel::kStockThreads}) {
        auto m = c.median_ms.find(k);
        out += '\t' + (m == c.median_ms.end() ? std::string() : std::to_string(m->second));
      }
      out += '\t' + held + '\n';
    }
  }
  return out;
}

std::string NodeName(const OrtKernelInfo* info) {
  size_t size = 0;
  if (OrtStatus* st = Ort::GetApi().KernelInfo_GetNodeName(info, nullptr, &size)) {
    Ort::GetApi().ReleaseStatus(st);
    return {};
  }
  std::string name(size, '\0');
  if (OrtStatus* st = Ort::GetApi().KernelInfo_GetNodeName(info, name.data(), &size)) {
    Ort::GetApi().ReleaseStatus(st);
    return {};
  }
  if (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

const std::string& CpuName() {
  static const std::string name = [] {
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      size_t start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? std::string("unknown") : line.substr(start);
    }
    return std::string("unknown");
  }();
  return name;
}

}  // namespace lstm_ort
