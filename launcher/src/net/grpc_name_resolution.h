#pragma once
// Makes gRPC resolve host names the way the system does.
//
// gRPC's default resolver (c-ares) asks DNS itself and never goes through
// nsswitch, so a node name that only /etc/hosts, NIS or LDAP knows (common for
// HPC compute nodes) never resolves and a rendezvous waits for ever. gRPC's
// "native" resolver calls getaddrinfo instead: the same answer as ping, ssh
// and getent, every address of a name (IPv4 and IPv6, tried in order), and a
// fresh lookup whenever a connection is retried. ddplaunch selects it through
// gRPC's documented switch, GRPC_DNS_RESOLVER=native, which gRPC reads once
// when it initialises; a value the user exported wins.
//
// Threading: call use_system_resolver_for_grpc() first thing in main, before
// any thread exists and before any gRPC object is made (setenv is not
// thread-safe, and gRPC reads the variable at its first use).

#include <optional>
#include <string>
#include <vector>

namespace ddp {

/// Sets GRPC_DNS_RESOLVER=native unless the environment already sets it.
void use_system_resolver_for_grpc();

/// The environment entries ("NAME=value") a child process should get: env
/// without the GRPC_DNS_RESOLVER that use_system_resolver_for_grpc() added,
/// so the user's programs see their own environment unchanged.
std::vector<std::string> without_own_grpc_settings(std::vector<std::string> env);

/// The GRPC_DNS_RESOLVER the user exported, if any (it overrides ddplaunch's
/// choice; messages about unreachable names mention it).
std::optional<std::string> grpc_resolver_chosen_by_user();

}  // namespace ddp
