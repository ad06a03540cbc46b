#include "sync/s3_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace ddp {
namespace {

struct DocFree {
  void operator()(xmlDoc* d) const { xmlFreeDoc(d); }
};
using Doc = std::unique_ptr<xmlDoc, DocFree>;

// Parses `body` quietly: no network access, no entity substitution (see
// text()), no messages on stderr (a bad answer becomes a Status, not noise in
// the job's output).
Doc read_xml(const std::string& body) {
  static const bool initialized = [] {
    xmlInitParser();
    return true;
  }();
  (void)initialized;
  if (body.empty()) return nullptr;
  return Doc(xmlReadMemory(body.data(), static_cast<int>(body.size()), "s3.xml", nullptr,
                           XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
}

bool named(const xmlNode* n, const char* local_name) {
  return n->type == XML_ELEMENT_NODE && std::strcmp(reinterpret_cast<const char*>(n->name), local_name) == 0;
}

const xmlNode* root_named(const Doc& doc, const char* local_name) {
  if (!doc) return nullptr;
  const xmlNode* root = xmlDocGetRootElement(doc.get());
  return root != nullptr && named(root, local_name) ? root : nullptr;
}

const xmlNode* child(const xmlNode* parent, const char* local_name) {
  for (const xmlNode* c = parent->children; c != nullptr; c = c->next) {
    if (named(c, local_name)) return c;
  }
  return nullptr;
}

// The text of an element (&quot;, &#13; and the like decoded), "" if none.
// Only its text and CDATA children count: a reference to an entity of the
// document's own DTD is left out, not expanded (xmlNodeGetContent would), as
// S3 sends no DTD and a hostile one blows a few kilobytes up to gigabytes.
std::string text(const xmlNode* n) {
  if (n == nullptr) return {};
  std::string s;
  for (const xmlNode* c = n->children; c != nullptr; c = c->next) {
    if ((c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) && c->content != nullptr) {
      s += reinterpret_cast<const char*>(c->content);
    }
  }
  return s;
}

std::optional<int64_t> to_int64(const std::string& s) {
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<S3ListPage> parse_list_page(const std::string& body, std::string& why) {
  const Doc doc = read_xml(body);
  if (!doc) {
    why = "the listing is not XML";
    return std::nullopt;
  }
  const xmlNode* root = root_named(doc, "ListBucketResult");
  if (root == nullptr) {
    why = "the listing is not a ListBucketResult document";
    return std::nullopt;
  }
  S3ListPage page;
  for (const xmlNode* c = root->children; c != nullptr; c = c->next) {
    if (!named(c, "Contents")) continue;
    const xmlNode* key = child(c, "Key");
    const auto size = to_int64(text(child(c, "Size")));
    if (key == nullptr || !size) {
      why = "a listed object has no Key or no numeric Size";
      return std::nullopt;
    }
    page.objects.push_back({text(key), *size});
  }
  page.truncated = text(child(root, "IsTruncated")) == "true";
  page.next_token = text(child(root, "NextContinuationToken"));
  return page;
}

std::optional<std::string> parse_upload_id(const std::string& body) {
  const Doc doc = read_xml(body);
  const xmlNode* root = root_named(doc, "InitiateMultipartUploadResult");
  if (root == nullptr) return std::nullopt;
  std::string id = text(child(root, "UploadId"));
  if (id.empty()) return std::nullopt;
  return id;
}

std::optional<S3ErrorBody> parse_error(const std::string& body) {
  const Doc doc = read_xml(body);
  const xmlNode* root = root_named(doc, "Error");
  if (root == nullptr) return std::nullopt;
  return S3ErrorBody{text(child(root, "Code")), text(child(root, "Message"))};
}

}  // namespace ddp
