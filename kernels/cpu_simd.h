// The vectors of the instruction set a CPU kernel's copy is compiled for [TAG_CPU_ISA]. Included
// between KDAGRAPH_CPU_ISA_BEGIN and KDAGRAPH_CPU_ISA_END (kernels/cpu_isa.h), so every function here
// carries the set's target and lives in its namespace.
//
// Explicit vectors rather than the auto-vectorizer: a sum's order is written here, once per set (lanes
// accumulate in order, then reduce_add's fixed tree), so no optimizer can sum one call site in another
// order than the next (the trap README's CPU section describes). fmadd is one rounding where the set has
// FMA, a multiply then an add in baseline; each set is bitwise self-consistent, and the sets agree with
// each other and with the GPU within the kernels' tolerances.
#pragma once

// Every loop over K runs over kCpuPaddedLanes-multiples: a set's vector width divides it.
inline constexpr int kCpuMaxLanes = 16;

#if KDAGRAPH_CPU_ISA == 2

struct Vec {
  __m512 x;
};
inline constexpr int kLanes = 16;
inline Vec zero() { return {_mm512_setzero_ps()}; }
inline Vec set1(float a) { return {_mm512_set1_ps(a)}; }
inline Vec load(const float* p) { return {_mm512_load_ps(p)}; }
inline void store(float* p, Vec v) { _mm512_store_ps(p, v.x); }
inline void storeu(float* p, Vec v) { _mm512_storeu_ps(p, v.x); }
inline void stream(float* p, Vec v) { _mm512_stream_ps(p, v.x); }
inline Vec mul(Vec a, Vec b) { return {_mm512_mul_ps(a.x, b.x)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.x, b.x, c.x)}; }
inline float reduce_add(Vec v) {
  // (extractf32x8, not the casts: GCC 12 warns about the undefined upper half the casts pass along)
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v.x, 0), _mm512_extractf32x8_ps(v.x, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x55)));
}

#elif KDAGRAPH_CPU_ISA == 1

struct Vec {
  __m256 x;
};
inline constexpr int kLanes = 8;
inline Vec zero() { return {_mm256_setzero_ps()}; }
inline Vec set1(float a) { return {_mm256_set1_ps(a)}; }
inline Vec load(const float* p) { return {_mm256_load_ps(p)}; }
inline void store(float* p, Vec v) { _mm256_store_ps(p, v.x); }
inline void storeu(float* p, Vec v) { _mm256_storeu_ps(p, v.x); }
inline void stream(float* p, Vec v) { _mm256_stream_ps(p, v.x); }
inline Vec mul(Vec a, Vec b) { return {_mm256_mul_ps(a.x, b.x)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.x, b.x, c.x)}; }
inline float reduce_add(Vec v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v.x), _mm256_extractf128_ps(v.x, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x55)));
}

#elif KDAGRAPH_CPU_X86

struct Vec {
  __m128 x;
};
inline constexpr int kLanes = 4;
inline Vec zero() { return {_mm_setzero_ps()}; }
inline Vec set1(float a) { return {_mm_set1_ps(a)}; }
inline Vec load(const float* p) { return {_mm_load_ps(p)}; }
inline void store(float* p, Vec v) { _mm_store_ps(p, v.x); }
inline void storeu(float* p, Vec v) { _mm_storeu_ps(p, v.x); }
inline void stream(float* p, Vec v) { _mm_stream_ps(p, v.x); }
inline Vec mul(Vec a, Vec b) { return {_mm_mul_ps(a.x, b.x)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm_add_ps(_mm_mul_ps(a.x, b.x), c.x)}; }
inline float reduce_add(Vec v) {
  const __m128 s2 = _mm_add_ps(v.x, _mm_movehl_ps(v.x, v.x));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x55)));
}

#else  // baseline of another architecture: four lanes the compiler maps onto its own vectors

struct Vec {
  float x[4];
};
inline constexpr int kLanes = 4;
inline Vec zero() { return {{0.0f, 0.0f, 0.0f, 0.0f}}; }
inline Vec set1(float a) { return {{a, a, a, a}}; }
inline Vec load(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
inline void store(float* p, Vec v) {
  for (int i = 0; i < 4; ++i) p[i] = v.x[i];
}
inline void storeu(float* p, Vec v) { store(p, v); }
inline void stream(float* p, Vec v) { store(p, v); }
inline Vec mul(Vec a, Vec b) { return {{a.x[0] * b.x[0], a.x[1] * b.x[1], a.x[2] * b.x[2], a.x[3] * b.x[3]}}; }
inline Vec fmadd(Vec a, Vec b, Vec c) {
  Vec r;
  for (int i = 0; i < 4; ++i) r.x[i] = a.x[i] * b.x[i] + c.x[i];
  return r;
}
inline float reduce_add(Vec v) { return (v.x[0] + v.x[2]) + (v.x[1] + v.x[3]); }

#endif

// Four floats past the cache from 16-byte aligned `src` to 16-byte aligned `p`: every set streams rows
// a wide vector's alignment does not fit (a caller's view promises 16 bytes, docs/ops.md).
inline void stream4(float* p, const float* src) {
#if KDAGRAPH_CPU_X86
  _mm_stream_ps(p, _mm_load_ps(src));
#else
  for (int i = 0; i < 4; ++i) p[i] = src[i];
#endif
}

// Orders the streaming stores before whatever the thread writes next (x86 streams are weakly ordered).
inline void stream_fence() {
#if KDAGRAPH_CPU_X86
  _mm_sfence();
#endif
}

// Floats a K-long vector takes in the kernels' working buffers: K rounded up to whole vectors of the
// widest set, zeros beyond K, so loops over it have no tail and every set pads alike.
inline int64_t padded_lanes(int32_t n) { return (int64_t(n) + kCpuMaxLanes - 1) / kCpuMaxLanes * kCpuMaxLanes; }
