// Where --sync finds its credentials (sync/aws_credentials.h): the
// environment first, then the shared credentials and config files, with
// AWS_PROFILE; region and endpoint likewise; secrets never in describe().

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "sync/aws_credentials.h"
#include "temp_dir.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(home_ / ".aws");
    vars_["HOME"] = home_.string();
  }
  void file(const std::string& name, const std::string& text) { std::ofstream(home_ / ".aws" / name) << text; }
  std::optional<AwsCredentials> resolve() {
    why_.clear();
    return resolve_aws_credentials(
        [this](const char* n) -> std::optional<std::string> {
          auto it = vars_.find(n);
          return it == vars_.end() ? std::nullopt : std::optional<std::string>(it->second);
        },
        why_);
  }
  testing::TempDir dir_{"ddp_aws_"};
  const fs::path& home_ = dir_.path();
  std::map<std::string, std::string> vars_;
  std::string why_;
};

TEST_F(AwsCredentialsTest, TheEnvironmentComesFirst) {
  file("credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n");
  vars_["AWS_ACCESS_KEY_ID"] = "AKIAENVKEY123456";
  vars_["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  vars_["AWS_SESSION_TOKEN"] = "envtoken";
  vars_["AWS_DEFAULT_REGION"] = "ap-guangzhou";
  vars_["AWS_ENDPOINT_URL"] = "https://cos.ap-guangzhou.myqcloud.com";
  auto c = resolve();
  ASSERT_TRUE(c.has_value()) << why_;
  EXPECT_EQ(c->access_key_id, "AKIAENVKEY123456");
  EXPECT_EQ(c->secret_access_key, "envsecret");
  EXPECT_EQ(c->session_token, "envtoken");
  EXPECT_EQ(c->region, "ap-guangzhou");
  EXPECT_EQ(c->endpoint_url, "https://cos.ap-guangzhou.myqcloud.com");
  EXPECT_EQ(c->describe(), "key AKIA...3456 from the environment");
  vars_["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9000";
  EXPECT_EQ(resolve()->endpoint_url, "http://127.0.0.1:9000") << "the S3-specific variable wins";
}

TEST_F(AwsCredentialsTest, AProfileOfTheFiles) {
  file("credentials",
       "# comment\n[default]\naws_access_key_id=DEFKEY\naws_secret_access_key=defsecret\n\n"
       "[dev]\naws_access_key_id = DEVKEY00000000\naws_secret_access_key = devsecret\n");
  file("config",
       "[default]\nregion = eu-west-1\n[profile dev]\nregion = us-west-2\ns3 =\n    endpoint_url = http://minio:9000\n");
  auto c = resolve();
  ASSERT_TRUE(c.has_value()) << why_;
  EXPECT_EQ(c->access_key_id, "DEFKEY");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->endpoint_url, "");
  vars_["AWS_PROFILE"] = "dev";
  c = resolve();
  ASSERT_TRUE(c.has_value()) << why_;
  EXPECT_EQ(c->secret_access_key, "devsecret");
  EXPECT_EQ(c->region, "us-west-2");
  EXPECT_EQ(c->endpoint_url, "http://minio:9000");
  EXPECT_NE(c->source.find("profile dev of"), std::string::npos) << c->source;
  EXPECT_EQ(c->describe().find("devsecret"), std::string::npos);
}

TEST_F(AwsCredentialsTest, KeysInTheConfigFileAndTheDefaultRegion) {
  file("config", "[profile ci]\naws_access_key_id = CIKEY\naws_secret_access_key = cisecret\n");
  vars_["AWS_PROFILE"] = "ci";
  auto c = resolve();
  ASSERT_TRUE(c.has_value()) << why_;
  EXPECT_EQ(c->access_key_id, "CIKEY");
  EXPECT_EQ(c->region, "us-east-1");
}

TEST_F(AwsCredentialsTest, WhatIsMissingIsSaid) {
  EXPECT_FALSE(resolve().has_value());
  EXPECT_NE(why_.find("no AWS_ACCESS_KEY_ID"), std::string::npos) << why_;
  vars_["AWS_ACCESS_KEY_ID"] = "K";
  EXPECT_FALSE(resolve().has_value());
  EXPECT_EQ(why_, "AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY");
  vars_.erase("AWS_ACCESS_KEY_ID");
  file("credentials", "[default]\naws_access_key_id = X\naws_secret_access_key = y\n");
  vars_["AWS_PROFILE"] = "nope";
  EXPECT_FALSE(resolve().has_value());
  EXPECT_NE(why_.find("profile 'nope'"), std::string::npos) << why_;
  EXPECT_EQ(why_.find(" y"), std::string::npos) << "no secret in the reason";
}

}  // namespace
}  // namespace ddp
