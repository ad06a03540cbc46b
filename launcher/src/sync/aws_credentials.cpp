#include "sync/aws_credentials.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <map>

namespace ddp {
namespace {

using IniSection = std::map<std::string, std::string>;

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  const size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The sections of an AWS ini file: "[name]" headers, "key = value" lines,
// '#' and ';' comments. An indented line continues a nested block (such as
// `s3 =` followed by `  endpoint_url = ...`); its keys are kept as
// "s3.endpoint_url".
std::optional<std::map<std::string, IniSection>> read_ini(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::map<std::string, IniSection> sections;
  std::string section, nested, line;
  while (std::getline(in, line)) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = trim(t.substr(1, t.size() - 2));
      nested.clear();
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    const std::string key = trim(t.substr(0, eq));
    const std::string value = trim(t.substr(eq + 1));
    if (!indented) nested = value.empty() ? key : "";
    sections[section][indented && !nested.empty() ? nested + "." + key : key] = value;
  }
  return sections;
}

std::string home_file(const AwsEnv& env, const char* variable, const char* under_home) {
  if (auto set = env(variable); set && !set->empty()) return *set;
  const auto home = env("HOME");
  return home ? *home + "/" + under_home : std::string();
}

std::string first_set(const AwsEnv& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = env(n); v && !v->empty()) return *v;
  }
  return {};
}

}  // namespace

std::string AwsCredentials::describe() const {
  const std::string& k = access_key_id;
  const std::string shown = k.size() > 8 ? k.substr(0, 4) + "..." + k.substr(k.size() - 4) : std::string("...");
  return fmt::format("key {} from {}", shown, source);
}

std::optional<AwsCredentials> resolve_aws_credentials(const AwsEnv& env, std::string& why) {
  AwsCredentials c;
  const std::string profile = first_set(env, {"AWS_PROFILE"}).empty() ? "default" : first_set(env, {"AWS_PROFILE"});
  const std::string config_path = home_file(env, "AWS_CONFIG_FILE", ".aws/config");
  const auto config = read_ini(config_path);
  // The config file names profiles "profile NAME", except the default one.
  IniSection profile_config;
  if (config) {
    const auto it = config->find(profile == "default" ? "default" : "profile " + profile);
    if (it != config->end()) profile_config = it->second;
  }

  c.access_key_id = first_set(env, {"AWS_ACCESS_KEY_ID"});
  c.secret_access_key = first_set(env, {"AWS_SECRET_ACCESS_KEY"});
  if (!c.access_key_id.empty() || !c.secret_access_key.empty()) {
    if (c.access_key_id.empty() || c.secret_access_key.empty()) {
      why = c.access_key_id.empty() ? "AWS_SECRET_ACCESS_KEY is set without AWS_ACCESS_KEY_ID"
                                    : "AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY";
      return std::nullopt;
    }
    c.session_token = first_set(env, {"AWS_SESSION_TOKEN"});
    c.source = "the environment";
  } else {
    const std::string path = home_file(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    const auto file = read_ini(path);
    IniSection section;
    if (file && file->count(profile)) section = file->at(profile);
    // A profile may keep its keys in the config file instead.
    for (const auto& [k, v] : profile_config) section.emplace(k, v);
    c.access_key_id = section.count("aws_access_key_id") ? section["aws_access_key_id"] : "";
    c.secret_access_key = section.count("aws_secret_access_key") ? section["aws_secret_access_key"] : "";
    c.session_token = section.count("aws_session_token") ? section["aws_session_token"] : "";
    if (c.access_key_id.empty() || c.secret_access_key.empty()) {
      why = !file && !config ? fmt::format("no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and no {}", path)
                             : fmt::format("profile '{}' has no aws_access_key_id and aws_secret_access_key in {} or {}",
                                           profile, path, config_path);
      return std::nullopt;
    }
    c.source = fmt::format("profile {} of {}", profile, file && file->count(profile) ? path : config_path);
  }
  c.region = first_set(env, {"AWS_REGION", "AWS_DEFAULT_REGION"});
  if (c.region.empty() && profile_config.count("region")) c.region = profile_config["region"];
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint_url = first_set(env, {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  for (const char* key : {"s3.endpoint_url", "endpoint_url"}) {
    if (c.endpoint_url.empty() && profile_config.count(key)) c.endpoint_url = profile_config[key];
  }
  return c;
}

AwsEnv process_aws_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
  };
}

}  // namespace ddp
