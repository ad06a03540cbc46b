#include "http/http_auth.h"

#include <cctype>

namespace ddp {
namespace {

std::string trimmed(const std::string& s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

bool starts_with_scheme(const std::string& header, const std::string& scheme) {
  if (header.size() <= scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i]) return false;
  }
  return header[scheme.size()] == ' ' || header[scheme.size()] == '\t';
}

}  // namespace

std::string presented_token(const std::string& authorization_header, const std::string& token_parameter) {
  const std::string header = trimmed(authorization_header);
  if (starts_with_scheme(header, "bearer")) {
    const std::string credential = trimmed(header.substr(6));
    if (!credential.empty()) return credential;
  }
  return token_parameter;
}

Access check_access(bool token_required, const std::string& presented,
                    const std::function<bool(const std::string&)>& matches) {
  if (!token_required) return Access::kOpen;
  if (presented.empty()) return Access::kMissingToken;
  return matches(presented) ? Access::kGranted : Access::kWrongToken;
}

}  // namespace ddp
