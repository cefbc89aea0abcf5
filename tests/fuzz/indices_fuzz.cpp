// libFuzzer target over the host validators and the index builder (docs/indices.md, docs/errors.md): random shapes, slots,
// n_real and accept lengths. Buffers are exactly sized heap vectors, so AddressSanitizer catches any
// out-of-bounds access; the checks below catch an invalid batch accepted or a row addressing outside
// its own slot.
//   ./indices_fuzz -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <vector>

#include "graph/validate.h"
#include "kernels/indices.h"

namespace {

struct Reader {
  const uint8_t* data;
  size_t size;
  uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
  int32_t int_in(int32_t lo, int32_t hi) { return lo + int32_t(byte() % uint32_t(hi - lo + 1)); }
  int32_t any_int() {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x = (x << 8) | byte();
    return int32_t(x);
  }
};

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdagraph;
  Reader in{data, size};
  const int32_t P = in.int_in(1, 40), S = in.int_in(1, 9), T = in.int_in(1, S), N = in.int_in(1, 24);
  const bool wild = in.byte() & 1;  // wild values reach the device path as another kernel might write them
  std::vector<int32_t> slots(static_cast<size_t>(N)), accept_len(static_cast<size_t>(P));
  for (auto& s : slots) s = wild ? in.any_int() : in.int_in(-2, P);
  for (auto& a : accept_len) a = wild ? in.any_int() : in.int_in(-1, S + 1);
  const int32_t n_real = wild ? in.any_int() : in.int_in(0, N);

  // Host validation accepts exactly the valid batches.
  bool valid = n_real >= 1 && n_real <= N;
  std::set<int32_t> seen;
  for (int32_t i = 0; valid && i < n_real; ++i)
    valid = slots[size_t(i)] >= 0 && slots[size_t(i)] < P && seen.insert(slots[size_t(i)]).second;
  bool accepted = true;
  try {
    detail::validate_batch("fuzz", slots.data(), n_real, N, P);
  } catch (const InvalidArgument&) {
    accepted = false;
  }
  check(accepted == valid);

  // The device-side builder never leaves a row's own scratch rows, whatever it is fed.
  std::vector<int32_t> storage(size_t(round_index_elems(N, T)));  // exactly sized: ASan sees any overrun
  const RoundIndices idx = round_indices(storage.data(), N, T);
  DeviceErrorWord errors;
  IndexBuildParams p;
  p.slots = slots.data();
  p.n_real = &n_real;
  p.accept_len = accept_len.data();
  p.pool_slots = P;
  p.scratch_steps = S;
  p.tokens = T;
  p.rows = N;
  p.errors = &errors;
  p.out = idx;
  build_indices_cpu(p);
  const int32_t *row_slot = idx.row_slot, *seed_pool = idx.seed_pool, *seed_scratch = idx.seed_scratch;
  const int32_t *seed_accept = idx.seed_accept, *write_row = idx.write_row;
  std::set<int32_t> used;
  for (int32_t n = 0; n < N; ++n) {
    const int32_t slot = row_slot[size_t(n)];
    if (slot < 0) {
      check(seed_pool[size_t(n)] < 0 && seed_scratch[size_t(n)] < 0 && seed_accept[size_t(n)] < 0);
      for (int32_t t = 0; t < T; ++t) check(write_row[size_t(n) * T + t] < 0);
      continue;
    }
    check(slot < P && n < n_real && used.insert(slot).second);
    for (int32_t t = 0; t < T; ++t) check(write_row[size_t(n) * T + t] == slot * S + t);
    const bool from_pool = seed_pool[size_t(n)] >= 0;
    check(from_pool != (seed_scratch[size_t(n)] >= 0));
    if (from_pool) check(seed_pool[size_t(n)] == slot);
    else check(seed_scratch[size_t(n)] >= slot * S && seed_scratch[size_t(n)] < slot * S + S);
  }
  if (valid) {
    bool accepts_ok = true;
    for (int32_t i = 0; i < n_real; ++i)
      accepts_ok = accepts_ok && accept_len[size_t(slots[size_t(i)])] >= 0 && accept_len[size_t(slots[size_t(i)])] <= S;
    if (accepts_ok) check(errors.count == 0);
  }
  return 0;
}
