// Element types and shapes of StableHLO values, and how they print in MLIR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_tpu::hlo {

enum class ElementType {
  Pred,
  S8,
  S16,
  S32,
  S64,
  U8,
  U16,
  U32,
  U64,
  F16,
  BF16,
  F32,
  F64,
  C64,
  C128,
  // complex32 (torch.chalf), which StableHLO lacks: computed as complex<f32>, and held as its
  // 32 bits (two f16 parts) wherever a value crosses a function boundary, so buffers, storage
  // and host copies have torch's layout. See complex32.cc.
  C32,
  // Eight-bit floats: stored, converted and moved (collectives that do not reduce); torch
  // itself computes little in them.
  F8E4M3FN,
  F8E5M2,
  F8E4M3FNUZ,
  F8E5M2FNUZ
};

using Shape = std::vector<int64_t>;

bool is_float(ElementType type);  // real floating point only (eight-bit floats included)
bool is_float8(ElementType type);
bool is_complex(ElementType type);
// The type of a complex type's real and imaginary parts (C64: F32), and back (F32: C64).
ElementType component_type(ElementType complex_type);
ElementType complex_type_of(ElementType component);
bool is_signed_int(ElementType type);
bool is_unsigned_int(ElementType type);
int byte_size(ElementType type);
// MLIR spelling: i1, i32, ui8, bf16, f32, ...
std::string mlir_name(ElementType type);
// tensor<2x3xf32>, tensor<f32> for rank 0.
std::string tensor_type(const Shape& shape, ElementType type);
// The type a value of `type` has as a function's parameter or result: tensor_type(), except for
// C32, which crosses as ui32.
std::string boundary_tensor_type(const Shape& shape, ElementType type);
int64_t num_elements(const Shape& shape);
std::string join(const std::vector<int64_t>& values, const char* separator = ", ");

}  // namespace torch_tpu::hlo
