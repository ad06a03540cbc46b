// The S3 client's parts that need no server (sync/s3_store.h): how keys and
// query values are encoded, where requests go, and a local file that is not
// there. Requests to a real server: tests/integration/test_s3_store.py.

#include <gtest/gtest.h>

#include "sync/s3_store.h"

namespace ddp {
namespace {

AwsCredentials credentials(const std::string& endpoint, const std::string& region = "eu-west-3") {
  AwsCredentials c;
  c.access_key_id = "AKIDEXAMPLE";
  c.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  c.region = region;
  c.endpoint_url = endpoint;
  c.source = "test";
  return c;
}

TEST(S3StoreTest, KeysKeepSlashesAndUnreservedCharacters) {
  EXPECT_EQ(s3_encode_key("run-1/step_00.pt~"), "run-1/step_00.pt~");
  EXPECT_EQ(s3_encode_key("a b/c+d=e&f"), "a%20b/c%2Bd%3De%26f");
  EXPECT_EQ(s3_encode_key("caf\xc3\xa9"), "caf%C3%A9");  // uppercase hex, byte by byte
  EXPECT_EQ(s3_encode_key("!'()*"), "%21%27%28%29%2A");
}

TEST(S3StoreTest, QueryValuesEncodeSlashesToo) {
  EXPECT_EQ(s3_encode_query_value("run/a b"), "run%2Fa%20b");
  EXPECT_EQ(s3_encode_query_value("tok+en=="), "tok%2Ben%3D%3D");
}

TEST(S3StoreTest, AwsIsVirtualHostedStyle) {
  S3ObjectStore store(credentials(""), "bkt");
  EXPECT_EQ(store.object_url("run/a b.pt"), "https://bkt.s3.eu-west-3.amazonaws.com/run/a%20b.pt");
  EXPECT_EQ(store.object_url(""), "https://bkt.s3.eu-west-3.amazonaws.com/");
}

TEST(S3StoreTest, DottedBucketOnAwsIsPathStyle) {
  // *.s3.REGION.amazonaws.com's certificate does not cover "my.bkt.s3...".
  S3ObjectStore store(credentials(""), "my.bkt");
  EXPECT_EQ(store.object_url("k"), "https://s3.eu-west-3.amazonaws.com/my.bkt/k");
}

TEST(S3StoreTest, EndpointIsPathStyle) {
  S3ObjectStore store(credentials("http://127.0.0.1:9000/"), "bkt");
  EXPECT_EQ(store.object_url("run/a.pt"), "http://127.0.0.1:9000/bkt/run/a.pt");
  EXPECT_EQ(store.object_url(""), "http://127.0.0.1:9000/bkt");  // no '/': it would be signed
  S3ObjectStore cos(credentials("cos.ap-guangzhou.myqcloud.com"), "bkt-1250000000");
  EXPECT_EQ(cos.object_url("x"), "https://cos.ap-guangzhou.myqcloud.com/bkt-1250000000/x");
}

TEST(S3StoreTest, MissingLocalFileIsNotFoundWithoutARequest) {
  // The endpoint is never contacted: nothing listens on port 1.
  S3ObjectStore store(credentials("http://127.0.0.1:1"), "bkt");
  int64_t bytes = -1;
  const Status s = store.put_file("run/a.pt", "/nonexistent/ddplaunch/a.pt", &bytes);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("PUT s3://bkt/run/a.pt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/nonexistent/ddplaunch/a.pt"), std::string::npos) << s.message();
  EXPECT_EQ(bytes, -1);
}

}  // namespace
}  // namespace ddp
