#include "cli/launch_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "cli/usage_error.h"

namespace ddp {
namespace {

std::optional<LaunchOptions> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "ddplaunch");
  return parse_launch_options(static_cast<int>(args.size()), args.data());
}

TEST(LaunchOptions, DashAndUnderscoreSpellingsAndBothValueForms) {
  EXPECT_EQ(parse({"--nproc-per-node=4", "prog"})->nproc_per_node, "4");
  EXPECT_EQ(parse({"--nproc_per_node", "3", "prog"})->nproc_per_node, "3");
  EXPECT_EQ(parse({"--master_port=1234", "prog"})->master_port, 1234);
  EXPECT_EQ(parse({"--max-restarts", "2", "prog"})->max_restarts, 2);
  EXPECT_TRUE(parse({"--no_python", "prog"})->no_python);
  EXPECT_TRUE(parse({"-m", "pkg.mod"})->module);
}

TEST(LaunchOptions, EverythingAfterProgramBelongsToIt) {
  const auto o = parse({"--nproc-per-node=2", "prog", "--nproc-per-node=9", "-m", "x"});
  EXPECT_EQ(o->nproc_per_node, "2");
  EXPECT_FALSE(o->module);
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "--nproc-per-node=9", "-m", "x"}));
}

TEST(LaunchOptions, DoubleDashSeparatesProgram) {
  EXPECT_EQ(parse({"--", "prog", "a"})->command, (std::vector<std::string>{"prog", "a"}));
}

TEST(LaunchOptions, PetEnvironmentGivesDefaultsAndFlagsWin) {
  setenv("PET_NPROC_PER_NODE", "5", 1);
  setenv("PET_MAX_RESTARTS", "1", 1);
  EXPECT_EQ(parse({"prog"})->nproc_per_node, "5");
  EXPECT_EQ(parse({"--nproc-per-node=2", "prog"})->nproc_per_node, "2");
  EXPECT_EQ(parse({"prog"})->max_restarts, 1);
  unsetenv("PET_NPROC_PER_NODE");
  unsetenv("PET_MAX_RESTARTS");
}

TEST(LaunchOptions, BadUsageIsAUsageError) {
  EXPECT_THROW(parse({}), UsageError);
  EXPECT_THROW(parse({"--nproc-per-node=2"}), UsageError);
  EXPECT_THROW(parse({"--bogus", "prog"}), UsageError);
  EXPECT_THROW(parse({"--master-port=70000", "prog"}), UsageError);
  EXPECT_THROW(parse({"--master-port=abc", "prog"}), UsageError);
  EXPECT_THROW(parse({"--max-restarts=-1", "prog"}), UsageError);
  EXPECT_THROW(parse({"--shutdown-grace=-2", "prog"}), UsageError);
}

TEST(LaunchOptions, UnknownOptionMessageNamesIt) {
  try {
    parse({"--nprocs=2", "prog"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--nprocs=2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddp
