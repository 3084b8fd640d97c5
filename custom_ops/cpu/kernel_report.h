// What the CPU kernels of this process chose: every live kernel (node of a session) with its
// tuner's classes, for `lstm_ort.InferenceSession.cpu_kernel_report()`, `tools/bench.py --cpu` and
// the tests (C entry point LstmOrtCpuKernelReport). Also the CPU's name, which keys the CPU
// entries of the `tuned` attribute (LstmOrtCpuName).
#pragma once

#include <functional>
#include <string>

#include "cpu/kernel_tuner.h"
#include "ort_api.h"

namespace lstm_ort {

// `held` says which kernels' weights the kernel holds now ("fused,stock,stock_threads").
void RegisterKernel(const void* kernel, const std::string& node_name, const KernelTuner* tuner,
                    std::function<std::string()> held);
void UnregisterKernel(const void* kernel);

// One line per (kernel, class): "node\tT\tB\tchosen\tpreset\t<ms>\theld", <ms> the medians of
// fused, stock, stock_split and stock_threads in that order, tab-separated (empty where not
// measured); T the class's bucket. A kernel with no class yet gives one line with T and B 0.
std::string KernelReport();

// The node's name (empty when onnxruntime gives none).
std::string NodeName(const OrtKernelInfo* info);

// /proc/cpuinfo's "model name" (or "unknown"), once per process.
const std::string& CpuName();

}  // namespace lstm_ort
