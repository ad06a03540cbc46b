// Who may read the metrics port (http/http_auth.h): the token a request
// presents, and the decision for a job that needs it or not.
#include "http/http_auth.h"

#include <gtest/gtest.h>

#include <string>

namespace ddp {
namespace {

bool is_secret(const std::string& t) { return t == "s3cret"; }

TEST(HttpAuth, BearerHeaderWinsOverTheQuery) {
  EXPECT_EQ(presented_token("Bearer s3cret", ""), "s3cret");
  EXPECT_EQ(presented_token("Bearer s3cret", "other"), "s3cret");
  EXPECT_EQ(presented_token("bearer  s3cret ", ""), "s3cret");  // scheme case-insensitive, blanks trimmed
  EXPECT_EQ(presented_token("BEARER\ts3cret", ""), "s3cret");
}

TEST(HttpAuth, QueryWhenNoBearerHeader) {
  EXPECT_EQ(presented_token("", "s3cret"), "s3cret");
  EXPECT_EQ(presented_token("Basic dXNlcjpwYXNz", "s3cret"), "s3cret");  // another scheme is not a token
  EXPECT_EQ(presented_token("Bearer", "s3cret"), "s3cret");
  EXPECT_EQ(presented_token("Bearer   ", "s3cret"), "s3cret");
  EXPECT_EQ(presented_token("Bearers3cret", ""), "");
  EXPECT_EQ(presented_token("", ""), "");
}

TEST(HttpAuth, OpenJobsNeedNoToken) {
  EXPECT_EQ(check_access(false, "", is_secret), Access::kOpen);
  EXPECT_EQ(check_access(false, "wrong", is_secret), Access::kOpen);
  EXPECT_TRUE(allowed(Access::kOpen));
}

TEST(HttpAuth, MissingWrongAndRightToken) {
  EXPECT_EQ(check_access(true, "", is_secret), Access::kMissingToken);
  EXPECT_EQ(check_access(true, "wrong", is_secret), Access::kWrongToken);
  EXPECT_EQ(check_access(true, "s3cret", is_secret), Access::kGranted);
  EXPECT_FALSE(allowed(Access::kMissingToken));
  EXPECT_FALSE(allowed(Access::kWrongToken));
  EXPECT_TRUE(allowed(Access::kGranted));
}

TEST(HttpAuth, NoTokenIsNeverAskedAboutWhenNoneCame) {
  bool asked = false;
  const auto matches = [&asked](const std::string&) {
    asked = true;
    return true;  // a job whose comparison would accept anything
  };
  EXPECT_EQ(check_access(true, "", matches), Access::kMissingToken);
  EXPECT_FALSE(asked);
}

}  // namespace
}  // namespace ddp
