// Runs every registered test (or those whose name contains argv[1]); exit status 1 on any failure.
#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"

namespace unit {
namespace {
int g_failures = 0;
}

std::vector<Test>& Registry() {
  static std::vector<Test> tests;
  return tests;
}

void RecordFailure(const char* file, int line, const std::string& what) {
  ++g_failures;
  std::printf("  %s:%d: %s\n", file, line, what.c_str());
}

}  // namespace unit

int main(int argc, char** argv) {
  int run = 0, failed = 0;
  for (const unit::Test& t : unit::Registry()) {
    if (argc > 1 && !std::strstr(t.name, argv[1])) continue;
    const int before = unit::g_failures;
    try {
      t.run();
    } catch (const std::exception& e) {
      unit::RecordFailure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
    }
    ++run;
    const bool ok = unit::g_failures == before;
    failed += !ok;
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", t.name);
  }
  std::printf("%d tests, %d failed, %d failed checks\n", run, failed, unit::g_failures);
  return failed || run == 0 ? 1 : 0;
}
