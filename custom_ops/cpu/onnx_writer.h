// A minimal writer of serialized ONNX ModelProto bytes: the few messages a one-graph model of
// stock operators needs (nodes with scalar and list attributes, float and int64 initializers,
// inputs and outputs with symbolic dimensions). The op library links no protobuf, and
// onnxruntime's C API (1.21) creates sessions only from serialized bytes, so the CPU kernel writes
// the model of stock's LSTM (cpu/stock_model.cc) with this. Field numbers: onnx/onnx.proto.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lstm_ort::onnx_writer {

// One protobuf message being written: fields are appended in call order.
class Message {
 public:
  Message& Varint(int field, uint64_t value);
  Message& Fixed32(int field, uint32_t value);
  Message& Float(int field, float value);
  Message& Bytes(int field, const void* data, size_t size);
  Message& String(int field, const std::string& text) { return Bytes(field, text.data(), text.size()); }
  Message& Sub(int field, const Message& sub) { return Bytes(field, sub.bytes_.data(), sub.bytes_.size()); }
  // The key and length of a length-delimited field whose `size` bytes the caller appends after
  // these bytes (a large field written once, not copied into this message).
  Message& Prefix(int field, size_t size);
  Message& Raw(const void* data, size_t size);
  const std::string& bytes() const { return bytes_; }

 private:
  void Key(int field, int wire_type);
  void RawVarint(uint64_t value);
  std::string bytes_;
};

enum class ElemType : int { kFloat = 1, kInt8 = 3, kInt32 = 6, kInt64 = 7 };

struct Attribute {
  enum Kind { kInt, kFloat, kString, kFloats, kInts, kStrings };
  std::string name;
  Kind kind = kInt;
  int64_t i = 0;
  float f = 0.f;
  std::string s;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute Int(std::string name, int64_t v) { return Make(std::move(name), kInt, [&](Attribute& a) { a.i = v; }); }
  static Attribute Flt(std::string name, float v) { return Make(std::move(name), kFloat, [&](Attribute& a) { a.f = v; }); }
  static Attribute Str(std::string name, std::string v) {
    return Make(std::move(name), kString, [&](Attribute& a) { a.s = std::move(v); });
  }
  static Attribute Floats(std::string name, std::vector<float> v) {
    return Make(std::move(name), kFloats, [&](Attribute& a) { a.floats = std::move(v); });
  }
  static Attribute Ints(std::string name, std::vector<int64_t> v) {
    return Make(std::move(name), kInts, [&](Attribute& a) { a.ints = std::move(v); });
  }
  static Attribute Strings(std::string name, std::vector<std::string> v) {
    return Make(std::move(name), kStrings, [&](Attribute& a) { a.strings = std::move(v); });
  }

 private:
  template <typename Fill>
  static Attribute Make(std::string name, Kind kind, Fill fill) {
    Attribute a;
    a.name = std::move(name);
    a.kind = kind;
    fill(a);
    return a;
  }
};

// A dimension is a fixed size (>= 0) or a symbol (dim_param).
struct Dim {
  Dim(int64_t v) : value(v) {}                   // NOLINT: sizes read as dims
  Dim(const char* p) : value(-1), param(p) {}    // NOLINT: symbols too
  int64_t value;
  std::string param;
};

struct ValueInfo {
  std::string name;
  ElemType type;
  std::vector<Dim> shape;
};

class Graph {
 public:
  // Inputs named "" are absent optional inputs. A node of another domain than ONNX's (onnxruntime's
  // com.microsoft) imports that domain at version 1.
  void Node(const std::string& op_type, const std::vector<std::string>& inputs,
            const std::vector<std::string>& outputs, const std::vector<Attribute>& attributes = {},
            const std::string& domain = "");
  void Initializer(const std::string& name, ElemType type, const std::vector<int64_t>& dims, const void* data,
                   size_t bytes);
  void Input(const ValueInfo& v) { inputs_.push_back(v); }
  void Output(const ValueInfo& v) { outputs_.push_back(v); }

  // The serialized ModelProto of this graph, ONNX's domain at `opset`. Initializers are
  // copied once into the graph as they are added and once more here, and no more: the model of a
  // large stack is a few hundred megabytes.
  std::string Model(int64_t ir_version, int64_t opset, const std::string& graph_name) const;

 private:
  Message body_;  // the GraphProto's nodes and initializers so far
  int nodes_ = 0;
  std::vector<ValueInfo> inputs_, outputs_;
  std::vector<std::string> domains_;  // other domains the nodes use
};

}  // namespace lstm_ort::onnx_writer
