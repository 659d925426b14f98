// Skipping a test that cannot run here (no root, a missing tool, a low descriptor limit), so that
// it is reported as Skipped and never as Passed.
//
//   if (::geteuid() != 0) nodeagent::testing::skipTest("needs root (setuid)");
//
// Call it first thing in the TEST_CASE, before temp dirs, child processes or threads exist: it
// does not return, and under ctest the process ends without running the test's destructors.
//
// - Under ctest (one process per test case): prints a loud "SKIPPED: <why>" line and a Catch2
//   warning, then exits the process with kSkipExitCode, which test/CMakeLists.txt declares as
//   SKIP_RETURN_CODE: ctest prints "***Skipped" and counts the test as not run.
// - When the process runs several test cases (a binary run by hand): prints the same lines and
//   ends only this test case, so the others still run; a "SKIPPED test cases" summary closes the
//   run.
// - When an assertion of the test case has already failed: the failure is not hidden behind a
//   skip; the test case fails (exit status 1 under ctest).
#pragma once

#include <source_location>
#include <string>

namespace nodeagent::testing {

// ctest's SKIP_RETURN_CODE for every test case (the Automake convention).
inline constexpr int kSkipExitCode = 77;

// `where` (the caller) is printed with the reason.
[[noreturn]] void skipTest(const std::string& why,
                           std::source_location where = std::source_location::current());

}  // namespace nodeagent::testing
