// The session config entries of lstm_ort (the prefix "lstm_ort."): what lstm_ort.InferenceSession
// reads (lstm_ort/runtime/session.py: the node options, the library's registration mark, and
// "debug.<key>" for each per-node override key), and the check that RegisterCustomOps makes of a
// session's entries, so that a misspelt key is an error naming it rather than an entry nobody
// reads. Plain C++; the listing of a session's entries is registration.cc's (onnxruntime >= 1.23).
#pragma once

#include <string>
#include <vector>

namespace lstm_ort {

inline constexpr const char kSessionKeyPrefix[] = "lstm_ort.";

// The keys after the prefix, node options first ("strategy", ..., "library_registered",
// "debug.strict", ...).
std::vector<std::string> SessionKeys();

// The first of `keys` (whole session config keys) under the prefix that is none of SessionKeys();
// empty where there is none.
std::string UnknownSessionKey(const std::vector<std::string>& keys);

// The error for such a key: it, and the keys there are.
std::string UnknownSessionKeyMessage(const std::string& key);

}  // namespace lstm_ort
