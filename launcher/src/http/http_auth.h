#pragma once
// Who may read the metrics port. A job with a token that must be asked for
// (every multi-node job, any job given --token or DDPLAUNCH_TOKEN, and every
// job of `ddplaunch serve`) is shown only to a request presenting that token,
// as "Authorization: Bearer TOKEN" (scrapers, curl) or "?token=TOKEN" (a
// browser's address bar). A single-node job with a generated token listens
// on loopback only and is open to the machine's users, like its logs.
//
// The token is compared by the job (CoordinatorJob::token_matches, constant
// time) and is never written to a log or an answer.
//
// Threading: pure.

#include <functional>
#include <string>

namespace ddp {

/// The token a request presents: the Bearer credential of its Authorization
/// header (scheme case-insensitive) wins over its token query parameter.
/// Empty: none presented.
std::string presented_token(const std::string& authorization_header, const std::string& token_parameter);

enum class Access {
  kOpen,          // no token needed
  kGranted,       // the right token
  kMissingToken,  // a token is needed and none came
  kWrongToken,    // a token came and it is not the job's
};

/// Whether a request presenting `presented` may see a job; `matches` is the
/// job's own token comparison.
Access check_access(bool token_required, const std::string& presented,
                    const std::function<bool(const std::string&)>& matches);

inline bool allowed(Access a) { return a == Access::kOpen || a == Access::kGranted; }

}  // namespace ddp
