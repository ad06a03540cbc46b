#pragma once
// Bucket planning for the DDP reducer: which gradients share a flat buffer
// and one all-reduce. A pure function, no LibTorch, so it is tested alone.
//
// Rules (those of PyTorch's compute_bucket_assignment_by_size, so a given
// --bucket-cap-mb makes the same buckets as in PyTorch's DDP):
//  - parameters are visited in `order` when given (e.g. the order their
//    gradients became ready last iteration), else in reverse index order
//    (the last layer's gradients are ready first in backward);
//  - each (dtype, device) group fills its own open bucket; a parameter
//    joins the open bucket, which closes as soon as its byte size reaches
//    the cap (so a bucket may exceed the cap by its last parameter);
//  - the first bucket of each group uses first_bucket_cap_bytes, later ones
//    bucket_cap_bytes;
//  - buckets are returned in the order their first member was visited, which
//    is the order their all-reduces are issued.
//
// Threading: stateless; safe from any thread.

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

struct BucketParam {
  int64_t index = 0;         // the parameter's position in the module's list
  int64_t numel = 0;
  int64_t element_size = 0;  // bytes per element
  std::string dtype;         // any stable spelling, e.g. "Double"
  std::string device;        // e.g. "cpu", "cuda:0"
};

struct BucketCaps {
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;  // 1 MiB
  int64_t bucket_cap_bytes = int64_t{25} << 20;       // 25 MiB
};

struct PlannedBucket {
  std::vector<int64_t> params;   // parameter indices, in the bucket's layout order
  std::vector<int64_t> offsets;  // element offset of each parameter in the flat bucket
  std::string dtype;
  std::string device;
  int64_t numel = 0;  // total elements
  int64_t bytes = 0;  // total bytes
};

/// Plans buckets for `params`. `order`, when non-empty, must be a permutation
/// of the parameters' indices; throws std::invalid_argument otherwise (also
/// for duplicate indices, negative sizes, or non-positive caps).
std::vector<PlannedBucket> plan_buckets(const std::vector<BucketParam>& params, const BucketCaps& caps = {},
                                        const std::vector<int64_t>& order = {});

}  // namespace ddp
