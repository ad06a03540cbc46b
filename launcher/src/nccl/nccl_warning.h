#pragma once
// Classifies NCCL WARN messages into the error classes users ask about, with
// the peer they name (if any) and a hint for the common ones.
//
// Thread-safety: pure functions.

#include <string_view>

namespace ddp::nccl {

enum class WarningClass {
  kInterfaceNotFound,  // Bootstrap : no socket interface found
  kIbCompletion,       // NET/IB : Got completion from peer ... with error 12 / status=12
  kConnectionClosed,   // ... Connection closed by remote peer X<port>
  kConnectFailed,      // Connect to X failed / connection refused
  kTimeout,            // ... timeout / timed out
  kCuda,               // Cuda failure '...'
  kProxy,              // Proxy Call ... failed / [Proxy Service N] Failed to execute operation
  kSystem,             // Call to ... failed / unhandled system error
  kVersionMismatch,    // not a WARN line: ranks report different NCCL versions
  kOther,
};

struct WarningInfo {
  WarningClass cls = WarningClass::kOther;
  std::string_view peer;  // "10.0.0.2" / "node2" (without <port>), when named
  int status = -1;        // IB completion status / error number
};

WarningInfo classify_warning(std::string_view message);

/// Stable snake_case name used in JSON ("interface_not_found", ...).
std::string_view warning_class_name(WarningClass cls);

/// A one-sentence hint for the class; empty for kOther.
std::string_view warning_hint(WarningClass cls);

}  // namespace ddp::nccl
