// What the plan snapshot tests share (call_plan_snapshot_test.cc for CUDA, cpu_call_plan_snapshot_test.cc
// for the CPU): decision lines in groups, an FNV-1a hash of each group's lines, the table of
// groups as data/*.tsv holds it, and the comparison with that file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "check.h"

namespace snapshot {

inline uint64_t Fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

// Groups in the grid's order, each with its lines' hash.
struct GroupTable {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> lines;

  void Add(const std::string& key, const std::string& line) {
    auto it = lines.find(key);
    if (it == lines.end()) {
      order.push_back(key);
      it = lines.emplace(key, std::vector<std::string>{}).first;
    }
    it->second.push_back(line);
  }
  uint64_t Hash(const std::string& key) const {
    uint64_t h = 1469598103934665603ULL;
    for (const std::string& line : lines.at(key)) h = Fnv1a(Fnv1a(h, line), "\n");
    return h;
  }
  void Write(std::FILE* out) const {
    for (const std::string& key : order)
      std::fprintf(out, "%s\t%zu\t%016llx\n", key.c_str(), lines.at(key).size(),
                   static_cast<unsigned long long>(Hash(key)));
  }
};

// Every group of `table` has the count and hash `path` holds for it, and no other group is there.
// A mismatch prints the first groups' lines as they are now and writes the whole table to
// `now_file` in the working directory (what replaces `path` where the change is meant).
inline void CheckAgainst(const GroupTable& table, const std::string& path, const char* now_file) {
  std::ifstream file(path);
  CHECK(file.good());
  std::map<std::string, std::string> expected;  // group -> "count\thash"
  std::string line;
  while (std::getline(file, line)) {
    const size_t tab = line.find('\t');
    expected[line.substr(0, tab)] = line.substr(tab + 1);
  }
  CHECK_EQ(table.order.size(), expected.size());
  int reported = 0, mismatched = 0;
  for (const std::string& key : table.order) {
    char now[64];
    std::snprintf(now, sizeof now, "%zu\t%016llx", table.lines.at(key).size(),
                  static_cast<unsigned long long>(table.Hash(key)));
    const auto it = expected.find(key);
    if (it != expected.end() && it->second == now) continue;
    ++mismatched;
    CHECK_EQ(key + " " + now, key + " " + (it == expected.end() ? std::string("(absent)") : it->second));
    if (reported++ < 3)
      for (const std::string& l : table.lines.at(key)) std::printf("    now: %s %s\n", key.c_str(), l.c_str());
  }
  if (mismatched) {
    if (std::FILE* out = std::fopen(now_file, "w")) {
      table.Write(out);
      std::fclose(out);
      std::printf("    %d groups differ; the table as the plan decides now: %s\n", mismatched, now_file);
    }
  }
}

}  // namespace snapshot
