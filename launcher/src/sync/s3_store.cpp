#include "sync/s3_store.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "ddp/common/unique_fd.h"
#include "sync/s3_xml.h"

namespace ddp {
namespace {

// Bodies kept in memory: errors and listings (a page of 1000 long keys is a
// few MB). Anything bigger is not an answer this client asked for.
constexpr size_t kMaxBodyBytes = 64 << 20;
// AWS refuses a multipart upload of more parts than this.
constexpr int64_t kMaxParts = 10000;

CURL* handle(void* p) { return static_cast<CURL*>(p); }

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

std::string percent_encode(const std::string& s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// S3's messages may span lines; a Status is one line.
std::string one_line(std::string s) {
  std::replace_if(s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  const size_t b = s.find_first_not_of(' ');
  const size_t e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void replace_all(std::string& s, const std::string& what, const std::string& with) {
  if (what.empty()) return;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size())) {
    s.replace(at, what.size(), with);
  }
}

bool iequals_prefix(const char* data, size_t n, const char* prefix) {
  const size_t p = std::strlen(prefix);
  if (n < p) return false;
  for (size_t i = 0; i < p; ++i) {
    if (std::tolower(static_cast<unsigned char>(data[i])) != prefix[i]) return false;
  }
  return true;
}

// Which StatusCode an S3 answer maps to (see s3_store.h); the S3 <Code>
// decides first, since S3 sends some retryable errors as 200 or 400.
StatusCode classify(long http, const std::string& code) {
  if (code == "RequestTimeout" || code == "SlowDown" || code == "InternalError" || code == "ServiceUnavailable")
    return StatusCode::kUnavailable;
  if (code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired")
    return StatusCode::kUnauthenticated;
  if (code == "NoSuchBucket") return StatusCode::kFailedPrecondition;
  if (http >= 500 || http == 408 || http == 429) return StatusCode::kUnavailable;
  if (http == 401) return StatusCode::kUnauthenticated;
  if (http == 403) return StatusCode::kPermissionDenied;
  if (http == 400) return StatusCode::kInvalidArgument;
  return StatusCode::kFailedPrecondition;
}

struct SlistFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// The request body: a slice of a local file, read with pread so that a
// multipart upload reads each part from its own offset.
struct FileSlice {
  int fd = -1;
  int64_t start = 0;
  int64_t length = 0;
  int64_t pos = 0;
  int read_errno = 0;
  bool shrank = false;
};

size_t read_slice(char* buffer, size_t size, size_t n, void* p) {
  auto* s = static_cast<FileSlice*>(p);
  const size_t want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(size * n), s->length - s->pos));
  if (want == 0) return 0;
  ssize_t got;
  do {
    got = ::pread(s->fd, buffer, want, s->start + s->pos);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    s->read_errno = errno;
    return CURL_READFUNC_ABORT;
  }
  if (got == 0) {  // the file is shorter than when it was measured
    s->shrank = true;
    return CURL_READFUNC_ABORT;
  }
  s->pos += got;
  return static_cast<size_t>(got);
}

// curl rewinds the body when it must send it again (an authentication or
// redirect round trip on a reused connection).
int seek_slice(void* p, curl_off_t offset, int origin) {
  auto* s = static_cast<FileSlice*>(p);
  if (origin != SEEK_SET || offset < 0 || offset > s->length) return CURL_SEEKFUNC_FAIL;
  s->pos = offset;
  return CURL_SEEKFUNC_OK;
}

}  // namespace

struct S3Request {
  const char* method = "GET";
  std::string key;                     // empty: the bucket
  std::string query;                   // sorted by name, encoded, without '?'
  const std::string* body = nullptr;   // POST: sent as is
  const char* content_type = nullptr;  // set (and signed) when given
  int upload_fd = -1;                  // PUT: the slice [upload_offset, +upload_length)
  int64_t upload_offset = 0;
  int64_t upload_length = 0;
  int download_fd = -1;                // GET: a 2xx body goes here, not into S3Response::body
};

struct S3Response {
  CURLcode curl = CURLE_OK;
  std::string curl_error;  // curl's error buffer: the detail behind `curl`
  long http = 0;
  std::string body;
  std::string etag;
  int64_t downloaded = 0;
  int local_errno = 0;     // reading the upload or writing the download failed
  bool local_shrank = false;
  bool body_too_large = false;
};

namespace {

// Where an answer's body goes: a 2xx body of a download to its file, any
// other into memory (capped).
struct Sink {
  CURL* curl;
  S3Response* response;
  int fd;
};

size_t write_body(char* data, size_t size, size_t n, void* p) {
  auto* sink = static_cast<Sink*>(p);
  const size_t total = size * n;
  long http = 0;
  curl_easy_getinfo(sink->curl, CURLINFO_RESPONSE_CODE, &http);
  if (sink->fd >= 0 && http / 100 == 2) {
    for (size_t done = 0; done < total;) {
      const ssize_t w = ::write(sink->fd, data + done, total - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        sink->response->local_errno = errno;
        return 0;  // curl stops with CURLE_WRITE_ERROR
      }
      done += static_cast<size_t>(w);
    }
    sink->response->downloaded += static_cast<int64_t>(total);
    return total;
  }
  if (sink->response->body.size() + total > kMaxBodyBytes) {
    sink->response->body_too_large = true;
    return 0;
  }
  sink->response->body.append(data, total);
  return total;
}

size_t read_header(char* data, size_t size, size_t n, void* p) {
  auto* response = static_cast<S3Response*>(p);
  const size_t total = size * n;
  if (iequals_prefix(data, total, "http/")) {
    response->etag.clear();  // a new answer (after "100 Continue")
  } else if (iequals_prefix(data, total, "etag:")) {
    std::string value(data + 5, total - 5);
    const size_t b = value.find_first_not_of(" \t");
    const size_t e = value.find_last_not_of(" \t\r\n");
    response->etag = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  }
  return total;
}

}  // namespace

std::string s3_encode_key(const std::string& key) { return percent_encode(key, true); }

std::string s3_encode_query_value(const std::string& value) { return percent_encode(value, false); }

S3ObjectStore::S3ObjectStore(AwsCredentials credentials, std::string bucket, S3StoreOptions options)
    : credentials_(std::move(credentials)), bucket_(std::move(bucket)), options_(options) {
  static const CURLcode global_init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global_init == CURLE_OK) curl_ = curl_easy_init();
  if (credentials_.region.empty()) credentials_.region = "us-east-1";
  if (options_.part_size <= 0) options_.part_size = S3StoreOptions{}.part_size;

  std::string endpoint = credentials_.endpoint_url;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (!endpoint.empty()) {
    if (endpoint.find("://") == std::string::npos) endpoint = "https://" + endpoint;
    origin_ = endpoint;
    base_url_ = endpoint + "/" + bucket_;
  } else if (bucket_.find('.') != std::string::npos) {
    // A dotted bucket name breaks the TLS wildcard *.s3.REGION.amazonaws.com.
    origin_ = "https://s3." + credentials_.region + ".amazonaws.com";
    base_url_ = origin_ + "/" + bucket_;
  } else {
    origin_ = "https://" + bucket_ + ".s3." + credentials_.region + ".amazonaws.com";
    base_url_ = origin_;
  }
}

S3ObjectStore::~S3ObjectStore() {
  if (curl_ != nullptr) curl_easy_cleanup(handle(curl_));
}

std::string S3ObjectStore::object_url(const std::string& key) const {
  // Path style: the bucket is "/BUCKET", with no trailing '/', which the
  // server would count as part of the signed path.
  if (key.empty()) return base_url_ == origin_ ? base_url_ + "/" : base_url_;
  return base_url_ + "/" + s3_encode_key(key);
}

std::string S3ObjectStore::describe(const std::string& key) const { return "s3://" + bucket_ + "/" + key; }

S3Response S3ObjectStore::perform(const S3Request& request) {
  S3Response response;
  CURL* h = handle(curl_);
  if (h == nullptr) {
    response.curl = CURLE_FAILED_INIT;
    response.curl_error = "cannot initialize libcurl";
    return response;
  }
  curl_easy_reset(h);
  char error_buffer[CURL_ERROR_SIZE] = {0};
  const std::string url = object_url(request.key) + (request.query.empty() ? "" : "?" + request.query);
  const std::string sigv4 = "aws:amz:" + credentials_.region + ":s3";

  // Headers curl signs along with Host and x-amz-date. S3 insists on the
  // payload hash header; UNSIGNED-PAYLOAD leaves the body out of the
  // signature (TLS protects it), so a file is streamed, not read twice.
  std::unique_ptr<curl_slist, SlistFree> headers;
  auto add_header = [&headers](const std::string& line) {
    // curl_slist_append returns the list's head, or null (list unchanged) when out of memory.
    if (curl_slist* head = curl_slist_append(headers.get(), line.c_str()); head != headers.get()) {
      if (head != nullptr) headers.reset(head);
    }
  };
  add_header("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!credentials_.session_token.empty()) add_header("x-amz-security-token: " + credentials_.session_token);
  if (request.content_type != nullptr) add_header(std::string("Content-Type: ") + request.content_type);

  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: other threads run beside
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);  // a key may hold "../": send it, do not squash it
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, credentials_.access_key_id.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, credentials_.secret_access_key.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, options_.request_timeout_s);
  if (options_.low_speed_bytes_per_s > 0 && options_.low_speed_time_s > 0) {
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_bytes_per_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, options_.low_speed_time_s);
  }

  Sink sink{h, &response, request.download_fd};
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, read_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &response);

  FileSlice slice{request.upload_fd, request.upload_offset, request.upload_length};
  const std::string method = request.method;
  if (method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, read_slice);
    curl_easy_setopt(h, CURLOPT_READDATA, &slice);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_slice);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &slice);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.upload_length));
  } else if (method == "POST") {
    static const std::string kEmpty;
    const std::string& body = request.body != nullptr ? *request.body : kEmpty;
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  } else if (method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method);
  }

  response.curl = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.http);
  response.curl_error = error_buffer;
  if (slice.read_errno != 0) response.local_errno = slice.read_errno;
  response.local_shrank = slice.shrank;
  // The buffers above die with this frame: curl must not keep pointers to them.
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  return response;
}

Status S3ObjectStore::failure(const std::string& what, const S3Response& response) const {
  StatusCode code;
  std::string detail;
  if (response.body_too_large) {
    code = StatusCode::kInternal;
    detail = fmt::format("HTTP {}: an answer of over {} MiB", response.http, kMaxBodyBytes >> 20);
  } else if (response.curl != CURLE_OK) {
    // curl's reason, and its error buffer's detail when that says more
    // ("Failed to connect to ... after 0 ms: Couldn't connect to server" does not).
    const std::string reason = curl_easy_strerror(response.curl);
    const std::string buffer = one_line(response.curl_error);
    const bool says_more = !buffer.empty() && buffer != reason &&
                           !(buffer.size() > reason.size() && buffer.compare(buffer.size() - reason.size(), reason.size(), reason) == 0);
    const std::string more = says_more ? " (" + buffer + ")" : "";
    switch (response.curl) {
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
      case CURLE_COULDNT_CONNECT:
        code = StatusCode::kUnavailable;
        detail = fmt::format("cannot connect to {}: {}{}", origin_, reason, more);
        break;
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
      case CURLE_FAILED_INIT:
        code = StatusCode::kFailedPrecondition;  // trying again will not help
        detail = fmt::format("{}: {}{}", origin_, reason, more);
        break;
      case CURLE_OPERATION_TIMEDOUT:
      default:
        code = StatusCode::kUnavailable;
        detail = fmt::format("{}: {}{}", origin_, reason, more);
        break;
    }
  } else {
    const auto error = parse_error(response.body);
    code = classify(response.http, error ? error->code : "");
    detail = fmt::format("HTTP {}", response.http);
    if (error && !error->code.empty()) detail += " " + one_line(error->code);
    if (error && !error->message.empty()) detail += ": " + one_line(error->message);
  }
  std::string message = what + ": " + detail;
  // Never the secrets, even if a server or proxy echoed them back.
  replace_all(message, credentials_.secret_access_key, "<secret>");
  replace_all(message, credentials_.session_token, "<token>");
  return Status(code, message);
}

Status S3ObjectStore::put_file(const std::string& key, const std::string& local_path, int64_t* bytes) {
  const std::string what = "PUT " + describe(key);
  UniqueFd fd(::open(local_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    return Status(e == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                  fmt::format("{}: cannot open {}: {}", what, local_path, std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status(StatusCode::kFailedPrecondition, fmt::format("{}: {} is not a regular file", what, local_path));
  }
  const int64_t size = st.st_size;
  Status s = size <= options_.part_size ? put_single(key, fd.get(), size) : put_multipart(key, fd.get(), size);
  if (s.ok() && bytes != nullptr) *bytes = size;
  return s;
}

namespace {

// A failure to read the local file while sending it: not S3's doing.
std::optional<Status> local_read_failure(const std::string& what, const S3Response& r) {
  if (r.local_shrank)
    return Status(StatusCode::kFailedPrecondition, what + ": the local file shrank while it was being sent");
  if (r.local_errno != 0)
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("{}: cannot read the local file: {}", what, std::strerror(r.local_errno)));
  return std::nullopt;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Status S3ObjectStore::put_single(const std::string& key, int fd, int64_t size) {
  const std::string what = "PUT " + describe(key);
  S3Request request;
  request.method = "PUT";
  request.key = key;
  request.content_type = "application/octet-stream";
  request.upload_fd = fd;
  request.upload_length = size;
  const S3Response r = perform(request);
  if (auto local = local_read_failure(what, r)) return *local;
  if (r.curl == CURLE_OK && r.http == 200) return Status::Ok();
  return failure(what, r);
}

Status S3ObjectStore::put_multipart(const std::string& key, int fd, int64_t size) {
  const std::string what = "PUT " + describe(key);
  const int64_t part_size = std::max(options_.part_size, (size + kMaxParts - 1) / kMaxParts);
  const int64_t parts = (size + part_size - 1) / part_size;

  S3Request create;
  create.method = "POST";
  create.key = key;
  create.query = "uploads=";  // SigV4 wants the '=' of a valueless parameter
  create.content_type = "application/octet-stream";  // the object's type, not the (empty) body's
  const S3Response created = perform(create);
  if (created.curl != CURLE_OK || created.http != 200) return failure(what + " (starting a multipart upload)", created);
  const auto upload_id = parse_upload_id(created.body);
  if (!upload_id) {
    return Status(StatusCode::kInternal, what + ": the answer to starting a multipart upload has no UploadId");
  }
  const std::string id_query = "uploadId=" + s3_encode_query_value(*upload_id);

  // Best effort: an abandoned upload's parts would be billed until a
  // lifecycle rule removes them.
  auto abort_upload = [&](Status why) {
    S3Request abort;
    abort.method = "DELETE";
    abort.key = key;
    abort.query = id_query;
    perform(abort);
    return why;
  };

  std::string complete = "<CompleteMultipartUpload>";
  for (int64_t n = 1; n <= parts; ++n) {
    const std::string part_what = fmt::format("{} (part {} of {})", what, n, parts);
    S3Request part;
    part.method = "PUT";
    part.key = key;
    part.query = fmt::format("partNumber={}&{}", n, id_query);  // sorted: partNumber < uploadId
    part.upload_fd = fd;
    part.upload_offset = (n - 1) * part_size;
    part.upload_length = std::min(part_size, size - part.upload_offset);
    const S3Response r = perform(part);
    if (auto local = local_read_failure(part_what, r)) return abort_upload(*local);
    if (r.curl != CURLE_OK || r.http != 200) return abort_upload(failure(part_what, r));
    if (r.etag.empty()) return abort_upload(Status(StatusCode::kInternal, part_what + ": the answer has no ETag"));
    complete += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", n, xml_escape(r.etag));
  }
  complete += "</CompleteMultipartUpload>";

  S3Request finish;
  finish.method = "POST";
  finish.key = key;
  finish.query = id_query;
  finish.body = &complete;
  finish.content_type = "application/xml";
  const S3Response r = perform(finish);
  // S3 may answer 200 and still fail: the error then is the body.
  if (r.curl != CURLE_OK || r.http != 200 || parse_error(r.body)) {
    return abort_upload(failure(what + " (completing the multipart upload)", r));
  }
  return Status::Ok();
}

Status S3ObjectStore::delete_object(const std::string& key) {
  S3Request request;
  request.method = "DELETE";
  request.key = key;
  const S3Response r = perform(request);
  if (r.curl == CURLE_OK && (r.http == 204 || r.http == 200)) return Status::Ok();
  // A missing object is not an error; a missing bucket is.
  if (r.curl == CURLE_OK && r.http == 404) {
    const auto error = parse_error(r.body);
    if (!error || error->code != "NoSuchBucket") return Status::Ok();
  }
  return failure("DELETE " + describe(key), r);
}

Status S3ObjectStore::list_objects(const std::string& prefix, size_t limit, std::vector<StoredObject>* out) {
  const std::string what = "LIST " + describe(prefix);
  out->clear();
  std::string token;
  for (;;) {
    // Parameters sorted by name, as SigV4's canonical query string wants.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + s3_encode_query_value(token) + "&";
    query += "list-type=2";
    size_t page_size = static_cast<size_t>(std::clamp(options_.list_page_size, 1, 1000));
    if (limit != 0) page_size = std::min(page_size, limit - out->size());
    if (limit != 0 || page_size != 1000) query += fmt::format("&max-keys={}", page_size);
    query += "&prefix=" + s3_encode_query_value(prefix);

    S3Request request;
    request.query = query;
    const S3Response r = perform(request);
    if (r.curl != CURLE_OK || r.http != 200) return failure(what, r);
    std::string why;
    auto page = parse_list_page(r.body, why);
    if (!page) return Status(StatusCode::kInternal, what + ": " + why);
    for (auto& object : page->objects) {
      if (limit != 0 && out->size() == limit) return Status::Ok();
      out->push_back(std::move(object));
    }
    if (!page->truncated || (limit != 0 && out->size() == limit)) return Status::Ok();
    if (page->next_token.empty()) {
      return Status(StatusCode::kInternal, what + ": a truncated listing without NextContinuationToken");
    }
    token = page->next_token;
  }
}

Status S3ObjectStore::get_file(const std::string& key, const std::string& local_path, int64_t* bytes) {
  const std::string what = "GET " + describe(key);
  // The pid keeps apart the nodes of one job that download into a shared folder.
  const std::string temp_path = fmt::format("{}.ddplaunch-part.{}", local_path, ::getpid());
  std::error_code ec;
  const auto parent = std::filesystem::path(local_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("{}: cannot create {}: {}", what, parent.string(), ec.message()));
  }
  UniqueFd fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("{}: cannot create {}: {}", what, temp_path, std::strerror(errno)));
  }
  S3Request request;
  request.key = key;
  request.download_fd = fd.get();
  const S3Response r = perform(request);
  const int close_errno = fd.close();

  Status s = Status::Ok();
  if (r.local_errno != 0 || (r.curl == CURLE_OK && close_errno != 0)) {
    s = Status(StatusCode::kFailedPrecondition, fmt::format("{}: cannot write {}: {}", what, temp_path,
                                                            std::strerror(r.local_errno != 0 ? r.local_errno : close_errno)));
  } else if (r.curl != CURLE_OK || r.http != 200) {
    s = failure(what, r);
    const auto error = parse_error(r.body);
    if (r.curl == CURLE_OK && r.http == 404 && !(error && error->code == "NoSuchBucket")) {
      s = Status(StatusCode::kNotFound, s.message());
    }
  } else if (::rename(temp_path.c_str(), local_path.c_str()) != 0) {
    s = Status(StatusCode::kFailedPrecondition,
               fmt::format("{}: cannot rename {} to {}: {}", what, temp_path, local_path, std::strerror(errno)));
  }
  if (!s.ok()) {
    ::unlink(temp_path.c_str());
    return s;
  }
  if (bytes != nullptr) *bytes = r.downloaded;
  return s;
}

}  // namespace ddp
