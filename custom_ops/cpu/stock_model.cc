#include "cpu/stock_model.h"

#include <vector>

#include "attribute_parsing.h"
#include "cpu/onnx_writer.h"

namespace lstm_ort {

namespace stock_names {
std::string InitialH(int64_t layer) { return "initial_h_" + std::to_string(layer); }
std::string InitialC(int64_t layer) { return "initial_c_" + std::to_string(layer); }
std::string YH(int64_t layer) { return "Y_h_" + std::to_string(layer); }
std::string YC(int64_t layer) { return "Y_c_" + std::to_string(layer); }
}  // namespace stock_names

namespace {

using onnx_writer::Attribute;
using onnx_writer::Dim;
using onnx_writer::ElemType;

// The LSTM's attributes, written only where the node differs from ONNX's defaults: the original
// model's LSTM nodes carry the same and take the same code paths in the kernel.
std::vector<Attribute> LstmAttributes(const Attributes& a) {
  std::vector<Attribute> out = {Attribute::Int("hidden_size", a.hidden_size),
                                Attribute::Str("direction", a.num_directions == 2 ? "bidirectional"
                                                            : a.reverse_only    ? "reverse"
                                                                                : "forward")};
  if (a.has_clip) out.push_back(Attribute::Flt("clip", a.clip));
  if (a.input_forget) out.push_back(Attribute::Int("input_forget", 1));
  bool defaults = true;
  for (int d = 0; d < a.num_directions; ++d)
    defaults = defaults && a.act[d][0].kind == ActKind::kSigmoid && a.act[d][1].kind == ActKind::kTanh &&
               a.act[d][2].kind == ActKind::kTanh;
  if (!defaults) {
    std::vector<std::string> names;
    std::vector<float> alphas, betas;
    for (int d = 0; d < a.num_directions; ++d)
      for (const Activation& act : a.act[d]) {
        bool alpha, beta;
        ActivationTakes(act.kind, &alpha, &beta);
        names.push_back(ActivationName(act.kind));
        // Every value written out, in the order stock consumes them.
        if (alpha) alphas.push_back(act.alpha);
        if (beta) betas.push_back(act.beta);
      }
    out.push_back(Attribute::Strings("activations", names));
    if (!alphas.empty()) out.push_back(Attribute::Floats("activation_alpha", alphas));
    if (!betas.empty()) out.push_back(Attribute::Floats("activation_beta", betas));
  }
  return out;
}

}  // namespace

std::string StockStackModel(const Attributes& attrs, const Dims& d, const StockSignature& sig, const StackWeights& wt) {
  namespace n = stock_names;
  const int64_t H = d.H, D = d.D, G = kGates * H;
  const bool int8 = wt.w8 != nullptr;
  const ElemType wtype = int8 ? ElemType::kInt8 : ElemType::kFloat;
  const size_t wsize = int8 ? sizeof(int8_t) : sizeof(float);
  const Dim T("T"), B("B");
  onnx_writer::Graph g;
  g.Input({n::kX, ElemType::kFloat, {T, B, d.I}});
  if (sig.seq_lens) g.Input({n::kSeqLens, ElemType::kInt32, {B}});
  const std::vector<int64_t> flat = {0, 0, -1};  // Reshape's shape between layers
  if (d.L > 1) g.Initializer("flat_shape", ElemType::kInt64, {3}, flat.data(), flat.size() * sizeof(int64_t));
  const std::vector<Attribute> attributes = LstmAttributes(attrs);

  std::string x = n::kX;
  std::vector<char> w_onnx, r_onnx;
  std::vector<float> bt, pt, w_scale, r_scale;
  const std::vector<int8_t> zero_points(D * G, 0);
  for (int64_t l = 0; l < d.L; ++l) {
    const int64_t I = d.LayerInput(l), K = d.LayerK(l);
    const std::string tag = std::to_string(l);
    // Block (l, dir) is [K][4H], column 4j + g. ONNX's LSTM W[dir] is [4H][I], row g*H + j (R
    // likewise); DynamicQuantizeLSTM's is [I][4H], column g*H + j, with a scale per column.
    w_onnx.assign(D * G * I * wsize, 0);
    r_onnx.assign(D * G * H * wsize, 0);
    bt.assign(D * 2 * G, 0.f);
    pt.assign(D * 3 * H, 0.f);
    w_scale.assign(D * G, 0.f);
    r_scale.assign(D * G, 0.f);
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t off = d.WeightOffset(l, dir), kd = l * D + dir;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < H; ++j)
          for (int gate = 0; gate < kGates; ++gate) {
            const int64_t from = off + k * G + kGates * j + gate, row = gate * H + j;
            const bool input = k < I;
            const int64_t kk = input ? k : k - I, depth = input ? I : H;
            std::vector<char>& to = input ? w_onnx : r_onnx;
            if (int8)
              reinterpret_cast<int8_t*>(to.data())[(dir * depth + kk) * G + row] = wt.w8[from];
            else
              reinterpret_cast<float*>(to.data())[(dir * G + row) * depth + kk] = wt.w[from];
          }
      if (int8)
        for (int64_t j = 0; j < H; ++j)
          for (int gate = 0; gate < kGates; ++gate) {
            w_scale[dir * G + gate * H + j] = wt.w_scale[kd * 2 * G + kGates * j + gate];
            r_scale[dir * G + gate * H + j] = wt.w_scale[kd * 2 * G + G + kGates * j + gate];
          }
      if (wt.b)  // Wb = the contract's Wb + Rb, Rb = 0: stock adds them once, as it added the original two
        for (int64_t j = 0; j < H; ++j)
          for (int gate = 0; gate < kGates; ++gate) bt[dir * 2 * G + gate * H + j] = wt.b[kd * G + kGates * j + gate];
      if (wt.p)
        for (int64_t k = 0; k < 3 * H; ++k) pt[dir * 3 * H + k] = wt.p[kd * 3 * H + k];
    }
    const std::vector<int64_t> w_shape = int8 ? std::vector<int64_t>{D, I, G} : std::vector<int64_t>{D, G, I};
    const std::vector<int64_t> r_shape = int8 ? std::vector<int64_t>{D, H, G} : std::vector<int64_t>{D, G, H};
    g.Initializer("W_" + tag, wtype, w_shape, w_onnx.data(), w_onnx.size());
    g.Initializer("R_" + tag, wtype, r_shape, r_onnx.data(), r_onnx.size());
    if (wt.b) g.Initializer("B_" + tag, ElemType::kFloat, {D, 2 * G}, bt.data(), bt.size() * sizeof(float));
    if (wt.p) g.Initializer("P_" + tag, ElemType::kFloat, {D, 3 * H}, pt.data(), pt.size() * sizeof(float));
    if (sig.initial_h) g.Input({n::InitialH(l), ElemType::kFloat, {D, B, H}});
    if (sig.initial_c) g.Input({n::InitialC(l), ElemType::kFloat, {D, B, H}});

    const bool last = l == d.L - 1;
    const std::string y = last ? n::kY : "Y_" + tag;
    std::vector<std::string> inputs = {x, "W_" + tag, "R_" + tag, wt.b ? "B_" + tag : "",
                                       sig.seq_lens ? n::kSeqLens : "", sig.initial_h ? n::InitialH(l) : "",
                                       sig.initial_c ? n::InitialC(l) : "", wt.p ? "P_" + tag : ""};
    if (int8) {
      g.Initializer("W_scale_" + tag, ElemType::kFloat, {D, G}, w_scale.data(), w_scale.size() * sizeof(float));
      g.Initializer("R_scale_" + tag, ElemType::kFloat, {D, G}, r_scale.data(), r_scale.size() * sizeof(float));
      if (l == 0) g.Initializer("zero_points", ElemType::kInt8, {D, G}, zero_points.data(), zero_points.size());
      inputs.insert(inputs.end(), {"W_scale_" + tag, "zero_points", "R_scale_" + tag, "zero_points"});
      g.Node("DynamicQuantizeLSTM", inputs, {y, n::YH(l), n::YC(l)}, attributes, "com.microsoft");
    } else {
      g.Node("LSTM", inputs, {y, n::YH(l), n::YC(l)}, attributes);
    }
    g.Output({n::YH(l), ElemType::kFloat, {D, B, H}});
    g.Output({n::YC(l), ElemType::kFloat, {D, B, H}});
    if (!last) {  // [T, D, B, H] -> [T, B, D*H], the next layer's input
      g.Node("Transpose", {y}, {"Y_tbdh_" + tag}, {Attribute::Ints("perm", {0, 2, 1, 3})});
      g.Node("Reshape", {"Y_tbdh_" + tag, "flat_shape"}, {"X_" + std::to_string(l + 1)});
      x = "X_" + std::to_string(l + 1);
    }
  }
  g.Output({n::kY, ElemType::kFloat, {T, D, B, H}});
  return g.Model(/*ir_version=*/7, /*opset=*/14, "lstm_ort_stock");
}

}  // namespace lstm_ort
