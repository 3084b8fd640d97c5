#include "session_keys.h"

#include <algorithm>
#include <sstream>

#include "overrides.h"

namespace lstm_ort {
namespace {

// lstm_ort.runtime.session's NODE_OPTIONS keys, and the mark it sets on options that registered the
// library (tests/test_op_identity.py holds Python to SessionKeys()).
constexpr const char* kNodeOptionKeys[] = {"strategy", "precision", "cpu_kernel", "int8_scales"};
constexpr const char kRegisteredKey[] = "library_registered";
// lstm_ort.serving.streams.native_session's: the step engine's, which its sessions' options carry too
constexpr const char* kStreamsKeys[] = {"streams.cuda_graphs", "streams.wide_from_us"};
constexpr const char kDebugPrefix[] = "debug.";

}  // namespace

std::vector<std::string> SessionKeys() {
  std::vector<std::string> keys(std::begin(kNodeOptionKeys), std::end(kNodeOptionKeys));
  keys.push_back(kRegisteredKey);
  for (const char* k : kStreamsKeys) keys.push_back(k);
  std::istringstream debug(DebugKeys(","));
  for (std::string key; std::getline(debug, key, ',');)
    if (!key.empty()) keys.push_back(kDebugPrefix + key);
  return keys;
}

std::string UnknownSessionKey(const std::vector<std::string>& keys) {
  const std::vector<std::string> known = SessionKeys();
  const std::string prefix = kSessionKeyPrefix;
  for (const std::string& key : keys) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    if (std::find(known.begin(), known.end(), key.substr(prefix.size())) == known.end()) return key;
  }
  return "";
}

std::string UnknownSessionKeyMessage(const std::string& key) {
  std::string options, streams;
  for (const char* k : kNodeOptionKeys) options += std::string(options.empty() ? "" : ", ") + k;
  for (const char* k : kStreamsKeys) streams += kSessionKeyPrefix + std::string(k) + ", ";
  return "lstm_ort: session config entry '" + key + "' is none of lstm_ort's: " + kSessionKeyPrefix +
         "<option> with option one of " + options + ", " + streams + "or " +
         kSessionKeyPrefix + kDebugPrefix + "<key> with key one of " + DebugKeys(", ");
}

}  // namespace lstm_ort
