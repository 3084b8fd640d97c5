// C entry points of the CPU kernel's choices (cpu/kernel_report.h), for lstm_ort's Python side.
#include "c_entry_point.h"
#include "cpu/kernel_report.h"

// Every live CPU kernel's shape classes, one per line (KernelReport's format).
LSTM_ORT_C_ENTRY int LstmOrtCpuKernelReport(char* out, int size) {
  return lstm_ort::CopyOutWhole(lstm_ort::KernelReport(), out, size);
}

// The name that keys this CPU's entries of the `tuned` attribute ("cpu:" + it).
LSTM_ORT_C_ENTRY int LstmOrtCpuName(char* out, int size) { return lstm_ort::CopyOutWhole(lstm_ort::CpuName(), out, size); }
