#include "test/support/skip.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

// The listener below needs Catch's reporter interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

namespace nodeagent::testing {
namespace {

// Failed assertions of the running test case, and the test cases skipped so far (for the summary
// of a run of several test cases).
int g_failed_assertions = 0;
std::vector<std::pair<std::string, std::string>> g_skipped;

struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    g_failed_assertions = 0;
    TestEventListenerBase::testCaseStarting(info);
  }

  bool assertionEnded(Catch::AssertionStats const& stats) override {
    if (!stats.assertionResult.isOk()) ++g_failed_assertions;
    return TestEventListenerBase::assertionEnded(stats);
  }

  void testRunEnded(Catch::TestRunStats const& stats) override {
    if (!g_skipped.empty()) {
      std::cerr << "\n*** SKIPPED test cases (" << g_skipped.size()
                << "; Catch's totals count them as passed, ctest as Skipped):\n";
      for (const auto& [name, why] : g_skipped)
        std::cerr << "***   " << name << ": " << why << "\n";
      std::cerr << std::flush;
    }
    TestEventListenerBase::testRunEnded(stats);
  }
};

CATCH_REGISTER_LISTENER(SkipListener)

// How many test cases this process runs: one under ctest (catch_discover_tests).
size_t selectedTestCases() {
  const auto& config = Catch::getCurrentContext().getConfig();
  if (!config) return 0;
  return Catch::filterTests(Catch::getAllTestCasesSorted(*config), config->testSpec(), *config)
      .size();
}

}  // namespace

void skipTest(const std::string& why, std::source_location where) {
  const std::string name = Catch::getResultCapture().getCurrentTestName();
  const std::string at = std::string(where.file_name()) + ":" + std::to_string(where.line());
  if (g_failed_assertions > 0) {
    // The failures are already reported; ending the test case keeps them a failure.
    std::cerr << "NOT SKIPPED (" << g_failed_assertions << " assertions failed before): " << name
              << ": " << why << std::endl;
    throw Catch::TestFailureException();
  }
  std::cerr << "\n****************************************************************\n"
            << "SKIPPED: " << why << "\n  test case: " << name << " (" << at << ")\n"
            << "****************************************************************" << std::endl;
  WARN("SKIPPED: " << why << " (" << at << ")");
  if (selectedTestCases() > 1) {
    // Other test cases of this run still run: end only this one.
    g_skipped.emplace_back(name, why);
    throw Catch::TestFailureException();
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  // _Exit, not exit: no destructor (of the test, or static) runs while a thread could use it.
  std::_Exit(kSkipExitCode);
}

}  // namespace nodeagent::testing
