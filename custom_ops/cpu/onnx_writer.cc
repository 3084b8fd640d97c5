#include "cpu/onnx_writer.h"

#include <algorithm>
#include <cstring>

namespace lstm_ort::onnx_writer {
namespace {

// Wire types of the protobuf encoding.
constexpr int kVarint = 0, kLengthDelimited = 2, kFixed32 = 5;

// Field numbers of onnx.proto.
namespace model { constexpr int kIrVersion = 1, kProducerName = 2, kGraph = 7, kOpsetImport = 8; }
namespace opset { constexpr int kDomain = 1, kVersion = 2; }
namespace graph { constexpr int kNode = 1, kName = 2, kInitializer = 5, kInput = 11, kOutput = 12; }
namespace node { constexpr int kInput = 1, kOutput = 2, kName = 3, kOpType = 4, kAttribute = 5, kDomain = 7; }
namespace attr {
constexpr int kName = 1, kF = 2, kI = 3, kS = 4, kFloats = 7, kInts = 8, kStrings = 9, kType = 20;
// AttributeProto.AttributeType
constexpr int kTypeFloat = 1, kTypeInt = 2, kTypeString = 3, kTypeFloats = 6, kTypeInts = 7, kTypeStrings = 8;
}  // namespace attr
namespace tensor { constexpr int kDims = 1, kDataType = 2, kName = 8, kRawData = 9; }
namespace value_info { constexpr int kName = 1, kType = 2; }
namespace type_proto { constexpr int kTensorType = 1; }
namespace tensor_type { constexpr int kElemType = 1, kShape = 2; }
namespace shape { constexpr int kDim = 1; }
namespace dim { constexpr int kValue = 1, kParam = 2; }

Message AttributeMessage(const Attribute& a) {
  Message m;
  m.String(attr::kName, a.name);
  switch (a.kind) {
    case Attribute::kInt: m.Varint(attr::kI, static_cast<uint64_t>(a.i)).Varint(attr::kType, attr::kTypeInt); break;
    case Attribute::kFloat: m.Float(attr::kF, a.f).Varint(attr::kType, attr::kTypeFloat); break;
    case Attribute::kString: m.String(attr::kS, a.s).Varint(attr::kType, attr::kTypeString); break;
    case Attribute::kFloats:
      for (float f : a.floats) m.Float(attr::kFloats, f);
      m.Varint(attr::kType, attr::kTypeFloats);
      break;
    case Attribute::kInts:
      for (int64_t i : a.ints) m.Varint(attr::kInts, static_cast<uint64_t>(i));
      m.Varint(attr::kType, attr::kTypeInts);
      break;
    case Attribute::kStrings:
      for (const std::string& s : a.strings) m.String(attr::kStrings, s);
      m.Varint(attr::kType, attr::kTypeStrings);
      break;
  }
  return m;
}

Message ValueInfoMessage(const ValueInfo& v) {
  Message shp;
  for (const Dim& d : v.shape) {
    Message dm;
    if (d.param.empty())
      dm.Varint(dim::kValue, static_cast<uint64_t>(d.value));
    else
      dm.String(dim::kParam, d.param);
    shp.Sub(shape::kDim, dm);
  }
  Message tt;
  tt.Varint(tensor_type::kElemType, static_cast<uint64_t>(v.type)).Sub(tensor_type::kShape, shp);
  Message tp;
  tp.Sub(type_proto::kTensorType, tt);
  Message m;
  m.String(value_info::kName, v.name).Sub(value_info::kType, tp);
  return m;
}

}  // namespace

void Message::Key(int field, int wire_type) { RawVarint((static_cast<uint64_t>(field) << 3) | wire_type); }

void Message::RawVarint(uint64_t value) {
  while (value >= 0x80) {
    bytes_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  bytes_.push_back(static_cast<char>(value));
}

Message& Message::Varint(int field, uint64_t value) {
  Key(field, kVarint);
  RawVarint(value);
  return *this;
}

Message& Message::Fixed32(int field, uint32_t value) {
  Key(field, kFixed32);
  for (int k = 0; k < 4; ++k) bytes_.push_back(static_cast<char>((value >> (8 * k)) & 0xff));  // little-endian
  return *this;
}

Message& Message::Float(int field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return Fixed32(field, bits);
}

Message& Message::Bytes(int field, const void* data, size_t size) {
  return Prefix(field, size).Raw(data, size);
}

Message& Message::Raw(const void* data, size_t size) {
  bytes_.append(static_cast<const char*>(data), size);
  return *this;
}

Message& Message::Prefix(int field, size_t size) {
  Key(field, kLengthDelimited);
  RawVarint(size);
  return *this;
}

void Graph::Node(const std::string& op_type, const std::vector<std::string>& inputs,
                 const std::vector<std::string>& outputs, const std::vector<Attribute>& attributes,
                 const std::string& domain) {
  Message m;
  // Trailing absent inputs are left out; inner ones stay as "" (ONNX's empty name).
  size_t n = inputs.size();
  while (n > 0 && inputs[n - 1].empty()) --n;
  for (size_t k = 0; k < n; ++k) m.String(node::kInput, inputs[k]);
  for (const std::string& o : outputs) m.String(node::kOutput, o);
  m.String(node::kName, op_type + "_" + std::to_string(nodes_++));
  m.String(node::kOpType, op_type);
  for (const Attribute& a : attributes) m.Sub(node::kAttribute, AttributeMessage(a));
  if (!domain.empty()) {
    m.String(node::kDomain, domain);
    if (std::find(domains_.begin(), domains_.end(), domain) == domains_.end()) domains_.push_back(domain);
  }
  body_.Sub(graph::kNode, m);
}

void Graph::Initializer(const std::string& name, ElemType type, const std::vector<int64_t>& dims, const void* data,
                        size_t bytes) {
  Message m;
  for (int64_t d : dims) m.Varint(tensor::kDims, static_cast<uint64_t>(d));
  m.Varint(tensor::kDataType, static_cast<uint64_t>(type));
  m.String(tensor::kName, name);
  m.Prefix(tensor::kRawData, bytes);  // little-endian, as raw_data is defined
  body_.Prefix(graph::kInitializer, m.bytes().size() + bytes).Raw(m.bytes().data(), m.bytes().size()).Raw(data, bytes);
}

std::string Graph::Model(int64_t ir_version, int64_t opset_version, const std::string& graph_name) const {
  Message tail;  // fields may come in any order: the name, inputs and outputs after the body
  tail.String(graph::kName, graph_name);
  for (const ValueInfo& v : inputs_) tail.Sub(graph::kInput, ValueInfoMessage(v));
  for (const ValueInfo& v : outputs_) tail.Sub(graph::kOutput, ValueInfoMessage(v));
  Message os;
  os.String(opset::kDomain, "").Varint(opset::kVersion, static_cast<uint64_t>(opset_version));
  Message m;
  m.Varint(model::kIrVersion, static_cast<uint64_t>(ir_version));
  m.String(model::kProducerName, "lstm_ort");
  m.Sub(model::kOpsetImport, os);
  for (const std::string& domain : domains_) {
    Message other;
    other.String(opset::kDomain, domain).Varint(opset::kVersion, 1);
    m.Sub(model::kOpsetImport, other);
  }
  m.Prefix(model::kGraph, body_.bytes().size() + tail.bytes().size());
  std::string out;
  out.reserve(m.bytes().size() + body_.bytes().size() + tail.bytes().size());
  return out.append(m.bytes()).append(body_.bytes()).append(tail.bytes());
}

}  // namespace lstm_ort::onnx_writer
