// libFuzzer target for the S3 answers read in sync/s3_xml.h: the bytes are a
// response body, fed to the listing, upload-id and error parsers.
// Invariants: a refused listing says why; sizes are never negative; no parser
// returns more than 3 bytes of text per byte of body (a declared encoding's
// conversion to UTF-8 at most triples it; entities must not expand it); and
// what a parser accepted, written back as S3 would send it, parses to the
// same value.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_check.h"
#include "sync/s3_xml.h"

namespace {

// Text per byte of body: UTF-16 to UTF-8 turns 2 bytes into at most 3, and
// Latin-1 turns 1 into 2.
constexpr std::size_t kMaxGrowth = 3;

// Element text, escaped so that libxml2 reads back the same bytes (a bare CR
// would come back as LF).
std::string escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\r': out += "&#13;"; break;
      default: out += c;
    }
  }
  return out;
}

void check_list_page(const std::string& body) {
  std::string why;
  const std::optional<ddp::S3ListPage> page = ddp::parse_list_page(body, why);
  if (!page) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  std::size_t text = page->next_token.size();
  std::string written = "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (const ddp::StoredObject& o : page->objects) {
    FUZZ_CHECK(o.size >= 0);
    text += o.key.size();
    written += "<Contents><Key>" + escaped(o.key) + "</Key><Size>" + std::to_string(o.size) + "</Size></Contents>";
  }
  FUZZ_CHECK(text <= kMaxGrowth * body.size());
  written += std::string("<IsTruncated>") + (page->truncated ? "true" : "false") + "</IsTruncated>";
  written += "<NextContinuationToken>" + escaped(page->next_token) + "</NextContinuationToken></ListBucketResult>";
  const std::optional<ddp::S3ListPage> again = ddp::parse_list_page(written, why);
  FUZZ_CHECK(again && again->truncated == page->truncated && again->next_token == page->next_token &&
             again->objects.size() == page->objects.size());
  for (std::size_t i = 0; i < page->objects.size(); ++i) {
    FUZZ_CHECK(again->objects[i].key == page->objects[i].key && again->objects[i].size == page->objects[i].size);
  }
}

void check_upload_id(const std::string& body) {
  const std::optional<std::string> id = ddp::parse_upload_id(body);
  if (!id) return;
  FUZZ_CHECK(!id->empty() && id->size() <= kMaxGrowth * body.size());
  const std::optional<std::string> again = ddp::parse_upload_id(
      "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>" + escaped(*id) +
      "</UploadId></InitiateMultipartUploadResult>");
  FUZZ_CHECK(again == id);
}

void check_error(const std::string& body) {
  const std::optional<ddp::S3ErrorBody> error = ddp::parse_error(body);
  if (!error) return;
  FUZZ_CHECK(error->code.size() + error->message.size() <= kMaxGrowth * body.size());
  const std::optional<ddp::S3ErrorBody> again = ddp::parse_error(
      "<Error><Code>" + escaped(error->code) + "</Code><Message>" + escaped(error->message) + "</Message></Error>");
  FUZZ_CHECK(again && again->code == error->code && again->message == error->message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  check_list_page(body);
  check_upload_id(body);
  check_error(body);
  return 0;
}
