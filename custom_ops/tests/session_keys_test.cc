// The session config keys registration lets by (session_keys.cc).
#include "check.h"
#include "session_keys.h"

using namespace lstm_ort;

namespace {
bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST(SessionKeysAreTheNodeOptionsTheMarkTheStreamsKeyAndEachPerNodeDebugKey) {
  const std::vector<std::string> keys = SessionKeys();
  CHECK(keys.size() > 8);
  CHECK(keys[0] == "strategy" && keys[3] == "int8_scales" && keys[4] == "library_registered");
  CHECK(keys[5] == "streams.cuda_graphs" && keys[6] == "streams.wide_from_us" && keys[7] == "debug.strict");
  for (const std::string& k : keys) CHECK(k != "debug.cpu_threads");  // process-wide knobs are environment only
}

TEST(UnknownSessionKeyFindsTheFirstMisspeltEntryOfOursOnly) {
  CHECK(UnknownSessionKey({}).empty());
  CHECK(UnknownSessionKey({"session.intra_op.allow_spinning", "lstm_ortx.a", "lstm_ort.precision",
                           "lstm_ort.debug.strict", "lstm_ort.library_registered", "lstm_ort.streams.cuda_graphs"})
            .empty());
  CHECK(UnknownSessionKey({"lstm_ort.precision", "lstm_ort.debug.stirct", "lstm_ort.cpu_kernal"}) ==
        "lstm_ort.debug.stirct");
  CHECK(UnknownSessionKey({"lstm_ort."}) == "lstm_ort.");
  CHECK(UnknownSessionKey({"lstm_ort.debug."}) == "lstm_ort.debug.");
  CHECK(UnknownSessionKey({"lstm_ort.strict"}) == "lstm_ort.strict");  // debug keys need their prefix
  const std::string message = UnknownSessionKeyMessage("lstm_ort.cpu_kernal");
  CHECK(Has(message, "'lstm_ort.cpu_kernal'") && Has(message, "cpu_kernel") && Has(message, "strict"));
  CHECK(Has(message, "lstm_ort.streams.cuda_graphs") && Has(message, "lstm_ort.streams.wide_from_us"));
  CHECK(!Has(message, "library_registered"));
}
