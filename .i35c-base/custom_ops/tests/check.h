// A tiny test harness (the tests build without network access, so no gtest): TEST(name)
// registers a test; CHECK* record a failure with its file and line and carry on.
#pragma once

#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace unit {

struct Test {
  const char* name;
  void (*run)();
};

std::vector<Test>& Registry();
void RecordFailure(const char* file, int line, const std::string& what);

struct Registration {
  Registration(const char* name, void (*run)()) { Registry().push_back({name, run}); }
};

}  // namespace unit

#define TEST(name)                                                  \
  static void name();                                               \
  static const unit::Registration name##_registration(#name, name); \
  static void name()

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) unit::RecordFailure(__FILE__, __LINE__, #cond);   \
  } while (0)

#define CHECK_EQ(actual, expected)                                                      \
  do {                                                                                  \
    const auto& actual_ = (actual);                                                     \
    const auto& expected_ = (expected);                                                 \
    if (!(actual_ == expected_)) {                                                      \
      std::ostringstream os_;                                                           \
      os_ << #actual " == " #expected ": got " << actual_ << ", expected " << expected_; \
      unit::RecordFailure(__FILE__, __LINE__, os_.str());                               \
    }                                                                                   \
  } while (0)

// `expr` must throw a std::exception whose message is exactly `message`.
#define CHECK_THROWS_MESSAGE(expr, message)                                                                \
  do {                                                                                                     \
    bool thrown_ = false;                                                                                  \
    try {                                                                                                  \
      (void)(expr);                                                                                        \
    } catch (const std::exception& e_) {                                                                   \
      thrown_ = true;                                                                                      \
      if (std::string(e_.what()) != std::string(message))                                                  \
        unit::RecordFailure(__FILE__, __LINE__,                                                            \
                            std::string(#expr " threw '") + e_.what() + "', expected '" + (message) + "'"); \
    }                                                                                                      \
    if (!thrown_) unit::RecordFailure(__FILE__, __LINE__, #expr " did not throw");                        \
  } while (0)
