// FusedLSTM's attribute rules (docs/ops.md) on plain values, free of onnxruntime so they can be
// unit-tested; op_config.cc reads an OrtKernelInfo into RawAttributes and calls
// ResolveAttributes.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// A broken rule of the op contract; what() is the message the error status carries (after the
// op's name).
struct AttributeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The attributes as a node carries them: empty where absent.
struct RawAttributes {
  std::optional<int64_t> hidden_size, num_layers, layout, input_forget;
  std::optional<float> clip;
  std::optional<std::string> direction, strategy, precision, cpu_kernel, int8_scales, tuned, activations, debug;
  std::vector<float> activation_alpha, activation_beta;
  std::optional<std::vector<int64_t>> rank_input, rank_recurrent;
};

// Defaults applied and every rule checked, in the order the contract lists them; throws
// AttributeError at the first broken one.
Attributes ResolveAttributes(const RawAttributes& raw);

// "forward", "reverse" or "bidirectional".
void ResolveDirection(const std::string& direction, int* num_directions, bool* reverse_only);

void ValidateLayout(int64_t layout);

// The `strategy` attribute.
Strategy ResolveStrategy(const std::string& name);

// The `cpu_kernel` attribute: auto, fused, stock, stock_split or stock_threads.
CpuKernel ResolveCpuKernel(const std::string& name);

// The `precision` attribute: fp32, tf32, fp16, bf16 or auto.
Precision ResolvePrecision(const std::string& name);

// The `tuned` attribute: "gpu|T|B|strategy" entries separated by ';' (blank entries skipped),
// as lstm_ort.tuning writes them; an entry whose device starts with "cpu:" names a CpuKernel.
std::vector<TunedStrategy> ParseTuned(const std::string& text);

// The canonical `tuned` text of `entries`: what ParseTuned reads back as the same entries.
std::string FormatTuned(const std::vector<TunedStrategy>& entries);

// The ranks of factored parts (attributes rank_input, rank_recurrent): each list, when given,
// holds one rank >= 0 per layer and direction (L*D).
Ranks ResolveRanks(const std::optional<std::vector<int64_t>>& input,
                   const std::optional<std::vector<int64_t>>& recurrent, int64_t layers, int num_directions);

// The name stock onnxruntime gives an activation ("Sigmoid", "HardSigmoid", ...), and whether it
// takes an alpha and a beta (which it then consumes from activation_alpha / activation_beta).
const char* ActivationName(ActKind kind);
void ActivationTakes(ActKind kind, bool* alpha, bool* beta);

// f, g, h of each direction from the `activations` attribute (comma-separated names,
// case-insensitive; absent: Sigmoid, Tanh, Tanh) and the alphas and betas, which the activations
// that take them consume in order, as stock onnxruntime does. A single direction's functions are
// copied to act[1].
void ResolveActivations(const std::optional<std::string>& names, const std::vector<float>& alphas,
                        const std::vector<float>& betas, int num_directions, Activation (&act)[2][3]);

}  // namespace lstm_ort
