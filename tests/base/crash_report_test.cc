// SPDX-License-Identifier: Apache-2.0
#include "base/crash_report.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace maestro {
namespace {

// The null pointer goes through a volatile so the compiler cannot see it.
int* volatile g_null = nullptr;
[[gnu::noinline]] void DereferenceNull() {
  int* p = g_null;
  *reinterpret_cast<volatile int*>(p) = 1;  // the crash under test
}

TEST(CrashReportDeathTest, ASegfaultNamesTheRankTheSignalAndTheStack) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        InstallCrashReporter("crash-test");
        SetCrashReportRank(7);
        DereferenceNull();
      },
      testing::KilledBySignal(SIGSEGV),
      "crash-test rank 7 \\(pid [0-9]+\\): fatal signal SEGV at address 0x0; native stack:");
}

TEST(CrashReportDeathTest, AnAbortIsReportedAndStillAborts) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        InstallCrashReporter("crash-test");
        abort();
      },
      testing::KilledBySignal(SIGABRT), "crash-test \\(pid [0-9]+\\): fatal signal ABRT");
}

}  // namespace
}  // namespace maestro
