// s3_store_probe: the --sync S3 client (launcher/src/sync/s3_store.h) from the
// command line, so test_s3_store.py can drive it against a real S3 server.
//
//   s3_store_probe --bucket B [--part-size N] [--page-size N] put KEY FILE
//   s3_store_probe --bucket B get KEY FILE
//   s3_store_probe --bucket B ls PREFIX [--limit N]
//   s3_store_probe --bucket B rm KEY
//
// Credentials, region and endpoint come from the environment and the AWS
// files, as for ddplaunch --sync. Prints "put KEY BYTES", "get KEY BYTES",
// one "SIZE<TAB>KEY" line per listed object, or "rm KEY"; on failure the
// Status (code and message) on stderr and exit status 1; 2 for bad usage.

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "sync/aws_credentials.h"
#include "sync/s3_store.h"

namespace {

int usage(const std::string& why) {
  std::cerr << "s3_store_probe: " << why << "\n"
            << "usage: s3_store_probe --bucket B [--part-size N] [--page-size N] [--limit N]\n"
            << "                      (put KEY FILE | get KEY FILE | ls PREFIX | rm KEY)\n";
  return 2;
}

int fail(const ddp::Status& s) {
  std::cerr << "s3_store_probe: error " << static_cast<int>(s.code()) << ": " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> options;
  std::vector<std::string> words;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return usage(a + " needs a value");
      options[a.substr(2)] = argv[++i];
    } else {
      words.push_back(a);
    }
  }
  for (const auto& [name, value] : options) {
    if (name != "bucket" && name != "part-size" && name != "page-size" && name != "limit")
      return usage("unknown option --" + name);
  }
  if (options["bucket"].empty()) return usage("--bucket is required");
  if (words.empty()) return usage("a command is required");
  const std::string command = words[0];
  const size_t operands = command == "put" || command == "get" ? 2 : 1;
  if (words.size() != operands + 1) return usage(command + ": wrong number of operands");

  std::string why;
  const auto credentials = ddp::resolve_aws_credentials(
      [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
      },
      why);
  if (!credentials) {
    std::cerr << "s3_store_probe: no credentials: " << why << "\n";
    return 1;
  }
  ddp::S3StoreOptions store_options;
  if (!options["part-size"].empty()) store_options.part_size = std::stoll(options["part-size"]);
  if (!options["page-size"].empty()) store_options.list_page_size = std::stoi(options["page-size"]);
  ddp::S3ObjectStore store(*credentials, options["bucket"], store_options);

  int64_t bytes = 0;
  if (command == "put") {
    if (auto s = store.put_file(words[1], words[2], &bytes); !s.ok()) return fail(s);
    std::cout << "put " << words[1] << " " << bytes << "\n";
  } else if (command == "get") {
    if (auto s = store.get_file(words[1], words[2], &bytes); !s.ok()) return fail(s);
    std::cout << "get " << words[1] << " " << bytes << "\n";
  } else if (command == "ls") {
    const size_t limit = options["limit"].empty() ? 0 : std::stoul(options["limit"]);
    std::vector<ddp::StoredObject> objects;
    if (auto s = store.list_objects(words[1], limit, &objects); !s.ok()) return fail(s);
    for (const auto& o : objects) std::cout << o.size << "\t" << o.key << "\n";
  } else if (command == "rm") {
    if (auto s = store.delete_object(words[1]); !s.ok()) return fail(s);
    std::cout << "rm " << words[1] << "\n";
  } else {
    return usage("unknown command " + command);
  }
  return 0;
}
