#pragma once
// A bucket in memory for the unit tests of --sync (sync/object_store.h): it
// holds objects in a map, and can be made to fail as a bucket that is down.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "sync/object_store.h"

namespace ddp {

class MemoryStore : public ObjectStore {
 public:
  Status put_file(const std::string& key, const std::string& local_path, int64_t* bytes) override {
    ++attempts;
    if (down) return Status(StatusCode::kUnavailable, "bucket down");
    std::ifstream in(local_path, std::ios::binary);
    if (!in) return Status(StatusCode::kNotFound, local_path + ": no such file");
    objects[key] = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    *bytes = static_cast<int64_t>(objects[key].size());
    return Status::Ok();
  }
  Status delete_object(const std::string& key) override {
    objects.erase(key);
    return Status::Ok();
  }
  Status list_objects(const std::string& prefix, size_t limit, std::vector<StoredObject>* out) override {
    if (down) return Status(StatusCode::kUnavailable, "bucket down");
    out->clear();
    for (const auto& [key, data] : objects) {
      if (key.compare(0, prefix.size(), prefix) != 0) continue;
      if (limit != 0 && out->size() == limit) break;
      out->push_back({key, static_cast<int64_t>(data.size())});
    }
    return Status::Ok();
  }
  Status get_file(const std::string& key, const std::string& local_path, int64_t* bytes) override {
    auto it = objects.find(key);
    if (it == objects.end()) return Status(StatusCode::kNotFound, key + ": no such object");
    std::filesystem::create_directories(std::filesystem::path(local_path).parent_path());
    std::ofstream(local_path, std::ios::binary) << it->second;
    *bytes = static_cast<int64_t>(it->second.size());
    return Status::Ok();
  }
  std::map<std::string, std::string> objects;
  int attempts = 0;
  bool down = false;
};

// Hands a store that the test keeps to code that wants to own one.
class StoreRef : public ObjectStore {
 public:
  explicit StoreRef(ObjectStore& store) : store_(store) {}
  Status put_file(const std::string& key, const std::string& path, int64_t* bytes) override {
    return store_.put_file(key, path, bytes);
  }
  Status delete_object(const std::string& key) override { return store_.delete_object(key); }
  Status list_objects(const std::string& prefix, size_t limit, std::vector<StoredObject>* out) override {
    return store_.list_objects(prefix, limit, out);
  }
  Status get_file(const std::string& key, const std::string& path, int64_t* bytes) override {
    return store_.get_file(key, path, bytes);
  }

 private:
  ObjectStore& store_;
};

}  // namespace ddp
