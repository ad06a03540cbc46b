#include "cli/program_command.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "cli/usage_error.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

class ProgramCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("ddp_prog_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    write(dir / "tool", 0755);
    write(dir / "plain", 0644);
    write(dir / "train.py", 0644);
    write(dir / "python3", 0755);
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const fs::path& p, mode_t mode) {
    std::ofstream(p) << "#!/bin/sh\n";
    ::chmod(p.c_str(), mode);
  }
  CommandInputs inputs(std::vector<std::string> command) {
    CommandInputs in;
    in.command = std::move(command);
    in.path = dir.string();
    return in;
  }
  fs::path dir;
};

TEST_F(ProgramCommandTest, ExecutableRunsAsIs) {
  EXPECT_EQ(resolve_command(inputs({"tool", "a"})), (std::vector<std::string>{"tool", "a"}));
  const std::string full = (dir / "tool").string();
  EXPECT_EQ(resolve_command(inputs({full})), std::vector<std::string>{full});
}

TEST_F(ProgramCommandTest, PythonFileRunsUnbufferedUnderPython) {
  const std::string script = (dir / "train.py").string();
  EXPECT_EQ(resolve_command(inputs({script, "--lr", "1"})),
            (std::vector<std::string>{"python3", "-u", script, "--lr", "1"}));
  auto in = inputs({script});
  in.python_exec = (dir / "tool").string();
  EXPECT_EQ(resolve_command(in).front(), (dir / "tool").string());
}

TEST_F(ProgramCommandTest, ModuleRunsWithDashM) {
  auto in = inputs({"pkg.train", "x"});
  in.module = true;
  EXPECT_EQ(resolve_command(in), (std::vector<std::string>{"python3", "-u", "-m", "pkg.train", "x"}));
  in.no_python = true;
  EXPECT_THROW(resolve_command(in), UsageError);
}

TEST_F(ProgramCommandTest, NoPythonRunsAPythonFileDirectly) {
  const std::string script = (dir / "train.py").string();
  ::chmod(script.c_str(), 0755);
  auto in = inputs({script});
  in.no_python = true;
  EXPECT_EQ(resolve_command(in), std::vector<std::string>{script});
}

TEST_F(ProgramCommandTest, MissingOrNotExecutableIsAUsageErrorNamingIt) {
  for (const std::string& bad : {std::string("nosuch"), (dir / "plain").string(), (dir / "nosuch.py").string(),
                                 std::string("./nosuch")}) {
    try {
      resolve_command(inputs({bad}));
      ADD_FAILURE() << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST_F(ProgramCommandTest, MissingPythonIsAUsageError) {
  auto in = inputs({(dir / "train.py").string()});
  in.python_exec = "no-such-python";
  EXPECT_THROW(resolve_command(in), UsageError);
}

}  // namespace
}  // namespace ddp
