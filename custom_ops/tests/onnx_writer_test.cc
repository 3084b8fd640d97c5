// The protobuf encoding of cpu/onnx_writer.cc against bytes worked out by hand from the protobuf
// wire format (the models it writes are run by onnxruntime in tests/test_cpu_kernel_choice.py).
#include <string>

#include "check.h"
#include "cpu/onnx_writer.h"

using namespace lstm_ort::onnx_writer;

TEST(VarintsUseSevenBitGroupsLowFirst) {
  Message m;
  m.Varint(1, 1).Varint(2, 300).Varint(16, 0);
  // key 1<<3|0 = 0x08, 1; key 0x10, 300 = 0xac 0x02; field 16: key 16<<3 = 128 -> 0x80 0x01, 0
  CHECK_EQ(m.bytes(), std::string("\x08\x01\x10\xac\x02\x80\x01\x00", 8));
}

TEST(NegativeIntsAreTenByteVarints) {
  Message m;
  m.Varint(1, static_cast<uint64_t>(int64_t{-1}));
  CHECK_EQ(m.bytes().size(), size_t(11));
  CHECK_EQ(static_cast<unsigned char>(m.bytes().back()), 0x01u);
}

TEST(FloatsAreLittleEndianFixed32) {
  Message m;
  m.Float(2, 1.0f);  // 0x3f800000
  CHECK_EQ(m.bytes(), std::string("\x15\x00\x00\x80\x3f", 5));
}

TEST(SubMessagesAreLengthDelimited) {
  Message inner;
  inner.String(1, "ab");
  Message outer;
  outer.Sub(7, inner);
  CHECK_EQ(outer.bytes(), std::string("\x3a\x04\x0a\x02" "ab", 6));
}

TEST(AModelHoldsItsGraphAndOpset) {
  Graph g;
  g.Input({"X", ElemType::kFloat, {"T", 3}});
  g.Output({"Y", ElemType::kFloat, {"T", 3}});
  g.Node("Identity", {"X"}, {"Y"});
  const std::string model = g.Model(7, 14, "g");
  CHECK_EQ(model.substr(0, 2), std::string("\x08\x07", 2));  // ir_version 7 first
  CHECK(model.find("Identity") != std::string::npos);
  // The opset import: field 8 holding domain "" and version 14.
  CHECK(model.find(std::string("\x42\x04\x0a\x00\x10\x0e", 6)) != std::string::npos);
}

TEST(ANodeOfAnotherDomainNamesItAndTheModelImportsItOnce) {
  Graph g;
  g.Input({"X", ElemType::kFloat, {3}});
  g.Output({"Z", ElemType::kFloat, {3}});
  g.Node("Foo", {"X"}, {"Y"}, {}, "com.microsoft");
  g.Node("Foo", {"Y"}, {"Z"}, {}, "com.microsoft");
  const std::string model = g.Model(7, 14, "g");
  // NodeProto.domain (field 7, 13 bytes), in both nodes.
  const std::string domain = std::string("\x3a\x0d", 2) + "com.microsoft";
  const size_t first = model.find(domain);
  CHECK(first != std::string::npos && model.find(domain, first + 1) != std::string::npos);
  // One opset import of it at version 1 (field 8 holding domain and version 1), besides ONNX's.
  const std::string import = std::string("\x42\x11\x0a\x0d", 4) + "com.microsoft" + std::string("\x10\x01", 2);
  const size_t at = model.find(import);
  CHECK(at != std::string::npos && model.find(import, at + 1) == std::string::npos);
  CHECK(model.find(std::string("\x42\x04\x0a\x00\x10\x0e", 6)) != std::string::npos);
}
