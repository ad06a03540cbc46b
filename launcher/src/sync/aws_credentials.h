#pragma once
// Where `--sync` finds the bucket's credentials, region and endpoint: the
// standard places every S3 tool reads, in the same order.
//   1. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
//   2. else the profile AWS_PROFILE (default "default") of the shared
//      credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials).
// Region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in the
// config file (AWS_CONFIG_FILE, else ~/.aws/config), else us-east-1.
// Endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
// `endpoint_url`, else AWS S3 itself (a COS, MinIO or Ceph bucket is reached
// by giving its S3 endpoint).
//
// Threading: free functions; files are read on each call.

#include <functional>
#include <optional>
#include <string>

namespace ddp {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;  // never logged
  std::string session_token;      // never logged
  std::string region;
  std::string endpoint_url;       // empty: https://s3.<region>.amazonaws.com
  std::string source;             // "environment", "profile dev of /home/u/.aws/credentials"

  /// For messages: the key id with its middle hidden, and where it came from.
  std::string describe() const;
};

/// Reads an environment variable; nullopt when unset.
using AwsEnv = std::function<std::optional<std::string>(const char* name)>;
/// This process's environment (std::getenv), as an AwsEnv.
AwsEnv process_aws_env();

/// The credentials, or nullopt with `why` (one clause: none found, a
/// profile missing from the file, a key without its secret).
std::optional<AwsCredentials> resolve_aws_credentials(const AwsEnv& env, std::string& why);

}  // namespace ddp
