#pragma once
// ObjectStore over the S3 REST API: AWS S3 itself, or any S3-compatible
// endpoint (Tencent COS, MinIO, Ceph RGW, GCS interop). Requests go through
// libcurl, which signs them (SigV4, CURLOPT_AWS_SIGV4); answers are parsed in
// sync/s3_xml.h.
//
// Addressing: without an endpoint, AWS virtual-hosted style
// https://BUCKET.s3.REGION.amazonaws.com/KEY; with one (credentials'
// endpoint_url), path style ENDPOINT/BUCKET/KEY, which every S3-compatible
// server accepts.
//
// Errors: one clause naming the operation and object, then the HTTP code
// and S3's <Code>: <Message>, or curl's reason when no answer came, e.g.
//   PUT s3://bkt/run/a.pt: HTTP 403 SignatureDoesNotMatch: The request ...
//   GET s3://bkt/run/a.pt: cannot connect to http://127.0.0.1:9000: ...
// The secret key and session token never appear in messages. Codes:
//   kUnavailable        no connection, a timeout or transfer error, HTTP 5xx,
//                       408, 429, 400 RequestTimeout (worth retrying);
//   kPermissionDenied   HTTP 403 (a wrong secret, a key without the right);
//   kUnauthenticated    HTTP 401, or 400 with an expired or invalid token;
//   kNotFound           put_file: the local file is gone (nothing to retry);
//                       get_file: no such object (404 other than NoSuchBucket);
//   kFailedPrecondition a missing bucket (404 NoSuchBucket), a redirect (the
//                       bucket is in another region), other 4xx, a local file
//                       that cannot be read or written;
//   kInvalidArgument    other HTTP 400 (a malformed request);
//   kInternal           an answer S3 should not give (unparsable XML, a
//                       multipart upload without UploadId or part ETag).
//
// Ownership and threading: an S3ObjectStore owns one curl handle, reused from
// request to request so that connections are kept alive; it is used by one
// thread at a time. Any number of stores may live in different threads.
// curl_global_init runs once, on the first store's construction.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sync/aws_credentials.h"
#include "sync/object_store.h"

namespace ddp {

struct S3Request;   // one HTTP exchange, defined in s3_store.cpp
struct S3Response;

struct S3StoreOptions {
  /// Files larger than this go up as multipart uploads of parts this size
  /// (the last one smaller). AWS wants parts of at least 5 MiB and at most
  /// 10,000 of them: for a file over 10,000 parts the part size grows.
  int64_t part_size = 8 << 20;
  long connect_timeout_s = 10;
  /// The longest one request (one part, one small file) may take.
  long request_timeout_s = 600;
  /// A transfer slower than this many bytes per second for low_speed_time_s
  /// is abandoned as stalled (0: never).
  long low_speed_bytes_per_s = 1024;
  long low_speed_time_s = 60;
  /// Keys asked for per ListObjectsV2 request (S3 gives at most 1000); tests
  /// make it small to page through continuation tokens.
  int list_page_size = 1000;
};

class S3ObjectStore : public ObjectStore {
 public:
  S3ObjectStore(AwsCredentials credentials, std::string bucket, S3StoreOptions options = {});
  ~S3ObjectStore() override;
  S3ObjectStore(const S3ObjectStore&) = delete;
  S3ObjectStore& operator=(const S3ObjectStore&) = delete;

  Status put_file(const std::string& key, const std::string& local_path, int64_t* bytes) override;
  Status delete_object(const std::string& key) override;
  Status list_objects(const std::string& prefix, size_t limit, std::vector<StoredObject>* out) override;
  Status get_file(const std::string& key, const std::string& local_path, int64_t* bytes) override;

  /// The URL of object `key` (empty: of the bucket), key percent-encoded.
  std::string object_url(const std::string& key) const;

 private:
  S3Response perform(const S3Request& request);
  Status failure(const std::string& what, const S3Response& response) const;
  Status put_single(const std::string& key, int fd, int64_t size);
  Status put_multipart(const std::string& key, int fd, int64_t size);
  std::string describe(const std::string& key) const;

  AwsCredentials credentials_;
  std::string bucket_;
  S3StoreOptions options_;
  std::string base_url_;  // ".../BUCKET" (path style) or "https://BUCKET.s3..." (virtual-hosted)
  std::string origin_;    // scheme://host[:port], for messages
  void* curl_ = nullptr;  // CURL*, kept out of this header
};

/// Percent-encodes an object key for the URL path: every byte except
/// A-Z a-z 0-9 - _ . ~ and '/' becomes %XX (uppercase hex), as SigV4's
/// canonical URI wants.
std::string s3_encode_key(const std::string& key);
/// Percent-encodes a query parameter's name or value ('/' encoded too).
std::string s3_encode_query_value(const std::string& value);

}  // namespace ddp
