// S3's XML answers (sync/s3_xml.h): listing pages, a new multipart upload's
// id, error documents; with AWS's namespace, another one, or none.

#include <gtest/gtest.h>

#include "sync/s3_xml.h"

namespace ddp {
namespace {

TEST(S3XmlTest, ListPageWithAwsNamespace) {
  const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bkt</Name><Prefix>run/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <Contents><Key>run/a.pt</Key><LastModified>2024-05-01T10:00:00.000Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1048576</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>run/b &amp; c.pt</Key><Size>0</Size></Contents>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>)";
  std::string why;
  const auto page = parse_list_page(body, why);
  ASSERT_TRUE(page) << why;
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "run/a.pt");
  EXPECT_EQ(page->objects[0].size, 1048576);
  EXPECT_EQ(page->objects[1].key, "run/b & c.pt");
  EXPECT_EQ(page->objects[1].size, 0);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3XmlTest, LastListPageWithAnotherNamespaceAndUtf8Keys) {
  // The namespace an S3-compatible server sent in place of AWS's.
  const std::string body =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://doc.s3.amazonaws.com/2006-03-01/\"><Name>bkt</Name>"
      "<Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
      "<Contents><Key>caf\xc3\xa9 au lait/\xe6\xa8\xa1\xe5\x9e\x8b.bin</Key><Size>6</Size></Contents>"
      "</ListBucketResult>";
  std::string why;
  const auto page = parse_list_page(body, why);
  ASSERT_TRUE(page) << why;
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "caf\xc3\xa9 au lait/\xe6\xa8\xa1\xe5\x9e\x8b.bin");
  EXPECT_FALSE(page->truncated);
  EXPECT_EQ(page->next_token, "");
}

TEST(S3XmlTest, EmptyListPage) {
  std::string why;
  const auto page = parse_list_page(
      "<ListBucketResult><Name>bkt</Name><Prefix>none/</Prefix><KeyCount>0</KeyCount>"
      "<IsTruncated>false</IsTruncated></ListBucketResult>",
      why);
  ASSERT_TRUE(page) << why;
  EXPECT_TRUE(page->objects.empty());
  EXPECT_FALSE(page->truncated);
}

TEST(S3XmlTest, ListPageRejectsWhatIsNotOne) {
  std::string why;
  EXPECT_FALSE(parse_list_page("", why));
  EXPECT_FALSE(parse_list_page("<html><body>502 Bad Gateway</body></html>", why));
  EXPECT_NE(why, "");
  EXPECT_FALSE(parse_list_page("<ListBucketResult><Contents><Key>a", why));  // cut short
  why.clear();
  EXPECT_FALSE(parse_list_page("<ListBucketResult><Contents><Key>a</Key><Size>big</Size></Contents>"
                               "</ListBucketResult>",
                               why));
  EXPECT_NE(why.find("Size"), std::string::npos) << why;
  EXPECT_FALSE(parse_list_page("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", why));
}

TEST(S3XmlTest, UploadId) {
  const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>bkt</Bucket><Key>run/big.pt</Key>
  <UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
</InitiateMultipartUploadResult>)";
  EXPECT_EQ(parse_upload_id(body), "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
  EXPECT_FALSE(parse_upload_id("<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>"));
  EXPECT_FALSE(parse_upload_id("<Error><Code>AccessDenied</Code></Error>"));
  EXPECT_FALSE(parse_upload_id("not xml"));
}

TEST(S3XmlTest, ErrorCodeAndMessage) {
  const std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided. Check your key and signing method.</Message><AWSAccessKeyId>AKIAEXAMPLE</AWSAccessKeyId><RequestId>4442587FB7D0A2F9</RequestId></Error>)";
  const auto error = parse_error(body);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "SignatureDoesNotMatch");
  EXPECT_EQ(error->message,
            "The request signature we calculated does not match the signature you provided. Check your key and "
            "signing method.");
}

TEST(S3XmlTest, ErrorInsideA200CompleteAnswer) {
  // CompleteMultipartUpload may answer 200 and fail in the body.
  const auto error = parse_error(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error><Code>InternalError</Code>"
      "<Message>We encountered an internal error. Please try again.</Message></Error>");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "InternalError");
}

TEST(S3XmlTest, ErrorIsOnlyAnErrorDocument) {
  EXPECT_FALSE(parse_error(""));
  EXPECT_FALSE(parse_error("<CompleteMultipartUploadResult><Key>a</Key></CompleteMultipartUploadResult>"));
  EXPECT_FALSE(parse_error("<html><body>403 Forbidden</body></html>"));
  const auto bare = parse_error("<Error><Code>NoSuchBucket</Code></Error>");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->code, "NoSuchBucket");
  EXPECT_EQ(bare->message, "");
}

TEST(S3XmlTest, NoExternalEntities) {
  // A hostile body cannot make the parser read local files.
  const auto error = parse_error(
      "<?xml version=\"1.0\"?><!DOCTYPE Error [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
      "<Error><Code>X</Code><Message>&x;</Message></Error>");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "X");
  EXPECT_EQ(error->message.find("root:"), std::string::npos);
}

std::string repeated(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

TEST(S3XmlTest, InternalEntitiesAreNotExpanded) {
  // Two levels of entities in a DTD made this 7 KB body a message of 10^9
  // characters (about 2 GB of memory) when entity references were expanded.
  const std::string body = "<?xml version=\"1.0\"?><!DOCTYPE Error [<!ENTITY a \"" + repeated("x", 1000) +
                           "\"><!ENTITY b \"" + repeated("&a;", 1000) + "\">]><Error><Code>X</Code>" +
                           "<Message>Slow &amp; " + repeated("&b;", 1000) + "down</Message></Error>";
  const auto error = parse_error(body);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, "X");
  ASSERT_LT(error->message.size(), body.size());  // not a gigabyte in the failure message
  EXPECT_EQ(error->message, "Slow & down");
}

}  // namespace
}  // namespace ddp
