// SPEC §6: host-side validation, one function per concept. Each throws InvalidArgument naming the
// entry point, the argument, its value and the allowed range, before anything is enqueued.
#pragma once

#include <cstdint>

#include "kdagraph/verifier.hpp"

namespace kdagraph::detail {

void validate_batch(const char* where, const int32_t* slots, int32_t n, int32_t max_rows,
                    int32_t pool_slots);
void validate_rows(const char* where, int32_t rows, int32_t n_real, int32_t max_rows);
void validate_layer_index(const char* where, int32_t layer, int32_t layers);
void validate_slot(const char* where, int32_t slot, int32_t pool_slots);
void validate_slot_list(const char* where, const int32_t* slots, int32_t count, int32_t pool_slots);
void validate_accept_lengths(const char* where, const int32_t* accepted, int32_t n, int32_t tokens);
void validate_layer_inputs(const char* where, const LayerInputs& in, const VerifierConfig& config);
void validate_stream(const char* where, const Stream& s, Backend backend);

}  // namespace kdagraph::detail
