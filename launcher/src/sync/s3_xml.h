#pragma once
// The XML documents S3 answers with, read through libxml2: a ListObjectsV2
// page, the UploadId of a new multipart upload, and an <Error>'s Code and
// Message. Elements are matched by local name, whatever their namespace:
// AWS uses xmlns="http://s3.amazonaws.com/doc/2006-03-01/", other S3 servers
// another or none.
//
// Threading: free functions over their arguments; safe from any thread
// (libxml2's global parser state is initialized once, on first use).

#include <optional>
#include <string>
#include <vector>

#include "sync/object_store.h"

namespace ddp {

struct S3ListPage {
  std::vector<StoredObject> objects;  // in the order the server listed them
  bool truncated = false;             // <IsTruncated>true: ask for the next page
  std::string next_token;             // <NextContinuationToken>, when truncated
};

/// A <ListBucketResult> document; nullopt with `why` for a body that is not
/// XML, another document, or a <Contents> without a <Key> or a numeric <Size>.
std::optional<S3ListPage> parse_list_page(const std::string& body, std::string& why);

/// The <UploadId> of an <InitiateMultipartUploadResult>; nullopt if absent
/// or empty.
std::optional<std::string> parse_upload_id(const std::string& body);

struct S3ErrorBody {
  std::string code;     // "NoSuchKey", "SignatureDoesNotMatch", ...
  std::string message;  // the server's sentence
};

/// The Code and Message of an <Error> document; nullopt for any other body
/// (empty, HTML from a proxy, a result document).
std::optional<S3ErrorBody> parse_error(const std::string& body);

}  // namespace ddp
