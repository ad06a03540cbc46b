#include "doctor/sync_checks.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "sync/s3_store.h"

namespace ddp {
namespace {

// The probe's content: an empty regular file of our own, removed after.
class EmptyFile {
 public:
  EmptyFile() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ddplaunch-doctor-XXXXXX").string();
    const int fd = mkstemp(tmpl.data());
    if (fd >= 0) {
      close(fd);
      path_ = tmpl;
    }
  }
  ~EmptyFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  EmptyFile(const EmptyFile&) = delete;
  EmptyFile& operator=(const EmptyFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

std::vector<CheckResult> sync_checks(const std::vector<SyncTarget>& targets, const AwsEnv& env,
                                     const SyncStoreFactory& make_store, const std::string& probe_name) {
  std::vector<CheckResult> results;
  if (targets.empty()) return results;
  std::string why;
  const std::optional<AwsCredentials> credentials = resolve_aws_credentials(env, why);
  if (!credentials) {
    results.push_back({"sync credentials", CheckLevel::kFail, why});
    return results;
  }
  const EmptyFile empty_file;
  results.push_back({"sync credentials", CheckLevel::kOk,
                     fmt::format("{}, region {}, endpoint {}", credentials->describe(), credentials->region,
                                 credentials->endpoint_url.empty() ? "AWS S3" : credentials->endpoint_url)});
  for (const SyncTarget& target : targets) {
    const std::string name = fmt::format("sync {}", describe(target));
    std::unique_ptr<ObjectStore> store = make_store(*credentials, target);
    std::vector<StoredObject> listed;
    if (Status s = store->list_objects(target.prefix, 1, &listed); !s.ok()) {
      results.push_back({name, CheckLevel::kFail, fmt::format("cannot list: {}", s.message())});
      continue;
    }
    // A write proves what uploads need; the probe is empty and goes at once.
    const std::string probe_key = target.prefix + probe_name;
    int64_t bytes = 0;
    if (Status s = store->put_file(probe_key, empty_file.path(), &bytes); !s.ok()) {
      results.push_back({name, CheckLevel::kFail, fmt::format("can list, cannot write: {}", s.message())});
      continue;
    }
    if (Status s = store->delete_object(probe_key); !s.ok()) {
      results.push_back({name, CheckLevel::kWarn,
                         fmt::format("can list and write, but cannot delete ({}): --sync-delete would fail, and "
                                     "the probe object {} is left there",
                                     s.message(), probe_key)});
      continue;
    }
    results.push_back({name, CheckLevel::kOk,
                       fmt::format("can list, write and delete; the prefix {}", listed.empty() ? "is empty"
                                                                                               : "holds objects")});
  }
  return results;
}

std::vector<CheckResult> sync_checks(const std::vector<SyncTarget>& targets) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return sync_checks(
      targets,
      process_aws_env(),
      [](const AwsCredentials& credentials, const SyncTarget& target) -> std::unique_ptr<ObjectStore> {
        S3StoreOptions options;
        options.connect_timeout_s = 3;
        options.request_timeout_s = 20;
        return std::make_unique<S3ObjectStore>(credentials, target.bucket, options);
      },
      fmt::format(".ddplaunch-doctor-{}-{}", host, getpid()));
}

}  // namespace ddp
