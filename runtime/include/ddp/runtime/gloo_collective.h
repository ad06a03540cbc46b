#pragma once
// The Gloo backend of Collective: CPU tensors over TCP.
//
// make_gloo_collective rendezvouses (blocking, on the caller's thread) through
// the given Store: every rank publishes its TCP address there and connects to
// every other rank (Gloo's full mesh). Give each communicator its own key space
// (e.g. make_prefix_store(store, "gloo/gen3")) so restarts and second
// communicators do not read stale addresses.
//
// Execution: every op is queued and run, in call order, on one background
// thread owned by the collective; the caller gets a Work at once. Each op is
// numbered in the flight record when it is called (state enqueued), marked
// started when the backend thread takes it up and completed/failed when it ends.
//
// Transport: all_reduce of a group whose ranks all share this host goes
// through one shared memory segment (two barriers per chunk, no TCP); set
// GlooOptions::shared_memory = false (DDP_GLOO_SHM=0 under ddp::init) for
// Gloo's ring over TCP. When shared memory was wanted but cannot serve a
// one-host group, all_reduce sums in rank order over TCP instead, to keep the
// same bits (GlooOptions::sum_in_rank_order). broadcast, all_gather and
// barrier always use TCP.
//
// Dtypes: all_reduce takes float32, float64, int32, int64, int8 and uint8
// natively; float16 and bfloat16 are upcast to float32 for the reduction (Gloo
// has no bfloat16, and summing in float32 loses less than summing in half) and
// written back in their own dtype, at twice the bytes on the wire. kAvg is sum
// then division by size() and needs a floating dtype (an integer tensor with
// kAvg is refused with CollectiveError when called). broadcast and all_gather
// move bytes and take any dtype. Non-contiguous tensors are reduced through a
// contiguous copy that is copied back. Tensors must be on the CPU; anything
// else is refused with a CollectiveError naming the device.
//
// Failures: an error from Gloo (peer closed the connection, timeout) ends that
// op's Work with a CollectiveError naming op, sequence number, rank and Gloo's
// message. The communicator is then broken: every later op fails at once with
// a CollectiveError carrying the same original message (a Gloo context cannot
// be trusted after a failed collective; build a new one).
//
// Destruction drains the queue (ops already called still run, and fail fast
// once the communicator is broken, so this is bounded by one timeout) and
// joins the thread, then closes the connections: peers then see their next op
// fail instead of hanging.

#include <chrono>
#include <memory>
#include <string>

#include "ddp/common/clock.h"
#include "ddp/common/store.h"
#include "ddp/runtime/collective.h"

namespace ddp {

struct GlooOptions {
  /// Where this rank's TCP endpoint binds: a host name or address, or a
  /// network interface name (e.g. "eth0"). Peers connect to it, so it must be
  /// reachable from every other rank. The default suits one machine; the
  /// launcher passes the node's address (the one other nodes reach it at).
  std::string interface_or_host = "127.0.0.1";
  /// Bound on the rendezvous and on each collective.
  Duration timeout = std::chrono::seconds(300);
  /// all_reduce through a shared memory segment instead of loopback TCP when
  /// every rank is on this host (see shared_memory_allreduce.h); other ops and
  /// multi-host groups use Gloo's TCP pairs either way.
  bool shared_memory = true;
  /// all_reduce over TCP as an all_gather then every rank's data summed in
  /// rank order on each rank: the same bits as the shared-memory path, at
  /// about size/2 times the ring's traffic. Turned on by itself when the
  /// shared-memory path was wanted but could not serve a one-host group
  /// (/dev/shm full), so that a job that falls back (or restarts after
  /// falling back) ends bitwise equal to one that did not.
  bool sum_in_rank_order = false;
  /// Entries kept in the flight record.
  size_t flight_record_capacity = 1024;
};

/// Connects rank `rank` of `size` through `store`; throws CollectiveError when
/// the rendezvous fails or times out (the message says which).
std::unique_ptr<Collective> make_gloo_collective(std::shared_ptr<Store> store, int rank, int size,
                                                 GlooOptions options = {});

}  // namespace ddp
