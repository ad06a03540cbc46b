#include "stack_symbolizer.h"

#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#if DDP_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#else
#include <dlfcn.h>
#endif

namespace ddp {
namespace {

std::string object_offset(const std::string& object, uintptr_t offset) {
  const size_t slash = object.rfind('/');
  const std::string base = slash == std::string::npos ? object : object.substr(slash + 1);
  char hex[32];
  std::snprintf(hex, sizeof hex, "+0x%llx", static_cast<unsigned long long>(offset));
  return (base.empty() ? std::string("?") : base) + hex;
}

std::string hex_address(uintptr_t pc) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(pc));
  return hex;
}

#if DDP_HAVE_LIBDW

// A symbol table's name may carry its symbol version ("pthread_cond_wait@@GLIBC_2.3.2"),
// which says nothing about where the thread is.
std::string without_version(const char* symbol) {
  std::string name(symbol);
  const size_t at = name.find('@');
  if (at != std::string::npos && at > 0) name.resize(at);
  return name;
}

// Debug files from this machine only. The standard lookup ends by asking
// remote debug-information servers when DEBUGINFOD_URLS is set, which could
// mean minutes and gigabytes of downloads (the LibTorch libraries) inside a
// hung worker; with that variable set, only the local build-id lookup (where
// the distributions' debug packages install) is used.
int find_local_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                         const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                         char** debuginfo_file_name) {
  const char* servers = std::getenv("DEBUGINFOD_URLS");
  if (servers != nullptr && *servers != '\0') {
    return dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                        debuginfo_file_name);
  }
  return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                      debuginfo_file_name);
}

// DWARF file names may be relative to the compilation directory (a compiler
// cache runs the compiler with relative paths): made absolute here so the log
// names the real file.
std::string source_path(const char* file, const char* comp_dir) {
  if (file == nullptr) return {};
  std::filesystem::path p(file);
  if (p.is_relative() && comp_dir != nullptr && *comp_dir != '\0') p = std::filesystem::path(comp_dir) / p;
  return p.lexically_normal().string();
}

std::string die_function_name(Dwarf_Die* die, int depth = 0);

// A plain DWARF name (no linkage name: GCC leaves it out for many inlined
// and internal functions) qualified with the namespaces, classes and
// enclosing function its declaration sits in, as a demangled name would be.
std::string qualify(Dwarf_Die die, std::string name, int depth) {
  // Inlined instances and out-of-line definitions point at the declaration.
  for (int hops = 0; hops < 8; ++hops) {
    Dwarf_Attribute attr;
    Dwarf_Die next;
    if (dwarf_attr(&die, DW_AT_abstract_origin, &attr) == nullptr &&
        dwarf_attr(&die, DW_AT_specification, &attr) == nullptr) {
      break;
    }
    if (dwarf_formref_die(&attr, &next) == nullptr) break;
    die = next;
  }
  Dwarf_Die* scopes = nullptr;
  const int n = dwarf_getscopes_die(&die, &scopes);  // scopes[0] is die itself
  for (int i = 1; i < n; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    const char* scope = dwarf_diename(&scopes[i]);
    if (tag == DW_TAG_namespace) {
      name = std::string(scope != nullptr ? scope : "(anonymous namespace)") + "::" + name;
    } else if (tag == DW_TAG_class_type || tag == DW_TAG_structure_type || tag == DW_TAG_union_type) {
      name = std::string(scope != nullptr ? scope : "{unnamed type}") + "::" + name;
    } else if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      // A local class (a lambda's): the enclosing function names the rest.
      if (depth < 4) name = die_function_name(&scopes[i], depth + 1) + "::" + name;
      break;
    }
  }
  std::free(scopes);
  return name;
}

// The name of a function DIE (subprogram or inlined instance): the linkage
// name when there is one (qualified, with its parameters), else the plain
// one qualified by its scopes.
std::string die_function_name(Dwarf_Die* die, int depth) {
  Dwarf_Attribute attr;
  for (const unsigned int name : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, name, &attr))) return demangle_symbol(linkage);
  }
  const char* plain = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
  return plain != nullptr ? qualify(*die, plain, depth) : "??";
}

#endif  // DDP_HAVE_LIBDW

}  // namespace

std::string demangle_symbol(const char* symbol) {
  if (symbol == nullptr) return {};
  int status = 0;
  char* name = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status != 0 || name == nullptr) {
    std::free(name);
    return symbol;
  }
  std::string out(name);
  std::free(name);
  return out;
}

#if DDP_HAVE_LIBDW

struct StackSymbolizer::Impl {
  Dwfl_Callbacks callbacks{};  // must outlive dwfl
  char* debuginfo_path = nullptr;
  Dwfl* dwfl = nullptr;

  Impl() {
    callbacks.find_elf = dwfl_linux_proc_find_elf;
    callbacks.find_debuginfo = find_local_debuginfo;
    callbacks.debuginfo_path = &debuginfo_path;
    dwfl = dwfl_begin(&callbacks);
    if (dwfl == nullptr) return;
    dwfl_report_begin(dwfl);
    const bool reported = dwfl_linux_proc_report(dwfl, getpid()) == 0;
    if (dwfl_report_end(dwfl, nullptr, nullptr) != 0 || !reported) {
      dwfl_end(dwfl);
      dwfl = nullptr;  // every frame then reads as a bare address
    }
  }
  ~Impl() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }

  // One physical frame, appended innermost first: the functions inlined at
  // that address (from the innermost) and then the real function around them.
  void frame(uintptr_t pc, bool exact, std::vector<StackFrameInfo>& out) {
    const Dwarf_Addr addr = exact ? pc : pc - 1;
    Dwfl_Module* mod = dwfl != nullptr ? dwfl_addrmodule(dwfl, addr) : nullptr;
    if (mod == nullptr) {
      out.push_back({hex_address(pc), "", 0});
      return;
    }
    Dwarf_Addr start = 0;
    const char* modname = dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
    const std::string object = modname != nullptr ? modname : "";
    const char* symbol = dwfl_module_addrname(mod, addr);
    const std::string function = symbol != nullptr ? demangle_symbol(without_version(symbol).c_str())
                                                   : object_offset(object, static_cast<uintptr_t>(pc - start));

    // Where the innermost (possibly inlined) code at addr comes from.
    std::string file = object;
    int line = 0;
    if (Dwfl_Line* l = dwfl_module_getsrc(mod, addr)) {
      Dwarf_Addr line_addr = 0;
      int line_no = 0;
      int column = 0;
      if (const char* src = dwfl_lineinfo(l, &line_addr, &line_no, &column, nullptr, nullptr)) {
        file = source_path(src, dwfl_line_comp_dir(l));
        line = line_no;
      }
    }

    // The innermost function-like scope at addr (dwarf_getscopes continues
    // past an inlined instance with its abstract definition's scopes), then
    // the scopes physically around that one, innermost first: the inlined
    // calls up to the real function.
    Dwarf_Addr bias = 0;
    Dwarf_Die* cu = dwfl_module_addrdie(mod, addr, &bias);
    Dwarf_Die* found = nullptr;
    const int nfound = cu != nullptr ? dwarf_getscopes(cu, addr - bias, &found) : 0;
    Dwarf_Die* scopes = nullptr;
    int n = 0;
    for (int i = 0; i < nfound; ++i) {
      const int tag = dwarf_tag(&found[i]);
      if (tag == DW_TAG_inlined_subroutine || tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
        n = dwarf_getscopes_die(&found[i], &scopes);
        break;
      }
    }
    std::free(found);
    std::vector<Dwarf_Die*> functions;
    for (int i = 0; i < n; ++i) {
      const int tag = dwarf_tag(&scopes[i]);
      if (tag == DW_TAG_inlined_subroutine) {
        functions.push_back(&scopes[i]);
      } else if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
        functions.push_back(&scopes[i]);
        break;
      }
    }
    if (functions.size() <= 1) {
      out.push_back({function, file, line});
      std::free(scopes);
      return;
    }
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = nullptr;
    Dwarf_Attribute attr;
    const char* comp_dir = dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr));
    for (size_t k = 0; k < functions.size(); ++k) {
      const bool outermost = k + 1 == functions.size();
      // The real function: its ELF symbol when there is one (qualified, and
      // it names compiler clones such as ".cold").
      out.push_back({outermost && symbol != nullptr ? function : die_function_name(functions[k]), file, line});
      if (outermost) break;
      // The next function out is at the call site this inlined one records.
      Dwarf_Word value = 0;
      file = object;
      line = 0;
      if (files != nullptr && dwarf_formudata(dwarf_attr(functions[k], DW_AT_call_file, &attr), &value) == 0) {
        if (const char* src = dwarf_filesrc(files, value, nullptr, nullptr)) file = source_path(src, comp_dir);
      }
      if (dwarf_formudata(dwarf_attr(functions[k], DW_AT_call_line, &attr), &value) == 0) {
        line = static_cast<int>(value);
      }
    }
    std::free(scopes);
  }
};

const char* StackSymbolizer::backend() { return "libdw"; }

#else  // no libdw: dladdr

struct StackSymbolizer::Impl {
  void frame(uintptr_t pc, bool exact, std::vector<StackFrameInfo>& out) {
    const uintptr_t addr = exact ? pc : pc - 1;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(addr), &info) == 0 || info.dli_fname == nullptr) {
      out.push_back({hex_address(pc), "", 0});
      return;
    }
    const std::string object = info.dli_fname;
    const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
    // dladdr sees exported (dynamic) symbols only: a static or hidden
    // function reads as object+offset.
    out.push_back({info.dli_sname != nullptr ? demangle_symbol(info.dli_sname) : object_offset(object, pc - base),
                   object, 0});
  }
};

const char* StackSymbolizer::backend() { return "dladdr"; }

#endif  // DDP_HAVE_LIBDW

StackSymbolizer::StackSymbolizer() : impl_(std::make_unique<Impl>()) {}
StackSymbolizer::~StackSymbolizer() = default;

std::vector<StackFrameInfo> StackSymbolizer::symbolize(const std::vector<uintptr_t>& pcs) {
  std::vector<StackFrameInfo> innermost_first;
  innermost_first.reserve(pcs.size());
  for (size_t i = 0; i < pcs.size(); ++i) {
    if (pcs[i] == 0) continue;
    impl_->frame(pcs[i], /*exact=*/i == 0, innermost_first);
  }
  return {innermost_first.rbegin(), innermost_first.rend()};
}

}  // namespace ddp
