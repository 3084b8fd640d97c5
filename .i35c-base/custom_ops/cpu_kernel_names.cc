#include "cpu_kernel_names.h"

#include "name_table.h"

namespace lstm_ort {
namespace {

// In enum order.
constexpr NamedValue<CpuKernel> kCpuKernels[] = {
    {"auto", CpuKernel::kAuto},
    {"fused", CpuKernel::kFused},
    {"stock", CpuKernel::kStock},
    {"stock_split", CpuKernel::kStockSplit},
};

}  // namespace

bool ParseCpuKernel(const char* name, CpuKernel* out) { return LookUpName(kCpuKernels, name, out); }

const char* CpuKernelName(CpuKernel kernel) { return NameOf(kCpuKernels, kernel); }

std::string CpuKernelNames(const char* separator) { return JoinNames(kCpuKernels, separator); }

std::string CpuKernelChoices() { return ChoicesOf(kCpuKernels); }

}  // namespace lstm_ort
